"""``"mode": "async"`` in predict, simulate and plan (docs/theory.md Part VI-AS): the
asynchronous pipeline's speedup (exact: AS1 for two levels, AS7 for more where its chain is
small enough; otherwise the simulator with the AS3 bound pair) next to the synchronous one
(P1)."""

from __future__ import annotations

import dataclasses

from polyspec_theory.errors import PolyspecInputError

SIM_EVENTS = 20_000  # events per chain when predict needs the simulator (n >= 3)
SIM_CHAINS = 64


def _sync_twin(cascade):
    """The same cascade run synchronously (None where a threshold is 0: no sync meaning)."""
    from polyspec_theory.schemes import in_mode

    try:
        return in_mode(cascade, "sync")
    except PolyspecInputError as e:
        if e.field != "mode":
            raise
        return None


def async_report(cascade, seed: int = 0) -> dict:
    """``predict --json`` in async mode: exact (AS1 for n = 2, AS7 for n >= 3 where its
    chain is small enough) or else the simulator with AS3's bounds, the synchronous P1 of the
    same cascade and AS4's ratio bounds where they apply."""
    from polyspec_theory import predict, predict_async, sync_ratio_bounds

    pred = predict_async(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    if not pred.exact:
        from simulators.asynchronous import simulate_async

        res = simulate_async(cascade, SIM_EVENTS, seed, chains=SIM_CHAINS)
        out["speedup"] = res.speedup.value
        out["time_per_token"] = cascade.models[0].cost.t1 / res.speedup.value
        out["speedup_ci95"] = [res.speedup.low, res.speedup.high]
        out["method"] = (f"Monte Carlo (simulators/asynchronous.py, {SIM_CHAINS} chains x "
                         f"{SIM_EVENTS} events, seed {seed}); exact bounds AS3")
    elif cascade.n == 2:
        out["method"] = "exact (AS1, two-level Markov chain)"
    else:
        out["method"] = f"exact (AS7, {cascade.n}-level Markov chain)"
    twin = _sync_twin(cascade)
    out["sync"] = None if twin is None else {"speedup": predict(twin).speedup}
    ratio = sync_ratio_bounds(cascade)
    out["async_over_sync_bounds"] = None if ratio is None else list(ratio)
    if twin is not None:
        out["faster_mode"] = "async" if out["speedup"] > out["sync"]["speedup"] else "sync"
    return out


def async_text(rep: dict) -> str:
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
        from .advice import decide

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
        from polyspec_theory import predict

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
    from polyspec_theory import async_bounds
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
        from .advice import decide

        d = decide(choice, "the runner-up", probability_best=probability_best)
        lines.append(f"Run: {d['text'].removeprefix('run ')}" if d["decision"] == "confident"
                     else f"Not decided: {d['text']}")
    lines.append(f"note: {modes['note']}")
    return "\n".join(lines)
