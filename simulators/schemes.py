"""The simulators' table of schemes (:mod:`polyspec_theory.schemes`): one Monte Carlo per
scheme, looked up in :data:`SIMULATE`.

* ``chain``: :func:`simulators.length.simulate_lengths` (``tokens`` in total);
* ``structured``: :func:`simulators.structures.simulate_structured`, each chain running the
  top-level rounds that about ``tokens`` tokens take (sized from the exact mean emitted per
  top-level round; sizing only);
* ``batch``: :func:`simulators.serving.simulate_serving` (lockstep batches of ``batch``);
* ``async``: :func:`simulators.asynchronous.simulate_async`, ``events`` completed actions
  (forwards, verifies) per chain (``tokens`` is not used: the pipeline's length is counted in
  events).
"""

from __future__ import annotations

import math

from polyspec_theory.schemes import ASYNC, BATCH, CHAIN, STRUCTURED, handler, scheme_of

ASYNC_EVENTS = 20_000  # default completed actions per chain of the asynchronous pipeline

__all__ = ["SIMULATE", "simulate", "structured_rounds", "ASYNC_EVENTS"]


def structured_rounds(cascade, tokens: int, chains: int) -> int:
    """Top-level rounds per chain for about ``tokens`` tokens over ``chains`` chains."""
    from polyspec_theory.structures.structured import predict_structured

    per_round = predict_structured(cascade).prediction.levels[0].mean_emitted
    return max(1, math.ceil(tokens / (chains * per_round)))


def _chain(cascade, tokens, seed, chains, batch, events, options):
    from simulators.length import simulate_lengths

    return simulate_lengths(cascade, tokens, seed, chains=chains, **options)


def _structured(cascade, tokens, seed, chains, batch, events, options):
    from simulators.structures import simulate_structured

    return simulate_structured(cascade, structured_rounds(cascade, tokens, chains), seed,
                               chains=chains, **options)


def _batch(cascade, tokens, seed, chains, batch, events, options):
    from simulators.serving import simulate_serving

    return simulate_serving(cascade, batch, tokens, seed, chains=chains, **options)


def _async(cascade, tokens, seed, chains, batch, events, options):
    from simulators.asynchronous import simulate_async

    return simulate_async(cascade, ASYNC_EVENTS if events is None else events, seed,
                          chains=chains, **options)


SIMULATE = {CHAIN: _chain, STRUCTURED: _structured, BATCH: _batch, ASYNC: _async}


def simulate(cascade, tokens: int, seed: int = 0, *, chains: int = 1024, batch=None,
             events: int | None = None, **options):
    """Monte Carlo of ``cascade`` in its scheme (:data:`SIMULATE`); ``options`` go to that
    scheme's simulator. ``events`` sizes the asynchronous pipeline only: given for another
    scheme it is refused, naming it (never ignored)."""
    from polyspec_theory.errors import PolyspecInputError, as_int

    scheme = scheme_of(cascade, batch)
    if events is not None and scheme != ASYNC:
        raise PolyspecInputError("events", f"sizes the asynchronous pipeline only; this "
                                 f"cascade is scheme {scheme!r}: give tokens instead")
    if scheme != ASYNC:  # checked here, before a scheme sizes its runs from it
        tokens = as_int(tokens, "tokens", low=1, high=10**13)
    chains = as_int(chains, "chains", low=2, high=2**24)
    return handler(SIMULATE, scheme, "the simulators")(
        cascade, tokens, seed, chains, batch, events, options)
