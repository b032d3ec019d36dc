"""``"mode": "async"`` in predict, simulate and plan (docs/theory.md Part VI-AS): the
asynchronous pipeline's speedup (AS1 exact for two levels; the simulator with the AS3 bound
pair for more) next to the synchronous one (P1)."""

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
    """``predict --json`` in async mode: AS1 (n = 2) or the simulator + AS3 bounds (n >= 3),
    the synchronous P1 of the same cascade and AS4's ratio bounds where they apply."""
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
    else:
        out["method"] = "exact (AS1, two-level Markov chain)"
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


def best_two_level_async(cascade, max_threshold: int):
    """AS1 over thresholds 0..max_threshold of a two-level cascade: (speedup, threshold)."""
    from polyspec_theory import predict_async

    best = None
    for th in range(max_threshold + 1):
        c = dataclasses.replace(cascade, thresholds=(th,), mode="async", queues=None)
        s = predict_async(c).speedup
        if best is None or s > best[0]:
            best = (s, th)
    return best


# decoders that run an asynchronous pipeline (docs/theory.md AS0): PipeSpec's
# AsyncChainSpeculativeDecoder and our own `polyspec capture --mode async`
ASYNC_ENGINES = ("pipespec", "polyspec")


def plan_modes(pool, result, sync_interval=None) -> dict:
    """Sync vs async per planned chain: two-model chains exactly (AS1, best threshold incl. 0);
    longer chains get AS3's upper bound at their sync thresholds (simulate to settle them).
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
            "note": ("async for chains of 3+ models: AS3 bounds only; `polyspec simulate "
                     "CONFIG --mode async` settles an 'undecided' row")}


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

    if len(chain) == 2:
        sy = (sync["speedup"], sync["thresholds"][0])
        asy = best_two_level_async(pool.cascade(chain, (1,)), pool.max_threshold)
        return {"chain": list(chain), "sync": {"speedup": sy[0], "thresholds": [sy[1]]},
                "async": {"speedup": asy[0], "thresholds": [asy[1]], "exact": True},
                "faster_mode": "async" if asy[0] > sy[0] else "sync"}
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
                                            if rec["mode"] == "async" else ")"))
    if probability_best is None:
        lines.append(f"Run: {choice}")
    else:  # plan --traces: the cascade itself is uncertain; the same rule decides
        from .advice import decide

        d = decide(choice, "the runner-up", probability_best=probability_best)
        lines.append(f"Run: {d['text'].removeprefix('run ')}" if d["decision"] == "confident"
                     else f"Not decided: {d['text']}")
    if "not_advised" in rec:
        n = rec["not_advised"]
        lines.append(f"  async {' <- '.join(n['chain'])} thresholds {n['thresholds']} "
                     f"({n['speedup']:.4f}x) not advised: {n['why']}")
    lines.append(f"note: {modes['note']}")
    return "\n".join(lines)
