"""Two-model predictions under a draft-length schedule (docs/theory.md Part III-D, A1-A3):
the exact stationary speedup of an HF schedule and of a confidence cut-off, and the law of
one confidence-cut-off round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import law_from_config
from polyspec_theory.core.costs import cost_from_config
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.runs import RunLaw
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_probability,
)
from polyspec_theory.structures.schedule import (
    ConfidenceLaw,
    HFSchedule,
    schedule_from_config,
    stationary_distribution,
)

__all__ = [
    "HFPrediction",
    "hf_two_model",
    "hf_two_model_runs",
    "ConfidenceRound",
    "confidence_round",
    "confidence_two_model",
]


# --- two-model results ------------------------------------------------------------------------


def _law(law, field="law") -> AcceptanceLaw:
    return law if isinstance(law, AcceptanceLaw) else law_from_config(law, field)


def _full_and_mean(law: AcceptanceLaw, g: int) -> tuple[float, float]:
    """``P(A = g | cap g)`` and ``E[L | cap g]``."""
    p = law.cap_pmf_table(g)[g, : g + 1]
    return float(p[-1]), 1.0 + float(np.dot(np.arange(g + 1), p))


@dataclass(frozen=True)
class HFPrediction:
    """A1 for two models: the length chain, its stationary law and the exact speedup."""

    lengths: np.ndarray
    transition: np.ndarray
    stationary: np.ndarray
    full_probability: np.ndarray  # P(A = g | g) per length
    mean_emitted: np.ndarray  # E[L | g] per length
    round_time: np.ndarray  # g T_2(1) + T_1(g + 1) per length
    speedup: float
    mean_length: float

    def to_dict(self) -> dict:
        return {"lengths": self.lengths.tolist(), "stationary": self.stationary.tolist(),
                "full_probability": self.full_probability.tolist(),
                "mean_emitted": self.mean_emitted.tolist(), "speedup": self.speedup,
                "mean_length": self.mean_length}


def hf_two_model(law, schedule, target_cost, draft_cost) -> HFPrediction:
    """A1 (two models): the draft length ``g`` is a Markov chain on ``[min, max]`` moving to
    ``min(g + 2, max)`` with probability ``P(A = g | g)`` and to ``max(g - 1, min)``
    otherwise (rounds independent given ``g``). By the Markov renewal–reward theorem the
    long-run speedup is ``T_1(1) sum_g pi_g E[L | g] / sum_g pi_g (g T_2(1) + T_1(g + 1))``
    with ``pi`` the stationary law of the class reached from ``start``."""
    law = _law(law)
    sch = schedule_from_config(schedule)
    if not isinstance(sch, HFSchedule):
        raise PolyspecInputError("schedule", "must be an 'hf' schedule")
    t1 = cost_from_config(target_cost, "target_cost")
    t2 = cost_from_config(draft_cost, "draft_cost")
    if t1.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    g = sch.states
    k = g.size
    full = np.empty(k)
    el = np.empty(k)
    for i, gi in enumerate(g):
        full[i], el[i] = _full_and_mean(law, int(gi))
    P = np.zeros((k, k))
    for i, gi in enumerate(g):
        P[i, sch.next_length(int(gi), True) - sch.min] += full[i]
        P[i, sch.next_length(int(gi), False) - sch.min] += 1.0 - full[i]
    pi = stationary_distribution(P, sch.start - sch.min)
    cost = g * t2.t1 + t1(g + 1)
    speed = t1.t1 * float(pi @ el) / float(pi @ cost)
    return HFPrediction(g, P, pi, full, el, cost, speed, float(pi @ g))


def _nonneg(x, field: str) -> float:
    v = float(x)
    if not np.isfinite(v) or v < 0:
        raise PolyspecInputError(field, f"must be a finite cost >= 0, got {x!r}")
    return v


def hf_two_model_runs(law, schedule, draft_cost: float, verify_cost, overhead: float = 0.0,
                      horizon: int | None = None) -> dict:
    """A1 under R1 (greedy decoding, docs/theory.md A1-R): the exact long-run accounting of a
    two-model chain with HF's length schedule when agreement runs over output positions with
    the run law ``law`` (:class:`~polyspec_theory.core.runs.RunLaw`; P1's round, the bonus
    position after a fully accepted round never checked).

    The carried state is ``(age, g)``: the run's age at the first checked position (capped
    at ``len(law.hazard)``) and the current length. From ``(a, g)`` the round accepts
    ``j < g`` with probability ``S(a, j) q(a + j)`` (``j + 1`` tokens, next
    ``(0, max(g - 1, min))``) or all ``g`` with ``S(a, g)`` (``g + 1`` tokens, next length
    ``min(g + 2, max)``, next age ``a + g + 1`` with probability ``1 - q(a + g)``, else 0); it
    costs ``g draft_cost + verify_cost(g + 1) + overhead``. Returns ``time_per_token``,
    ``tokens_per_round``, ``time_per_round``, ``drafts_per_round``, ``verify_per_round``
    (expected ``verify_cost(g + 1)``), ``length_distribution`` (over ``schedule.states``),
    ``stationary`` (over ``(age, g)``, age-major) -- the stationary law of the closed class
    reached from ``(0, start)``. A geometric law gives :func:`hf_two_model` exactly.

    ``horizon`` (tokens): a decoder that restarts the schedule at ``(0, start)`` for every
    prompt of ``horizon`` tokens (A1's transient): ``tokens_per_round``, ``time_per_round``,
    ``drafts_per_round``, ``verify_per_round`` and ``time_per_token`` are then the exact
    expectations over the first ``K`` rounds from the start, ``K`` the first round count
    whose expected tokens reach ``horizon`` (``rounds``); the stationary law stays in
    ``stationary`` / ``length_distribution``."""
    if not isinstance(law, RunLaw):
        raise PolyspecInputError("law", "must be a RunLaw")
    sch = schedule_from_config(schedule)
    if not isinstance(sch, HFSchedule):
        raise PolyspecInputError("schedule", "must be an 'hf' schedule")
    d = _nonneg(draft_cost, "draft_cost")
    o = _nonneg(overhead, "overhead")
    big = len(law.hazard)
    n_age = big + 1
    gs = [int(g) for g in sch.states]
    ng = len(gs)
    P = np.zeros((n_age * ng, n_age * ng))
    tok = np.zeros(n_age * ng)
    ver = np.zeros(n_age * ng)
    for a in range(n_age):
        for gi, g in enumerate(gs):
            s = a * ng + gi
            up = gs.index(sch.next_length(g, True))
            dn = gs.index(sch.next_length(g, False))
            surv = 1.0
            for j in range(g):  # j drafts accepted, then a disagreement
                pj = surv * law.q(a + j)
                P[s, dn] += pj  # age 0, one shorter
                tok[s] += pj * (j + 1)
                surv *= 1.0 - law.q(a + j)
            tok[s] += surv * (g + 1)
            qb = law.q(a + g)  # the bonus position, never checked
            P[s, up] += surv * qb
            P[s, min(a + g + 1, big) * ng + up] += surv * (1.0 - qb)
            ver[s] = _nonneg(verify_cost(g + 1), f"verify_cost({g + 1})")
    pi = stationary_distribution(P, gs.index(sch.start), "schedule")
    lengths = pi.reshape(n_age, ng).sum(axis=0)
    glen = np.tile(np.asarray(gs, dtype=np.float64), n_age)
    w, rounds = pi, None
    if horizon is not None:
        h = as_int(horizon, "horizon", low=1)
        mu = np.zeros(n_age * ng)
        mu[gs.index(sch.start)] = 1.0
        w = np.zeros(n_age * ng)
        rounds = 0
        while float(w @ tok) < h:  # every round emits >= 1 token: at most h rounds
            w = w + mu
            mu = mu @ P
            rounds += 1
        w = w / rounds
    drafts = float(w @ glen)
    tpr = float(w @ tok)
    cpr = drafts * d + float(w @ ver) + o
    return {"time_per_token": cpr / tpr, "tokens_per_round": tpr, "time_per_round": cpr,
            "drafts_per_round": drafts, "verify_per_round": float(w @ ver),
            "length_distribution": lengths, "stationary": pi, "rounds": rounds}


@dataclass(frozen=True)
class ConfidenceRound:
    """A2: one round of the confidence cut-off with cap ``cap``: ``q = P(C >= eta)``,
    ``r = P(C >= eta, accepted)``, the laws of the drafted count ``G`` and of ``A``, and the
    expected number of drafter forwards ``E[G] + P(G < cap)`` (the forward that found the low
    confidence counts)."""

    eta: float
    cap: int
    q: float
    r: float
    block_pmf: np.ndarray  # P(G = g), g = 0..cap
    accepted_pmf: np.ndarray  # P(A = k), k = 0..cap
    mean_block: float
    mean_emitted: float
    draft_forwards: float

    def to_dict(self) -> dict:
        return {"eta": self.eta, "cap": self.cap, "q": self.q, "r": self.r,
                "block_pmf": self.block_pmf.tolist(), "accepted_pmf": self.accepted_pmf.tolist(),
                "mean_block": self.mean_block, "mean_emitted": self.mean_emitted,
                "draft_forwards": self.draft_forwards}


def _capped_geometric(x: float, cap: int) -> np.ndarray:
    k = np.arange(cap + 1, dtype=np.float64)
    p = np.power(x, k)
    p[:-1] *= 1.0 - x
    return p


def confidence_round(law, eta, cap: int) -> ConfidenceRound:
    """A2: with positions iid, ``G = min(K, cap)`` where ``P(K >= k) = q^k``, and
    ``P(A >= k) = r^k`` for ``k <= cap`` (the first k positions drafted and accepted):
    ``P(G = g) = q^g (1 - q)`` (g < cap), ``q^cap``; ``A`` capped geometric with ``r``;
    ``E[L] = sum_{k=0}^{cap} r^k``."""
    law = _law(law)
    if not isinstance(law, ConfidenceLaw):
        raise PolyspecInputError("law", "a confidence cut-off needs a ConfidenceLaw "
                                 "({\"confidence\": {\"beta\": [a, b], \"logistic\": [b0, b1]}})")
    eta = as_probability(eta, "eta")
    cap = as_int(cap, "cap", low=1, high=4096)
    q, r = law.draft_probability(eta), law.joint(eta)
    g_pmf = _capped_geometric(q, cap)
    a_pmf = _capped_geometric(r, cap)
    k = np.arange(cap + 1)
    mean_g = float(np.dot(k, g_pmf))
    return ConfidenceRound(eta, cap, q, r, g_pmf, a_pmf, mean_g,
                           1.0 + float(np.dot(k, a_pmf)), mean_g + float(1.0 - g_pmf[-1]))


def confidence_two_model(law, eta, cap: int, target_cost, draft_cost) -> float:
    """A2 (two models): ``T_1(1) E[L] / ((E[G] + P(G < cap)) T_2(1) + E[T_1(G + 1)])``; with
    ``eta = 0`` it is the fixed chain of length ``cap`` under iid ``alpha = r(0)``."""
    rd = confidence_round(law, eta, cap)
    t1 = cost_from_config(target_cost, "target_cost")
    t2 = cost_from_config(draft_cost, "draft_cost")
    if t1.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    verify = float(np.dot(rd.block_pmf, t1(np.arange(cap + 1) + 1)))
    return t1.t1 * rd.mean_emitted / (rd.draft_forwards * t2.t1 + verify)
