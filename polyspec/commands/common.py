"""Argument helpers shared by the subcommands."""

from __future__ import annotations


def add_cpu_devices_argument(p) -> None:
    """``--cpu-devices K`` (for :func:`simulators.runtime.use_cpu_cores`)."""
    p.add_argument("--cpu-devices", type=int, default=None,
                   help="CPU devices to shard chains over (default: one per core; results "
                        "do not depend on it)")


def dump_strict_json(obj) -> str:
    """Indented strict JSON: the project's one rule (:func:`validation.files.dump_json`: a
    non-finite number is written as null and the object lists it under ``non_finite``)."""
    from validation.files import dump_json

    return dump_json(obj)
