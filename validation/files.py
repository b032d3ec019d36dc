"""Files a user writes or reads: config files (JSON or YAML) into mappings, strict JSON output,
and writes that an interrupted run cannot leave half-done."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from polyspec_theory._input import PolyspecInputError

__all__ = ["read_mapping", "atomic_write_text", "dump_json", "json_default"]


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise PolyspecInputError(str(k), "appears twice in the same object (duplicate key)")
        seen[k] = v
    return seen


def read_mapping(path) -> dict:
    """Read a JSON or YAML file (by extension; JSON tried first otherwise) into a dict."""
    p = Path(path)
    if not p.exists():
        raise PolyspecInputError("config", f"file not found: {p}")
    if p.is_dir():
        raise PolyspecInputError("config", f"is a directory, expected a file: {p}")
    text = p.read_text(encoding="utf-8")
    if not text.strip():
        raise PolyspecInputError("config", f"file is empty: {p}")
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        class _StrictLoader(yaml.SafeLoader):
            def construct_mapping(self, node, deep=False):
                keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
                for k in keys:
                    if keys.count(k) > 1:
                        raise PolyspecInputError(
                            str(k), "appears twice in the same mapping (duplicate key)")
                return super().construct_mapping(node, deep=deep)

        try:
            data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
        except yaml.YAMLError as e:
            raise PolyspecInputError("config", f"invalid YAML in {p}: {e}") from None
    else:
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise PolyspecInputError(
                "config", f"invalid JSON in {p} (line {e.lineno}, column {e.colno}): {e.msg}"
            ) from None
    if not isinstance(data, dict):
        raise PolyspecInputError("config", f"top level of {p} must be an object/mapping")
    return data


def atomic_write_text(path, text: str) -> None:
    """Write via a temporary file + rename, so an interrupted run never truncates ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_default(o):
    """``json.dumps`` fallback for numpy scalars and arrays."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def dump_json(obj) -> str:
    """Indented JSON text (numpy values converted)."""
    return json.dumps(obj, indent=2, sort_keys=False, default=json_default)
