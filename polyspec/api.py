"""The public API (re-exported by :mod:`polyspec`)."""

from __future__ import annotations

from pathlib import Path

from polyspec_theory.config import Cascade

__all__ = ["load_cascade"]


def load_cascade(source) -> Cascade:
    """A :class:`Cascade` from a config file (JSON or YAML), a config mapping, or a Cascade."""
    if isinstance(source, Cascade):
        return source
    if isinstance(source, dict):
        return Cascade.from_config(source)
    from validation.files import read_mapping

    return Cascade.from_config(read_mapping(Path(source)))
