"""Symbolic P1: n = 2 is Leviathan's formula; n = 3 (and 4) closed forms equal predict.

All checks are exact or at rounding level (no Monte Carlo).
"""

from __future__ import annotations

import functools

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError, leviathan_speedup
from polyspec_theory.closed_forms.symbolic_cascade import (
    evaluate_against_predict,
    leviathan_derivation,
    symbolic_cascade,
    three_level_closed_form,
)


def test_leviathan_derivation():
    d = leviathan_derivation()
    assert d["difference"] == 0
    assert d["f"] == 1
    gamma = sp.Symbol("gamma", integer=True, positive=True)
    assert sp.simplify(d["phi"] - gamma) == 0
    # numeric spot checks of the symbolic speedup against D2
    alpha, c = sp.symbols("alpha c", positive=True)
    for a, g, cc in [(0.6, 2, 0.0), (0.8, 5, 0.05), (0.9, 10, 0.0), (0.3, 1, 0.5)]:
        val = float(d["speedup"].subs({alpha: a, c: cc, gamma: g}))
        assert val == pytest.approx(leviathan_speedup(a, g, cc), rel=1e-12)


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
def test_symbolic_dp_two_models_is_leviathan(gamma):
    sym = symbolic_cascade((gamma,))
    a1 = sym.alphas[0]
    b1, b2 = sym.bases
    k1 = sym.slopes[0]
    c = sp.Symbol("c", positive=True)
    lev = (1 - a1 ** (gamma + 1)) / ((1 - a1) * (gamma * c + 1))
    expr = sym.speedup.subs({k1: 0, b2: c * b1})
    assert sp.simplify(expr - lev) == 0
    assert sym.phi == (gamma,)


def test_three_level_closed_form_theta_3_2():
    sym = three_level_closed_form(3, 2)
    a1, a2 = sym.alphas
    b1, b2, b3 = sym.bases
    k1, k2, _ = sym.slopes
    # phi_2 by hand: f = (1, 1 - a2, 1 - a2) -> phi = 3 - 2 a2; phi_3 = theta_2 = 2
    assert sp.expand(sym.phi[0] - (3 - 2 * a2)) == 0
    assert sym.phi[1] == 2
    # E[C_2] = 2 b3 + b2 + 2 k2 (block of exactly 2 drafted tokens, 3 positions)
    ec2 = 2 * b3 + b2 + 2 * k2
    # block law of level 1 and E[L_1] by hand
    pl = {1: 1 - a2, 2: a2 * (1 - a2), 3: a2**2}
    f = [1, pl[1], pl[1] ** 2 + pl[2]]
    g_pmf = {}
    for s in range(3):
        for ln, p in pl.items():
            if s + ln >= 3:
                g_pmf[s + ln] = g_pmf.get(s + ln, 0) + f[s] * p
    for g, p in g_pmf.items():
        assert sp.expand(sym.block_pmfs[0][g] - p) == 0
    el1 = sum(p * sum(a1**k for k in range(g + 1)) for g, p in g_pmf.items())
    ec1 = sym.phi[0] * ec2 + sum(p * (b1 + k1 * g) for g, p in g_pmf.items())
    assert sp.simplify(sym.speedup - b1 * el1 / ec1) == 0


@functools.lru_cache
def _closed_form(th):
    return three_level_closed_form(*th)


@pytest.mark.parametrize("th", [(2, 2), (3, 2), (2, 1), (1, 3)])
@settings(derandomize=True, deadline=None, max_examples=15)
@given(a1=st.floats(0.01, 0.99), a2=st.floats(0.01, 0.99), b2=st.floats(0.01, 0.6),
       b3=st.floats(0.0, 0.1), k1=st.floats(0.0, 0.1), k2=st.floats(0.0, 0.05))
def test_three_level_equals_predict(th, a1, a2, b2, b3, k1, k2):
    sym = _closed_form(th)
    r = evaluate_against_predict(sym, [a1, a2], [1.0, b2, b3], [k1, k2, 0.0])
    assert r["symbolic"] == pytest.approx(r["predict"], rel=1e-11)
    for x, y in zip(r["phi_symbolic"], r["phi_predict"], strict=True):
        assert x == pytest.approx(y, rel=1e-12)


def test_four_level_equals_predict():
    sym = symbolic_cascade((3, 2, 2))
    r = evaluate_against_predict(sym, [0.8, 0.6, 0.7], [1.0, 0.2, 0.03, 0.01],
                                 [0.02, 0.01, 0.001, 0.0])
    assert r["symbolic"] == pytest.approx(r["predict"], rel=1e-12)


def test_truncate_policy_symbolic():
    sym = symbolic_cascade((3, 2), policy="truncate")
    assert sym.block_pmfs[0] == {3: 1}
    # with blocks fixed at theta, E[L_1] is the pairwise capped-geometric mean
    a1 = sym.alphas[0]
    assert sp.expand(sym.mean_emitted - sum(a1**k for k in range(4))) == 0


def test_bad_input():
    with pytest.raises(PolyspecInputError, match=r"^thresholds\[0\]"):
        symbolic_cascade((0, 2))
    with pytest.raises(PolyspecInputError, match=r"^thresholds\[1\]"):
        symbolic_cascade((2, 99))
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        symbolic_cascade(())
    with pytest.raises(PolyspecInputError, match="^policy"):
        symbolic_cascade((2, 2), policy="greedy")
    sym = three_level_closed_form(2, 2)
    with pytest.raises(PolyspecInputError, match="^alphas"):
        evaluate_against_predict(sym, [0.5], [1.0, 0.1, 0.01], [0, 0, 0])
    with pytest.raises(PolyspecInputError, match=r"^alphas\[1\]"):
        evaluate_against_predict(sym, [0.5, 1.5], [1.0, 0.1, 0.01], [0, 0, 0])
