"""Forecast PipeSpec *asynchronous* pipelines (``AsyncChainSpeculativeDecoder``) from the
synchronous runs of a folder: docs/theory.md Part VI-AS on the acceptance laws and call costs
that :mod:`.forecast` measures for the synchronous forecast.

* lookahead ``k`` -> threshold ``max(k - 1, 0)``: wait for ``k - 1`` ready drafts, then check
  every ready draft up to the verify cap (AS0, :func:`polyspec_theory.async_pair`);
  lookaheads 0 and 1 both verify at once.
* acceptance: the per-prompt age-hazard law of each pair (:func:`.forecast.prompt_laws`) as a
  positional law (``alpha_j = 1 - hazard[j]``, the tail repeating);
* costs (seconds): draft step, verify calls ``T(m)`` (point, low, high) and the per-prompt
  overhead exactly as the synchronous forecast measures them;
* two levels: AS1 per prompt (exact); more: the discrete-event simulator on the pooled laws.
* the interval: the cost interval widened by 1.96 x the RMS relative leave-one-out error of
  the folder's asynchronous runs (``model_error``), or of the synchronous sweep if none.
"""

from __future__ import annotations

import math

import numpy as np

from polyspec_theory import (
    Cascade,
    CostCurve,
    Model,
    Positional,
    async_pair,
    lookahead_threshold,
    predict_async,
)
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import get
from validation.analysis.pipespec_forecast import (
    baseline_of,
    chain_inputs,
    draft_step,
    overhead,
    prompt_laws,
    verify_costs,
)
from validation.analysis.score import widened_interval
from validation.formats.pipespec import measured_speedup
from validation.schemes import captures_of
from validation.schemes.async_ import name as SCHEME  # the scheme whose runs this forecasts

__all__ = ["lookahead_threshold", "forecast_async", "async_leave_one_out"]

SIM_CHAINS = 32


def _positional(law) -> Positional:
    return Positional([1.0 - h for h in law.hazard] + [1.0 - law.tail])


def _table(entry, mmax: int) -> CostCurve:
    ms, vs, beyond = entry
    ms = np.asarray(ms, dtype=np.float64)
    vs = np.asarray(vs, dtype=np.float64)
    m = np.arange(1, mmax + 1, dtype=np.float64)
    t = np.interp(m, ms, vs)
    if beyond == "linear" and ms.size >= 2:
        slope = (vs[-1] - vs[-2]) / (ms[-1] - ms[-2])
        t = np.where(m > ms[-1], vs[-1] + slope * (m - ms[-1]), t)
    return CostCurve(table=[float(max(x, 1e-9)) for x in t])


def _tau(models, law_rows, theta, seed):
    """Seconds per token of the async pipeline for one set of pair laws."""
    cas = Cascade(tuple(models), tuple(law_rows), tuple(theta), name="pipespec-async",
                  mode=get(SCHEME).mode)
    pred = predict_async(cas)
    if pred.exact:
        return pred.time_per_token
    from simulators.asynchronous import simulate_async
    from simulators.schemes import DEFAULT_EVENTS

    res = simulate_async(cas, DEFAULT_EVENTS, seed, chains=SIM_CHAINS)
    return cas.models[0].cost.t1 / res.speedup.value


def forecast_async(runs, names, lookahead: int, precisions=None, *,
                   model_error: float | None = None, verify_overhead: float = 0.0) -> dict:
    """Predicted speedup of the asynchronous pipeline ``names`` (smallest first) at
    ``lookahead`` over the target's greedy baseline; same keys as the synchronous forecast.
    ``verify_overhead``: seconds added to every verify (sync hand-off), 0 by default."""
    if len(names) < 2:
        raise PolyspecInputError("models", "a cascade needs >= 2 models")
    th = lookahead_threshold(lookahead)
    specs, base, idx, n_tok = chain_inputs(runs, names, precisions)
    n_tok = np.asarray(n_tok, dtype=np.float64)
    per_pair = [prompt_laws(runs, names[j], names[j + 1], idx) for j in range(len(names) - 1)]
    ver, notes = [], []
    for m in specs[1:]:
        v = verify_costs(runs, m.name, m.precision)
        ver.append(v[:3])
        notes.append(v[3])
    c = draft_step(runs, specs[0].name, specs[0].precision)
    o, o_lo, o_hi = overhead(runs, specs)
    window = async_pair(th).window
    # target first for the theory
    thetas = [th] * (len(names) - 1)

    def models_at(which):
        out = []
        for j in range(len(names) - 1, 0, -1):
            out.append(Model(names[j], _table(ver[j - 1][which], window + 1), verify_overhead))
        out.append(Model(names[0], CostCurve(base=c)))
        return out

    b = base.by_index()
    bt = sum(b[i].total_time for i in idx) / sum(b[i].tokens_generated for i in idx)

    def speed(which, ov):
        models = models_at(which)
        if len(names) == 2:
            taus = np.array([_tau(models, [_positional(per_pair[0][i])], thetas, 0)
                             for i in idx])
        else:
            from validation.analysis.pipespec_forecast import sync_pairs
            from validation.formats.pipespec import fit_age_hazard, round_exposures

            pooled = []
            for j in range(len(names) - 2, -1, -1):
                pr = [r for r in sync_pairs(runs, names[j], names[j + 1]) if r.lookahead >= 2]
                pooled.append(_positional(fit_age_hazard([round_exposures(r) for r in pr])))
            taus = np.full(len(idx), _tau(models, pooled, thetas, 0))
        times = n_tok * taus + ov
        return bt / (times.sum() / n_tok.sum()), float(times.sum() / n_tok.sum())

    sp, tpt = speed(0, o)
    sp_fast = speed(1, o_lo)[0]
    sp_slow = speed(2, o_hi)[0]
    rel = model_error or 0.0
    return {
        "models": list(names),
        "precisions": {m.name: m.precision for m in specs},
        "lookahead": int(lookahead),
        "mode": get(SCHEME).mode,
        "warnings": [],
        "speedup": sp,
        "interval95": widened_interval(min(sp, sp_fast, sp_slow), max(sp, sp_fast, sp_slow),
                                       rel),
        "cost_interval": [min(sp_fast, sp_slow), max(sp_fast, sp_slow)],
        "model_error_rel_sd": model_error,
        "baseline": base.path,
        "prompts": idx,
        "predicted_time_per_token_s": tpt,
        "acceptance_source": [f"{names[j]} -> {names[j + 1]}: per-prompt age-hazard law from "
                              "the two-model synchronous runs, as a positional law"
                              + ("" if len(names) == 2 else " (pooled over prompts)")
                              for j in range(len(names) - 1)],
        "cost_source": notes + [f"draft step {c:.5f} s; overhead per prompt {o:.4f} s; "
                                f"verify hand-off {verify_overhead:.5f} s; theory: "
                                + ("AS1 exact" if len(names) == 2 else
                                   "simulators/asynchronous.py")],
    }


def forecast_async_dir(directory, names, lookahead, precisions=None) -> dict:
    """``polyspec forecast --mode async``: refuses a configuration the folder already holds;
    the interval uses the leave-one-out error of the folder's asynchronous runs."""
    from validation.analysis.pipespec_forecast import resolve_model_names
    from validation.formats.pipespec import read_pipespec_dir

    runs = read_pipespec_dir(directory)
    names, precisions = resolve_model_names(runs, names, precisions)
    want = dict(precisions)
    for r in async_runs(runs):
        if r.names == tuple(names) and r.lookahead == int(lookahead) and all(
                m.precision == want.get(m.name, m.precision) for m in r.models):
            raise PolyspecInputError("--models", f"this asynchronous configuration is already "
                                     f"measured in {r.path}: nothing to forecast")
    err = model_error(runs)
    out = forecast_async(runs, tuple(names), lookahead, precisions, model_error=err)
    out["models_resolved"] = list(names)
    if err is None:  # nothing measured of an async pipeline: no 95 % interval to state
        n = len(async_runs(runs))
        out["interval95"] = None
        out["warnings"] = [
            f"{n} asynchronous run(s) in the folder (a 95 % interval needs >= 2, each "
            "forecast from the others): the pipeline's own error and its sync hand-off "
            "(0 s assumed) are not measured, so no 95 % interval is given; the cost range "
            f"is [{out['cost_interval'][0]:.3f}, {out['cost_interval'][1]:.3f}]"]
    return out


def async_runs(runs):
    return captures_of(runs, SCHEME)


def async_leave_one_out(runs) -> list[dict]:
    """Each asynchronous run forecast from the others (its own run left out)."""
    out = []
    for held in async_runs(runs):
        rest = [r for r in runs if r is not held]
        precisions = {m.name: m.precision for m in held.models}
        fc = forecast_async(rest, held.names, held.lookahead, precisions)
        base = baseline_of(runs, held.target.name, held.target.precision)
        if base is None:
            raise PolyspecInputError("models", f"no greedy baseline of {held.target.name} in "
                                     "the traces")
        meas = measured_speedup(base, held)
        out.append({"models": list(held.names), "lookahead": held.lookahead,
                    "forecast": fc["speedup"], "measured": meas,
                    "rel_error": fc["speedup"] / meas - 1.0})
    return out


def model_error(runs) -> float | None:
    errs = [e["rel_error"] for e in async_leave_one_out(runs)]
    return None if len(errs) < 2 else float(math.sqrt(np.mean(np.square(errs))))
