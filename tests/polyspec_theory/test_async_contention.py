"""AS1c (docs/theory.md): the contention term in AS1's costs, ``T_i (1 + kappa_i)``, the
speedup against the solo ``T_1(1)``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError, predict_async, with_contention

from .test_asynchronous import _cfg, cascades


@settings(max_examples=40, deadline=None)
@given(cascades)
def test_zero_contention_is_as1_number_for_number(cas):
    a, b = predict_async(cas), predict_async(cas, (0.0, 0.0))
    assert b.speedup == a.speedup and b.time_per_token == a.time_per_token
    assert b.bounds == a.bounds and b.autoregressive_time_per_token == \
        a.autoregressive_time_per_token
    assert [lv.to_dict() for lv in b.levels] == [lv.to_dict() for lv in a.levels]


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 0.2), st.floats(0.02, 1.5),
       st.floats(0.0, 0.98), st.integers(0, 8), st.floats(0.0, 1.0))
def test_equal_factors_without_overhead_divide_the_speedup(t_base, slope, c, alpha, theta,
                                                            kappa):
    """tau is homogeneous of degree 1 in the times: every cost x (1 + kappa), the numerator
    the solo T_1(1), gives speedup / (1 + kappa) (and the bounds the same)."""
    cas = _cfg(t_base, slope, c, {"alpha": alpha}, theta)
    a, b = predict_async(cas), predict_async(cas, (kappa, kappa))
    assert b.speedup == pytest.approx(a.speedup / (1 + kappa), rel=1e-9)
    assert b.time_per_token == pytest.approx(a.time_per_token * (1 + kappa), rel=1e-9)
    assert b.bounds[0] == pytest.approx(a.bounds[0] / (1 + kappa), rel=1e-9)
    assert b.bounds[1] == pytest.approx(a.bounds[1] / (1 + kappa), rel=1e-9)
    assert b.autoregressive_time_per_token == a.autoregressive_time_per_token


def test_synchronous_limit_by_hand():
    """AS2.3 (Q = theta): every cycle is theta c (1 + k2) + T_1(theta + 1)(1 + k1) and emits
    e(theta). T_1(m) = 1 + 0.1 (m - 1), c = 0.3, theta = Q = 2, alpha = 0.7, k = (0.1, 0.25):
    e = 1 + 0.7 + 0.49 = 2.19, cycle = 2 * 0.3 * 1.25 + 1.2 * 1.1 = 0.75 + 1.32 = 2.07."""
    cas = _cfg(1.0, 0.1, 0.3, {"alpha": 0.7}, 2, queue=2)
    p = predict_async(cas, (0.1, 0.25))
    assert p.speedup == pytest.approx(2.19 / 2.07, rel=1e-12)
    assert p.time_per_token == pytest.approx(2.07 / 2.19, rel=1e-12)
    # only the drafter slowed: 2 * 0.3 * 1.25 + 1.2 = 1.95
    assert predict_async(cas, (0.0, 0.25)).speedup == pytest.approx(2.19 / 1.95, rel=1e-12)
    # the overhead is not slowed: o = 0.2 -> cycle 2.07 + 0.2
    cas_o = _cfg(1.0, 0.1, 0.3, {"alpha": 0.7}, 2, queue=2, overhead=0.2)
    assert predict_async(cas_o, (0.1, 0.25)).speedup == pytest.approx(2.19 / 2.27, rel=1e-12)


def test_with_contention_scales_each_cost_and_keeps_overheads():
    cas = _cfg(1.0, 0.1, 0.3, {"alpha": 0.7}, 2, overhead=0.05)
    slow = with_contention(cas, (0.5, 1.0))
    assert isinstance(slow, Cascade)
    assert slow.models[0].cost(3) == pytest.approx(1.2 * 1.5)
    assert slow.models[1].cost.t1 == pytest.approx(0.6)
    assert slow.models[0].overhead == 0.05


@pytest.mark.parametrize("bad, field", [
    ((0.1,), "contention"), ((0.1, 0.2, 0.3), "contention"), ("ab", "contention"),
    ((-1.0, 0.0), "contention[0]"), ((0.0, float("nan")), "contention[1]"),
    ((0.0, True), "contention[1]"), (0.3, "contention")])
def test_bad_contention_refused_naming_the_field(bad, field):
    cas = _cfg(1.0, 0.1, 0.3, {"alpha": 0.7}, 2)
    with pytest.raises(PolyspecInputError) as e:
        predict_async(cas, bad)
    assert e.value.field == field
