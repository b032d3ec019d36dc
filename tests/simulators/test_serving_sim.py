"""The batch simulator (model B0, event by event) against B1/B2 with CIs.

Every comparison passes when the exact value lies within ``Z = 4.5`` standard errors of the
Monte-Carlo estimate (two-sided normal tail 6.8e-6 per comparison); this file makes 17 such
comparisons, so a correct implementation fails it with probability <= 1.2e-4 (Bonferroni) —
and, the seeds being fixed, it gives the same verdict on every run."""

from __future__ import annotations

import numpy as np
import pytest

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.core.config import DEFAULT_CASCADE
from polyspec_theory.serving.batch import predict_batch
from simulators.serving import ServingModel, simulate_serving

Z = 4.5

THREE = {
    "models": [
        {"name": "t", "cost": {"roofline": {"overhead": 0.1, "weight_time": 1.0,
                                            "compute_time": 0.05, "kv_time": 0.002}}},
        {"name": "m", "cost": {"batch_table": {"1": [0.2, 0.21, 0.22], "4": [0.25, 0.3],
                                               "16": [0.4, 0.6, 0.8]}}},
        {"name": "s", "cost": 0.03}],
    "acceptance": [{"alpha": 0.7}, {"positional": [0.8, 0.5]}],
    "thresholds": [4, 2]}


def _within(est, exact, z=Z):
    assert abs(est.value - exact) <= z * est.se, (est.value, est.se, exact)


@pytest.mark.parametrize("policy", ["accumulate", "truncate"])
def test_three_level_batch_8_matches_b2(policy):
    cas = Cascade.from_config({**THREE, "policy": policy})
    pr = predict_batch(cas, 8)
    r = simulate_serving(cas, 8, 150_000, seed=3)
    _within(r.speedup, pr.speedup)
    _within(r.levels[1].phi_batch, pr.levels[1].phi_batch)  # E[max_j N_j]
    _within(r.levels[0].mean_max_block, pr.levels[0].mean_max_block)  # E[max_j G_j]
    _within(r.levels[0].mean_emitted, pr.levels[0].mean_emitted)  # single-stream E[L_1]
    assert r.levels[2].phi_batch.value == 2.0
    # the synchronisation is visible: the unsynchronised prediction is far outside the CI
    assert abs(r.speedup.value - pr.speedup_unsynchronised) > 10 * r.speedup.se


def test_batch_one_is_p1_and_two_model_batch_is_b1():
    cas = Cascade.from_config(DEFAULT_CASCADE)
    r = simulate_serving(cas, 1, 100_000, seed=5)
    _within(r.speedup, predict(cas).speedup)
    two = Cascade.from_config({
        "models": [{"name": "t", "cost": {"roofline": {"overhead": 0.05, "weight_time": 1.0,
                                                       "compute_time": 0.01}}},
                   {"name": "d", "cost": {"roofline": {"weight_time": 0.05,
                                                       "compute_time": 0.0005}}}],
        "acceptance": [{"beta": [4.0, 1.5]}], "thresholds": [5]})
    pr = predict_batch(two, 32)
    r2 = simulate_serving(two, 32, 200_000, seed=6)
    _within(r2.speedup, pr.speedup)
    _within(r2.tokens_per_time, pr.tokens_per_time)
    _within(r2.time_per_token, pr.time_per_token)


@pytest.mark.parametrize("batch", [2, 8])
def test_per_round_overhead_is_paid_once_per_batched_round(batch):
    """O1 with B2 (issue 27): ``o_1`` counted once per batched verification round; the
    no-overhead value lies far outside the CI."""
    from simulators.serving import VERIFY_OVERHEAD

    cas = Cascade.from_config(VERIFY_OVERHEAD)
    r = simulate_serving(cas, batch, 60_000, seed=13)
    _within(r.speedup, predict_batch(cas, batch).speedup)
    bare = dict(VERIFY_OVERHEAD, models=[{"name": "target", "cost": 1.0},
                                         {"name": "draft", "cost": 0.05}])
    assert abs(r.speedup.value - predict_batch(Cascade.from_config(bare), batch).speedup) > (
        20 * r.speedup.se)


def test_four_level_batch_4():
    cas = Cascade.from_config(DEFAULT_CASCADE)
    pr = predict_batch(cas, 4)
    r = simulate_serving(cas, 4, 120_000, seed=7)
    _within(r.speedup, pr.speedup)
    _within(r.levels[1].phi_batch, pr.levels[1].phi_batch)
    _within(r.levels[2].phi_batch, pr.levels[2].phi_batch)


def test_same_seed_same_numbers_and_errors():
    # batch 8, 256 chains, chunks of 64: the compiled shapes of
    # test_three_level_batch_8_matches_b2[accumulate] (no compilation of its own)
    cas = Cascade.from_config(THREE)
    model = ServingModel.from_cascade(cas, 8)
    a = simulate_serving(model, 8, 4_096, seed=11, chains=256)
    b = simulate_serving(cas, 8, 4_096, seed=11, chains=256)
    c = simulate_serving(cas, 8, 4_096, seed=12, chains=256)
    assert a.speedup == b.speedup
    np.testing.assert_array_equal(a.chain_time, b.chain_time)
    assert a.speedup.value != c.speedup.value
    assert a.chain_tokens.min() >= 4_096 // 256
    with pytest.raises(PolyspecInputError, match="^batch:"):
        simulate_serving(model, 4, 100)
    with pytest.raises(PolyspecInputError, match="^batch:"):
        simulate_serving(cas, 0, 100)
    with pytest.raises(PolyspecInputError, match="^tokens:"):
        simulate_serving(cas, 2, 0)
    with pytest.raises(PolyspecInputError, match="^cascade:"):
        simulate_serving(THREE, 2, 10)
    with pytest.raises(PolyspecInputError, match=r"^models\[1\]\.cost"):
        simulate_serving(cas, 17, 10)
    with pytest.raises(PolyspecInputError, match="^max_events:"):
        # the shapes of ``a``: 64 events cannot emit 10**8 / 256 tokens per chain
        simulate_serving(cas, 8, 10**8, chains=256, chunk_len=64, max_events=64)
