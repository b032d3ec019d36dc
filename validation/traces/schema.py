"""The trace schema ``polyspec-trace`` version 1: what a capture stores, record by record.

A trace is a JSON-lines file, one object per line, each with a ``type``:

``header`` (line 1, exactly once)
    ``schema`` = "polyspec-trace", ``schema_version`` = 1, ``created`` (ISO time), ``tool``,
    ``models``: list (target first) of ``{name, kind, params, vocab_size, max_len, ...}``
    (zoo GPTs add ``n_layer, n_head, d_model, source``; the n-gram ``order``),
    ``dtype``, ``device``, ``device_name``, ``torch``, ``threads``,
    ``cascade``: the project's cascade config (:mod:`polyspec_theory.core.config`): ``name``,
    ``models`` [{"name": ...}] target first (no ``cost``: it is measured), ``thresholds``,
    ``acceptance`` = null (measured), ``policy`` = "accumulate",
    ``temperature`` (0 = greedy), ``top_k`` (0 = off), ``seed``,
    ``prompts``: ``{source, n_prompts, prompt_len, max_new_tokens, offsets, sha256,
    corpus_digest}``, ``cost_curve``: ``{m: [1..16], contexts: [...], repeats}``,
    ``time_base`` = "seconds", ``prefill`` = "excluded".
    Optional (written since docs/measuring.md; older traces lack them): ``machine`` — the
    machine at the start, ``{at, load_average: [1, 5, 15 min] | null (+ load_reason),
    cpu_mhz: {mhz: [per CPU] | null, source: "cpufreq" | "/proc/cpuinfo" | reason}}``
    (:func:`validation.capture.machine.machine_state`); ``load_check`` — ``{max_load, allow_load,
    load_1min}`` of the refusal check the command ran (``allow_load`` true: started with
    ``--allow-load``, whatever the load), null when none ran (a capture started from Python).
    Optional (structured captures): ``cascade.trees`` / ``cascade.schedules`` (one entry per
    pair, ``null`` = chain; the config format of docs/theory.md Part III-D), ``tree_sampling``
    ("distinct": a node's children are its drafter's top-k tokens at temperature 0, drawn
    without replacement otherwise, Sequoia; "iid": drawn with replacement, SpecInfer) and
    ``schedule_restart`` ("prompt": an HF schedule restarts from ``start`` on every prompt).
``round`` — one per verification round of one level: the fields of :class:`Round`, plus,
    on a pair with a tree or a schedule (:mod:`validation.schemes.structured`), these optional
    fields (:data:`ROUND_OPTIONAL`; readers that do not know them ignore them):

    * HF schedule: ``theta`` — the draft length (threshold) this round used.
    * confidence cut-off (bottom pair): ``theta`` — the cap; ``conf`` — the drafter's top
      probability of each drafted token (G values); ``conf_stop`` — its top probability at
      the position where drafting stopped (below ``eta``), ``null`` when the cap stopped it.
      (Top probability = max of the law the drafter samples from; at temperature 0 the
      softmax of its logits at temperature 1.)
    * tree (bottom pair): ``G`` = the drafted nodes the verifier scored (all of the tree's
      nodes unless a sampled law ran out of distinct tokens), ``nodes`` (= G), ``depth`` (of
      the drafted tree), ``ranks`` — the sibling rank of each accepted path node (A values),
      ``visits`` — ``[children, accepted rank or 0]`` for each visited node with children
      (root first, along the accepted path: the data of ``fit_sibling_law``), ``draft_m`` —
      positions scored by each drafter forward (one per depth; the first includes the
      catch-up tokens), ``draft_fwd_s`` — the time of each of those forwards.
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
    excluded), ``prefill_s``, ``forward_s`` and ``forward_count`` (per model, target
    first), ``overhead_s`` (= wall_s − Σ forward_s), ``n_rounds`` (per verifying level),
    ``matches_target_ar`` (greedy: cascade tokens == target's AR tokens; else null).
``resume`` — written by ``capture --resume``: ``next_prompt``; records of prompts ≥
    next_prompt written before it belong to an interrupted attempt and are discarded.
``end`` — the capture finished: ``n_prompts``, ``wall_s``; optional ``machine`` (its state at
    the end, as the header's). A ``resume`` record may carry ``machine`` and ``load_check``
    (those of the attempt that continued the capture).

**Asynchronous traces** (:mod:`validation.schemes.async_`, ``polyspec capture --mode async``):
the header has ``mode`` = "async" (a header without ``mode`` is a synchronous trace),
``cascade.mode`` = "async", ``cascade.thresholds`` = [θ >= 0] and ``cascade.queue`` (absent
= unbounded) with their config meaning (docs/theory.md AS0), and ``async`` = ``{threshold,
queue, window, cores, processes, rollback, ar_cores}`` (two levels, one process and one core
each; ``window`` = the most drafts a verify checks; the baselines and cost curves ran on
``ar_cores``). Its ``round`` records are the target's verifies (level 1): ``G`` = the drafts
it checked (θ <= G <= window), ``m`` = G + 1, ``draft_s`` = the target's wait before
the verify (for the drafter's sync and lookahead), ``verify_s`` its forward, ``round_s``
both plus bookkeeping. ``summary.forward_count`` = [verifies, drafter forwards] and
``summary.overhead_s`` = ``wall_s`` − the target's ``forward_s`` (the drafter runs in
parallel). One more record per prompt:

``dforwards`` — every drafter forward of the prompt, columnar: ``prompt``, ``model``, ``m``
    (positions scored: 1, or more when catching up after a rollback), ``wall_s``, and
    ``discarded`` (drafted tokens thrown away by rollbacks), ``rollbacks``.

The measured speedup of a capture (:attr:`validation.traces.dataset.Capture.measured_speedup`) is
(Σ target AR ``wall_s`` / Σ ``n_tokens``) / (Σ summary ``wall_s`` / Σ ``n_generated``) over
the prompts the capture finished.

**Batched traces** (:mod:`validation.schemes.batch`, :mod:`validation.capture.batch`;
docs/theory.md B0): the same schema and version, read by the same reader, with a
``batch`` object in the header — ``{size: b, policy: "lockstep", waiting: "discard", kv:
"per-sequence", stop: ..., decodes, prompts_per_decode}`` — and these record types instead of
``round`` / ``ar`` / ``cost`` / ``summary`` (one *decode* = ``b`` prompts decoded together,
numbered ``decode``; its prompts are ``decode·b .. decode·b + b − 1``, slot ``seq`` holds
prompt ``decode·b + seq``):

``bround`` — one per verification per sequence: the fields of :class:`SeqRound` (``level``,
    ``G``, ``A``, ``L``, ``m`` = positions of this sequence scored by the forward, ``waited`` =
    lower batched rounds during which its block was full and its slot was padding,
    ``discarded`` = the round ran inside such padding of a level above).
``bbatch`` — one per batched round of a verifying level: the fields of :class:`BatchRound`
    (``K`` = batched rounds of the level below it ran, ``max_G``, ``m`` = padded positions per
    slot of the verify forward, ``waiting`` = Σ over sequences of ``waited``, times).
``bforwards`` — every forward of one run, columnar: ``decode``, ``run`` ("cascade" or "ar"),
    ``batch`` (slots), ``model`` (index, target 0), ``m`` (padded positions per slot),
    ``m0`` (the positions B0 charges: ``max_j G_j + 1`` for a verification, 1 for a draft or
    an autoregressive step), ``ctx`` (longest cached prefix among the slots), ``wall_s``.
``bsummary`` — end of one decode: ``decode``, ``prompts``, ``batch``, ``n_generated`` (per
    sequence), ``wall_s`` (decode time from the first forward to the last, prefill
    excluded), ``prefill_s``, ``forward_s`` / ``forward_count`` (per model), ``overhead_s``,
    ``top_rounds``, ``stop`` ("tokens": every sequence has ``max_new_tokens``; "context": the
    next round could overflow a context), ``matches_target_ar`` (greedy: per sequence, its
    tokens == the target's autoregressive tokens on its prompt; else null).
``bar`` — the batched autoregressive baseline of the target on the same ``b`` prompts (same
    lockstep loop, one forward per step), interleaved with the cascade decodes: ``decode``,
    ``prompts``, ``model``, ``batch``, ``n_steps``, ``wall_s``, ``forward_s``, ``prefill_s``,
    ``step_s``.
``bcost`` — a batched cost sample: ``model``, ``batch``, ``phase``, ``ctx``, ``m``,
    ``times_s``, ``median_s`` (``b`` slots of ``ctx`` cached tokens each scoring ``m``).

A ``resume`` record of a batched trace also has ``next_decode``: records of decodes ≥ it
belong to an interrupted attempt and are discarded.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

from polyspec_theory.errors import PolyspecInputError, as_int

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Round", "ROUND_FIELDS", "RECORD_FIELDS",
           "RECORD_TYPES", "TraceError", "TIME_DIGITS", "StructuredRound", "ROUND_OPTIONAL",
           "check_round_extras", "SeqRound", "BatchRound",
           "is_batch_header", "FieldError", "RecordError", "shown", "check_machine_field",
           "COMMON_RECORD_TYPES", "STREAM_RECORD_TYPES"]

SCHEMA = "polyspec-trace"
SCHEMA_VERSION = 1
TIME_DIGITS = 7  # seconds are written rounded to 0.1 microsecond


class Round(NamedTuple):
    """One verification round of level ``level`` (1 = the target verifies M_2; n−1 = M_{n−1}
    verifies the smallest model) on prompt ``prompt``.

    ``ctx``: tokens before the block (prompt + generated so far); ``G``: block length;
    ``A``: accepted; ``L`` = A + 1 emitted; ``m``: positions scored by the verify forward
    (G + 1, plus one catch-up position for each level at or above this one whose last round
    accepted its whole block, so G + 1 ≤ m ≤ G + level); ``verify_s``: wall time of the
    verify forward; ``draft_s``: wall time of the rounds of the levels below that built this
    block (their forwards and bookkeeping); ``round_s``: draft + verify + acceptance
    bookkeeping.
    """

    prompt: int
    level: int
    ctx: int
    G: int
    A: int
    L: int
    m: int
    verify_s: float
    draft_s: float
    round_s: float

    def to_record(self) -> dict:
        """The ``round`` trace record (times rounded to :data:`TIME_DIGITS`)."""
        rec = {"type": "round"}
        for k, v in zip(ROUND_FIELDS, self, strict=True):
            rec[k] = round(float(v), TIME_DIGITS) if k.endswith("_s") else int(v)
        return rec


ROUND_FIELDS = Round._fields

# optional fields of a round record on a pair with a tree or a schedule (module docstring)
ROUND_OPTIONAL = ("theta", "conf", "conf_stop", "nodes", "depth", "ranks", "visits", "draft_m",
                  "draft_fwd_s")
CONF_DIGITS = 6  # top probabilities are written rounded to 1e-6


class StructuredRound(NamedTuple):
    """A :class:`Round` with the optional fields of its pair's structure (``extra``)."""

    round: Round
    extra: dict

    def to_record(self) -> dict:
        rec = self.round.to_record()
        for k, v in self.extra.items():
            if k == "draft_fwd_s":
                v = [round(float(x), TIME_DIGITS) for x in v]
            elif k == "conf":
                v = [round(float(x), CONF_DIGITS) for x in v]
            elif k == "conf_stop":
                v = None if v is None else round(float(v), CONF_DIGITS)
            rec[k] = v
        return rec


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_prob(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0


def check_round_extras(rec: dict) -> str | None:
    """What is wrong with the optional fields of a round record (``None`` if nothing)."""
    g, a = rec["G"], rec["A"]
    if "theta" in rec and not (_is_int(rec["theta"]) and rec["theta"] >= 1):
        return f"theta must be an integer >= 1, got {rec['theta']!r}"
    if "conf" in rec:
        c = rec["conf"]
        if not isinstance(c, list) or len(c) != g or not all(_is_prob(x) for x in c):
            return f"conf must hold G = {g} probabilities"
    if "conf_stop" in rec and rec["conf_stop"] is not None and not _is_prob(rec["conf_stop"]):
        return f"conf_stop must be a probability or null, got {rec['conf_stop']!r}"
    if "ranks" in rec or "visits" in rec or "nodes" in rec:
        for k in ("nodes", "depth", "ranks", "visits"):
            if k not in rec:
                return f"a tree round needs nodes, depth, ranks and visits ({k} missing)"
        if not _is_int(rec["nodes"]) or rec["nodes"] != g:
            return f"nodes must equal G = {g}, got {rec['nodes']!r}"
        if not _is_int(rec["depth"]) or not a <= rec["depth"] <= max(g, 0):
            return f"depth must be an integer in [A, G] = [{a}, {g}], got {rec['depth']!r}"
        r = rec["ranks"]
        if not isinstance(r, list) or len(r) != a or not all(_is_int(x) and x >= 1 for x in r):
            return f"ranks must hold A = {a} ranks >= 1"
        v = rec["visits"]
        if not (type(v) is list and all(  # JSON pairs of integers, decided without calls
                type(x) is list and len(x) == 2 and type(x[0]) is int and type(x[1]) is int
                and x[0] >= 1 and 0 <= x[1] <= x[0] for x in v)) and (
                not isinstance(v, list) or not all(
                isinstance(x, list) and len(x) == 2 and all(_is_int(y) for y in x)
                and x[0] >= 1 and 0 <= x[1] <= x[0] for x in v)):
            return "visits must be [children >= 1, accepted rank in 0..children] pairs"
        if [x[1] for x in v if x[1]] != r or len(v) not in (a, a + 1):
            return "visits must follow the accepted path (their nonzero ranks = ranks)"
    for k in ("draft_m", "draft_fwd_s"):
        if k in rec and not (type(rec[k]) is list and all(  # JSON numbers, without calls
                (type(x) is int or type(x) is float) and x >= 0 for x in rec[k])) and not (
                isinstance(rec[k], list) and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
                for x in rec[k])):
            return f"{k} must be a list of non-negative numbers"
    if "draft_m" in rec and "draft_fwd_s" in rec and len(rec["draft_m"]) != len(
            rec["draft_fwd_s"]):
        return "draft_m and draft_fwd_s need one entry per drafter forward"
    return None


def _record(kind: str, tup) -> dict:
    rec = {"type": kind}
    for k, v in zip(tup._fields, tup, strict=True):
        rec[k] = round(float(v), TIME_DIGITS) if k.endswith("_s") else int(v)
    return rec


class SeqRound(NamedTuple):
    """One sequence's part of a batched verification round (record ``bround``): decode
    ``decode``, verifying level ``level`` (1 = the target), the ``round``-th batched round of
    that level in the decode, slot ``seq`` holding prompt ``prompt``; ``ctx`` tokens before
    its block, block ``G``, accepted ``A``, emitted ``L = A + 1``, ``m`` of its own positions
    scored (``G + 1`` plus catch-up positions), ``waited`` = batched rounds of the level
    below run while its block was already full (its slot padding, its drafts discarded), and
    ``discarded`` = 1 if this round itself ran while the sequence was waiting at a level
    above (lockstep padding: its output was thrown away; the rounds with ``discarded = 0``
    are exactly those a single-stream decode of the sequence runs)."""

    decode: int
    level: int
    round: int
    seq: int
    prompt: int
    ctx: int
    G: int
    A: int
    L: int
    m: int
    waited: int
    discarded: int

    def to_record(self) -> dict:
        return _record("bround", self)


class BatchRound(NamedTuple):
    """One batched verification round of one level (record ``bbatch``): ``K`` batched rounds
    of the level below it ran (B2's ``max_j N_{i+1,j}``), the largest block ``max_G``, the
    verify forward scored ``m`` padded positions per slot, ``waiting`` = Σ_j ``waited``;
    ``verify_s`` (the verify forward), ``draft_s`` (the lower rounds), ``round_s`` (all)."""

    decode: int
    level: int
    round: int
    K: int
    max_G: int
    m: int
    waiting: int
    verify_s: float
    draft_s: float
    round_s: float

    def to_record(self) -> dict:
        return _record("bbatch", self)


def is_batch_header(header: dict) -> bool:
    """Whether a trace header belongs to a batched capture (it has a ``batch`` object)."""
    return isinstance(header.get("batch"), dict)

# required fields of the record types every single-stream trace holds (``round_s`` of a round
# is optional: older traces lack it)
RECORD_FIELDS = {
    "header": ("schema", "schema_version", "models", "dtype", "device", "torch", "threads",
               "cascade", "temperature", "top_k", "seed", "prompts"),
    "round": tuple(f for f in ROUND_FIELDS if f != "round_s"),
    "ar": ("prompt", "model", "n_tokens", "wall_s", "forward_s", "step_s"),
    "cost": ("model", "ctx", "m", "times_s", "median_s"),
    "summary": ("prompt", "n_generated", "wall_s", "forward_s", "forward_count"),
    "resume": ("next_prompt",),
    "end": ("n_prompts",),
}  # a scheme's own record types: its module's RECORDS (validation.schemes)
RECORD_TYPES = tuple(RECORD_FIELDS)
COMMON_RECORD_TYPES = ("resume", "end")  # every trace may hold them
STREAM_RECORD_TYPES = ("round", "ar", "cost", "summary")  # a single-stream trace's


class TraceError(PolyspecInputError):
    """A trace that cannot be used: the message names the file and line (or what is missing)."""

    def __init__(self, message: str):
        super().__init__("trace", message)


# --------------------------------------------------------------------------------------------
# record checks (used by the trace reader, validation.traces.records): every field a reader uses has
# the right JSON type and a possible value; errors name the field
# --------------------------------------------------------------------------------------------
class FieldError(Exception):
    """A bad field of one record: ``field`` (dotted, e.g. ``cascade.thresholds[1]``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class RecordError(Exception):
    """A record that contradicts its header or the records before it: the message names the
    record type and field; ``line``: the line to report (``None``: the record's own)."""

    def __init__(self, message: str, line: int | None = None):
        self.message = message
        self.line = line
        super().__init__(message)


def shown(v) -> str:
    """``v`` as an error message shows it: JSON (strings and non-JSON values as repr), at most
    40 characters."""
    r = repr(v) if isinstance(v, str) or not _jsonable(v) else json.dumps(v)
    return r if len(r) <= 40 else r[:36] + " ..."


def _jsonable(v) -> bool:
    try:
        json.dumps(v, allow_nan=True)
        return True
    except (TypeError, ValueError):
        return False


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_int(v, field: str, low: int | None = 0, high: int | None = None) -> int:
    """A JSON integer (not a bool, not 0.5, not null, not a string; 3.0 is read as 3):
    :func:`polyspec_theory.errors.as_int`, the value shown as JSON, a :class:`FieldError`."""
    if type(v) is int and (low is None or v >= low) and (high is None or v <= high):
        return v  # the common case, fast
    return as_int(v, field, low=low, high=high, show=shown, error=FieldError)


# A time in a trace record above this is not a measurement (the longest in data/traces/ is a
# few minutes, for a whole capture): an absurd but finite time (1e308) would otherwise flow
# into pooled cost fits and leave-one-out laws and change OTHER captures' results.
MAX_TIME_S = 86400.0  # one day, for one forward, round or prompt


def check_real(v, field: str, low: float | None = 0.0, high: float | None = MAX_TIME_S,
               positive: bool = False) -> float:
    """A finite JSON number (a time: >= 0 unless ``low`` is None, > 0 when ``positive``, at
    most ``high`` seconds, in absolute value, unless ``high`` is None)."""
    if (type(v) is float and math.isfinite(v) and (low is None or v >= low)
            and (high is None or abs(v) <= high) and not (positive and v <= 0)):
        return v  # the common case, fast
    if not _is_num(v):
        raise FieldError(field, f"must be a number, got {shown(v)}")
    try:
        x = float(v)
    except OverflowError:
        raise FieldError(field, "must be finite, got an integer beyond 1e308") from None
    if not math.isfinite(x):
        raise FieldError(field, f"must be a finite number, got {shown(v)}")
    if low is not None and x < low:
        raise FieldError(field, f"must be >= {low:g}, got {x!r}")
    if positive and x <= 0:
        raise FieldError(field, f"must be > 0 (a measured time), got {x!r}")
    if high is not None and abs(x) > high:
        raise FieldError(field, f"must be at most {high:g} s (a measured time), got {x!r}")
    return x


def check_reals(xs: list, field: str, positive: bool = False) -> None:
    """:func:`check_real` (a time) of every entry of the list ``xs`` (errors name
    ``field[j]``, the first bad entry's); a long list of floats is checked on an array."""
    if len(xs) > 8 and list(map(type, xs)).count(float) == len(xs):
        import numpy as np

        a = np.asarray(xs, np.float64)
        if (np.isfinite(a) & (a > 0.0 if positive else a >= 0.0) & (a <= MAX_TIME_S)).all():
            return
    for j, x in enumerate(xs):
        check_real(x, f"{field}[{j}]", positive=positive)


def check_list(v, field: str, length: int | None = None, min_len: int = 0) -> list:
    if not isinstance(v, list):
        raise FieldError(field, f"must be a list, got {shown(v)}")
    if length is not None and len(v) != length:
        raise FieldError(field, f"must have {length} entries, got {len(v)}")
    if len(v) < min_len:
        raise FieldError(field, f"must have at least {min_len} entries, got {len(v)}")
    return v


def check_str(v, field: str) -> str:
    if not isinstance(v, str) or not v:
        raise FieldError(field, f"must be a non-empty string, got {shown(v)}")
    return v


def check_object(v, field: str) -> dict:
    if not isinstance(v, dict):
        raise FieldError(field, f"must be an object, got {shown(v)}")
    return v


def check_machine_field(rec: dict, key: str) -> None:
    """The optional ``machine`` / ``load_check`` field of a header, ``resume`` or ``end``
    record (module docstring): absent or null, or of the written form."""
    v = rec.get(key)
    if v is None:
        return
    check_object(v, key)
    if key == "load_check":
        check_real(v.get("max_load"), "load_check.max_load", high=None)
        if not isinstance(v.get("allow_load"), bool):
            raise FieldError("load_check.allow_load", f"must be true or false, got "
                             f"{shown(v.get('allow_load'))}")
        if v.get("load_1min") is not None:
            check_real(v["load_1min"], "load_check.load_1min", high=None)
        return
    la = v.get("load_average")
    if la is not None:
        for j, x in enumerate(check_list(la, "machine.load_average", length=3)):
            check_real(x, f"machine.load_average[{j}]", high=None)
    cpu = v.get("cpu_mhz")
    if cpu is not None:
        mhz = check_object(cpu, "machine.cpu_mhz").get("mhz")
        if mhz is not None:
            for j, x in enumerate(check_list(mhz, "machine.cpu_mhz.mhz")):
                check_real(x, f"machine.cpu_mhz.mhz[{j}]", high=None)
