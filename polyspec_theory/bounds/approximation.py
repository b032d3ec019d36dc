"""P4: the polybasic paper's Lemma 3.1 in its two readings (docs/theory.md §6).

Lemma 3.1 (Polybasic, ICML'25): the time to generate ``N`` tokens is
``T = sum_{i=1}^{n-1} (N/L_i) T_i + beta (N/L_{n-1}) T_n``.

(a) **Exact accounting identity.** With ``L_i := N/F_i`` (``F_i`` = forwards of ``M_i`` while
generating the ``N`` tokens), ``T_i`` the mean wall time of one forward of ``M_i`` and
``beta := F_n/F_{n-1}``, the formula is ``sum_i F_i T_i``: exactly the total time. Under the
block policy ``M_n`` runs exactly ``G_{n-1} = theta_{n-1}`` forwards per forward of
``M_{n-1}``, so ``beta = E[G_{n-1}] = theta_{n-1}`` also holds exactly on any finite run.
With expected counts from P1 (``F_i/N`` = ``forwards_per_token``, ``T_i = E[T_i(G_i + 1)]``)
it reproduces P1's ``tau_1`` (:func:`identity_from_prediction`).

(b) **Approximation.** ``L_i`` replaced by the *pairwise* mean emitted length ``E[L_i]`` of
the pair ``(M_i, M_{i+1})`` verifying a *fixed* block of ``theta_i`` tokens, ``beta =
theta_{n-1}`` and ``T_i = T_i(theta_i + 1)`` (``costs="block"``) or ``T_i(1)``
(``costs="unit"``, the paper's constant forward time). It ignores that (i) ``M_{i+1}``'s
forwards per final token are ``phi``-multiplied along the chain
(``F_{i+1} = F_i phi_{i+1}``, ``phi_{i+1} ~ theta_i / E[L_{i+1}]``, not ``F_i``-free), and
(ii) blocks above the bottom are random (``G_i >= theta_i``), which changes both the law of
``L_i`` and the verify cost. :func:`paper_approximation` returns its relative error against
P1; :func:`error_curve` sweeps one threshold or one iid acceptance rate for plotting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import Cascade, as_cascade
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.core.p1 import Prediction
from polyspec_theory.errors import PolyspecInputError, as_int, as_int_array, as_real, as_real_array
from polyspec_theory.schemes import predict

__all__ = [
    "lemma31_time",
    "identity_from_counts",
    "identity_from_prediction",
    "PaperApproximation",
    "paper_approximation",
    "approximation_error",
    "error_curve",
]

COST_READINGS = ("block", "unit")


def lemma31_time(n_tokens, lengths, costs, beta) -> float:
    """Evaluate ``sum_{i<n} (N/L_i) T_i + beta (N/L_{n-1}) T_n``.

    ``lengths`` = ``L_1..L_{n-1}`` (> 0), ``costs`` = ``T_1..T_n`` (>= 0), ``beta`` >= 0."""
    n_tok = as_real(n_tokens, "n_tokens", low=0.0)
    lens = as_real_array(lengths, "lengths", low=0.0)
    if (lens <= 0).any():
        raise PolyspecInputError("lengths", "values must be > 0")
    ts = as_real_array(costs, "costs", low=0.0, min_len=2)
    if ts.size != lens.size + 1:
        raise PolyspecInputError(
            "costs", f"need one cost per model ({lens.size + 1}) for {lens.size} lengths, "
            f"got {ts.size}"
        )
    b = as_real(beta, "beta", low=0.0)
    return float(np.sum(n_tok / lens * ts[:-1]) + b * n_tok / lens[-1] * ts[-1])


def identity_from_counts(n_tokens, forward_counts, forward_costs, beta=None) -> float:
    """Reading (a): Lemma 3.1 with ``L_i := N/F_i``. ``forward_counts`` is ``F_1..F_n``
    (then ``beta = F_n/F_{n-1}`` unless given) or ``F_1..F_{n-1}`` with ``beta`` given
    (docs/theory.md P4: ``beta = E[G_{n-1}]``); ``forward_costs`` is ``T_1..T_n``, the mean
    time of one forward of each model. Equals ``sum_i F_i T_i``, the total time, when
    ``F_n = beta F_{n-1}``."""
    n_tok = as_real(n_tokens, "n_tokens", low=0.0, low_open=True)
    f = as_int_array(forward_counts, "forward_counts", low=1)
    ts = as_real_array(forward_costs, "forward_costs", low=0.0, min_len=2)
    n = ts.size
    if f.size == n:
        if beta is None:
            beta = f[-1] / f[-2]
        f = f[:-1]
    elif f.size != n - 1:
        raise PolyspecInputError(
            "forward_counts", f"need {n} (F_1..F_n) or {n - 1} counts with beta, got {f.size}"
        )
    if beta is None:
        raise PolyspecInputError("beta", "required when forward_counts omits F_n")
    return lemma31_time(n_tok, n_tok / f, ts, beta)


def identity_from_prediction(prediction: Prediction) -> float:
    """Reading (a) with P1's expected counts per generated token: returns ``tau_1`` (time per
    token), equal to ``prediction.time_per_token`` up to rounding."""
    if not isinstance(prediction, Prediction):
        raise PolyspecInputError("prediction", "must be a Prediction (from predict)")
    lv = prediction.levels
    lengths = [1.0 / x.forwards_per_token for x in lv[:-1]]
    costs = [x.forward_cost + x.overhead for x in lv]  # a verification round's time
    return lemma31_time(1.0, lengths, costs, lv[-2].mean_block)


@dataclass(frozen=True)
class PaperApproximation:
    """Reading (b) against P1, per generated token. ``relative_error`` is
    ``tau_approx/tau_exact - 1`` (negative: the paper's formula is optimistic)."""

    costs_reading: str
    pairwise_mean_emitted: tuple[float, ...]  # E[L_i] with fixed cap theta_i
    beta: float
    forward_costs: tuple[float, ...]  # T_i used in the formula
    forwards_per_token: tuple[float, ...]  # 1/L_1, ..., 1/L_{n-1}, beta/L_{n-1}
    exact_forwards_per_token: tuple[float, ...]
    time_per_token: float
    speedup: float
    exact_time_per_token: float
    exact_speedup: float
    relative_error: float
    speedup_relative_error: float

    def to_dict(self) -> dict:
        return {
            "formula": "sum_{i<n} T_i/L_i + beta T_n/L_{n-1} (Polybasic Lemma 3.1, "
            "pairwise E[L_i], fixed blocks)",
            "costs_reading": self.costs_reading,
            "pairwise_mean_emitted": list(self.pairwise_mean_emitted),
            "beta": self.beta,
            "forward_costs": list(self.forward_costs),
            "forwards_per_token": list(self.forwards_per_token),
            "exact_forwards_per_token": list(self.exact_forwards_per_token),
            "time_per_token": self.time_per_token,
            "speedup": self.speedup,
            "exact_time_per_token": self.exact_time_per_token,
            "exact_speedup": self.exact_speedup,
            "relative_error": self.relative_error,
            "speedup_relative_error": self.speedup_relative_error,
        }


def paper_approximation(cascade: Cascade, prediction: Prediction | None = None, *,
                        costs: str = "block") -> PaperApproximation:
    """Reading (b) of Lemma 3.1 for ``cascade`` and its error against P1 (``prediction``
    is recomputed when not given). ``costs``: ``"block"`` uses ``T_i(theta_i + 1)`` (fixed
    blocks), ``"unit"`` uses ``T_i(1)``; ``M_n`` always ``T_n(1)``."""
    cascade = as_cascade(cascade, chain_only="the paper approximation (P4)")
    if costs not in COST_READINGS:
        raise PolyspecInputError("costs", f"must be one of {COST_READINGS}, got {costs!r}")
    if prediction is None:
        prediction = predict(cascade)
    elif not isinstance(prediction, Prediction):
        raise PolyspecInputError("prediction", "must be a Prediction (from predict)")
    th = cascade.thresholds
    el = tuple(cascade.laws[i].mean_emitted(th[i]) for i in range(cascade.n - 1))
    if costs == "block":
        ts = [cascade.costs[i](th[i] + 1) for i in range(cascade.n - 1)]
    else:
        ts = [c.t1 for c in cascade.costs[:-1]]
    # a verifier's T_i is the time of one verification round: forward + per-round overhead
    ts = [t + m.overhead for t, m in zip(ts, cascade.models, strict=False)]
    ts.append(cascade.costs[-1].t1)
    beta = float(th[-1])
    tau = lemma31_time(1.0, el, ts, beta)
    t_ar = prediction.autoregressive_time_per_token
    exact = prediction.time_per_token
    fpt = tuple(1.0 / x for x in el) + (beta / el[-1],)
    return PaperApproximation(
        costs_reading=costs,
        pairwise_mean_emitted=el,
        beta=beta,
        forward_costs=tuple(float(t) for t in ts),
        forwards_per_token=fpt,
        exact_forwards_per_token=tuple(x.forwards_per_token for x in prediction.levels),
        time_per_token=tau,
        speedup=t_ar / tau,
        exact_time_per_token=exact,
        exact_speedup=prediction.speedup,
        relative_error=tau / exact - 1.0,
        speedup_relative_error=(t_ar / tau) / prediction.speedup - 1.0,
    )


def approximation_error(cascade: Cascade, *, costs: str = "block") -> float:
    """``tau_approx / tau_exact - 1`` of reading (b) against P1."""
    return paper_approximation(cascade, costs=costs).relative_error


def error_curve(cascade: Cascade, level, *, thresholds=None, alphas=None,
                costs: str = "block") -> dict:
    """Relative error of reading (b) as one parameter of pair ``level`` (0-based, the pair
    ``(M_level, M_level+1)``) varies: either its threshold over ``thresholds`` or, with
    ``alphas``, its law replaced by iid ``alpha``. Returns ``{"x", "relative_error",
    "speedup_relative_error", "exact_speedup", "approx_speedup"}`` arrays (plot-ready)."""
    cascade = as_cascade(cascade, chain_only="the paper approximation (P4)")
    level = as_int(level, "level", low=0, high=cascade.n - 2)
    if (thresholds is None) == (alphas is None):
        raise PolyspecInputError("thresholds", "give exactly one of thresholds or alphas")
    if thresholds is not None:
        xs = as_int_array(thresholds, "thresholds", low=1)
        variants = []
        for t in xs:
            th = list(cascade.thresholds)
            th[level] = int(t)
            variants.append(cascade.with_thresholds(th))
    else:
        xs = as_real_array(alphas, "alphas", low=0.0, high=1.0)
        variants = []
        for a in xs:
            laws = list(cascade.laws)
            laws[level] = IIDGeometric(float(a))
            variants.append(Cascade(cascade.models, tuple(laws), cascade.thresholds,
                                    cascade.policy, cascade.name))
    res = [paper_approximation(c, costs=costs) for c in variants]
    return {
        "x": np.asarray(xs, dtype=np.float64),
        "relative_error": np.array([r.relative_error for r in res]),
        "speedup_relative_error": np.array([r.speedup_relative_error for r in res]),
        "exact_speedup": np.array([r.exact_speedup for r in res]),
        "approx_speedup": np.array([r.speedup for r in res]),
    }
