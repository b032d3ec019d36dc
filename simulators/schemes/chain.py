"""``chain``: the length-level Monte Carlo of P1's rounds (:func:`simulators.length.
simulate_lengths`), ``budget.tokens`` tokens over ``budget.chains`` chains."""

from __future__ import annotations

import math

from polyspec_theory.core.p1 import block_bounds, predict_chain
from polyspec_theory.errors import PolyspecInputError
from simulators.length import estimate_events, histograms_fit, simulate_lengths

name = "chain"
source = "simulators/length.py"
unit = "verification rounds"
default_max_events = 1e9  # ~30 s for 4 models on a 2-core CPU, minutes for many models
MIN_EVENTS_PER_CHAIN = 1024  # the overrun guard never stops a chain before this


def work(cascade, budget) -> float:
    """Expected verification rounds: P1's forwards per token of the verifying models x
    tokens."""
    return estimate_events(cascade, max(budget.tokens, budget.chains))


def refuse_work(cascade, budget) -> float:
    """Refuse a run expected past the cap (each event one verification round of one
    sequence); returns the cap."""
    cap = budget.cap(default_max_events)
    budget.refuse_work(work(cascade, budget), f"this run needs about "
                       f"{work(cascade, budget):.3g} verification rounds ({cascade.n} models, "
                       f"{budget.tokens:,} tokens; P1's forwards per token of the verifying "
                       "models x tokens)", cap, budget.name("tokens"))
    return cap


def simulate(cascade, budget, key):
    cap = refuse_work(cascade, budget)
    # the overrun guard: no chain may run past twice its share of the cap
    per_chain = max(MIN_EVENTS_PER_CHAIN, math.ceil(2 * cap / budget.chains))
    try:
        return simulate_lengths(cascade, budget.tokens, key, chains=budget.chains,
                                progress=budget.progress, max_events=per_chain)
    except PolyspecInputError as e:
        if e.field != "max_events":
            raise
        raise PolyspecInputError(
            budget.name("max_events"), f"the run went past twice the limit {cap:.3g} ({e}); "
            f"raise {budget.name('max_events')} to let it finish") from None


def _notes(cascade) -> list[str]:
    if histograms_fit(cascade):
        return []
    return ["block/emitted histograms omitted: blocks up to "
            f"{max(block_bounds(cascade.thresholds, cascade.policy))} tokens are too wide to "
            "tabulate (every other estimate is unaffected)"]


def report(cascade, result) -> dict:
    """``speedup``, ``ci95``, ``levels`` (each with the P1 value alongside), ``notes``."""
    prediction = predict_chain(cascade)
    out = result.to_dict()
    out["notes"] = _notes(cascade)
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": prediction.speedup,
                         "time_per_token": prediction.time_per_token}
    for lv, lp in zip(out["levels"], prediction.levels, strict=True):
        lv["p1"] = {"phi": lp.phi, "mean_block": lp.mean_block,
                    "mean_emitted": lp.mean_emitted if lp.block_pmf is not None else None,
                    "forwards_per_token": lp.forwards_per_token, "time_share": lp.time_share}
    return out


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def explain(cascade, result) -> str:
    pred = predict_chain(cascade)
    s = result.speedup
    lines = [
        f"cascade {cascade.name!r}: {cascade.n} models, policy {result.policy}",
        f"simulated {result.tokens} tokens in {result.chains} independent chains, "
        f"seed {result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   "
        f"P1 exact {pred.speedup:.4f}",
        f"CI: {result.ci_method}",
        "",
        f"{'model':<12}{'phi MC':>10}{'phi P1':>10}{'E[G] MC':>10}{'E[G] P1':>10}"
        f"{'E[L] MC':>10}{'E[L] P1':>10}{'fwd/tok MC':>12}{'fwd/tok P1':>12}{'time %':>8}",
    ]
    for ls, lp in zip(result.levels, pred.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{_f(ls.phi and ls.phi.value):>10}{_f(lp.phi):>10}"
            f"{_f(ls.mean_block and ls.mean_block.value):>10}{_f(lp.mean_block):>10}"
            f"{_f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{_f(lp.mean_emitted if lp.block_pmf is not None else None):>10}"
            f"{ls.forwards_per_token.value:>12.4f}{lp.forwards_per_token:>12.4f}"
            f"{100 * ls.time_share:>8.1f}")
    lines.append("")
    lines += _histogram_lines(result)
    lines += [f"note: {n}" for n in _notes(cascade)]
    return "\n".join(lines)


def _histogram_lines(result) -> list[str]:
    lines = []
    for ls in result.levels:
        if ls.block_hist is None:
            continue
        tot = ls.block_hist.sum()
        bh = {g: c / tot for g, c in enumerate(ls.block_hist) if c}
        eh = {n: c / tot for n, c in enumerate(ls.emitted_hist) if c}
        lines.append(f"{ls.name}: block G " + " ".join(f"{g}:{p:.3f}" for g, p in bh.items()))
        lines.append(f"{' ' * len(ls.name)}  emitted L " +
                     " ".join(f"{n}:{p:.3f}" for n, p in eh.items()))
    return lines


__all__ = ["name", "source", "default_max_events", "work", "simulate", "report", "explain"]
