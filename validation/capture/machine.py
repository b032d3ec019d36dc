"""The machine's state while something is timed (docs/measuring.md): its load average and CPU
frequency, recorded in every capture's header and ``end`` record, and the one refusal that
keeps ``polyspec capture`` (every mode), ``polyspec profile`` and the benchmarks from timing
on a busy machine.

:func:`load_average` is the only reader of the load (tests replace it); :func:`check_load` the
only refusal. The threshold is :data:`MAX_LOAD` (0.5, the 1-minute load average), or the
environment variable ``POLYSPEC_MAX_LOAD``; ``--allow-load`` runs anyway and the trace says so.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError

__all__ = ["MAX_LOAD", "MAX_LOAD_ENV", "load_average", "cpu_frequency", "machine_state",
           "header_fields", "max_load", "check_load", "check_load_or_exit",
           "add_allow_load"]

MAX_LOAD = 0.5  # the 1-minute load average above which timing refuses to start
MAX_LOAD_ENV = "POLYSPEC_MAX_LOAD"


def load_average() -> tuple[float, float, float] | None:
    """The 1-, 5- and 15-minute load averages (``None`` where the platform has none)."""
    try:
        return tuple(float(x) for x in os.getloadavg())
    except (OSError, AttributeError):
        return None


def cpu_frequency(root: str = "/") -> dict:
    """The CPUs' current frequencies in MHz (CPU 0 first) and where they were read:
    ``cpufreq`` (``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq``, kHz), else
    ``/proc/cpuinfo`` (``cpu MHz``); ``{"mhz": null, "reason": ...}`` when neither has them.
    ``root``: the file system's root (tests)."""
    mhz = []
    root = Path(root)
    files = glob.glob(str(root / "sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
    for f in sorted(files, key=lambda s: int(re.findall(r"/cpu(\d+)/cpufreq/", s)[-1])):
        try:
            mhz.append(round(int(Path(f).read_text().strip()) / 1000.0, 1))
        except (OSError, ValueError):
            continue
    if mhz:
        return {"mhz": mhz, "source": "cpufreq"}
    try:
        lines = (root / "proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {"mhz": None, "reason": "neither cpufreq nor /proc/cpuinfo is readable"}
    for line in lines:
        if line.startswith("cpu MHz"):
            try:
                mhz.append(round(float(line.split(":", 1)[1]), 1))
            except ValueError:
                continue
    if mhz:
        return {"mhz": mhz, "source": "/proc/cpuinfo"}
    return {"mhz": None, "reason": "no cpufreq and no 'cpu MHz' in /proc/cpuinfo (a "
            "virtual machine or a platform that does not report it)"}


def machine_state() -> dict:
    """``{"at", "load_average": [1, 5, 15 min] | null, "cpu_mhz": {...}}`` now (the header's
    ``machine``, the ``end`` record's ``machine``; docs/measuring.md)."""
    from datetime import UTC, datetime

    load = load_average()
    state = {"at": datetime.now(UTC).isoformat(timespec="seconds"),
             "load_average": None if load is None else [round(x, 2) for x in load]}
    if load is None:
        state["load_reason"] = "os.getloadavg() is not available on this platform"
    state["cpu_mhz"] = cpu_frequency()
    return state


def header_fields(load_check: dict | None) -> dict:
    """The fields every capture's header holds about the machine: ``machine`` (its state at
    the start, :func:`machine_state`) and ``load_check`` (what :func:`check_load` returned;
    ``None``: no check ran, a capture started from Python rather than the command line)."""
    return {"machine": machine_state(), "load_check": load_check}


def max_load() -> float:
    """The refusal threshold: ``POLYSPEC_MAX_LOAD`` when set (a number >= 0), else
    :data:`MAX_LOAD`."""
    text = os.environ.get(MAX_LOAD_ENV)
    if text is None or not text.strip():
        return MAX_LOAD
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0 or v == float("inf"):
        raise PolyspecInputError(MAX_LOAD_ENV, f"must be a number >= 0, got {text!r}")
    return v


def check_load(allow_load: bool, what: str = "a capture") -> dict:
    """Refuse to start ``what`` (raise :class:`PolyspecInputError`, field ``--allow-load``)
    when the 1-minute load average is above :func:`max_load`, unless ``allow_load``; return
    the header's ``load_check``: ``{"max_load", "allow_load", "load_1min"}`` (``load_1min``
    null where the platform has no load average: nothing to check)."""
    limit = max_load()
    load = load_average()
    one = None if load is None else round(load[0], 2)
    if one is not None and load[0] > limit and not allow_load:
        raise PolyspecInputError(
            "--allow-load", f"the 1-minute load average is {load[0]:.2f} > {limit:g} (set by "
            f"{MAX_LOAD_ENV}, default {MAX_LOAD:g}): other work is running and {what} would "
            "time it too (docs/measuring.md); wait until the machine is idle, or pass "
            "--allow-load to run anyway (recorded)")
    return {"max_load": limit, "allow_load": bool(allow_load), "load_1min": one}


def add_allow_load(parser) -> None:
    """The ``--allow-load`` option (every command that times)."""
    parser.add_argument("--allow-load", action="store_true",
                        help=f"time even when the 1-minute load average is above "
                        f"{MAX_LOAD_ENV} (default {MAX_LOAD:g}); recorded as "
                        "\"allow_load\": true (docs/measuring.md)")


def check_load_or_exit(allow_load: bool, what: str) -> dict:
    """:func:`check_load` for a script (the benchmarks): the refusal printed on one line to
    stderr and exit status 2, as the command line does."""
    import sys

    try:
        return check_load(allow_load, what)
    except PolyspecInputError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
