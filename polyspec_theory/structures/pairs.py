"""Where trees and draft-length schedules sit in a cascade, and the acceptance laws they
need (docs/theory.md Part III-D): the checks a :class:`polyspec_theory.Cascade` runs on its
``"trees"`` and ``"schedules"`` and the parse of the structured acceptance laws."""

from __future__ import annotations

from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.errors import PolyspecInputError, require_keys
from polyspec_theory.structures.schedule import (
    ConfidenceLaw,
    ConfidenceSchedule,
    HFSchedule,
    schedule_from_config,
)
from polyspec_theory.structures.trees import ResidualLaw, SiblingLaw, TreeLaw, tree_from_config

__all__ = ["MAX_STATES", "structure_law_from_config", "check_structures", "has_structures",
           "pair_kind"]

MAX_STATES = 1024  # product of the HF schedules' state counts


def structure_law_from_config(spec, field: str = "acceptance") -> AcceptanceLaw:
    """``{"sibling": [...]}``, ``{"residual": {"target", "draft"[, "weights"]}}`` or
    ``{"confidence": {"beta": [a, b], "logistic": [b0, b1]}}``."""
    (key, value), = spec.items()
    f = f"{field}.{key}"
    if key == "sibling":
        return SiblingLaw(value, f)
    if key == "residual":
        require_keys(value, f, required=["target", "draft"], optional=["weights"])
        return ResidualLaw(value["target"], value["draft"], value.get("weights"), f)
    if key == "confidence":
        require_keys(value, f, required=["beta", "logistic"])
        return ConfidenceLaw(value["beta"], value["logistic"], f)
    raise PolyspecInputError(field, f"unknown law {key!r}")


def _per_pair(x, name: str, m: int, conv):
    if x is None:
        return None
    if isinstance(x, (str, bytes, dict)) or not isinstance(x, (list, tuple)):
        raise PolyspecInputError(
            name, f"must be a list with one entry per adjacent pair ({m}), null for a chain")
    if len(x) != m:
        raise PolyspecInputError(name, f"need one entry per adjacent pair ({m}), got {len(x)}")
    return tuple(None if e is None else conv(e, f"{name}[{i}]") for i, e in enumerate(x))


def check_structures(cascade) -> tuple:
    """Validate and normalize ``cascade.trees`` / ``cascade.schedules`` (module docstring
    for where each may sit); returns ``(trees, schedules)`` as tuples (or ``None``)."""
    m = cascade.n - 1
    trees = _per_pair(cascade.trees, "trees", m, tree_from_config)
    schedules = _per_pair(cascade.schedules, "schedules", m, schedule_from_config)
    states = 1
    for i in range(m):
        t = trees[i] if trees else None
        s = schedules[i] if schedules else None
        law = cascade.laws[i]
        if t is not None:
            if i != m - 1:
                raise PolyspecInputError(
                    f"trees[{i}]", f"only the bottom pair (trees[{m - 1}]) may draft a tree: "
                    f"the drafter of pair {i} is the sub-cascade below it, which emits one "
                    "sequence; use null")
            if s is not None:
                raise PolyspecInputError(
                    f"schedules[{i}]", "this pair drafts a tree: a tree has no draft length "
                    "to adapt (use null)")
            if not isinstance(law, TreeLaw) and not t.is_path:
                raise PolyspecInputError(
                    f"acceptance[{i}]", "a branching tree needs a tree acceptance law "
                    "({\"sibling\": [p1, ...]} or {\"residual\": {...}}); "
                    f"{law.family!r} describes a chain")
        if isinstance(s, ConfidenceSchedule):
            if i != m - 1:
                raise PolyspecInputError(
                    f"schedules[{i}]", "a confidence cut-off needs the drafter's own top "
                    f"probability: only the bottom pair (schedules[{m - 1}]) may have one")
            if not isinstance(law, ConfidenceLaw):
                raise PolyspecInputError(
                    f"acceptance[{i}]", "a confidence cut-off needs the joint law of "
                    "confidence and acceptance: {\"confidence\": {\"beta\": [a, b], "
                    "\"logistic\": [b0, b1]}}")
        if isinstance(s, HFSchedule):
            states *= s.max - s.min + 1
    if states > MAX_STATES:
        raise PolyspecInputError(
            "schedules", f"the HF schedules have {states} joint states (> {MAX_STATES})")
    return trees, schedules


def has_structures(cascade) -> bool:
    """True when some pair drafts a tree or has a schedule."""
    return any(x is not None for x in (cascade.trees or ())) or any(
        x is not None for x in (cascade.schedules or ()))


def pair_kind(cascade, i: int) -> str:
    """``"chain"``, ``"tree"``, ``"hf"`` or ``"confidence"`` for pair ``i``."""
    t = cascade.trees[i] if cascade.trees else None
    s = cascade.schedules[i] if cascade.schedules else None
    if t is not None:
        return "tree"
    if s is not None:
        return s.kind
    return "chain"
