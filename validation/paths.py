"""Where the committed data lives: the model zoo's weights and the captured traces.

One data folder, ``data/`` at the repository root, or the folder named by the environment
variable ``POLYSPEC_DATA``: ``zoo/`` (weights, ``zoo.json``, ``TRAINING.md``) and
``traces/<device>/`` (one ``*.jsonl`` trace per captured configuration).
"""

from __future__ import annotations

import os
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError

__all__ = ["data_dir", "zoo_dir", "traces_dir", "shown_path", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """The data folder (``$POLYSPEC_DATA`` or ``<repository>/data``)."""
    env = os.environ.get("POLYSPEC_DATA")
    d = Path(env) if env else REPO_ROOT / "data"
    if not d.is_dir():
        raise PolyspecInputError(
            "data", f"data folder not found: {d} (set POLYSPEC_DATA to the folder holding "
            "zoo/ and traces/, or use a checkout of the repository)")
    return d


def zoo_dir() -> Path:
    """The committed zoo weights (``<data>/zoo``)."""
    return data_dir() / "zoo"


def traces_dir(device: str = "cpu") -> Path:
    """The committed traces captured on ``device`` (``<data>/traces/<device>``; may not
    exist yet for a device nothing was captured on)."""
    return data_dir() / "traces" / device


def shown_path(path) -> str:
    """``path`` as a figure or a data file may show it: relative to the repository or to the
    data folder when inside one of them, else its last two components. Never the machine's
    absolute path, so what is drawn does not depend on where the checkout sits."""
    p = Path(path).resolve()
    env = os.environ.get("POLYSPEC_DATA")
    for root, prefix in ((REPO_ROOT, ""), (Path(env).resolve() if env else None, "data")):
        if root is not None and p.is_relative_to(root):
            rel = p.relative_to(root).as_posix()
            return f"{prefix}/{rel}" if prefix else rel
    return "/".join(p.parts[-2:])
