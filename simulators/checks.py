"""The rows of ``polyspec verify`` and their confidence level, shared by every check
(:mod:`simulators.verify`, :mod:`simulators.verify_structures`, the schemes' own rows in
:mod:`simulators.schemes`).

Confidence level. A row passes when the theory value lies inside the Monte-Carlo confidence
interval at level ``1 - alpha_row`` with ``alpha_row = FAMILY_ALPHA / MAX_ROWS`` (Bonferroni),
and chi-square rows pass when their p-value is ``>= alpha_row``. With ``FAMILY_ALPHA = 1e-3``
the probability that a correct implementation fails any row of the table is ``<= 1e-3``. The
intervals printed are at that level, not 95 %. All seeds are fixed, so a given build gives
the same table every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

__all__ = ["ci_row", "fmt", "widen_ci", "row_z", "FAMILY_ALPHA", "MAX_ROWS", "ROW_ALPHA",
           "ROW_Z", "CheckRecord", "VerifyContext", "Est"]  # noqa: F822 (ROW_Z: __getattr__)

FAMILY_ALPHA = 1e-3
MAX_ROWS = 64
ROW_ALPHA = FAMILY_ALPHA / MAX_ROWS


@cache
def row_z() -> float:
    """``ROW_Z``: the two-sided normal quantile of the row level ``1 - ROW_ALPHA`` (computed
    on first use: scipy loads with a check, not with every simulator that imports ``ci_row``)."""
    from scipy import stats

    return float(stats.norm.isf(ROW_ALPHA / 2))


def __getattr__(name):  # ``checks.ROW_Z`` / ``from simulators.checks import ROW_Z``
    if name == "ROW_Z":
        return row_z()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class CheckRecord:
    """One row of the verification table."""

    id: str
    statement: str
    theory: str
    estimate: str
    passed: bool
    theory_value: float | None = None
    mc_value: float | None = None
    ci: tuple[float, float] | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "statement": self.statement,
            "theory": self.theory,
            "estimate": self.estimate,
            "passed": bool(self.passed),
            "theory_value": self.theory_value,
            "mc_value": self.mc_value,
            "ci": None if self.ci is None else [self.ci[0], self.ci[1]],
            "detail": self.detail,
        }


@dataclass
class VerifyContext:
    """Run sizes (``quick``: CI-sized), the seed, and a cache of shared simulation runs."""

    quick: bool = True
    seed: int = 0
    cache: dict = field(default_factory=dict)

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full

    def cached(self, key, fn: Callable):
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]


# --- helpers -------------------------------------------------------------------------------


def fmt(x: float) -> str:
    if x is None or not math.isfinite(x):
        return str(x)
    a = abs(x)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{x:.4e}"
    return f"{x:.5f}"


def widen_ci(est, z: float | None = None) -> tuple[float, float, float]:
    """(value, low, high) at the row level (``z``; ``None``: ``ROW_Z``) from a RatioEstimate
    (se-based)."""
    z = row_z() if z is None else z
    return est.value, est.value - z * est.se, est.value + z * est.se


def ci_row(id_, statement, theory: float, est, detail: str = "", extra_ok: bool = True,
            z: float | None = None) -> CheckRecord:
    v, lo, hi = widen_ci(est, z)
    ok = bool(lo <= theory <= hi) and extra_ok
    return CheckRecord(id_, statement, fmt(theory), f"{fmt(v)} ± {fmt(hi - v)}", ok,
                       float(theory), float(v), (float(lo), float(hi)), detail)


class Est:
    """A value with a standard error (same interface as RatioEstimate for widen_ci)."""

    def __init__(self, value, se):
        self.value, self.se = float(value), float(se)
