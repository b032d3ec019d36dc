"""Argument helpers shared by the subcommands."""

from __future__ import annotations


def add_cpu_devices_argument(p) -> None:
    """``--cpu-devices K`` (for :func:`simulators.runtime.use_cpu_cores`)."""
    p.add_argument("--cpu-devices", type=int, default=None,
                   help="CPU devices to shard chains over (default: one per core; results "
                        "do not depend on it)")
