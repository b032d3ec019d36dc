"""Config files (JSON or YAML) into mappings: the thin reader of the command line and the
API. The text is parsed by the theory (:func:`polyspec_theory.core.config_text.
mapping_from_text`, bounded before parsing) and the mapping goes to the theory's
``from_config``; the bytes are read by :func:`validation.files.read_regular_bytes` (a bounded
read of a regular file, recorded for the rule that no command writes over a file it read)."""

from __future__ import annotations

from pathlib import Path

from polyspec_theory.core.config_text import decode_utf8, mapping_from_text
from polyspec_theory.errors import PolyspecInputError

__all__ = ["read_config"]


def read_config(path, field: str = "config") -> dict:
    """The mapping in the JSON or YAML file ``path`` (YAML by its extension); errors name
    ``field``, the file and, where there is one, the line."""
    from validation.files import MAX_CONFIG_BYTES, read_regular_bytes

    p = Path(path)
    if not p.exists():
        raise PolyspecInputError(field, f"file not found: {p}")
    raw = read_regular_bytes(p, MAX_CONFIG_BYTES, field, "config file")
    return mapping_from_text(decode_utf8(raw, p, field), p,
                             yaml=p.suffix.lower() in (".yaml", ".yml"), field=field)
