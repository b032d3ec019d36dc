"""``async``: the discrete-event pipeline (:func:`simulators.asynchronous.simulate_async`),
``budget.events`` completed actions (forwards, verifies) per chain (``budget.tokens`` is not
used: the pipeline's length is counted in events)."""

from __future__ import annotations

import zlib

from polyspec_theory.core.config import Cascade
from polyspec_theory.pipelines.async_exact import exact_async
from polyspec_theory.pipelines.asynchronous import predict_async
from polyspec_theory.schemes import predict as predict_in_scheme
from simulators.asynchronous import simulate_async
from simulators.checks import ci_row
from simulators.schemes import DEFAULT_EVENTS

name = "async"
source = "simulators/asynchronous.py"
unit = "actions"
sized_by = "events"  # the budget field that sizes a run
# chains x events (completed actions, all chains) at most this by default: 5x the default run
# (1024 chains x 20,000 events)
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
    theory = (f"{'AS1' if cascade.n == 2 else 'AS7'} exact {pred.speedup:.4f}" if pred.exact else
              f"AS3 bounds [{pred.bounds[0]:.4f}, {pred.bounds[1]:.4f}]")
    return (f"cascade {cascade.name!r}: {cascade.n} models, asynchronous pipeline\n"
            f"simulated {result.tokens} tokens ({result.chains} chains x {result.events} "
            f"events, {result.window} window), seed {result.seed}\n"
            f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   {theory}\n"
            "drafts checked per verify: "
            + ", ".join(f"{m.name} {x:.3f}" for m, x in zip(cascade.models, result.mean_checked,
                                                            strict=False)))


# --- the rows of ``polyspec verify`` (AS1, AS2, AS7: docs/theory.md Part VI-AS) ------------------
verify_key = "AS"
# (row id, statement, config, theory: "async" = AS1, "sync" = P1 (the reduction's claim),
# "deep" = AS7);
# new rows go last (a row's seed follows its index)
ASYNC_CASES = (
    ("AS1", "async 2-level exact rate, PipeSpec lookahead 0 (no wait, 99-draft window)",
     {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.004}},
                 {"name": "draft", "cost": 0.459}],
      "acceptance": [{"positional": [0.9, 0.75, 0.7]}], "thresholds": [0]}, "async"),
    ("AS1", "async 2-level exact rate, threshold 3, beta law, per-verify overhead",
     {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.03}, "overhead": 0.05},
                 {"name": "draft", "cost": 0.13}],
      "acceptance": [{"beta": [6.0, 1.5]}], "thresholds": [3]}, "async"),
    ("AS2", "synchronous limit: queue = threshold 4 reproduces P1",
     {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.02}},
                 {"name": "draft", "cost": 0.17}],
      "acceptance": [{"alpha": 0.85}], "thresholds": [4], "queue": [4]}, "sync"),
    ("AS2", "free drafter, queue = threshold 3: P1 with T_2 = 0",
     {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.05}},
                 {"name": "draft", "cost": 0.0}],
      "acceptance": [{"alpha": 0.7}], "thresholds": [3], "queue": [3]}, "sync"),
    ("AS1", "async 2-level exact rate, iid law, unbounded queue at threshold 0, verify ending "
     "on a drafter boundary (AS0 tie rule)",
     {"models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.2}],
      "acceptance": [{"alpha": 0.8}], "thresholds": [0]}, "async"),
    ("AS1", "async 2-level exact rate, threshold 4, verify ending on a drafter boundary "
     "(AS0 tie rule)",
     {"models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.1}],
      "acceptance": [{"alpha": 0.8}], "thresholds": [4]}, "async"),
    ("AS7", "async 3-level exact rate (issue 41: costs 1 / 0.3 / 0.05, thresholds 2 / 3)",
     {"models": [{"name": "target", "cost": 1.0}, {"name": "mid", "cost": 0.3},
                 {"name": "small", "cost": 0.05}],
      "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [2, 3]}, "deep"),
    ("AS7", "async 4-level exact rate, PipeSpec lookahead 0 at every level",
     {"models": [{"name": "target", "cost": 1.0}, {"name": "a", "cost": 0.5},
                 {"name": "b", "cost": 0.2}, {"name": "c", "cost": 0.1}],
      "acceptance": [{"alpha": 0.9}, {"alpha": 0.8}, {"alpha": 0.7}],
      "thresholds": [0, 0, 0]}, "deep"),
)


def verify(ctx) -> list:
    """AS1 (the exact two-level rate), AS2 (its reductions to P1) and AS7 (the exact rate of
    three and four levels) against the
    discrete-event simulator, at the row level of :mod:`simulators.checks`."""
    rows = []
    for i, (id_, statement, cfg, kind) in enumerate(ASYNC_CASES):
        cas = Cascade.from_config({**cfg, "mode": "async"})
        if kind == "async":
            theory = predict_async(cas).speedup
        elif kind == "deep":
            theory = exact_async(cas).speedup
        else:
            theory = predict_in_scheme(Cascade.from_config(
                {k: v for k, v in cfg.items() if k != "queue"})).speedup
        seed = ctx.seed + zlib.crc32(f"AS{i}".encode()) % 100_000
        res = ctx.cached(("async", i), lambda cas=cas, seed=seed: simulate_async(
            cas, ctx.size(DEFAULT_EVENTS, 10 * DEFAULT_EVENTS), seed, chains=64))
        rows.append(ci_row(id_, statement, theory, res.speedup,
                           f"{res.tokens} tokens, {res.window} window"))
    return rows
