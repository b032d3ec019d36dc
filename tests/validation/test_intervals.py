"""The one rule for a forecast's 95 % interval (validation.analysis.score): the conformal
``speedup * (1 ± q)`` of the leave-one-out errors, and a replay's cost interval widened by
the model error; checked against the order statistic and the normal quantile by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.score import (
    half_width,
    interval_quantile,
    prediction_interval,
    widened_interval,
)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 10.0), st.lists(st.floats(-3.0, 3.0), min_size=1, max_size=40))
def test_conformal_interval_is_the_order_statistic_by_hand(speedup, errors):
    e = sorted(abs(x) for x in errors)
    k = min(math.ceil(0.95 * (len(e) + 1)), len(e))  # the k-th smallest |error|
    q = e[k - 1]
    got = prediction_interval(speedup, errors, "these")
    lo, hi = got["interval95"]
    assert got["interval_from"]["quantile"] == q and got["interval_from"]["loo_errors"] == len(e)
    assert hi == pytest.approx(speedup * (1 + q), rel=1e-15)
    assert lo == pytest.approx(max(speedup * (1 - q), 0.0), abs=1e-15)
    assert lo >= 0.0  # a speedup is positive: errors above 100 % clamp the lower end at 0
    assert prediction_interval(speedup, [], "none")["interval95"] is None


def test_an_error_above_one_clamps_the_lower_end_at_zero():
    got = prediction_interval(2.0, [1.5] * 30, "these")["interval95"]
    assert got == [0.0, 5.0]


@given(st.floats(0.1, 5.0), st.floats(0.0, 2.0), st.floats(0.0, 1.0))
def test_widened_interval_is_1_96_sd_each_side(low, width, rel):
    lo, hi = widened_interval(low, low + width, rel)
    assert hi == pytest.approx((low + width) * (1 + 1.96 * rel), rel=1e-15)
    assert lo == pytest.approx(max(low * (1 - 1.96 * rel), 0.0), abs=1e-15) and lo >= 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-0.5, 0.5), min_size=1, max_size=30), st.floats(0.0, 0.2))
def test_the_a_a_floor_bounds_the_half_width_from_below(errors, floor):
    e = sorted(abs(x) for x in errors)
    k = min(math.ceil(0.95 * (len(e) + 1)), len(e))
    want = max(e[k - 1], 1.959963984540054 * floor)
    assert interval_quantile(errors, floor) == pytest.approx(want, rel=1e-15, abs=1e-300)
    got = prediction_interval(2.0, errors, "these", floor)
    assert got["interval_from"]["quantile"] == pytest.approx(want, rel=1e-15, abs=1e-300)
    assert got["interval95"][1] == pytest.approx(2.0 * (1 + want), rel=1e-15)


def test_floor_and_errors_each_decide_on_their_side():
    assert interval_quantile([0.01, -0.02], 0.0176) == pytest.approx(1.959963984540054 * 0.0176)
    assert interval_quantile([0.01, -0.08], 0.0176) == 0.08
    with pytest.raises(PolyspecInputError, match="floor"):
        interval_quantile([0.1], -0.01)


@given(st.floats(0.1, 10.0), st.floats(0.0, 0.9), st.floats(0.0, 0.9))
def test_half_width_by_hand(s, a, b):
    assert half_width(s, [s * (1 - a), s * (1 + b)]) == pytest.approx((a + b) / 2, abs=1e-12)


def test_half_width_rejects_bad_input():
    with pytest.raises(PolyspecInputError, match="interval95"):
        half_width(1.0, [1.2, 1.1])
    with pytest.raises(PolyspecInputError, match="speedup"):
        half_width(0.0, [0.9, 1.1])
