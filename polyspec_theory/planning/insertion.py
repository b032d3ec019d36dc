"""P5: inserting a model ``M'`` between ``M_i`` and ``M_{i+1}`` (docs/theory.md §6, paper Thm 3.2).

Positions are 0-based: ``position = p`` inserts ``M'`` between ``cascade.models[p]`` and
``cascade.models[p+1]``; the pair law ``laws[p]`` (and threshold ``theta_p``) is replaced by
``upper_law`` for ``(M_p, M')`` and ``lower_law`` for ``(M', M_{p+1})`` with thresholds
``(theta_up, theta_low)``. Everything else is unchanged.

- :func:`insertion_decision` — exact criterion: inserting helps iff P1's ``tau_1`` with
  ``M'`` is smaller than without (optionally with all thresholds of both cascades optimized).
- :func:`paper_insertion_condition` / :func:`paper_insertion_check` — the paper's
  approximate condition ``T'/T_i < L'(1/L_i - 1/L_i')`` with ``L_i`` the pairwise mean emitted
  length of ``(M_i, M_{i+1})`` before insertion, ``L_i'`` of ``(M_i, M')``, ``L'`` of
  ``(M', M_{i+1})`` (each with its fixed threshold as cap) and ``T = T(1)``. It follows from
  reading (b) of Lemma 3.1 and ignores the ``phi`` chain and the change of ``beta``.
- :func:`decision_confidence` — probability that the decision computed from measured laws and
  costs equals the true one, given the number of observed rounds behind each measured law and
  the relative standard error of each measured cost. Two methods (both plug-in: the measured
  values stand in for the truth):
  ``"bootstrap"`` (parametric bootstrap): resample each measured law's acceptance data (same
  number of rounds, caps drawn from the block law P1 predicts for the cascade the data come
  from), refit the same family by maximum likelihood, multiply each measured cost curve by
  ``exp(se Z)``, recompute the exact decision; the probability is the fraction of replicates
  agreeing with the measured decision (Monte-Carlo standard error reported).
  ``"delta"``: ``D = tau_with - tau_without`` is linearised in the law parameters (logit of
  probabilities, log of Beta parameters / Gaussian sigma) and log-costs; parameter covariance
  = inverse expected Fisher information (censored at the caps, averaged over the predicted
  block law) / rounds, log-cost variance = se^2; probability ``Phi(|D| / sd(D))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import Cascade, Model, as_cascade
from polyspec_theory.core.laws import (
    AcceptanceLaw,
    BetaMixed,
    GaussianBaseline,
    IIDGeometric,
    Positional,
)
from polyspec_theory.errors import PolyspecInputError, as_int, as_real, as_real_array
from polyspec_theory.planning.grid import optimize_thresholds
from polyspec_theory.schemes import predict

__all__ = [
    "insert_model",
    "InsertionDecision",
    "insertion_decision",
    "paper_insertion_condition",
    "paper_insertion_check",
    "DecisionConfidence",
    "decision_confidence",
]


def _check_inputs(cascade, position, model, upper_law, lower_law):
    cascade = as_cascade(cascade, chain_only="model insertion (P5)")
    p = as_int(position, "position", low=0, high=cascade.n - 2)
    if not isinstance(model, Model):
        raise PolyspecInputError("model", "must be a Model(name, CostCurve)")
    if any(m.name == model.name for m in cascade.models):
        raise PolyspecInputError("model", f"name {model.name!r} already used in the cascade")
    for name, law in (("upper_law", upper_law), ("lower_law", lower_law)):
        if not isinstance(law, AcceptanceLaw):
            raise PolyspecInputError(name, "must be an AcceptanceLaw")
    return cascade, p


def insert_model(cascade: Cascade, position, model: Model, upper_law: AcceptanceLaw,
                 lower_law: AcceptanceLaw, thresholds=None) -> Cascade:
    """The cascade with ``model`` inserted after ``models[position]``; ``thresholds =
    (theta_up, theta_low)`` for the two new pairs (default: both ``theta_position``)."""
    cascade, p = _check_inputs(cascade, position, model, upper_law, lower_law)
    if thresholds is None:
        thresholds = (cascade.thresholds[p], cascade.thresholds[p])
    if not isinstance(thresholds, (list, tuple)) or len(thresholds) != 2:
        raise PolyspecInputError("thresholds", "must be (theta_up, theta_low)")
    t_up = as_int(thresholds[0], "thresholds[0]", low=1)
    t_low = as_int(thresholds[1], "thresholds[1]", low=1)
    models = cascade.models[: p + 1] + (model,) + cascade.models[p + 1 :]
    laws = cascade.laws[:p] + (upper_law, lower_law) + cascade.laws[p + 1 :]
    th = cascade.thresholds[:p] + (t_up, t_low) + cascade.thresholds[p + 1 :]
    return Cascade(models, laws, th, cascade.policy, f"{cascade.name}+{model.name}")


@dataclass(frozen=True)
class InsertionDecision:
    """Exact P5 decision. ``relative_gain = tau_without / tau_with - 1`` (> 0: helps)."""

    helps: bool
    tau_without: float
    tau_with: float
    speedup_without: float
    speedup_with: float
    relative_gain: float
    thresholds_without: tuple[int, ...]
    thresholds_with: tuple[int, ...]
    optimized: bool
    cascade_without: Cascade
    cascade_with: Cascade

    def to_dict(self) -> dict:
        return {
            "helps": self.helps,
            "tau_without": self.tau_without,
            "tau_with": self.tau_with,
            "speedup_without": self.speedup_without,
            "speedup_with": self.speedup_with,
            "relative_gain": self.relative_gain,
            "thresholds_without": list(self.thresholds_without),
            "thresholds_with": list(self.thresholds_with),
            "optimized": self.optimized,
        }


def insertion_decision(cascade: Cascade, position, model: Model, upper_law: AcceptanceLaw,
                       lower_law: AcceptanceLaw, thresholds=None, *, optimize: bool = False,
                       max_threshold=16) -> InsertionDecision:
    """P5 exact criterion: does inserting ``model`` lower P1's ``tau_1``?

    ``optimize=True`` first optimizes every threshold of both cascades over
    ``1..max_threshold`` (exhaustive, :func:`polyspec_theory.planning.grid.optimize_thresholds`), so
    the two systems are compared at their best; otherwise the given thresholds are used."""
    with_ = insert_model(cascade, position, model, upper_law, lower_law, thresholds)
    without = cascade
    if optimize:
        th0, _ = optimize_thresholds(without, max_threshold)
        th1, _ = optimize_thresholds(with_, max_threshold)
        without = without.with_thresholds(th0)
        with_ = Cascade(with_.models, with_.laws, th1, with_.policy, with_.name)
    p0, p1 = predict(without), predict(with_)
    return InsertionDecision(
        helps=bool(p1.time_per_token < p0.time_per_token),
        tau_without=p0.time_per_token,
        tau_with=p1.time_per_token,
        speedup_without=p0.speedup,
        speedup_with=p1.speedup,
        relative_gain=p0.time_per_token / p1.time_per_token - 1.0,
        thresholds_without=without.thresholds,
        thresholds_with=with_.thresholds,
        optimized=bool(optimize),
        cascade_without=without,
        cascade_with=with_,
    )


def paper_insertion_condition(t_new, t_i, l_new, l_i, l_i_new) -> bool:
    """Paper Thm 3.2 (approximate): insert iff ``T'/T_i < L'(1/L_i - 1/L_i')``.

    ``t_new = T'``, ``t_i = T_i`` (> 0), ``l_i`` = mean emitted length of ``M_i`` verifying
    ``M_{i+1}`` (before), ``l_i_new`` = of ``M_i`` verifying ``M'``, ``l_new`` = of ``M'``
    verifying ``M_{i+1}`` (all >= 1)."""
    tn = as_real(t_new, "t_new", low=0.0)
    ti = as_real(t_i, "t_i", low=0.0, low_open=True)
    ln = as_real(l_new, "l_new", low=1.0)
    li = as_real(l_i, "l_i", low=1.0)
    lin = as_real(l_i_new, "l_i_new", low=1.0)
    return bool(tn / ti < ln * (1.0 / li - 1.0 / lin))


def paper_insertion_check(cascade: Cascade, position, model: Model, upper_law: AcceptanceLaw,
                          lower_law: AcceptanceLaw, thresholds=None) -> dict:
    """The paper's condition evaluated on pairwise fixed-block means (``T = T(1)``); returns
    ``lhs = T'/T_i``, ``rhs = L'(1/L_i - 1/L_i')``, the inputs and ``helps``."""
    new = insert_model(cascade, position, model, upper_law, lower_law, thresholds)
    p = int(position)
    t_up, t_low = new.thresholds[p], new.thresholds[p + 1]
    l_i = cascade.laws[p].mean_emitted(cascade.thresholds[p])
    l_i_new = upper_law.mean_emitted(t_up)
    l_new = lower_law.mean_emitted(t_low)
    t_i = cascade.costs[p].t1
    t_new = model.cost.t1
    return {
        "lhs": t_new / t_i,
        "rhs": l_new * (1.0 / l_i - 1.0 / l_i_new),
        "l_i": l_i,
        "l_i_new": l_i_new,
        "l_new": l_new,
        "t_i": t_i,
        "t_new": t_new,
        "helps": paper_insertion_condition(t_new, t_i, l_new, l_i, l_i_new),
    }


# --- parameterisation of laws (unconstrained coordinates for the delta method) ---------------

def _law_coords(law: AcceptanceLaw):
    """``(u, free, build)``: unconstrained coordinates, which are free (interior), and the
    inverse map ``build(u) -> law``."""
    from scipy import special  # scipy loads where the delta method runs, not with the planner

    if isinstance(law, IIDGeometric):
        a = np.array([law.alpha])
        return (special.logit(a), (a > 0) & (a < 1),
                lambda u: IIDGeometric(float(special.expit(u[0]))))
    if isinstance(law, Positional):
        a = np.asarray(law.alphas)
        return special.logit(a), (a > 0) & (a < 1), lambda u: Positional(special.expit(u))
    if isinstance(law, BetaMixed):
        return (np.log([law.a, law.b]), np.ones(2, bool),
                lambda u: BetaMixed(math.exp(u[0]), math.exp(u[1])))
    if isinstance(law, GaussianBaseline):
        return (np.array([law.mu, math.log(law.sigma)]), np.ones(2, bool),
                lambda u: GaussianBaseline(float(u[0]), math.exp(u[1])))
    raise PolyspecInputError("law", f"unsupported law {type(law).__name__}")


_H = 1e-5


def _fisher(law: AcceptanceLaw, cap_pmf: np.ndarray) -> np.ndarray:
    """Expected Fisher information of one round in ``_law_coords`` coordinates (free ones),
    the cap drawn from ``cap_pmf`` and ``A = cap`` right-censored."""
    u, free, build = _law_coords(law)
    idx = np.flatnonzero(free)
    info = np.zeros((idx.size, idx.size))
    caps = np.flatnonzero(cap_pmf > 0)
    for g in caps:
        p0 = law.pmf_vector(int(g))
        grads = []
        for j in idx:
            up, dn = u.copy(), u.copy()
            up[j] += _H
            dn[j] -= _H
            grads.append((build(up).pmf_vector(int(g)) - build(dn).pmf_vector(int(g))) / (2 * _H))
        d = np.array(grads)  # (params, k)
        ok = p0 > 1e-300
        info += cap_pmf[g] * (d[:, ok] / p0[ok]) @ d[:, ok].T
    return info


def _refit(law: AcceptanceLaw, accepted, caps) -> AcceptanceLaw:
    if isinstance(law, Positional):
        return Positional.fit(accepted, caps, max_positions=len(law.alphas)).law
    return type(law).fit(accepted, caps).law


@dataclass(frozen=True)
class DecisionConfidence:
    """``probability`` that the measured decision equals the true one (plug-in estimate).
    ``std_error``: Monte-Carlo error (bootstrap) or 0 (delta). ``delta`` =
    ``tau_with - tau_without`` at the measured values, ``delta_sd`` its delta-method sd
    (``None`` for the bootstrap, which reports the replicate sd instead)."""

    probability: float
    method: str
    helps: bool
    delta: float
    delta_sd: float | None
    std_error: float
    n_boot: int | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _per_measured(x, n_meas: int, field: str, integer: bool) -> np.ndarray:
    if np.ndim(x) == 0:
        arr = np.full(n_meas, x if x is not None else 0)
    else:
        arr = np.asarray([0 if v is None else v for v in x])
    arr = as_real_array(arr, field, low=0.0)
    if arr.size != n_meas:
        raise PolyspecInputError(field, f"need one value per measured item ({n_meas}), "
                                 f"got {arr.size}")
    if integer:
        if (arr != np.round(arr)).any():
            raise PolyspecInputError(field, "values must be integers")
        arr = arr.astype(np.int64)
    return arr


def decision_confidence(cascade: Cascade, position, model: Model, upper_law: AcceptanceLaw,
                        lower_law: AcceptanceLaw, /, thresholds=None, *, rounds,
                        cost_rel_se=0.0, method: str = "bootstrap", n_boot=400,
                        seed=0) -> DecisionConfidence:
    """P(measured insertion decision == true decision) — see the module docstring.

    ``rounds``: observed rounds behind each measured law, an int (all) or a sequence of
    ``n + 1`` entries: the cascade's ``n - 1`` pair laws, then ``upper_law``, ``lower_law``
    (0 or ``None``: known exactly). ``cost_rel_se``: relative standard error of each measured
    cost, a number or ``n + 1`` entries (the cascade's models, then ``model``). Thresholds are
    held fixed (not re-optimized). ``method``: ``"bootstrap"`` (``n_boot`` replicates,
    ``seed``) or ``"delta"``."""
    cascade, p = _check_inputs(cascade, position, model, upper_law, lower_law)
    with_ = insert_model(cascade, p, model, upper_law, lower_law, thresholds)
    n = cascade.n
    r = _per_measured(rounds, n + 1, "rounds", integer=True)
    se = _per_measured(cost_rel_se, n + 1, "cost_rel_se", integer=False)
    if method not in ("bootstrap", "delta"):
        raise PolyspecInputError("method", f"must be 'bootstrap' or 'delta', got {method!r}")
    pred0, pred1 = predict(cascade), predict(with_)
    laws = list(cascade.laws) + [upper_law, lower_law]
    cap_pmfs = [pred0.levels[j].block_pmf for j in range(n - 1)]
    cap_pmfs += [pred1.levels[p].block_pmf, pred1.levels[p + 1].block_pmf]
    costs = [m.cost for m in cascade.models] + [model.cost]
    delta0 = pred1.time_per_token - pred0.time_per_token
    helps = bool(delta0 < 0)

    def build(new_laws, new_costs):
        models = tuple(Model(m.name, c, m.overhead)
                       for m, c in zip(cascade.models, new_costs[:n], strict=True))
        c0 = Cascade(models, tuple(new_laws[: n - 1]), cascade.thresholds, cascade.policy)
        c1 = insert_model(c0, p, Model(model.name, new_costs[n], model.overhead),
                          new_laws[n - 1],
                          new_laws[n], (with_.thresholds[p], with_.thresholds[p + 1]))
        return predict(c1).time_per_token - predict(c0).time_per_token

    if method == "bootstrap":
        nb = as_int(n_boot, "n_boot", low=1, high=1_000_000)
        rng = np.random.default_rng(as_int(seed, "seed", low=0))
        agree = 0
        deltas = np.empty(nb)
        for b in range(nb):
            new_laws = []
            for j, law in enumerate(laws):
                if r[j] == 0:
                    new_laws.append(law)
                    continue
                cp = cap_pmfs[j]
                caps = rng.choice(cp.size, size=int(r[j]), p=cp / cp.sum())
                acc = law.rvs(caps, seed=rng)
                new_laws.append(_refit(law, acc, caps))
            z = rng.standard_normal(n + 1)
            new_costs = [c.scaled(math.exp(s * zz)) if s > 0 else c
                         for c, s, zz in zip(costs, se, z, strict=True)]
            d = build(new_laws, new_costs)
            deltas[b] = d
            agree += int((d < 0) == helps)
        prob = agree / nb
        return DecisionConfidence(
            probability=prob, method="bootstrap", helps=helps, delta=delta0,
            delta_sd=float(np.std(deltas, ddof=1)) if nb > 1 else None,
            std_error=math.sqrt(prob * (1 - prob) / nb), n_boot=nb,
        )

    # delta method
    coords = [_law_coords(law) for law in laws]
    variance = 0.0
    for j, (u, free, mk) in enumerate(coords):
        if r[j] == 0 or not free.any():
            continue
        idx = np.flatnonzero(free)
        grad = np.empty(idx.size)
        for t, k in enumerate(idx):
            up, dn = u.copy(), u.copy()
            up[k] += _H
            dn[k] -= _H
            lu, ld = list(laws), list(laws)
            lu[j], ld[j] = mk(up), mk(dn)
            grad[t] = (build(lu, costs) - build(ld, costs)) / (2 * _H)
        info = _fisher(laws[j], cap_pmfs[j])
        cov = np.linalg.pinv(info) / r[j]
        variance += float(grad @ cov @ grad)
    for k in range(n + 1):
        if se[k] == 0:
            continue
        cu = list(costs)
        cd = list(costs)
        cu[k] = costs[k].scaled(math.exp(_H))
        cd[k] = costs[k].scaled(math.exp(-_H))
        g = (build(laws, cu) - build(laws, cd)) / (2 * _H)
        variance += (g * se[k]) ** 2
    sd = math.sqrt(max(variance, 0.0))
    from scipy import stats

    prob = 1.0 if sd == 0.0 else float(stats.norm.cdf(abs(delta0) / sd))
    return DecisionConfidence(probability=prob, method="delta", helps=helps, delta=delta0,
                              delta_sd=sd, std_error=0.0, n_boot=None)
