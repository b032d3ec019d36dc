"""D1: sympy derivation of the capped-geometric moments and pgf, and the numeric code in
laws.py (IIDGeometric) checked against the lambdified closed forms.

References are the closed forms lambdified with mpmath at a precision chosen per point to
exceed the digits the closed forms lose to cancellation near alpha = 1 (about
3 (log10 g - log10(1 - alpha)) for the variance); no Monte Carlo here.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.closed_forms import symbolic as sym
from polyspec_theory.core.laws import IIDGeometric

alpha_s, g_s, k_s, z_s = sym.symbols()
SETTINGS = settings(derandomize=True, deadline=None, max_examples=120)

# alpha anywhere in [0, 1], extremely close to 1, tiny, and the float neighbours of 1
alphas = st.one_of(
    st.floats(0.0, 1.0),
    st.floats(1.0, 16.0).map(lambda j: 1.0 - 10.0**-j),
    st.sampled_from([1.0 - 2.0**-52, 1.0 - 2.0**-53, 1.0 - 1e-12, 1e-300, 5e-324, 0.0, 1.0]),
)
caps = st.one_of(st.integers(1, 20), st.integers(1, 10_000), st.sampled_from([1, 9_999, 10_000]))


def _dps(alpha: float, g: int) -> int:
    lost = 0.0 if alpha >= 1.0 else -math.log10(1.0 - alpha)
    return 40 + int(3 * (lost + math.log10(g)))


def _close(num: float, ref, rtol: float, atol: float = 1e-300) -> bool:
    """|num - ref| <= rtol |ref| + atol (atol covers float64 underflow only)."""
    assert math.isfinite(num), num
    return abs(mpmath.mpf(num) - ref) <= rtol * abs(ref) + atol


# ----------------------------------------------------------------------------------------
# the derivation itself


def test_derivation_is_an_ordered_list_of_checked_steps():
    steps = sym.derivation()
    assert len(steps) >= 20
    for step in steps:
        assert isinstance(step, sym.DerivationStep)
        assert isinstance(step.description, str) and step.description
        assert isinstance(step.expression, sp.Basic)
    text = [s.description for s in steps]
    # starts from the law, evaluates the defining sums, ends with the alpha -> 1 limits
    assert text[0].startswith("Law of A")
    assert any("E[A] by its definition" in t for t in text)
    assert any("Var[A] = E[A^2] - E[A]^2" in t for t in text)
    assert any("G'(1) = E[A]" in t for t in text)
    assert sum("Limit alpha -> 1" in t for t in text) == 4
    # the defining sums appear unevaluated in the steps that state them
    assert any(s.expression.has(sp.Sum) for s in steps)
    latex = sym.derivation_latex()
    assert latex.count("\\[") == len(steps) and "\\lim" in latex and "\\sum" in latex


def test_closed_forms_have_the_published_shapes():
    cf = sym.closed_forms()
    a, g, z = alpha_s, g_s, z_s
    assert sp.simplify(cf["mean_emitted"] - (1 - a ** (g + 1)) / (1 - a)) == 0
    assert sp.simplify(cf["mean"] - a * (1 - a**g) / (1 - a)) == 0
    assert sp.simplify(cf["var"] - cf["var_emitted"]) == 0
    assert sp.simplify(cf["var"] - (cf["second_moment"] - cf["mean"] ** 2)) == 0
    g_pgf = cf["pgf"]
    assert sp.simplify(g_pgf.subs(z, 1) - 1) == 0
    assert sp.simplify(sp.diff(g_pgf, z).subs(z, 1) - cf["mean"]) == 0


@pytest.mark.parametrize("g", [1, 2, 3, 5, 8])  # rational functions: cancel() decides 0
def test_closed_forms_equal_the_defining_sums_for_small_caps(g):
    # independent of the derivation's own checks: expand the sums for a concrete cap
    a, z = alpha_s, z_s
    p = [a**k * (1 - a) for k in range(g)] + [a**g]
    mean = sum(k * pk for k, pk in enumerate(p))
    second = sum(k * k * pk for k, pk in enumerate(p))
    pgf = sum(z**k * pk for k, pk in enumerate(p))
    cf = {name: e.subs(g_s, g) for name, e in sym.closed_forms().items()}
    assert sp.cancel(sum(p) - 1) == 0
    assert sp.cancel(cf["mean"] - mean) == 0
    assert sp.cancel(cf["second_moment"] - second) == 0
    assert sp.cancel(cf["var"] - (second - mean**2)) == 0
    assert sp.cancel(cf["pgf"] - pgf) == 0
    for k in range(g + 2):
        assert sp.cancel(sym.pmf_expr().subs({g_s: g, k_s: k}) - (p[k] if k <= g else 0)) == 0


def test_limits_at_one():
    lim = sym.limits_at_one()
    assert lim["mean"] == g_s
    assert lim["mean_emitted"] == g_s + 1
    assert lim["var"] == 0 and lim["var_emitted"] == 0
    assert sp.simplify(lim["pgf"] - z_s**g_s) == 0
    # the same limits for concrete caps, and the approach rate: Var ~ (1 - alpha) sum j^2
    cf = sym.closed_forms()
    for g in (1, 4, 10):
        assert sp.limit(cf["mean_emitted"].subs(g_s, g), alpha_s, 1, dir="-") == g + 1
        eps = sp.Symbol("eps", positive=True)
        v = cf["var"].subs({g_s: g, alpha_s: 1 - eps})
        assert sp.limit(v / eps, eps, 0) == sum(j * j for j in range(1, g + 1))


# ----------------------------------------------------------------------------------------
# numeric (laws.py) == symbolic


@SETTINGS
@given(alpha=alphas, g=caps)
def test_numeric_moments_equal_symbolic(alpha, g):
    law = IIDGeometric(alpha)
    dps = _dps(alpha, g)
    for name, value, rtol in (
        ("mean", law.mean(g), 1e-14),
        ("mean_emitted", law.mean_emitted(g), 1e-14),
        ("var", law.var(g), 1e-13),
    ):
        ref = sym.reference(name, alpha, g, dps=dps)
        assert _close(value, ref, rtol), (name, alpha, g, value, ref)
    # no 0/0 anywhere; E[L] in [1, g + 1], approaching g + 1 as alpha -> 1
    assert 1.0 <= law.mean_emitted(g) <= g + 1
    if alpha == 1.0:
        assert law.mean_emitted(g) == g + 1 and law.var(g) == 0.0


@SETTINGS
@given(alpha=alphas, g=caps, data=st.data())
def test_numeric_pmf_and_pgf_equal_symbolic(alpha, g, data):
    law = IIDGeometric(alpha)
    dps = _dps(alpha, g)
    p = law.pmf_vector(g)
    assert np.all(np.isfinite(p))
    for k in {0, 1 % (g + 1), g // 2, g - 1, g, data.draw(st.integers(0, g))}:
        ref = sym.reference("pmf", alpha, g, k=k, dps=dps)
        assert _close(p[k], ref, 1e-14), (k, p[k], ref)
    for z in (-1.0, 0.0, 1.0, data.draw(st.floats(-1.0, 1.0))):
        ref = sym.reference("pgf", alpha, g, z=z, dps=dps)
        # Horner over g + 1 terms: relative error <= ~2 g eps; alternating sums (z < 0) can
        # cancel to ~0, so also allow an absolute error ~ eps * sum |p_k z^k|
        rtol = max(1e-14, 2.5 * g * np.finfo(float).eps)
        assert _close(law.pgf(z, g), ref, rtol, atol=1e-14), (z, law.pgf(z, g), ref)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(alpha=st.floats(0.0, 0.9), g=st.integers(1, 300), z=st.floats(-1.0, 1.0))
def test_numeric_equals_float64_lambdified_where_well_conditioned(alpha, g, z):
    # the plain float64 lambdified closed forms are accurate for alpha <= 0.9
    law = IIDGeometric(alpha)
    for name, value in (("mean", law.mean(g)), ("mean_emitted", law.mean_emitted(g)),
                        ("var", law.var(g))):
        assert value == pytest.approx(float(sym.lambdified(name)(alpha, g)), rel=1e-10, abs=1e-300)
    assert law.pgf(z, g) == pytest.approx(float(sym.lambdified("pgf")(alpha, g, z)),
                                          rel=1e-10, abs=1e-14)
    k = np.arange(g + 1)
    np.testing.assert_allclose(law.pmf_vector(g), sym.lambdified("pmf")(alpha, g, k),
                               rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("g", [1, 7, 100, 10_000])
def test_mean_emitted_approaches_cap_plus_one_stably(g):
    # alpha -> 1 along 1 - 10^-j: E[L] increases to g + 1, Var[A]/(1 - alpha) tends to
    # sum_{j<=g} j^2 (the leading term computed above with sympy), no NaN or 0/0 on the way
    previous = 0.0
    coef = g * (g + 1) * (2 * g + 1) / 6
    for j in range(1, 17):
        law = IIDGeometric(1.0 - 10.0**-j)
        eps = 1.0 - law.alpha
        m = law.mean_emitted(g)
        assert previous <= m <= g + 1
        previous = m
        # first order: E[L] = g + 1 - eps g (g + 1) / 2 + O(eps^2 g^3)
        assert abs(m - (g + 1 - eps * g * (g + 1) / 2)) <= 2 * (eps * g) ** 2 * g + 1e-12 * g
        if eps * g <= 1e-6:
            assert law.var(g) / eps == pytest.approx(coef, rel=1e-5)
    assert IIDGeometric(1.0).mean_emitted(g) == g + 1


def test_reference_at_alpha_one_uses_the_limit():
    assert sym.reference("mean_emitted", 1.0, 12) == 13
    assert sym.reference("var", 1.0, 12) == 0
    assert sym.reference("pgf", 1.0, 3, z=0.5) == mpmath.mpf("0.125")
    assert sym.reference("pmf", 1.0, 3, k=3) == 1
    # the raw float64 closed form is 0/0 at alpha = 1 (why laws.py does not use it)
    with np.errstate(invalid="ignore", divide="ignore"):
        assert math.isnan(sym.lambdified("mean_emitted")(np.float64(1.0), 12))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: sym.reference("median", 0.5, 3), "name"),
        (lambda: sym.reference("mean", 1.5, 3), "alpha"),
        (lambda: sym.reference("mean", float("nan"), 3), "alpha"),
        (lambda: sym.reference("mean", 0.5, 0), "g"),
        (lambda: sym.reference("pgf", 0.5, 3), "z"),
        (lambda: sym.reference("pmf", 0.5, 3, k=-1), "k"),
        (lambda: sym.reference("mean", 0.5, 3, dps=5), "dps"),
        (lambda: sym.lambdified("mean", "tensorflow"), "backend"),
        (lambda: sym.lambdified("kurtosis"), "name"),
    ],
)
def test_bad_input_names_the_field(call, field):
    with pytest.raises(PolyspecInputError) as err:
        call()
    assert err.value.field == field
