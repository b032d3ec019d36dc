"""D2: dualistic speculative decoding (n = 2), Leviathan et al. Thm 3.8, Cor 3.9, Thm 3.11.

All checks are exact identities (no Monte Carlo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.closed_forms.dualistic import (
    cor39_bound,
    dualistic_speedup,
    expected_emitted,
    leviathan_speedup,
    operations_factor,
    optimal_gamma,
)
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional

PROPS = settings(derandomize=True, deadline=None, max_examples=100)

# Leviathan et al. (2023), Table 1, c = 0: (alpha, gamma) -> speed
TABLE_1 = [
    (0.6, 2, 1.96),
    (0.7, 3, 2.53),
    (0.8, 2, 2.44),
    (0.8, 5, 3.69),
    (0.9, 2, 2.71),
    (0.9, 10, 6.86),
]


@pytest.mark.parametrize(("alpha", "gamma", "speed"), TABLE_1)
def test_leviathan_table_1(alpha, gamma, speed):
    assert round(leviathan_speedup(alpha, gamma, 0.0), 2) == speed
    # the general formula with a constant target cost and a free drafter is the same number
    assert round(dualistic_speedup(alpha, gamma, 1.0, 0.0), 2) == speed
    assert round(expected_emitted(alpha, gamma), 2) == speed


@PROPS
@given(
    alpha=st.floats(0.0, 1.0),
    gamma=st.integers(1, 64),
    t1=st.floats(1e-3, 1e3),
    c=st.floats(0.0, 2.0),
)
def test_dualistic_equals_leviathan_for_constant_costs(alpha, gamma, t1, c):
    want = leviathan_speedup(alpha, gamma, c)
    got = dualistic_speedup(IIDGeometric(alpha), gamma, t1, c * t1)
    assert got == pytest.approx(want, rel=1e-12)
    assert dualistic_speedup({"alpha": alpha}, gamma, {"base": t1}, c * t1) == pytest.approx(
        want, rel=1e-12
    )
    # Thm 3.8 written out
    if alpha < 0.999:
        closed = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
        assert want == pytest.approx(closed, rel=1e-11)


@PROPS
@given(
    law=st.one_of(
        st.floats(0.0, 1.0).map(IIDGeometric),
        st.builds(BetaMixed, st.floats(0.1, 20.0), st.floats(0.1, 20.0)),
        st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5).map(Positional),
    ),
    gamma=st.integers(1, 40),
    base=st.floats(0.1, 10.0),
    slope=st.floats(0.0, 0.5),
    draft=st.floats(0.0, 1.0),
)
def test_dualistic_speedup_with_general_cost_curves(law, gamma, base, slope, draft):
    target = CostCurve.affine(base, slope)
    e_l = math.fsum((np.arange(gamma + 1) + 1) * law.pmf_vector(gamma))
    want = base * e_l / (gamma * draft + base + slope * gamma)
    assert dualistic_speedup(law, gamma, target, draft) == pytest.approx(want, rel=1e-12)
    # the same curve given as a table
    table = {"table": [base + slope * m for m in range(gamma + 1)]}
    assert dualistic_speedup(law, gamma, table, draft) == pytest.approx(want, rel=1e-12)


def _brute_force(law, target, draft, max_gamma):
    speeds = [dualistic_speedup(law, g, target, draft) for g in range(1, max_gamma + 1)]
    return int(np.argmax(speeds)) + 1, max(speeds)


costs_strategy = st.one_of(
    st.floats(0.1, 5.0),
    st.builds(lambda b, k: {"base": b, "per_token": k}, st.floats(0.1, 5.0), st.floats(0, 0.3)),
    st.lists(st.floats(0.1, 5.0), min_size=1, max_size=6).map(
        lambda t: {"table": sorted(t)}
    ),
)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    law=st.one_of(
        st.floats(0.0, 0.99).map(IIDGeometric),
        st.builds(BetaMixed, st.floats(0.2, 20.0), st.floats(1.2, 20.0)),
        st.lists(st.floats(0.0, 0.99), min_size=1, max_size=5).map(Positional),
    ),
    target=costs_strategy,
    draft_fraction=st.floats(0.0, 0.6),
    max_gamma=st.integers(1, 120),
)
def test_optimal_gamma_equals_brute_force(law, target, draft_fraction, max_gamma):
    t1 = CostCurve(**target) if isinstance(target, dict) else CostCurve.constant(target)
    draft = draft_fraction * t1.t1
    best = optimal_gamma(law, target, draft, max_gamma=max_gamma)
    g_bf, s_bf = _brute_force(law, target, draft, max_gamma)
    assert best.searched_up_to == max_gamma
    assert best.speedup == pytest.approx(s_bf, rel=1e-12)
    assert dualistic_speedup(law, best.gamma, target, draft) == pytest.approx(s_bf, rel=1e-12)
    assert 1 <= best.gamma <= max_gamma
    if best.certified:
        # nothing beyond the search range does better (checked up to 4x the range)
        for g in range(max_gamma + 1, 4 * max_gamma + 2):
            assert dualistic_speedup(law, g, target, draft) <= best.speedup * (1 + 1e-12)


def test_optimal_gamma_known_cases():
    # free drafter, iid alpha < 1: S increases with gamma towards 1/(1 - alpha), never reaches it
    # (in float64 E[L] reaches 5.0 exactly near gamma = 158, so stay well below that)
    best = optimal_gamma(0.8, 1.0, 0.0, max_gamma=20)
    assert best.gamma == 20 and not best.certified
    # costly drafter: a small optimum that is certified
    best = optimal_gamma(0.8, 1.0, 0.1, max_gamma=200)
    assert best.certified
    assert best.gamma == int(np.argmax([leviathan_speedup(0.8, g, 0.1) for g in range(1, 201)])) + 1
    # alpha = 1 with a free drafter grows without bound: cannot be certified
    assert not optimal_gamma(1.0, 1.0, 0.0, max_gamma=50).certified


@PROPS
@given(alpha=st.floats(0.0, 1.0), c=st.floats(0.0, 1.0))
def test_cor39_bound(alpha, c):
    r = cor39_bound(alpha, c)
    assert r["applies"] == (alpha > c)
    assert r["holds"]
    assert r["bound"] == pytest.approx((1 + alpha) / (1 + c))
    assert r["speedup_gamma1"] == pytest.approx(leviathan_speedup(alpha, 1, c))
    if alpha > c:
        assert r["speedup_gamma1"] >= r["bound"] * (1 - 1e-15)
        assert r["bound"] > 1.0
        # the optimal gamma is at least as good as gamma = 1
        assert optimal_gamma(alpha, 1.0, c, max_gamma=64).speedup >= r["bound"] * (1 - 1e-15)


@PROPS
@given(alpha=st.floats(0.0, 1.0), gamma=st.integers(1, 100), c_hat=st.floats(0.0, 2.0))
def test_operations_factor(alpha, gamma, c_hat):
    got = operations_factor(alpha, gamma, c_hat)
    # second computation: operations per round over expected tokens per round, E[L] = sum l P(L=l)
    e_l = math.fsum(np.arange(gamma + 2) * IIDGeometric(alpha).emitted_pmf(gamma))
    assert got == pytest.approx((gamma * c_hat + gamma + 1) / e_l, rel=1e-12)
    if alpha < 0.999:  # Thm 3.11 as printed
        closed = (1 - alpha) * (gamma * c_hat + gamma + 1) / (1 - alpha ** (gamma + 1))
        assert got == pytest.approx(closed, rel=1e-11)
    assert got >= (gamma * c_hat + gamma + 1) / (gamma + 1) * (1 - 1e-15)


def test_expected_emitted_accepts_laws():
    assert expected_emitted(1.0, 7) == 8.0
    assert expected_emitted(0.0, 7) == 1.0
    law = BetaMixed(3.0, 1.0)
    assert expected_emitted(law, 5) == law.mean_emitted(5)
    assert expected_emitted({"positional": [0.5]}, 3) == pytest.approx(1.875)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: leviathan_speedup(0.5, 0, 0.1), "gamma"),
        (lambda: leviathan_speedup(0.5, 2.5, 0.1), "gamma"),
        (lambda: leviathan_speedup(0.5, 2, -0.1), "c"),
        (lambda: leviathan_speedup(0.5, 2, float("nan")), "c"),
        (lambda: leviathan_speedup(1.5, 2, 0.1), "alpha"),
        (lambda: leviathan_speedup(float("nan"), 2, 0.1), "alpha"),
        (lambda: dualistic_speedup(0.5, 2, 0.0, 0.1), "target_cost"),
        (lambda: dualistic_speedup(0.5, 2, -1.0, 0.1), "target_cost"),
        (lambda: dualistic_speedup(0.5, 2, 1.0, -0.1), "draft_cost"),
        (lambda: dualistic_speedup(0.5, 2, {"table": [1.0, -1.0]}, 0.0), "target_cost.table"),
        (lambda: dualistic_speedup({"alpah": 0.5}, 2, 1.0, 0.0), "law.alpah"),
        (lambda: operations_factor(0.5, 2, -1.0), "c_hat"),
        (lambda: optimal_gamma(0.5, 1.0, 0.1, max_gamma=0), "max_gamma"),
        (lambda: optimal_gamma(0.5, 0.0, 0.1), "target_cost"),
        (lambda: cor39_bound(0.5, -0.2), "c"),
    ],
)
def test_bad_input_names_the_field(call, field):
    with pytest.raises(PolyspecInputError) as err:
        call()
    assert err.value.field == field


def test_free_drafter_is_allowed():
    assert dualistic_speedup(0.7, 3, 1.0, 0.0) == pytest.approx(leviathan_speedup(0.7, 3, 0.0))
    assert optimal_gamma(0.7, 1.0, 0.0, max_gamma=10).gamma == 10
