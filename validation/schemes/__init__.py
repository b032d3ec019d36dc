"""The decoders of the schemes, one module per scheme, keyed by the theory registry's names
(:mod:`polyspec_theory.schemes`): each holds the scheme's decoder, the fields its traces'
headers and rounds carry and their checks, and how a capture of it is predicted.

The scheme of a trace is decided once, by the theory's decision on the header's cascade
(:func:`scheme_of_trace`), never again here.
"""

from __future__ import annotations

import importlib

from polyspec_theory.schemes import scheme_named
from validation.traces.schema import is_batch_header

# one module of this package per scheme of the theory registry
REGISTERED = ("chain", "structured", "batch", "async_")

__all__ = ["REGISTERED", "registry", "get", "scheme_of_trace", "torch"]

_LOADED: dict = {}


class _Lazy:
    """A module imported on first use: the decoders' ``torch`` (reading a trace, which checks
    it with its scheme's module, never loads it)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


torch = _Lazy("torch")


def registry() -> dict:
    """``{name: module}`` of the registered decoder modules (loaded on first use)."""
    if not _LOADED:
        for mod in REGISTERED:
            m = importlib.import_module(f"validation.schemes.{mod}")
            _LOADED[m.NAME] = m
    return _LOADED


def get(name: str):
    """The decoder module of scheme ``name``."""
    return registry()[name]


def features_of_header(header: dict) -> dict:
    """What the theory's decision reads off a trace header: its mode, whether some pair has a
    tree or a schedule, its serving batch."""
    c = header.get("cascade") or {}
    structured = False
    for key in ("trees", "schedules"):
        v = c.get(key)  # a malformed entry is the structured scheme's to refuse
        structured |= v is not None and (not isinstance(v, list)
                                         or any(x is not None for x in v))
    batch = header["batch"].get("size") if is_batch_header(header) else None
    return {"mode": header.get("mode", "sync"), "structured": structured, "batch": batch}


def scheme_of_trace(header: dict) -> str:
    """The scheme that wrote a trace: the theory's decision on its header."""
    f = features_of_header(header)
    return scheme_named(f["mode"], structured=f["structured"], batch=f["batch"])
