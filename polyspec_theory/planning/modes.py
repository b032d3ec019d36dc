"""Sync vs async for ``polyspec plan`` (docs/theory.md Part VI-AS): per planned chain, the
best synchronous thresholds (P1) beside the asynchronous pipeline (exact: AS1 for two models,
AS7 for more where its chain is small enough; otherwise AS3's bounds), and the mode to run."""

from __future__ import annotations

import dataclasses

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.pipelines.asynchronous import async_bounds
from polyspec_theory.planning.advice import decide
from polyspec_theory.planning.async_plan import plan_async
from polyspec_theory.schemes import predict, threshold_floor

__all__ = ["ASYNC_ENGINES", "plan_modes", "modes_text"]

# decoders that run an asynchronous pipeline (docs/theory.md AS0): PipeSpec's
# AsyncChainSpeculativeDecoder and our own `polyspec capture --mode async`
ASYNC_ENGINES = ("pipespec", "polyspec")


def plan_modes(pool, result, sync_interval=None) -> dict:
    """Sync vs async per planned chain, async by
    :func:`polyspec_theory.planning.async_plan.plan_async` (exact: AS1 over thresholds
    ``0..max_threshold``, AS7 over ``0..3`` per pair for longer chains); a chain whose AS7 chain
    is too large gets AS3's bounds at its sync thresholds (simulate to settle it).
    ``recommendation``: ONE plan -- the best synchronous cascade, unless a faster async
    pipeline is advised: the pool's ``engine`` runs one (:data:`ASYNC_ENGINES`) and its
    interval clears the synchronous best's (``sync_interval``: that 95 % interval; the async
    value is given the same relative widths, its laws and costs being the same; none: the
    exact values decide)."""
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
    sync = max(((r["sync"]["speedup"], r) for r in rows), key=lambda x: x[0])
    asy = max(((r["async"]["speedup"], r) for r in rows if r["async"]["speedup"] is not None),
              key=lambda x: x[0], default=None)
    rec = {"mode": "sync", "chain": sync[1]["chain"],
           "thresholds": sync[1]["sync"]["thresholds"], "speedup": sync[0]}
    if sync_interval is not None:
        rec["interval95"] = list(sync_interval)
    if asy is not None and asy[0] > sync[0]:
        why = _async_not_advised(pool, asy[0], sync[0], sync_interval)
        alt = {"mode": "async", "chain": asy[1]["chain"],
               "thresholds": asy[1]["async"]["thresholds"], "speedup": asy[0]}
        if why is None:
            rec = alt
        else:
            rec["not_advised"] = {**alt, "why": why}
    return {"chains": rows, "recommendation": rec,
            "note": ("async values are exact (AS1, AS7); a chain whose AS7 chain is too large "
                     "shows AS3's bounds: `polyspec simulate CONFIG --mode async` settles an "
                     "'undecided' row")}


def _async_not_advised(pool, asy, sy, sync_interval) -> str | None:
    """Why a faster async pipeline is not the plan (None: it is)."""
    engine = getattr(pool, "engine", None)
    if engine is None or engine.lower() not in ASYNC_ENGINES:
        named = ("the pool names no engine" if engine is None else
                 f"engine {engine!r} does not run one")
        return (f"{named} that runs an asynchronous pipeline (set \"engine\" in the pool "
                f"to one of {', '.join(ASYNC_ENGINES)} if yours does)")
    if sync_interval is not None:
        lo, hi = sync_interval
        asy_lo = asy * lo / sy  # the async value with the sync best's relative width
        if not asy_lo > hi:
            return (f"its gain ({100 * (asy / sy - 1):+.1f} %) is inside the uncertainty: "
                    f"async {asy:.4f}x [{asy_lo:.4f}, ...] overlaps sync {sy:.4f}x "
                    f"[{lo:.4f}, {hi:.4f}] (95 %)")
    return None


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
                     f"{r['sync']['thresholds']}, async {av} -> faster: {r['faster_mode']}")
    rec = modes["recommendation"]
    choice = (f"{' <- '.join(rec['chain'])} {rec['mode']} thresholds {rec['thresholds']} "
              f"({rec['speedup']:.4f}x" + ("; threshold 0 = verify what is ready)"
                                            if threshold_floor(rec["mode"]) == 0 else ")"))
    if probability_best is None:
        lines.append(f"Run: {choice}")
    else:  # plan --traces: the cascade itself is uncertain; the same rule decides
        d = decide(choice, "the runner-up", probability_best=probability_best)
        lines.append(f"Run: {d['text'].removeprefix('run ')}" if d["decision"] == "confident"
                     else f"Not decided: {d['text']}")
    if "not_advised" in rec:
        n = rec["not_advised"]
        lines.append(f"  async {' <- '.join(n['chain'])} thresholds {n['thresholds']} "
                     f"({n['speedup']:.4f}x) not advised: {n['why']}")
    lines.append(f"note: {modes['note']}")
    return "\n".join(lines)
