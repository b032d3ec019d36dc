"""The one rule for a forecast's 95 % interval (validation.analysis.score): the conformal
``speedup * (1 ± q)`` of the leave-one-out errors, and a replay's cost interval widened by
the model error; checked against the order statistic and the normal quantile by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.analysis.score import prediction_interval, widened_interval


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
