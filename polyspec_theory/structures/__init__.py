"""Structured drafting: token trees (T1-T5), draft-length schedules, and P1 for cascades
that use them (docs/theory.md Part IV).
"""
