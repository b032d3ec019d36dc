"""validation/analysis/relative.py: the relative error and the interval check, by hand."""

import math

import pytest

from validation.analysis.relative import inside_ci, relative_error


def test_relative_error_by_hand():
    assert relative_error(3.0, 2.0) == pytest.approx(0.5)
    assert relative_error(1.5, 2.0) == pytest.approx(-0.25)
    assert relative_error(None, 2.0) is None


def test_inside_ci_by_hand():
    assert inside_ci(2.0, (1.0, 3.0)) is True
    assert inside_ci(1.0, (1.0, 3.0)) is True  # closed interval
    assert inside_ci(3.5, (1.0, 3.0)) is False
    assert inside_ci(None, (1.0, 3.0)) is None
    assert inside_ci(2.0, (math.nan, 3.0)) is None
    assert inside_ci(2.0, (1.0, math.inf)) is None
