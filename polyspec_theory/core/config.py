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
:mod:`polyspec_theory.structures.structured`. Acceptance may also be ``{"tau": x}``: the mean
acceptance
length ``E[L]`` (bonus token included) measured at this pair's threshold, converted to the iid
law with that capped mean (:func:`acceptance_from_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from polyspec_theory.core.costs import CostCurve, cost_from_config
from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric, chain_law_from_config
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.core.regimes import RegimeLaw
from polyspec_theory.core.runs import RunLaw
from polyspec_theory.errors import PolyspecInputError, as_int, as_real, require_keys
from polyspec_theory.schemes import DEFAULT_MODE, Features, decide, modes
from polyspec_theory.schemes import fields as scheme_fields
from polyspec_theory.structures.pairs import (
    check_structures,
    has_structures,
    structure_law_from_config,
)

__all__ = ["Model", "Cascade", "as_cascade", "POLICIES", "MAX_THRESHOLD", "DEFAULT_CASCADE",
           "law_from_config", "acceptance_from_config", "model_from_config", "MAX_COST_RATIO",
           "check_cost_scale", "check_async_cascade", "COMMON_FIELDS"]

POLICIES = ("accumulate", "truncate")
# the config keys of every scheme; a scheme's own keys come from its module
# (polyspec_theory.schemes: ``fields``)
COMMON_FIELDS = ("policy", "name", "description", "trees", "schedules", "time_unit", "mode")
# scheme-owned config keys kept in an attribute of their own (the rest sit in ``options``)
_ATTRIBUTES = {"queue": "queues", "batch": "batch"}
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


def law_from_config(spec, field: str = "acceptance") -> AcceptanceLaw:
    """Any acceptance law from its config: a chain family
    (:func:`polyspec_theory.core.laws.chain_law_from_config`), ``{"regime": {...}}``
    (:class:`~polyspec_theory.core.regimes.RegimeLaw`), ``{"run_hazard": [...], "tail": q}``
    (:class:`~polyspec_theory.core.runs.RunLaw`, R1) or a tree / confidence law
    (:func:`polyspec_theory.structures.pairs.structure_law_from_config`). An
    :class:`AcceptanceLaw` passes through."""
    if isinstance(spec, dict) and list(spec) == ["regime"]:
        return RegimeLaw.from_config(spec["regime"], f"{field}.regime")
    if isinstance(spec, dict) and "run_hazard" in spec:
        return RunLaw.from_config(spec, field)
    if isinstance(spec, dict) and list(spec) in (["sibling"], ["residual"], ["confidence"]):
        return structure_law_from_config(spec, field)
    return chain_law_from_config(spec, field)


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
    to the pair (``models[i]`` verifier, ``models[i+1]`` drafter). ``scheme`` (not an
    argument) is decided when the cascade is built (:func:`polyspec_theory.schemes.decide`):
    the threshold floor and the scheme's own fields and checks come from that scheme."""

    models: tuple[Model, ...]
    laws: tuple[AcceptanceLaw, ...]
    thresholds: tuple[int, ...]
    policy: str = "accumulate"
    name: str = "cascade"
    trees: tuple | None = None  # per pair: None (chain) or a trees.Tree (structured.py)
    schedules: tuple | None = None  # per pair: None or an HF / confidence schedule
    time_unit: str | None = None  # unit of every cost (None: model-cost units)
    mode: str = DEFAULT_MODE  # a mode of the registered schemes ("sync": P1, "async": VI-AS)
    queues: tuple | None = None  # async: per pair, max drafts ahead (None entry: unbounded)
    batch: int | None = None  # decoded in a lockstep serving batch of this size (B2)
    options: tuple = ()  # other scheme-owned config fields: ((key, value), ...)
    scheme: str = field(init=False, default="chain")

    def __post_init__(self):
        n = len(self.models)
        scheme = decide(Features(self.mode, has_structures(self), self.batch))
        object.__setattr__(self, "scheme", scheme.name)
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
                as_int(t, f"thresholds[{i}]", low=scheme.threshold_floor, high=MAX_THRESHOLD)
                for i, t in enumerate(self.thresholds)
            ),
        )
        self._check_owned_fields(scheme)
        for i, law in enumerate(self.laws):
            if getattr(law, "carries_age", False) and not getattr(scheme, "position_laws",
                                                                   False):
                raise PolyspecInputError(
                    f"acceptance[{i}]", f"a run law (acceptance carried across rounds, R1) "
                    f"is not available for {scheme.description} (scheme {scheme.name!r})")
        for attr, value in scheme.check(self).items():
            object.__setattr__(self, attr, value)
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
            trees, schedules = check_structures(self)
            object.__setattr__(self, "trees", trees)
            object.__setattr__(self, "schedules", schedules)
        gmax = block_bounds(self.thresholds, self.policy)
        check_cost_scale(self.models, [g + 1 for g in gmax] + [1])

    def _check_owned_fields(self, scheme) -> None:
        """A field another scheme owns is refused, with that field's own line."""
        if not isinstance(self.options, tuple):
            raise PolyspecInputError("options", "must be a tuple of (key, value) pairs")
        for key, text in scheme_fields().items():
            if key not in scheme.fields and self.option(key) is not None:
                raise PolyspecInputError(key, text.format(description=scheme.description,
                                                          name=scheme.name))

    def option(self, key: str, default=None):
        """The value of the scheme-owned config field ``key`` (``default`` when unset)."""
        if key in _ATTRIBUTES:
            v = getattr(self, _ATTRIBUTES[key])
            return default if v is None else v
        return dict(self.options).get(key, default)

    @property
    def n(self) -> int:
        return len(self.models)

    @property
    def costs(self) -> tuple[CostCurve, ...]:
        return tuple(m.cost for m in self.models)

    @classmethod
    def from_config(cls, cfg) -> Cascade:
        """Parse (and validate) a config mapping; errors name the offending field. The
        scheme is decided here (:func:`polyspec_theory.schemes.decide`) and stored as
        ``scheme``."""
        if not isinstance(cfg, dict):
            kind = type(cfg).__name__
            raise PolyspecInputError("config", f"must be an object/mapping, got {kind}")
        owned = scheme_fields()
        require_keys(cfg, "", required=["models", "acceptance", "thresholds"],
                     optional=[*COMMON_FIELDS, *owned])
        mode = cfg.get("mode", DEFAULT_MODE)
        if mode not in modes():
            raise PolyspecInputError("mode", f"must be one of {modes()}, got {mode!r}")
        models_cfg = cfg["models"]
        if not isinstance(models_cfg, list):
            raise PolyspecInputError("models", "must be a list of {name, cost} objects")
        models = [model_from_config(m, f"models[{i}]") for i, m in enumerate(models_cfg)]
        if models and models[-1].overhead:
            raise PolyspecInputError(
                f"models[{len(models) - 1}].overhead", "the last model verifies nothing, so it "
                "has no verification rounds; fold a per-forward overhead into its cost")
        structured = any(isinstance(cfg.get(k), list) and any(x is not None for x in cfg[k])
                         for k in ("trees", "schedules"))
        floor = decide(Features(mode, structured, cfg.get("batch"))).threshold_floor
        th = cfg["thresholds"]
        if not isinstance(th, list):
            raise PolyspecInputError("thresholds", f"must be a list of integers >= {floor}")
        th = [as_int(t, f"thresholds[{i}]", low=floor, high=MAX_THRESHOLD)
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
        attrs = {a: cfg.get(k) for k, a in _ATTRIBUTES.items()}
        options = tuple((k, cfg[k]) for k in owned if k in cfg and k not in _ATTRIBUTES)
        return cls(tuple(models), laws, tuple(th), cfg.get("policy", "accumulate"), name,
                   cfg.get("trees"), cfg.get("schedules"), unit, mode, options=options, **attrs)

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
        if self.mode != DEFAULT_MODE:  # a config without "mode" is of the default one
            out["mode"] = self.mode
        if self.queues is not None and any(q is not None for q in self.queues):
            out["queue"] = list(self.queues)
        if self.batch is not None:
            out["batch"] = self.batch
        out.update({k: _plain(v) for k, v in self.options})
        return out

    def with_thresholds(self, thresholds) -> Cascade:
        return dataclasses.replace(self, thresholds=tuple(thresholds))

    def with_batch(self, batch, field: str = "batch") -> Cascade:
        """This cascade decoded in a lockstep serving batch of ``batch`` sequences (scheme
        ``batch``); errors name ``field``."""
        try:
            return dataclasses.replace(self, batch=batch)
        except PolyspecInputError as e:
            if e.field != "batch":
                raise
            raise PolyspecInputError(field, e.reason) from None


def _plain(v):
    """A stored option value back in config form (tuples as lists)."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def as_cascade(cascade, field: str = "cascade", *, chain_only: str | None = None) -> Cascade:
    """``cascade`` checked to be a :class:`Cascade`; with ``chain_only`` (the name of the
    computation) trees and schedules are refused, because that computation models chains
    only and would silently drop them."""
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError(field, "must be a Cascade (use Cascade.from_config)")
    if chain_only is not None:
        if has_structures(cascade):
            raise PolyspecInputError(
                f"{field}.trees" if cascade.trees and any(t is not None for t in cascade.trees)
                else f"{field}.schedules",
                f"{chain_only} models chain cascades only; this cascade drafts a tree or "
                "follows a draft-length schedule")
    return cascade

def check_async_cascade(cascade) -> tuple | None:
    """Validate the async-only fields of ``cascade`` (a chain; queues); returns the queues
    as a tuple (one entry per pair, ``None`` = unbounded) or ``None``."""
    if cascade.trees is not None and any(t is not None for t in cascade.trees):
        raise PolyspecInputError("trees", 'the asynchronous theory ("mode": "async", '
                                 "docs/theory.md Part VI-AS) covers chain drafting only, not "
                                 "token trees")
    if cascade.schedules is not None and any(s is not None for s in cascade.schedules):
        raise PolyspecInputError("schedules", 'the asynchronous theory ("mode": "async", '
                                 "docs/theory.md Part VI-AS) covers fixed thresholds only, "
                                 "not draft-length schedules")
    q = cascade.queues
    if q is None:
        return None
    if not isinstance(q, list | tuple) or len(q) != cascade.n - 1:
        raise PolyspecInputError("queue", f"must be a list with one entry per adjacent pair "
                                 f"({cascade.n - 1}): an int >= the threshold, or null")
    out = []
    for i, x in enumerate(q):
        if x is None:
            out.append(None)
            continue
        x = as_int(x, f"queue[{i}]", low=0, high=10**6)
        if x < cascade.thresholds[i]:
            raise PolyspecInputError(f"queue[{i}]", f"{x} is below thresholds[{i}] = "
                                     f"{cascade.thresholds[i]}: the verifier would wait for "
                                     "drafts the drafter may never produce")
        out.append(x)
    return tuple(out)
