"""Cost curves ``T_i(m)``: wall time of one forward pass of a model scoring ``m`` new positions."""

from __future__ import annotations

import numpy as np

from ._checks import PolyspecInputError, check_int_array, check_keys, check_real, check_real_array

__all__ = ["CostCurve", "cost_from_config"]


class CostCurve:
    """``T(m)`` for m >= 1: constant, affine ``b + k (m - 1)``, or a measured table.

    A table ``[T(1), T(2), ...]`` is extended past its end affinely with the slope of its last
    two entries, clamped at >= 0 (constant if it has one entry), so costs never go negative.
    """

    def __init__(self, *, base=None, per_token=0.0, table=None, field: str = "cost"):
        if table is not None:
            arr = check_real_array(table, f"{field}.table", low=0.0)
            self.table = tuple(float(x) for x in arr)
            self.base = self.table[0]
            slope = (self.table[-1] - self.table[-2]) if len(self.table) > 1 else 0.0
            self.per_token = max(slope, 0.0)
            self.kind = "table"
        else:
            self.base = check_real(base, f"{field}.base", low=0.0)
            self.per_token = check_real(per_token, f"{field}.per_token", low=0.0)
            self.table = None
            self.kind = "affine" if self.per_token else "constant"

    @classmethod
    def constant(cls, c) -> CostCurve:
        return cls(base=c)

    @classmethod
    def affine(cls, base, per_token) -> CostCurve:
        return cls(base=base, per_token=per_token)

    @classmethod
    def from_table(cls, table) -> CostCurve:
        return cls(table=table)

    def __call__(self, m):
        """``T(m)``; ``m`` an int or integer array of positions (>= 1)."""
        scalar = np.ndim(m) == 0
        mm = check_int_array(np.atleast_1d(m), "m", low=1)
        if self.table is None:
            out = self.base + self.per_token * (mm - 1)
        else:
            t = np.asarray(self.table)
            n = t.size
            inside = np.minimum(mm, n) - 1
            out = np.where(mm <= n, t[inside], t[-1] + self.per_token * (mm - n))
        out = out.astype(np.float64)
        return float(out[0]) if scalar else out

    @property
    def t1(self) -> float:
        """``T(1)``."""
        return float(self(1))

    def scaled(self, factor: float) -> CostCurve:
        if self.table is not None:
            return CostCurve(table=[x * factor for x in self.table])
        return CostCurve(base=self.base * factor, per_token=self.per_token * factor)

    def to_config(self):
        if self.table is not None:
            return {"table": list(self.table)}
        if self.per_token == 0.0:
            return self.base
        return {"base": self.base, "per_token": self.per_token}

    def __repr__(self) -> str:
        return f"CostCurve({self.to_config()!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, CostCurve) and self.to_config() == other.to_config()

    def __hash__(self) -> int:
        return hash(repr(self.to_config()))


def cost_from_config(spec, field: str = "cost") -> CostCurve:
    """``c`` (constant), ``{"base": b, "per_token": k}`` or ``{"table": [T(1), ...]}``."""
    if isinstance(spec, CostCurve):
        return spec
    if isinstance(spec, dict):
        if "table" in spec:
            check_keys(spec, field, required=["table"])
            return CostCurve(table=spec["table"], field=field)
        check_keys(spec, field, required=["base"], optional=["per_token"])
        return CostCurve(base=spec["base"], per_token=spec.get("per_token", 0.0), field=field)
    if isinstance(spec, (list, tuple)):
        raise PolyspecInputError(field, "a list is ambiguous; write {\"table\": [T(1), T(2), ...]}")
    return CostCurve(base=check_real(spec, field, low=0.0), field=field)
