"""``async``: the asynchronous pipeline (``"mode": "async"``; AS0-AS4, docs/theory.md Part
VI-AS): every model its own process, a verifier checking the drafts ready once ``θ`` are
(threshold 0: verify what is ready). Exact for two levels (AS1); for more, the exact bound
pair AS3 and a Monte-Carlo value (``options.estimate``). Its own field: ``"queue"``, per pair
the most drafts a drafter runs ahead (checks: :func:`polyspec_theory.core.config.
check_async_cascade`)."""

from __future__ import annotations

from polyspec_theory.core.config import check_async_cascade
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.pipelines.asynchronous import predict_async, sync_ratio_bounds
from polyspec_theory.planning.advice import decide
from polyspec_theory.schemes import in_mode
from polyspec_theory.schemes import predict as predict_in_scheme

name = "async"
description = '"mode": "async", the asynchronous pipeline'
mode = "async"
threshold_floor = 0
fields = {"queue": 'bounds the drafters of "mode": "async" only'}


def claims(features) -> bool:
    return True


def check(cascade) -> dict:
    return {"queues": check_async_cascade(cascade)}


def predict(cascade):
    """AS1 (two levels) or AS3's bounds (:func:`predict_async`)."""
    return predict_async(cascade)


def sync_twin(cascade):
    """The same cascade run synchronously (``None`` where a threshold is 0: no synchronous
    meaning)."""
    try:
        return in_mode(cascade, "sync")
    except PolyspecInputError as e:
        if e.field != "mode":
            raise
        return None


def report(cascade, options=None) -> dict:
    """AS1 (n = 2) or the Monte Carlo of ``options.estimate`` with AS3's bounds (n >= 3),
    the synchronous P1 of the same cascade and AS4's ratio bounds where they apply."""
    pred = predict_async(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    if not pred.exact:
        if options is None or options.estimate is None:
            raise PolyspecInputError("models", f"AS7's exact chain of these {cascade.n} "
                                     "models is too large; it needs a Monte-Carlo estimate")
        est = options.estimate(cascade)
        out["speedup"] = est.value
        out["time_per_token"] = cascade.models[0].cost.t1 / est.value
        out["speedup_ci95"] = [est.low, est.high]
        out["method"] = f"{est.method}; exact bounds AS3"
    elif cascade.n == 2:
        out["method"] = "exact (AS1, two-level Markov chain)"
    else:
        out["method"] = f"exact (AS7, {cascade.n}-level Markov chain)"
    twin = sync_twin(cascade)
    out["sync"] = None if twin is None else {"speedup": predict_in_scheme(twin).speedup}
    ratio = sync_ratio_bounds(cascade)
    out["async_over_sync_bounds"] = None if ratio is None else list(ratio)
    if twin is not None:
        out["faster_mode"] = "async" if out["speedup"] > out["sync"]["speedup"] else "sync"
    return out


def explain(cascade, options=None) -> str:
    return report_text(report(cascade, options))


def report_text(rep: dict) -> str:
    """The plain text of :func:`report`'s object."""
    lines = [f"asynchronous pipeline ({rep['method']}): speedup {rep['speedup']:.4f}x"]
    if "speedup_ci95" in rep:
        lo, hi = rep["speedup_ci95"]
        lines[0] += f"  95% CI [{lo:.4f}, {hi:.4f}]"
    lo, hi = rep["bounds"]
    lines.append(f"  exact bounds (AS3): [{lo:.4f}, {hi:.4f}]")
    for r, lv in zip(rep["rules"], rep["config"]["models"], strict=False):
        q = "unbounded" if r["queue"] is None else r["queue"]
        lines.append(f"  {lv['name']}: verify once {r['wait']} drafts are ready, at most "
                     f"{r['window']} per verify; drafter queue {q}")
    for lv in rep["levels"]:
        lines.append(f"  {lv['name']}: busy {100 * lv['busy_fraction']:.1f} %, "
                     f"forwards/token {lv['forwards_per_token']:.5g}")
    if rep["sync"] is not None:
        sy, asy, ci = rep["sync"]["speedup"], rep["speedup"], rep.get("speedup_ci95")
        if asy > sy:  # async's MC interval (or exact AS1 value) against sync's exact P1
            d = decide("async", "sync", speedup=asy, interval=ci, rival_speedup=sy)
        else:
            d = decide("sync", "async", speedup=sy, rival_speedup=asy, rival_interval=ci)
        lines.append(f"synchronous (P1) same thresholds: {sy:.4f}x -> {d['text']}")
    if rep["async_over_sync_bounds"] is not None:
        lo, hi = rep["async_over_sync_bounds"]
        lines.append(f"  async / sync is provably in [{lo:.4f}, {hi:.4f}] (AS4)")
    return "\n".join(lines)
