"""Yin et al. (NeurIPS'24) Y3-Y5 on small Markov chains (batch verification, over-acceptance
and the Pareto front): exact identities, property tests, brute-force enumeration of the literal
algorithms (tests/polyspec_theory/yin_cases.py), bad input. Y1-Y2: test_yin_theorems.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from polyspec_theory import PolyspecInputError
from polyspec_theory.yin.markov import (
    state_marginals,
)
from polyspec_theory.yin.theorems import (
    BATCH_MODES,
    batch_expected_rejections,
    batch_improvement,
    batch_lower_bound,
    batch_output_law,
    batch_rejections,
    batch_saturation,
    batch_sequence_law,
    batch_step_rejection,
    chain_rejections,
    optimal_loss,
    optimal_resampling,
    output_law,
    output_tv,
    pareto_front,
    pareto_point,
    rejection_probability,
    require_over_acceptance,
    sd_acceptance,
    sd_expected_rejections,
    sd_rejections_dp,
    sd_residual,
    sd_sequence_law,
    unbiased_resampling,
    y2_chain,
    y2_step,
    yin_demo,
    yin_demo_chain,
)
from tests.polyspec_theory.yin_cases import (
    EXACT,
    brute_force_batch,
    chains,
    law_pairs,
    law_to_array,
    laws,
    target_law,
    tv_of,
)

# --- Y3 ------------------------------------------------------------------------------------

MS = (1, 2, 3, 4, 6, 8)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(chains(k_max=5, t_max=10), st.sampled_from(BATCH_MODES))
def test_y3_batch_le_y1_non_increasing_and_bounded(pair, mode):
    y1 = sd_expected_rejections(*pair)
    vals = np.array([batch_expected_rejections(*pair, M, mode) for M in MS])
    lim = batch_expected_rejections(*pair, math.inf, mode)
    lb = batch_lower_bound(*pair, mode)
    assert abs(vals[0] - y1) <= EXACT  # M = 1 is SD
    assert np.all(vals <= y1 + EXACT)
    assert np.all(np.diff(vals) <= EXACT)
    assert np.all(vals >= lim - EXACT)
    assert lim >= lb - EXACT
    assert batch_improvement(*pair, 4, mode) == pytest.approx(y1 - vals[3], abs=EXACT)
    if mode == "per_position":  # the limit is exactly the target mass off the draft support
        assert lim == pytest.approx(lb, abs=EXACT)
    sat = batch_saturation(*pair, Ms=MS, mode=mode)
    np.testing.assert_allclose(sat.rejections, vals, atol=EXACT)
    np.testing.assert_allclose(sat.improvement, y1 - vals, atol=EXACT)
    assert sat.limit_rejections == pytest.approx(lim, abs=EXACT)


@settings(derandomize=True, deadline=None, max_examples=30)
@given(chains(k_max=5, t_min=2, t_max=10, kinds=("mixture",), eps=(0.1, 0.8), zeros=False))
def test_y3_sequences_never_reach_zero(pair):
    # full supports, draft != target: M drafts help only at round starts, so even M -> inf
    # leaves rejections >= the M-free lower bound > 0 (and the per-position limit is 0)
    lb = batch_lower_bound(*pair, "sequences")
    assert lb > 0
    lim = batch_expected_rejections(*pair, math.inf, "sequences")
    assert lim >= lb - EXACT
    big = batch_expected_rejections(*pair, 256, "sequences")
    assert lim - EXACT <= big <= batch_expected_rejections(*pair, 16, "sequences") + EXACT
    assert batch_expected_rejections(*pair, math.inf, "per_position") == 0.0


def test_y3_limit_is_the_large_m_value():
    # convergence in M can be slow (a token with tiny draft mass and large target/draft ratio
    # needs many drafts), so this is checked on the demo chain, where it is quick
    pair = yin_demo_chain(0)
    for mode in BATCH_MODES:
        lim = batch_expected_rejections(*pair, math.inf, mode)
        gaps = [batch_expected_rejections(*pair, M, mode) - lim for M in (16, 64, 256, 1024)]
        assert np.all(np.diff(gaps) < 0) and gaps[-1] >= -EXACT
        assert gaps[-1] < 1e-4
    assert batch_expected_rejections(*pair, math.inf, "per_position") == 0.0


@settings(derandomize=True, deadline=None, max_examples=30)
@given(chains(k_min=3, k_max=5, t_max=10, zeros=False, draft_drop=1), st.sampled_from(BATCH_MODES))
def test_y3_missing_draft_support_never_reaches_zero(pair, mode):
    # the draft never proposes one token per row that the target can emit: rejection stays
    # >= target mass off the draft's support, which is what the per-position limit equals
    mu = state_marginals(pair.init, pair.target)[:-1]
    m0 = float((mu * np.where(pair.draft > 0, 0.0, pair.target).sum(axis=-1)).sum())
    assert m0 > 0
    lim = batch_expected_rejections(*pair, math.inf, mode)
    assert lim >= m0 - EXACT
    for M in (1, 3, 50):
        assert batch_expected_rejections(*pair, M, mode) >= lim - EXACT
    if mode == "per_position":
        assert lim == pytest.approx(m0, abs=EXACT)


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    chains(k_max=4, t_max=5), st.sampled_from(BATCH_MODES), st.sampled_from([1, 2, 3, 7, math.inf])
)
def test_y3_batch_output_law_is_target(pair, mode, M):
    np.testing.assert_allclose(
        batch_sequence_law(*pair, M, mode), target_law(pair), rtol=0, atol=EXACT
    )
    np.testing.assert_allclose(
        batch_output_law(pair.target, pair.draft, M), pair.target, atol=EXACT
    )


@settings(derandomize=True, deadline=None, max_examples=12)
@given(chains(k_max=2, t_max=3), st.sampled_from(BATCH_MODES))
def test_y3_brute_force_enumeration_agrees(pair, mode):
    law, erej = brute_force_batch(*pair, 2, mode)
    assert abs(erej - batch_expected_rejections(*pair, 2, mode)) <= EXACT
    np.testing.assert_allclose(
        law_to_array(law, pair.K, pair.T), target_law(pair), rtol=0, atol=EXACT
    )


@settings(derandomize=True, deadline=None, max_examples=60)
@given(law_pairs(), st.integers(1, 6))
def test_y3_step_rejection_is_product_of_residual_tvs(tq, M):
    # P(all M fail) = prod_i TV(p_{i-1}, draft), p_i the normalized residual of p_{i-1}
    t, d = tq
    p, expect = t.copy(), 1.0
    for _ in range(M):
        tv = tv_of(p, d)
        expect *= tv
        if tv == 0:
            break
        p = np.maximum(p - d, 0) / np.maximum(p - d, 0).sum()
    assert batch_step_rejection(t, d, M) == pytest.approx(expect, abs=EXACT)
    off = float(t[d == 0].sum())
    assert batch_step_rejection(t, d, math.inf) == pytest.approx(off, abs=EXACT)
    assert batch_step_rejection(t, d, M) >= off - EXACT


# --- Y4-Y5 ---------------------------------------------------------------------------------


def _over_acceptance(t, d, u):
    b_sd = sd_acceptance(t, d)
    return b_sd + u * (1.0 - b_sd)


def _min_tv_lp(t, d, b):
    """min over resampling laws P of TV(draft*b + r P, target), by linear programming."""
    K = t.size
    r = 1.0 - float((d * b).sum())
    g = t - d * b
    # variables [P (K), v (K)], v >= |r P - g|; minimize 0.5 sum v
    c = np.concatenate([np.zeros(K), 0.5 * np.ones(K)])
    eye = np.eye(K)
    A = np.block([[r * eye, -eye], [-r * eye, -eye]])
    ub = np.concatenate([g, -g])
    A_eq = np.concatenate([np.ones(K), np.zeros(K)])[None]
    tol = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    sol = linprog(
        c, A_ub=A, b_ub=ub, A_eq=A_eq, b_eq=[1.0], bounds=[(0, None)] * (2 * K), options=tol
    )
    assert sol.status == 0
    return sol.fun


@settings(derandomize=True, deadline=None, max_examples=80)
@given(law_pairs(), st.data())
def test_y5_identity_over_acceptance(tq, data):
    t, d = tq
    u = np.asarray(data.draw(st.lists(st.floats(0.0, 1.0), min_size=t.size, max_size=t.size)))
    b = _over_acceptance(t, d, u)
    rej, loss = pareto_point(t, d, b)
    assert rej + loss == pytest.approx(tv_of(t, d), abs=EXACT)
    assert loss == pytest.approx(optimal_loss(t, d, b), abs=EXACT)
    assert rej == pytest.approx(rejection_probability(d, b), abs=EXACT)
    # P* attains Loss*, and the output law is draft*b + r*P*
    P = optimal_resampling(t, d, b)
    assert output_tv(t, d, b, P) == pytest.approx(loss, abs=EXACT)
    out = output_law(d, b, P)
    assert out.sum() == pytest.approx(1.0, abs=EXACT)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(law_pairs(k_max=5), st.data())
def test_y4_optimal_loss_is_minimal_for_any_b(tq, data):
    t, d = tq
    K = t.size
    b = np.asarray(data.draw(st.lists(st.floats(0.0, 1.0), min_size=K, max_size=K)))
    loss = optimal_loss(t, d, b)
    assert output_tv(t, d, b, optimal_resampling(t, d, b)) == pytest.approx(loss, abs=EXACT)
    assert _min_tv_lp(t, d, b) == pytest.approx(loss, abs=1e-9)
    P = np.asarray(data.draw(laws(K)))
    assert output_tv(t, d, b, P) >= loss - EXACT
    # off the over-acceptance region the sum can only be larger than TV
    assert rejection_probability(d, b) + loss >= tv_of(t, d) - EXACT


@settings(derandomize=True, deadline=None, max_examples=40)
@given(law_pairs(k_min=2), st.integers(2, 30))
def test_y5_pareto_front_is_the_linear_segment(tq, num):
    t, d = tq
    tv = tv_of(t, d)
    f = pareto_front(t, d, num)
    assert f.lam.shape == f.rejection.shape == f.loss.shape == (num,)
    np.testing.assert_allclose(f.rejection + f.loss, tv, atol=EXACT)
    np.testing.assert_allclose(f.rejection, (1 - f.lam) * tv, atol=EXACT)
    assert f.rejection[0] == pytest.approx(tv, abs=EXACT) and f.loss[0] == pytest.approx(
        0, abs=EXACT
    )
    assert f.rejection[-1] == pytest.approx(0, abs=EXACT) and f.loss[-1] == pytest.approx(
        tv, abs=EXACT
    )
    assert f.tv == pytest.approx(tv, abs=EXACT)


def test_over_acceptance_check():
    t, d = np.array([0.2, 0.8]), np.array([0.6, 0.4])
    b_sd = sd_acceptance(t, d)
    np.testing.assert_allclose(b_sd, [1 / 3, 1.0])
    require_over_acceptance(t, d, [0.5, 1.0])
    with pytest.raises(PolyspecInputError) as e:
        pareto_point(t, d, [0.2, 1.0])
    assert e.value.field == "b" and "over-acceptance" in str(e.value)
    # hand-computed: b = (2/3, 1): reject 0.6/3 = 0.2, loss (0.4 - 0.2) = 0.2, TV = 0.4
    rej, loss = pareto_point(t, d, [2 / 3, 1.0])
    assert (rej, loss) == (pytest.approx(0.2), pytest.approx(0.2))
    np.testing.assert_allclose(optimal_resampling(t, d, [2 / 3, 1.0]), [0.0, 1.0], atol=EXACT)


# --- demo ----------------------------------------------------------------------------------


def _tv_sum_exact(pair):
    """Y1's TV sum with fractions.Fraction: mu_0 = init, mu_{n+1} = mu_n target_n,
    E[N_rej] = sum_n sum_s mu_n(s) (1/2) sum_x |target_n(s, x) - draft_n(s, x)|."""
    from fractions import Fraction

    k = pair.init.size
    mu = [Fraction(float(v)) for v in pair.init]
    total = Fraction(0)
    for n in range(pair.target.shape[0]):
        tn = [[Fraction(float(v)) for v in row] for row in pair.target[n]]
        dn = [[Fraction(float(v)) for v in row] for row in pair.draft[n]]
        for s in range(k):
            tv = sum(abs(a - b) for a, b in zip(tn[s], dn[s], strict=True)) / 2
            total += mu[s] * tv
        mu = [sum(mu[s] * tn[s][x] for s in range(k)) for x in range(k)]
    return total


def test_yin_demo_chain_exact_values():
    pair = yin_demo_chain(0)
    assert (pair.K, pair.T) == (7, 50)
    again = yin_demo_chain(0)
    assert all(np.array_equal(a, b) for a, b in zip(pair, again, strict=True))
    assert not np.array_equal(yin_demo_chain(1).target, pair.target)
    demo = yin_demo(0, Ms=(1, 2, 4, 8))
    e = demo["expected_rejections_dp"]
    assert abs(e - demo["expected_rejections_tv"]) <= 1e-11
    # Y1 on the demo chain in exact rational arithmetic, written here from the statement
    # (the chain's float entries are exact dyadic rationals): propagate the target's law of
    # x_n and sum E[TV(draft_n, target_n)] over the 50 positions
    exact = _tv_sum_exact(pair)
    assert e == pytest.approx(float(exact), rel=1e-13, abs=0)
    # the seeded chain itself is pinned: its value, to 12 digits
    assert e == pytest.approx(11.7863022992406, abs=1e-12)
    for mode, row in demo["batch"].items():
        r = np.asarray(row["rejections"])
        assert r[0] == pytest.approx(e, abs=1e-11)
        assert np.all(np.diff(r) < 0)
        assert row["limit_rejections"] <= r[-1] + 1e-12
        assert row["limit_rejections"] >= row["lower_bound"] - 1e-12
        if mode == "sequences":
            assert row["lower_bound"] > 0.1 * e
    drop = yin_demo(0, Ms=(1,), draft_drop=1)
    assert drop["batch"]["per_position"]["limit_rejections"] > 0


# --- bad input -----------------------------------------------------------------------------

_T = np.full((2, 2, 2), 0.5)
_I = np.array([0.5, 0.5])
_L = np.array([0.5, 0.5])


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: sd_expected_rejections(_I, _T, _T, method="exact"), "method"),
        (lambda: sd_expected_rejections([0.5, 0.6], _T, _T), "init"),
        (lambda: sd_expected_rejections([1.0], _T, _T), "init"),
        (lambda: sd_expected_rejections(_I, _T * 2, _T), "target"),
        (lambda: sd_expected_rejections(_I, _T, np.full((3, 2, 2), 0.5)), "draft"),
        (lambda: sd_expected_rejections(_I, np.full((0, 2, 2), 0.5), _T), "target"),
        (lambda: sd_expected_rejections(_I, np.full((2, 2, 3), 0.5), _T), "target"),
        (lambda: sd_rejections_dp(_I, _T, np.where(_T > 0, [[[-0.5, 1.5]]], 0)), "draft"),
        (lambda: sd_sequence_law(_I, _T, "abc"), "draft"),
        (lambda: sd_acceptance([0.5, float("nan")], _L), "target"),
        (lambda: sd_residual(_L, [1.0, 0.0, 0.0]), "draft"),
        (lambda: rejection_probability(_L, [0.5, 1.5]), "b"),
        (lambda: rejection_probability(_L, [0.5]), "b"),
        (lambda: rejection_probability(_L, [-0.1, 1.0]), "b"),
        (lambda: output_law(_L, [1.0, 1.0], [0.3, 0.3]), "resampling"),
        (lambda: output_law(_L, [1.0, 1.0], [1.0]), "resampling"),
        (lambda: unbiased_resampling(_L, _L, None), "b"),
        (lambda: y2_step([[0.5, 0.5]], [[0.5, 0.5]], [[1.0, 1.0]]), "target"),
        (lambda: y2_chain(_I, _T, _T, np.ones((2, 2, 3))), "b"),
        (lambda: chain_rejections(_I, _T, np.ones((2, 2, 2)), _T[:1]), "resampling"),
        (lambda: batch_expected_rejections(_I, _T, _T, 0), "M"),
        (lambda: batch_expected_rejections(_I, _T, _T, 1.5), "M"),
        (lambda: batch_expected_rejections(_I, _T, _T, -math.inf), "M"),
        (lambda: batch_expected_rejections(_I, _T, _T, 2, mode="tree"), "mode"),
        (lambda: batch_rejections(_I, _T, _T, True), "M"),
        (lambda: batch_step_rejection(_L, _L, "2"), "M"),
        (lambda: batch_saturation(_I, _T, _T, Ms=[]), "Ms"),
        (lambda: batch_saturation(_I, _T, _T, Ms=[1, 0]), "Ms[1]"),
        (lambda: batch_saturation(_I, _T, _T, Ms=[1, math.inf]), "Ms[1]"),
        (lambda: batch_lower_bound(_I, _T, _T, mode=None), "mode"),
        (lambda: batch_sequence_law(_I, _T, _T, 2, mode="x"), "mode"),
        (lambda: pareto_front(_L, _L, 1), "num"),
        (lambda: pareto_front(_L, [1.0, 0.0, 0.0], 5), "draft"),
        (lambda: optimal_loss(_L, _L, [2.0, 0.0]), "b"),
        (lambda: output_tv(_L, _L, [1.0, 1.0], [0.9, 0.9]), "resampling"),
        (lambda: yin_demo_chain(-1), "seed"),
        (lambda: yin_demo_chain(0, draft_drop=-1), "draft_drop"),
    ],
)
def test_bad_input_names_the_argument(call, field):
    with pytest.raises(PolyspecInputError) as e:
        call()
    assert e.value.field == field
    assert str(e.value).startswith(field)
