"""``chain``: the length-level Monte Carlo of P1's rounds (:func:`simulators.length.
simulate_lengths`), ``budget.tokens`` tokens over ``budget.chains`` chains; a run law or
PipeSpec's round (R1): :func:`simulators.runs.simulate_runs`, which draws every output
position's agreement from the run law, each chain running the rounds that about
``budget.tokens / budget.chains`` tokens take (sized from R1's exact tokens per round)."""

from __future__ import annotations

import math
import zlib

from polyspec_theory.core.config import Cascade
from polyspec_theory.core.p1 import block_bounds, predict_chain
from polyspec_theory.core.runs import ROUND_TEXT, predict_runs, uses_runs
from polyspec_theory.errors import PolyspecInputError
from simulators.checks import ci_row
from simulators.length import estimate_events, histograms_fit, simulate_lengths
from simulators.replay import replay_cascade
from simulators.runs import DEFAULT_BURN_IN, simulate_runs

name = "chain"
source = "simulators/length.py"
unit = "verification rounds"
sized_by = "tokens"  # the budget field that sizes a run
default_max_events = 1e9  # ~30 s for 4 models on a 2-core CPU, minutes for many models
MIN_EVENTS_PER_CHAIN = 1024  # the overrun guard never stops a chain before this


def work(cascade, budget) -> float:
    """Expected verification rounds: P1's forwards per token of the verifying models x
    tokens (R1: the rounds run, burn-in included; PipeSpec's replay: the tokens)."""
    if uses_runs(cascade) and cascade.n > 2:
        return float(max(budget.tokens, budget.chains))
    if uses_runs(cascade):
        return float(budget.chains * (_rounds(cascade, budget) + DEFAULT_BURN_IN))
    return estimate_events(cascade, max(budget.tokens, budget.chains))


def _rounds(cascade, budget) -> int:
    """Measured rounds per chain for about ``budget.tokens`` tokens (R1's tokens per round;
    sizing only)."""
    per_round = predict_runs(cascade).tokens_per_round
    return max(1, math.ceil(budget.tokens / (budget.chains * per_round)))


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
    if uses_runs(cascade) and cascade.n > 2:  # PipeSpec's chain decoder, replayed
        return replay_cascade(cascade, budget.tokens, key, chains=budget.chains)
    if uses_runs(cascade):
        return simulate_runs(cascade, _rounds(cascade, budget), key, chains=budget.chains)
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
    """``speedup``, ``ci95``, ``levels`` (each with the P1 value alongside), ``notes`` (R1:
    the exact tokens per round and speedup beside the estimates)."""
    if uses_runs(cascade) and cascade.n > 2:
        return {**result.to_dict(), "config": cascade.to_config(), "prediction": None,
                "kernel": "PipeSpec's chain decoder replayed (simulators/replay.py); no "
                          "exact theory for three or more models"}
    if uses_runs(cascade):
        pred = predict_runs(cascade)
        return {**result.to_dict(), "config": cascade.to_config(),
                "prediction": {"speedup": pred.speedup, "time_per_token": pred.time_per_token,
                               "tokens_per_round": pred.tokens_per_round, "round": pred.round,
                               "method": "exact R1"}}
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
    if uses_runs(cascade):
        return _runs_text(cascade, result)
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


def _runs_text(cascade, result) -> str:
    if cascade.n > 2:
        s = result.speedup
        return "\n".join([
            f"cascade {cascade.name!r}: {cascade.n} models, PipeSpec's chain decoder replayed "
            f"(lookahead {result.lookahead}; simulators/replay.py)",
            f"simulated {result.tokens} tokens in {result.chains} prompts, seed {result.seed}",
            f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   (no exact theory "
            "for three or more models)",
            "tokens per verify call: " + ", ".join(
                f"{m.name} {x:.3f}" for m, x in zip(cascade.models, result.tokens_per_verify,
                                                    strict=False))])
    pred = predict_runs(cascade)
    s, k = result.speedup, result.tokens_per_round
    return "\n".join([
        f"cascade {cascade.name!r}: 2 models, acceptance as runs over output positions (R1)",
        f"round policy: {ROUND_TEXT[result.round]}",
        f"simulated {result.tokens} tokens: {result.chains} independent chains x "
        f"{result.rounds_per_chain} rounds after {result.burn_in} burn-in rounds, seed "
        f"{result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   R1 exact "
        f"{pred.speedup:.4f}",
        f"tokens per round  MC {k.value:.4f}  95% CI [{k.low:.4f}, {k.high:.4f}]   R1 exact "
        f"{pred.tokens_per_round:.4f}"])


# --- the rows of ``polyspec verify`` (R1: docs/theory.md Part III-E) -------------------------
verify_key = "R"
DEFAULT_ROUNDS = 20_000  # measured rounds per chain of a quick row (10x in a full run)
_RUN_LAW = {"run_hazard": [0.45, 0.3, 0.2, 0.12, 0.08], "tail": 0.04}  # runs persist with age
_STEP_COST = {"table": [1.0, 1.34, 1.38, 1.42, 1.46, 1.5]}  # a step between m = 1 and 2
# (statement, config); new rows go last (a row's seed follows its index)
RUN_CASES = (
    ("R1 exact, run law, P1's round (the bonus position unchecked)",
     {"models": [{"name": "target", "cost": _STEP_COST}, {"name": "draft", "cost": 0.1}],
      "acceptance": [_RUN_LAW], "thresholds": [4]}),
    ("R1 exact, run law, PipeSpec's round (the bonus position re-checked)",
     {"models": [{"name": "target", "cost": _STEP_COST, "overhead": 0.05},
                 {"name": "draft", "cost": 0.1}],
      "acceptance": [_RUN_LAW], "thresholds": [4], "round": "pipespec"}),
    ("R1 exact, iid law, PipeSpec's round (not P1: the bonus re-check costs)",
     {"models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.05}],
      "acceptance": [{"alpha": 0.6}], "thresholds": [2], "round": "pipespec"}),
)


def verify(ctx) -> list:
    """R1 (the exact two-level chain under a run law, either round policy) against the
    simulator over positions (:mod:`simulators.runs`)."""
    rows = []
    for i, (statement, cfg) in enumerate(RUN_CASES):
        cas = Cascade.from_config(cfg)
        pred = predict_runs(cas)
        seed = ctx.seed + zlib.crc32(f"R{i}".encode()) % 100_000
        res = ctx.cached(("runs", i), lambda cas=cas, seed=seed: simulate_runs(
            cas, ctx.size(DEFAULT_ROUNDS, 10 * DEFAULT_ROUNDS), seed, chains=64))
        detail = f"{res.tokens} tokens"
        if cas.option("round") == "pipespec" and not getattr(cas.laws[0], "carries_age", 0):
            detail += f"; P1 (P1's round) {predict_chain(cas).speedup:.4f}"
        rows.append(ci_row("R1", statement, pred.speedup, res.speedup, detail))
    return rows


__all__ = ["name", "source", "default_max_events", "work", "simulate", "report", "explain",
           "verify_key", "verify", "RUN_CASES"]
