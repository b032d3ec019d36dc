"""``chain``: synchronous rounds of chain drafts, P1 (docs/theory.md §6), and R1 (Part
III-E) where acceptance runs over positions.

Every ``"mode": "sync"`` cascade no other synchronous scheme claims: no token tree, no
draft-length schedule, one sequence. Thresholds ``>= 1``. Its own field: ``"round"``, the
round policy, ``"p1"`` (default: the bonus position after a full round is never re-checked)
or ``"pipespec"`` (PipeSpec's ``ChainSpeculativeDecoder``, lookahead ``K = θ + 1``). A run
law (``{"run_hazard": [...], "tail": q}``) or PipeSpec's round is predicted by R1 (two
models, :func:`polyspec_theory.core.runs.predict_runs`); everything else by P1.
"""

from __future__ import annotations

from polyspec_theory.bounds.approximation import paper_approximation
from polyspec_theory.bounds.tails import phi_bounds
from polyspec_theory.core.explain import explain_prediction, law_text
from polyspec_theory.core.p1 import predict_chain
from polyspec_theory.core.runs import ROUND_TEXT, check_runs, predict_runs, uses_runs
from polyspec_theory.structures.schedule import ConfidenceLaw
from polyspec_theory.structures.structured import explain_structured, predict_structured
from polyspec_theory.structures.trees import TreeLaw

name = "chain"
description = "synchronous chain drafts"
mode = "sync"
threshold_floor = 1
fields = {"round": "is the round policy of synchronous chain drafts; not available for "
                   "{description} (scheme {name!r})"}
position_laws = True  # a run law (acceptance carried across rounds) is served: R1


def claims(features) -> bool:
    return True


def check(cascade) -> dict:
    check_runs(cascade)
    return {}


def predict(cascade):
    """P1 (:func:`polyspec_theory.core.p1.predict_chain`), or R1
    (:func:`polyspec_theory.core.runs.predict_runs`) for a run law or PipeSpec's round."""
    return predict_runs(cascade) if uses_runs(cascade) else predict_chain(cascade)


def report(cascade, options=None) -> dict:
    """P1's accounting, P2's bounds on every phi and the paper's Lemma 3.1 beside it (R1:
    its accounting and the round policy it used)."""
    if uses_runs(cascade):
        return _runs_report(cascade)
    pred = predict_chain(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    for i in range(1, cascade.n):
        below = pred.levels[i].emitted_pmf
        out["levels"][i]["phi_bounds"] = phi_bounds(below, cascade.thresholds[i - 1]).to_dict()
    out["approximation"] = paper_approximation(cascade, pred).to_dict()
    return out


def _runs_report(cascade) -> dict:
    pred = predict_runs(cascade)
    return {"config": cascade.to_config(), **pred.to_dict(),
            "method": "exact (R1: acceptance as runs over output positions, a Markov chain "
                      "over the carried age)",
            "time_base": cascade.time_unit or "model-cost units",
            "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}


def explain(cascade, options=None) -> str:
    """Where the time goes (tree or confidence laws on a chain: explained per pair as the
    structured scheme does; R1: the round policy and the carried state)."""
    if uses_runs(cascade):
        return _runs_text(cascade)
    if any(isinstance(law, TreeLaw | ConfidenceLaw) for law in cascade.laws):
        return explain_structured(cascade, predict_structured(cascade))
    pred = predict_chain(cascade)
    return explain_prediction(cascade, pred, paper_approximation(cascade, pred))


def _runs_text(cascade) -> str:
    pred = predict_runs(cascade)
    names = [m.name for m in cascade.models]
    unit = cascade.time_unit or "model-cost units"
    law = cascade.laws[0]
    what = (f"run law: hazard {', '.join(f'{h:.3g}' for h in law.hazard)}, tail {law.tail:.3g}"
            if getattr(law, "carries_age", False) else law_text(law))
    return "\n".join([
        f"Cascade {cascade.name!r}: {' <- '.join(names)}  (2 levels, threshold "
        f"{cascade.thresholds[0]})",
        f"Predicted speedup over autoregressive {names[0]}: {pred.speedup:.3f}x (exact R1: "
        f"acceptance as runs over output positions; time base: {unit}; baseline T_1(1))",
        f"Time per token: {pred.time_per_token:.4g} vs "
        f"{pred.autoregressive_time_per_token:.4g} autoregressive",
        f"Round policy: {ROUND_TEXT[pred.round]}",
        f"  {names[0]} <- {names[1]}: {what}; tokens per round {pred.tokens_per_round:.4f}, "
        f"time per round {pred.time_per_round:.4g}",
    ])
