"""Cost curves ``T_i(m)``: wall time of one forward pass of a model scoring ``m`` new positions,
and their fit from timing samples (:func:`fit_cost_curve`: medians per ``(m, context)`` cell,
since timing noise on shared CPUs is heavy-tailed, an affine summary and a context slope).

**Serving batches.** Cost curves of a serving batch, ``T(b, m)``: wall time of one forward pass
that scores ``m``
new positions for each of ``b`` sequences (docs/theory.md Part III-C, B0).

Two config forms, both accepted by :func:`polyspec_theory.core.costs.cost_from_config`:

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

Both are :class:`~polyspec_theory.core.costs.CostCurve` s whose single-stream curve ``T(m)`` is
``T(1, m)`` (so ``predict``, ``simulate`` and ``plan`` without a batch see batch 1), and
:meth:`BatchCostCurve.at_batch` gives ``T(b, .)`` as a plain table curve, exact for every
``m`` (the table is long enough that its affine extension is the exact curve).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_int_array,
    as_real,
    as_real_array,
    require_keys,
)

__all__ = ["CostCurve", "cost_from_config", "CostFit", "fit_cost_curve", "BatchCostCurve",
    "BatchTableCost", "RooflineCost", "batch_cost_from_config", "MAX_BATCH_SIZE",
    "MAX_ROOFLINE_KNEE"]


class CostCurve:
    """``T(m)`` for m >= 1: constant, affine ``b + k (m - 1)``, or a measured table.

    A table ``[T(1), T(2), ...]`` is extended past its end affinely with the slope of its last
    two entries, clamped at >= 0 (constant if it has one entry), so costs never go negative.
    """

    def __init__(self, *, base=None, per_token=0.0, table=None, field: str = "cost"):
        if table is not None:
            arr = as_real_array(table, f"{field}.table", low=0.0)
            self.table = tuple(float(x) for x in arr)
            self.base = self.table[0]
            slope = (self.table[-1] - self.table[-2]) if len(self.table) > 1 else 0.0
            self.per_token = max(slope, 0.0)
            self.kind = "table"
        else:
            self.base = as_real(base, f"{field}.base", low=0.0)
            self.per_token = as_real(per_token, f"{field}.per_token", low=0.0)
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
        if type(m) is int and 1 <= m < 2**53:  # the planners' scalar calls: the same float
            # operations as the array path below (an int below 2^53 is an exact float)
            if self.table is None:
                return float(self.base + self.per_token * float(m - 1))
            n = len(self.table)
            if m <= n:
                return self.table[m - 1]
            return self.table[-1] + self.per_token * float(m - n)
        scalar = np.ndim(m) == 0
        mm = as_int_array(np.atleast_1d(m), "m", low=1)
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
    """``c`` (constant), ``{"base": b, "per_token": k}`` or ``{"table": [T(1), ...]}``; or
    a serving-batch cost ``{"batch_table": {...}}`` / ``{"roofline": {...}}``
    (:mod:`polyspec_theory.core.costs`)."""
    if isinstance(spec, CostCurve):
        return spec
    if isinstance(spec, dict):
        if "batch_table" in spec or "roofline" in spec:
            return batch_cost_from_config(spec, field)
        if "table" in spec:
            require_keys(spec, field, required=["table"])
            return CostCurve(table=spec["table"], field=field)
        require_keys(spec, field, required=["base"], optional=["per_token"])
        return CostCurve(base=spec["base"], per_token=spec.get("per_token", 0.0), field=field)
    if isinstance(spec, (list, tuple)):
        raise PolyspecInputError(field, "a list is ambiguous; write {\"table\": [T(1), T(2), ...]}")
    return CostCurve(base=as_real(spec, field, low=0.0), field=field)


@dataclass(frozen=True)
class CostFit:
    """Fitted ``T(m, c)`` of one model from timing samples.

    ``table[m-1]`` = median time of a forward scoring ``m`` positions, at context
    ``reference_context`` (cells measured at other contexts are shifted by the context slope
    before pooling). ``base``/``per_token``: least-squares affine ``b + k (m - 1)`` at the
    reference context; ``context_slope``: seconds per token of context (0 if only one context
    was measured) with its standard error ``context_slope_se``.
    """

    name: str
    ms: np.ndarray
    table: np.ndarray
    base: float
    per_token: float
    context_slope: float
    context_slope_se: float
    reference_context: float
    contexts: np.ndarray
    n_samples: int
    residual_rel_sd: float
    cells: tuple[tuple[int, float, float, int], ...]  # (m, context, median seconds, n)
    scale: float = 1.0  # calibration factor already applied (see :meth:`scaled`)
    lack_of_fit_p: float = math.nan  # F-test of the affine model against per-cell means

    @property
    def preferred_kind(self) -> str:
        """``"affine"`` unless the affine model's lack of fit is significant (p < 0.01) or
        untestable (no replicates), then ``"table"``."""
        p = self.lack_of_fit_p
        return "affine" if (not math.isnan(p) and p >= 0.01) else "table"

    def scaled(self, factor: float) -> CostFit:
        """The same curve with every time multiplied by ``factor`` (e.g. calibrated to
        forward times measured under the capture's own machine load)."""
        f = as_real(factor, "factor", low=0.0, low_open=True)
        return dataclasses.replace(
            self, table=self.table * f, base=self.base * f, per_token=self.per_token * f,
            context_slope=self.context_slope * f, context_slope_se=self.context_slope_se * f,
            cells=tuple((m, c, t * f, k) for m, c, t, k in self.cells), scale=self.scale * f)

    def at(self, m, context: float | None = None, kind: str = "auto"):
        """``T(m)`` at ``context`` (default: the reference context)."""
        return self.curve(context, kind)(m)

    def curve(self, context: float | None = None, kind: str = "auto") -> CostCurve:
        """A :class:`CostCurve` at ``context``: the median table (``kind="table"``, extended
        affinely past its end), the affine fit (``kind="affine"``) or ``"auto"``
        (:attr:`preferred_kind`: the affine fit unless the data reject it)."""
        if kind == "auto":
            kind = self.preferred_kind
        shift = 0.0
        if context is not None:
            c = as_real(context, "context", low=0.0)
            shift = self.context_slope * (c - self.reference_context)
        if kind == "affine":
            return CostCurve.affine(max(self.base + shift, 1e-12), max(self.per_token, 0.0))
        if kind != "table":
            raise PolyspecInputError("kind",
                                     f"must be 'auto', 'table' or 'affine', got {kind!r}")
        full = np.full(int(self.ms.max()), np.nan)
        full[self.ms - 1] = self.table
        # fill unmeasured m inside the range from the affine fit
        gaps = np.isnan(full)
        if gaps.any():
            m_all = np.arange(1, full.size + 1)
            full[gaps] = self.base + self.per_token * (m_all[gaps] - 1)
        return CostCurve.from_table(np.maximum(full + shift, 1e-12))

    def context_effect(self, c_lo: float, c_hi: float) -> float:
        """Relative change of ``T(1)`` between two context lengths (``d (c_hi - c_lo) / T(1)``)."""
        return self.context_slope * (c_hi - c_lo) / self.table[0]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "table": [float(x) for x in self.table],
            "ms": [int(m) for m in self.ms],
            "base": self.base,
            "per_token": self.per_token,
            "context_slope": self.context_slope,
            "context_slope_se": self.context_slope_se,
            "reference_context": self.reference_context,
            "contexts": [float(c) for c in self.contexts],
            "n_samples": self.n_samples,
            "residual_rel_sd": self.residual_rel_sd,
            "scale": self.scale,
            "lack_of_fit_p": self.lack_of_fit_p,
            "kind": self.preferred_kind,
        }


def _f_sf(x: float, dfn: int, dfd: int) -> float:
    """``P(F > x)`` of the F distribution with ``dfn``, ``dfd`` degrees of freedom (``x >= 0``,
    both > 0): scipy's ``stats.f.sf`` (1 at ``x <= 0``, else ``special.fdtrc``), the same
    floats, from ``scipy.special`` alone (``scipy.stats`` takes a second to import)."""
    from scipy import special

    return 1.0 if x <= 0.0 else float(special.fdtrc(dfn, dfd, x))


def fit_cost_curve(m, seconds, context=None, *, name: str = "model",
                   reference_context: float | None = None) -> CostFit:
    """Fit ``T(m, c) = table(m) + d (c - c_ref)`` and its affine summary from timing samples.

    ``m``: positions scored per forward (>= 1), ``seconds``: wall time of each forward,
    ``context``: prefix length before each forward (optional). Medians per (m, context) cell,
    then least squares ``median = b + k (m-1) + d (c - c_ref)`` over cells weighted by their
    sample counts. ``c_ref`` defaults to the count-weighted mean context.
    """
    mm = as_int_array(m, "m", low=1)
    t = as_real_array(seconds, "seconds", low=0.0)
    if t.shape != mm.shape:
        raise PolyspecInputError("seconds", f"must have one time per m ({mm.size}), got {t.size}")
    if context is None:
        cc = np.zeros(mm.size)
    else:
        cc = as_real_array(context, "context", low=0.0)
        if cc.shape != mm.shape:
            raise PolyspecInputError(
                "context", f"must have one context length per m ({mm.size}), got {cc.size}"
            )
    cells, members = [], []  # members[j]: the indices of cell j's samples, in input order
    for mv in np.unique(mm):
        in_m = np.flatnonzero(mm == mv)
        c_m = cc[in_m]
        for cv in np.unique(c_m):
            sel = in_m[c_m == cv]
            members.append(sel)
            cells.append((int(mv), float(cv), float(np.median(t[sel])), int(sel.size)))
    cm = np.array([c[0] for c in cells], dtype=np.float64)
    cx = np.array([c[1] for c in cells])
    ct = np.array([c[2] for c in cells])
    cw = np.array([c[3] for c in cells], dtype=np.float64)
    c_ref = (float(np.dot(cw, cx) / cw.sum()) if reference_context is None
             else as_real(reference_context, "reference_context", low=0.0))
    contexts = np.unique(cx)
    cols = [np.ones_like(cm), cm - 1]
    use_ctx = contexts.size > 1
    if use_ctx:
        cols.append(cx - c_ref)
    X = np.stack(cols, axis=1)
    sw = np.sqrt(cw)
    beta, *_ = np.linalg.lstsq(X * sw[:, None], ct * sw, rcond=None)
    resid = ct - X @ beta
    slope = float(beta[2]) if use_ctx else 0.0
    slope_se = 0.0
    if use_ctx:
        # weighted least squares: Var(cell median) ~ s2 / n_cell
        free = len(cells) - X.shape[1]
        if free > 0:
            s2 = float(np.dot(cw, resid**2)) / free
            cov = s2 * np.linalg.pinv((X * cw[:, None]).T @ X)
            slope_se = float(math.sqrt(max(cov[2, 2], 0.0)))
        else:
            slope_se = math.inf
    # lack-of-fit F-test of the affine(+context) model on cell means vs pure replicate error
    lof_p = math.nan
    means = np.empty(len(cells))
    ss_pe = 0.0
    for j, sel in enumerate(members):
        means[j] = float(t[sel].mean())
        ss_pe += float(np.sum((t[sel] - means[j]) ** 2))
    df_pe = int(mm.size) - len(cells)
    df_lof = len(cells) - X.shape[1]
    if df_pe > 0 and df_lof > 0 and ss_pe > 0:
        b2, *_ = np.linalg.lstsq(X * sw[:, None], means * sw, rcond=None)
        ss_lof = float(np.dot(cw, (means - X @ b2) ** 2))
        lof_p = _f_sf((ss_lof / df_lof) / (ss_pe / df_pe), df_lof, df_pe)
    ms = np.unique(mm)
    table = np.empty(ms.size)
    for j, mv in enumerate(ms):
        sel = cm == mv
        shifted = ct[sel] - slope * (cx[sel] - c_ref)
        table[j] = float(np.average(shifted, weights=cw[sel]))
    rel = resid / np.maximum(ct, 1e-300)
    return CostFit(
        name=name, ms=ms, table=table, base=float(beta[0]), per_token=float(beta[1]),
        context_slope=slope, context_slope_se=slope_se, reference_context=c_ref,
        contexts=contexts, n_samples=int(mm.size),
        residual_rel_sd=float(math.sqrt(np.dot(cw, rel**2) / cw.sum())),
        cells=tuple(cells), lack_of_fit_p=lof_p,
    )


# --- serving-batch cost curves T(b, m) ----------------------------------------------------------
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
