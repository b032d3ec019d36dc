"""P2 (Wald + Lorden bounds on phi) and P3 (Hoeffding tail, CLT variance) against the exact DP.

No Monte Carlo: every comparison is with exact dynamic programmes, so there is no
false-failure rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError, predict, renewal_fill
from polyspec_theory.bounds.tails import (
    exact_tail,
    forward_count_moments,
    hoeffding_tail,
    length_moments,
    phi_bounds,
    target_forwards_clt,
)
from polyspec_theory.core.config import Cascade


def random_law(rng):
    """Random integer law on 1..ell: Dirichlet weights, concentration from very sparse (near
    point masses, where the bounds are attained) to flat."""
    ell = int(rng.integers(1, 13))
    w = rng.dirichlet(np.full(ell, 10 ** rng.uniform(-2, 1)))
    return np.concatenate([[0.0], w])


def theory_upper(p, theta):
    """P2 as the spec states it: (theta + min(ell - 1, E[L^2]/mu - 1)) / mu."""
    m = length_moments(p)
    return (theta + min(m["ell"] - 1, m["m2"] / m["mu"] - 1)) / m["mu"]


def test_phi_sandwich_on_3000_random_laws_and_tightness():
    rng = np.random.default_rng(12345)
    pos = []
    for _ in range(3000):
        p = random_law(rng)
        theta = int(rng.integers(1, 61))
        phi, _ = renewal_fill(p, theta)
        b = phi_bounds(p, theta)
        assert b.contains(phi), (p, theta, phi, b)
        assert b.wald_lower <= phi * (1 + 1e-12)
        # the implemented upper bound is exactly the spec's, and the Lorden term is the min
        assert b.upper == pytest.approx(theory_upper(p, theta), rel=1e-12)
        assert b.lorden_upper <= b.trivial_upper * (1 + 1e-12)
        if b.upper - b.lower > 1e-9:
            pos.append((phi - b.lower) / (b.upper - b.lower))
    pos = np.array(pos)
    # nearly attained at both ends on random laws (tight)
    assert pos.max() > 0.999
    assert pos.min() < 1e-3


@pytest.mark.parametrize("ell", [1, 2, 3, 5, 9])
def test_bounds_attained_exactly_by_point_masses(ell):
    p = np.zeros(ell + 1)
    p[ell] = 1.0
    for k in range(4):
        theta = k * ell + 1  # theta = 1 (mod ell): overshoot over theta-1 is ell = E[L^2]/mu
        phi, _ = renewal_fill(p, theta)
        assert phi == pytest.approx(phi_bounds(p, theta).upper, rel=1e-14)
        theta = (k + 1) * ell  # no overshoot: Wald's lower bound
        phi, _ = renewal_fill(p, theta)
        assert phi == pytest.approx(phi_bounds(p, theta).lower, rel=1e-14)


def test_lower_bound_at_least_one():
    p = np.array([0.0, 0.0, 0.0, 0.5, 0.5])  # mu = 3.5 > theta = 2
    b = phi_bounds(p, 2)
    assert b.wald_lower < 1.0 == b.lower
    assert renewal_fill(p, 2)[0] == 1.0


def test_bounds_on_cascade_levels():
    cfg = {"models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.2},
                      {"name": "c", "cost": 0.05}, {"name": "d", "cost": 0.01}],
           "acceptance": [{"alpha": 0.85}, {"beta": [6, 1.5]}, {"positional": [0.8, 0.6]}],
           "thresholds": [8, 4, 2]}
    pred = predict(Cascade.from_config(cfg))
    for i in (1, 2):
        b = phi_bounds(pred.levels[i].emitted_pmf, cfg["thresholds"][i - 1])
        assert b.contains(pred.levels[i].phi)


@settings(derandomize=True, deadline=None, max_examples=200)
@given(seed=st.integers(0, 2**63 - 1), theta=st.integers(1, 80))
def test_hoeffding_dominates_exact_tail(seed, theta):
    p = random_law(np.random.default_rng(seed))
    tail = exact_tail(p, theta)
    k = np.arange(tail.size)
    bound = hoeffding_tail(p, theta, k)
    lattice = hoeffding_tail(p, theta, k, lattice=True)
    assert np.all(tail <= bound + 1e-12)
    assert np.all(tail <= lattice + 1e-12)
    assert np.all(lattice <= bound + 1e-15)
    # sum of the tail is phi
    assert tail.sum() == pytest.approx(renewal_fill(p, theta)[0], rel=1e-12)
    # beyond theta rounds the block is always full
    assert tail[-1] == 0.0


def test_hoeffding_is_informative_for_large_theta():
    p = np.array([0.0, 0.3, 0.4, 0.3])  # mu = 2, ell = 3
    theta = 400
    k = 260  # 30% above theta / mu
    b = hoeffding_tail(p, theta, k)
    assert b < 1e-5
    assert exact_tail(p, theta, k)[k] <= b
    assert hoeffding_tail(p, theta, 150) == 1.0  # k < theta/mu: not applicable


def test_deterministic_length_tail():
    p = np.array([0.0, 1.0])
    assert hoeffding_tail(p, 5, 5) == 0.0
    assert hoeffding_tail(p, 5, 4) == 1.0
    assert list(exact_tail(p, 5)) == [1, 1, 1, 1, 1, 0]


def _brute_moments(p, theta):
    """E[N], Var[N] by enumerating every path (tiny laws only)."""
    stack = [(0, 0, 1.0)]
    m1 = m2 = 0.0
    while stack:
        s, k, q = stack.pop()
        if s >= theta:
            m1 += k * q
            m2 += k * k * q
            continue
        for ln, w in enumerate(p):
            if w > 0:
                stack.append((s + ln, k + 1, q * w))
    return m1, m2 - m1 * m1


@pytest.mark.parametrize("theta", [1, 2, 5, 9])
def test_forward_count_moments_exact(theta):
    p = np.array([0.0, 0.2, 0.5, 0.3])
    mom = forward_count_moments(p, theta)
    m1, var = _brute_moments(p, theta)
    assert mom["mean"] == pytest.approx(m1, rel=1e-12)
    assert mom["var"] == pytest.approx(var, rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("p", [[0.0, 0.2, 0.5, 0.3], [0.0, 0.6, 0.0, 0.0, 0.4],
                               [0.0, 0.05, 0.05, 0.9]])
def test_clt_variance_matches_exact_count_variance(p):
    """Var(rounds for n tokens) = n sigma^2/mu^3 + O(1): the exact variance from the DP agrees
    to 2% at n = 1500 and 3000, and the difference converges to a constant below 1."""
    p = np.asarray(p)
    diffs = []
    for n_tok in (1500, 3000):
        clt = target_forwards_clt(p, n_tok)
        exact = forward_count_moments(p, n_tok)
        assert exact["var"] == pytest.approx(clt["var"], rel=0.02)
        assert exact["mean"] == pytest.approx(clt["mean"], rel=0.01)
        diffs.append(exact["var"] - clt["var"])
    assert abs(diffs[1]) < 1.0
    assert abs(diffs[1] - diffs[0]) < 1e-6
    m = length_moments(p)
    assert clt["var_per_token"] == pytest.approx(m["var"] / m["mu"] ** 3)
    assert clt["sd"] == pytest.approx(math.sqrt(clt["var"]))


def test_bad_input():
    with pytest.raises(PolyspecInputError, match="^theta"):
        phi_bounds([0.0, 1.0], 0)
    with pytest.raises(PolyspecInputError, match="^theta"):
        phi_bounds([0.0, 1.0], 2.5)
    with pytest.raises(PolyspecInputError, match="^l_pmf"):
        phi_bounds([0.2, 0.8], 3)
    with pytest.raises(PolyspecInputError, match="^l_pmf"):
        phi_bounds([0.0, 0.5, 0.4], 3)
    with pytest.raises(PolyspecInputError, match="^l_pmf"):
        phi_bounds([0.0, float("nan"), 1.0], 3)
    with pytest.raises(PolyspecInputError, match="^l_pmf"):
        phi_bounds([], 3)
    with pytest.raises(PolyspecInputError, match="^k"):
        hoeffding_tail([0.0, 1.0], 3, -1)
    with pytest.raises(PolyspecInputError, match="^k"):
        hoeffding_tail([0.0, 1.0], 3, 1.5)
    with pytest.raises(PolyspecInputError, match="^n_tokens"):
        target_forwards_clt([0.0, 1.0], 0)
    with pytest.raises(PolyspecInputError, match="^kmax"):
        exact_tail([0.0, 1.0], 3, -2)


# --- values pinned independently (exact rationals / mpmath), and P2 by hypothesis -----------

def _hoeffding_by_hand(weights, theta, k, lattice=False):
    """Hoeffding for k iid lengths in [1, ell]: exp(-2 eps^2 / (k (ell - 1)^2)) with
    eps = k mu - t, t = theta (or theta - 1); mu, eps exact rationals, exp in mpmath."""
    from fractions import Fraction

    import mpmath

    w = [Fraction(x) for x in weights]
    mu = sum(ln * x for ln, x in enumerate(w)) / sum(w)
    ell = max(ln for ln, x in enumerate(w) if x > 0)
    t = theta - 1 if lattice else theta
    eps = k * mu - t
    if eps <= 0:
        return 1.0
    expo = Fraction(-2) * eps * eps / (k * (ell - 1) ** 2)
    with mpmath.workdps(40):
        return float(mpmath.exp(mpmath.mpf(expo.numerator) / expo.denominator))


@pytest.mark.parametrize(("weights", "theta", "k"), [
    ([0, 3, 4, 3], 400, 260),  # mu = 2, ell = 3: exponent -2 * 120^2 / (260 * 4)
    ([0, 1, 1, 0, 2], 10, 7),  # mu = 11/4, ell = 4
    ([0, 5, 0, 0, 0, 0, 1], 20, 12),  # mu = 11/6, ell = 6
    ([0, 2, 7, 1], 9, 5),  # mu = 19/10, ell = 3
])
def test_hoeffding_tail_values_pinned_by_hand(weights, theta, k):
    p = np.asarray(weights, dtype=np.float64) / sum(weights)
    for lattice in (False, True):
        want = _hoeffding_by_hand(weights, theta, k, lattice)
        assert want < 1.0  # every case is inside Hoeffding's range
        got = hoeffding_tail(p, theta, k, lattice=lattice)
        assert got == pytest.approx(want, rel=1e-12)
    # the first case by hand: exp(-2 * 120^2 / 1040) = exp(-360/13)
    if weights == [0, 3, 4, 3]:
        assert hoeffding_tail(p, theta, k) == pytest.approx(math.exp(-360 / 13), rel=1e-13)
    # outside Hoeffding's range (k mu <= theta) the trivial bound 1
    k_small = int(theta * sum(weights) // sum(ln * x for ln, x in enumerate(weights)))
    assert hoeffding_tail(p, theta, k_small) == 1.0


@settings(derandomize=True, deadline=None, max_examples=300)
@given(weights=st.lists(st.integers(0, 12), min_size=1, max_size=9).filter(
    lambda w: sum(w) > 0), theta=st.integers(1, 70))
def test_p2_bounds_equal_their_formulas_and_hold_against_the_exact_dp(weights, theta):
    """P2 on random integer laws: the bounds are exactly max(1, theta/mu) and
    (theta - 1 + E[L^2]/mu)/mu (exact rationals, written here), the trivial upper bound
    (theta - 1 + ell)/mu, and the exact phi (renewal DP) lies between them."""
    from fractions import Fraction

    w = [0, *weights]
    tot = sum(w)
    mu = Fraction(sum(ln * x for ln, x in enumerate(w)), tot)
    m2 = Fraction(sum(ln * ln * x for ln, x in enumerate(w)), tot)
    ell = max(ln for ln, x in enumerate(w) if x > 0)
    p = np.asarray(w, dtype=np.float64) / tot
    b = phi_bounds(p, theta)
    assert b.wald_lower == pytest.approx(float(theta / mu), rel=1e-13)
    assert b.lower == pytest.approx(float(max(Fraction(1), theta / mu)), rel=1e-13)
    assert b.upper == pytest.approx(float((theta - 1 + m2 / mu) / mu), rel=1e-12)
    assert b.trivial_upper == pytest.approx(float((theta - 1 + ell) / mu), rel=1e-12)
    phi, _ = renewal_fill(p, theta)
    assert b.lower * (1 - 1e-12) <= phi <= b.upper * (1 + 1e-12)
    # the Hoeffding tail bound dominates the exact tail at every k
    tail = exact_tail(p, theta)
    kk = np.arange(tail.size)
    assert np.all(tail <= hoeffding_tail(p, theta, kk) + 1e-12)
