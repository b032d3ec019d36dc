"""The comparisons of a prediction with a measurement, written once: the relative error
``value / measured - 1``, whether ``value`` falls inside the measured 95 % interval, and the
headline line over a set of errors."""

from __future__ import annotations

import math

import numpy as np


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


def error_headline(errors, what: str, missing: str) -> str:
    """``"<what>: median |error| m %, max x %"`` over the ``errors`` that are not ``None``
    (relative errors), or ``missing`` when there is none."""
    e = [abs(x) for x in errors if x is not None]
    if not e:
        return missing
    return f"{what}: median |error| {100 * float(np.median(e)):.2f} %, max {100 * max(e):.2f} %"
