"""Where the committed real traces live, and loading them for figures 4 and 7."""

from __future__ import annotations

from pathlib import Path

from .registry import FigureUnavailable

__all__ = ["DEVICES", "default_traces_dir", "has_traces", "load"]

DEVICES = ("cpu", "gpu")


def default_traces_dir(device: str = "cpu") -> Path:
    """``validation/traces/<device>/`` of this checkout (next to ``validation/traces.py``)."""
    try:
        import validation.traces as vt
    except ModuleNotFoundError as e:
        raise FigureUnavailable(f"the trace reader validation.traces is missing ({e})") from e
    return Path(vt.__file__).resolve().parent / "traces" / device


def has_traces(directory) -> bool:
    d = Path(directory)
    return d.is_dir() and any(d.glob("*.jsonl"))


def load(directory):
    """``(captures, notes)`` of every trace in ``directory`` via
    :func:`validation.trace_captures.load_captures`; :class:`FigureUnavailable` if there are
    none."""
    d = Path(directory)
    if not has_traces(d):
        raise FigureUnavailable(f"no real traces (*.jsonl) in {d}")
    from validation.trace_captures import load_captures

    return load_captures(d)
