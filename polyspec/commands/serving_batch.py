"""``polyspec plan --batch``: the best cascade per serving batch (B6, docs/theory.md Part
III-C) as a report and plain text (``predict --batch`` is the batch scheme's own report,
:mod:`polyspec_theory.schemes.batch`)."""

from __future__ import annotations

from .common import parse_batches


def run_plan(args, pool) -> int:
    """``plan POOL --batch ...``."""
    from polyspec_theory.errors import refuse_options
    from polyspec_theory.serving.plan import plan_batches

    from ..output import dump_json

    refuse_options((("--write-config", args.write_config), ("--write-pool", args.write_pool),
                    ("--no-prune", args.no_prune)), "does not apply with --batch")
    plans = plan_batches(pool, parse_batches(args.batch))
    print(dump_json(plan_batch_report(plans, pool)) if args.json
          else explain_plan_batches(plans, pool))
    return 0


def plan_batch_report(plans, pool) -> dict:
    from polyspec_theory.schemes.batch import MODEL_NOTE

    return {"model": MODEL_NOTE, "pool": {"name": pool.name, "models": list(pool.names)},
            "max_threshold": pool.max_threshold, "batches": [p.to_dict() for p in plans]}


def explain_plan_batches(plans, pool) -> str:
    from polyspec_theory.schemes.batch import MODEL_NOTE

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
