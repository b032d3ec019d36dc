"""Predicted vs measured speedup on captured configurations (``polyspec validate``).

**Headline: predictive.** Each capture's speedup is forecast with nothing of that capture
(:mod:`validation.analysis.forecast`: acceptance per prompt from the other captures, costs
from the cascade's composition profile, decoder overhead from the other captures), and
compared with the measured speedup and its paired-bootstrap 95 % interval. Everything else
below uses the capture's own rounds or timings: diagnostics that explain the residual, not
predictions.

Diagnostics per capture:

1. **Laws.** Every law family is fitted by censored MLE per adjacent pair and ranked by
   AIC; "best" = each pair's AIC-best law outside the Gaussian baseline. By default each
   capture uses its own rounds (``laws="config"``); also reported: laws pooled per pair
   ``(verifier, drafter, temperature, top_k)`` over every capture using it (docs/theory.md §4: a
   pair's acceptance does not depend on how the drafter's tokens were produced), and
   "holdout": pooled over the OTHER captures only.
2. **Costs.** Per model, ``T_i(m)`` and its context slope from the capture's baseline
   timings, calibrated to the forward time per token of the model's autoregressive baseline
   in the same capture (interleaved with the cascade runs: same machine load). The
   uncalibrated microbenchmark prediction is reported too.
3. **Plain prediction** = P1 exactly: ``T_1(1) / tau_1`` with the fitted laws and costs.
   **Measured** = the capture's AR target time per token / its cascade time per token.
4. **Extended** (a diagnostic: it uses this capture's measured forward times): P1's forward
   counts with acceptance coupled across the levels of a top-level round (cascades of
   n >= 3 models, :mod:`polyspec_theory.planning.coupling`, 1-3 classes by BIC, fitted on the
   capture's rounds) times the capture's measured mean forward time per model, plus decoder
   overhead fitted on the OTHER captures of the same sampling mode. **In-run**: the same
   with P1's independent acceptance. **Predictive** variants use no timing of the capture:
   baseline costs at the capture's mean contexts with its extra verify positions, times
   each model's in-cascade slowdown learned on the other captures, plus the overhead, with
   coupled (``predictive``) or independent (``predictive_iid``) acceptance.
5. **Residual decomposition**: :func:`validation.analysis.residuals.decompose`.
6. **P5 on real data**: :func:`validation.analysis.insertion.insertion_analysis`.

Captures with a token tree or an adaptive draft length (docs/theory.md T1–T5, A1–A4) are
analysed by :func:`validation.analysis.structured.analyse_structured`
(``ValidationResult.structured``); everything above runs on the plain chain captures only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from polyspec_theory.core.laws import FAMILIES
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.planning.coupling import coupled_forwards, select_coupling
from polyspec_theory.schemes import predict
from validation.analysis.fits import (
    PairFit,
    capture_cascade,
    counts_without,
    fit_costs,
    fit_laws_once,
    fit_pairs,
    predict_config,
)
from validation.analysis.forecast import (
    NoHoldoutData,
    count_factors,
    forecast_capture,
    measured_ci95,
)
from validation.analysis.insertion import insertion_analysis
from validation.analysis.relative import inside_ci, relative_error
from validation.analysis.residuals import (
    decompose,
    lag1_correlation,
    overhead_model,
    role,
    slowdown_factor,
    slowdown_ratios,
)
from validation.analysis.structured import StructuredConfigResult, analyse_structured
from validation.traces.dataset import check_captures

__all__ = ["ConfigResult", "ValidationResult", "validate", "P5", "DIAGNOSTICS", "HEADLINE"]

HEADLINE = "predictive"
# diagnostic variants (name -> what it is); "p1_<family>" for each fitted law family too
DIAGNOSTICS = {
    "p1_best": "P1 with the capture's own AIC-best laws and its calibrated baseline costs",
    "holdout_laws": "p1_best with laws fitted on the other captures only",
    "pooled_laws": "p1_best with laws pooled over every capture using the pair",
    "microbenchmark": "p1_best with uncalibrated cost-curve microbenchmarks",
    "slowdown_costs": "baseline costs x in-cascade slowdown (other captures) + overhead, "
                      "own rounds with level coupling",
    "slowdown_costs_iid": "slowdown_costs with independent acceptance",
    "inrun": "P1 forward counts x this capture's measured forward times + overhead",
    "extended": "coupled forward counts x this capture's measured forward times + overhead",
}



@dataclass(frozen=True)
class ConfigResult:
    """Everything computed for one captured configuration: the measurement, the headline
    forecast (``None`` without a profile of its cascade) and the diagnostics
    (:data:`DIAGNOSTICS`: name -> speedup)."""

    name: str
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    measured_speedup: float
    measured_ci95: tuple[float, float]
    measured_speedup_se: float
    measured_time_per_token: float
    ar_time_per_token: float
    forecast: dict | None
    diagnostics: dict
    best_family: str
    decomposition: dict
    correlations: list
    forwards_per_token: dict  # measured / predicted (p1_best) per model
    costs: dict  # model -> CostFit.to_dict()
    context_effect: dict  # model -> relative T(1) change between reference and capture ctx

    @property
    def predicted_speedup(self) -> float:
        """The headline (predictive) speedup; NaN without a forecast."""
        return math.nan if self.forecast is None else float(self.forecast["speedup"])

    @property
    def error(self) -> float:
        """Relative error of the headline prediction: (pred - meas) / meas."""
        return relative_error(self.predicted_speedup, self.measured_speedup)

    @property
    def inside_ci(self) -> bool | None:
        """Whether the headline prediction falls inside the measured 95 % interval."""
        return inside_ci(None if self.forecast is None else self.predicted_speedup,
                         self.measured_ci95)

    def diagnostic_error(self, name: str) -> float | None:
        v = self.diagnostics.get(name)
        return relative_error(v, self.measured_speedup)

    def errors(self) -> dict:
        """Relative error of every diagnostic variant."""
        return {k: relative_error(v, self.measured_speedup) for k, v in self.diagnostics.items()
                if v is not None}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "models": list(self.models),
            "thresholds": list(self.thresholds),
            "temperature": self.temperature,
            "measured_speedup": self.measured_speedup,
            "measured_ci95": list(self.measured_ci95),
            "measured_speedup_se": self.measured_speedup_se,
            "predicted_speedup": None if self.forecast is None else self.predicted_speedup,
            "error": None if self.forecast is None else self.error,
            "inside_ci": self.inside_ci,
            "forecast": self.forecast,
            "best_family": self.best_family,
            "diagnostics": {k: {"speedup": v, "error": self.diagnostic_error(k)}
                            for k, v in self.diagnostics.items()},
            "measured_time_per_token": self.measured_time_per_token,
            "ar_time_per_token": self.ar_time_per_token,
            "decomposition": self.decomposition,
            "lag1_correlation": self.correlations,
            "forwards_per_token": self.forwards_per_token,
            "context_effect": self.context_effect,
            "costs": self.costs,
        }


def _holdout_speedup(capture, pooled_fits, families, costs,
                     cache: dict | None = None) -> float | None:
    """Best-law P1 speedup with every pair law fitted only on the other configurations
    (``None`` if some pair of this configuration was captured nowhere else). The other
    configurations' rounds of a pair are the pooled rounds minus this one's (the same
    canonical counts as pooling the others afresh), so ``validate`` stays linear in the
    number of captures. ``cache``: the run's law fits (:func:`fit_laws_once`)."""
    fits = {}
    for i in range(capture.n - 1):
        key = capture.pair_key(i)
        pf = pooled_fits.get(key)
        rest = () if pf is None else tuple(n for n in pf.configs if n != capture.name)
        if not rest:
            return None
        counts = (counts_without(pf.counts, capture.rounds[i].counts())
                  if capture.name in pf.configs else pf.counts)
        fits[key] = PairFit(key, counts, fit_laws_once(counts, families, cache), rest)
    return predict_config(capture, fits, costs, None).speedup


def _forecast(capture, captures, profile, counts: dict) -> dict | None:
    """The headline forecast of ``capture`` (``counts``: the :func:`count_factors` cache of
    ``captures``' count ratios, shared by every capture's forecast)."""
    if profile is None:
        return None
    if "excluded" in profile.settings and profile.settings["excluded"] != capture.name:
        return None  # the profile's replay laws may contain this capture's own rounds
    if tuple(profile.models) != capture.models or tuple(profile.thresholds) != \
            capture.thresholds:
        raise PolyspecInputError(
            f"profiles.{capture.name}", f"profile is of {profile.models} {profile.thresholds}, "
            f"not of the capture's {list(capture.models)} {list(capture.thresholds)}")
    try:
        kf = count_factors(capture.n, capture.temperature, captures, exclude=capture.name,
                           ratios=counts)
        fc = forecast_capture(capture, captures, profile, count_factor=kf)
    except NoHoldoutData:
        return None
    out = fc.to_dict()
    if capture.n == 2 and capture.temperature == 0:  # R1's variant (docs/theory.md III-E)
        rl = forecast_capture(capture, captures, profile, count_factor=kf,
                              acceptance="run-law")
        if rl.acceptance_model == "run law":
            out["run_law"] = {"speedup": rl.speedup,
                              "forwards_per_token": list(rl.forwards_per_token),
                              "independence": rl.independence}
        else:
            out["run_law"] = {"speedup": None, "independence": rl.independence}
    return out


def _analyse(capture, pair_fits, pooled_fits, families, captures, holdout: dict | None,
             ratios, forecast: dict | None) -> ConfigResult:
    """``holdout``: the run's law fits (:func:`fit_laws_once`) when the held-out-laws
    diagnostic is computed, ``None`` when not."""
    costs = fit_costs(capture)
    diag = {}
    for fam in families:
        diag[f"p1_{fam}"] = predict_config(capture, pair_fits, costs, fam).speedup
    best = predict_config(capture, pair_fits, costs, None)
    diag["p1_best"] = best.speedup
    hold = (None if holdout is None
            else _holdout_speedup(capture, pooled_fits, families, costs, holdout))
    if hold is not None:  # every pair captured elsewhere
        diag["holdout_laws"] = hold
    diag["pooled_laws"] = predict_config(capture, pooled_fits, costs, None).speedup
    diag["microbenchmark"] = predict_config(capture, pair_fits,
                                            fit_costs(capture, calibrate=False), None).speedup
    best_fams = sorted({pair_fits[capture.pair_key(i)].best.law.family
                        for i in range(capture.n - 1)})
    # ---- baseline costs at the capture's contexts x in-cascade slowdown (learned elsewhere)
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    extra = [r.extra_positions for r in capture.rounds]
    factors = [slowdown_factor(ratios, name, role(capture, i), capture.name, capture, captures)
               for i, name in enumerate(capture.models)]
    ext_costs = {name: costs[name].scaled(f) for name, f in zip(capture.models, factors,
                                                                strict=True)}
    ov = overhead_model(captures, exclude=capture.name, like=capture)
    ext_casc = capture_cascade(capture, pair_fits, ext_costs, None, ctxs, extra)
    pred_iid = predict(ext_casc)
    diag["slowdown_costs_iid"] = capture.ar_time_per_token / (pred_iid.time_per_token
                                                              + ov.per_token(pred_iid))
    # ---- acceptance coupled across the levels of a top-level round (n >= 3)
    coupling = None
    if capture.n >= 3:
        try:
            coupling = select_coupling(capture.rounds, capture.n)
        except PolyspecInputError:
            coupling = None
    if coupling is not None:
        fw, tau_mix = coupled_forwards(ext_casc, coupling)
    else:
        fw = np.array([lv.forwards_per_token for lv in pred_iid.levels])
        tau_mix = pred_iid.time_per_token
    diag["slowdown_costs"] = capture.ar_time_per_token / (tau_mix
                                                          + ov.per_token_from_forwards(fw))
    # ---- in-run / extended: forward counts x this capture's measured per-level forward times
    t_in = np.array(capture.forward_s) / np.maximum(np.array(capture.forward_count), 1)
    f_pred = np.array([lv.forwards_per_token for lv in best.levels])
    diag["inrun"] = capture.ar_time_per_token / (float(np.dot(f_pred, t_in))
                                                 + ov.per_token(best))
    diag["extended"] = capture.ar_time_per_token / (float(np.dot(fw, t_in))
                                                    + ov.per_token_from_forwards(fw))
    decomposition, fwd = decompose(capture, pair_fits, costs, best, families)
    decomposition["overhead_model"] = {"per_forward": ov.per_forward,
                                       "per_round": ov.per_round}
    decomposition["slowdown_factors"] = dict(zip(capture.models, factors, strict=True))
    decomposition["coupling"] = None if coupling is None else {
        "k": coupling.k, "weights": coupling.weights.tolist(),
        "alphas": coupling.alphas.tolist(), "bic": coupling.bic, "top_rounds": coupling.n_top}
    corr = []
    for i, r in enumerate(capture.rounds):
        rho, se, k = lag1_correlation(r)
        corr.append({"level": i, "verifier": capture.models[i], "rho": rho, "se": se,
                     "pairs": k})
    ctx_eff = {name: float(costs[name].context_effect(costs[name].reference_context, ctxs[i]))
               for i, name in enumerate(capture.models)}
    return ConfigResult(
        name=capture.name, models=capture.models, thresholds=capture.thresholds,
        temperature=capture.temperature, measured_speedup=capture.measured_speedup,
        measured_ci95=measured_ci95(capture),
        measured_speedup_se=capture.measured_speedup * capture.time_per_token_se()
        / capture.time_per_token,
        measured_time_per_token=capture.time_per_token,
        ar_time_per_token=capture.ar_time_per_token,
        forecast=forecast, diagnostics=diag,
        best_family="+".join(best_fams), decomposition=decomposition, correlations=corr,
        forwards_per_token=fwd, costs={k: v.to_dict() for k, v in costs.items()},
        context_effect=ctx_eff,
    )


def _stats(errors) -> dict:
    e = np.abs([x for x in errors if x is not None and math.isfinite(x)])
    if e.size == 0:
        return {"n_configs": 0, "median_abs_error": None, "max_abs_error": None}
    return {"n_configs": int(e.size), "median_abs_error": float(np.median(e)),
            "max_abs_error": float(np.max(e))}


@dataclass(frozen=True)
class ValidationResult:
    configs: tuple[ConfigResult, ...]
    pairs: dict
    insertions: tuple
    families: tuple[str, ...]
    law_scope: str = "config"
    structured: tuple[StructuredConfigResult, ...] = ()
    left_out: tuple[str, ...] = ()  # forecast but left out of the headline (under load)

    @property
    def predicted(self) -> tuple[ConfigResult, ...]:
        """The configurations in the headline: a forecast, not left out."""
        return tuple(c for c in self.configs if c.forecast is not None
                     and c.name not in self.left_out)

    def run_law_summary(self) -> dict:
        """R1 (run law fitted by R2) against the per-round law on the headline's two-level
        T = 0 captures where R3 rejects independent rounds: |error| median and max of each."""
        rows = [(c.name, c.forecast["run_law"]["speedup"], c.predicted_speedup,
                 c.measured_speedup) for c in self.predicted
                if (c.forecast.get("run_law") or {}).get("speedup") is not None]
        r1 = _stats(relative_error(r, m) for _, r, _, m in rows)
        pr = _stats(relative_error(p, m) for _, _, p, m in rows)
        return {"configs": [n for n, *_ in rows], "run_law": r1, "per_round": pr}

    @property
    def median_abs_error(self) -> float | None:
        return _stats(c.error for c in self.predicted)["median_abs_error"]

    @property
    def max_abs_error(self) -> float | None:
        return _stats(c.error for c in self.predicted)["max_abs_error"]

    def structured_summary(self) -> dict:
        """Median / max |error| of the structured captures (stationary P1 with their own
        fitted laws; with laws from the other captures; verify-path costs and overhead fitted
        on the other captures, own and holdout laws; in-run: predicted forwards x measured
        forward times)."""
        e = np.array([abs(c.error) for c in self.structured])
        ei = np.array([abs(c.inrun_error) for c in self.structured])
        eh = np.array([abs(c.holdout_error) for c in self.structured
                       if c.holdout_error is not None])
        ev = np.array([abs(c.verify_path_error) for c in self.structured])
        evh = np.array([abs(c.verify_path_holdout_error) for c in self.structured
                        if c.verify_path_holdout_error is not None])
        return {"n_configs": len(self.structured),
                "verify_path_median_abs_error": float(np.median(ev)) if ev.size else None,
                "verify_path_max_abs_error": float(np.max(ev)) if ev.size else None,
                "verify_path_holdout_n_configs": int(evh.size),
                "verify_path_holdout_median_abs_error": (float(np.median(evh)) if evh.size
                                                         else None),
                "verify_path_holdout_max_abs_error": float(np.max(evh)) if evh.size else None,
                "holdout_n_configs": int(eh.size),
                "holdout_median_abs_error": float(np.median(eh)) if eh.size else None,
                "holdout_max_abs_error": float(np.max(eh)) if eh.size else None,
                "median_abs_error": float(np.median(e)) if e.size else None,
                "max_abs_error": float(np.max(e)) if e.size else None,
                "inrun_median_abs_error": float(np.median(ei)) if ei.size else None,
                "inrun_max_abs_error": float(np.max(ei)) if ei.size else None}

    def summary(self) -> dict:
        if not self.configs:
            return {"headline": HEADLINE, "n_configs": 0, "n_predicted": 0,
                    "median_abs_error": None, "max_abs_error": None,
                    "structured": self.structured_summary()}
        doms = [c.decomposition["dominant"] for c in self.configs]
        shares = {k: float(np.median([abs(c.decomposition["relative"][k]) for c in self.configs]))
                  for k in self.configs[0].decomposition["relative"]}
        names = list(dict.fromkeys(k for c in self.configs for k in c.diagnostics))
        inside = [c.inside_ci for c in self.predicted]
        return {
            "headline": HEADLINE,
            "n_configs": len(self.configs),
            "n_predicted": len(self.predicted),
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "inside_ci": int(sum(bool(x) for x in inside)),
            "left_out": list(self.left_out),
            "run_law": self.run_law_summary(),
            "law_scope": self.law_scope,
            "diagnostics": {k: _stats(c.diagnostic_error(k) for c in self.configs)
                            for k in names},
            "dominant_residual": max(set(doms), key=doms.count),
            "median_abs_residual_share": shares,
            "structured": self.structured_summary(),
        }

    def to_json(self) -> dict:
        """The ``polyspec validate --json`` object: the headline is predictive (nothing of a
        capture goes into its prediction); diagnostics are labelled as such."""
        return {
            "headline": HEADLINE,
            "configs": [{"name": c.name, "measured_speedup": c.measured_speedup,
                         "measured_ci95": list(c.measured_ci95),
                         "predicted_speedup": None if c.forecast is None
                         else c.predicted_speedup,
                         "error": None if c.forecast is None else c.error,
                         "inside_ci": c.inside_ci,
                         "cost_source": None if c.forecast is None
                         else c.forecast["cost_source"],
                         "best_law": c.best_family,
                         "diagnostics": {k: {"speedup": v, "error": c.diagnostic_error(k)}
                                         for k, v in c.diagnostics.items()}}
                        for c in self.configs],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "summary": self.summary(),
            "pairs": [p.to_dict() for p in self.pairs.values()],
            "insertions": list(self.insertions),
            "structured": [c.to_dict() for c in self.structured],
        }


class P5(NamedTuple):
    """How the P5 insertion decisions' confidence is computed (``"delta"`` or
    ``"bootstrap"`` with ``n_boot`` replicates from ``seed``)."""

    confidence: str = "delta"
    n_boot: int = 200
    seed: int = 0


def validate(captures, families=FAMILIES, *, laws: str = "config", insertions: bool = True,
             holdout: bool = True, p5: P5 | None = None, profiles=None,
             progress=None) -> ValidationResult:
    """Run the whole pipeline (module docstring) on a list of captures. ``profiles``: capture
    name -> composition profile of its cascade (anything with ``cost_curves()``, ``ar_s``,
    ``models`` and ``thresholds``, e.g.
    :class:`validation.capture.composition_profile.CompositionProfile`); captures without one get no
    headline forecast. ``p5``: the insertion decisions' confidence. ``progress(done,
    total)`` is called after each configuration is analysed. Captures forecast and listed but
    left out of the headline (made under load) are the result's ``left_out``
    (``dataclasses.replace(result, left_out=...)``)."""
    captures = check_captures(captures, empty="no captured configurations")
    names = [c.name for c in captures]
    families = tuple(families)
    if laws not in ("config", "pooled"):
        raise PolyspecInputError("laws", f"must be 'config' or 'pooled', got {laws!r}")
    profiles = dict(profiles or {})
    unknown = sorted(set(profiles) - set(names))
    if unknown:
        raise PolyspecInputError("profiles", f"no capture named {unknown[0]!r}")
    structured = tuple(analyse_structured(c, families, captures) for c in captures
                       if c.structured)
    captures = [c for c in captures if not c.structured]
    if not captures:
        return ValidationResult((), {}, (), families, laws, structured)
    cache: dict = {}  # the law fits of this run by their rounds (fit_laws_once)
    pair_fits = fit_pairs(captures, families, cache=cache)
    own = {c.name: (fit_pairs([c], families, cache=cache) if laws == "config" else pair_fits)
           for c in captures}
    ratios = {c.name: slowdown_ratios(c, own[c.name]) for c in captures}
    results, counts = [], {}
    for c in captures:
        results.append(_analyse(c, own[c.name], pair_fits, families, captures,
                                cache if holdout else None, ratios,
                                _forecast(c, captures, profiles.get(c.name), counts)))
        if progress is not None:
            progress(len(results), len(captures))
    results = tuple(results)
    p5 = p5 or P5()
    ins = tuple(insertion_analysis(captures, pair_fits, method=p5.confidence, n_boot=p5.n_boot,
                                   seed=p5.seed, ratios=ratios)) if insertions else ()
    return ValidationResult(results, pair_fits, ins, families, laws, structured)
