"""Planning asynchronous pipelines (docs/theory.md AS1, AS7): the best thresholds of one chain
run as AS0's asynchronous pipeline, every value exact.

Two models: AS1 over every threshold ``0..max_threshold``. Three or more: AS7's chain for each
threshold tuple in ``0..limit`` per pair (``limit = min(max_threshold, ASYNC_PLAN_THRESHOLD)``;
in async mode a threshold only delays a verify that checks every ready draft anyway), every
tuple when there are at most :data:`ASYNC_PLAN_EXHAUSTIVE` of them, else coordinate ascent
from all zeros (one pair at a time, until no change). A chain whose AS7 chain exceeds the
state budget is reported as not exact (``None``), never guessed.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from polyspec_theory.errors import as_int
from polyspec_theory.pipelines.async_exact import ChainTooLarge, exact_async
from polyspec_theory.pipelines.asynchronous import predict_async
from polyspec_theory.planning.pool import as_pool

__all__ = ["AsyncPlanned", "plan_async", "ASYNC_PLAN_THRESHOLD", "ASYNC_PLAN_EXHAUSTIVE",
           "ASYNC_PLAN_STATES"]

ASYNC_PLAN_THRESHOLD = 3  # thresholds 0..3 per pair for chains of three or more models
ASYNC_PLAN_EXHAUSTIVE = 16  # every threshold tuple when there are at most this many
ASYNC_PLAN_STATES = 5_000  # AS7 chain size allowed per evaluation while planning


@dataclass(frozen=True)
class AsyncPlanned:
    """The best thresholds found for ``chain`` run asynchronously, with the exact speedup;
    ``search``: ``"all"`` (every tuple in ``0..limit``) or ``"coordinate"`` (coordinate
    ascent); ``evaluated``: threshold tuples solved."""

    chain: tuple[str, ...]
    thresholds: tuple[int, ...]
    speedup: float
    search: str
    limit: int
    evaluated: int

    def to_dict(self) -> dict:
        return {"speedup": self.speedup, "thresholds": list(self.thresholds), "exact": True,
                "search": self.search, "threshold_limit": self.limit,
                "evaluated": self.evaluated}


def _speedup(cascade, thresholds, max_states: int) -> float:
    cas = dataclasses.replace(cascade, thresholds=tuple(thresholds), mode="async", queues=None)
    if cascade.n == 2:
        return float(predict_async(cas).speedup)
    return exact_async(cas, max_states=max_states).speedup


def plan_async(pool, chain, *, max_states: int = ASYNC_PLAN_STATES) -> AsyncPlanned | None:
    """Best async thresholds for ``chain`` (target first) of ``pool`` (module docstring);
    ``None`` when AS7's chain of some tuple tried exceeds ``max_states`` (no exact value)."""
    pool = as_pool(pool)
    chain = pool.as_chain(chain)
    max_states = as_int(max_states, "max_states", low=1)
    n = len(chain)
    base = pool.cascade(chain, (1,) * (n - 1))
    limit = pool.max_threshold if n == 2 else min(pool.max_threshold, ASYNC_PLAN_THRESHOLD)
    seen: dict[tuple[int, ...], float] = {}

    def value(th):
        if th not in seen:
            seen[th] = _speedup(base, th, max_states)
        return seen[th]

    try:
        grid = list(itertools.product(range(limit + 1), repeat=n - 1))
        if len(grid) <= ASYNC_PLAN_EXHAUSTIVE or n == 2:
            search = "all"
            best = max(grid, key=lambda th: (value(th), [-t for t in th]))
        else:
            search = "coordinate"
            best = (0,) * (n - 1)
            improved = True
            while improved:
                improved = False
                for i in range(n - 1):
                    for t in range(limit + 1):
                        trial = best[:i] + (t,) + best[i + 1:]
                        if value(trial) > value(best):
                            best, improved = trial, True
    except ChainTooLarge:
        return None
    return AsyncPlanned(chain, tuple(best), value(best), search, limit, len(seen))
