"""HW6's crossover (validation/hardware/plan.py): where the best speculative speedup falls to
1 on a grid of batch sizes, interpolated in log batch size, by hand."""

from __future__ import annotations

import math

import pytest

from validation.hardware.plan import crossover


def test_crossover_by_hand():
    # speedup 2 at b = 4 and 0.5 at b = 16: log 2 / (log 2 - log 0.5) = 1/2 of the way in log b
    assert crossover([1, 4, 16], [3.0, 2.0, 0.5]) == pytest.approx(8.0)
    # 1.5 at 8, 0.75 at 32: t = log 1.5 / log 2; b = 8 * 4**t
    t = math.log(1.5) / (math.log(1.5) - math.log(0.75))
    assert crossover([8, 32], [1.5, 0.75]) == pytest.approx(8 * 4**t)
    assert crossover([1, 2], [1.2, 1.1]) is None  # never on the grid
    assert crossover([1, 2], [0.9, 0.8]) == 1.0  # from the first batch
    assert crossover([1, 2, 4], [1.2, 1.0, 0.9]) == pytest.approx(2.0)  # exactly 1 at b = 2
