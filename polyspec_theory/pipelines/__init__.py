"""Pipelined cascades: every model runs continuously on its own device, drafting while the
level above verifies (docs/theory.md Part VI-AS, AS0-AS7): the rules (:mod:`.async_rules`),
two levels exactly and the bounds (:mod:`.asynchronous`), any depth exactly
(:mod:`.async_exact`)."""
