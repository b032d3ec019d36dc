"""A pool of models for the planner (docs/theory.md E2): models with cost curves, the acceptance
law of every pair that may be adjacent, and the largest threshold searched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from polyspec_theory.core.config import (
    POLICIES,
    Cascade,
    Model,
    acceptance_from_config,
    check_cost_scale,
    model_from_config,
)
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.errors import PolyspecInputError, as_int, require_keys

__all__ = [
    "MAX_POOL_MODELS",
    "MAX_PLAN_THRESHOLD",
    "DEFAULT_MAX_THRESHOLD",
    "as_pool",
    "Pool",
]

MAX_POOL_MODELS = 10  # exhaustive over orders: the number of chains grows factorially
MAX_PLAN_THRESHOLD = 256
DEFAULT_MAX_THRESHOLD = 16


# --------------------------------------------------------------------------------------
# the pool
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Pool:
    """Models (target first), pair laws ``{(verifier, drafter): law}``, ``max_threshold``."""
    models: tuple[Model, ...]
    pairs: Mapping[tuple[str, str], AcceptanceLaw]
    max_threshold: int = DEFAULT_MAX_THRESHOLD
    policy: str = "accumulate"
    name: str = "pool"
    time_unit: str | None = None  # unit of every cost (None: model-cost units)
    engine: str | None = None  # the decoder that will run the plan (None: not named)

    def __post_init__(self):
        models = tuple(self.models)
        _check_model_count(models)
        for i, m in enumerate(models):
            if not isinstance(m, Model):
                raise PolyspecInputError(f"models[{i}]", "must be a Model")
            _check_name(m.name, f"models[{i}].name")
        names = [m.name for m in models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PolyspecInputError("models", f"duplicate model name(s): {', '.join(dup)}")
        if models[0].cost.t1 <= 0:
            raise PolyspecInputError("models[0].cost", "the target's cost T_1(1) must be > 0")
        if not isinstance(self.pairs, Mapping):
            raise PolyspecInputError("acceptance", "must map (verifier, drafter) to a law")
        pairs = {}
        known = set(names)
        for key, law in self.pairs.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise PolyspecInputError("acceptance", f"key {key!r} must be (verifier, drafter)")
            v, d = key
            where = f"acceptance.{v}|{d}"
            for role, nm in (("verifier", v), ("drafter", d)):
                if nm not in known:
                    raise PolyspecInputError(
                        where, f"unknown {role} {nm!r}; models are: {', '.join(names)}"
                    )
            if v == d:
                raise PolyspecInputError(where, "a model cannot verify its own drafts")
            if d == names[0]:
                raise PolyspecInputError(
                    where, f"the target {names[0]!r} cannot be a drafter (it is always on top)"
                )
            if not isinstance(law, AcceptanceLaw):
                raise PolyspecInputError(where, "must be an AcceptanceLaw")
            pairs[(v, d)] = law
        if not any(v == names[0] for v, _ in pairs):
            raise PolyspecInputError(
                "acceptance", f"no pair with the target as verifier ('{names[0]}|<drafter>'): "
                "no cascade is possible"
            )
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(
            self, "max_threshold",
            as_int(self.max_threshold, "max_threshold", low=1, high=MAX_PLAN_THRESHOLD),
        )
        if self.policy not in POLICIES:
            raise PolyspecInputError("policy", f"must be one of {POLICIES}, got {self.policy!r}")
        if not isinstance(self.name, str):
            raise PolyspecInputError("name", "must be a string")
        if self.time_unit is not None and (not isinstance(self.time_unit, str)
                                           or not self.time_unit.strip()):
            raise PolyspecInputError("time_unit",
                                     f"must be a non-empty string, got {self.time_unit!r}")
        # the widest block any chain of the pool can verify (accumulate: theta + the block
        # below, level by level)
        widest = self.max_threshold * (len(models) - 1) + 1
        check_cost_scale(models, [widest] * len(models))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    @property
    def target(self) -> str:
        return self.models[0].name

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise PolyspecInputError("chain", f"unknown model {name!r}; models are: "
                                 f"{', '.join(self.names)}")

    def law(self, verifier: str, drafter: str) -> AcceptanceLaw:
        try:
            return self.pairs[(verifier, drafter)]
        except KeyError:
            raise PolyspecInputError(
                "chain", f"the pool has no acceptance law for '{verifier}|{drafter}'"
            ) from None

    def as_chain(self, chain) -> tuple[str, ...]:
        """A valid chain: target first, >= 2 distinct known models, every pair in the pool."""
        if isinstance(chain, str) or not hasattr(chain, "__iter__"):
            raise PolyspecInputError("chain", f"must be a list of model names, got {chain!r}")
        chain = tuple(chain)
        if len(chain) < 2:
            raise PolyspecInputError("chain", "needs the target and at least one drafter")
        for nm in chain:
            self.model(nm)
        if chain[0] != self.target:
            raise PolyspecInputError("chain", f"must start with the target {self.target!r}")
        if len(set(chain)) != len(chain):
            raise PolyspecInputError("chain", f"models must be distinct, got {list(chain)}")
        for v, d in zip(chain[:-1], chain[1:], strict=True):
            self.law(v, d)
        return chain

    def cascade(self, chain, thresholds) -> Cascade:
        """The :class:`Cascade` of ``chain`` (target first) with ``thresholds``."""
        chain = self.as_chain(chain)
        return Cascade(
            tuple(self.model(nm) for nm in chain),
            tuple(self.law(v, d) for v, d in zip(chain[:-1], chain[1:], strict=True)),
            tuple(thresholds),
            self.policy,
            name=" <- ".join(chain),
            time_unit=self.time_unit,
        )

    @classmethod
    def from_config(cls, cfg) -> Pool:
        """Parse and validate a pool mapping (errors name the offending field)::

            {"models": [{"name": "target", "cost": 1.0}, {"name": "m7", "cost": 0.3}, ...],
             "acceptance": {"target|m7": {"alpha": 0.82}, "m7|m1": {"beta": [3, 1.2]}},
             "max_threshold": 16, "policy": "accumulate"}
        """
        if isinstance(cfg, Mapping) and "thresholds" in cfg:
            raise PolyspecInputError("pool", "this is a cascade config (thresholds, one law per "
                                     "pair in a list); plan needs a pool: models and "
                                     "\"acceptance\" keyed \"verifier|drafter\" "
                                     "(docs/usage.md, the pool format); `polyspec predict` "
                                     "runs a cascade")
        require_keys(cfg, "", required=["models", "acceptance"],
                   optional=["max_threshold", "policy", "name", "description", "time_unit",
                             "engine"])
        engine = cfg.get("engine")
        if engine is not None and (not isinstance(engine, str) or not engine.strip()):
            raise PolyspecInputError("engine", f"must be the name of the decoder that runs the "
                                     f"plan (e.g. \"vllm\", \"pipespec\"), got {engine!r}")
        mcfg = cfg["models"]
        if not isinstance(mcfg, list):
            raise PolyspecInputError("models", "must be a list of {name, cost} objects, "
                                     "target first")
        models = []
        for i, m in enumerate(mcfg):
            require_keys(m, f"models[{i}]", required=["name", "cost"], optional=["overhead"])
            _check_name(m["name"], f"models[{i}].name")
            models.append(model_from_config(m, f"models[{i}]"))
        _check_model_count(models)
        if models[0].cost.t1 <= 0:
            raise PolyspecInputError("models[0].cost", "the target's cost T_1(1) must be > 0")
        names = [m.name for m in models]
        seen = set()
        for i, nm in enumerate(names):
            if nm in seen:
                raise PolyspecInputError(f"models[{i}].name", f"duplicate model name {nm!r}")
            seen.add(nm)
        acc = cfg["acceptance"]
        if not isinstance(acc, dict):
            raise PolyspecInputError(
                "acceptance", "must be an object keyed \"verifier|drafter\" (e.g. "
                "{\"target|m7\": {\"alpha\": 0.8}})"
            )
        if not acc:
            raise PolyspecInputError("acceptance", "is empty: no pair can be adjacent")
        pairs = {}
        for key, spec in acc.items():
            where = f"acceptance.{key}"
            if not isinstance(key, str) or key.count("|") != 1:
                raise PolyspecInputError(
                    where, "key must be \"verifier|drafter\" (two model names joined by '|')"
                )
            v, d = key.split("|")
            for role, nm in (("verifier", v), ("drafter", d)):
                if nm not in seen:
                    raise PolyspecInputError(
                        where, f"unknown {role} {nm!r}; models are: {', '.join(names)}"
                    )
            pairs[(v, d)] = acceptance_from_config(spec, None, where)
        return cls(
            tuple(models),
            pairs,
            cfg.get("max_threshold", DEFAULT_MAX_THRESHOLD),
            cfg.get("policy", "accumulate"),
            cfg.get("name", "pool"),
            cfg.get("time_unit"),
            engine,
        )

    def to_config(self) -> dict:
        out = {
            "name": self.name,
            "models": [{"name": m.name, "cost": m.cost.to_config(),
                        **({"overhead": m.overhead} if m.overhead else {})}
                       for m in self.models],
            "acceptance": {f"{v}|{d}": law.to_config() for (v, d), law in self.pairs.items()},
            "max_threshold": self.max_threshold,
        }
        if self.policy != "accumulate":
            out["policy"] = self.policy
        if self.time_unit is not None:
            out["time_unit"] = self.time_unit
        if self.engine is not None:
            out["engine"] = self.engine
        return out


def _check_model_count(models) -> None:
    if len(models) < 2:
        raise PolyspecInputError(
            "models", f"need the target and at least one drafter, got {len(models)} model(s)")
    if len(models) > MAX_POOL_MODELS:
        raise PolyspecInputError(
            "models", f"at most {MAX_POOL_MODELS} models (the search is exhaustive over "
            f"orders), got {len(models)}")


def _check_name(name, field: str) -> str:
    if not isinstance(name, str) or not name:
        raise PolyspecInputError(field, "must be a non-empty string")
    if "|" in name:
        raise PolyspecInputError(field, f"must not contain '|' (pair keys use it), got {name!r}")
    if name != name.strip():
        raise PolyspecInputError(field, f"must not start or end with spaces, got {name!r}")
    return name


def as_pool(pool) -> Pool:
    if isinstance(pool, Pool):
        return pool
    if isinstance(pool, dict):
        return Pool.from_config(pool)
    raise PolyspecInputError("pool", "must be a Pool or a pool mapping")
