"""The zoo's corpus: the CPython standard library's ``.py`` sources on this machine, as bytes.

Files are listed in sorted order (relative paths), excluding site-packages and the test /
demo folders; each file goes to the validation split iff the first byte of the SHA-1 of its
relative path is < 13 (about 5 %), else to train. Files are joined with a NUL byte
(token 0) as separator. Same interpreter -> same bytes; ``corpus_digest`` identifies them.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["stdlib_files", "load_split", "split_files", "corpus_digest", "SEPARATOR",
           "EXCLUDED_DIRS"]

SEPARATOR = 0
EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "turtledemo",
        "__pycache__",
        "ensurepip",
    }
)
VAL_CUTOFF = 13  # first SHA-1 byte < 13 -> validation (13/256 ≈ 5.1 %)


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root=None) -> list[tuple[str, Path]]:
    """Sorted (relative posix path, absolute path) of the corpus files."""
    root = Path(root) if root is not None else _stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for f in filenames:
            if f.endswith(".py"):
                p = Path(dirpath) / f
                out.append((p.relative_to(root).as_posix(), p))
    out.sort()
    return out


def _is_val(rel: str) -> bool:
    return hashlib.sha1(rel.encode()).digest()[0] < VAL_CUTOFF


@lru_cache(maxsize=4)
def _splits(root: str | None):
    parts = {"train": [], "val": []}
    names = {"train": [], "val": []}
    for rel, p in stdlib_files(root):
        split = "val" if _is_val(rel) else "train"
        data = p.read_bytes().replace(b"\x00", b"")
        parts[split].append(data)
        names[split].append(rel)
    out = {}
    for split, chunks in parts.items():
        joined = bytes([SEPARATOR]).join(chunks)
        arr = np.frombuffer(joined, dtype=np.uint8).copy()
        arr.setflags(write=False)
        out[split] = (arr, tuple(names[split]))
    return out


def load_split(split: str, root=None) -> np.ndarray:
    """The ``train`` or ``val`` split as a read-only uint8 array of byte tokens."""
    if split not in ("train", "val"):
        raise ValueError(f"split: must be 'train' or 'val', got {split!r}")
    return _splits(None if root is None else str(root))[split][0]


def split_files(split: str, root=None) -> tuple[str, ...]:
    """Relative paths of the files in a split, in corpus order."""
    return _splits(None if root is None else str(root))[split][1]


def corpus_digest(root=None) -> str:
    """SHA-256 (first 16 hex digits) of train and val bytes: identifies the corpus."""
    h = hashlib.sha256()
    for s in ("train", "val"):
        h.update(load_split(s, root).tobytes())
    return h.hexdigest()[:16]
