"""The cascade description shared by predict, simulate, capture, validate and plan.

```
{"models": [{"name": "target", "cost": 1.0},
            {"name": "draft",  "cost": {"base": 0.02, "per_token": 0.0}}],
 "acceptance": [{"alpha": 0.75}],
 "thresholds": [7]}
```
Models target first; one acceptance law and one threshold per adjacent (verifier, drafter)
pair. Optional: ``"policy"`` (``"accumulate"`` — docs/theory.md §6, default — or ``"truncate"``),
``"name"``, ``"description"``, and per pair ``"trees"`` (``null`` or ``{"parents": [...]}``) and
``"schedules"`` (``null``, ``{"kind": "hf", ...}`` or ``{"kind": "confidence", ...}``): see
:mod:`polyspec_theory.structured`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._input import PolyspecInputError, as_int, require_keys
from .costs import CostCurve, cost_from_config
from .laws import AcceptanceLaw, law_from_config

__all__ = ["Model", "Cascade", "as_cascade", "POLICIES", "MAX_THRESHOLD", "DEFAULT_CASCADE"]

POLICIES = ("accumulate", "truncate")
MAX_THRESHOLD = 4096

# The default 4-level cascade (target <- mid <- small <- n-gram, costs in units of one target
# forward) as a config mapping; configs/default.json is the same cascade as a file.
DEFAULT_CASCADE = {
    "name": "default-4-level",
    "models": [
        {"name": "target", "cost": {"base": 1.0, "per_token": 0.03}},
        {"name": "mid", "cost": {"base": 0.25, "per_token": 0.01}},
        {"name": "small", "cost": {"base": 0.06, "per_token": 0.004}},
        {"name": "ngram", "cost": 0.005},
    ],
    "acceptance": [{"alpha": 0.85}, {"beta": [6.0, 1.5]}, {"positional": [0.8, 0.7, 0.6]}],
    "thresholds": [8, 4, 2],
}


@dataclass(frozen=True)
class Model:
    name: str
    cost: CostCurve


@dataclass(frozen=True)
class Cascade:
    """An n-level cascade: ``models[0]`` is the target, ``laws[i]``/``thresholds[i]`` belong
    to the pair (``models[i]`` verifier, ``models[i+1]`` drafter)."""

    models: tuple[Model, ...]
    laws: tuple[AcceptanceLaw, ...]
    thresholds: tuple[int, ...]
    policy: str = "accumulate"
    name: str = "cascade"
    trees: tuple | None = None  # per pair: None (chain) or a trees.Tree (structured.py)
    schedules: tuple | None = None  # per pair: None or an HF / confidence schedule

    def __post_init__(self):
        n = len(self.models)
        if n < 2:
            raise PolyspecInputError("models", f"need at least 2 models (target first), got {n}")
        if len(self.laws) != n - 1:
            raise PolyspecInputError(
                "acceptance", f"need one law per adjacent pair ({n - 1}), got {len(self.laws)}"
            )
        if len(self.thresholds) != n - 1:
            raise PolyspecInputError(
                "thresholds",
                f"need one threshold per adjacent pair ({n - 1}), got {len(self.thresholds)}",
            )
        object.__setattr__(
            self,
            "thresholds",
            tuple(
                as_int(t, f"thresholds[{i}]", low=1, high=MAX_THRESHOLD)
                for i, t in enumerate(self.thresholds)
            ),
        )
        for i, m in enumerate(self.models):
            if not isinstance(m, Model):
                raise PolyspecInputError(f"models[{i}]", "must be a Model")
        for i, law in enumerate(self.laws):
            if not isinstance(law, AcceptanceLaw):
                raise PolyspecInputError(f"acceptance[{i}]", "must be an AcceptanceLaw")
        if self.models[0].cost.t1 <= 0:
            raise PolyspecInputError("models[0].cost", "the target's cost T_1(1) must be > 0")
        if self.policy not in POLICIES:
            raise PolyspecInputError("policy", f"must be one of {POLICIES}, got {self.policy!r}")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise PolyspecInputError("models", f"model names must be unique, got {names}")
        if self.trees is not None or self.schedules is not None:
            from .structured import check_structures

            trees, schedules = check_structures(self)
            object.__setattr__(self, "trees", trees)
            object.__setattr__(self, "schedules", schedules)

    @property
    def n(self) -> int:
        return len(self.models)

    @property
    def costs(self) -> tuple[CostCurve, ...]:
        return tuple(m.cost for m in self.models)

    @classmethod
    def from_config(cls, cfg) -> Cascade:
        """Parse (and validate) a config mapping; errors name the offending field."""
        if not isinstance(cfg, dict):
            kind = type(cfg).__name__
            raise PolyspecInputError("config", f"must be an object/mapping, got {kind}")
        require_keys(cfg, "", required=["models", "acceptance", "thresholds"],
                   optional=["policy", "name", "description", "trees", "schedules"])
        models_cfg = cfg["models"]
        if not isinstance(models_cfg, list):
            raise PolyspecInputError("models", "must be a list of {name, cost} objects")
        models = []
        for i, m in enumerate(models_cfg):
            require_keys(m, f"models[{i}]", required=["name", "cost"])
            if not isinstance(m["name"], str) or not m["name"]:
                raise PolyspecInputError(f"models[{i}].name", "must be a non-empty string")
            models.append(Model(m["name"], cost_from_config(m["cost"], f"models[{i}].cost")))
        acc = cfg["acceptance"]
        if not isinstance(acc, list):
            raise PolyspecInputError("acceptance", "must be a list with one law per adjacent pair")
        laws = tuple(law_from_config(a, f"acceptance[{i}]") for i, a in enumerate(acc))
        th = cfg["thresholds"]
        if not isinstance(th, list):
            raise PolyspecInputError("thresholds", "must be a list of integers >= 1")
        name = cfg.get("name", "cascade")
        if not isinstance(name, str):
            raise PolyspecInputError("name", "must be a string")
        return cls(tuple(models), laws, tuple(th), cfg.get("policy", "accumulate"), name,
                   cfg.get("trees"), cfg.get("schedules"))

    def to_config(self) -> dict:
        out = {
            "name": self.name,
            "models": [{"name": m.name, "cost": m.cost.to_config()} for m in self.models],
            "acceptance": [law.to_config() for law in self.laws],
            "thresholds": list(self.thresholds),
        }
        if self.policy != "accumulate":
            out["policy"] = self.policy
        for key in ("trees", "schedules"):
            items = getattr(self, key)
            if items is not None:
                out[key] = [None if x is None else x.to_config() for x in items]
        return out

    def with_thresholds(self, thresholds) -> Cascade:
        return Cascade(self.models, self.laws, tuple(thresholds), self.policy, self.name,
                       self.trees, self.schedules)


def as_cascade(cascade, field: str = "cascade", *, chain_only: str | None = None) -> Cascade:
    """``cascade`` checked to be a :class:`Cascade`; with ``chain_only`` (the name of the
    computation) trees and schedules are refused, because that computation models chains
    only and would silently drop them."""
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError(field, "must be a Cascade (use Cascade.from_config)")
    if chain_only is not None:
        from .structured import has_structures

        if has_structures(cascade):
            raise PolyspecInputError(
                f"{field}.trees" if cascade.trees and any(t is not None for t in cascade.trees)
                else f"{field}.schedules",
                f"{chain_only} models chain cascades only; this cascade drafts a tree or "
                "follows a draft-length schedule")
    return cascade
