"""Argument helpers shared by the subcommands."""

from __future__ import annotations


def add_cpu_devices_argument(p) -> None:
    """``--cpu-devices K`` (for :func:`simulators.runtime.use_cpu_cores`)."""
    p.add_argument("--cpu-devices", type=int, default=None,
                   help="CPU devices to shard chains over (default: one per core; results "
                        "do not depend on it)")


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, inf) replaced by ``None`` and numpy scalars /
    arrays converted, so that ``json.dumps(..., allow_nan=False)`` succeeds (strict JSON)."""
    import math

    import numpy as np

    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def dump_strict_json(obj) -> str:
    """Indented strict JSON: the project's one rule (:func:`validation.files.dump_json`: a
    non-finite number is written as null and the object lists it under ``non_finite``)."""
    from validation.files import dump_json

    return dump_json(obj)
