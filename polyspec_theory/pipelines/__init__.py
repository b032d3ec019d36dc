"""Pipelined cascades: every model runs continuously on its own device, drafting while the
level above verifies (docs/theory.md Part VI-AS, AS0-AS7)."""

# asynchronous (AS0-AS4) defines the rules AS7 (async_exact) builds on and, once they exist,
# imports AS7 for predict_async; importing it first keeps that order whichever module a
# caller names first.
from . import asynchronous  # noqa: F401
