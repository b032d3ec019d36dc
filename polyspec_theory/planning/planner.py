"""Cascade planner (docs/theory.md E2): the exact best chain and thresholds from a pool of models.

A *pool* lists models (target first) with cost curves, the acceptance law of every pair
``"verifier|drafter"`` that may be adjacent, and ``max_threshold``. A *configuration* is a
chain ``M_1 = target, M_2, ..., M_n`` (n >= 2, distinct models, every adjacent pair present in
the pool) with thresholds ``theta_i`` in ``1..max_threshold``; its value is P1's exact
speedup ``T_1(1)/tau_1`` (:mod:`polyspec_theory.core.polybasic`). :func:`plan` returns the optimum
over *all*
configurations (and the best other chains, the best two-model configuration and the chain the
paper's greedy insertion rule picks).

**Search.** Bottom-up over suffixes: the state of the sub-cascade ``S_i`` (chain suffix
``M_i..M_n`` with thresholds ``theta_i..theta_{n-1}``) that the levels above need is exactly
the pair (full law of ``L_i``, ``E[C_i]``) — P1's recursion above ``i`` reads nothing else; a
DP over ``tau_i`` alone would not be exact, because the block law one level up depends on the
whole law of ``L_i`` — so each suffix state is computed once and shared by every chain that
ends with it. Extending a batch of states by one verifier ``u`` evaluates every threshold
``1..max_threshold`` at once (numpy broadcasting): the renewal masses ``f(s)`` of a state do
not depend on ``theta`` (``phi(theta) = sum_{s<theta} f(s)``), and for any ``h``,
``E[h(G)] = H(0) + sum_{1<=s<theta} f(s) (H(s) - h(s))`` with ``H(s) = E[h(s + L)]``, which
gives ``E[C_u]`` (``h = T_u(.+1)``) and ``E[L_u]`` (``h = M_uv``, below) for all thresholds
without forming the block laws; those (and the law of ``L_u``) are built only for the states
kept. Order: the two- and three-model chains first (breadth-first, a good incumbent early),
then depth-first from every two-model suffix, most promising first, in batches of bounded
size (bounded memory); at every suffix the complete chain (the target on top) is scored
before longer suffixes are built.

**Pruning, and why it keeps the optimum.** For a verifier ``u`` directly above a system
``S_v`` with time per token ``t = tau_v``, any threshold gives (Wald: ``phi E[C_v] =
E[G] tau_v``; ``E[L_u] = 1 + E[M(G)]`` with ``M(g) = sum_{k<=g} P(A >= k)`` concave, so
Jensen gives ``E[L_u] <= 1 + M(E[G])`` on the piecewise-linear interpolation; ``T_u`` is
replaced by its greatest convex minorant ``Tc_u`` so Jensen gives ``E[T_u(G+1)] >=
Tc_u(E[G]+1)``)::

    tau_u >= h_uv(t) := min_{1 <= g <= Gamma} (g t + Tc_u(g+1)) / (1 + M_uv(g)),

where ``Gamma = (K-1) max_threshold`` bounds every block (``G_i <= (n-i) max_threshold``).
On each segment ``[g, g+1]`` the ratio of two affine functions is monotone, so the minimum
over real ``E[G]`` is attained at an integer. The same bound holds under the ``"truncate"``
policy (``G = theta``, the drafting cost is ``E[S_N] tau_v >= theta tau_v``). ``h_uv`` is
continuous and strictly increasing, so along any completion ``u_1 = target, ..., u_j, v``
above a state, ``tau_1 >= h_{u_1 u_2}(...h_{u_j v}(tau_v))``. Its generalized inverse is
explicit, ``h_uv(t) <= c  <=>  t <= max_g (c (1 + M_uv(g)) - Tc_u(g+1)) / g``, so for a state
at model ``v`` whose chain already uses the set ``U`` the largest ``tau_v`` any completion
(by models outside ``U``, any order, any thresholds) could turn into ``tau_1 <= c`` is
``cut(v, U) = max_u inv_uv(cut(u, U + {u}))`` with ``cut(target, .) = c``. A state with
``tau_v > cut(v, U)`` at ``c = T_1(1)/s_k`` — ``s_k`` the k-th best speedup among the
distinct chains already scored (k = alternatives + 1) — cannot reach speedup ``s_k``, so it
cannot belong to the best configuration of any of the k best chains: dropping it changes
neither the optimum nor the top-k list (a safety margin of 1e-9 guards rounding). Indeed the
recorded values are achieved by distinct chains, so the true k-th best is >= ``s_k``, and
every sub-cascade state of the optimal configuration of a chain at least that good has a
completion reaching it, hence ``tau_v <= cut(v, U)``. The same inequality is applied before
extending a batch by one verifier ``u`` (``tau_v <= inv_uv(cut(u, U + {u}))``) and before
scoring the target on top of it (``tau_v <= inv_1v(c)``). Two-model configurations are always
scored in full (the best two-model configuration is reported).

**Laws per block length.** A pair's law enters through ``Q[g, a] = P(A = a | G = g)``
(``law.cap_pmf_table``; a cap need not be a mere censoring, e.g.
:class:`polyspec_theory.core.regimes.RegimeLaw`: acceptance that persists across rounds):
``M(g) = E[A | G = g]`` and ``P(L_u = a + 1) = sum_g P(G = g) Q[g, a]`` (the P1 kernel,
:mod:`polyspec_theory.core.p1`); the bound uses the least concave majorant of ``M`` (for
docs/theory.md §1.4's laws ``M`` is already concave), for which Jensen's step above still holds, and
each segment of the majorant is affine, so the minimum is still attained at an integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.core.config import (
    POLICIES,
    Cascade,
    Model,
    acceptance_from_config,
    check_cost_scale,
    model_from_config,
)
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import block_laws, renewal_masses
from polyspec_theory.core.polybasic import predict
from polyspec_theory.errors import PolyspecInputError, as_int, require_keys
from polyspec_theory.planning.insertion import paper_insertion_check

__all__ = [
    "as_pool",
    "Pool",
    "PlannedCascade",
    "GreedyStep",
    "GreedyResult",
    "SearchStats",
    "Plan",
    "plan",
    "plan_thresholds",
    "greedy_paper_rule",
    "MAX_POOL_MODELS",
    "MAX_PLAN_THRESHOLD",
]

MAX_POOL_MODELS = 10  # exhaustive over orders: the number of chains grows factorially
MAX_PLAN_THRESHOLD = 256
DEFAULT_MAX_THRESHOLD = 16
_PRUNE_MARGIN = 1e-9  # relative safety margin on the pruning cut (float rounding)
_CHUNK_ELEMENTS = 2_000_000  # float64 elements per (states x thresholds x block) chunk


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

    def __post_init__(self):
        models = tuple(self.models)
        if len(models) < 2:
            raise PolyspecInputError(
                "models", f"need the target and at least one drafter, got {len(models)} model(s)"
            )
        if len(models) > MAX_POOL_MODELS:
            raise PolyspecInputError(
                "models", f"at most {MAX_POOL_MODELS} models (the search is exhaustive over "
                f"orders), got {len(models)}"
            )
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
        require_keys(cfg, "", required=["models", "acceptance"],
                   optional=["max_threshold", "policy", "name", "description", "time_unit"])
        mcfg = cfg["models"]
        if not isinstance(mcfg, list):
            raise PolyspecInputError("models", "must be a list of {name, cost} objects, "
                                     "target first")
        models = []
        for i, m in enumerate(mcfg):
            require_keys(m, f"models[{i}]", required=["name", "cost"], optional=["overhead"])
            _check_name(m["name"], f"models[{i}].name")
            models.append(model_from_config(m, f"models[{i}]"))
        if len(models) < 2:
            raise PolyspecInputError(
                "models", f"need the target and at least one drafter, got {len(models)} model(s)"
            )
        if len(models) > MAX_POOL_MODELS:
            raise PolyspecInputError(
                "models", f"at most {MAX_POOL_MODELS} models (the search is exhaustive over "
                f"orders), got {len(models)}"
            )
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
        return out


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


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedCascade:
    """One configuration: ``chain`` (target first), ``thresholds`` and its P1 speedup."""
    chain: tuple[str, ...]
    thresholds: tuple[int, ...]
    speedup: float

    def to_dict(self) -> dict:
        return {"chain": list(self.chain), "thresholds": list(self.thresholds),
                "speedup": self.speedup}


@dataclass(frozen=True)
class GreedyStep:
    """One insertion accepted by the paper's rule: ``inserted`` between ``verifier`` and
    ``drafter``; ``lhs = T'/T_i``, ``rhs = L'(1/L_i - 1/L_i')``; ``speedup_before/after``
    are exact (P1, thresholds optimized for each chain)."""

    inserted: str
    verifier: str
    drafter: str
    lhs: float
    rhs: float
    speedup_before: float
    speedup_after: float

    def to_dict(self) -> dict:
        return {
            "inserted": self.inserted, "between": [self.verifier, self.drafter],
            "lhs_cost_ratio": self.lhs, "rhs_length_gain": self.rhs,
            "speedup_before": self.speedup_before, "speedup_after": self.speedup_after,
            "exact_says_helps": self.speedup_after > self.speedup_before,
        }


@dataclass(frozen=True)
class GreedyResult:
    """What the paper's greedy insertion rule (P5, approximate condition) ends with."""
    chosen: PlannedCascade
    start: PlannedCascade
    steps: tuple[GreedyStep, ...]

    def to_dict(self) -> dict:
        return {
            **self.chosen.to_dict(),
            "rule": "start from the best two-model configuration; insert M' between M_i and "
            "M_i+1 while T'/T_i < L'(1/L_i - 1/L_i') (insertion.paper_insertion_check: "
            "pairwise E[L] with the current theta_i as cap for all three pairs, T(1) costs; "
            "largest margin first); thresholds re-optimized exactly (P1) after each insertion",
            "start": self.start.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True)
class SearchStats:
    """What the search looked at. ``configs_*`` count complete (chain, thresholds)
    configurations; ``states_*`` count partial sub-cascade states (suffix, thresholds)."""

    chains_total: int
    chains_scored: int
    configs_total: int
    configs_scored: int
    states_computed: int
    states_pruned: int
    pruning: bool

    @property
    def configs_pruned(self) -> int:
        return self.configs_total - self.configs_scored

    @property
    def chains_pruned(self) -> int:
        return self.chains_total - self.chains_scored

    def to_dict(self) -> dict:
        return {
            "pruning": self.pruning,
            "chains_total": self.chains_total,
            "chains_scored": self.chains_scored,
            "chains_pruned": self.chains_pruned,
            "configs_total": self.configs_total,
            "configs_scored": self.configs_scored,
            "configs_pruned": self.configs_pruned,
            "states_computed": self.states_computed,
            "states_pruned": self.states_pruned,
        }


@dataclass(frozen=True)
class Plan:
    """The planner's answer. ``alternatives`` are the next-best *distinct chains*, each with
    its own optimal thresholds; ``baseline_speedup`` (1.0) is the target alone."""

    best: PlannedCascade
    alternatives: tuple[PlannedCascade, ...]
    best_two_model: PlannedCascade
    greedy: GreedyResult
    policy: str
    max_threshold: int
    stats: SearchStats
    baseline_speedup: float = 1.0
    pool_name: str = "pool"
    target: str = field(default="")

    @property
    def chain(self) -> tuple[str, ...]:
        return self.best.chain

    @property
    def thresholds(self) -> tuple[int, ...]:
        return self.best.thresholds

    @property
    def speedup(self) -> float:
        return self.best.speedup

    def to_dict(self) -> dict:
        return {
            "chain": list(self.best.chain),
            "thresholds": list(self.best.thresholds),
            "speedup": self.best.speedup,
            "alternatives": [a.to_dict() for a in self.alternatives],
            "best_two_model": self.best_two_model.to_dict(),
            "greedy_paper_rule": self.greedy.to_dict(),
            "baseline": {"chain": [self.target], "speedup": self.baseline_speedup},
            "beats_autoregressive": self.best.speedup > self.baseline_speedup,
            "policy": self.policy,
            "max_threshold": self.max_threshold,
            "time_base": "model-cost units of the pool (speedup is T_1(1)/tau_1, P1)",
            "search": self.stats.to_dict(),
        }


# --------------------------------------------------------------------------------------
# precomputed tables
# --------------------------------------------------------------------------------------
def _convex_minorant(y: np.ndarray) -> np.ndarray:
    """Greatest convex minorant of the points ``(j, y[j])`` evaluated at every ``j``."""
    hull: list[int] = []
    for j in range(y.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b if it lies on or above the segment a -> j
            if (y[b] - y[a]) * (j - a) >= (y[j] - y[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(j)
    return np.interp(np.arange(y.size), hull, y[hull])


class _Tables:
    """Per-pool arrays indexed by model number (0 = target) and pair ``(u, v)``."""
    def __init__(self, pool: Pool, allowed: set[tuple[int, int]] | None = None):
        self.pool = pool
        self.k = len(pool.models)
        self.theta_max = pool.max_threshold
        self.truncate = pool.policy == "truncate"
        self.gamma = (self.k - 1) * self.theta_max  # any block G is <= Gamma
        width = self.gamma + 2
        g = np.arange(width)
        # Tg[u][g] = T_u(g + 1) + o_u (a verification round of u, per-round overhead
        # included); Tc = its greatest convex minorant (for the bound)
        self.tg = [m.cost(g + 1) + m.overhead for m in pool.models]
        self.tc = [_convex_minorant(t) for t in self.tg]
        self.t1 = [m.cost.t1 for m in pool.models]
        index = {nm: i for i, nm in enumerate(pool.names)}
        self.index = index
        self.pairs: dict[tuple[int, int], dict] = {}
        for (vn, dn), law in pool.pairs.items():
            key = (index[vn], index[dn])
            if allowed is not None and key not in allowed:
                continue
            # Q[g, a] = P(A = a | G = g), M(g) = E[A | G = g]; the bound needs a concave M:
            # its least concave majorant (module docstring)
            m = law.capped_mean_emitted(width) - 1.0
            self.pairs[key] = {"law": law, "q": law.cap_pmf_table(width), "m": m,
                               "mb": -_convex_minorant(-m)}
        self.above: dict[int, list[int]] = {}
        for u, v in sorted(self.pairs):
            self.above.setdefault(v, []).append(u)

    # ---- bound ---------------------------------------------------------------------
    def inverse(self, u: int, v: int, c: float) -> float:
        """``sup{t >= 0 : h_uv(t) <= c}`` = ``max_g (c (1 + M(g)) - Tc_u(g+1)) / g``."""
        if c == math.inf:
            return math.inf
        if c == -math.inf:
            return -math.inf
        g = np.arange(1, self.gamma + 1)
        m = self.pairs[(u, v)]["mb"][1 : self.gamma + 1]
        tc = self.tc[u][1 : self.gamma + 1]
        return float(np.max((c * (1.0 + m) - tc) / g))


class _Cuts:
    """``cut(v, U)``: the largest ``tau_v`` that some completion above could still turn into
    ``tau_1 <= c`` (module docstring); memoized per ``c``."""

    def __init__(self, tables: _Tables):
        self.tables = tables
        self.c = math.inf
        self.memo: dict[tuple[int, int], float] = {}

    def set_target_tau(self, c: float) -> None:
        if c != self.c:
            self.c = c
            self.memo.clear()

    def cut(self, v: int, used: int) -> float:
        if v == 0:
            return self.c
        key = (v, used)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        best = -math.inf
        for u in self.tables.above.get(v, ()):
            if u != 0 and used >> u & 1:
                continue
            inner = self.c if u == 0 else self.cut(u, used | 1 << u)
            if inner == -math.inf:
                continue
            best = max(best, self.tables.inverse(u, v, inner))
            if best == math.inf:
                break
        self.memo[key] = best
        return best


# --------------------------------------------------------------------------------------
# batched P1 step: one verifier on top of many states, all thresholds at once
# --------------------------------------------------------------------------------------
def _extend(tables: _Tables, p: np.ndarray, c: np.ndarray, u: int, v: int):
    """Exact ``(tau_u, E[C_u], f)`` for every state (rows of ``p`` = law of L_v, ``c`` =
    E[C_v]) under verifier ``u`` and every threshold ``1..theta_max`` (arrays (B, theta_max)).

    No block law is formed: for any ``h``, ``E[h(G)] = H(0) + sum_{1<=s<theta} f(s) (H(s) -
    h(s))`` with ``H(s) = E[h(s + L_v)]`` (``P(G=g) = sum_{s<theta} f(s) P(L=g-s)``, and the
    renewal mass at ``s >= 1`` is ``f(s)``), applied to ``h = T_u(. + 1)`` and ``h = M_uv``.
    """
    th = tables.theta_max
    pair = tables.pairs[(u, v)]
    f = renewal_masses(p, th)
    phi = np.cumsum(f, axis=1)  # phi[:, theta-1] = sum_{s<theta} f(s)
    thetas = np.arange(1, th + 1)
    if tables.truncate:  # G = theta exactly
        cost = phi * c[:, None] + tables.tg[u][thetas][None, :]
        return cost / (1.0 + pair["m"][thetas][None, :]), cost, f
    w = p.shape[1]
    hank = np.arange(w)[:, None] + np.arange(th)[None, :]  # s + l
    out = []
    for h in (tables.tg[u], pair["m"]):
        big_h = np.einsum("bl,ls->bs", p, h[hank])  # (B, th): E[h(s + L)]
        terms = f * (big_h - h[:th])
        terms[:, 0] = big_h[:, 0]
        out.append(np.cumsum(terms, axis=1))
    cost = phi * c[:, None] + out[0]
    return cost / (1.0 + out[1]), cost, f


def _emitted(tables: _Tables, gp: np.ndarray, u: int, v: int) -> np.ndarray:
    """Law of ``L_u`` (rows, index = l) from block laws ``gp`` (rows), trimmed."""
    a = tables.pairs[(u, v)]["law"].pmf_over_blocks(gp)
    out = np.concatenate([np.zeros((gp.shape[0], 1)), a], axis=1)
    nz = np.flatnonzero(out.any(axis=0))
    return out[:, : nz[-1] + 1]


def _truncate_emitted(tables: _Tables, u: int, v: int, theta: np.ndarray) -> np.ndarray:
    pair = tables.pairs[(u, v)]
    width = int(theta.max()) + 2
    out = np.zeros((theta.size, width))
    for i, t in enumerate(theta):
        out[i, 1 : t + 2] = pair["q"][t, : t + 1]
    return out


# --------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------
_MAX_BATCH = 20_000  # states per batch handed down the depth-first search (bounds memory)


@dataclass
class _Batch:
    models: tuple[int, ...]  # top first, bottom last (the target not included)
    p: np.ndarray  # (B, w) law of L of the top model's system
    c: np.ndarray  # (B,) E[C]
    tau: np.ndarray  # (B,) E[C] / E[L]
    thr: np.ndarray  # (B, len(models) - 1) thresholds, top first

    @property
    def used(self) -> int:
        mask = 0
        for m in self.models:
            mask |= 1 << m
        return mask


class _Records:
    """Best value found per chain, and the ``keep`` best of them (distinct chains).

    Values of a chain only increase, so the top set is maintained exactly; ``kth`` (the
    smallest value in the top set once it is full) is a speedup that ``keep`` distinct chains
    are known to reach."""

    def __init__(self, keep: int):
        self.keep = keep
        self.best: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}
        self.top: dict[tuple[int, ...], float] = {}

    def update(self, chain, val: float, thr) -> None:
        old = self.best.get(chain)
        if old is not None and val <= old[0]:
            return
        self.best[chain] = (val, tuple(int(x) for x in thr))
        if chain in self.top or len(self.top) < self.keep:
            self.top[chain] = val
            return
        low = min(self.top, key=self.top.__getitem__)
        if val > self.top[low]:
            del self.top[low]
            self.top[chain] = val

    @property
    def kth(self) -> float | None:
        return min(self.top.values()) if len(self.top) == self.keep else None


def _count_chains(tables: _Tables, starts) -> tuple[int, int]:
    """Number of chains and of (chain, thresholds) configurations reachable."""
    chains = configs = 0

    def walk(v: int, used: int, depth: int):
        nonlocal chains, configs
        for u in tables.above.get(v, ()):
            if u == 0:
                chains += 1
                configs += tables.theta_max ** depth
            elif not used >> u & 1:
                walk(u, used | 1 << u, depth + 1)

    for s in starts:
        walk(s, 1 << s, 1)
    return chains, configs


class _Search:
    """Exact search over chains and thresholds (module docstring): breadth-first for the
    two- and three-model chains (a good incumbent early), then depth-first from every
    two-model suffix, most promising first, in batches of at most ``_MAX_BATCH`` states."""

    def __init__(self, pool: Pool, top: int, prune: bool, only_chain=None, seed=None):
        allowed = None
        if only_chain is not None:
            idx = [pool.names.index(nm) for nm in only_chain]
            allowed = set(zip(idx[:-1], idx[1:], strict=True))
        self.tables = tables = _Tables(pool, allowed)
        self.starts = list(range(1, tables.k)) if only_chain is None else [idx[-1]]
        self.prune = prune
        self.records = _Records(top + 1)
        self.cuts = _Cuts(tables)
        self.seed_tau = tables.t1[0] / seed if (prune and seed) else math.inf
        self.cuts.set_target_tau(self.seed_tau)
        self.t_target = tables.t1[0]
        self.th = tables.theta_max
        self.n_computed = self.n_pruned = self.n_scored = 0

    # -- bookkeeping ----------------------------------------------------------------
    def _refresh_cut(self) -> None:
        if not self.prune:
            return
        kth = self.records.kth
        c = self.seed_tau if kth is None or kth <= 0 else min(self.seed_tau, self.t_target / kth)
        if c < self.cuts.c:
            self.cuts.set_target_tau(c)

    def _limit(self, cut: float) -> float:
        return cut * (1.0 + _PRUNE_MARGIN) if self.prune else math.inf

    def _row_chunks(self, n: int, w: int):
        per = max(1, min(_CHUNK_ELEMENTS // (self.th * (self.th + w)) * 8,
                         _MAX_BATCH // self.th))
        for lo in range(0, n, per):
            yield lo, min(n, lo + per)

    # -- steps ----------------------------------------------------------------------
    def score(self, bt: _Batch) -> None:
        """Complete chains: the target on top of ``bt`` (two-model chains in full)."""
        v = bt.models[0]
        if (0, v) not in self.tables.pairs:
            return
        chain = (0, *bt.models)
        full = not self.prune or len(bt.models) == 1
        if full:
            alive = np.ones(bt.tau.size, dtype=bool)
        else:
            alive = bt.tau <= self._limit(self.tables.inverse(0, v, self.cuts.c))
        self.n_pruned += self.th * int(alive.size - alive.sum())
        if not alive.any():
            return
        p, c, thr = bt.p[alive], bt.c[alive], bt.thr[alive]
        for lo, hi in self._row_chunks(p.shape[0], p.shape[1]):
            tau, _, _ = _extend(self.tables, p[lo:hi], c[lo:hi], 0, v)
            self.n_scored += tau.size
            j = int(np.argmin(tau))
            r, t = divmod(j, self.th)
            self.records.update(chain, float(self.t_target / tau[r, t]),
                                (t + 1, *thr[lo + r]))
            self._refresh_cut()

    def children(self, bt: _Batch, u: int):
        """Batches of the states ``u`` on top of ``bt`` (all thresholds) that survive."""
        v, used = bt.models[0], bt.used
        new_used = used | 1 << u
        tables = self.tables
        ps, cs, taus, ts, count = [], [], [], [], 0
        for lo, hi in self._row_chunks(bt.p.shape[0], bt.p.shape[1]):
            cut = self.cuts.cut(u, new_used) if self.prune else math.inf
            alive = bt.tau[lo:hi] <= self._limit(tables.inverse(u, v, cut))
            self.n_pruned += self.th * int(alive.size - alive.sum())
            if not alive.any():
                continue
            p, c, thr = bt.p[lo:hi][alive], bt.c[lo:hi][alive], bt.thr[lo:hi][alive]
            tau, cost, f = _extend(tables, p, c, u, v)
            self.n_computed += tau.size
            rows, ti = np.nonzero(tau <= self._limit(cut))
            self.n_pruned += tau.size - rows.size
            if rows.size == 0:
                continue
            thetas = ti + 1
            if tables.truncate:
                lp = _truncate_emitted(tables, u, v, thetas)
            else:
                per = max(1, _CHUNK_ELEMENTS // (self.th * (self.th + p.shape[1])))
                parts = [_emitted(tables, block_laws(p[r], f[r], thetas[a:a + per]), u, v)
                         for a in range(0, rows.size, per)
                         for r in (rows[a:a + per],)]
                wmax = max(x.shape[1] for x in parts)
                lp = np.concatenate([np.pad(x, ((0, 0), (0, wmax - x.shape[1]))) for x in parts])
            ps.append(lp)
            cs.append(cost[rows, ti])
            taus.append(tau[rows, ti])
            ts.append(np.column_stack([thetas, thr[rows]]))
            count += rows.size
            if count >= _MAX_BATCH:
                yield self._batch((u, *bt.models), ps, cs, taus, ts)
                ps, cs, taus, ts, count = [], [], [], [], 0
        if ps:
            yield self._batch((u, *bt.models), ps, cs, taus, ts)

    @staticmethod
    def _batch(models, ps, cs, taus, ts) -> _Batch:
        w = max(x.shape[1] for x in ps)
        pp = np.concatenate([np.pad(x, ((0, 0), (0, w - x.shape[1]))) for x in ps])
        return _Batch(models, pp, np.concatenate(cs), np.concatenate(taus), np.concatenate(ts))

    def verifiers(self, bt: _Batch) -> list[int]:
        used = bt.used
        return [u for u in self.tables.above.get(bt.models[0], ())
                if u != 0 and not used >> u & 1]

    def visit(self, bt: _Batch) -> None:
        """Depth-first: score ``bt``'s chain, then every longer suffix above it."""
        self.score(bt)
        for u in self.verifiers(bt):
            for child in self.children(bt, u):
                self.visit(child)

    def run(self):
        tables = self.tables
        level1 = []
        for m in self.starts:
            t = tables.t1[m]
            level1.append(_Batch((m,), np.array([[0.0, 1.0]]), np.array([t]), np.array([t]),
                                 np.zeros((1, 0), dtype=np.int64)))
        self.n_computed += len(level1)
        for bt in level1:
            self.score(bt)
        level2 = [ch for bt in level1 for u in self.verifiers(bt) for ch in self.children(bt, u)]
        for bt in level2:
            self.score(bt)

        def promise(bt: _Batch) -> float:  # best recorded speedup of this suffix's chain
            rec = self.records.best.get((0, *bt.models))
            return -(rec[0] if rec else 0.0)

        for bt in sorted(level2, key=promise):
            for u in self.verifiers(bt):
                for child in self.children(bt, u):
                    self.visit(child)
        chains_total, configs_total = _count_chains(tables, self.starts)
        stats = SearchStats(
            chains_total=chains_total,
            chains_scored=len(self.records.best),
            configs_total=configs_total,
            configs_scored=self.n_scored,
            states_computed=self.n_computed,
            states_pruned=self.n_pruned,
            pruning=self.prune,
        )
        return tables, self.records.best, stats


def _search(pool: Pool, top: int, prune: bool, only_chain: tuple[str, ...] | None = None,
            seed: float | None = None):
    """Exact search. Returns ``(tables, {chain index tuple: (speedup, thresholds)}, stats)``;
    every chain among the ``top + 1`` best has its exact optimum recorded. ``only_chain``
    restricts the search to that one chain (its optimal thresholds); ``seed`` is a speedup
    known to be achievable by ``top + 1`` distinct chains (or by the chain), a first
    incumbent."""
    return _Search(pool, top, prune, only_chain, seed).run()


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------
def _check_top(top) -> int:
    return as_int(top, "top", low=0, high=1000)


def _planned(pool: Pool, chain, thresholds) -> PlannedCascade:
    """A configuration with its speedup recomputed by
    :func:`polyspec_theory.core.polybasic.predict`."""
    chain = tuple(chain)
    thresholds = tuple(int(t) for t in thresholds)
    sp = predict(pool.cascade(chain, thresholds)).speedup
    return PlannedCascade(chain, thresholds, float(sp))


def _coordinate_seed(pool: Pool, chain: tuple[str, ...]) -> float:
    """An achievable speedup for ``chain`` (coordinate ascent over thresholds with P1)."""
    n = len(chain)
    th = pool.max_threshold
    cur = [min(4, th)] * (n - 1)
    best = predict(pool.cascade(chain, cur)).speedup
    for _ in range(3):
        improved = False
        for i in range(n - 1):
            for t in range(1, th + 1):
                if t == cur[i]:
                    continue
                trial = cur.copy()
                trial[i] = t
                sp = predict(pool.cascade(chain, trial)).speedup
                if sp > best:
                    best, cur, improved = sp, trial, True
        if not improved:
            break
    return best


def plan_thresholds(pool, chain) -> PlannedCascade:
    """Exact best thresholds (``1..max_threshold``) for one ``chain`` (target first).

    Same search and pruning as :func:`plan` restricted to this chain, with the incumbent
    seeded by a coordinate-ascent value (achievable, so the pruning still keeps the optimum).
    """
    pool = as_pool(pool)
    chain = pool.as_chain(chain)
    seed = _coordinate_seed(pool, chain) if len(chain) > 2 else None
    _, records, _ = _search(pool, 0, True, only_chain=chain, seed=seed)
    idx = tuple(pool.names.index(nm) for nm in chain)
    _, thr = records[idx]
    return _planned(pool, chain, thr)


def greedy_paper_rule(pool, start: PlannedCascade | None = None) -> GreedyResult:
    """The chain the paper's greedy insertion rule ends with: start from the best two-model
    configuration (``start``, computed when not given); among the pool's models not yet in
    the chain, test every insertion between adjacent ``M_i, M_i+1`` with the paper's
    approximate condition (:func:`polyspec_theory.planning.insertion.paper_insertion_check`:
    ``T'/T_i <
    L'(1/L_i - 1/L_i')`` on pairwise fixed-block means, both new thresholds = the current
    ``theta_i``); insert the one with the largest margin ``rhs - lhs``, re-optimize all
    thresholds exactly (:func:`plan_thresholds`), repeat until no insertion passes.
    Speedups are exact (P1)."""

    pool = as_pool(pool)
    if start is None:
        twos = [plan_thresholds(pool, (pool.target, d)) for v, d in pool.pairs
                if v == pool.target]
        start = max(twos, key=lambda c: (c.speedup, -pool.names.index(c.chain[1])))
    if not isinstance(start, PlannedCascade):
        raise PolyspecInputError("start", "must be a PlannedCascade")
    pool.as_chain(start.chain)
    cur = start
    steps = []
    while True:
        cascade = pool.cascade(cur.chain, cur.thresholds)
        cands = []
        for i in range(len(cur.chain) - 1):
            v, d = cur.chain[i], cur.chain[i + 1]
            for m in pool.names[1:]:
                if m in cur.chain or (v, m) not in pool.pairs or (m, d) not in pool.pairs:
                    continue
                chk = paper_insertion_check(cascade, i, pool.model(m), pool.pairs[(v, m)],
                                            pool.pairs[(m, d)])
                if chk["helps"]:
                    margin = chk["rhs"] - chk["lhs"]
                    cands.append((-margin, i, pool.names.index(m), m, chk["lhs"], chk["rhs"]))
        if not cands:
            break
        _, i, _, m, lhs, rhs = min(cands)
        chain = (*cur.chain[: i + 1], m, *cur.chain[i + 1 :])
        new = plan_thresholds(pool, chain)
        steps.append(GreedyStep(m, cur.chain[i], cur.chain[i + 1], lhs, rhs,
                                cur.speedup, new.speedup))
        cur = new
    return GreedyResult(chosen=cur, start=start, steps=tuple(steps))


def plan(pool, top: int = 5, *, prune: bool = True, greedy: bool = True) -> Plan:
    """The exact best cascade from ``pool`` (a :class:`Pool` or a pool mapping).

    Optimum over every chain that contains the target (any subset of the drafters in any
    order the pool's pairs allow, n >= 2) and every threshold tuple in ``1..max_threshold``,
    by P1's exact speedup; ``top`` next-best distinct chains; the best two-model
    configuration; the greedy paper rule's choice (skipped when ``greedy`` is False). With
    ``prune`` False every configuration is scored (same answer, slower)."""
    pool = as_pool(pool)
    top = _check_top(top)
    _, records, stats = _search(pool, top, bool(prune))
    names = pool.names
    for ch, (val, thr) in records.items():
        if not (math.isfinite(val) and val > 0):  # never ranked: refused, naming the chain
            chain = [names[i] for i in ch]
            raise PolyspecInputError(
                "acceptance", f"P1 gives speedup {val!r} for {' <- '.join(chain)} at thresholds "
                f"{list(thr)}: a law or cost of this chain is out of numerical range")

    def key(item):
        chain, (val, _) = item
        return (-val, len(chain), chain)

    ranked = sorted(records.items(), key=key)
    chosen = [_planned(pool, [names[i] for i in ch], thr) for ch, (_, thr) in ranked[: top + 1]]
    two = min((it for it in records.items() if len(it[0]) == 2), key=key)
    best_two = _planned(pool, [names[i] for i in two[0]], two[1][1])
    if greedy:
        g = greedy_paper_rule(pool, best_two)
    else:
        g = GreedyResult(best_two, best_two, ())
    return Plan(
        best=chosen[0],
        alternatives=tuple(chosen[1:]),
        best_two_model=best_two,
        greedy=g,
        policy=pool.policy,
        max_threshold=pool.max_threshold,
        stats=stats,
        pool_name=pool.name,
        target=pool.target,
    )
