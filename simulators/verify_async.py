"""Verify rows AS1, AS2, AS7 (docs/theory.md Part VI-AS): the asynchronous pipeline's exact
two-level rate, its reductions and the exact rate of three and four levels against the
discrete-event simulator (:mod:`simulators.asynchronous`), at the row level of
:mod:`simulators.verify`."""

from __future__ import annotations

import zlib

from polyspec_theory import Cascade, predict, predict_async
from polyspec_theory.pipelines.async_exact import exact_async

__all__ = ["ASYNC_CASES", "check_async"]

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


def check_async(ctx) -> list:
    from .asynchronous import simulate_async
    from .verify import ci_row

    rows = []
    for i, (id_, statement, cfg, kind) in enumerate(ASYNC_CASES):
        cas = Cascade.from_config({**cfg, "mode": "async"})
        if kind == "async":
            theory = predict_async(cas).speedup
        elif kind == "deep":
            theory = exact_async(cas).speedup
        else:
            theory = predict(Cascade.from_config({k: v for k, v in cfg.items()
                                                  if k != "queue"})).speedup
        seed = ctx.seed + zlib.crc32(f"AS{i}".encode()) % 100_000
        res = ctx.cached(("async", i), lambda cas=cas, seed=seed: simulate_async(
            cas, ctx.size(20_000, 200_000), seed, chains=64))
        rows.append(ci_row(id_, statement, theory, res.speedup,
                            f"{res.tokens} tokens, {res.window} window"))
    return rows
