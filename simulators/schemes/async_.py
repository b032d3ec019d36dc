"""``async``: the discrete-event pipeline (:func:`simulators.asynchronous.simulate_async`),
``budget.events`` completed actions (forwards, verifies) per chain (``budget.tokens`` is not
used: the pipeline's length is counted in events)."""

from __future__ import annotations

from polyspec_theory.pipelines.asynchronous import predict_async
from simulators.asynchronous import simulate_async

name = "async"
source = "simulators/asynchronous.py"
# chains x events (completed actions, all chains) at most this by default: 5x the default run
# (1024 chains x 20,000 events)
unit = "actions"
default_max_events = 1e8


def work(cascade, budget) -> float:
    """Completed actions over all chains."""
    return float(budget.chains * budget.events)


def simulate(cascade, budget, key):
    w = work(cascade, budget)
    budget.refuse_work(
        w, f"{budget.name('chains')} {budget.chains} x {budget.name('events')} "
        f"{budget.events} = {w:.3g} actions to simulate", budget.cap(default_max_events),
        f"{budget.name('chains')} or {budget.name('events')}")
    return simulate_async(cascade, budget.events, key, chains=budget.chains)


def report(cascade, result) -> dict:
    pred = predict_async(cascade)
    out = result.to_dict()
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": pred.speedup, "exact": pred.exact,
                         "bounds": list(pred.bounds)}
    return out


def explain(cascade, result) -> str:
    pred = predict_async(cascade)
    s = result.speedup
    theory = (f"AS1 exact {pred.speedup:.4f}" if pred.exact else
              f"AS3 bounds [{pred.bounds[0]:.4f}, {pred.bounds[1]:.4f}]")
    return (f"cascade {cascade.name!r}: {cascade.n} models, asynchronous pipeline\n"
            f"simulated {result.tokens} tokens ({result.chains} chains x {result.events} "
            f"events, {result.window} window), seed {result.seed}\n"
            f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   {theory}\n"
            "drafts checked per verify: "
            + ", ".join(f"{m.name} {x:.3f}" for m, x in zip(cascade.models, result.mean_checked,
                                                            strict=False)))
