"""Config text into a mapping (pure: text in, ``dict`` out, no I/O): JSON or YAML, bounded
before it is parsed: UTF-8, at most :data:`MAX_NESTING` levels and (YAML) at most
:data:`MAX_YAML_NODES` values once its aliases are followed, so neither a deep file nor an
anchor/alias bomb can exhaust the stack or the memory; a key given twice is refused. The
readers of files (``polyspec.configs.read_config``) hand their text here; the mapping then
goes to :meth:`polyspec_theory.core.config.Cascade.from_config` (or a pool's
``from_config``).
"""

from __future__ import annotations

import json
import re

from polyspec_theory.errors import PolyspecInputError

__all__ = ["mapping_from_text", "decode_utf8", "check_json_nesting", "MAX_NESTING",
           "MAX_YAML_NODES"]

MAX_NESTING = 64  # a valid config nests 4 levels
MAX_YAML_NODES = 100_000  # values after following aliases


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise PolyspecInputError(str(k), "appears twice in the same object (duplicate key)")
        seen[k] = v
    return seen


def _line_col(data, pos: int) -> tuple[int, int]:
    nl = b"\n" if isinstance(data, bytes) else "\n"
    line = data.count(nl, 0, pos) + 1
    return line, pos - (data.rfind(nl, 0, pos) + 1) + 1


def decode_utf8(raw: bytes, where, field: str = "config") -> str:
    """``raw`` as text (a UTF-8 byte-order mark is dropped); bytes that are not UTF-8 are a
    :class:`PolyspecInputError` naming the file, line and column."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _line_col(raw, e.start)
        raise PolyspecInputError(
            field, f"{where} is not UTF-8 text (line {line}, column {col}: byte "
            f"0x{raw[e.start]:02x}); save it as UTF-8") from None


_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def check_json_nesting(text: str, where, limit: int = MAX_NESTING,
                       field: str = "config") -> None:
    """Refuse JSON text whose arrays/objects nest deeper than ``limit``, before parsing it
    (the parser is recursive: a deep file would exhaust the stack)."""
    if text.count("[") + text.count("{") <= limit:
        return
    bare = _JSON_STRING.sub('""', text)  # brackets inside strings do not nest
    depth = 0
    for m in _BRACKET.finditer(bare):
        if m.group() in "[{":
            depth += 1
            if depth > limit:
                line, col = _line_col(bare, m.start())
                raise PolyspecInputError(
                    field, f"{where} nests more than {limit} levels deep (line {line}, "
                    f"column {col}); a valid file nests a few levels")
        else:
            depth -= 1


def _yaml_loader(where):
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """A SafeLoader that bounds nesting while composing, the size of the document once
        aliases are followed (before constructing anything), and refuses duplicate keys."""

        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_NESTING:
                    mark = self.peek_event().start_mark
                    raise PolyspecInputError(
                        "config", f"{where} nests more than {MAX_NESTING} levels deep (line "
                        f"{mark.line + 1})")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_document(self, node):
            _check_expansion(node, where)
            return super().construct_document(node)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for k, _ in node.value:
                key = self.construct_object(k, deep=deep)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # unhashable key: the base class reports it
                if dup:
                    raise PolyspecInputError(
                        str(key), f"appears twice in the same mapping (duplicate key, line "
                        f"{k.start_mark.line + 1})")
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def _check_expansion(root, where) -> None:
    """Size and depth of a composed YAML graph with every alias expanded, computed without
    expanding it (memoized over shared nodes); a cycle (recursive alias) is refused."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order DFS (no recursion on adversarial input)
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in kids)
            depth[key] = 1 + max((depth[id(c)] for c in kids), default=0)
            if size[key] > MAX_YAML_NODES:
                raise PolyspecInputError(
                    "config", f"{where} expands to more than {MAX_YAML_NODES} values once its "
                    f"aliases are followed (line {node.start_mark.line + 1}); an anchor/alias "
                    "bomb?")
            if depth[key] > MAX_NESTING:
                raise PolyspecInputError(
                    "config", f"{where} nests more than {MAX_NESTING} levels deep once its "
                    f"aliases are followed (line {node.start_mark.line + 1})")
            continue
        if key in size:
            continue
        if key in on_path:
            raise PolyspecInputError(
                "config", f"{where}: a recursive alias (an anchor used inside itself, line "
                f"{node.start_mark.line + 1})")
        on_path.add(key)
        stack.append((node, True))
        for c in _children(node):
            if id(c) not in size:
                stack.append((c, False))


def _children(node):
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def mapping_from_text(text: str, where, *, yaml: bool = False, field: str = "config") -> dict:
    """The mapping a config's ``text`` holds (``where`` names it in errors; ``yaml``: parse
    YAML, else JSON); errors name ``field``, the file and, where there is one, the line."""
    if not text.strip():
        raise PolyspecInputError(field, f"file is empty: {where}")
    if yaml:
        import yaml as pyyaml

        try:
            data = pyyaml.load(text, Loader=_yaml_loader(where))  # a SafeLoader subclass
        except pyyaml.YAMLError as e:
            msg = " ".join(str(e).split())
            raise PolyspecInputError(field, f"invalid YAML in {where}: {msg}") from None
        except RecursionError:
            raise PolyspecInputError(field, f"{where} nests too deeply") from None
    else:
        check_json_nesting(text, where, field=field)
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise PolyspecInputError(
                field, f"invalid JSON in {where} (line {e.lineno}, column {e.colno}): {e.msg}"
            ) from None
        except (ValueError, RecursionError) as e:  # e.g. an integer of > 4300 digits
            raise PolyspecInputError(field, f"invalid JSON in {where}: {e}") from None
    if not isinstance(data, dict):
        raise PolyspecInputError(field, f"top level of {where} must be an object/mapping")
    return data
