"""Which variant of speculative decoding a cascade is, decided in one place.

:func:`scheme_of` names the scheme of a :class:`~polyspec_theory.core.config.Cascade`:

* ``chain``: synchronous rounds of chain drafts (P1, :mod:`polyspec_theory.core.p1`);
* ``structured``: some pair drafts a token tree or has a draft-length schedule
  (:mod:`polyspec_theory.structures.structured`);
* ``batch``: a chain decoded in a lockstep serving batch of ``batch`` sequences (B2,
  :mod:`polyspec_theory.serving.batch`);
* ``async``: ``"mode": "async"``, the asynchronous pipeline (AS1 / AS3,
  :mod:`polyspec_theory.pipelines.asynchronous`).

Every layer keeps one table ``{scheme: handler}`` (the theory's is :data:`PREDICT`, the
simulators' is ``simulators.schemes.SIMULATE``, the commands' sit in the command modules) and
looks its handler up with :func:`handler`; a scheme a table lacks is refused there, with one
message (:func:`refuse`).
"""

from __future__ import annotations

import dataclasses

from polyspec_theory.core.config import MODES, Cascade
from polyspec_theory.core.p1 import predict_chain
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.pipelines.asynchronous import predict_async
from polyspec_theory.serving.batch import predict_batch
from polyspec_theory.structures.pairs import has_structures
from polyspec_theory.structures.structured import predict_structured

CHAIN = "chain"
STRUCTURED = "structured"
BATCH = "batch"
ASYNC = "async"
SCHEMES = (CHAIN, STRUCTURED, BATCH, ASYNC)

DESCRIPTIONS = {
    CHAIN: "synchronous chain drafts",
    STRUCTURED: "token trees or draft-length schedules",
    BATCH: "a lockstep serving batch",
    ASYNC: '"mode": "async", the asynchronous pipeline',
}

__all__ = ["CHAIN", "STRUCTURED", "BATCH", "ASYNC", "SCHEMES", "scheme_of", "scheme_named",
           "handler", "refuse", "in_mode", "predict", "PREDICT"]


def scheme_of(cascade, batch=None, *, batch_field: str = "batch") -> str:
    """The scheme of ``cascade`` (module docstring); ``batch``: a serving batch size (or a
    list of them) asked for, ``None`` for one sequence. An asynchronous cascade in a serving
    batch is refused, naming ``batch_field`` (no theory or simulator covers it)."""
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError("cascade", "must be a Cascade (use Cascade.from_config)")
    if cascade.mode == "async" and batch is not None:
        refuse(ASYNC, "the serving-batch theory", field=batch_field)
    return scheme_named(cascade.mode, structured=has_structures(cascade), batch=batch)


def scheme_named(mode: str = "sync", *, structured: bool = False, batch=None) -> str:
    """The scheme of a run described by its options (a command line before any cascade
    exists): ``"mode": "async"`` first, then a serving batch, then trees or schedules."""
    if mode == "async":
        return ASYNC
    if batch is not None:
        return BATCH
    if structured:
        return STRUCTURED
    return CHAIN


def refuse(scheme: str, what: str, field: str = "mode"):
    """The one refusal of a scheme that ``what`` (a command, a function) does not serve."""
    raise PolyspecInputError(field, f"{what} is not available for {DESCRIPTIONS[scheme]} "
                                    f"(scheme {scheme!r})")


def handler(table: dict, scheme: str, what: str, field: str = "mode"):
    """``table[scheme]``, or the refusal of :func:`refuse`."""
    if scheme not in SCHEMES:
        raise PolyspecInputError("scheme", f"must be one of {SCHEMES}, got {scheme!r}")
    if scheme not in table:
        refuse(scheme, what, field)
    return table[scheme]


def in_mode(cascade, mode: str | None, field: str = "mode"):
    """``cascade`` run in ``mode`` (``"sync"`` or ``"async"``; ``None``: its own). The
    synchronous twin of an asynchronous cascade drops its queues; a threshold 0 (verify what
    is ready) has no synchronous meaning and is refused, naming ``field``."""
    if mode is None or mode == cascade.mode:
        return cascade
    if mode not in MODES:
        raise PolyspecInputError(field, f"must be one of {MODES}, got {mode!r}")
    if mode == "async":
        return dataclasses.replace(cascade, mode="async")
    if any(t == 0 for t in cascade.thresholds):
        raise PolyspecInputError(field, "threshold 0 (verify what is ready) has no "
                                        "synchronous meaning; give thresholds >= 1")
    return dataclasses.replace(cascade, mode="sync", queues=None)


def _predict_chain(cascade, batch):
    return predict_chain(cascade)


def _predict_structured(cascade, batch):
    return predict_structured(cascade).prediction


def _predict_batch(cascade, batch):
    return predict_batch(cascade, batch)


def _predict_async(cascade, batch):
    return predict_async(cascade)


# the theory's table: chain -> P1 Prediction, structured -> its P1-shaped Prediction,
# batch -> B2 BatchPrediction, async -> AS1/AS3 AsyncPrediction (speedup None for n >= 3)
PREDICT = {CHAIN: _predict_chain, STRUCTURED: _predict_structured, BATCH: _predict_batch,
           ASYNC: _predict_async}


def predict(cascade, batch=None):
    """The exact prediction of ``cascade`` in its scheme (:data:`PREDICT`)."""
    scheme = scheme_of(cascade, batch)
    return handler(PREDICT, scheme, "the theory")(cascade, batch)
