"""Trace files (schema in :mod:`validation.traces.schema`): an append-and-flush writer and a
validating reader.

:func:`read_records` parses and checks a file record by record (errors name the file, the
line and the field); :func:`read_trace` turns it into a :class:`validation.traces.dataset.Capture`;
:func:`read_traces` reads every ``*.jsonl`` file of a directory.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError
from validation.files import check_json_nesting, json_default
from validation.traces.checks import RecordChecker, all_record_fields, record_owner
from validation.traces.dataset import Capture
from validation.traces.schema import (
    RECORD_FIELDS,
    ROUND_OPTIONAL,
    SCHEMA,
    SCHEMA_VERSION,
    FieldError,
    RecordError,
    Round,
    StructuredRound,
    TraceError,
    check_round_extras,
    is_batch_header,
    shown,
)

__all__ = ["TraceWriter", "TraceRecords", "read_records", "read_trace", "read_traces",
           "is_batched_file", "capture_of", "own_reader", "cached_read"]


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
        try:
            line = json.dumps(record, separators=(",", ":"), default=json_default,
                              allow_nan=False)
        except ValueError:
            raise TraceError(f"{self.path}: a {record.get('type')!r} record holds a non-finite "
                             "number (JSON has no NaN or infinity); nothing was written") from None
        self._f.write(line + "\n")
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
    digest: str = ""  # sha256 of every line after the header: what was measured

    def of_type(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]

    def skipped_notes(self) -> list[str]:
        """Notes on what reading left out: a cut last line, an interrupted attempt's
        records (the capture built from these records starts with them)."""
        name = Path(self.path).name
        notes = []
        if self.truncated_tail:
            notes.append(f"{name}: truncated last line skipped (--allow-truncated)")
        if self.n_discarded:
            notes.append(f"{name}: {self.n_discarded} record(s) of an interrupted attempt "
                         "discarded (resume)")
        return notes


def _fail(path, lineno, msg) -> TraceError:
    return TraceError(f"{path}: line {lineno}: {msg}")


MAX_TRACE_BYTES = 2**31  # 2 GiB: a long capture is tens of MB
MAX_RECORD_NESTING = 16  # a valid record nests 3 levels


_SCAN = json.JSONDecoder().scan_once  # json.loads's own scanner, without its wrappers


def _parse_line(b: bytes):
    """The JSON value of one line, as ``json.loads`` gives it (or its error): a line that is
    one value from its first character to its last is scanned directly, any other (spaces
    around it, a bad line) goes through ``json.loads``."""
    text = b.decode("utf-8")
    if b.count(b"[") + b.count(b"{") > MAX_RECORD_NESTING:
        check_json_nesting(text, "record", MAX_RECORD_NESTING, field="trace")
    try:
        rec, end = _SCAN(text, 0)
        if end == len(text):
            return rec
    except (StopIteration, ValueError):
        pass
    return json.loads(text)


def read_records(path, *, allow_truncated: bool = False) -> TraceRecords:
    """Parse and check a trace file. A last line that is cut (unterminated, invalid JSON)
    raises unless ``allow_truncated``, in which case it is skipped and ``truncated_tail`` is
    set. Any other bad line raises naming its number and field: every record is checked
    against the schema and its header, and the records of each finished prompt against each
    other (:class:`validation.traces.checks.RecordChecker`, with the trace's scheme)."""
    p, raw = _read_bytes(path)
    lines, parsed, truncated = _parse_lines(p, raw, allow_truncated)
    header, checker = _header(p, parsed)
    kept, discarded = _check_records(p, checker, parsed[1:])
    try:
        checker.finish(kept)
    except RecordError as e:
        raise _fail(p, e.line, e.message) from None
    return TraceRecords(path=str(p), header=header, records=[r for _, r in kept],
                        lines=[i for i, _ in kept],
                        complete=any(r["type"] == "end" for _, r in reversed(kept)),
                        n_discarded=discarded, truncated_tail=truncated,
                        digest=hashlib.sha256(raw[len(lines[0]):]).hexdigest())


def _read_bytes(path) -> tuple[Path, bytes]:
    """The file's bytes, read bounded (only a regular file, at most MAX_TRACE_BYTES)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such trace file")
    if not p.is_file():
        raise TraceError(f"{p}: not a regular file (a directory, device, FIFO or socket)")
    size = p.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise TraceError(f"{p}: {size:,} bytes, more than a trace may have "
                         f"({MAX_TRACE_BYTES:,}); split the capture")
    try:  # bounded by the bytes actually read, not the reported size
        with open(p, "rb") as f:
            raw = f.read(MAX_TRACE_BYTES + 1)
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(f"{p}: more than a trace may have ({MAX_TRACE_BYTES:,} bytes); split "
                         "the capture")
    from validation.files import note_read

    note_read(p)
    if not raw or raw.isspace():  # (no copy of the bytes, as strip() would make)
        raise TraceError(f"{p}: file is empty (line 1: expected a polyspec-trace header)")
    return p, raw


def _parse_lines(p: Path, raw: bytes, allow_truncated: bool):
    """(lines, ``(line number, record)`` pairs, whether a cut last line was skipped)."""
    lines = raw.split(b"\n")
    ends_clean = raw.endswith(b"\n")
    if ends_clean:
        lines = lines[:-1]
    parsed = []
    truncated = False
    for i, b in enumerate(lines, start=1):
        last = i == len(lines)
        try:
            rec = _parse_line(b)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
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
            if isinstance(e, UnicodeDecodeError):
                msg = "not UTF-8 text"
            elif isinstance(e, (RecursionError, PolyspecInputError)):
                msg = f"record nests more than {MAX_RECORD_NESTING} levels deep"
            else:
                msg = f"invalid JSON: {e}"
            raise _fail(p, i, msg) from None
        if not isinstance(rec, dict) or "type" not in rec:
            if i == 1:
                raise _fail(p, 1, f"not a polyspec trace (expected a header with schema "
                            f"'{SCHEMA}')")
            raise _fail(p, i, "record must be a JSON object with a 'type' field")
        parsed.append((i, rec))
    if not parsed:
        raise TraceError(f"{p}: line 1: no complete record")
    return lines, parsed, truncated


def _header(p: Path, parsed):
    """The header record, checked, and the checker of the records after it."""
    _, header = parsed[0]
    if header.get("type") != "header" or header.get("schema") != SCHEMA:
        raise _fail(p, 1, f"not a polyspec trace (expected a header with schema '{SCHEMA}', "
                    f"got type={shown(header.get('type'))} schema={shown(header.get('schema'))})")
    if header.get("schema_version") != SCHEMA_VERSION:
        raise _fail(p, 1, f"unsupported schema_version {shown(header.get('schema_version'))} "
                    f"(this reader knows {SCHEMA_VERSION})")
    _check_fields(p, 1, header, RECORD_FIELDS)
    try:
        checker = RecordChecker(header)
    except FieldError as e:
        raise _fail(p, 1, f"header.{e}") from None
    return header, checker


def _check_records(p: Path, checker, parsed) -> tuple[list, int]:
    """The ``(line, record)`` pairs kept (a ``resume`` record discards the interrupted
    attempt's) and how many were discarded; every record checked."""
    fields, known = checker.record_fields, all_record_fields()
    need = {t: frozenset(f) for t, f in fields.items()}
    passed = _rounds_passed(checker, parsed, need)
    kept, discarded = [], 0
    for j, (i, rec) in enumerate(parsed):
        t = rec.get("type")
        if not isinstance(t, str) or t not in known or t == "header":
            raise _fail(p, i, f"unknown record type {shown(t)} (known: "
                        f"{sorted(k for k in known if k != 'header')})")
        if t not in fields:
            _check_fields(p, i, rec, known)
            owner = record_owner(t)
            if owner is not None and getattr(owner, "TRACE_KIND", "single-stream") == \
                    checker.kind:
                raise _fail(p, i, f"{t}.type: {t} records belong in {owner.name} traces")
            raise _fail(p, i, f"record type {t!r} does not belong in a {checker.kind} trace")
        if not rec.keys() >= need[t]:
            _check_fields(p, i, rec, fields)
        try:
            if j not in passed:
                checker.check(rec)
        except FieldError as e:
            raise _fail(p, i, f"{t}.{e}") from None
        except RecordError as e:
            raise _fail(p, i, e.message) from None
        if t == "resume":
            nxt = rec["next_prompt"]
            nxt_d = rec.get("next_decode")
            before = len(kept)
            kept = [(j, r) for j, r in kept if ("prompt" not in r or r["prompt"] < nxt)
                    and (nxt_d is None or "decode" not in r or r["decode"] < nxt_d)]
            discarded += before - len(kept)
            continue
        if t == "round" and not rec.keys().isdisjoint(ROUND_OPTIONAL):
            bad = check_round_extras(rec)
            if bad is not None:
                raise _fail(p, i, f"round: {bad}")
        kept.append((i, rec))
    return kept, discarded


def _rounds_passed(checker, parsed, need) -> set:
    """The positions in ``parsed`` of the ``round`` records (with every required field)
    that :meth:`RecordChecker.check` is sure to pass, decided on columns
    (:meth:`RecordChecker.rounds_pass`); the reader checks the others one by one."""
    if "round" not in need:
        return set()
    req = need["round"]
    at = [j for j, (_, r) in enumerate(parsed) if r.get("type") == "round" and r.keys() >= req]
    ok = checker.rounds_pass([parsed[j][1] for j in at])
    return {j for j, good in zip(at, ok.tolist(), strict=True) if good}


def read_trace(path, *, allow_truncated: bool = False) -> Capture:
    """The :class:`Capture` stored in one trace file (finished prompts only; notes say what
    was skipped)."""
    return capture_of(read_records(path, allow_truncated=allow_truncated))


def capture_of(tr: TraceRecords) -> Capture:
    if is_batch_header(tr.header):
        raise TraceError(f"{tr.path}: a batched trace (header 'batch'): read it with "
                         "validation.traces.batch.read_batch_trace (polyspec validate does)")
    own = _reader_of_header(tr.header)
    if own is not None:
        raise TraceError(f"{tr.path}: a {own.TRACE_KIND} trace (scheme {own.name!r}): read it "
                         f"with {own.__name__}.read_capture (polyspec validate does)")
    return Capture.from_records(tr.header, tr.records, path=tr.path, complete=tr.complete,
                                notes=tr.skipped_notes())


def read_traces(directory, *, allow_truncated: bool = False) -> list[Capture]:
    """Every single-stream ``*.jsonl`` trace of a directory, sorted by file name (batched
    traces, read by :func:`validation.traces.batch.read_batch_traces`, are skipped). Two
    files holding the same records (a copy, renamed or not) are refused: counted twice they
    would weigh one capture double in every fit (``validate`` and ``plan --traces`` both read
    through here).
    Configuration names are made unique (a duplicate is renamed after its file)."""
    caps, seen, digests = [], set(), {}
    for f in single_stream_files(directory):
        dg, cap = cached_read(f, ("capture", allow_truncated), _digest_and_capture,
                              allow_truncated)
        if dg in digests:
            raise TraceError(f"{f}: holds the same records as {digests[dg].name} (a copy of "
                             "one capture); remove one of them")
        digests[dg] = f
        if cap.name in seen:
            cap = cap.renamed(f.stem)
        seen.add(cap.name)
        caps.append(cap)
    return caps


def _digest_and_capture(path, allow_truncated: bool) -> tuple[str, Capture]:
    tr = read_records(path, allow_truncated=allow_truncated)
    return tr.digest, capture_of(tr)


_PARSED: dict = {}  # (resolved path, kind) -> (stamp, parsed value)
MAX_CACHED_FILES = 256


def _stamp(path: Path):
    """The file's size, mtime_ns, ctime_ns, inode and device, and the sha256 of its bytes
    (a rewrite within one clock tick keeps the times but not the bytes); ``None`` if it
    cannot be read (the reader then reports why)."""
    try:
        st = os.stat(path)
        if not Path(path).is_file() or st.st_size > MAX_TRACE_BYTES:
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except (OSError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev,
            hashlib.sha256(data).digest())


def cached_read(path, kind, read, *args):
    """``read(path, *args)`` once per process while the file is unchanged: the result is
    kept under (resolved path, ``kind``) with the file's size, mtime_ns, ctime_ns, inode and
    content hash, and a later call that finds all of them equal returns a deep copy of it (a
    caller that changes what it got changes nothing kept; copying the CPU captures costs
    ~2 % of parsing them). A changed or replaced file is read again; an error is raised,
    never kept; a file that changed while being read is not kept. The file is recorded as
    read (:func:`validation.files.note_read`) either way."""
    p = Path(path)
    try:
        key = (str(p.resolve()), kind)
    except (OSError, RuntimeError, ValueError):
        return read(path, *args)  # the reader reports what is wrong with the path
    before = _stamp(p)
    hit = _PARSED.get(key)
    if before is not None and hit is not None and hit[0] == before:
        from validation.files import note_read

        note_read(p)
        return copy.deepcopy(hit[1])
    _PARSED.pop(key, None)  # stale: a read that fails leaves nothing kept for the file
    value = read(path, *args)
    if before is not None and _stamp(p) == before:
        while len(_PARSED) >= MAX_CACHED_FILES:
            del _PARSED[next(iter(_PARSED))]  # the oldest first
        _PARSED[key] = (before, copy.deepcopy(value))
    return value


def single_stream_files(directory) -> list[Path]:
    """The single-stream ``*.jsonl`` trace files of a directory that :func:`read_traces`
    reads, sorted, or its error for a folder that has none (no such directory, not one, no
    trace, an odd entry), from the files' first lines only: a command checks every folder
    it is given this way before reading any of them."""
    d = Path(directory)
    if not d.exists():
        raise TraceError(f"{d}: no such directory")
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    files = sorted(d.glob("*.jsonl"))
    if not files:
        raise TraceError(f"{d}: no *.jsonl trace files")
    odd = [f for f in files if not f.is_file()]
    if odd:  # a FIFO would block the reader; a directory or a device is not a trace
        raise TraceError(f"{odd[0]}: not a regular file (a directory, device, FIFO or "
                         "socket named *.jsonl); move it out of the traces folder")
    batched = [f for f in files if is_batched_file(f)]
    own = [f for f in files if f not in batched and own_reader(f) is not None]
    files = [f for f in files if f not in batched and f not in own]
    if not files:
        raise TraceError(f"{d}: no single-stream traces ({len(batched)} batched trace(s): "
                         "polyspec validate reads those per batch size"
                         + (f"; {len(own)} read by their scheme's own reader" if own else "")
                         + ")")
    return files


def _first_record(path):
    """The first line of ``path`` parsed (a header if it is a trace); ``None`` for anything
    unreadable, and never opening a FIFO (it blocks) or a device."""
    if not Path(path).is_file():
        return None
    try:
        with open(path, encoding="utf-8") as f:
            head = json.loads(f.readline())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return head if isinstance(head, dict) else None


def is_batched_file(path) -> bool:
    """Whether a trace file is a batched capture (its first line has a ``batch`` object);
    ``False`` for anything unreadable (the full reader reports those)."""
    head = _first_record(path)
    return head is not None and is_batch_header(head)


def _reader_of_header(header):
    """The module of the header's scheme if that scheme reads its own captures (it has
    ``read_capture``: its traces are not prompt by prompt); else ``None``."""
    from validation.schemes import get, scheme_of_trace

    try:
        mod = get(scheme_of_trace(header))
    except (PolyspecInputError, KeyError, TypeError, AttributeError):
        return None  # the full reader reports what is wrong with the header
    return mod if hasattr(mod, "read_capture") else None


def own_reader(path):
    """The scheme module whose ``read_capture`` reads the trace file ``path`` (a scheme whose
    traces are not prompt by prompt: parallel draft-verify); ``None`` for single-stream and
    batched traces and for anything unreadable (the full reader reports those)."""
    head = _first_record(path)
    if head is None or head.get("type") != "header" or is_batch_header(head):
        return None
    return _reader_of_header(head)


def _check_fields(p, i, rec, fields):
    missing = [k for k in fields[rec["type"]] if k not in rec]
    if missing:
        raise _fail(p, i, f"{rec['type']} record misses field(s) {missing}")
