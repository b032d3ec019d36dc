"""The machine's load at a capture's start, and the A/A noise floors by load
(``polyspec validate``: captures made under load are labelled and left out of the headline
unless asked; the idle floor is the one a forecast's error is held against).

A capture's start load is its header's ``load_check.load_1min`` (or, without it, the first
of ``machine.load_average``); above :data:`LOAD_LIMIT` it was made *under load*, at or
below it *idle*; traces written before the header recorded it are *load not recorded*.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LOAD_LIMIT", "start_load", "load_label", "noise_floors"]

LOAD_LIMIT = 0.5  # 1-minute load average above which a capture is "under load"
IDLE, LOADED, UNKNOWN = "idle", "under load", "load not recorded"


def start_load(capture) -> float | None:
    """The 1-minute load average at the capture's start, ``None`` when not recorded."""
    header = getattr(capture, "header", {}) or {}
    lc = header.get("load_check")
    if isinstance(lc, dict) and isinstance(lc.get("load_1min"), (int, float)):
        return float(lc["load_1min"])
    m = header.get("machine")
    la = m.get("load_average") if isinstance(m, dict) else None
    if isinstance(la, (list, tuple)) and la and isinstance(la[0], (int, float)):
        return float(la[0])
    return None


def load_label(capture) -> str:
    """``"idle"``, ``"under load"`` or ``"load not recorded"`` (module docstring)."""
    x = start_load(capture)
    return UNKNOWN if x is None else (LOADED if x > LOAD_LIMIT else IDLE)


def _folder_label(captures) -> str:
    labels = {load_label(c) for c in captures}
    return LOADED if LOADED in labels else (IDLE if labels == {IDLE} else UNKNOWN)


def noise_floors(folder, aa=None) -> list[dict]:
    """The A/A noise floors (:func:`validation.analysis.plan_uncertainty.noise_floor`) of
    ``aa`` if given, else of ``folder/aa`` and every ``folder/*/aa``, each with its folder
    (relative to ``folder`` where it lies inside), its load label (``idle`` only when every
    A/A capture records an idle start) and the start loads."""
    from validation.analysis.plan_uncertainty import noise_floor
    from validation.traces.records import read_traces

    folder = Path(folder)
    dirs = [Path(aa)] if aa else [folder / "aa"] + sorted(folder.glob("*/aa"))
    out = []
    for d in dirs:
        if not d.is_dir() or not any(d.glob("*.jsonl")):
            continue
        caps = read_traces(d)
        nf = noise_floor(caps)
        if nf is None:
            continue
        try:
            where = d.relative_to(folder).as_posix()
        except ValueError:
            where = str(d)
        out.append({**nf, "folder": where, "load": _folder_label(caps),
                    "start_loads": [start_load(c) for c in caps]})
    return out
