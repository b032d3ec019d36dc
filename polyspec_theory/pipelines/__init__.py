"""Pipelined cascades: every model runs continuously on its own device, drafting while the
level above verifies (docs/theory.md Part VI-AS, AS0-AS5)."""
