"""Cascade planner (docs/theory.md E2): the exact best chain and thresholds from a pool of models.

A *pool* lists models (target first) with cost curves, the acceptance law of every pair
``"verifier|drafter"`` that may be adjacent, and ``max_threshold``. A *configuration* is a
chain ``M_1 = target, M_2, ..., M_n`` (n >= 2, distinct models, every adjacent pair present in
the pool) with thresholds ``theta_i`` in ``1..max_threshold``; its value is P1's exact
speedup ``T_1(1)/tau_1`` (:mod:`polyspec_theory.core.p1`). :func:`plan` returns the optimum
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
from dataclasses import dataclass, field

from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.planning.insertion import paper_insertion_check
from polyspec_theory.planning.pool import Pool, as_pool
from polyspec_theory.planning.search import SearchStats, search_pool
from polyspec_theory.schemes import predict

__all__ = [
    "PlannedCascade",
    "GreedyStep",
    "GreedyResult",
    "Plan",
    "plan",
    "plan_thresholds",
    "greedy_paper_rule",
]



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
# public entry points
# --------------------------------------------------------------------------------------
def _check_top(top) -> int:
    return as_int(top, "top", low=0, high=1000)


def _planned(pool: Pool, chain, thresholds) -> PlannedCascade:
    """A configuration with its speedup recomputed by
    :func:`polyspec_theory.core.p1.predict_chain`."""
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
    _, records, _ = search_pool(pool, 0, True, only_chain=chain, seed=seed)
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
    _, records, stats = search_pool(pool, top, bool(prune))
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
