"""The GPU-table row format: one JSON object per measured (or to-be-forecast) configuration.

A file is ``{"header": {...}, "rows": [...]}`` or a bare list of rows (the shared tables'
format; README of the tables: row fields, each method's policy). :func:`detect` says whether a
parsed file is one; :func:`read` returns its rows as :class:`Row` objects holding the
**settings only** -- every measured or derived field (throughputs, times, token counts,
``mat``, ``tokens_per_step``, ``speedup``) is dropped on reading, so a forecast cannot use
them; :func:`read_measured` keeps them (acceptance logs, validation). A row that cannot be read
is returned with its reason (:class:`Refused`), by id, and the others are still read.

Methods (``method``): ``pearl`` (nano-PEARL's parallel draft/verify), ``ar`` (autoregressive),
``sd-sync`` (SSD draft-then-verify), ``ssd-async`` (SSD's asynchronous speculation cache),
``eagle`` (also ``eagle3``, ``eagle-3``: SGLang EAGLE trees and chains; the row carries its
``accept_length``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError

__all__ = ["Row", "Refused", "detect", "read", "read_measured", "parse_row", "MEASURED",
           "METHODS", "NAME"]

NAME = "gpu-table-rows"
METHODS = {"pearl": "pearl", "ar": "ar", "sd-sync": "sd-sync", "ssd-async": "ssd-async",
           "eagle": "eagle", "eagle3": "eagle", "eagle-3": "eagle"}
MEASURED = frozenset({
    "ar_tok_s", "sd_tok_s", "speedup", "speedup_printed", "ar_num_tokens", "ar_time_s",
    "sd_num_tokens", "sd_time_s", "mat", "tokens_per_step", "decode_tok_s", "ar_tok_s_b1",
    "decode_tok_s_approx", "avg_draft_step_ms",
})
MAX_FILE_BYTES = 64 << 20
MAX_ROWS = 100_000
# the acceptance a row itself carries, for methods whose rows carry it (README of the tables)
ROW_ACCEPTANCE = {"eagle": "accept_length"}


@dataclass(frozen=True)
class Refused:
    """A row that was not read or not forecast, with the reason."""

    id: str
    reason: str

    def to_dict(self) -> dict:
        return {"id": self.id, "reason": self.reason}


@dataclass(frozen=True)
class Row:
    """One configuration's settings (and, from :func:`read_measured`, its measurements)."""

    id: str
    gpu: str
    engine: str
    method: str
    target: str
    drafter: str | None
    tp_target: int | None
    tp_drafter: int | None
    batch: int
    dataset: str | None
    prompt_len: int
    settings: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)

    def get(self, key, default=None):
        return self.settings.get(key, default)

    @property
    def pair(self) -> tuple:
        """``(target, drafter)`` as Hugging Face ids where the row gives them."""
        return (_model_id(self.settings, "target"), _model_id(self.settings, "drafter"))


def _model_id(d: dict, which: str):
    hf = d.get(f"{which}_hf")
    return hf if isinstance(hf, str) and hf else d.get(which)


def _field(rid, name):
    return f"row {rid}: {name}"


def _int(d, rid, name, *, low=1, high=1 << 20, optional=False):
    v = d.get(name)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or int(v) != v or not low <= v <= high:
        raise PolyspecInputError(_field(rid, name), f"must be an integer in [{low}, {high}], "
                                 f"got {v!r}")
    return int(v)


def _str(d, rid, name, *, optional=False):
    v = d.get(name)
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v.strip():
        raise PolyspecInputError(_field(rid, name), f"must be a non-empty string, got {v!r}")
    return v.strip()


def _num(d, rid, name, *, low=0.0, high=1e9, optional=False):
    v = d.get(name)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not low <= v <= high:
        raise PolyspecInputError(_field(rid, name), f"must be a number in [{low:g}, {high:g}], "
                                 f"got {v!r}")
    return float(v)


def parse_row(d, index: int = 0, *, keep_measured: bool = False) -> Row:
    """One row, its settings checked (a one-line error naming the row id and field)."""
    if not isinstance(d, dict):
        raise PolyspecInputError(f"rows[{index}]", "must be an object")
    rid = d.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise PolyspecInputError(f"rows[{index}].id", f"must be a non-empty string, got "
                                 f"{rid!r}")
    rid = rid.strip()
    method = _str(d, rid, "method").lower()
    if method not in METHODS:
        raise PolyspecInputError(_field(rid, "method"), f"unknown method {method!r}; known: "
                                 f"{', '.join(sorted(METHODS))}")
    method = METHODS[method]
    gpu = _str(d, rid, "gpu")
    engine = _str(d, rid, "engine")
    target = _str(d, rid, "target")
    drafter = _str(d, rid, "drafter", optional=method == "ar")
    batch = _int(d, rid, "batch", high=4096)
    tp_t = _int(d, rid, "tp_target", high=64, optional=True)
    tp_d = _int(d, rid, "tp_drafter", high=64, optional=True)
    prompt = _int(d, rid, "prompt_len", high=1 << 20)
    temp = d.get("temperature", 0)
    if temp not in (0, 0.0, None):
        raise PolyspecInputError(_field(rid, "temperature"), f"only greedy rows (0) are "
                                 f"forecast, got {temp!r}")
    settings = {k: v for k, v in d.items() if k not in MEASURED}
    if method == "pearl":
        _int(settings, rid, "steps", high=1 << 20)
        _int(settings, rid, "ar_gen_len", high=1 << 20)
        _int(settings, rid, "gamma", high=4096, optional=True)
    elif method in ("ar", "sd-sync", "ssd-async"):
        _int(settings, rid, "output_len", high=1 << 20)
        if method != "ar":
            _int(settings, rid, "k", high=64)
        if method == "ssd-async":
            _int(settings, rid, "fan_out", high=64)
    elif method == "eagle":
        _int(settings, rid, "speculative_num_steps", high=64)
        _int(settings, rid, "speculative_eagle_topk", high=64)
        _int(settings, rid, "speculative_num_draft_tokens", high=4096)
        shape = _str(settings, rid, "draft_shape")
        if shape not in ("tree", "chain"):
            raise PolyspecInputError(_field(rid, "draft_shape"), f"must be tree or chain, got "
                                     f"{shape!r}")
        _num(d, rid, "accept_length", low=1.0, high=4096.0)
        settings["accept_length"] = float(d["accept_length"])
    measured = {k: d[k] for k in MEASURED if k in d} if keep_measured else {}
    return Row(id=rid, gpu=gpu, engine=engine, method=method, target=target, drafter=drafter,
               tp_target=tp_t, tp_drafter=tp_d, batch=batch,
               dataset=d.get("dataset") if isinstance(d.get("dataset"), str) else None,
               prompt_len=prompt, settings=settings, measured=measured)


def detect(obj) -> bool:
    """Whether a parsed JSON document is a GPU-table row file."""
    rows = obj.get("rows") if isinstance(obj, dict) else obj
    return (isinstance(rows, list) and bool(rows) and isinstance(rows[0], dict)
            and {"id", "gpu", "method"} <= set(rows[0]))


def _load(path, field_name: str):
    from validation.files import check_json_nesting, decode_utf8, read_regular_bytes

    p = Path(path)
    if not p.exists():
        raise PolyspecInputError(field_name, f"file not found: {p}")
    text = decode_utf8(read_regular_bytes(p, MAX_FILE_BYTES, field_name, "row file"), p,
                       field_name)
    check_json_nesting(text, p)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise PolyspecInputError(field_name, f"{path}: not JSON (line {e.lineno}: "
                                 f"{e.msg})") from None
    rows = obj.get("rows") if isinstance(obj, dict) else obj
    if not isinstance(rows, list):
        raise PolyspecInputError(field_name, f"{path}: expected a list of rows or "
                                 "{\"rows\": [...]}")
    if len(rows) > MAX_ROWS:
        raise PolyspecInputError(field_name, f"{path}: more than {MAX_ROWS} rows")
    return rows


def _read(path, field_name: str, keep_measured: bool):
    good, bad, seen = [], [], set()
    for i, d in enumerate(_load(path, field_name)):
        rid = d.get("id") if isinstance(d, dict) else None
        rid = rid if isinstance(rid, str) and rid.strip() else f"rows[{i}]"
        if rid in seen:
            bad.append(Refused(rid, "duplicate id"))
            continue
        seen.add(rid)
        try:
            good.append(parse_row(d, i, keep_measured=keep_measured))
        except PolyspecInputError as e:
            bad.append(Refused(rid, str(e).removeprefix(f"row {rid}: ")))
    return good, bad


def read(path, field_name: str = "--rows") -> tuple[list[Row], list[Refused]]:
    """The rows' settings (measured fields dropped) and the rows refused, by id."""
    return _read(path, field_name, keep_measured=False)


def read_measured(path, field_name: str = "--acceptance-from") -> tuple[list[Row],
                                                                         list[Refused]]:
    """Rows with their measured fields (acceptance logs; validation)."""
    return _read(path, field_name, keep_measured=True)
