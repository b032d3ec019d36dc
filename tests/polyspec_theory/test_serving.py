"""B1–B6 (docs/theory.md Part III-C): the synchronised batch theory against independent exact
computations — the lockstep event machine enumerated over every joint outcome
(``_serving_enum``), brute-force maxima of b iid variables, P1 itself — over many
hypothesis-drawn cascades (all deterministic: no Monte Carlo in this file)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.bounds.tails import exact_tail
from polyspec_theory.core.config import DEFAULT_CASCADE
from polyspec_theory.core.p1 import renewal_fill
from polyspec_theory.serving.batch import (
    _speedup_table,
    batch_cascade,
    batch_sweep,
    crossover_batch,
    large_batch_limit,
    max_block_law,
    max_excess,
    max_fill_bounds,
    max_fill_mean,
    optimize_batch_thresholds,
    predict_batch,
)

from ._serving_enum import enumerate_batch, random_small_cascade

PROPS = settings(derandomize=True, deadline=None, max_examples=60)


@st.composite
def small_cascades(draw, n_max=3, theta_max=3):
    return random_small_cascade(draw, st, n_max=n_max, theta_max=theta_max)


@st.composite
def l_pmfs(draw, lmax=5):
    w = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=lmax, max_size=lmax)))
    w[draw(st.integers(0, lmax - 1))] += 0.1
    return np.concatenate([[0.0], w / w.sum()])


def _roofline_pair(alpha=0.8, gamma=4, w=1.0, c=0.01, o=0.05, draft=0.05):
    return Cascade.from_config({
        "models": [{"name": "target", "cost": {"roofline": {"overhead": o, "weight_time": w,
                                                            "compute_time": c}}},
                   {"name": "draft", "cost": {"roofline": {"overhead": o * draft,
                                                           "weight_time": w * draft,
                                                           "compute_time": c * draft}}}],
        "acceptance": [{"alpha": alpha}], "thresholds": [gamma]})


# --- B2: exact, against the enumerated event machine -----------------------------------------


@PROPS
@given(cas=small_cascades(), b=st.integers(1, 3))
def test_b2_equals_enumerated_lockstep_machine(cas, b):
    ref = enumerate_batch(cas, b)
    pr = predict_batch(cas, b)
    assert pr.speedup == pytest.approx(ref["speedup"], rel=1e-10)
    assert pr.tokens_per_time == pytest.approx(ref["tokens_per_time"], rel=1e-10)
    # E[max_j G_1j] of the top level per top round
    assert pr.levels[0].mean_max_block == pytest.approx(ref["max_block"], rel=1e-10)


def test_b2_four_levels_enumerated():
    cas = Cascade.from_config(DEFAULT_CASCADE).with_thresholds((2, 2, 1))
    for b in (1, 2):
        assert predict_batch(cas, b).speedup == pytest.approx(
            enumerate_batch(cas, b)["speedup"], rel=1e-12)


@PROPS
@given(cas=small_cascades(n_max=4, theta_max=8))
def test_b2_at_batch_one_is_p1_bit_for_bit(cas):
    pr = predict_batch(cas, 1)
    p1 = predict(cas)
    assert pr.speedup == p1.speedup
    assert pr.time_per_token == p1.time_per_token
    for a, c in zip(pr.levels[1:], p1.levels[1:], strict=True):
        assert a.phi_batch == c.phi and a.idle_share == 0.0


@PROPS
@given(cas=small_cascades(n_max=2, theta_max=10), b=st.integers(1, 512))
def test_b1_two_models_is_p1_with_batch_costs(cas, b):
    if cas.n != 2:
        return
    pr = predict_batch(cas, b)
    bc = batch_cascade(cas, b)
    assert pr.speedup == predict(bc).speedup == pr.speedup_unsynchronised
    g = cas.thresholds[0]
    t1, t2 = bc.costs
    el = cas.laws[0].mean_emitted(g)
    assert pr.speedup == pytest.approx(t1(1) * el / (g * t2(1) + t1(g + 1)), rel=1e-12)
    assert pr.tokens_per_time == pytest.approx(b * el / (g * t2(1) + t1(g + 1)), rel=1e-12)


# --- B3: maxima of b iid copies --------------------------------------------------------------


@PROPS
@given(p=l_pmfs(), theta=st.integers(1, 7), b=st.integers(1, 3))
def test_b3_max_fill_mean_brute_force(p, theta, b):
    tail = exact_tail(p, theta)
    assert tail[-1] == 0.0  # N <= theta
    n_pmf = np.concatenate([[0.0], tail[:-1] - tail[1:]])  # P(N = k), k = 0..theta
    ref = 0.0
    for ks in itertools.product(range(n_pmf.size), repeat=b):
        pr = math.prod(n_pmf[k] for k in ks)
        ref += pr * max(ks)
    assert max_fill_mean(p, theta, b) == pytest.approx(ref, rel=1e-10, abs=1e-12)
    _, g = renewal_fill(p, theta)
    law = max_block_law(g, b)
    ref_g = np.zeros(g.size)
    for gs in itertools.product(range(g.size), repeat=b):
        ref_g[max(gs)] += math.prod(g[x] for x in gs)
    np.testing.assert_allclose(law, ref_g, rtol=1e-9, atol=1e-13)


@PROPS
@given(p=l_pmfs(lmax=6), theta=st.integers(1, 40), b=st.integers(1, 10**5))
def test_b3_bounds_and_monotone(p, theta, b):
    bd = max_fill_bounds(p, theta, b)
    assert bd["lower"] - 1e-9 <= bd["exact"] <= bd["upper"] + 1e-9
    assert bd["exact"] <= max_fill_mean(p, theta, b + 1) + 1e-12
    # the limit b -> inf is N_max
    assert max_fill_mean(p, theta, 10**6) <= bd["n_max"] + 1e-9


def test_max_excess_is_stable_and_zero_at_one():
    sf = np.array([1.0, 0.5, 1e-12, 0.0])
    assert (max_excess(sf, 1) == 0.0).all()
    e = max_excess(sf, 3)
    assert e[0] == 0.0 and e[3] == 0.0
    assert e[1] == pytest.approx(0.5 - 0.125)
    assert e[2] == pytest.approx(2e-12, rel=1e-9)  # (1 - (1 - q)^3) - q ~ 2q


# --- B4: synchronisation only costs (monotone costs) ----------------------------------------


@PROPS
@given(cas=small_cascades(n_max=4, theta_max=6), b=st.integers(1, 64))
def test_b4_sync_never_beats_unsynchronised_and_worsens_with_b(cas, b):
    pr = predict_batch(cas, b)
    monotone = all(np.all(np.diff(batch_cascade(cas, b).costs[i](np.arange(1, 40))) >= 0)
                   for i in range(cas.n))
    if monotone:
        assert pr.speedup <= pr.speedup_unsynchronised * (1 + 1e-12)
    for lv, lv2 in zip(pr.levels[1:], predict_batch(cas, b + 1).levels[1:], strict=True):
        assert lv.phi <= lv.phi_batch * (1 + 1e-12)
        assert lv.phi_batch <= lv2.phi_batch * (1 + 1e-12)


def test_b4_batch_independent_costs_speedup_falls_with_b():
    cas = Cascade.from_config(DEFAULT_CASCADE)
    s = [predict_batch(cas, b).speedup for b in (1, 2, 4, 16, 256)]
    assert all(x > y for x, y in zip(s, s[1:], strict=False))
    assert predict_batch(cas, 4).batch_independent_costs == ("target", "mid", "small", "ngram")


# --- B5: large-batch limit -------------------------------------------------------------------


@PROPS
@given(alpha=st.floats(0.05, 0.99), gamma=st.integers(1, 8), c=st.floats(1e-3, 0.1),
       draft=st.floats(0.0, 0.5))
def test_b5_two_model_limit(alpha, gamma, c, draft):
    cas = _roofline_pair(alpha, gamma, c=c, draft=draft)
    lim = large_batch_limit(cas)
    el = cas.laws[0].mean_emitted(gamma)
    want = c * el / (gamma * c * draft + (gamma + 1) * c)
    assert lim["speedup"] == pytest.approx(want, rel=1e-12)
    assert lim["speedup"] <= lim["bound"] * (1 + 1e-12) and lim["bound"] < 1.0
    s_big = predict_batch(cas, 1 << 19).speedup
    assert s_big == pytest.approx(lim["speedup"], rel=1e-3)


def test_b5_cascade_limit_and_kv_bound_regime():
    cfg = {"models": [
        {"name": "t", "cost": {"roofline": {"weight_time": 1.0, "compute_time": 0.01}}},
        {"name": "m", "cost": {"roofline": {"weight_time": 0.2, "compute_time": 0.002}}},
        {"name": "s", "cost": 0.0}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [4, 2]}
    cas = Cascade.from_config(cfg)
    lim = large_batch_limit(cas)
    assert lim["speedup"] < 1.0
    assert predict_batch(cas, 1 << 19).speedup == pytest.approx(lim["speedup"], rel=2e-3)
    # long contexts: KV reads dominate (kv_time > compute_time (G_max+1)): speculation keeps
    # paying at any batch
    cfg["models"][0]["cost"]["roofline"]["kv_time"] = 0.2
    lim_kv = large_batch_limit(Cascade.from_config(cfg))
    assert lim_kv["speedup"] > 1.0
    with pytest.raises(PolyspecInputError, match=r"models\[0\].cost"):
        large_batch_limit(Cascade.from_config(DEFAULT_CASCADE))


# --- B6: optimal thresholds and crossover ----------------------------------------------------


@settings(derandomize=True, deadline=None, max_examples=25)
@given(cas=small_cascades(n_max=3, theta_max=2), b=st.integers(1, 40))
def test_b6_search_equals_predict_on_every_vector(cas, b):
    tmax = 4
    tab = _speedup_table(cas, b, tmax)
    best = -np.inf
    for th in itertools.product(range(1, tmax + 1), repeat=cas.n - 1):
        s = predict_batch(cas.with_thresholds(th), b).speedup
        assert tab[tuple(t - 1 for t in th)] == pytest.approx(s, rel=1e-11)
        if s > best * (1 + 1e-12):
            best = s
    opt = optimize_batch_thresholds(cas, b, tmax)
    assert opt.speedup == pytest.approx(best, rel=1e-11)
    assert predict_batch(cas.with_thresholds(opt.thresholds), b).speedup == pytest.approx(
        best, rel=1e-11)


def test_b6_optimal_gamma_shrinks_and_crossover_two_model_roofline():
    cas = _roofline_pair(alpha=0.8, gamma=4, w=1.0, c=0.01, o=0.05, draft=0.05)
    pts = batch_sweep(cas, [1, 8, 32, 64, 128], max_threshold=16)
    gam = [p.thresholds_optimal[0] for p in pts]
    assert all(x >= y for x, y in zip(gam, gam[1:], strict=False)) and gam[0] > gam[-1]
    cr = crossover_batch(cas, max_batch=4096)
    b = cr.batch
    assert b is not None and 1 < b < 4096
    s = [optimize_batch_thresholds(cas, k, 16).speedup for k in range(1, b + 1)]
    assert all(x > 1.0 for x in s[:-1]) and s[-1] <= 1.0  # the first crossing: scanned
    fixed = crossover_batch(cas, max_batch=4096, optimal=False)
    assert fixed.batch <= b  # the optimum adapts theta, so it crosses no earlier


def test_crossover_none_and_batch_table_range():
    cas = Cascade.from_config({
        "models": [{"name": "t", "cost": {"batch_table": {"1": [1.0, 1.0, 1.0],
                                                          "16": [1.2, 1.2, 1.3]}}},
                   {"name": "d", "cost": 0.01}],
        "acceptance": [{"alpha": 0.8}], "thresholds": [2]})
    cr = crossover_batch(cas)
    assert cr.batch is None and cr.max_batch == 16
    with pytest.raises(PolyspecInputError, match=r"models\[0\].cost.batch_table: batch 17"):
        predict_batch(cas, 17)


# --- input errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad, field", [(0, "batch"), (1.5, "batch"), ("8", "batch"),
                                        (True, "batch")])
def test_bad_batch(bad, field):
    cas = Cascade.from_config(DEFAULT_CASCADE)
    with pytest.raises(PolyspecInputError, match=f"^{field}:"):
        predict_batch(cas, bad)


def test_bad_inputs_name_the_field():
    cas = Cascade.from_config(DEFAULT_CASCADE)
    with pytest.raises(PolyspecInputError, match="^cascade:"):
        predict_batch(DEFAULT_CASCADE, 2)
    with pytest.raises(PolyspecInputError, match=r"^batches\[1\]:"):
        batch_sweep(cas, [1, -2])
    with pytest.raises(PolyspecInputError, match="^batches:"):
        batch_sweep(cas, [])
    with pytest.raises(PolyspecInputError, match="^max_threshold:"):
        optimize_batch_thresholds(cas, 2, 0)
    with pytest.raises(PolyspecInputError, match="^max_threshold:"):
        optimize_batch_thresholds(Cascade.from_config({**DEFAULT_CASCADE,
                                                       "models": DEFAULT_CASCADE["models"]
                                                       + [{"name": "x", "cost": 0.001}],
                                                       "acceptance": DEFAULT_CASCADE[
                                                           "acceptance"] + [{"alpha": 0.5}],
                                                       "thresholds": [1, 1, 1, 1]}), 2, 64)
    with pytest.raises(PolyspecInputError, match="^l_pmf:"):
        max_fill_mean([0.5, 0.5], 3, 2)
    with pytest.raises(PolyspecInputError, match="^theta:"):
        max_fill_mean([0.0, 1.0], 0, 2)
    with pytest.raises(PolyspecInputError, match="^g_pmf:"):
        max_block_law([0.2, 0.2], 2)
    with pytest.raises(PolyspecInputError, match="^max_batch:"):
        crossover_batch(cas, max_batch=0)


def test_cap_conditional_laws_search_equals_predict():
    """Hidden-regime laws (a law of A per block length) go through the same search."""
    from polyspec_theory.core.config import Model
    from polyspec_theory.core.regimes import HiddenRegimes, RegimeLaw

    sticky = HiddenRegimes([0.7, 0.3], [[0.97, 0.03], [0.02, 0.98]], [0.3, 0.95])
    base = Cascade.from_config({
        "models": [{"name": "t", "cost": {"roofline": {"weight_time": 1.0,
                                                       "compute_time": 0.05}}},
                   {"name": "m", "cost": 0.2}, {"name": "s", "cost": 0.02}],
        "acceptance": [{"alpha": 0.7}, {"alpha": 0.6}], "thresholds": [3, 2]})
    cas = Cascade(tuple(Model(m.name, m.cost) for m in base.models),
                  (RegimeLaw(sticky, 64), base.laws[1]), (3, 2))
    for b in (1, 4):
        tab = _speedup_table(cas, b, 3)
        for th in itertools.product(range(1, 4), repeat=2):
            s = predict_batch(cas.with_thresholds(th), b).speedup
            assert tab[th[0] - 1, th[1] - 1] == pytest.approx(s, rel=1e-11)
    assert predict_batch(cas, 1).speedup == predict(cas).speedup
