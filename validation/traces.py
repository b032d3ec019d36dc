"""Trace files (schema in :mod:`validation.schema`): an append-and-flush writer and a
validating reader.

:func:`read_records` parses and checks a file record by record (errors name the file, the
line and the field); :func:`read_trace` turns it into a :class:`validation.dataset.Capture`;
:func:`read_traces` reads every ``*.jsonl`` file of a directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .dataset import Capture
from .files import json_default
from .schema import (
    BATCH_RECORD_TYPES,
    RECORD_FIELDS,
    ROUND_OPTIONAL,
    SCHEMA,
    SCHEMA_VERSION,
    Round,
    StructuredRound,
    TraceError,
    check_round_extras,
    is_batch_header,
)

__all__ = ["TraceWriter", "TraceRecords", "read_records", "read_trace", "read_traces",
           "is_batched_file"]


class TraceWriter:
    """Appends records to a JSON-lines trace, flushing after every record (the data is then
    in the OS, so a killed capture loses no finished record; no fsync, which would cost
    milliseconds inside the timed loop)."""

    def __init__(self, path, header: dict | None = None, *, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append:
            _drop_partial_tail(self.path)
            self._f = open(self.path, "a", encoding="utf-8")
        else:
            if header is None:
                raise ValueError("a new trace needs a header")
            self._f = open(self.path, "w", encoding="utf-8")
            self.write({"type": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                        **header})

    def write(self, record) -> None:
        """Write one record: a mapping with a ``type``, a :class:`Round` or a
        :class:`StructuredRound`."""
        if isinstance(record, (Round, StructuredRound)):
            record = record.to_record()
        self._f.write(json.dumps(record, separators=(",", ":"), default=json_default) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _drop_partial_tail(path: Path) -> None:
    """Cut an unterminated last line (a write interrupted mid-line)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)


@dataclass
class TraceRecords:
    """A parsed trace: the header and the records that count (records of prompts interrupted
    before a ``resume`` are dropped and counted), in file order, each with its line."""

    path: str
    header: dict
    records: list[dict]
    lines: list[int]
    complete: bool
    n_discarded: int = 0
    truncated_tail: bool = False
    notes: list[str] = field(default_factory=list)

    def of_type(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]


def _fail(path, lineno, msg) -> TraceError:
    return TraceError(f"{path}: line {lineno}: {msg}")


def read_records(path, *, allow_truncated: bool = False) -> TraceRecords:
    """Parse and check a trace file. A last line that is cut (unterminated, invalid JSON)
    raises unless ``allow_truncated``, in which case it is skipped and ``truncated_tail`` is
    set. Any other bad line raises naming its number."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    raw = p.read_bytes()
    if not raw.strip():
        raise TraceError(f"{p}: file is empty (line 1: expected a polyspec-trace header)")
    lines = raw.split(b"\n")
    ends_clean = raw.endswith(b"\n")
    if ends_clean:
        lines = lines[:-1]
    parsed = []
    truncated = False
    for i, b in enumerate(lines, start=1):
        last = i == len(lines)
        try:
            rec = json.loads(b.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if last and not ends_clean:
                if allow_truncated and i > 1:
                    truncated = True
                    break
                raise _fail(p, i, "truncated last line (the capture was interrupted?); "
                            "pass allow_truncated=True / --allow-truncated to skip it, or "
                            "continue the capture with --resume") from None
            if i == 1:
                raise _fail(p, 1, "not a polyspec trace (expected a JSON header line with "
                            f"schema '{SCHEMA}')") from None
            raise _fail(p, i, f"invalid JSON: {e}") from None
        if not isinstance(rec, dict) or "type" not in rec:
            if i == 1:
                raise _fail(p, 1, f"not a polyspec trace (expected a header with schema "
                            f"'{SCHEMA}')")
            raise _fail(p, i, "record must be a JSON object with a 'type' field")
        parsed.append((i, rec))
    if not parsed:
        raise TraceError(f"{p}: line 1: no complete record")
    _, header = parsed[0]
    if header.get("type") != "header" or header.get("schema") != SCHEMA:
        raise _fail(p, 1, f"not a polyspec trace (expected a header with schema '{SCHEMA}', "
                    f"got type={header.get('type')!r} schema={header.get('schema')!r})")
    if header.get("schema_version") != SCHEMA_VERSION:
        raise _fail(p, 1, f"unsupported schema_version {header.get('schema_version')!r} "
                    f"(this reader knows {SCHEMA_VERSION})")
    _check_fields(p, 1, header)
    n_levels = len(header["cascade"]["models"])
    batched = is_batch_header(header)
    kept, discarded = [], 0
    for i, rec in parsed[1:]:
        t = rec.get("type")
        if t not in RECORD_FIELDS or t == "header":
            raise _fail(p, i, f"unknown record type {t!r} (known: "
                        f"{sorted(k for k in RECORD_FIELDS if k != 'header')})")
        _check_fields(p, i, rec)
        if batched != (t in BATCH_RECORD_TYPES) and t not in ("resume", "end"):
            kind = "batched" if batched else "single-stream"
            raise _fail(p, i, f"record type {t!r} does not belong in a {kind} trace")
        if t == "resume":
            nxt = int(rec["next_prompt"])
            nxt_d = rec.get("next_decode")
            before = len(kept)
            kept = [(j, r) for j, r in kept if ("prompt" not in r or r["prompt"] < nxt)
                    and (nxt_d is None or "decode" not in r or r["decode"] < nxt_d)]
            discarded += before - len(kept)
            continue
        if batched:
            from .batch_dataset import check_batch_record

            msg = check_batch_record(rec, header)
            if msg:
                raise _fail(p, i, msg)
        if t == "round":
            lv = rec["level"]
            if lv not in range(1, n_levels):
                raise _fail(p, i, f"level {lv} out of range 1..{n_levels - 1}")
            if not 0 <= rec["A"] <= rec["G"] or rec["L"] != rec["A"] + 1:
                raise _fail(p, i, f"inconsistent round (G={rec['G']}, A={rec['A']}, "
                            f"L={rec['L']}): need 0 <= A <= G and L = A + 1")
            if any(k in rec for k in ROUND_OPTIONAL):
                bad = check_round_extras(rec)
                if bad is not None:
                    raise _fail(p, i, f"round: {bad}")
        kept.append((i, rec))
    return TraceRecords(path=str(p), header=header, records=[r for _, r in kept],
                        lines=[i for i, _ in kept],
                        complete=any(r["type"] == "end" for _, r in kept),
                        n_discarded=discarded, truncated_tail=truncated)


def read_trace(path, *, allow_truncated: bool = False) -> Capture:
    """The :class:`Capture` stored in one trace file (finished prompts only; notes say what
    was skipped)."""
    tr = read_records(path, allow_truncated=allow_truncated)
    name = Path(tr.path).name
    if is_batch_header(tr.header):
        raise TraceError(f"{tr.path}: a batched trace (header 'batch'): read it with "
                         "validation.batch_dataset.read_batch_trace (polyspec validate does)")
    notes = []
    if tr.truncated_tail:
        notes.append(f"{name}: truncated last line skipped (--allow-truncated)")
    if tr.n_discarded:
        notes.append(f"{name}: {tr.n_discarded} record(s) of an interrupted attempt discarded "
                     "(resume)")
    return Capture.from_records(tr.header, tr.records, path=tr.path, complete=tr.complete,
                                notes=notes)


def read_traces(directory, *, allow_truncated: bool = False) -> list[Capture]:
    """Every single-stream ``*.jsonl`` trace of a directory, sorted by file name (batched
    traces, read by :func:`validation.batch_dataset.read_batch_traces`, are skipped).
    Configuration names are made unique (a duplicate is renamed after its file)."""
    d = Path(directory)
    if not d.exists():
        raise TraceError(f"{d}: no such directory")
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    files = sorted(d.glob("*.jsonl"))
    if not files:
        raise TraceError(f"{d}: no *.jsonl trace files")
    batched = [f for f in files if is_batched_file(f)]
    files = [f for f in files if f not in batched]
    if not files:
        raise TraceError(f"{d}: no single-stream traces ({len(batched)} batched trace(s): "
                         "polyspec validate reads those per batch size)")
    caps, seen = [], set()
    for f in files:
        cap = read_trace(f, allow_truncated=allow_truncated)
        if cap.name in seen:
            cap = cap.renamed(f.stem)
        seen.add(cap.name)
        caps.append(cap)
    return caps


def is_batched_file(path) -> bool:
    """Whether a trace file is a batched capture (its first line has a ``batch`` object);
    ``False`` for anything unreadable (the full reader reports those)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = json.loads(f.readline())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(head, dict) and is_batch_header(head)


def _check_fields(p, i, rec):
    missing = [k for k in RECORD_FIELDS[rec["type"]] if k not in rec]
    if missing:
        raise _fail(p, i, f"{rec['type']} record misses field(s) {missing}")
