"""A planner pool (:class:`polyspec_theory.planning.planner.Pool`) built from captures: the models
seen, their cost curves in units of one target forward, and the acceptance law of every pair
captured (``polyspec plan --traces``)."""

from __future__ import annotations

import numpy as np

from polyspec_theory.core.config import Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import LAW_FAMILIES
from polyspec_theory.core.regimes import MAX_HORIZON, RegimeLaw, fit_regimes
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.planning.pool import MAX_PLAN_THRESHOLD, Pool
from validation.analysis.fits import fit_costs, fit_pairs

__all__ = ["pool_from_captures", "regime_fits", "pair_rounds", "capture_horizon", "REGIME_KS"]


REGIME_KS = (2, 3)  # hidden-regime models tried per pair (1 regime = the iid geometric law)


def capture_horizon(captures) -> int:
    """Tokens per decode of the captures: the median over captures of the header's
    ``prompts.max_new_tokens``, or of the fewest tokens any prompt generated when the header
    does not say."""
    vals = []
    for c in captures:
        n = c.max_new_tokens
        if n is None and c.prompt_tokens:
            n = int(min(c.prompt_tokens))
        if n is None:
            n = max(1, round(c.tokens / max(c.n_prompts, 1)))
        vals.append(n)
    return int(np.median(vals))


def pair_rounds(captures) -> dict:
    """``{(verifier, drafter): (accepted, caps, groups)}``: the rounds of every capture using
    the pair, concatenated over captures in order, one group label per (capture, prompt)."""
    data: dict[tuple[str, str], list] = {}
    for ci, c in enumerate(captures):
        for i in range(c.n - 1):
            r = c.rounds[i]
            if r.n == 0:
                continue
            d = data.setdefault((c.models[i], c.models[i + 1]), [[], [], []])
            d[0].append(r.A)
            d[1].append(r.G)
            d[2].append(np.asarray(r.prompt, dtype=np.int64) + (ci << 32))
    return {key: tuple(np.concatenate(x) for x in d) for key, d in sorted(data.items())}


def regime_fits(captures, ks=REGIME_KS) -> dict:
    """``{(verifier, drafter): {k: RegimeFit}}``: hidden-regime models
    (:func:`polyspec_theory.core.regimes.fit_regimes`) per pair, on the rounds of every capture
    using the pair, one sequence per (capture, prompt), rounds in order (:func:`pair_rounds`)."""
    return {key: {k: fit_regimes(a, g, grp, k=k) for k in ks}
            for key, (a, g, grp) in pair_rounds(captures).items()}


def pool_from_captures(captures, *, law: str = "best", max_threshold: int = 16,
                       temperature: float | None = None, name: str = "traces",
                       horizon: int | None = None, profiles=None):
    """A :class:`polyspec_theory.planning.planner.Pool` from captures
    (:func:`validation.traces.records.read_traces`).

    - Models: every model of the captures; the target (first model of every capture; all
      captures must share it) first, the others by decreasing fitted ``T(1)``.
    - Acceptance: rounds pooled per pair over captures and fitted by censored MLE
      (:func:`validation.analysis.fits.fit_pairs`) and, as sequences per prompt, by hidden-regime
      models with 2 and 3 regimes (:func:`regime_fits`: acceptance that persists across
      rounds, whose law depends on the block length; used through
      :class:`polyspec_theory.core.regimes.RegimeLaw` for decodes of ``horizon`` tokens, default
      :func:`capture_horizon`). Both likelihoods are of the same observed rounds, so
      ``law="best"`` takes the AIC-best of the non-Gaussian iid families and the regime
      models; ``"regime"`` the AIC-best regime model; a family name that family. Only pairs
      seen in some capture are adjacent in the pool.
    - Costs: per capture, the cost curves fitted from its baseline timings and calibrated
      to its interleaved autoregressive forward times
      (:func:`validation.analysis.fits.fit_costs`),
      divided by that capture's target ``T_1(1)`` (same machine load), then the element-wise
      median over the captures containing the model: a table ``T(1..m_max)`` in units of
      one target forward.
    - One sampling setting: captures at ``temperature`` (required when they differ).
    Returns ``(pool, info)``; ``info`` lists the captures used and rounds per pair.
    """
    caps, settings = _selected(captures, law, temperature)
    max_threshold = as_int(max_threshold, "--max-threshold", low=1, high=MAX_PLAN_THRESHOLD)
    target = caps[0].models[0]
    policies = sorted({c.policy for c in caps})
    if len(policies) > 1:
        raise PolyspecInputError("traces", f"the captures mix block policies: {policies}")
    costs = _pool_costs(caps, target)
    if profiles:
        costs = _composition_costs(caps, costs, target, profiles)
    others = sorted((nm for nm in costs if nm != target), key=lambda nm: (-costs[nm].t1, nm))
    models = [Model(target, costs[target])] + [Model(nm, costs[nm]) for nm in others]
    use_regimes = law in ("best", "regime")
    if use_regimes:
        horizon = capture_horizon(caps) if horizon is None else horizon
        horizon = as_int(horizon, "--horizon", low=1, high=MAX_HORIZON)
    pairs, rounds = _pool_laws(caps, law, horizon if use_regimes else None)
    pool = Pool(tuple(models), pairs, max_threshold, policies[0], name,
                engine="polyspec")  # our own decoder: it runs both modes
    info = {
        "source": "traces",
        "captures": [c.name for c in caps],
        "temperature": settings[0][0],
        "top_k": settings[0][1],
        "law": law,
        **({"horizon": horizon} if use_regimes else {}),
        "cost_units": ("one autoregressive target token: in-cascade costs of the composition "
                       "profiles (median over the profiled cascades using each model in that "
                       "role) plus decoder overhead, isolated curves where no profile has the "
                       "model" if profiles else
                       "one target forward (per capture, calibrated curves / target T_1(1); "
                       "median over captures)"),
        "pairs": rounds,
    }
    return pool, info




def _selected(captures, law: str, temperature):
    """(the captures at the one sampling setting, the settings): one target, a known law."""
    caps = list(captures)
    if not caps:
        raise PolyspecInputError("traces", "no captured configuration")
    if law not in ("best", "regime") and law not in LAW_FAMILIES:
        raise PolyspecInputError("--law", f"unknown law family {law!r}; choose best, regime "
                                 f"or one of {', '.join(LAW_FAMILIES)}")
    settings = sorted({(float(c.temperature), int(c.top_k)) for c in caps})
    if temperature is not None:
        caps = [c for c in caps if float(c.temperature) == float(temperature)]
        if not caps:
            raise PolyspecInputError(
                "--temperature", f"no capture at temperature {temperature}; found "
                + ", ".join(f"T={t:g} top_k={k}" for t, k in settings))
        settings = sorted({(float(c.temperature), int(c.top_k)) for c in caps})
    if len(settings) > 1:
        raise PolyspecInputError(
            "--temperature", "the captures mix sampling settings ("
            + ", ".join(f"T={t:g} top_k={k}" for t, k in settings)
            + "); acceptance depends on them: choose one with --temperature")
    targets = sorted({c.models[0] for c in caps})
    if len(targets) > 1:
        raise PolyspecInputError("traces", f"the captures have different targets: "
                                 f"{', '.join(targets)}")
    return caps, settings


def _pool_costs(caps, target) -> dict:
    """Per model: the calibrated cost curves over the target's ``T_1(1)``, the element-wise
    median over the captures containing it."""
    # costs in target-forward units, median over captures
    tables: dict[str, list[np.ndarray]] = {}
    for c in caps:
        fits = fit_costs(c, calibrate=True)
        t_target = fits[target].at(1)
        if not t_target > 0:
            raise PolyspecInputError(f"traces.{c.name}", "target cost T_1(1) is not positive")
        for nm, cf in fits.items():
            m_max = int(max(cf.ms))
            curve = cf.curve()
            tables.setdefault(nm, []).append(
                np.asarray(curve(np.arange(1, m_max + 1)), dtype=np.float64) / t_target)
    costs = {}
    for nm, tabs in tables.items():
        k = min(t.size for t in tabs)
        costs[nm] = CostCurve.from_table(
            [float(x) for x in np.maximum(np.median([t[:k] for t in tabs], axis=0), 0.0)])
    return costs


def _pool_laws(caps, law: str, horizon) -> tuple[dict, dict]:
    """(the law of every pair seen, the rounds and AIC behind it); ``horizon``: the regime
    laws' decode length (``None``: no regime law)."""
    use_regimes = horizon is not None
    pair_fits = fit_pairs(caps)
    reg = regime_fits(caps) if use_regimes else None
    pairs, rounds = {}, {}
    for (v, d, _t, _k), pf in sorted(pair_fits.items()):
        aic = {f.law.family: f.aic for f in pf.fits if f.law.family != "gaussian"}
        if use_regimes:
            aic.update({f"regime{k}": rf.aic for k, rf in reg[(v, d)].items()})
            cands = [c for c in aic if law == "best" or c.startswith("regime")]
            choice = min(cands, key=aic.__getitem__)
            if choice.startswith("regime"):
                pairs[(v, d)] = RegimeLaw(reg[(v, d)][int(choice[6:])].model, horizon)
            else:
                pairs[(v, d)] = pf.law(choice)
        else:
            pairs[(v, d)] = pf.law(law)
        rounds[f"{v}|{d}"] = {"rounds": pf.counts.n_rounds, "law": pairs[(v, d)].to_config(),
                              "aic": aic, "configs": list(pf.configs)}
    return pairs, rounds


def _composition_costs(caps, costs, target, profiles) -> dict:
    """Pool costs in units of one autoregressive target token from composition profiles: a
    verifier's ``T(G + 1)`` is the median over the profiled cascades of its in-cascade verify
    time for a block of ``G`` (per profile, divided by that profile's AR time), the bottom
    drafter's ``T(1)`` the median in-cascade drafting time, the target's ``T(1)`` = 1; block
    lengths no profile measured keep the isolated curve scaled by the model's median
    in-cascade/isolated ratio; every forward carries the decoder overhead per forward and
    every verify forward the overhead per round (fitted on the captures, in AR-token
    units)."""
    from validation.analysis.residuals import overhead_model

    ver: dict[str, dict[int, list]] = {}
    drf: dict[str, list] = {}
    for c in caps:
        p = profiles.get(c.name)
        if p is None:
            continue
        for i, nm in enumerate(p.models):
            if i == len(p.models) - 1:
                drf.setdefault(nm, []).append(p.draft_s / p.ar_s)
            else:
                for g, t in p.mean_verify(i).items():
                    ver.setdefault(nm, {}).setdefault(g + 1, []).append(t / p.ar_s)
    ov = overhead_model(caps, like=caps[0])
    ar = float(np.median([c.ar_time_per_token for c in caps]))
    o_f, o_r = ov.per_forward / ar, ov.per_round / ar
    out = {}
    for nm, curve in costs.items():
        iso = np.asarray(curve(np.arange(1, 17)), dtype=np.float64)
        tab = iso.copy()
        meas = {m: float(np.median(v)) for m, v in ver.get(nm, {}).items() if m <= 16}
        if meas:
            ratio = float(np.median([t / iso[m - 1] for m, t in meas.items()]))
            tab = iso * ratio
            for m, t in meas.items():
                tab[m - 1] = t
        if nm in drf:
            tab[0] = float(np.median(drf[nm]))
        elif meas:
            tab[0] = iso[0] * ratio
        if nm == target:
            tab[0] = 1.0
        tab[1:] += o_f + o_r
        if nm != target:
            tab[0] += o_f
        out[nm] = CostCurve.from_table([float(x) for x in np.maximum(tab, 0.0)])
    return out
