"""The parallel draft-verify simulator (PL0's protocol step by step) against PL1-PL3 with CIs.

Every comparison passes when the exact value lies within ``Z = 4.5`` standard errors of the
Monte-Carlo estimate (two-sided normal tail 6.8e-6 per comparison); this file makes 22 such
comparisons, so a correct implementation fails it with probability <= 1.5e-4 (Bonferroni) --
and, the seeds being fixed, it gives the same verdict on every run. Long-run rows run the
default burn-in first (until a run in the law's tail survives with probability < 1e-12), so
the start-up bias left is far below the standard errors (1e-3)."""

from __future__ import annotations

import numpy as np
import pytest

from polyspec_theory import Cascade, PolyspecInputError
from polyspec_theory.schemes.pearl import (
    pearl_costs,
    pearl_horizon_cascade,
    predict_pearl_cascade,
)
from simulators.runtime import make_key
from simulators.schemes.pearl import _summarize, _tables, simulate_pearl

Z = 4.5

ROOF = {"models": [
    {"name": "t", "cost": {"roofline": {"overhead": 0.1, "weight_time": 1.0,
                                        "compute_time": 0.01, "kv_time": 0.005}},
     "overhead": 0.05},
    {"name": "d", "cost": {"roofline": {"weight_time": 0.2, "compute_time": 0.002}}}],
    "acceptance": [{"positional": [0.7, 0.9, 0.85]}], "thresholds": [4]}

PLAIN = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.05}},
                    {"name": "d", "cost": 0.3}],
         "acceptance": [{"alpha": 0.8}], "thresholds": [3]}


def _within(est, exact, z=Z):
    assert abs(est.value - exact) <= z * est.se, (est.value, est.se, exact)


def _cfg(base, **kw):
    return Cascade.from_config({**base, **kw})


@pytest.mark.parametrize("cfg,batch", [
    (PLAIN, None),
    (ROOF, 8),
    ({**ROOF, "acceptance": [{"alpha": 0.95}], "thresholds": [6]}, 3),
])
def test_long_run_matches_pl1_pl2(cfg, batch):
    cas = _cfg(cfg)
    pr = predict_pearl_cascade(cas, batch)
    r = simulate_pearl(cas, batch, steps=2000, key=5, chains=256)
    _within(r.speedup, pr.speedup)
    _within(r.tokens_per_step, pr.chain.tokens_per_step)
    _within(r.post_share, pr.chain.post_share)
    _within(r.time_per_token, pr.time_per_token)


def test_run_law_matches_pl2():
    """R1's run law (a hazard that falls with the run's age: 0.4, 0.2, 0.1, 0.05, then 0.02)
    in a "mode": "pearl" config, batch 4, gamma 5."""
    cas = _cfg(ROOF, mode="pearl", thresholds=[5],
               acceptance=[{"run_hazard": [0.4, 0.2, 0.1, 0.05], "tail": 0.02}])
    assert cas.scheme == "pearl"
    pr = predict_pearl_cascade(cas, 4)
    r = simulate_pearl(cas, 4, steps=2000, key=6, chains=256)
    _within(r.speedup, pr.speedup)
    _within(r.tokens_per_step, pr.chain.tokens_per_step)
    _within(r.post_share, pr.chain.post_share)


@pytest.mark.parametrize("cfg,batch", [(PLAIN, None), (ROOF, 8)])
def test_finite_run_matches_pl3(cfg, batch):
    """100 steps from all-pre-verify: tokens counted as the benchmark counts them, its MAT,
    the time of the steps."""
    cas = _cfg(cfg)
    h = pearl_horizon_cascade(cas, batch, steps=100)
    r = simulate_pearl(cas, batch, steps=100, burn_in=0, key=7, chains=4096)
    _within(r.counted, h.counted)
    _within(r.mat, h.mat)
    _within(r.time, h.time)


def test_detects_a_wrong_theory():
    """Power: the Monte Carlo rejects what a wrong model predicts -- the serial
    draft-then-verify step (gamma T_d + T_t), a batch whose sequences share one mode, and
    MAT read as the long-run E[R] + 1 on a 100-step run -- each by more than 10 standard
    errors."""
    # the drafter's gamma steps (1.4) bound the step until 3 sequences are in post-verify
    cas = _cfg(ROOF, models=[
        {"name": "t", "cost": {"roofline": {"weight_time": 1.0, "compute_time": 0.001,
                                            "kv_time": 0.03}}, "overhead": 0.05},
        {"name": "d", "cost": {"roofline": {"weight_time": 0.35, "compute_time": 0.0001}}}])
    pr = predict_pearl_cascade(cas, 8)
    r = simulate_pearl(cas, 8, steps=2000, key=8, chains=256)
    _within(r.time_per_token, pr.time_per_token)
    pi = pr.chain.post_share
    one_mode = ((1 - pi) * pr.step_costs[0] + pi * pr.step_costs[8]) / pr.chain.tokens_per_step
    assert abs(r.time_per_token.value - one_mode) > 10 * r.time_per_token.se
    draft, target, _ = pearl_costs(cas, 8)
    serial = np.array([4 * draft + target(8 + 3 * k) + 0.05 for k in range(9)])
    serial = serial @ pr.post_pmf / pr.chain.tokens_per_step
    assert abs(r.time_per_token.value - serial) > 10 * r.time_per_token.se
    h = simulate_pearl(cas, 8, steps=100, burn_in=0, key=9, chains=4096)
    assert abs(h.mat.value - pr.chain.mat) > 10 * h.mat.se


def test_deterministic_extremes_by_hand():
    """alpha = 1: the first step is pre-verify (1 token), every later one post-verify
    (gamma tokens, cost c(b)); alpha = 0: every step pre-verify, 1 token, cost c(0)."""
    one = _cfg(PLAIN, acceptance=[{"alpha": 1.0}])
    r = simulate_pearl(one, None, steps=50, burn_in=0, key=1, chains=4)
    c_pre, c_post = max(0.9, 1.0), max(0.9, 1.1)
    assert r.time.value == pytest.approx(c_pre + 49 * c_post, rel=1e-12) and r.time.se == 0
    assert r.counted.value == 1 + 1 + 49 * 3 + 2 and r.mat.value == 1 + 49 * 3
    zero = _cfg(PLAIN, acceptance=[{"alpha": 0.0}])
    r = simulate_pearl(zero, None, steps=50, burn_in=0, key=1, chains=4)
    assert r.time.value == pytest.approx(50 * c_pre, rel=1e-12)
    assert r.counted.value == 51 and r.mat.value == pytest.approx(50 / 51)
    assert r.post_share.value == 0.0


def test_same_seed_same_numbers_and_refusals():
    cas = _cfg(ROOF)
    a = simulate_pearl(cas, 2, steps=200, burn_in=10, key=3, chains=8)
    b = simulate_pearl(cas, 2, steps=200, burn_in=10, key=3, chains=8)
    assert a.to_dict() == b.to_dict()
    c = simulate_pearl(cas, 2, steps=200, burn_in=10, key=4, chains=8)
    assert c.to_dict() != a.to_dict()
    np.testing.assert_equal(a.tokens, b.tokens)
    with pytest.raises(PolyspecInputError, match="chains"):
        simulate_pearl(cas, 2, steps=10, chains=1)
    with pytest.raises(PolyspecInputError, match=r"models\[0\]\.cost"):
        simulate_pearl(_cfg(PLAIN), 4, steps=10)


def _numpy_pearl(cas, b, steps, burn_in, key, chains, chunk_len):
    """PL0's protocol step by step in NumPy (module docstring of simulators/schemes/pearl.py)
    on the draws ``bits(fold_in(key, k), (n_k, chains, b, gamma))`` of exactly each chunk's
    ``n_k`` steps (the last chunk cut to end at the last step)."""
    import jax

    gamma = cas.thresholds[0]
    accept, costs, ar = _tables(cas, b)
    top = accept.size - 1
    post = np.zeros((chains, b), bool)
    age = np.zeros((chains, b), np.int64)
    ver, rej = np.zeros((chains, b), np.int64), np.zeros((chains, b), np.int64)
    time, post_steps = np.zeros(chains), np.zeros(chains, np.int64)
    total, t = burn_in + steps, 0
    for k in range(-(-total // chunk_len)):
        n = min(chunk_len, total - k * chunk_len)
        bits = np.asarray(jax.random.bits(jax.random.fold_in(make_key(key), k),
                                          (n, chains, b, gamma), np.uint32))
        for i in range(n):
            u = (bits[i].astype(np.float64) + 0.5) * (1.0 / 4294967296.0)
            n_post = post.sum(axis=1)
            checks = np.where(post, gamma, 1)
            lead = np.zeros((chains, b), np.int64)
            for c in range(chains):
                for j in range(b):
                    while (lead[c, j] < checks[c, j] and u[c, j, lead[c, j]]
                           < accept[min(age[c, j] + lead[c, j], top)]):
                        lead[c, j] += 1
            full = lead == checks
            if t >= burn_in:
                ver += np.where(full, checks, lead + 1)
                rej += ~full
                time += costs[n_post]
                post_steps += n_post
            age = np.where(full, np.minimum(age + checks, top), 0)
            post, t = full, t + 1
    host = {"post": post, "ver": ver, "rej": rej, "time": time, "post_steps": post_steps}
    return _summarize(host, b, gamma, ar, steps, burn_in, chains, key)


@pytest.mark.parametrize("steps", [290, 200])
def test_equals_a_numpy_transcription_on_cut_draws(steps):
    """The simulator's numbers equal, with ==, PL0's protocol in NumPy on draws of exactly
    each chunk's steps: 300 steps in chunks of 256 (the last one 44 steps), and a run of 210
    steps, shorter than its chunk -- the simulator draws whole chunks (256 steps) and reads
    their first rows. (The shapes of the run above: no compilation of its own.)"""
    cas = _cfg(ROOF)
    want = _numpy_pearl(cas, 2, steps, 10, 4, 8, 256)
    got = simulate_pearl(cas, 2, steps=steps, burn_in=10, key=4, chains=8)
    assert got.to_dict() == want.to_dict()
    assert got.tokens > 2 * steps * 2 * 8  # mostly post-verify steps: the ages are exercised
