"""Pre-registered forecasts against the captures taken afterwards (``polyspec forecast
--score FILE``), and the leave-one-out coverage of forecast intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.relative import relative_error

from .forecast import error_quantile, measured_ci95

__all__ = ["loo_coverage", "score_forecasts", "find_capture", "FORECAST_KINDS"]

FORECAST_KINDS = ("chain", "tree", "schedule", "batch")


def loo_coverage(errors, level: float = 0.95) -> dict:
    """Coverage of the conformal interval of :func:`error_quantile` on the errors themselves,
    leave-one-out: capture ``i`` is inside when ``|e_i|`` is at most the quantile of the
    OTHER errors. ``{"n", "inside", "coverage"}`` (coverage NaN with fewer than 2 errors)."""
    e = np.abs(np.asarray(list(errors), dtype=np.float64))
    if e.size < 2:
        return {"n": int(e.size), "inside": 0, "coverage": math.nan}
    inside = sum(bool(e[i] <= error_quantile(np.delete(e, i), level)) for i in range(e.size))
    return {"n": int(e.size), "inside": int(inside), "coverage": inside / e.size}


def find_capture(name: str, root: Path):
    """The capture file ``<name>.jsonl`` under ``root`` (recursively) or in its parent folder;
    ``None`` if absent."""
    hits = sorted(root.rglob(f"{name}.jsonl")) or sorted(root.parent.glob(f"{name}.jsonl"))
    return hits[0] if hits else None


def _read(path, kind):
    from ..batch.dataset import read_batch_trace
    from ..traces import read_trace

    return read_batch_trace(path) if kind == "batch" else read_trace(path)


def _measured_ci(cap, kind) -> tuple[float, float]:
    if kind == "batch":
        se = cap.speedup_se()
        return cap.measured_speedup - 1.96 * se, cap.measured_speedup + 1.96 * se
    return measured_ci95(cap)


def score_forecasts(path) -> dict:
    """Each forecast line of ``path`` (``name``, ``kind``, ``levels``, ``batch``,
    ``speedup``, ``interval95``) against its capture (found by ``name``,
    :func:`find_capture`): ``configs`` (``measured``, its 95 % CI, ``inside`` the forecast's
    interval, ``error`` = forecast / measured - 1; ``measured`` None when not captured yet),
    ``median_abs_error``, ``max_abs_error``, ``inside_fraction`` over the captured ones."""
    p = Path(path)
    if not p.is_file():
        raise PolyspecInputError("--score", f"{p}: no such file")
    rows = []
    for ln, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            f = json.loads(line)
        except json.JSONDecodeError as e:
            raise PolyspecInputError("--score", f"{p}:{ln}: not JSON ({e.msg})") from None
        for k in ("name", "kind", "levels", "speedup", "interval95"):
            if not isinstance(f, dict) or k not in f:
                raise PolyspecInputError("--score", f"{p}:{ln}: no field {k!r}")
        if f["kind"] not in FORECAST_KINDS:
            raise PolyspecInputError("--score", f"{p}:{ln}: kind {f['kind']!r} is not one of "
                                     f"{', '.join(FORECAST_KINDS)}")
        iv = f["interval95"]
        if (not isinstance(iv, list) or len(iv) != 2
                or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in iv)
                or iv[0] > iv[1]):
            raise PolyspecInputError("--score", f"{p}:{ln}: interval95 must be [low, high]")
        sp = f["speedup"]
        if not isinstance(sp, (int, float)) or not math.isfinite(sp) or sp <= 0:
            raise PolyspecInputError("--score", f"{p}:{ln}: speedup must be a positive number")
        row = {"name": f["name"], "kind": f["kind"], "levels": f["levels"],
               "batch": f.get("batch", 1), "trace": None, "forecast": float(sp),
               "interval95": [float(iv[0]), float(iv[1])], "measured": None,
               "measured_ci95": None, "inside": None, "error": None}
        hit = find_capture(str(f["name"]), p.parent)
        cap = None
        if hit is not None:
            try:
                cap = _read(hit, f["kind"])
            except PolyspecInputError as e:  # e.g. a capture still running
                row["note"] = f"{hit}: not readable yet ({e})"
        if cap is not None:
            m = cap.measured_speedup
            row.update(trace=str(hit), measured=m, measured_ci95=list(_measured_ci(cap,
                                                                                f["kind"])),
                       inside=bool(iv[0] <= m <= iv[1]), error=relative_error(float(sp), m))
        rows.append(row)
    done = [r for r in rows if r["measured"] is not None]
    a = np.abs([r["error"] for r in done]) if done else np.array([])
    return {"forecasts": str(p), "configs": rows, "captured": len(done),
            "median_abs_error": float(np.median(a)) if done else None,
            "max_abs_error": float(a.max()) if done else None,
            "inside_fraction": (float(np.mean([r["inside"] for r in done])) if done
                                else None)}
