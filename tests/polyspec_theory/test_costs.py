"""Cost curves T(m): constant, affine, measured table (extended affinely, slope clamped >= 0)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.core.costs import CostCurve, cost_from_config

PROPS = settings(derandomize=True, deadline=None, max_examples=100)
nonneg = st.floats(0.0, 1e3)
tables = st.lists(nonneg, min_size=1, max_size=12)


def test_constant_and_affine():
    c = CostCurve.constant(0.25)
    assert c.kind == "constant" and c(1) == 0.25 and c(100) == 0.25 and c.t1 == 0.25
    a = CostCurve.affine(1.0, 0.03)
    assert a.kind == "affine"
    assert a(1) == 1.0 and a(8) == pytest.approx(1.21)
    np.testing.assert_allclose(a(np.array([1, 2, 3])), [1.0, 1.03, 1.06])
    assert isinstance(a(np.int64(4)), float)
    # a free drafter (cost 0) is allowed: Leviathan's c = 0 idealization
    assert CostCurve.constant(0.0)(5) == 0.0


@PROPS
@given(table=tables, m=st.integers(1, 200))
def test_table_inside_and_affine_extension(table, m):
    c = CostCurve.from_table(table)
    n = len(table)
    assert c.kind == "table" and c.t1 == table[0]
    slope = max(table[-1] - table[-2], 0.0) if n > 1 else 0.0
    want = table[m - 1] if m <= n else table[-1] + slope * (m - n)
    assert c(m) == pytest.approx(want, rel=1e-15, abs=0)
    assert c(m) >= 0.0
    # past the end the curve is affine and never decreasing
    assert c(n + m + 1) - c(n + m) == pytest.approx(slope, rel=1e-9, abs=1e-9)
    assert c(n + m) >= c(n) * (1 - 1e-15)
    np.testing.assert_array_equal(c(np.arange(1, m + 1)), [c(i) for i in range(1, m + 1)])


def test_table_extension_slope_is_clamped():
    c = CostCurve.from_table([1.0, 1.5, 1.2])  # measured noise: last step goes down
    assert c.per_token == 0.0
    assert c(3) == 1.2 and c(4) == 1.2 and c(100) == 1.2
    d = CostCurve.from_table([1.0, 1.1, 1.3])
    assert d(5) == pytest.approx(1.7)
    assert CostCurve.from_table([2.0])(50) == 2.0


@PROPS
@given(
    spec=st.one_of(
        nonneg,
        st.builds(lambda b, k: {"base": b, "per_token": k}, nonneg, nonneg),
        tables.map(lambda t: {"table": t}),
    )
)
def test_config_round_trip(spec):
    c = cost_from_config(spec)
    again = cost_from_config(c.to_config())
    assert again == c and hash(again) == hash(c)
    for m in (1, 2, 7, 40):
        assert again(m) == c(m)
    assert cost_from_config(c) is c


@PROPS
@given(spec=st.one_of(nonneg, tables.map(lambda t: {"table": t})), f=st.floats(0.0, 10.0))
def test_scaled(spec, f):
    c = cost_from_config(spec)
    s = c.scaled(f)
    for m in (1, 3, 30):
        assert s(m) == pytest.approx(f * c(m), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (-1.0, "cost"),
        (float("nan"), "cost"),
        (float("inf"), "cost"),
        ("1.0", "cost"),
        (True, "cost"),
        (None, "cost"),
        ([1.0, 2.0], "cost"),
        ({"base": -0.5}, "cost.base"),
        ({"base": float("nan")}, "cost.base"),
        ({"base": 1.0, "per_token": -0.1}, "cost.per_token"),
        ({"bas": 1.0}, "cost.bas"),
        ({"per_token": 0.1}, "cost.base"),
        ({"table": []}, "cost.table"),
        ({"table": [1.0, float("nan")]}, "cost.table"),
        ({"table": [1.0, -2.0]}, "cost.table"),
        ({"table": [1.0], "base": 1.0}, "cost.base"),
        ({"table": "1 2 3"}, "cost.table"),
    ],
)
def test_bad_cost_names_the_field(spec, field):
    with pytest.raises(PolyspecInputError) as err:
        cost_from_config(spec)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


@pytest.mark.parametrize("m", [0, -1, 1.5, float("nan")])
def test_bad_positions(m):
    with pytest.raises(PolyspecInputError) as err:
        CostCurve.constant(1.0)(m)
    assert err.value.field == "m"


@PROPS
@given(spec=st.one_of(nonneg, st.fixed_dictionaries({"base": nonneg, "per_token": nonneg}),
                      st.fixed_dictionaries({"table": tables})),
       m=st.one_of(st.integers(1, 300), st.integers(2**52, 2**53 + 4)))
def test_scalar_int_is_the_array_rule(spec, m):
    """``T(m)`` for a Python int (the planners' fast path) is, with ``==``, the value of the
    array rule (``T([m])[0]``) and of a numpy integer, for every kind of curve."""
    c = cost_from_config(spec)
    got = c(m)
    assert type(got) is float
    assert got == float(c(np.array([m]))[0]) == c(np.int64(m))


def test_scalar_int_fast_path_keeps_the_errors():
    for m in (0, -3, -(2**60)):
        with pytest.raises(PolyspecInputError) as err:
            CostCurve.affine(1.0, 0.5)(m)
        assert err.value.field == "m" and "must be >= 1" in str(err.value)


@PROPS
@given(x=st.one_of(st.just(0.0), st.floats(1e-12, 1e6)), dfn=st.integers(1, 200),
       dfd=st.integers(1, 5000))
def test_lack_of_fit_tail_is_scipy_stats(x, dfn, dfd):
    """The F tail of the lack-of-fit test (``scipy.special`` only) is ``scipy.stats.f.sf``,
    the same float (``==``)."""
    from scipy import stats

    from polyspec_theory.core.costs import _f_sf

    assert _f_sf(x, dfn, dfd) == float(stats.f.sf(x, dfn, dfd))
