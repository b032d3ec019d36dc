"""Our own traces (``polyspec capture``): the ``polyspec-trace`` JSON-lines schema
(:mod:`validation.traces.schema`), read and checked record by record by
:mod:`validation.traces.records`; a single-stream trace is a
:class:`~validation.traces.dataset.Capture`, a batched one a
:class:`~validation.traces.batch.BatchCapture`."""

from __future__ import annotations

import json

import numpy as np

from polyspec_theory.core.runs import run_law_report
from polyspec_theory.errors import PolyspecInputError
from validation.formats import Evidence, Format, PairEvidence, Source
from validation.traces.dataset import Capture
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
    from validation.schemes import get, scheme_of_trace

    pairs = []
    scheme = scheme_of_trace(cap.header)
    run_exposures = getattr(get(scheme), "run_exposures", None)  # the scheme's R2 exposures
    for i, r in enumerate(getattr(cap, "rounds", ()) if isinstance(cap, Capture) else ()):
        per_prompt = [r.prompt == p for p in np.unique(r.prompt)]
        rounds = tuple(r.L[m] for m in per_prompt)
        exposures = (None if run_exposures is None else run_exposures(
            [list(zip(r.G[m], r.A[m], strict=True)) for m in per_prompt]))
        pairs.append(PairEvidence(verifier=cap.models[i], drafter=cap.models[i + 1],
                                  counts=r.counts(), rounds=rounds, exposures=exposures))
    return Evidence(path=path, format="polyspec-trace", description=DESCRIPTION, data=cap,
                    pairs=tuple(pairs), models=cap.models,
                    scheme=scheme,
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


def fit_report(ev: Evidence) -> dict:
    """``polyspec fit`` on a capture whose scheme gives its rounds' exposures (its
    ``run_exposures``: the chain's are P1's, :func:`polyspec_theory.core.runs.p1_exposures`):
    per pair its rounds, accepted drafts and the run law of its rounds over positions (R2,
    with R3's test); the top pair (the target's) on top. Other schemes' traces are refused
    (their blocks are not P1's)."""
    cap = ev.data
    if not ev.pairs or any(pe.exposures is None for pe in ev.pairs):
        raise PolyspecInputError("file", f"a {ev.scheme} trace: `polyspec fit` reads the "
                                 "rounds of chain captures (`polyspec validate DIR` predicts "
                                 "this one)")
    pairs = []
    for pe in ev.pairs:
        acc = np.concatenate(pe.rounds)
        law = run_law_report(*pe.exposures, "p1")
        law["run_law_rounds"] = law.pop("rounds")  # the rounds seen whole, from age 0
        pairs.append({"verifier": pe.verifier, "drafter": pe.drafter, "rounds": int(acc.size),
                      "accepted": int((acc - 1).sum()),
                      "mean_acceptance_length": float(acc.mean()), **law})
    top = {k: v for k, v in pairs[0].items() if k not in ("verifier", "drafter")}
    return {"format": "polyspec-trace", "format_description": DESCRIPTION, "source": cap.name,
            "models": list(cap.models), "thresholds": list(cap.thresholds), **top,
            "pairs": pairs, "warnings": list(cap.notes)}


FORMATS = (Format("polyspec-trace", DESCRIPTION, is_trace_file, _read, order=12,
                  report=fit_report),)
