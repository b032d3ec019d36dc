"""Trace files of real decoding runs: a versioned JSON-lines schema, an append-and-flush
writer, and a validating reader.

Schema ``polyspec-trace`` version 1 — one JSON object per line, each with a ``type``:

``header`` (line 1, exactly once)
    ``schema`` = "polyspec-trace", ``schema_version`` = 1, ``created`` (ISO time), ``tool``,
    ``models``: list (target first) of ``{name, kind, params, vocab_size, max_len, ...}``
    (zoo GPTs add ``n_layer, n_head, d_model, source``; the n-gram ``order``),
    ``dtype``, ``device``, ``device_name``, ``torch``, ``threads``,
    ``cascade``: the project's cascade config (``polyspec_theory.config``): ``name``,
    ``models`` [{"name": ...}] target first (no ``cost``: it is measured), ``thresholds``,
    ``acceptance`` = null (measured), ``policy`` = "accumulate",
    ``temperature`` (0 = greedy), ``top_k`` (0 = off), ``seed``,
    ``prompts``: ``{source, n_prompts, prompt_len, max_new_tokens, offsets, sha256,
    corpus_digest}``, ``cost_curve``: ``{m: [1..16], contexts: [...], repeats}``,
    ``time_base`` = "seconds", ``prefill`` = "excluded".
``round`` — one per verification round of one level
    ``prompt`` (index), ``level`` i (1 = target verifies M_2; n-1 = M_{n-1} verifies the
    smallest), ``ctx`` (tokens before the block: prompt + generated so far), ``G`` (block
    length), ``A`` (accepted), ``L`` (= A + 1 emitted), ``m`` (positions scored by the
    verify forward: G+1, plus one catch-up position per level at or above this one whose
    last round accepted its whole block, so G+1 ≤ m ≤ G+level), ``verify_s`` (wall time of
    the verify forward), ``draft_s`` (wall time of the rounds of the levels below that built
    this block, their forwards and bookkeeping included), ``round_s`` (draft + verify +
    acceptance bookkeeping).
``ar`` — autoregressive baseline of one model on one prompt (same prompt, same sampling
    settings, interleaved with the cascade runs): ``prompt``, ``model``, ``n_tokens``,
    ``wall_s`` (decode time, prefill excluded), ``forward_s`` (time inside forwards),
    ``prefill_s``, ``ctx0`` (prompt length), ``step_s`` (per-token wall times; token j is
    decoded at context ``ctx0 + j``).
``cost`` — cost curve sample: ``model``, ``phase`` ("start" / "end" of the capture),
    ``ctx`` (tokens in cache), ``m`` (positions scored), ``times_s`` (repeats),
    ``median_s``.
``summary`` — end of one prompt (written after its cascade and AR runs): ``prompt``,
    ``n_prompt_tokens``, ``n_generated``, ``wall_s`` (cascade decode time, prefill
    excluded), ``prefill_s``, ``forward_s`` and ``forward_count`` (per level, target
    first), ``overhead_s`` (= wall_s − Σ forward_s), ``n_rounds`` (per verifying level),
    ``matches_target_ar`` (greedy: cascade tokens == target's AR tokens; else null).
``resume`` — written by ``--resume``: ``next_prompt``; records of prompts ≥ next_prompt
    written before it belong to an interrupted attempt and are discarded by the reader.
``end`` — the capture finished: ``n_prompts``, ``wall_s``.

Measured speedup (same capture, same prompts): ``Trace.measured_speedup`` =
(Σ target AR ``wall_s`` / Σ ``n_tokens``) / (Σ summary ``wall_s`` / Σ ``n_generated``).

Reader: ``read_trace(path, allow_truncated=False) -> Trace``; ``read_traces(dir)``.
Errors are ``TraceError`` (a ``PolyspecInputError`` with field ``trace``) naming the file
and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory._input import PolyspecInputError

from .files import json_default

__all__ = ["SCHEMA", "SCHEMA_VERSION", "TraceError", "TraceWriter", "Trace", "RoundArrays",
           "ARRecord", "CostTable", "read_trace", "read_traces", "REQUIRED"]

SCHEMA = "polyspec-trace"
SCHEMA_VERSION = 1

REQUIRED = {
    "header": ("schema", "schema_version", "models", "dtype", "device", "torch", "threads",
               "cascade", "temperature", "top_k", "seed", "prompts"),
    "round": ("prompt", "level", "ctx", "G", "A", "L", "m", "verify_s", "draft_s"),
    "ar": ("prompt", "model", "n_tokens", "wall_s", "forward_s", "step_s"),
    "cost": ("model", "ctx", "m", "times_s", "median_s"),
    "summary": ("prompt", "n_generated", "wall_s", "forward_s", "forward_count"),
    "resume": ("next_prompt",),
    "end": ("n_prompts",),
}


class TraceError(PolyspecInputError):
    """A trace file that cannot be read: message names the file and line."""

    def __init__(self, message: str):
        super().__init__("trace", message)


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

    def write(self, record: dict) -> None:
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
class RoundArrays:
    """All verification rounds of one level, as parallel numpy arrays (file order)."""

    level: int
    prompt: np.ndarray
    ctx: np.ndarray
    G: np.ndarray
    A: np.ndarray
    L: np.ndarray
    m: np.ndarray
    verify_s: np.ndarray
    draft_s: np.ndarray
    round_s: np.ndarray

    def __len__(self) -> int:
        return len(self.A)


@dataclass
class ARRecord:
    """Autoregressive baseline of one model over all prompts (arrays indexed by run)."""

    model: str
    prompt: np.ndarray
    n_tokens: np.ndarray
    wall_s: np.ndarray
    forward_s: np.ndarray
    ctx0: np.ndarray
    step_s: list[np.ndarray]

    @property
    def time_per_token(self) -> float:
        """Σ wall_s / Σ n_tokens (seconds per token, prefill excluded)."""
        return float(self.wall_s.sum() / self.n_tokens.sum())

    def step_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(context length, seconds) of every decoded token of every run."""
        ctx = np.concatenate([c + np.arange(len(s)) for c, s in zip(self.ctx0, self.step_s,
                                                                      strict=True)])
        return ctx, np.concatenate(self.step_s)


@dataclass
class CostTable:
    """Cost-curve samples of one model: parallel arrays over (phase, ctx, m) cells."""

    model: str
    phase: np.ndarray
    ctx: np.ndarray
    m: np.ndarray
    median_s: np.ndarray
    times_s: list[np.ndarray]

    def curve(self, ctx: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(m values, median seconds) pooled over phases (median of all repeats), at one
        context length or pooled over all."""
        sel = np.ones(len(self.m), bool) if ctx is None else self.ctx == ctx
        ms = np.unique(self.m[sel])
        med = [np.median(np.concatenate([t for t, s, mm in zip(self.times_s, sel, self.m,
                                                                strict=True) if s and mm == m]))
               for m in ms]
        return ms, np.asarray(med)


@dataclass
class Trace:
    """A parsed trace: header, rounds per level, AR baselines and cost tables per model,
    per-prompt summaries."""

    path: str
    header: dict
    rounds: dict[int, RoundArrays]
    ar: dict[str, ARRecord]
    costs: dict[str, CostTable]
    summaries: list[dict]
    complete: bool
    n_discarded: int = 0
    truncated_tail: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.header["cascade"].get("name", Path(self.path).stem)

    @property
    def model_names(self) -> list[str]:
        return [m["name"] for m in self.header["cascade"]["models"]]

    @property
    def thresholds(self) -> list[int]:
        return list(self.header["cascade"]["thresholds"])

    @property
    def n_levels(self) -> int:
        return len(self.model_names)

    @property
    def temperature(self) -> float:
        return float(self.header["temperature"])

    @property
    def n_generated(self) -> int:
        return int(sum(s["n_generated"] for s in self.summaries))

    @property
    def cascade_time_per_token(self) -> float:
        """Σ cascade decode wall time / Σ tokens generated (seconds)."""
        return float(sum(s["wall_s"] for s in self.summaries) / self.n_generated)

    @property
    def ar_target_time_per_token(self) -> float:
        return self.ar[self.model_names[0]].time_per_token

    @property
    def measured_speedup(self) -> float:
        """AR target time per token / cascade time per token, from this capture."""
        return self.ar_target_time_per_token / self.cascade_time_per_token

    @property
    def overhead_fraction(self) -> float:
        """Share of cascade decode time spent outside model forwards."""
        wall = sum(s["wall_s"] for s in self.summaries)
        return float(sum(s["overhead_s"] for s in self.summaries) / wall)

    def forward_time_per_level(self) -> np.ndarray:
        """Σ forward seconds per level (target first) over all prompts."""
        return np.sum([s["forward_s"] for s in self.summaries], axis=0)

    def forward_count_per_level(self) -> np.ndarray:
        return np.sum([s["forward_count"] for s in self.summaries], axis=0)

    def cascade_config(self) -> dict:
        """The header's cascade config (acceptance null, costs absent: fill from fits)."""
        return json.loads(json.dumps(self.header["cascade"]))


def _fail(path, lineno, msg) -> TraceError:
    return TraceError(f"{path}: line {lineno}: {msg}")


def read_trace(path, *, allow_truncated: bool = False) -> Trace:
    """Parse and validate a trace file. A last line that is cut (unterminated, invalid
    JSON) raises unless ``allow_truncated``, in which case it is skipped and
    ``truncated_tail`` is set. Any other bad line raises naming its number."""
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
    records = []
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
        records.append((i, rec))
    if not records:
        raise TraceError(f"{p}: line 1: no complete record")
    lineno, header = records[0]
    if header.get("type") != "header" or header.get("schema") != SCHEMA:
        raise _fail(p, 1, f"not a polyspec trace (expected a header with schema '{SCHEMA}', "
                    f"got type={header.get('type')!r} schema={header.get('schema')!r})")
    if header.get("schema_version") != SCHEMA_VERSION:
        raise _fail(p, 1, f"unsupported schema_version {header.get('schema_version')!r} "
                    f"(this reader knows {SCHEMA_VERSION})")
    _check_fields(p, 1, header)
    n_levels = len(header["cascade"]["models"])
    # discard records of prompts interrupted before a resume
    kept, discarded = [], 0
    for i, rec in records[1:]:
        t = rec.get("type")
        if t not in REQUIRED or t == "header":
            raise _fail(p, i, f"unknown record type {t!r} (known: "
                        f"{sorted(k for k in REQUIRED if k != 'header')})")
        _check_fields(p, i, rec)
        if t == "resume":
            nxt = int(rec["next_prompt"])
            before = len(kept)
            kept = [(j, r) for j, r in kept if "prompt" not in r or r["prompt"] < nxt]
            discarded += before - len(kept)
            continue
        kept.append((i, rec))
    rounds: dict[int, list] = {lv: [] for lv in range(1, n_levels)}
    ar: dict[str, list] = {}
    costs: dict[str, list] = {}
    summaries, complete = [], False
    for i, rec in kept:
        t = rec["type"]
        if t == "round":
            lv = rec["level"]
            if lv not in rounds:
                raise _fail(p, i, f"level {lv} out of range 1..{n_levels - 1}")
            if not 0 <= rec["A"] <= rec["G"] or rec["L"] != rec["A"] + 1:
                raise _fail(p, i, f"inconsistent round (G={rec['G']}, A={rec['A']}, "
                            f"L={rec['L']}): need 0 <= A <= G and L = A + 1")
            rounds[lv].append(rec)
        elif t == "ar":
            ar.setdefault(rec["model"], []).append(rec)
        elif t == "cost":
            costs.setdefault(rec["model"], []).append(rec)
        elif t == "summary":
            summaries.append(rec)
        elif t == "end":
            complete = True
    return Trace(
        path=str(p), header=header,
        rounds={lv: _round_arrays(lv, rs) for lv, rs in rounds.items()},
        ar={k: _ar_record(k, v) for k, v in ar.items()},
        costs={k: _cost_table(k, v) for k, v in costs.items()},
        summaries=summaries, complete=complete, n_discarded=discarded,
        truncated_tail=truncated,
    )


def read_traces(directory, *, allow_truncated: bool = False) -> list[Trace]:
    """Every ``*.jsonl`` trace of a directory, sorted by file name."""
    d = Path(directory)
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    files = sorted(d.glob("*.jsonl"))
    if not files:
        raise TraceError(f"{d}: no *.jsonl trace files")
    return [read_trace(f, allow_truncated=allow_truncated) for f in files]


def _check_fields(p, i, rec):
    missing = [k for k in REQUIRED[rec["type"]] if k not in rec]
    if missing:
        raise _fail(p, i, f"{rec['type']} record misses field(s) {missing}")


def _round_arrays(level, rs) -> RoundArrays:
    def col(k, dt, default=None):
        return np.asarray([r.get(k, default) for r in rs], dtype=dt)

    return RoundArrays(level=level, prompt=col("prompt", np.int64), ctx=col("ctx", np.int64),
                       G=col("G", np.int64), A=col("A", np.int64), L=col("L", np.int64),
                       m=col("m", np.int64), verify_s=col("verify_s", np.float64),
                       draft_s=col("draft_s", np.float64),
                       round_s=col("round_s", np.float64, np.nan))


def _ar_record(model, rs) -> ARRecord:
    return ARRecord(
        model=model, prompt=np.asarray([r["prompt"] for r in rs], np.int64),
        n_tokens=np.asarray([r["n_tokens"] for r in rs], np.int64),
        wall_s=np.asarray([r["wall_s"] for r in rs], np.float64),
        forward_s=np.asarray([r["forward_s"] for r in rs], np.float64),
        ctx0=np.asarray([r.get("ctx0", 0) for r in rs], np.int64),
        step_s=[np.asarray(r["step_s"], np.float64) for r in rs])


def _cost_table(model, rs) -> CostTable:
    return CostTable(
        model=model, phase=np.asarray([r.get("phase", "") for r in rs]),
        ctx=np.asarray([r["ctx"] for r in rs], np.int64),
        m=np.asarray([r["m"] for r in rs], np.int64),
        median_s=np.asarray([r["median_s"] for r in rs], np.float64),
        times_s=[np.asarray(r["times_s"], np.float64) for r in rs])
