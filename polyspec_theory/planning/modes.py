"""Sync vs async for ``polyspec plan`` (docs/theory.md Part VI-AS): per planned chain, the
best synchronous thresholds (P1) beside the asynchronous pipeline (exact: AS1 for two models,
AS7 for more where its chain is small enough; otherwise AS3's bounds), and the mode to run."""

from __future__ import annotations

import dataclasses

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.pipelines.asynchronous import async_bounds
from polyspec_theory.planning.advice import decide
from polyspec_theory.schemes import predict

__all__ = ["plan_modes", "modes_text"]


def plan_modes(pool, result) -> dict:
    """Sync vs async per planned chain, async by
    :func:`polyspec_theory.planning.async_plan.plan_async` (exact: AS1 over thresholds
    ``0..max_threshold``, AS7 over ``0..3`` per pair for longer chains); a chain whose AS7 chain
    is too large gets AS3's bounds at its sync thresholds (simulate to settle it).
    ``recommendation``: the mode and cascade with the largest exact speedup."""
    rows = []
    seen = set()
    target = pool.names[0]
    cands = [result.best, *result.alternatives, result.best_two_model]
    for d in pool.names[1:]:
        try:
            pool.law(target, d)
        except PolyspecInputError:  # the pair is not in the pool
            continue
        cands.append((target, d))
    for cand in cands:
        chain = tuple(cand if isinstance(cand, tuple) else cand.chain)
        if chain in seen:
            continue
        seen.add(chain)
        rows.append(_mode_row(pool, chain, cand))
    best = max([(r["sync"]["speedup"], "sync", r) for r in rows]
               + [(r["async"]["speedup"], "async", r) for r in rows
                  if r["async"]["speedup"] is not None],
               key=lambda x: x[0])
    return {"chains": rows,
            "recommendation": {"mode": best[1], "chain": best[2]["chain"],
                               "thresholds": best[2][best[1]]["thresholds"],
                               "speedup": best[0]},
            "note": ("async values are exact (AS1, AS7); a chain whose AS7 chain is too large "
                     "shows AS3's bounds: `polyspec simulate CONFIG --mode async` settles an "
                     "'undecided' row")}


def _mode_row(pool, chain, cand) -> dict:
    if len(chain) == 2:
        sy = max((predict(pool.cascade(chain, (t,))).speedup, t)
                 for t in range(1, pool.max_threshold + 1))
        sync = {"speedup": sy[0], "thresholds": [sy[1]]}
    else:
        sync = {"speedup": cand.speedup, "thresholds": list(cand.thresholds)}
    try:
        return _async_row(pool, chain, cand, sync)
    except PolyspecInputError as e:  # e.g. a cap-conditional law: AS0 does not cover it
        return {"chain": list(chain), "sync": sync,
                "async": {"speedup": None, "not_covered": str(e)}, "faster_mode": "sync"}


def _async_row(pool, chain, cand, sync) -> dict:
    from polyspec_theory.planning.async_plan import plan_async

    asy = plan_async(pool, chain)
    if asy is not None:
        return {"chain": list(chain), "sync": sync, "async": asy.to_dict(),
                "faster_mode": "async" if asy.speedup > sync["speedup"] else "sync"}
    th = cand.thresholds
    lo, hi = async_bounds(dataclasses.replace(pool.cascade(chain, th), mode="async"))
    return {"chain": list(chain), "sync": {"speedup": cand.speedup, "thresholds": list(th)},
            "async": {"speedup": None, "bounds": [lo, hi], "thresholds": list(th),
                      "exact": False},
            "faster_mode": "sync" if hi <= cand.speedup else "undecided"}


def modes_text(modes: dict, probability_best=None) -> str:
    lines = ["Sync vs async pipeline (docs/theory.md Part VI-AS):"]
    for r in modes["chains"]:
        a = r["async"]
        if "not_covered" in a:
            lines.append(f"  {' <- '.join(r['chain'])}: sync {r['sync']['speedup']:.4f}x; "
                         f"async not covered: {a['not_covered']}")
            continue
        av = (f"{a['speedup']:.4f}x {a['thresholds']}" if a["speedup"] is not None else
              f"in [{a['bounds'][0]:.4f}, {a['bounds'][1]:.4f}]x (AS3)")
        lines.append(f"  {' <- '.join(r['chain'])}: sync {r['sync']['speedup']:.4f}x "
                     f"{r['sync']['thresholds']}, async {av} -> {r['faster_mode']}")
    rec = modes["recommendation"]
    choice = (f"{' <- '.join(rec['chain'])} {rec['mode']} thresholds {rec['thresholds']} "
              f"({rec['speedup']:.4f}x; threshold 0 = verify what is ready)")
    if probability_best is None:
        lines.append(f"Run: {choice}")
    else:  # plan --traces: the cascade itself is uncertain; the same rule decides
        d = decide(choice, "the runner-up", probability_best=probability_best)
        lines.append(f"Run: {d['text'].removeprefix('run ')}" if d["decision"] == "confident"
                     else f"Not decided: {d['text']}")
    lines.append(f"note: {modes['note']}")
    return "\n".join(lines)
