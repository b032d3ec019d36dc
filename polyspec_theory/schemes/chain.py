"""``chain``: synchronous rounds of chain drafts, P1 (docs/theory.md §6).

Every ``"mode": "sync"`` cascade no other synchronous scheme claims: no token tree, no
draft-length schedule, one sequence. Thresholds ``>= 1``; no fields of its own.
"""

from __future__ import annotations

from polyspec_theory.bounds.approximation import paper_approximation
from polyspec_theory.bounds.tails import phi_bounds
from polyspec_theory.core.explain import explain_prediction
from polyspec_theory.core.p1 import predict_chain
from polyspec_theory.structures.schedule import ConfidenceLaw
from polyspec_theory.structures.structured import explain_structured, predict_structured
from polyspec_theory.structures.trees import TreeLaw

name = "chain"
description = "synchronous chain drafts"
mode = "sync"
threshold_floor = 1
fields: dict[str, str] = {}


def claims(features) -> bool:
    return True


def check(cascade) -> dict:
    return {}


def predict(cascade):
    """P1 (:func:`polyspec_theory.core.p1.predict_chain`)."""
    return predict_chain(cascade)


def report(cascade, options=None) -> dict:
    """P1's accounting, P2's bounds on every phi and the paper's Lemma 3.1 beside it."""
    pred = predict_chain(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    for i in range(1, cascade.n):
        below = pred.levels[i].emitted_pmf
        out["levels"][i]["phi_bounds"] = phi_bounds(below, cascade.thresholds[i - 1]).to_dict()
    out["approximation"] = paper_approximation(cascade, pred).to_dict()
    return out


def explain(cascade, options=None) -> str:
    """Where the time goes (tree or confidence laws on a chain: explained per pair as the
    structured scheme does)."""
    if any(isinstance(law, TreeLaw | ConfidenceLaw) for law in cascade.laws):
        return explain_structured(cascade, predict_structured(cascade))
    pred = predict_chain(cascade)
    return explain_prediction(cascade, pred, paper_approximation(cascade, pred))
