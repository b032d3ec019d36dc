"""Real serving-engine output -> acceptance data (:class:`AcceptanceCounts`) and calibration runs.

Every parser reads what an engine actually prints (log lines, metric dumps, per-request JSON,
benchmark tables; the real samples are in ``../shared/engine-samples``) and returns an
:class:`EngineOutput`: one :class:`Snapshot` per log interval / request / run, each with its
verification ``rounds``, ``accepted`` draft tokens (the accepted *prefix*, bonus token
excluded), the draft length ``cap`` when every round drafted it, and the exact (or, from
rounded rates, reconstructed) acceptance histogram where the engine reports one. The
engines' "mean acceptance length" convention is ``1 + accepted / rounds`` (bonus token
included); every figure the engine printed is recomputed and compared at its printed
precision (:attr:`EngineOutput.checks`).

Formats (detected from the content, :func:`detect_format`; ``--format`` overrides):

=========================  =============================================================
``vllm-v0-log``            vLLM V0 ``Speculative metrics:`` lines; cumulative counters;
                           "accepted tokens" counts accepted drafts at ANY position, so the
                           prefix is ``emitted - rounds``; rounds = draft tokens / k
``vllm-v1-log``            vLLM V1 ``SpecDecoding metrics:`` lines (per-interval counters,
                           both wordings); rounds = Drafted / gamma (gamma = number of
                           per-position rates, or ``--gamma``)
``vllm-offline-example``   the V1 ``examples/offline_inference/spec_decode.py`` printout
                           (per-position rates printed with 2 decimals)
``prometheus-text``        vLLM counters in the Prometheus text exposition format
``prometheus-ui``          the same counters pasted from the Prometheus UI (``series | value``)
``vllm-json``              ``SpecDecodingStats`` fields or ``LLM.get_metrics()`` records
``vllm-per-request``       per-request ``speculative_decoding`` metrics with
                           ``acceptance_histogram``
``sglang-log``             SGLang ``Decode batch. ... accept len: x, accept rate: y`` lines
``sglang-meta``            per-request ``meta_info``, all three key schemas
``llamacpp-speculative``   ``llama-speculative`` statistics (n_draft, n_predict, ...)
``llamacpp-server``        llama-server draft statistics (``#gen drafts``, ...)
``trtllm-bench``           ``trtllm-bench`` decoding statistics (per-request averages)
``vllm-sweep``             a table of mean acceptance length and time per output token per
                           number of speculative tokens K: calibration data
                           (:func:`load_sweep`, :func:`sweep_runs`), no round counts
=========================  =============================================================

Counters over time: per-interval snapshots are summed; cumulative ones are differenced (a
decrease is a restart: a new segment). Where the data cannot mean what the law fit assumes,
the output says so in ``warnings`` and, when the fit would be meaningless (draft lengths
varying by round), no law is fitted. Missing data raise :class:`PolyspecInputError` naming
what is missing, on one line.

Layout: one module per engine (``vllm_logs``, ``vllm_offline``, ``vllm_counters``,
``vllm_per_request``, ``sglang``, ``llamacpp``, ``trtllm``), the shared types and helpers
(``common``), the format registry and detection (``registry``), the fit report (``report``)
and sweep tables (``sweep``).
"""

from __future__ import annotations

from validation.engines.common import (
    SHORT_DRAFT_TOLERANCE,
    EngineOutput,
    Snapshot,
    SweepTable,
    read_engine_text,
    survival_from_rates,
)
from validation.engines.registry import (
    FORMATS,
    detect_format,
    load_engine_output,
    parse_engine_output,
)
from validation.engines.report import acceptance_report, variable_length_model
from validation.engines.sweep import load_sweep, sweep_runs

__all__ = [
    "FORMATS",
    "Snapshot",
    "EngineOutput",
    "SweepTable",
    "read_engine_text",
    "detect_format",
    "parse_engine_output",
    "load_engine_output",
    "survival_from_rates",
    "acceptance_report",
    "variable_length_model",
    "load_sweep",
    "sweep_runs",
    "SHORT_DRAFT_TOLERANCE",
]
