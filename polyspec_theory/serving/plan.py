"""B6 for pools: the best cascade (chain and thresholds) at each serving batch size, under
the synchronised lockstep model (docs/theory.md Part III-C).

**Exact by a certificate (B4).** When every cost ``T_i(b, .)`` is nondecreasing in ``m``, the
synchronised speedup of any configuration is <= its unsynchronised one (P1 with the costs
``T_i(b, .)``), with equality for two models. The planner
(:func:`polyspec_theory.planning.planner.plan`, exact for
P1) ranks the chains by their unsynchronised optimum ``U(chain)``; going down that ranking we
compute each chain's synchronised optimum ``S(chain)`` exhaustively
(:func:`polyspec_theory.serving.batch.optimize_batch_thresholds`) and stop as soon as the next
chain has
``U <= max S`` found so far: no remaining chain can do better, since ``S <= U`` for all of
them. The answer is then *certified* optimal over every chain and threshold vector in
``1..max_threshold``. Without monotone costs, or if a chain is too long to search
exhaustively, the answer is the best of the chains examined and ``certified`` is False.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.planning.planner import plan
from polyspec_theory.planning.pool import Pool, as_pool
from polyspec_theory.schemes import predict
from polyspec_theory.serving.batch import (
    MAX_SEARCH_CONFIGS,
    as_batch,
    as_batches,
    batch_models,
    optimize_batch_thresholds,
)

__all__ = ["BatchPlan", "plan_batch", "plan_batches"]


@dataclass(frozen=True)
class BatchPlan:
    """Best configuration at ``batch``: ``chain``, ``thresholds``, synchronised ``speedup``
    (B2); ``certified``: proven optimal (see module docstring); ``chains_examined``;
    ``best_two_model`` (chain, thresholds, speedup; exact, sync = unsync for two models);
    ``beats_autoregressive``: ``speedup > 1``."""

    batch: int
    chain: tuple[str, ...]
    thresholds: tuple[int, ...]
    speedup: float
    speedup_unsynchronised: float
    certified: bool
    chains_examined: int
    skipped: tuple[tuple[str, ...], ...]
    best_two_model: dict

    @property
    def beats_autoregressive(self) -> bool:
        return self.speedup > 1.0

    def to_dict(self) -> dict:
        return {"batch": self.batch, "chain": list(self.chain),
                "thresholds": list(self.thresholds), "speedup": self.speedup,
                "speedup_unsynchronised": self.speedup_unsynchronised,
                "certified": self.certified, "chains_examined": self.chains_examined,
                "skipped": [list(c) for c in self.skipped],
                "best_two_model": self.best_two_model,
                "beats_autoregressive": self.beats_autoregressive}


def _pool_at(pool: Pool, b: int) -> Pool:
    return Pool(batch_models(pool.models, b), pool.pairs, pool.max_threshold, pool.policy,
                pool.name, pool.time_unit)


def _monotone(pool_b: Pool) -> bool:
    gmax = len(pool_b.models) * pool_b.max_threshold + 2
    m = np.arange(1, gmax + 1)
    return all(bool(np.all(np.diff(mo.cost(m)) >= 0.0)) for mo in pool_b.models)


def plan_batch(pool, batch, *, start_top: int = 8) -> BatchPlan:
    """B6 for a pool at one batch size (see module docstring)."""
    pool = as_pool(pool)
    b = as_batch(batch)
    top = as_int(start_top, "start_top", low=1, high=1000)
    pool_b = _pool_at(pool, b)
    monotone = _monotone(pool_b)
    while True:
        res = plan(pool_b, top, greedy=False)
        ranked = [res.best, *res.alternatives]
        exhausted = len(res.alternatives) < top
        best = None
        certified = False
        examined = 0
        skipped = []
        for pc in ranked:
            if best is not None and monotone and pc.speedup <= best[2]:
                certified = not skipped
                break
            cas = pool.cascade(pc.chain, pc.thresholds)
            if pool.max_threshold ** (cas.n - 1) > MAX_SEARCH_CONFIGS:
                skipped.append(pc.chain)
                continue
            opt = optimize_batch_thresholds(cas, b, pool.max_threshold)
            examined += 1
            if best is None or opt.speedup > best[2]:
                best = (pc.chain, opt.thresholds, opt.speedup, pc.speedup)
        else:
            certified = exhausted and not skipped
        if certified or exhausted or top >= 1000:
            break
        top = min(1000, top * 4)
    if best is None:
        raise PolyspecInputError("pool", "every chain is too long to search exhaustively; "
                                 "lower max_threshold")
    chain, th, sp, _ = best
    unsync = _unsync(pool_b, chain, th)
    two = res.best_two_model
    return BatchPlan(b, tuple(chain), tuple(th), float(sp), unsync, bool(certified), examined,
                     tuple(tuple(c) for c in skipped),
                     {"chain": list(two.chain), "thresholds": list(two.thresholds),
                      "speedup": two.speedup})


def _unsync(pool_b: Pool, chain, thresholds) -> float:

    return float(predict(pool_b.cascade(chain, thresholds)).speedup)


def plan_batches(pool, batches) -> tuple[BatchPlan, ...]:
    """:func:`plan_batch` for each batch size in ``batches``."""
    pool = as_pool(pool)
    return tuple(plan_batch(pool, b) for b in as_batches(batches))
