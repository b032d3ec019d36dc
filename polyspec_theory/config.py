"""The cascade description shared by predict, simulate, capture, validate and plan.

```
{"models": [{"name": "target", "cost": 1.0},
            {"name": "draft",  "cost": {"base": 0.02, "per_token": 0.0}}],
 "acceptance": [{"alpha": 0.75}],
 "thresholds": [7]}
```
Models target first; one acceptance law and one threshold per adjacent (verifier, drafter)
pair. Optional: ``"policy"`` (``"accumulate"`` — docs/theory.md §6, default — or ``"truncate"``),
``"name"``, ``"description"``, ``"time_unit"`` (the unit of every cost, e.g. ``"ms"``; printed
as the time base), per model ``"overhead"``: a fixed time per verification round of that
model (added to ``E[C_i]`` in P1, never to the autoregressive baseline ``T_1(1)``; see
docs/theory.md Part III-B), and per pair ``"trees"`` (``null`` or ``{"parents": [...]}``) and
``"schedules"`` (``null``, ``{"kind": "hf", ...}`` or ``{"kind": "confidence", ...}``): see
:mod:`polyspec_theory.structured`. Acceptance may also be ``{"tau": x}``: the mean acceptance
length ``E[L]`` (bonus token included) measured at this pair's threshold, converted to the iid
law with that capped mean (:func:`acceptance_from_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .costs import CostCurve, cost_from_config
from .errors import PolyspecInputError, as_int, as_real, require_keys
from .laws import AcceptanceLaw, IIDGeometric, law_from_config

__all__ = ["Model", "Cascade", "as_cascade", "POLICIES", "MAX_THRESHOLD", "DEFAULT_CASCADE",
           "acceptance_from_config", "model_from_config", "MAX_COST_RATIO", "check_cost_scale"]

POLICIES = ("accumulate", "truncate")
MODES = ("sync", "async")
MAX_THRESHOLD = 4096
# Costs only matter relative to each other. The target's T(1) must lie in
# [1/MAX_COST_RATIO, MAX_COST_RATIO] and no cost may exceed MAX_COST_RATIO times it, so that
# every sum of forward times P1 and the simulators form stays far inside double precision.
MAX_COST_RATIO = 1e100

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


def check_cost_scale(models, m_max) -> None:
    """Refuse costs that would overflow double precision (:data:`MAX_COST_RATIO`): the
    target's ``T(1)`` and every ``T_i(m)`` for ``m = 1..m_max[i]`` relative to it. Errors name
    ``models[i].cost``."""
    import numpy as np

    t1 = models[0].cost.t1
    if not 1.0 / MAX_COST_RATIO <= t1 <= MAX_COST_RATIO:
        raise PolyspecInputError(
            "models[0].cost", f"the target's T(1) = {t1:g} is outside [{1 / MAX_COST_RATIO:g}, "
            f"{MAX_COST_RATIO:g}]: costs only matter relative to each other, give them in "
            "units of one target forward (target cost 1.0)")
    for i, (m, mm) in enumerate(zip(models, m_max, strict=True)):
        with np.errstate(over="ignore", invalid="ignore"):
            vals = np.asarray(m.cost(np.arange(1, int(mm) + 1)), dtype=np.float64) / t1
        worst = float(np.max(vals)) if np.isfinite(vals).all() else np.inf
        if not worst <= MAX_COST_RATIO:
            raise PolyspecInputError(
                f"models[{i}].cost", f"T(m) for m up to {int(mm)} reaches {worst:g} times the "
                f"target's T(1) (at most {MAX_COST_RATIO:g}): out of double-precision range")
        over = float(getattr(m, "overhead", 0.0)) / t1
        if not over <= MAX_COST_RATIO:
            raise PolyspecInputError(
                f"models[{i}].overhead", f"{over:g} times the target's T(1) (at most "
                f"{MAX_COST_RATIO:g}): out of double-precision range")


@dataclass(frozen=True)
class Model:
    """A model: ``cost`` is ``T(m)``; ``overhead`` a fixed time per verification round this
    model performs (kernel launches, synchronisation, sampling), >= 0. A model that verifies
    nothing (the last of a cascade) never incurs it."""

    name: str
    cost: CostCurve
    overhead: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "overhead", as_real(self.overhead, "overhead", low=0.0))


def model_from_config(m, field: str) -> Model:
    """``{"name": ..., "cost": ..., "overhead": o (optional, default 0)}``."""
    require_keys(m, field, required=["name", "cost"], optional=["overhead"])
    if not isinstance(m["name"], str) or not m["name"]:
        raise PolyspecInputError(f"{field}.name", "must be a non-empty string")
    overhead = as_real(m.get("overhead", 0.0), f"{field}.overhead", low=0.0)
    return Model(m["name"], cost_from_config(m["cost"], f"{field}.cost"), overhead)


def acceptance_from_config(spec, threshold=None, field: str = "acceptance") -> AcceptanceLaw:
    """A law from a config entry: any :func:`law_from_config` form, or ``{"tau": x}`` /
    ``{"tau": x, "threshold": g}``: the mean acceptance length ``E[L]`` (bonus token
    included, the engines' convention) measured with blocks of ``g`` drafted tokens (default
    ``threshold``, the pair's threshold), converted to the iid law whose capped mean is
    ``E[A | g] = x - 1`` (:meth:`IIDGeometric.from_mean`). ``{"fit": FILE}`` must have been
    resolved by the loader (``polyspec.api``) before this point."""
    if isinstance(spec, dict) and "fit" in spec:
        raise PolyspecInputError(f"{field}.fit", "a fit file is read by the loader "
                                 "(polyspec.api.load_cascade), not by the theory")
    if not (isinstance(spec, dict) and "tau" in spec):
        return law_from_config(spec, field)
    require_keys(spec, field, required=["tau"], optional=["threshold"])
    if "threshold" in spec:
        g = as_int(spec["threshold"], f"{field}.threshold", low=1, high=MAX_THRESHOLD)
    elif threshold is None:
        raise PolyspecInputError(f"{field}.threshold", "required with tau here (the draft "
                                 "length at which tau was measured)")
    else:
        g = as_int(threshold, f"{field}.threshold", low=1, high=MAX_THRESHOLD)
    tau = as_real(spec["tau"], f"{field}.tau", low=1.0, high=g + 1.0)
    return IIDGeometric.from_mean(tau - 1.0, g)


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
    time_unit: str | None = None  # unit of every cost (None: model-cost units)
    mode: str = "sync"  # "sync" (P1) or "async" (pipelined, docs/theory.md Part VI-AS)
    queues: tuple | None = None  # async: per pair, max drafts ahead (None entry: unbounded)

    def __post_init__(self):
        n = len(self.models)
        if self.mode not in MODES:
            raise PolyspecInputError("mode", f"must be one of {MODES}, got {self.mode!r}")
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
                as_int(t, f"thresholds[{i}]", low=0 if self.mode == "async" else 1,
                       high=MAX_THRESHOLD)
                for i, t in enumerate(self.thresholds)
            ),
        )
        if self.mode == "async" or self.queues is not None:
            from .asynchronous import check_async_cascade

            object.__setattr__(self, "queues", check_async_cascade(self))
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
        from .polybasic import block_bounds

        gmax = block_bounds(self.thresholds, self.policy)
        check_cost_scale(self.models, [g + 1 for g in gmax] + [1])

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
                   optional=["policy", "name", "description", "trees", "schedules",
                             "time_unit", "mode", "queue"])
        mode = cfg.get("mode", "sync")
        if mode not in MODES:
            raise PolyspecInputError("mode", f"must be one of {MODES}, got {mode!r}")
        models_cfg = cfg["models"]
        if not isinstance(models_cfg, list):
            raise PolyspecInputError("models", "must be a list of {name, cost} objects")
        models = [model_from_config(m, f"models[{i}]") for i, m in enumerate(models_cfg)]
        if models and models[-1].overhead:
            raise PolyspecInputError(
                f"models[{len(models) - 1}].overhead", "the last model verifies nothing, so it "
                "has no verification rounds; fold a per-forward overhead into its cost")
        th = cfg["thresholds"]
        if not isinstance(th, list):
            raise PolyspecInputError("thresholds", "must be a list of integers >= 1")
        th = [as_int(t, f"thresholds[{i}]", low=0 if mode == "async" else 1, high=MAX_THRESHOLD)
              for i, t in enumerate(th)]
        acc = cfg["acceptance"]
        if not isinstance(acc, list):
            raise PolyspecInputError("acceptance", "must be a list with one law per adjacent pair")
        laws = tuple(acceptance_from_config(a, th[i] if i < len(th) else None,
                                            f"acceptance[{i}]") for i, a in enumerate(acc))
        name = cfg.get("name", "cascade")
        if not isinstance(name, str):
            raise PolyspecInputError("name", "must be a string")
        unit = cfg.get("time_unit")
        if unit is not None and (not isinstance(unit, str) or not unit.strip()):
            raise PolyspecInputError("time_unit", f"must be a non-empty string, got {unit!r}")
        queues = cfg.get("queue")
        if queues is not None and mode != "async":
            raise PolyspecInputError("queue", 'bounds the drafters of "mode": "async" only')
        return cls(tuple(models), laws, tuple(th), cfg.get("policy", "accumulate"), name,
                   cfg.get("trees"), cfg.get("schedules"), unit, mode,
                   None if queues is None else queues)

    def to_config(self) -> dict:
        out = {
            "name": self.name,
            "models": [{"name": m.name, "cost": m.cost.to_config(),
                        **({"overhead": m.overhead} if m.overhead else {})}
                       for m in self.models],
            "acceptance": [law.to_config() for law in self.laws],
            "thresholds": list(self.thresholds),
        }
        if self.policy != "accumulate":
            out["policy"] = self.policy
        for key in ("trees", "schedules"):
            items = getattr(self, key)
            if items is not None:
                out[key] = [None if x is None else x.to_config() for x in items]
        if self.time_unit is not None:
            out["time_unit"] = self.time_unit
        if self.mode != "sync":
            out["mode"] = self.mode
        if self.queues is not None and any(q is not None for q in self.queues):
            out["queue"] = list(self.queues)
        return out

    def with_thresholds(self, thresholds) -> Cascade:
        return dataclasses.replace(self, thresholds=tuple(thresholds))


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
