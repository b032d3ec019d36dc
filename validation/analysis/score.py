"""Pre-registered forecasts against the captures taken afterwards (``polyspec forecast
--score FILE``), and the leave-one-out coverage of forecast intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.forecast import error_quantile, measured_ci95
from validation.analysis.relative import relative_error

__all__ = ["loo_coverage", "score_forecasts", "find_capture", "FORECAST_KINDS",
           "prediction_interval", "widened_interval"]

FORECAST_KINDS = ("chain", "tree", "schedule", "batch", "async")


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
    want = f"{name}.jsonl"  # compared as a string: a name is never a glob pattern
    hits = (sorted(q for q in root.rglob("*.jsonl") if q.name == want)
            or sorted(q for q in root.parent.glob("*.jsonl") if q.name == want))
    return hits[0] if hits else None


_NAME_BAD = set("*?[]/\\")
MAX_SCORE_BYTES = 2**26


def _number(x) -> bool:
    """A finite JSON number; ``true`` / ``false`` are not numbers."""
    return (not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x))


def _read(path, kind):
    from validation.traces.batch import read_batch_trace
    from validation.traces.records import read_trace

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
    from validation.files import decode_utf8, read_regular_bytes

    p = Path(path)
    if not p.exists():
        raise PolyspecInputError("--score", f"{p}: no such file")
    text = decode_utf8(read_regular_bytes(p, MAX_SCORE_BYTES, "--score", "forecast file"), p,
                       "--score")
    rows = []
    seen: dict[str, int] = {}
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            f = json.loads(line)
        except json.JSONDecodeError as e:
            raise PolyspecInputError("--score", f"{p}:{ln}: not JSON ({e.msg})") from None
        except (RecursionError, ValueError) as e:
            raise PolyspecInputError("--score", f"{p}:{ln}: not readable JSON "
                                     f"({type(e).__name__})") from None
        for k in ("name", "kind", "levels", "speedup", "interval95"):
            if not isinstance(f, dict) or k not in f:
                raise PolyspecInputError("--score", f"{p}:{ln}: no field {k!r}")
        name = f["name"]
        if (not isinstance(name, str) or not name.strip() or name in (".", "..")
                or _NAME_BAD & set(name) or len(name) > 255):
            raise PolyspecInputError("--score", f"{p}:{ln}: name must be a capture's file name "
                                     f"without .jsonl (no path, no * ? [ ]), got {name!r}"[:200])
        if name in seen:
            raise PolyspecInputError("--score", f"{p}:{ln}: a second forecast of capture "
                                     f"{name!r} (first on line {seen[name]})")
        seen[name] = ln
        if "batch" in f and (isinstance(f["batch"], bool) or not isinstance(f["batch"], int)
                             or f["batch"] < 1):
            raise PolyspecInputError("--score", f"{p}:{ln}: batch must be a positive integer")
        lv = f["levels"]
        if isinstance(lv, bool) or not isinstance(lv, int) or lv < 2:
            raise PolyspecInputError("--score", f"{p}:{ln}: levels must be the number of "
                                     f"models (an integer >= 2), got {lv!r}"[:200])
        if f["kind"] not in FORECAST_KINDS:
            raise PolyspecInputError("--score", f"{p}:{ln}: kind {f['kind']!r} is not one of "
                                     f"{', '.join(FORECAST_KINDS)}")
        iv = f["interval95"]
        if (not isinstance(iv, list) or len(iv) != 2
                or not all(_number(x) for x in iv) or iv[0] > iv[1]):
            raise PolyspecInputError("--score", f"{p}:{ln}: interval95 must be [low, high]")
        sp = f["speedup"]
        if not _number(sp) or sp <= 0:
            raise PolyspecInputError("--score", f"{p}:{ln}: speedup must be a positive number")
        if not iv[0] <= sp <= iv[1]:
            raise PolyspecInputError("--score", f"{p}:{ln}: speedup {sp:g} is outside its own "
                                     f"interval95 [{iv[0]:g}, {iv[1]:g}]")
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
            n_models = len(getattr(cap, "models", ()) or ())
            if n_models and n_models != lv:
                raise PolyspecInputError("--score", f"{p}:{ln}: levels {lv}, but the capture "
                                         f"{hit} has {n_models} models: not the configuration "
                                         "forecast")
            is_async = getattr(cap, "mode", "sync") == "async"
            if (f["kind"] == "async") != is_async:
                raise PolyspecInputError("--score", f"{p}:{ln}: kind {f['kind']!r}, but the "
                                         f"capture {hit} is {'' if is_async else 'not '}an "
                                         "async capture: not the configuration forecast")
            b = getattr(cap, "batch", None)
            if f["kind"] == "batch" and isinstance(b, int) and b != row["batch"]:
                raise PolyspecInputError("--score", f"{p}:{ln}: batch {row['batch']}, but the "
                                         f"capture {hit} has batch {b}")
            m = cap.measured_speedup
            row.update(trace=str(hit), measured=m, measured_ci95=list(_measured_ci(cap,
                                                                                f["kind"])),
                       inside=bool(iv[0] <= m <= iv[1]), error=relative_error(float(sp), m))
        rows.append(row)
    if not rows:
        raise PolyspecInputError("--score", f"{p}: no forecast in it (one JSON object per "
                                 "line: name, kind, levels, batch, speedup, interval95)")
    done = [r for r in rows if r["measured"] is not None]
    a = np.abs([r["error"] for r in done]) if done else np.array([])
    return {"forecasts": str(p), "configs": rows, "captured": len(done),
            "median_abs_error": float(np.median(a)) if done else None,
            "max_abs_error": float(a.max()) if done else None,
            "inside_fraction": (float(np.mean([r["inside"] for r in done])) if done
                                else None)}


def prediction_interval(speedup: float, errors, of: str) -> dict:
    """The one rule for a forecast's 95 % interval from leave-one-out errors:
    ``speedup * (1 ± q)`` with ``q`` = :func:`error_quantile` of the errors (the lower end
    at least 0: a speedup is positive), ``None`` without errors; and where it came from
    (``of``: whose leave-one-out errors, e.g. "the captures at this temperature")."""
    errs = list(errors)
    q = error_quantile(errs) if errs else None
    return {"interval95": None if q is None else [max(speedup * (1 - q), 0.0),
                                                  speedup * (1 + q)],
            "interval_from": {"loo_errors": len(errs), "quantile": q,
                              "loo_coverage": loo_coverage(errs),
                              "method": "split-conformal order statistic of the leave-one-out "
                                        f"|relative errors| of {of}"}}


def widened_interval(low: float, high: float, rel_sd: float) -> list[float]:
    """A replay's interval ``[low, high]`` (its cost interval) widened by the model's
    relative error sd ``rel_sd`` (normal 95 %: 1.96 sd each side; the lower end at least
    0): the interval of the GPU-trace forecasts."""
    return [max(low * (1 - 1.96 * rel_sd), 0.0), high * (1 + 1.96 * rel_sd)]
