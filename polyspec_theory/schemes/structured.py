"""``structured``: some pair drafts a token tree or follows a draft-length schedule (T5,
A4; docs/theory.md Part III-D). Claimed by a ``"mode": "sync"`` cascade with a non-null
entry in ``"trees"`` or ``"schedules"`` (their checks: :func:`polyspec_theory.structures.
pairs.check_structures`, run by every cascade that gives them)."""

from __future__ import annotations

from polyspec_theory.structures.structured import (
    explain_structured,
    predict_structured,
    structured_report,
)

name = "structured"
description = "token trees or draft-length schedules"
mode = "sync"
threshold_floor = 1
fields: dict[str, str] = {}


def claims(features) -> bool:
    return features.structured


def check(cascade) -> dict:
    return {}


def predict(cascade):
    """The P1-shaped prediction of :func:`predict_structured`."""
    return predict_structured(cascade).prediction


def report(cascade, options=None) -> dict:
    return structured_report(cascade)


def explain(cascade, options=None) -> str:
    return explain_structured(cascade, predict_structured(cascade))
