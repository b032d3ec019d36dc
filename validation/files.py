"""Files a user writes or reads: bounded reads of regular files (a config file may hold at
most :data:`MAX_CONFIG_BYTES` bytes; its text is parsed by
:func:`polyspec_theory.core.config_text.mapping_from_text`, read by
``polyspec.configs.read_config``), strict JSON output, writes that an interrupted run cannot
leave half-done, and the one rule for writes (no output over a file the command read).

JSON output follows one rule everywhere (:func:`dump_json`): JSON has no NaN or infinity, so
a non-finite number is written as ``null`` and the object says so under
:data:`NON_FINITE_KEY` (``{"note": ..., "fields": {path: "NaN"}}``).
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from polyspec_theory.core.config_text import (  # the parsing is the theory's (pure)
    MAX_NESTING,
    MAX_YAML_NODES,
    check_json_nesting,
    decode_utf8,
)
from polyspec_theory.errors import PolyspecInputError

__all__ = ["atomic_write_text", "dump_json", "json_default", "to_finite",
           "decode_utf8", "check_json_nesting", "MAX_CONFIG_BYTES", "MAX_NESTING",
           "MAX_YAML_NODES", "NON_FINITE_KEY", "note_read", "reset_reads", "read_regular_bytes",
           "check_output", "write_output"]

MAX_CONFIG_BYTES = 4 * 2**20  # a config or pool file: a few KB in practice
NON_FINITE_KEY = "non_finite"
NON_FINITE_NOTE = ("JSON has no NaN or infinity: these fields were not finite numbers and are "
                   "written as null")


# One rule for writes: no command writes over a file it read. Every reader of user files
# records what it read here (:func:`note_read`); :func:`check_output` refuses an output that
# is one of them (same file after following links: same device and inode). The CLI clears
# the record before each command (:func:`reset_reads`).
_READS: dict[tuple[int, int], str] = {}


def note_read(path) -> None:
    """Record that this command read ``path`` (a file or a folder of traces: a folder's
    regular files are recorded too); a path that cannot be stat-ed is ignored."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    _READS.setdefault((st.st_dev, st.st_ino), str(path))
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError:
            return
        for n in names:
            q = os.path.join(path, n)
            try:
                sq = os.stat(q)
            except (OSError, ValueError):
                continue
            if os.path.isfile(q):
                _READS.setdefault((sq.st_dev, sq.st_ino), q)


def reset_reads() -> None:
    """Forget the files recorded by :func:`note_read` (a new command starts)."""
    _READS.clear()


def read_regular_bytes(path, limit: int, field: str = "file", what: str = "file") -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, read without blocking
    on a FIFO or reading a device forever (only regular files are opened; the read is bounded
    by the bytes actually read, not the reported size); every failure is a one-line
    :class:`PolyspecInputError` naming ``field`` and the file. The read is recorded
    (:func:`note_read`)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise PolyspecInputError(field, f"cannot read {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PolyspecInputError(field, f"is a directory, expected a {what}: {p}")
    if not stat.S_ISREG(st.st_mode):
        raise PolyspecInputError(field, f"not a regular file (a device, FIFO or socket): {p}")
    if st.st_size > limit:
        raise PolyspecInputError(field, f"{p} is {st.st_size:,} bytes; a {what} may have at "
                                 f"most {limit:,}")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped after the stat
                raise PolyspecInputError(field, f"not a regular file: {p}")
            raw = f.read(limit + 1)
    except OSError as e:
        raise PolyspecInputError(field, f"cannot read {p}: {e.strerror or e}") from None
    if len(raw) > limit:
        raise PolyspecInputError(field, f"{p} has more than {limit:,} bytes")
    note_read(p)
    return raw


def atomic_write_text(path, text: str) -> None:
    """Write via a temporary file + rename, so an interrupted run never truncates ``path``."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_output(path, field: str, inputs=()) -> Path:
    """The checks of :func:`write_output` before any work is done (a long run must not end
    in an unwritable path): not a directory, a special file or one of ``inputs``, and a
    parent folder that exists or can be made and can be written."""
    p = Path(path)
    if p.is_dir():
        raise PolyspecInputError(field, f"is a directory, expected a file: {p}")
    if p.exists() and not p.is_file():
        raise PolyspecInputError(field, f"not a regular file: {p}")
    for src in (x for x in inputs if x is not None):
        note_read(src)
    if p.exists():
        try:
            st = p.stat()
        except OSError:
            st = None
        src = st is not None and _READS.get((st.st_dev, st.st_ino))
        if src:
            raise PolyspecInputError(field, f"{p} is the input file {src} this command reads: "
                                     "it would be overwritten; choose another path")
    parent = next((a for a in (p.parent, *p.parent.parents) if a.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PolyspecInputError(field, f"cannot write {p}: {parent} is not a writable folder")
    return p


def check_output_dir(path, field: str) -> Path:
    """An output folder (``--out DIR``) checked before any slow work: an existing path must
    be a folder (not a file: that would be replaced or fail after the work), and the folder
    or its first existing parent must be writable."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PolyspecInputError(field, f"{p} exists and is not a folder; give a folder for "
                                 "the output files")
    parent = next((a for a in (p, *p.parents) if a.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PolyspecInputError(field, f"cannot write into {p}: {parent} is not a writable "
                                 "folder")
    return p


def check_device(device, field: str = "--device") -> str:
    """A torch device name (``cpu``, ``cuda``, ``cuda:N``...) that parses and, for CUDA, is
    available; else a one-line error naming ``field``."""
    import torch

    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError, TypeError):
        raise PolyspecInputError(field, f"{device!r} is not a device (cpu, cuda or cuda:N)"
                                 ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PolyspecInputError(field, "CUDA requested but not available")
    if dev.type not in ("cpu", "cuda"):
        raise PolyspecInputError(field, f"{device!r}: only cpu and cuda are supported")
    return str(device)


def write_output(path, text: str, field: str, inputs=()) -> None:
    """Write a report the user asked for (``--out``, ``--write-config``...) atomically, or
    raise a one-line :class:`PolyspecInputError` naming ``field``: never over one of the
    ``inputs`` (the file being read), a directory or a special file; a path that cannot be
    written (read-only, under /proc, a missing parent that cannot be made) is an input error."""
    p = check_output(path, field, inputs)
    try:
        atomic_write_bytes(p, text.encode("utf-8"))
    except OSError as e:
        raise PolyspecInputError(field, f"cannot write {p}: {e.strerror or e}") from None


def json_default(o):
    """``json.dumps`` fallback for numpy scalars and arrays."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _path(base: str, key) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def to_finite(obj, path: str = "", found: dict | None = None):
    """A copy of ``obj`` (dicts, lists, tuples, numpy values) with every non-finite float
    replaced by ``None``; ``found`` collects ``{path: "NaN" | "Infinity" | "-Infinity"}``."""
    if found is None:
        found = {}
    if isinstance(obj, dict):
        return {(k if isinstance(k, (str, int, float, bool)) or k is None else str(k)):
                to_finite(v, _path(path, k), found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_finite(v, _path(path, i), found) for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return to_finite(obj.tolist(), path, found)
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        if not math.isfinite(v):
            found[path or "value"] = "NaN" if math.isnan(v) else ("Infinity" if v > 0
                                                                   else "-Infinity")
            return None
        return v
    return obj


def _with_note(obj):
    found: dict = {}
    out = to_finite(obj, "", found)
    if found and isinstance(out, dict):
        out[NON_FINITE_KEY] = {"note": NON_FINITE_NOTE, "fields": found}
    return out


def dump_json(obj) -> str:
    """Indented, strictly valid JSON (numpy values converted). Non-finite numbers become
    ``null`` and the object lists them under :data:`NON_FINITE_KEY`; for a top-level list,
    each element object carries its own note."""
    if isinstance(obj, (list, tuple)):
        out = [_with_note(v) if isinstance(v, dict) else to_finite(v) for v in obj]
    else:
        out = _with_note(obj)
    return json.dumps(out, indent=2, sort_keys=False, default=json_default, allow_nan=False)
