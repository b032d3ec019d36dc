"""Where the committed real traces live, and loading them for figures 4 and 7."""

from __future__ import annotations

from pathlib import Path

from .registry import FigureUnavailable

__all__ = ["DEVICES", "default_traces_dir", "has_traces", "load"]

DEVICES = ("cpu", "gpu")


def default_traces_dir(device: str = "cpu") -> Path:
    """The committed traces of ``device`` (:func:`validation.paths.traces_dir`)."""
    from polyspec_theory.errors import PolyspecInputError
    from validation.paths import traces_dir

    try:
        return traces_dir(device)
    except PolyspecInputError as e:
        raise FigureUnavailable(str(e)) from e


def has_traces(directory) -> bool:
    d = Path(directory)
    return d.is_dir() and any(d.glob("*.jsonl"))


def load(directory):
    """``(captures, notes)`` of every trace in ``directory`` via
    :func:`validation.traces.records.read_traces` (which parses each unchanged file once per
    process: figures 4 and 7 both read the CPU traces); :class:`FigureUnavailable` if there
    are none."""
    d = Path(directory)
    if not has_traces(d):
        raise FigureUnavailable(f"no real traces (*.jsonl) in {d}")
    from validation.traces.records import read_traces

    caps = read_traces(d)
    return caps, [n for c in caps for n in c.notes]
