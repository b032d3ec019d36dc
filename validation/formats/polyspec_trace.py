"""Our own traces (``polyspec capture``): the ``polyspec-trace`` JSON-lines schema
(:mod:`validation.traces.schema`), read and checked record by record by
:mod:`validation.traces.records`; a single-stream trace is a
:class:`~validation.traces.dataset.Capture`, a batched one a
:class:`~validation.traces.batch.BatchCapture`."""

from __future__ import annotations

import json

import numpy as np

from validation.formats import Evidence, Format, PairEvidence, Source
from validation.traces.schema import SCHEMA, is_batch_header

DESCRIPTION = "polyspec trace (JSON lines: header, rounds, baselines, cost curves)"
MAX_HEADER_LINE = 2**24


def is_trace_file(src: Source) -> bool:
    """A ``.jsonl`` file whose first line is a ``polyspec-trace`` header (never raises)."""
    if not src.is_file() or src.suffix != ".jsonl":
        return False
    try:
        with open(src.path, encoding="utf-8") as fh:
            head = json.loads(fh.readline(MAX_HEADER_LINE))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(head, dict) and head.get("schema") == SCHEMA


def evidence(cap, path: str) -> Evidence:
    """A capture as :class:`Evidence`: per pair (top first) its rounds' accepted counts with
    their block lengths and, per prompt, the tokens each round emitted in order."""
    from validation.schemes import scheme_of_trace

    pairs = []
    for i, r in enumerate(getattr(cap, "rounds", ())):
        rounds = tuple(r.L[r.prompt == p] for p in np.unique(r.prompt))
        pairs.append(PairEvidence(verifier=cap.models[i], drafter=cap.models[i + 1],
                                  counts=r.counts(), rounds=rounds))
    return Evidence(path=path, format="polyspec-trace", description=DESCRIPTION, data=cap,
                    pairs=tuple(pairs), models=cap.models,
                    scheme=scheme_of_trace(cap.header),
                    timing={"measured_speedup": float(cap.measured_speedup)},
                    warnings=tuple(cap.notes))


def _read(src: Source, allow_truncated: bool = False) -> Evidence:
    from validation.traces.batch import BatchCapture
    from validation.traces.records import capture_of, read_records

    tr = read_records(src.path, allow_truncated=allow_truncated)
    cap = (BatchCapture.from_records(tr.header, tr.records, path=tr.path, complete=tr.complete,
                                     notes=tr.skipped_notes())
           if is_batch_header(tr.header) else capture_of(tr))
    return evidence(cap, str(src.path))


FORMATS = (Format("polyspec-trace", DESCRIPTION, is_trace_file, _read, order=12,
                  no_report=("file", "a polyspec trace: `polyspec validate DIR` predicts and "
                             "compares its captures (`polyspec fit` reads engine outputs and "
                             "GPU traces)")),)
