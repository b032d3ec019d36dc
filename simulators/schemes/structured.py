"""``structured``: trees and schedules (:func:`simulators.structures.simulate_structured`),
each chain running the top-level rounds that about ``budget.tokens`` tokens take (sized from
the exact mean emitted per top-level round; sizing only)."""

from __future__ import annotations

import math

from polyspec_theory.structures.structured import predict_structured
from simulators.length import estimate_events
from simulators.structures import simulate_structured

name = "structured"
source = "simulators/structures.py"
unit = "verification rounds"
sized_by = "tokens"  # the budget field that sizes a run
default_max_events = 1e9


def rounds_for(cascade, tokens: int, chains: int) -> int:
    """Top-level rounds per chain for about ``tokens`` tokens over ``chains`` chains."""
    per_round = predict_structured(cascade).prediction.levels[0].mean_emitted
    return max(1, math.ceil(tokens / (chains * per_round)))


def work(cascade, budget) -> float:
    """Expected verification rounds (the exact forwards per token x tokens)."""
    return estimate_events(cascade, max(budget.tokens, budget.chains))


def simulate(cascade, budget, key):
    w = work(cascade, budget)
    budget.refuse_work(w, f"this run needs about {w:.3g} verification rounds ({cascade.n} "
                       f"models, {budget.tokens:,} tokens)", budget.cap(default_max_events),
                       budget.name("tokens"))
    return simulate_structured(cascade, rounds_for(cascade, budget.tokens, budget.chains), key,
                               chains=budget.chains)


def report(cascade, result) -> dict:
    """The simulator's estimates with the exact values alongside."""
    sp = predict_structured(cascade)
    out = result.to_dict()
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": sp.speedup,
                         "time_per_token": sp.prediction.time_per_token,
                         "finite_horizon_speedup": sp.finite_horizon(
                             result.burn_in, result.rounds_per_chain)["speedup"]}
    for lv, lp in zip(out["levels"], sp.prediction.levels, strict=True):
        lv["theory"] = {"phi": lp.phi, "mean_block": lp.mean_block,
                        "mean_emitted": lp.mean_emitted if lp.block_pmf is not None else None,
                        "forwards_per_token": lp.forwards_per_token,
                        "time_share": lp.time_share}
    out["pairs"] = [dict(p) for p in sp.pairs]
    return out


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def explain(cascade, result) -> str:
    sp = predict_structured(cascade)
    s = result.speedup
    lines = [
        f"cascade {cascade.name!r}: {cascade.n} models, policy {cascade.policy}; pairs: "
        + ", ".join(p["kind"] for p in sp.pairs),
        f"simulated {result.tokens} tokens: {result.chains} independent chains x "
        f"{result.rounds_per_chain} top-level rounds after {result.burn_in} burn-in rounds, "
        f"seed {result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   "
        f"exact {sp.speedup:.4f}",
        f"CI: {result.ci_method}",
        "",
        f"{'model':<12}{'phi MC':>10}{'phi':>10}{'E[G] MC':>10}{'E[G]':>10}{'E[L] MC':>10}"
        f"{'E[L]':>10}{'fwd/tok MC':>12}{'fwd/tok':>10}",
    ]
    for ls, lp in zip(result.levels, sp.prediction.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{_f(ls.phi and ls.phi.value):>10}{_f(lp.phi):>10}"
            f"{_f(ls.mean_block and ls.mean_block.value):>10}{_f(lp.mean_block):>10}"
            f"{_f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{_f(lp.mean_emitted if lp.block_pmf is not None else None):>10}"
            f"{ls.forwards_per_token.value:>12.4f}{lp.forwards_per_token:>10.4f}")
    return "\n".join(lines)
