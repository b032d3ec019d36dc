"""Results kept per process under their inputs: a bounded store (:class:`Kept`) and the
content key of arrays (:func:`content_key`). A kept result is the computation's own (the
computations kept this way are deterministic and read nothing but their arguments)."""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["Kept", "content_key"]


class Kept(dict):
    """A dict of results that holds at most ``size``: when the ones to keep would pass it, it
    is emptied first (a run asks again for what it asked last)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = int(size)

    def keep(self, items: dict) -> None:
        """Keep ``items`` (emptying the store first if they would pass ``size``)."""
        if len(self) + len(items) > self.size:
            self.clear()
        self.update(items)


def content_key(*arrays) -> bytes | None:
    """SHA-256 of the arrays' dtypes, shapes and bytes, in order (``None`` entries count as
    such); ``None`` when one holds Python objects (its bytes are addresses, not values)."""
    h = hashlib.sha256()
    for x in arrays:
        if x is None:
            h.update(b"None;")
            continue
        x = np.asarray(x)
        if x.dtype.hasobject:
            return None
        h.update(f"{x.dtype.str}{x.shape};".encode())
        h.update(x.tobytes())
    return h.digest()
