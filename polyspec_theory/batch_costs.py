"""Cost curves of a serving batch, ``T(b, m)``: wall time of one forward pass that scores ``m``
new positions for each of ``b`` sequences (docs/theory.md Part III-C, B0).

Two config forms, both accepted by :func:`polyspec_theory.costs.cost_from_config`:

* ``{"batch_table": {"1": [T(1,1), T(1,2), ...], "8": [T(8,1), ...], ...}}`` — measured rows,
  keys = batch sizes (must include ``"1"``), each row a list over ``m`` extended past its end
  like a ``table`` cost (slope of its last two entries, clamped at >= 0). Between two listed
  batch sizes ``b_lo < b < b_hi`` the cost is linear in ``b`` at every ``m``:
  ``T(b, m) = (1 - w) T(b_lo, m) + w T(b_hi, m)``, ``w = (b - b_lo)/(b_hi - b_lo)`` (each row
  extended first). Above the largest listed batch size there is no value: extrapolating a
  table into the compute-bound regime is the guess the table is there to avoid.
* ``{"roofline": {"overhead": o, "weight_time": w, "compute_time": c, "kv_time": k}}`` —
  ``T(b, m) = o + max(w + k b, c b m)``: a fixed overhead plus the larger of the memory time
  (stream the weights once, ``w``, and each sequence's KV cache, ``k`` per sequence) and the
  compute time (``c`` per scored position). ``overhead`` and ``kv_time`` default to 0.

Both are :class:`~polyspec_theory.costs.CostCurve` s whose single-stream curve ``T(m)`` is
``T(1, m)`` (so ``predict``, ``simulate`` and ``plan`` without a batch see batch 1), and
:meth:`BatchCostCurve.at_batch` gives ``T(b, .)`` as a plain table curve, exact for every
``m`` (the table is long enough that its affine extension is the exact curve).
"""

from __future__ import annotations

import math

import numpy as np

from .costs import CostCurve
from .errors import PolyspecInputError, as_int, as_real, require_keys

__all__ = [
    "BatchCostCurve",
    "BatchTableCost",
    "RooflineCost",
    "batch_cost_from_config",
    "MAX_BATCH_SIZE",
    "MAX_ROOFLINE_KNEE",
]

MAX_BATCH_SIZE = 1 << 20
MAX_ROOFLINE_KNEE = 1 << 16  # positions: beyond it, compute is negligible (set compute_time 0)


def _batch(b, field: str = "batch") -> int:
    return as_int(b, field, low=1, high=MAX_BATCH_SIZE)


class BatchCostCurve(CostCurve):
    """A cost curve that also depends on the batch size: ``at_batch(b)`` is ``T(b, .)``."""

    field: str = "cost"

    def at_batch(self, batch) -> CostCurve:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def max_batch(self) -> int | None:
        """Largest batch size with a defined cost (``None``: any)."""
        return None



class BatchTableCost(BatchCostCurve):
    """Measured ``T(b, m)``: rows per batch size (see the module docstring for the rule)."""

    def __init__(self, rows, field: str = "cost"):
        where = f"{field}.batch_table"
        if not isinstance(rows, dict) or not rows:
            raise PolyspecInputError(
                where, "must be a non-empty object {\"1\": [T(1,1), T(1,2), ...], \"8\": [...]} "
                "keyed by batch size")
        parsed: dict[int, tuple[float, ...]] = {}
        for key, row in rows.items():
            kf = f'{where}["{key}"]'
            if isinstance(key, str):
                if not key.strip().isdigit():
                    raise PolyspecInputError(
                        kf, f"key must be a batch size (integer >= 1), got {key!r}")
                key_value = int(key.strip())
            else:
                key_value = key
            b = as_int(key_value, kf, low=1, high=MAX_BATCH_SIZE)
            if b in parsed:
                raise PolyspecInputError(kf, f"batch size {b} is listed twice")
            if isinstance(row, (str, bytes, dict)) or not hasattr(row, "__iter__"):
                raise PolyspecInputError(kf, "must be a list of costs [T(b,1), T(b,2), ...]")
            row = list(row)
            if not row:
                raise PolyspecInputError(kf, "must list at least T(b, 1)")
            parsed[b] = tuple(as_real(x, f"{kf}[{j}]", low=0.0) for j, x in enumerate(row))
        if 1 not in parsed:
            raise PolyspecInputError(
                where, f"must list batch size \"1\" (the single-stream row used without a "
                f"batch), got {sorted(parsed)}")
        self.rows = dict(sorted(parsed.items()))
        self.field = field
        super().__init__(table=list(self.rows[1]), field=f'{where}["1"]')
        self.kind = "batch_table"

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(self.rows)

    @property
    def max_batch(self) -> int:
        return max(self.rows)

    def at_batch(self, batch) -> CostCurve:
        """``T(batch, .)``: a listed row, or the linear interpolation in ``b`` of the two
        neighbouring rows (exact for every ``m``, extensions included)."""
        b = _batch(batch)
        if b in self.rows:
            return CostCurve.from_table(list(self.rows[b]))
        if b > self.max_batch:
            raise PolyspecInputError(
                f"{self.field}.batch_table", f"batch {b} is above the largest listed batch "
                f"size {self.max_batch}: measure it (or use a roofline cost)")
        keys = np.array(self.batches)
        hi = int(keys[np.searchsorted(keys, b)])
        lo = int(keys[np.searchsorted(keys, b) - 1])
        w = (b - lo) / (hi - lo)
        length = max(len(self.rows[lo]), len(self.rows[hi])) + 1
        m = np.arange(1, length + 1)
        t_lo = CostCurve.from_table(list(self.rows[lo]))(m)
        t_hi = CostCurve.from_table(list(self.rows[hi]))(m)
        return CostCurve.from_table([float(x) for x in (1.0 - w) * t_lo + w * t_hi])

    def scaled(self, factor: float) -> BatchTableCost:
        f = as_real(factor, "factor", low=0.0)
        return BatchTableCost({str(b): [x * f for x in r] for b, r in self.rows.items()},
                              self.field)

    def to_config(self):
        return {"batch_table": {str(b): list(r) for b, r in self.rows.items()}}


class RooflineCost(BatchCostCurve):
    """``T(b, m) = overhead + max(weight_time + kv_time b, compute_time b m)``."""

    def __init__(self, *, overhead=0.0, weight_time, compute_time, kv_time=0.0,
                 field: str = "cost"):
        where = f"{field}.roofline"
        self.overhead = as_real(overhead, f"{where}.overhead", low=0.0)
        self.weight_time = as_real(weight_time, f"{where}.weight_time", low=0.0)
        self.compute_time = as_real(compute_time, f"{where}.compute_time", low=0.0)
        self.kv_time = as_real(kv_time, f"{where}.kv_time", low=0.0)
        self.field = field
        knee = self.knee(1)
        if self.compute_time > 0.0 and knee > MAX_ROOFLINE_KNEE:
            raise PolyspecInputError(
                f"{where}.compute_time", f"the memory-bound range at batch 1 reaches "
                f"{knee:.3g} positions (> {MAX_ROOFLINE_KNEE}): compute is negligible, "
                "set compute_time to 0")
        super().__init__(table=self._table(1), field=where)
        self.kind = "roofline"

    def knee(self, batch) -> float:
        """Positions per sequence where batch ``b`` turns compute-bound:
        ``(weight_time + kv_time b) / (compute_time b)`` (``inf`` if ``compute_time = 0``)."""
        b = _batch(batch)
        if self.compute_time == 0.0:
            return math.inf
        return (self.weight_time + self.kv_time * b) / (self.compute_time * b)

    def exact(self, batch, m):
        """``T(b, m)`` from the formula (float64 array or float)."""
        b = _batch(batch)
        mm = np.asarray(m, dtype=np.float64)
        out = self.overhead + np.maximum(self.weight_time + self.kv_time * b,
                                         self.compute_time * b * mm)
        return float(out) if out.ndim == 0 else out

    def _table(self, b: int) -> list[float]:
        knee = self.knee(b)
        if not math.isfinite(knee):
            return [float(self.exact(b, 1))]
        # entries up to floor(knee) + 2: the last two lie in the compute-bound regime, so the
        # table's affine extension (slope compute_time * b) is the exact curve
        length = max(2, int(math.floor(knee)) + 2)
        return [float(x) for x in self.exact(b, np.arange(1, length + 1))]

    def at_batch(self, batch) -> CostCurve:
        """``T(batch, .)`` as a table curve, exact for every ``m``."""
        return CostCurve.from_table(self._table(_batch(batch)))

    def large_batch_rate(self, m):
        """``lim_{b -> inf} T(b, m) / b = max(kv_time, compute_time m)``."""
        mm = np.asarray(m, dtype=np.float64)
        out = np.maximum(self.kv_time, self.compute_time * mm)
        return float(out) if out.ndim == 0 else out

    def scaled(self, factor: float) -> RooflineCost:
        f = as_real(factor, "factor", low=0.0)
        return RooflineCost(overhead=self.overhead * f, weight_time=self.weight_time * f,
                            compute_time=self.compute_time * f, kv_time=self.kv_time * f,
                            field=self.field)

    def to_config(self):
        return {"roofline": {"overhead": self.overhead, "weight_time": self.weight_time,
                             "compute_time": self.compute_time, "kv_time": self.kv_time}}


def batch_cost_from_config(spec, field: str = "cost") -> BatchCostCurve:
    """``{"batch_table": {...}}`` or ``{"roofline": {...}}`` (errors name the field)."""
    if not isinstance(spec, dict):
        raise PolyspecInputError(field, f"must be an object/mapping, got {type(spec).__name__}")
    if "batch_table" in spec:
        require_keys(spec, field, required=["batch_table"])
        return BatchTableCost(spec["batch_table"], field)
    require_keys(spec, field, required=["roofline"])
    r = require_keys(spec["roofline"], f"{field}.roofline",
                     required=["weight_time", "compute_time"], optional=["overhead", "kv_time"])
    return RooflineCost(overhead=r.get("overhead", 0.0), weight_time=r["weight_time"],
                        compute_time=r["compute_time"], kv_time=r.get("kv_time", 0.0),
                        field=field)
