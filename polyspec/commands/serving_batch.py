"""``--batch`` for ``polyspec predict`` and ``polyspec plan``: the synchronised serving-batch
theory (B0–B6, docs/theory.md Part III-C) as reports and plain text."""

from __future__ import annotations

MODEL_NOTE = ("lockstep batch (B0): every forward is batched over all b slots and padded to "
              "the longest block; a level waits for the sequence needing the most rounds; "
              "acceptance independent per sequence; costs T_i(b, m)")


def parse_batches(text, field: str = "--batch") -> list[int]:
    """``"1,2,4,8,16"`` -> ``[1, 2, 4, 8, 16]`` (errors name the option)."""
    from polyspec_theory.core.costs import MAX_BATCH_SIZE
    from polyspec_theory.errors import PolyspecInputError

    parts = [p.strip() for p in str(text).split(",")]
    out = []
    for p in parts:
        if not p.isdigit() or not 1 <= int(p) <= MAX_BATCH_SIZE:
            raise PolyspecInputError(
                field, f"must be comma-separated batch sizes in 1..{MAX_BATCH_SIZE} (e.g. "
                f"1,2,4,8,16), got {text!r}")
        out.append(int(p))
    if len(set(out)) != len(out):
        raise PolyspecInputError(field, f"lists a batch size twice: {text!r}")
    return out


def _cost_kind(cost) -> str:
    from polyspec_theory.core.costs import BatchTableCost, RooflineCost

    if isinstance(cost, RooflineCost):
        return "roofline"
    if isinstance(cost, BatchTableCost):
        return f"batch_table (b = {', '.join(map(str, cost.batches))})"
    return "plain (independent of b)"


def predict_batch_report(cascade, batches, max_threshold: int = 16) -> dict:
    """The JSON object of ``predict --batch``: ``batches`` (one row per batch size: batch,
    speedup, tokens_per_time, thresholds_optimal, speedup_optimal, ...), the crossover (B6)
    and, for roofline costs, the large-batch limit (B5)."""
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.serving.batch import batch_sweep, crossover_batch, large_batch_limit

    pts = batch_sweep(cascade, batches, max_threshold)
    cross = crossover_batch(cascade, max_threshold=max_threshold)
    try:
        limit = large_batch_limit(cascade)
    except PolyspecInputError as e:
        limit = {"unavailable": str(e)}
    return {
        "config": cascade.to_config(),
        "model": MODEL_NOTE,
        "thresholds": list(cascade.thresholds),
        "max_threshold": max_threshold,
        "costs": {m.name: _cost_kind(m.cost) for m in cascade.models},
        "batches": [p.to_dict() for p in pts],
        "crossover": cross.to_dict(),
        "large_batch_limit": limit,
        "time_base": "the config's cost units; speedup = T_1(b,1) / tau_b (throughput ratio "
                     "against autoregressive M_1 at the same batch)",
    }


def explain_predict_batches(rep: dict) -> str:
    th = rep["thresholds"]
    lines = [f"Serving batches: {rep['model']}.",
             "Costs: " + "; ".join(f"{k}: {v}" for k, v in rep["costs"].items()), "",
             f"{'batch':>6} {'speedup':>8} {'tokens/time':>12} {'AR tok/time':>12} "
             f"{'unsync P1':>9} {'E[max N] per level':>22} {'idle %':>12}   "
             f"optimal thresholds (1..{rep['max_threshold']}) -> speedup"]
    for p in rep["batches"]:
        phis = ", ".join(f"{x:.2f}" for x in p["phi_batch"][:-1]) or "-"
        idle = ", ".join(f"{100 * x:.0f}" for x in p["idle_share"][:-1]) or "-"
        lines.append(
            f"{p['batch']:>6} {p['speedup']:>7.3f}x {p['tokens_per_time']:>12.4g} "
            f"{p['autoregressive_tokens_per_time']:>12.4g} {p['speedup_unsynchronised']:>8.3f}x "
            f"{phis:>22} {idle:>12}   {p['thresholds_optimal']} -> "
            f"{p['speedup_optimal']:.3f}x")
    lines.append(f"(speedup at thresholds {th}; unsync P1 = the same costs without waiting for "
                 "the slowest sequence)")
    c = rep["crossover"]
    if c["batch"] is None:
        lines.append(f"Crossover (B6): speculation at its optimal thresholds still pays at every "
                     f"probed batch up to {c['max_batch']}.")
    elif c["batch"] == 1:
        lines.append("Crossover (B6): speculation does not pay even at batch 1.")
    else:
        ev = c["evaluated"]
        b = c["batch"]
        lines.append(f"Crossover (B6): speculation at its optimal thresholds stops paying at "
                     f"batch {b} (optimal speedup {ev[str(b - 1)]:.4f}x at {b - 1}, "
                     f"{ev[str(b)]:.4f}x at {b}).")
    lim = rep["large_batch_limit"]
    if "speedup" in lim:
        lines.append(f"Large-batch limit (B5) at thresholds {th}: {lim['speedup']:.4f}x "
                     f"(compute-bound bound E[L_1]/(G_max+1) = {lim['bound']:.4f}).")
    free = [k for k, v in rep["costs"].items() if v.startswith("plain")]
    if free:
        lines.append(f"Note: the costs of {', '.join(free)} do not depend on b (plain costs); "
                     "give a batch_table or roofline cost to model the load.")
    lines.append("Time base: " + rep["time_base"] + ".")
    return "\n".join(lines)


def run_predict(args, cascade) -> int:
    """``predict CONFIG --batch ...``."""
    from polyspec_theory.core.config import MAX_THRESHOLD
    from polyspec_theory.errors import as_int
    from validation.files import dump_json

    batches = parse_batches(args.batch)
    mt = as_int(args.max_threshold, "--max-threshold", low=1, high=MAX_THRESHOLD)
    rep = predict_batch_report(cascade, batches, mt)
    print(dump_json(rep) if args.json else explain_predict_batches(rep))
    return 0


def run_plan(args, pool) -> int:
    """``plan POOL --batch ...``."""
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.serving.plan import plan_batches
    from validation.files import dump_json

    for opt, val in (("--write-config", args.write_config), ("--write-pool", args.write_pool),
                     ("--no-prune", args.no_prune)):
        if val:
            raise PolyspecInputError(opt, "does not apply with --batch")
    plans = plan_batches(pool, parse_batches(args.batch))
    print(dump_json(plan_batch_report(plans, pool)) if args.json
          else explain_plan_batches(plans, pool))
    return 0


def plan_batch_report(plans, pool) -> dict:
    return {"model": MODEL_NOTE, "pool": {"name": pool.name, "models": list(pool.names)},
            "max_threshold": pool.max_threshold, "batches": [p.to_dict() for p in plans]}


def explain_plan_batches(plans, pool) -> str:
    lines = [f"Pool {pool.name!r} in serving batches: {MODEL_NOTE}.",
             f"{'batch':>6}  best cascade (thresholds 1..{pool.max_threshold})"]
    for p in plans:
        cert = "certified optimal" if p.certified else "best of the chains examined"
        two = p.best_two_model
        lines.append(
            f"{p.batch:>6}  {' <- '.join(p.chain)} {list(p.thresholds)}: {p.speedup:.4f}x "
            f"({cert}; {p.chains_examined} chain(s) searched); best two-model "
            f"{' <- '.join(two['chain'])} {two['thresholds']}: {two['speedup']:.4f}x"
            + ("" if p.beats_autoregressive else "  -> autoregressive is faster"))
    lines.append("Time base: the pool's cost units; speedup = T_1(b,1) / tau_b.")
    return "\n".join(lines)
