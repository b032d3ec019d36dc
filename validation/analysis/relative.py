"""The two comparisons of a prediction with a measurement, written once: the relative error
``value / measured - 1`` and whether ``value`` falls inside the measured 95 % interval."""

from __future__ import annotations

import math


def relative_error(value, measured):
    """``value / measured - 1`` (``None`` when ``value`` is ``None``: nothing predicted)."""
    return None if value is None else value / measured - 1.0


def inside_ci(value, ci) -> bool | None:
    """``lo <= value <= hi`` for ``ci = (lo, hi)``; ``None`` when nothing is predicted or the
    interval is not finite (a measurement without a spread)."""
    if value is None or not all(map(math.isfinite, ci)):
        return None
    lo, hi = ci
    return bool(lo <= value <= hi)
