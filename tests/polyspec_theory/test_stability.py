"""P6 (CV(A) decreasing in alpha; CV(L) is not; speculative vs greedy) and P7 (heterogeneity).

False-failure budget: one Monte-Carlo check (speculative-sampling acceptance rate on 12
random pairs) at 4 SE, two-sided 6.3e-5 each -> <= 7.6e-4 per run with a fixed seed. All
other checks are exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import BetaMixed, IIDGeometric, PolyspecInputError
from polyspec_theory.bounds.stability import (
    beta_heterogeneity_gap,
    beta_variance_decomposition,
    cv_accepted,
    cv_dense_check,
    cv_derivative_coefficients,
    cv_emitted,
    cv_emitted_not_monotone,
    cv_general_proof,
    cv_monotone_certificate,
    greedy_acceptance,
    heterogeneity_gap,
    speculative_acceptance,
    verification_comparison,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=150)


# ----------------------------------------------------------------------------------------
# P6: CV(A)

def test_general_proof_steps():
    res = cv_general_proof(check_up_to=10)
    assert res["all_negative"] and res["verified_caps"] == list(range(1, 11))
    m, g, t = sp.symbols("m g t", integer=True, positive=True)
    assert sp.simplify(res["low"] + m * (m + 1) / 2) == 0


@pytest.mark.parametrize("g", [1, 2, 3, 10, 57, 400])
def test_coefficients_all_negative(g):
    c = cv_derivative_coefficients(g)
    assert len(c) == 2 * g - 1
    assert all(int(x) < 0 for x in c)


@pytest.mark.parametrize("g", list(range(1, 17)) + [24])
def test_sturm_certificate(g):
    cert = cv_monotone_certificate(g)
    assert cert["decreasing"] and cert["roots_in_0_1"] == 0
    assert cert["degree"] == 2 * g - 2


@pytest.mark.parametrize("g", [1, 2, 7, 100, 2000])
def test_dense_check(g):
    res = cv_dense_check(g, n_grid=801)
    assert res["decreasing"] and res["max_step_ratio"] < 1.0


@PROPS
@given(a=st.floats(1e-3, 0.999), d=st.floats(1e-4, 0.5), g=st.integers(1, 300))
def test_cv_decreasing_property(a, d, g):
    b = min(a + d, 0.9995)
    if b <= a:
        return
    assert cv_accepted(a, g) > cv_accepted(b, g)


@PROPS
@given(a=st.floats(0.01, 0.99), g=st.integers(1, 12))
def test_cv_matches_symbolic(a, g):
    x = sp.Rational(a).limit_denominator(10**9)
    mean = sum(x**k for k in range(1, g + 1))
    second = sum((2 * k - 1) * x**k for k in range(1, g + 1))
    cv = math.sqrt(float(second / mean**2 - 1))
    assert cv_accepted(float(x), g) == pytest.approx(cv, rel=1e-9)


@pytest.mark.parametrize("g", [1, 2, 3, 5, 10, 50])
def test_cv_of_emitted_length_is_not_monotone(g):
    w = cv_emitted_not_monotone(g)
    assert not w["monotone"]
    assert w["cv_at_0"] == 0.0 and w["cv_at_1"] == 0.0 and w["cv_peak"] > 0.1
    assert 0 < w["alpha_peak"] < 1
    if g == 1:  # L - 1 ~ Bernoulli(alpha)
        a = 0.3
        assert cv_emitted(a, 1) == pytest.approx(math.sqrt(a * (1 - a)) / (1 + a))


# ----------------------------------------------------------------------------------------
# P6: speculative sampling vs greedy

def _random_pair(rng, v):
    p = rng.dirichlet(np.full(v, 0.5))
    q = rng.dirichlet(np.full(v, 0.5))
    return p, q


def test_speculative_acceptance_is_one_minus_tv_and_matches_sampling():
    rng = np.random.default_rng(2024)
    draws = 100_000
    for _ in range(12):
        v = int(rng.integers(2, 9))
        p, q = _random_pair(rng, v)
        beta = speculative_acceptance(p, q)
        assert beta == pytest.approx(1 - 0.5 * np.abs(p - q).sum(), rel=1e-12)
        x = rng.choice(v, size=draws, p=q)
        acc = rng.random(draws) < np.minimum(1.0, p[x] / q[x])
        se = math.sqrt(beta * (1 - beta) / draws)
        assert abs(acc.mean() - beta) <= 4 * se + 1e-12


def test_greedy_is_the_zero_temperature_limit():
    rng = np.random.default_rng(9)
    for _ in range(20):
        lp, lq = rng.normal(size=6), rng.normal(size=6)
        for temp in (1e-3, 1e-4):
            p = np.exp((lp - lp.max()) / temp)
            q = np.exp((lq - lq.max()) / temp)
            p, q = p / p.sum(), q / q.sum()
            assert speculative_acceptance(p, q) == pytest.approx(
                greedy_acceptance(p, q), abs=1e-6)
        # greedy acceptance is speculative acceptance of the argmax point masses
        e_p, e_q = np.eye(6)[np.argmax(lp)], np.eye(6)[np.argmax(lq)]
        assert speculative_acceptance(e_p, e_q) == greedy_acceptance(
            np.exp(lp) / np.exp(lp).sum(), np.exp(lq) / np.exp(lq).sum())


def test_neither_rule_dominates():
    agree = ([0.5, 0.3, 0.2], [0.4, 0.2, 0.4])  # same argmax, different laws
    differ = ([0.4, 0.35, 0.25], [0.3, 0.4, 0.3])  # different argmax, close laws
    assert greedy_acceptance(*agree) == 1.0 > speculative_acceptance(*agree)
    assert greedy_acceptance(*differ) == 0.0 < speculative_acceptance(*differ)
    hi = verification_comparison([agree[0]] * 3, [agree[1]] * 3, 4)
    lo = verification_comparison([differ[0]] * 3, [differ[1]] * 3, 4)
    assert hi.alpha_greedy > hi.alpha_spec and lo.alpha_greedy < lo.alpha_spec
    # the E[L] ordering can flip between the iid model and the context-mixed model
    c = verification_comparison([[0.5, 0.3, 0.2], [0.4, 0.35, 0.25]],
                                [[0.3, 0.5, 0.2], [0.9, 0.05, 0.05]], 4)
    assert c.alpha_spec == pytest.approx(0.65) and c.alpha_greedy == 0.5
    assert c.mean_emitted_iid_spec > c.mean_emitted_iid_greedy
    assert c.mean_emitted_mixed_spec < c.mean_emitted_mixed_greedy


@settings(derandomize=True, deadline=None, max_examples=40)
@given(seed=st.integers(0, 2**63 - 1), gamma=st.integers(1, 10), h=st.integers(1, 6))
def test_comparison_consequences(seed, gamma, h):
    rng = np.random.default_rng(seed)
    pairs = [_random_pair(rng, 4) for _ in range(h)]
    ps, qs = np.array([p for p, _ in pairs]), np.array([q for _, q in pairs])
    c = verification_comparison(ps, qs, gamma, draft_cost=0.05)
    for al, el, el_mix, sp_, cv in (
        (c.alpha_spec, c.mean_emitted_iid_spec, c.mean_emitted_mixed_spec, c.speedup_spec,
         c.cv_accepted_spec),
        (c.alpha_greedy, c.mean_emitted_iid_greedy, c.mean_emitted_mixed_greedy,
         c.speedup_greedy, c.cv_accepted_greedy),
    ):
        assert el == pytest.approx(IIDGeometric(al).mean_emitted(gamma), rel=1e-12)
        assert el_mix >= el - 1e-12  # P7
        assert sp_ == pytest.approx(el / (gamma * 0.05 + 1), rel=1e-12)
        if al > 0:
            assert cv == pytest.approx(cv_accepted(al, gamma), rel=1e-12)
    # with the iid model, higher mean acceptance <=> higher speedup <=> lower CV(A)
    if abs(c.alpha_spec - c.alpha_greedy) > 1e-9 and min(c.alpha_spec, c.alpha_greedy) > 0:
        better = c.alpha_spec > c.alpha_greedy
        assert (c.speedup_spec > c.speedup_greedy) is better
        assert (c.cv_accepted_spec < c.cv_accepted_greedy) is better


# ----------------------------------------------------------------------------------------
# P7

@PROPS
@given(a=st.floats(0.05, 50.0), b=st.floats(0.05, 50.0), g=st.integers(1, 200))
def test_beta_mixture_raises_mean_emitted(a, b, g):
    r = beta_heterogeneity_gap(a, b, g)
    assert r["gap"] >= -1e-12 * r["iid"]
    if g == 1:
        assert r["gap"] == pytest.approx(0.0, abs=1e-12)
    else:
        assert r["gap"] > 0


@PROPS
@given(al=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5), g=st.integers(1, 30))
def test_discrete_mixture_raises_mean_emitted(al, g):
    r = heterogeneity_gap(al, g)
    assert r["gap"] >= -1e-12 * r["iid"]
    if max(al) - min(al) == 0:
        assert r["gap"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("a, b, g", [(2.0, 1.5, 8), (0.5, 0.5, 3), (20.0, 2.0, 30),
                                     (1.0, 4.0, 1), (6.0, 1.5, 100)])
def test_variance_decomposition(a, b, g):
    mom = beta_variance_decomposition(a, b, g)
    quad = beta_variance_decomposition(a, b, g, method="quadrature")
    law = BetaMixed(a, b)
    assert mom["total"] == pytest.approx(law.var(g), rel=1e-10)
    assert mom["mean"] == pytest.approx(law.mean(g), rel=1e-12)
    assert mom["within"] > 0 and mom["between"] > 0
    for k in ("total", "within", "between", "mean"):
        assert mom[k] == pytest.approx(quad[k], rel=1e-7)


def test_between_variance_vanishes_when_alpha_concentrates():
    vals = [beta_variance_decomposition(0.7 * s, 0.3 * s, 10)["between"]
            for s in (1, 10, 100, 1000)]
    assert all(x > y for x, y in zip(vals, vals[1:], strict=False))
    assert vals[-1] < 1e-2 * vals[0]
    # and the total tends to the iid variance at alpha = 0.7
    tot = beta_variance_decomposition(700.0, 300.0, 10)["total"]
    assert tot == pytest.approx(IIDGeometric(0.7).var(10), rel=0.02)


def test_bad_input():
    with pytest.raises(PolyspecInputError, match="^alpha"):
        cv_accepted(1.5, 3)
    with pytest.raises(PolyspecInputError, match="^g"):
        cv_accepted(0.5, 0)
    with pytest.raises(PolyspecInputError, match="^alpha"):
        cv_emitted(float("nan"), 3)
    with pytest.raises(PolyspecInputError, match="^q"):
        speculative_acceptance([0.5, 0.5], [0.2, 0.3, 0.5])
    with pytest.raises(PolyspecInputError, match="^p"):
        greedy_acceptance([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(PolyspecInputError, match="^weights"):
        verification_comparison([[0.5, 0.5]] * 2, [[0.5, 0.5]] * 2, 3, weights=[1.0])
    with pytest.raises(PolyspecInputError, match="^gamma"):
        verification_comparison([[0.5, 0.5]], [[0.5, 0.5]], 0)
    with pytest.raises(PolyspecInputError, match="^method"):
        beta_variance_decomposition(1, 1, 3, method="mc")
    with pytest.raises(PolyspecInputError, match="^a"):
        beta_variance_decomposition(0, 1, 3)
    with pytest.raises(PolyspecInputError, match="^alphas"):
        heterogeneity_gap([0.2, 1.2], 3)
