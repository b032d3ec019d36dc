"""Pre-registered forecasts against the captures taken afterwards (``polyspec forecast
--score FILE``), and the leave-one-out coverage of forecast intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_real
from polyspec_theory.schemes import synchronous
from validation.analysis.forecast import error_quantile, measured_ci95
from validation.analysis.relative import relative_error

__all__ = ["loo_coverage", "score_forecasts", "find_capture", "FORECAST_KINDS",
           "prediction_interval", "widened_interval", "half_width", "interval_quantile",
           "calibration", "interval_errors", "Z95"]

# a forecast line's kind (this file's own word) -> the theory registry's scheme it forecasts
KIND_SCHEMES = {"chain": "chain", "tree": "structured", "schedule": "structured",
                "batch": "batch", "async": "async"}
FORECAST_KINDS = tuple(KIND_SCHEMES)


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


def _check_line(f, where: str, seen: dict, ln: int) -> None:
    """One forecast line's fields checked (``where``: ``file:line`` for the message);
    ``seen`` maps the names already read to their lines."""
    for k in ("name", "kind", "levels", "speedup", "interval95"):
        if not isinstance(f, dict) or k not in f:
            raise PolyspecInputError("--score", f"{where}: no field {k!r}")
    name = f["name"]
    if (not isinstance(name, str) or not name.strip() or name in (".", "..")
            or _NAME_BAD & set(name) or len(name) > 255):
        raise PolyspecInputError("--score", f"{where}: name must be a capture's file name "
                                 f"without .jsonl (no path, no * ? [ ]), got {name!r}"[:200])
    if name in seen:
        raise PolyspecInputError("--score", f"{where}: a second forecast of capture "
                                 f"{name!r} (first on line {seen[name]})")
    seen[name] = ln
    if "batch" in f and (isinstance(f["batch"], bool) or not isinstance(f["batch"], int)
                         or f["batch"] < 1):
        raise PolyspecInputError("--score", f"{where}: batch must be a positive integer")
    lv = f["levels"]
    if isinstance(lv, bool) or not isinstance(lv, int) or lv < 2:
        raise PolyspecInputError("--score", f"{where}: levels must be the number of "
                                 f"models (an integer >= 2), got {lv!r}"[:200])
    if f["kind"] not in FORECAST_KINDS:
        raise PolyspecInputError("--score", f"{where}: kind {f['kind']!r} is not one of "
                                 f"{', '.join(FORECAST_KINDS)}")
    iv = f["interval95"]
    if (not isinstance(iv, list) or len(iv) != 2
            or not all(_number(x) for x in iv) or iv[0] > iv[1]):
        raise PolyspecInputError("--score", f"{where}: interval95 must be [low, high]")
    sp = f["speedup"]
    if not _number(sp) or sp <= 0:
        raise PolyspecInputError("--score", f"{where}: speedup must be a positive number")
    if not iv[0] <= sp <= iv[1]:
        raise PolyspecInputError("--score", f"{where}: speedup {sp:g} is outside its own "
                                 f"interval95 [{iv[0]:g}, {iv[1]:g}]")


def score_forecasts(path) -> dict:
    """Each forecast line of ``path`` (``name``, ``kind``, ``levels``, ``batch``,
    ``speedup``, ``interval95``) against its capture (found by ``name``,
    :func:`find_capture`): ``configs`` (``measured``, its 95 % CI, ``inside`` the forecast's
    interval, ``error`` = forecast / measured - 1; ``measured`` None when not captured yet),
    ``median_abs_error``, ``max_abs_error``, ``inside`` (how many) and ``inside_fraction``
    (the coverage), ``median_half_width`` (:func:`half_width`) over the captured ones."""
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
        _check_line(f, f"{p}:{ln}", seen, ln)
        lv, iv, sp = f["levels"], f["interval95"], f["speedup"]
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
            sync = synchronous(cap.scheme)
            if synchronous(KIND_SCHEMES[f["kind"]]) != sync:
                raise PolyspecInputError("--score", f"{p}:{ln}: kind {f['kind']!r}, but the "
                                         f"capture {hit} is "
                                         f"{'a synchronous' if sync else 'an ' + cap.mode} "
                                         "capture: not the configuration forecast")
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
            "inside": sum(bool(r["inside"]) for r in done),
            "inside_fraction": (float(np.mean([r["inside"] for r in done])) if done
                                else None),
            "median_half_width": (float(np.median([half_width(r["forecast"], r["interval95"])
                                                   for r in done])) if done else None)}


def half_width(speedup: float, interval) -> float:
    """An interval's relative half-width ``(high - low) / (2 speedup)`` (the ``q`` of
    ``speedup * (1 ± q)`` when the lower end is not clamped at 0)."""
    lo, hi = (as_real(x, f"interval95[{i}]") for i, x in enumerate(interval))
    sp = as_real(speedup, "speedup", low=0.0, low_open=True)
    if hi < lo:
        raise PolyspecInputError("interval95", f"low {lo:g} above high {hi:g}")
    return (hi - lo) / (2.0 * sp)


Z95 = 1.959963984540054  # the normal 97.5 % quantile


def interval_quantile(errors, floor: float = 0.0) -> float:
    """The one rule for a forecast's relative 95 % half-width: the split-conformal order
    statistic of the calibration errors (:func:`error_quantile`), at least ``Z95 * floor``
    (``floor``: the A/A noise floor, the relative sd of one capture's measured speedup:
    no forecast can be closer to a single capture than the machine lets it)."""
    f = as_real(floor, "floor", low=0.0)
    return max(error_quantile(errors), Z95 * f)


def prediction_interval(speedup: float, errors, of: str, floor: float = 0.0) -> dict:
    """The one rule for a forecast's 95 % interval: ``speedup * (1 ± q)`` with ``q`` =
    :func:`interval_quantile` of the calibration errors (leave-one-out errors of the
    committed captures, or a scored round's errors: :func:`calibration`) and the A/A
    ``floor`` (the lower end at least 0: a speedup is positive), ``None`` without errors;
    and where it came from (``of``: whose errors, e.g. "the captures at this
    temperature")."""
    errs = list(errors)
    q = interval_quantile(errs, floor) if errs else None
    return {"interval95": None if q is None else [max(speedup * (1 - q), 0.0),
                                                  speedup * (1 + q)],
            "interval_from": {"loo_errors": len(errs), "quantile": q, "floor": floor,
                              "loo_coverage": loo_coverage(errs),
                              "method": "split-conformal order statistic of the |relative "
                                        f"errors| of {of}, at least 1.96 x the A/A floor"}}


def calibration(path, scored: dict | None = None) -> dict:
    """The interval calibration a scored forecasts file gives (``polyspec forecast
    --interval-from``): its captured forecasts' relative errors, the A/A noise floor of the
    ``aa/`` captures beside it (0 if none; ``floor_from``: that folder, ``None`` if none),
    ``quantile`` = :func:`interval_quantile` of the
    errors pooled over kinds and that floor, and the coverage that half-width has on the
    same forecasts (``in_sample_coverage``: in-sample, the errors it was taken from);
    ``guarantee``: split-conformal's marginal coverage for a new forecast exchangeable with
    them. ``scored``: :func:`score_forecasts` of ``path`` if already computed."""
    from validation.analysis.plan_uncertainty import noise_floor
    from validation.traces.records import read_traces

    s = score_forecasts(path) if scored is None else scored
    errs = [r["error"] for r in s["configs"] if r["error"] is not None]
    if not errs:
        raise PolyspecInputError("--interval-from", f"{path}: no forecast in it is captured yet")
    aa = Path(path).parent / "aa"
    nf = noise_floor(read_traces(aa)) if aa.is_dir() else None
    floor = nf["relative_sd"] if nf else 0.0
    q = interval_quantile(errs, floor)
    return {"forecasts": str(path), "errors": errs, "floor": floor,
            "floor_from": str(aa) if nf else None, "quantile": q,
            "in_sample_coverage": float(np.mean(np.abs(errs) <= q)),
            "guarantee": min(math.ceil(0.95 * (len(errs) + 1)), len(errs)) / (len(errs) + 1),
            "method": "split-conformal order statistic of the scored round's |relative "
                      "errors| pooled over kinds, at least 1.96 x its A/A floor (in-sample "
                      "on that round when its forecasts were remade with the current model)"}


def interval_errors(interval_from, loo: dict, of: str) -> tuple[dict, float, str]:
    """The calibration errors, A/A floor and their description for a forecast's interval:
    the scored round ``interval_from`` (``forecast --interval-from``; :func:`calibration`)
    if given, else the leave-one-out errors ``loo`` (floor 0) described as ``of``."""
    if not interval_from:
        return loo, 0.0, of
    c = calibration(interval_from)
    return ({f"#{i}": e for i, e in enumerate(c["errors"])}, c["floor"],
            f"the scored forecasts {interval_from} (pooled over kinds)")


def widened_interval(low: float, high: float, rel_sd: float) -> list[float]:
    """A replay's interval ``[low, high]`` (its cost interval) widened by the model's
    relative error sd ``rel_sd`` (normal 95 %: 1.96 sd each side; the lower end at least
    0): the interval of the GPU-trace forecasts."""
    return [max(low * (1 - 1.96 * rel_sd), 0.0), high * (1 + 1.96 * rel_sd)]
