"""``polyspec simulate`` for cascades with token trees or adaptive draft lengths
(:mod:`simulators.structures` next to :mod:`polyspec_theory.structures.structured`)."""

from __future__ import annotations

import math


def structured_simulation_report(cascade, result, sp) -> dict:
    """The JSON object: the simulator's estimates with the exact values alongside."""
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


def _text(cascade, result, sp) -> str:
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

    def f(x):
        return "-" if x is None else f"{x:.4f}"

    for ls, lp in zip(result.levels, sp.prediction.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{f(ls.phi and ls.phi.value):>10}{f(lp.phi):>10}"
            f"{f(ls.mean_block and ls.mean_block.value):>10}{f(lp.mean_block):>10}"
            f"{f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{f(lp.mean_emitted if lp.block_pmf is not None else None):>10}"
            f"{ls.forwards_per_token.value:>12.4f}{lp.forwards_per_token:>10.4f}")
    return "\n".join(lines)


def run_structured(cascade, tokens: int, seed: int, chains: int, as_json: bool) -> int:
    """Simulate about ``tokens`` tokens: each chain runs a fixed number of top-level rounds,
    sized from the exact mean emitted per top-level round (sizing only)."""
    from polyspec_theory.structures.structured import predict_structured
    from simulators.structures import simulate_structured
    from validation.files import dump_json

    sp = predict_structured(cascade)
    per_round = sp.prediction.levels[0].mean_emitted
    rounds = max(1, math.ceil(tokens / (chains * per_round)))
    result = simulate_structured(cascade, rounds, seed, chains=chains)
    if as_json:
        print(dump_json(structured_simulation_report(cascade, result, sp)))
    else:
        print(_text(cascade, result, sp))
    return 0
