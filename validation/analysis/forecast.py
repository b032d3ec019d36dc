"""A capture's speedup predicted before it is measured (``validate``'s headline,
``polyspec forecast``, pre-registration).

Nothing of the capture being predicted goes in:

- **Acceptance** from other captures of the same pairs and sampling setting, per prompt: every
  capture decodes the same prompts (same seed), and acceptance varies far more between
  prompts (repetition loops, boilerplate) than between thresholds, so each prompt gets its
  own iid law per pair, fitted on that prompt's rounds in the other captures (the pair's
  pooled law where a prompt has none). P1 is evaluated per prompt and the prompts are
  combined as the measurement combines them: ``tau = Σ_p tokens_p tau_p / Σ_p tokens_p``.
- **Costs** from a composition-aware profile of the cascade
  (:class:`validation.capture.composition_profile.CompositionProfile`: in-cascade forward
  times of each model, the target's autoregressive time per token), measured in a separate
  run.
- **Decoder overhead** (time outside forwards, per forward and per verify round) fitted on the
  other captures of the same sampling mode.
- **Forward counts beyond P1** (:func:`count_factors`): P1 with iid laws undercounts the
  forwards of the intermediate levels (rounds are correlated within a prompt, most at T = 0:
  +9-13 % for ``mid``/``small`` in 4-level greedy cascades even with each prompt's own law).
  Each level's forwards per token are scaled by the median ratio measured / P1-with-own-laws
  of the same level in the other captures of the same depth and sampling mode.

The forecast's interval is calibrated on the leave-one-out errors of the committed captures
(:func:`error_quantile`): a prediction interval, not a sampling CI of the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from polyspec_theory import AcceptanceCounts, Cascade, CostCurve, IIDGeometric, Model, predict
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.analysis.relative import relative_error
from validation.analysis.residuals import overhead_model

__all__ = ["Forecast", "forecast", "forecast_capture", "loo_errors", "pair_rounds",
           "measured_ci95", "error_quantile", "NoHoldoutData", "count_ratios", "count_factors"]


class NoHoldoutData(PolyspecInputError):
    """A pair of the configuration was captured nowhere else: no acceptance to predict with."""


def pair_rounds(captures, key, prompt: int | None = None) -> AcceptanceCounts | None:
    """The rounds of pair ``key`` = (verifier, drafter, temperature, top_k) over
    ``captures`` (only prompt ``prompt`` if given), or ``None`` if there are none."""
    a, g = [], []
    for c in captures:
        for i in range(c.n - 1):
            if c.pair_key(i) == key:
                r = c.rounds[i]
                sel = slice(None) if prompt is None else r.prompt == prompt
                a.append(r.A[sel])
                g.append(r.G[sel])
    if not a:
        return None
    a, g = np.concatenate(a), np.concatenate(g)
    return AcceptanceCounts.from_samples(a, g) if a.size else None


def _prompt_rounds(captures, key) -> dict:
    """``{prompt: pair_rounds(captures, key, prompt)}`` for every prompt with rounds of the
    pair, in one pass over the captures (the same counts: a cell's count does not depend on
    the order its rounds come in)."""
    a, g = {}, {}
    for c in captures:
        for i in range(c.n - 1):
            if c.pair_key(i) != key:
                continue
            r = c.rounds[i]
            for p in np.unique(r.prompt):
                sel = r.prompt == p
                a.setdefault(int(p), []).append(r.A[sel])
                g.setdefault(int(p), []).append(r.G[sel])
    return {p: AcceptanceCounts.from_samples(np.concatenate(a[p]), np.concatenate(g[p]))
            for p in a}


@dataclass(frozen=True)
class Forecast:
    """Predicted speedup of one configuration (time base: the profile's seconds)."""

    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    speedup: float
    time_per_token: float
    forward_time_per_token: float
    overhead_per_token: float
    ar_time_per_token: float
    forwards_per_token: tuple[float, ...]
    prompts: tuple[int, ...]
    acceptance_from: tuple[str, ...]
    cost_source: str
    notes: tuple[str, ...] = field(default=())
    level_time_per_token: tuple[float, ...] = field(default=())
    acceptance_model: str = "per-round"  # "run law" (R1 fitted by R2) or "per-round" (P1)
    independence: dict | None = None  # R3's test where it decided (T = 0, two levels)

    def to_dict(self) -> dict:
        return {
            "models": list(self.models), "thresholds": list(self.thresholds),
            "temperature": self.temperature, "speedup": self.speedup,
            "time_per_token": self.time_per_token,
            "forward_time_per_token": self.forward_time_per_token,
            "overhead_per_token": self.overhead_per_token,
            "ar_time_per_token": self.ar_time_per_token,
            "forwards_per_token": list(self.forwards_per_token),
            "prompts": list(self.prompts), "acceptance_from": list(self.acceptance_from),
            "cost_source": self.cost_source, "notes": list(self.notes),
            "level_time_per_token": list(self.level_time_per_token),
            "acceptance_model": self.acceptance_model, "independence": self.independence,
        }


class Config(NamedTuple):
    """A configuration to forecast: ``models`` target first, one threshold per pair, its
    sampling (``temperature``, ``top_k``) and block policy."""

    models: tuple
    thresholds: tuple
    temperature: float = 0.0
    top_k: int = 0
    policy: str = "accumulate"

    @classmethod
    def of(cls, capture) -> Config:
        """The configuration of a capture."""
        return cls(capture.models, capture.thresholds, capture.temperature, capture.top_k,
                   capture.policy)


ACCEPTANCE = ("per-round", "run-law")


def forecast(config: Config, captures, cost_curves, ar_time_per_token: float, *,
             prompts=None, exclude: str | None = None, count_factor=None,
             acceptance: str = "per-round") -> Forecast:
    """Predict the measured speedup of ``config`` (module docstring). ``captures``: the
    committed captures (``exclude``: the name of one to leave out, the capture being
    predicted); ``cost_curves``: one :class:`CostCurve` per model (in-cascade costs);
    ``ar_time_per_token``: the target's autoregressive time per token on the same time base;
    ``prompts``: the prompts to predict, weighed equally (default: the prompts of the other
    captures); ``count_factor``: one factor per model on its forwards per token
    (:func:`count_factors`; default none). ``acceptance``: ``"per-round"`` (default) P1 with
    the per-round law everywhere; ``"run-law"`` forecasts a two-level chain at ``T = 0``
    with R1 and the run law fitted per prompt (R2) unless R3 accepts independent rounds
    (:mod:`validation.analysis.run_forecast`; both levels' forwards are then R1's, no count
    factor), other configurations as ``"per-round"``."""
    if acceptance not in ACCEPTANCE:
        raise PolyspecInputError("acceptance", f"must be one of {ACCEPTANCE}, got "
                                 f"{acceptance!r}")
    models = tuple(str(m) for m in config.models)
    thresholds = tuple(as_int(t, f"thresholds[{i}]", low=1)
                       for i, t in enumerate(config.thresholds))
    temperature = as_real(config.temperature, "temperature", low=0.0)
    top_k, policy = config.top_k, config.policy
    ar = as_real(ar_time_per_token, "ar_time_per_token", low=0.0, low_open=True)
    if len(cost_curves) != len(models):
        raise PolyspecInputError("cost_curves", f"need one per model ({len(models)})")
    others = [c for c in captures if c.name != exclude and c.temperature == temperature
              and c.top_k == top_k]
    keys = [(models[i], models[i + 1], temperature, int(top_k)) for i in range(len(models) - 1)]
    pooled = {}
    for k in keys:
        d = pair_rounds(others, k)
        if d is None:
            raise NoHoldoutData(
                "acceptance", f"no other capture has the pair {k[0]} <- {k[1]} at "
                f"temperature {temperature:g}: capture a configuration with it first")
        pooled[k] = d
    used = sorted({c.name for c in others for i in range(c.n - 1) if c.pair_key(i) in keys})
    if prompts is None:
        prompts = sorted({int(s["prompt"]) for c in others for s in c.summaries})
    prompts = tuple(int(p) for p in prompts)
    if not prompts:
        raise PolyspecInputError("prompts", "no prompt to predict")
    weights = np.ones(len(prompts))
    ms = tuple(Model(m, c) for m, c in zip(models, cost_curves, strict=True))
    notes = []
    independence, run_laws = None, None
    if acceptance == "run-law" and temperature == 0 and len(models) == 2:
        from validation.analysis.run_forecast import prompt_run_laws, run_law_decision

        independence = run_law_decision(others, keys[0])
        if independence is not None and not independence["independent"]:
            run_laws, rnotes = prompt_run_laws(others, keys[0], prompts)
            notes += rnotes
    taus, fwds, lts = [], [], []
    by_prompt = {k: _prompt_rounds(others, k) for k in keys}
    for p in prompts:
        laws = []
        for k in keys:
            d = by_prompt[k].get(p)
            if d is None:
                notes.append(f"prompt {p}: no rounds of {k[0]} <- {k[1]}; pooled law used")
                d = pooled[k]
            laws.append(IIDGeometric.mle(d))
        pred = predict(Cascade(ms, tuple(laws), thresholds, policy))
        fw = [lv.forwards_per_token for lv in pred.levels]
        if run_laws is not None:  # R1: one target forward and theta drafts per round
            from validation.analysis.run_forecast import r1_tokens_per_round

            per_round = r1_tokens_per_round(run_laws[p], thresholds[0])
            fw = [1.0 / per_round, thresholds[0] / per_round]
        taus.append(pred.time_per_token)
        fwds.append(fw)
        lts.append([f * lv.forward_cost for f, lv in zip(fw, pred.levels, strict=True)])
    w = weights / weights.sum()
    kf = np.ones(len(models)) if count_factor is None or run_laws is not None else \
        np.asarray(count_factor, float)
    if kf.shape != (len(models),) or not np.all(np.isfinite(kf)) or np.any(kf <= 0):
        raise PolyspecInputError("count_factor", f"need {len(models)} positive factors")
    lt = (w @ np.asarray(lts)) * kf
    tau_fwd = float(lt.sum())
    f = np.asarray(w @ np.asarray(fwds)) * kf
    ov = overhead_model(others, like=SimpleNamespace(temperature=temperature))
    ov_tok = ov.per_token_from_forwards(f)
    tau = tau_fwd + ov_tok
    return Forecast(models=models, thresholds=thresholds, temperature=temperature,
                    speedup=ar / tau, time_per_token=tau, forward_time_per_token=tau_fwd,
                    overhead_per_token=ov_tok, ar_time_per_token=ar,
                    forwards_per_token=tuple(float(x) for x in f), prompts=prompts,
                    acceptance_from=tuple(used), cost_source="profile",
                    notes=tuple(notes),
                    level_time_per_token=tuple(float(x) for x in lt),
                    acceptance_model="per-round" if run_laws is None else "run law",
                    independence=independence)


def count_ratios(capture) -> np.ndarray:
    """Per model: forwards per token counted in ``capture`` / P1's with laws fitted on the
    capture's own rounds, per prompt (what P1 misses given the acceptance)."""
    unit = [CostCurve.constant(1.0)] * capture.n
    own = forecast(Config.of(capture), [capture], unit, 1.0,
                   prompts=[int(s["prompt"]) for s in capture.summaries],
                   acceptance="per-round")
    meas = np.asarray(capture.forward_count, dtype=np.float64) / capture.tokens
    return meas / np.asarray(own.forwards_per_token)


def count_factors(n_levels: int, temperature: float, captures, exclude: str | None = None,
                  ratios: dict | None = None) -> np.ndarray:
    """Per model of an ``n_levels`` cascade: the median :func:`count_ratios` of that level
    over the other captures with as many levels and the same sampling mode (greedy or not);
    the target's factor is 1 (P1 counts its rounds exactly given the acceptance); a level no
    such capture has gets 1. ``ratios``: ``{name: count_ratios}`` of captures computed before,
    a dict that the ones computed here are added to (one per capture: pass the same dict to
    every call on the same captures)."""
    n = as_int(n_levels, "n_levels", low=2)
    greedy = as_real(temperature, "temperature", low=0.0) == 0
    vals = []
    for c in captures:
        if c.name == exclude or c.n != n or (c.temperature == 0) != greedy or c.structured:
            continue
        if ratios is None:
            vals.append(count_ratios(c))
            continue
        if c.name not in ratios:
            ratios[c.name] = count_ratios(c)
        vals.append(ratios[c.name])
    out = np.ones(n)
    if vals:
        out[1:] = np.median(np.asarray(vals), axis=0)[1:]
    return out


def forecast_capture(capture, captures, profile, count_factor=None,
                     acceptance: str = "per-round") -> Forecast:
    """:func:`forecast` of one capture from the others, with its composition profile
    (``count_factor``: default :func:`count_factors` from the other captures;
    ``acceptance``: :func:`forecast`'s)."""
    if count_factor is None:
        count_factor = count_factors(capture.n, capture.temperature, captures,
                                     exclude=capture.name)
    return forecast(Config.of(capture), captures, profile.cost_curves(), profile.ar_s,
                    prompts=[int(s["prompt"]) for s in capture.summaries],
                    exclude=capture.name, count_factor=count_factor, acceptance=acceptance)


def loo_errors(captures, profiles, temperature: float | None = None) -> dict[str, float]:
    """``{capture name: forecast / measured - 1}`` for every capture that has a profile (and
    every pair captured elsewhere), each forecast from the other captures only; only captures
    at ``temperature`` if given."""
    out = {}
    ratios = {c.name: count_ratios(c) for c in captures if not c.structured}
    for c in captures:
        if c.name not in profiles or (temperature is not None and c.temperature != temperature):
            continue
        try:
            kf = count_factors(c.n, c.temperature, captures, exclude=c.name, ratios=ratios)
            f = forecast_capture(c, captures, profiles[c.name], count_factor=kf)
        except NoHoldoutData:
            continue
        out[c.name] = relative_error(f.speedup, c.measured_speedup)
    return out


def measured_ci95(capture, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the measured speedup by a paired bootstrap over prompts
    (each resampled prompt brings its target AR run and its cascade run together)."""
    t = capture.paired_table()
    k = len(t)
    if k < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(as_int(seed, "seed", low=0))
    idx = rng.integers(0, k, size=(as_int(n_boot, "n_boot", low=100), k))
    ar = t[idx, 1].sum(1) / t[idx, 2].sum(1)
    cas = t[idx, 3].sum(1) / t[idx, 4].sum(1)
    lo, hi = np.quantile(ar / cas, [0.025, 0.975])
    return float(lo), float(hi)


def error_quantile(errors, level: float = 0.95) -> float:
    """The ``level`` quantile of absolute relative errors (a calibrated half-width for
    prediction intervals ``speedup * (1 ± q)``); conservative for small samples (the
    ``ceil(level (n + 1))``-th order statistic, split-conformal style)."""
    e = np.sort(np.abs(np.asarray(errors, dtype=np.float64)))
    if e.size == 0:
        raise PolyspecInputError("errors", "need at least one leave-one-out error")
    k = math.ceil(as_real(level, "level", low=0.0, high=1.0, low_open=True) * (e.size + 1))
    return float(e[min(k, e.size) - 1])
