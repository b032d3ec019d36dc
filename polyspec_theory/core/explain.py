"""Plain-text explanations of predictions (pure: returns strings)."""

from __future__ import annotations

from polyspec_theory.core.config import Cascade
from polyspec_theory.core.p1 import Prediction


def law_text(law) -> str:
    """One line describing a chain acceptance law (as ``polyspec predict`` prints it)."""
    cfg = law.to_config()
    (k, v), = cfg.items()
    if k == "alpha":
        return f"iid alpha={v:.3g}"
    if k == "beta":
        return f"Beta-mixed a={v[0]:.3g} b={v[1]:.3g} (mean alpha {v[0] / (v[0] + v[1]):.3g})"
    if k == "positional":
        return "positional " + ",".join(f"{x:.3g}" for x in v)
    return f"gaussian mu={v[0]:.3g} sigma={v[1]:.3g}"


def explain_prediction(cascade: Cascade, pred: Prediction, approximation=None) -> str:
    """Where the time goes in ``cascade`` according to P1 (and, if given, how far the
    polybasic paper's Lemma 3.1 approximation is from it)."""
    names = [m.name for m in cascade.models]
    unit = cascade.time_unit or "model-cost units"
    lines = [
        f"Cascade {cascade.name!r}: " + " <- ".join(names)
        + f"  ({cascade.n} levels, block policy: {pred.policy})",
        f"Predicted speedup over autoregressive {names[0]}: {pred.speedup:.3f}x "
        f"(exact P1, renewal-reward; time base: {unit}; baseline T_1(1))",
        f"Time per token: {pred.time_per_token:.4g} vs {pred.autoregressive_time_per_token:.4g} "
        "autoregressive",
        "",
        "Pairs (verifier <- drafter):",
    ]
    for i in range(cascade.n - 1):
        lv = pred.levels[i]
        lines.append(
            f"  {names[i]} <- {names[i + 1]}: {law_text(cascade.laws[i])}, threshold "
            f"{cascade.thresholds[i]}; mean block E[G]={lv.mean_block:.3f}, "
            f"emitted per verify E[L]={lv.mean_emitted:.3f}"
        )
    lines += ["", f"  {'model':<12}{'phi':>8}{'fwd/token':>11}{'cost/fwd':>10}{'time/token':>12}"
              f"{'share':>8}"]
    for lv in pred.levels:
        phi = "-" if lv.phi is None else f"{lv.phi:.3f}"
        lines.append(
            f"  {lv.name:<12}{phi:>8}{lv.forwards_per_token:>11.3f}{lv.forward_cost:>10.4g}"
            f"{lv.time_per_token:>12.4g}{100 * lv.time_share:>7.1f}%"
        )
    over = [lv for lv in pred.levels if lv.overhead]
    if over:
        lines.append("  per-round overhead (in time/token, not in cost/fwd): " + ", ".join(
            f"{lv.name} {lv.overhead:.4g} per verification" for lv in over))
    top = max(pred.levels, key=lambda lv: lv.time_share)
    lines += [
        "",
        f"Most time goes to {top.name} ({100 * top.time_share:.1f}%). phi = expected rounds of "
        "the level below per block; fwd/token = forwards of that model per generated token.",
    ]
    if approximation is not None:
        lines.append(
            f"The paper's Lemma 3.1 (pairwise E[L], fixed blocks) would predict "
            f"{approximation.speedup:.3f}x: {100 * approximation.speedup_relative_error:+.1f}% "
            "off the exact value."
        )
    if pred.speedup < 1:
        lines.append("Warning: this cascade is SLOWER than autoregressive decoding of the target.")
    return "\n".join(lines)
