"""B6 for pools (serving_plan): the certified synchronised optimum per batch equals a brute
force over every chain of the pool and every threshold vector (exact, no sampling)."""

from __future__ import annotations

import itertools
import math

import pytest

from polyspec_theory import PolyspecInputError
from polyspec_theory.planning.pool import Pool
from polyspec_theory.serving.batch import predict_batch
from polyspec_theory.serving.plan import plan_batch, plan_batches

POOL = {
    "name": "tiny",
    "models": [
        {"name": "t", "cost": {"roofline": {"overhead": 0.1, "weight_time": 1.0,
                                            "compute_time": 0.02, "kv_time": 0.002}}},
        {"name": "a", "cost": {"roofline": {"overhead": 0.05, "weight_time": 0.12,
                                            "compute_time": 0.003}}},
        {"name": "c", "cost": {"batch_table": {"1": [0.03, 0.031], "64": [0.05, 0.09]}}},
        {"name": "g", "cost": 0.004}],
    "acceptance": {"t|a": {"alpha": 0.8}, "t|c": {"alpha": 0.6}, "t|g": {"positional": [0.5, 0.3]},
                   "a|c": {"beta": [4.0, 1.5]}, "a|g": {"alpha": 0.6}, "c|g": {"alpha": 0.7},
                   "c|a": {"alpha": 0.5}},
    "max_threshold": 4,
}


def _brute(pool: Pool, b: int):
    best = (-math.inf, None, None)
    names = pool.names[1:]
    for k in range(1, len(names) + 1):
        for perm in itertools.permutations(names, k):
            chain = (pool.target, *perm)
            if any((v, d) not in pool.pairs for v, d in zip(chain[:-1], chain[1:], strict=True)):
                continue
            for th in itertools.product(range(1, pool.max_threshold + 1), repeat=len(perm)):
                s = predict_batch(pool.cascade(chain, th), b).speedup
                if s > best[0] * (1 + 1e-12):
                    best = (s, chain, th)
    return best


@pytest.mark.parametrize("b", [1, 3, 16, 64])
def test_plan_batch_is_the_brute_force_optimum(b):
    pool = Pool.from_config(POOL)
    s, chain, th = _brute(pool, b)
    p = plan_batch(pool, b)
    assert p.certified
    assert p.speedup == pytest.approx(s, rel=1e-11)
    assert predict_batch(pool.cascade(p.chain, p.thresholds), b).speedup == pytest.approx(
        s, rel=1e-11)
    assert p.speedup <= p.speedup_unsynchronised * (1 + 1e-12)
    two = p.best_two_model
    assert two["speedup"] == pytest.approx(
        predict_batch(pool.cascade(two["chain"], two["thresholds"]), b).speedup, rel=1e-12)


def test_plan_batches_errors():
    assert [p.batch for p in plan_batches(POOL, [1, 2])] == [1, 2]
    with pytest.raises(PolyspecInputError, match=r"^models\[2\]\.cost"):
        plan_batch(POOL, 65)
    with pytest.raises(PolyspecInputError, match="^batch:"):
        plan_batch(POOL, 0)
    with pytest.raises(PolyspecInputError, match="^pool:"):
        plan_batch([1], 2)
    with pytest.raises(PolyspecInputError, match=r"^batches\[0\]:"):
        plan_batches(POOL, ["x"])
