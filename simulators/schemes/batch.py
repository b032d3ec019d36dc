"""``batch``: lockstep serving batches of ``cascade.batch`` sequences
(:func:`simulators.serving.simulate_serving`), ``budget.chains`` batches in parallel, about
``budget.tokens`` tokens in total."""

from __future__ import annotations

from polyspec_theory.serving.batch import predict_batch
from simulators.length import estimate_events
from simulators.serving import simulate_serving

name = "batch"
source = "simulators/serving.py"
unit = "verification rounds"
sized_by = "tokens"  # the budget field that sizes a run
default_max_events = 1e9
MODEL = ("lockstep batch (B0): every forward batched over all b slots, padded to the longest "
         "block; a level waits for the sequence needing the most rounds")


def work(cascade, budget) -> float:
    """Expected verification rounds of one sequence (a batch runs them b at a time)."""
    return estimate_events(cascade, max(budget.tokens, budget.chains))


def simulate(cascade, budget, key):
    w = work(cascade, budget)
    budget.refuse_work(w, f"this run needs about {w:.3g} verification rounds ({cascade.n} "
                       f"models, {budget.tokens:,} tokens; P1's forwards per token of the "
                       "verifying models x tokens)", budget.cap(default_max_events),
                       budget.name("tokens"))
    return simulate_serving(cascade, cascade.batch, budget.tokens, key, chains=budget.chains)


def report(cascade, result) -> dict:
    """The Monte Carlo (speedup, throughput, time per token with CIs, per level) next to
    B2."""
    prediction = predict_batch(cascade, cascade.batch)
    out = result.to_dict()
    config = cascade.to_config()
    config.pop("batch", None)
    out["config"] = config
    out["model"] = MODEL
    out["prediction"] = {"speedup": prediction.speedup,
                         "tokens_per_time": prediction.tokens_per_time,
                         "time_per_token": prediction.time_per_token,
                         "speedup_unsynchronised": prediction.speedup_unsynchronised}
    for lv, lp in zip(out["levels"], prediction.levels, strict=True):
        lv["b2"] = {"phi_batch": lp.phi_batch, "mean_max_block": lp.mean_max_block,
                    "mean_block": lp.mean_block,
                    "mean_emitted": lp.mean_emitted if lp.mean_block is not None else None,
                    "idle_share": lp.idle_share}
    return out


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def explain(cascade, result) -> str:
    b = cascade.batch
    pred = predict_batch(cascade, b)
    s = result.speedup
    lines = [
        f"cascade {cascade.name!r}: {cascade.n} models, batch {b} (lockstep, B0), policy "
        f"{result.policy}",
        f"simulated {result.tokens} tokens in {result.chains} independent batches, seed "
        f"{result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   B2 exact "
        f"{pred.speedup:.4f}   unsynchronised P1 {pred.speedup_unsynchronised:.4f}",
        f"throughput MC {result.tokens_per_time.value:.6g}   B2 {pred.tokens_per_time:.6g} "
        "tokens per time unit (batch)",
        "",
        f"{'model':<12}{'E[max N] MC':>13}{'B2':>10}{'E[max G] MC':>13}{'B2':>10}"
        f"{'E[L] MC':>10}{'B2':>10}{'idle B2':>9}{'time %':>8}"]
    for ls, lp in zip(result.levels, pred.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{_f(ls.phi_batch and ls.phi_batch.value):>13}{_f(lp.phi_batch):>10}"
            f"{_f(ls.mean_max_block and ls.mean_max_block.value):>13}"
            f"{_f(lp.mean_max_block):>10}{_f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{_f(lp.mean_emitted if lp.mean_block is not None else None):>10}"
            f"{_f(lp.idle_share):>9}{100 * ls.time_share:>8.1f}")
    return "\n".join(lines)
