"""Serving batches: lockstep batch predictions B0-B6 and the batch planner
(docs/theory.md Part III-C).
"""
