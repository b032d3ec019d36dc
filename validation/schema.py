"""The trace schema ``polyspec-trace`` version 1: what a capture stores, record by record.

A trace is a JSON-lines file, one object per line, each with a ``type``:

``header`` (line 1, exactly once)
    ``schema`` = "polyspec-trace", ``schema_version`` = 1, ``created`` (ISO time), ``tool``,
    ``models``: list (target first) of ``{name, kind, params, vocab_size, max_len, ...}``
    (zoo GPTs add ``n_layer, n_head, d_model, source``; the n-gram ``order``),
    ``dtype``, ``device``, ``device_name``, ``torch``, ``threads``,
    ``cascade``: the project's cascade config (:mod:`polyspec_theory.config`): ``name``,
    ``models`` [{"name": ...}] target first (no ``cost``: it is measured), ``thresholds``,
    ``acceptance`` = null (measured), ``policy`` = "accumulate",
    ``temperature`` (0 = greedy), ``top_k`` (0 = off), ``seed``,
    ``prompts``: ``{source, n_prompts, prompt_len, max_new_tokens, offsets, sha256,
    corpus_digest}``, ``cost_curve``: ``{m: [1..16], contexts: [...], repeats}``,
    ``time_base`` = "seconds", ``prefill`` = "excluded".
``round`` — one per verification round of one level: the fields of :class:`Round`.
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
``end`` — the capture finished: ``n_prompts``, ``wall_s``.

The measured speedup of a capture (:attr:`validation.dataset.Capture.measured_speedup`) is
(Σ target AR ``wall_s`` / Σ ``n_tokens``) / (Σ summary ``wall_s`` / Σ ``n_generated``) over
the prompts the capture finished.
"""

from __future__ import annotations

from typing import NamedTuple

from polyspec_theory._input import PolyspecInputError

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Round", "ROUND_FIELDS", "RECORD_FIELDS",
           "RECORD_TYPES", "TraceError", "TIME_DIGITS"]

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

# required fields per record type (``round_s`` of a round is optional: older traces lack it)
RECORD_FIELDS = {
    "header": ("schema", "schema_version", "models", "dtype", "device", "torch", "threads",
               "cascade", "temperature", "top_k", "seed", "prompts"),
    "round": tuple(f for f in ROUND_FIELDS if f != "round_s"),
    "ar": ("prompt", "model", "n_tokens", "wall_s", "forward_s", "step_s"),
    "cost": ("model", "ctx", "m", "times_s", "median_s"),
    "summary": ("prompt", "n_generated", "wall_s", "forward_s", "forward_count"),
    "resume": ("next_prompt",),
    "end": ("n_prompts",),
}
RECORD_TYPES = tuple(RECORD_FIELDS)


class TraceError(PolyspecInputError):
    """A trace that cannot be used: the message names the file and line (or what is missing)."""

    def __init__(self, message: str):
        super().__init__("trace", message)
