"""P5 (model insertion) on captured cascades.

For every captured cascade and every model of the captures that can be inserted between two
of its adjacent models (pair laws available for both new pairs at the same sampling
setting): the exact P1 decision with fitted laws and costs, the same decision with the
decoder overhead and with each model's in-cascade slowdown (both learned on the other
captures), the measured decision when the cascade with the inserted model was captured too
(same other thresholds), and P5's decision confidence (delta method or parametric
bootstrap).
"""

from __future__ import annotations

import math

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.planning.insertion import decision_confidence, insert_model, insertion_decision
from polyspec_theory.schemes import predict
from validation.analysis.fits import (
    capture_cascade,
    cost_curve_for,
    cost_rel_se,
    fit_cost_for,
    fit_costs,
)
from validation.analysis.residuals import overhead_model, slowdown_factor

__all__ = ["insertion_analysis", "model_order"]


def model_order(captures) -> list[str]:
    """Models ordered target first by decreasing fitted ``T(1)`` (the zoo's size order)."""
    t1 = {}
    for c in captures:
        for name in c.models:
            if name not in t1:
                f = fit_cost_for(name, captures, c)
                t1[name] = f.table[0] if f is not None else math.nan
    return sorted(t1, key=lambda k: -t1[k])


def insertion_analysis(captures, pair_fits, *, method: str = "delta", n_boot: int = 200,
                       seed: int = 0, ratios: dict | None = None):
    """P5 for every (captured cascade, insertable model, position); see module docstring.

    Thresholds of the two new pairs: those of a captured cascade with the model inserted when
    one exists (then the measured decision is reported), else the optimum over 1..8 of the
    P1 prediction for the new pairs, other thresholds unchanged (prediction only)."""
    captures = list(captures)
    order = model_order(captures)
    by_models = {}
    for c in captures:
        by_models.setdefault((c.models, c.temperature, c.top_k), []).append(c)
    out = []
    for c in captures:
        costs = fit_costs(c)
        for p in range(c.n - 1):
            lo, hi = order.index(c.models[p]), order.index(c.models[p + 1])
            for new in order[lo + 1: hi]:
                k_up = (c.models[p], new, float(c.temperature), int(c.top_k))
                k_lo = (new, c.models[p + 1], float(c.temperature), int(c.top_k))
                if k_up not in pair_fits or k_lo not in pair_fits:
                    continue
                new_cost = cost_curve_for(new, captures, c)
                if new_cost is None:
                    continue
                base = capture_cascade(c, pair_fits, costs, None)
                new_models = c.models[: p + 1] + (new,) + c.models[p + 1:]
                measured = None
                candidates = [d for d in by_models.get((new_models, c.temperature, c.top_k), [])
                              if d.thresholds[:p] == c.thresholds[:p]
                              and d.thresholds[p + 2:] == c.thresholds[p + 1:]]
                if candidates:
                    # prefer the captured cascade whose upper threshold equals the original
                    d = min(candidates, key=lambda d: (d.thresholds[p] != c.thresholds[p],
                                                       d.thresholds[p:p + 2]))
                    th = (d.thresholds[p], d.thresholds[p + 1])
                    se = [x.measured_speedup * x.time_per_token_se() / x.time_per_token
                          for x in (c, d)]
                    z = (d.measured_speedup - c.measured_speedup) / math.hypot(*se) \
                        if all(math.isfinite(v) for v in se) and math.hypot(*se) > 0 \
                        else math.nan
                    measured = {"with": d.name, "speedup_with": d.measured_speedup,
                                "speedup_without": c.measured_speedup,
                                "helps": bool(d.measured_speedup > c.measured_speedup),
                                "z": z}
                else:
                    th = _best_new_thresholds(base, p, Model(new, new_cost),
                                              pair_fits[k_up].law(None),
                                              pair_fits[k_lo].law(None))
                dec = insertion_decision(base, p, Model(new, new_cost),
                                         pair_fits[k_up].law(None), pair_fits[k_lo].law(None),
                                         th)
                rounds = [pair_fits[c.pair_key(i)].counts.n_rounds for i in range(c.n - 1)]
                rounds += [pair_fits[k_up].counts.n_rounds, pair_fits[k_lo].counts.n_rounds]
                rel_se = [cost_rel_se(costs[m]) for m in c.models] + [
                    cost_rel_se(fit_cost_for(new, captures, c))]
                conf = decision_confidence(
                    base, p, Model(new, new_cost), pair_fits[k_up].law(None),
                    pair_fits[k_lo].law(None), th, rounds=rounds, cost_rel_se=rel_se,
                    method=method, n_boot=n_boot, seed=seed)
                # the same decision with the decoder-overhead term (fitted without c)
                ov = overhead_model(captures, exclude=c.name, like=c)
                p0, p1 = predict(dec.cascade_without), predict(dec.cascade_with)
                t0 = p0.time_per_token + ov.per_token(p0)
                t1 = p1.time_per_token + ov.per_token(p1)
                # ... and with each model's in-cascade slowdown (learned without c)
                pe = None
                if ratios is not None:
                    taus = []
                    for casc in (dec.cascade_without, dec.cascade_with):
                        ms = tuple(
                            Model(m.name, m.cost.scaled(slowdown_factor(
                                ratios, m.name, "bottom" if k == casc.n - 1 else "verify",
                                c.name, c, captures)))
                            for k, m in enumerate(casc.models))
                        pr = predict(Cascade(ms, casc.laws, casc.thresholds, casc.policy))
                        taus.append(pr.time_per_token + ov.per_token(pr))
                    pe = {"helps": bool(taus[1] < taus[0]),
                          "relative_gain": taus[0] / taus[1] - 1.0}
                out.append({
                    "cascade": c.name, "models": list(c.models), "position": p,
                    "inserted": new, "thresholds_new": list(th),
                    "predicted": dec.to_dict(),
                    "predicted_with_overhead": {"helps": bool(t1 < t0),
                                                "relative_gain": t0 / t1 - 1.0},
                    "predicted_extended": pe,
                    "agrees_extended": None if (measured is None or pe is None)
                    else bool(measured["helps"] == pe["helps"]),
                    "measured": measured,
                    "agrees": None if measured is None else bool(measured["helps"] == dec.helps),
                    "agrees_with_overhead": None if measured is None
                    else bool(measured["helps"] == (t1 < t0)),
                    "confidence": conf.probability,
                    "confidence_se": conf.std_error,
                    "confidence_method": conf.method,
                })
    return out



def _best_new_thresholds(base, p, model, up, low, max_theta: int = 8):
    best = None
    for a in range(1, max_theta + 1):
        for b in range(1, max_theta + 1):
            tau = predict(insert_model(base, p, model, up, low, (a, b))).time_per_token
            if best is None or tau < best[0]:
                best = (tau, (a, b))
    return best[1]
