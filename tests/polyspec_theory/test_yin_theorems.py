"""Yin et al. (NeurIPS'24) Y1-Y2 on small Markov chains: exact identities, property tests on
random laws and chains, brute-force enumeration of the literal algorithms
(tests/polyspec_theory/yin_cases.py), bad input. Y3-Y5: test_yin_batch.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.yin.markov import (
    MarkovPair,
    sequence_law,
    state_marginals,
)
from polyspec_theory.yin.theorems import (
    chain_rejections,
    output_law,
    rejection_probability,
    sd_acceptance,
    sd_expected_rejections,
    sd_output_kernels,
    sd_output_law,
    sd_rejections_dp,
    sd_rejections_tv,
    sd_residual,
    sd_sequence_law,
    unbiased_resampling,
    unbiased_resampling_chain,
    y2_chain,
    y2_step,
)
from tests.polyspec_theory.yin_cases import (
    EXACT,
    brute_force_sd,
    chains,
    law_pairs,
    law_to_array,
    target_law,
    tv_of,
)

# --- Y1 ------------------------------------------------------------------------------------


@settings(derandomize=True, deadline=None, max_examples=60)
@given(chains(k_max=6, t_max=12))
def test_y1_dp_equals_tv_sum(pair):
    dp = sd_rejections_dp(*pair)
    tv = sd_rejections_tv(*pair)
    assert dp.shape == tv.shape == (pair.T,)
    np.testing.assert_allclose(dp, tv, rtol=0, atol=EXACT)
    assert abs(sd_expected_rejections(*pair) - sd_expected_rejections(*pair, method="tv")) <= EXACT
    assert 0.0 <= dp.sum() <= pair.T + EXACT


@settings(derandomize=True, deadline=None, max_examples=40)
@given(chains(k_max=4, t_max=5))
def test_y1_sd_output_law_is_target(pair):
    np.testing.assert_allclose(sd_output_kernels(pair.target, pair.draft), pair.target, atol=EXACT)
    law = sd_sequence_law(*pair)
    assert law.shape == (pair.K,) * pair.T
    np.testing.assert_allclose(law, target_law(pair), rtol=0, atol=EXACT)


@settings(derandomize=True, deadline=None, max_examples=15)
@given(chains(k_max=3, t_max=4))
def test_y1_brute_force_enumeration_agrees(pair):
    law, erej = brute_force_sd(*pair)
    assert abs(erej - sd_expected_rejections(*pair)) <= EXACT
    np.testing.assert_allclose(
        law_to_array(law, pair.K, pair.T), target_law(pair), rtol=0, atol=EXACT
    )


def test_y1_hand_computed_values():
    # one step, target uniform on 2 tokens, draft a point mass: reject w.p. 1/2
    one = MarkovPair(np.array([1.0, 0.0]), np.full((1, 2, 2), 0.5), np.array([[[1.0, 0.0]] * 2]))
    assert sd_expected_rejections(*one) == pytest.approx(0.5, abs=EXACT)
    # disjoint supports: every one of the T positions rejects
    T = 5
    target = np.tile(np.array([[0.0, 1.0], [0.0, 1.0]]), (T, 1, 1))
    draft = np.tile(np.array([[1.0, 0.0], [1.0, 0.0]]), (T, 1, 1))
    assert sd_expected_rejections([0.5, 0.5], target, draft) == pytest.approx(T, abs=EXACT)
    # identical models never reject
    assert sd_expected_rejections([0.5, 0.5], target, target) == 0.0


@settings(derandomize=True, deadline=None, max_examples=60)
@given(law_pairs())
def test_f1_f2_single_step(tq):
    t, d = tq
    np.testing.assert_allclose(sd_output_law(t, d), t, atol=EXACT)
    b = sd_acceptance(t, d)
    assert np.all((b >= 0) & (b <= 1))
    assert rejection_probability(d, b) == pytest.approx(tv_of(t, d), abs=EXACT)
    r = sd_residual(t, d)
    assert r.sum() == pytest.approx(1.0, abs=EXACT) and np.all(r >= 0)


# --- Y2 ------------------------------------------------------------------------------------


@settings(derandomize=True, deadline=None, max_examples=80)
@given(law_pairs(), st.data())
def test_y2_no_unbiased_b_beats_sd(tq, data):
    t, d = tq
    K = t.size
    u = np.asarray(data.draw(st.lists(st.floats(0.0, 1.0), min_size=K, max_size=K)))
    b_sd = sd_acceptance(t, d)
    b = u * b_sd  # every b <= b_SD is unbiased; these are all of them on the draft's support
    res = y2_step(t, d, b)
    assert res.unbiased and res.resampling is not None
    np.testing.assert_allclose(output_law(d, b, res.resampling), t, atol=EXACT)
    assert res.sd == pytest.approx(tv_of(t, d), abs=EXACT)
    # exact excess: rejection - TV = sum draft * (b_SD - b) >= 0
    assert res.gap == pytest.approx(float((d * (b_sd - b)).sum()), abs=EXACT)
    assert res.gap >= -EXACT
    if np.max(d * (b_sd - b)) > 1e-9:
        assert res.gap > 0 and not res.at_sd
    sd = y2_step(t, d, b_sd)
    assert sd.unbiased and sd.at_sd and abs(sd.gap) <= EXACT


@settings(derandomize=True, deadline=None, max_examples=60)
@given(law_pairs(k_min=2), st.data())
def test_y2_biased_b_has_no_resampling_law(tq, data):
    t, d = tq
    over = np.flatnonzero(d > t + 1e-6)
    if over.size == 0:  # draft == target up to 1e-6: nothing can over-accept
        return
    x = data.draw(st.sampled_from(list(over)))
    b = sd_acceptance(t, d)
    b[x] = 1.0  # draft*b now exceeds target at x
    assert unbiased_resampling(t, d, b) is None
    res = y2_step(t, d, b)
    assert not res.unbiased and res.resampling is None and res.gap < 0
    with pytest.raises(PolyspecInputError) as e:
        unbiased_resampling(t, d, b, strict=True)
    assert e.value.field == "b" and "unbiased" in str(e.value)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(chains(k_max=4, t_max=5), st.integers(0, 2**32 - 1), st.booleans())
def test_y2_chain_no_unbiased_b_beats_sd(pair, seed, identity):
    rng = np.random.default_rng(seed)
    b_sd = sd_acceptance(pair.target, pair.draft)
    u = np.ones_like(b_sd) if identity else rng.uniform(0, 1, size=b_sd.shape)
    b = u * b_sd
    res = y2_chain(*pair, b)
    assert res.unbiased
    P = unbiased_resampling_chain(*pair, b)
    kern = output_law(pair.draft, b, P)
    np.testing.assert_allclose(sequence_law(pair.init, kern), target_law(pair), rtol=0, atol=EXACT)
    assert res.rejection == pytest.approx(
        chain_rejections(pair.init, pair.draft, b, P).sum(), abs=EXACT
    )
    # under an unbiased algorithm x_{n-1} ~ target, so the excess is exactly
    # sum_n E_target[sum_x draft (b_SD - b)] >= 0
    mu = state_marginals(pair.init, pair.target)[:-1]
    excess = float((mu * (pair.draft * (b_sd - b)).sum(axis=-1)).sum())
    assert res.gap == pytest.approx(excess, abs=1e-11)
    assert res.gap >= -EXACT
    assert res.sd == pytest.approx(sd_expected_rejections(*pair), abs=EXACT)
    if identity:
        assert res.at_sd and abs(res.gap) <= EXACT
    elif excess > 1e-9:
        assert not res.at_sd and res.gap > 0
