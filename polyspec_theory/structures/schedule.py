"""Adaptive draft length (docs/theory.md Part III-D, A1–A4).

* :class:`HFSchedule` ``{"kind": "hf", "start": 5, "min": 1, "max": 16}`` — Hugging Face
  assisted generation's heuristic: after a round whose block was fully accepted (``A = G``)
  the pair's length grows by 2, otherwise it shrinks by 1, clipped to ``[min, max]``. The
  length is a Markov chain driven by the rounds (A1); :func:`hf_two_model` gives the exact
  stationary speedup of two models, :mod:`polyspec_theory.structures.structured` the cascade
  version.
* :class:`ConfidenceSchedule` ``{"kind": "confidence", "eta": 0.6[, "max": 8]}`` — llama.cpp's
  cut-off: the drafter stops as soon as its top probability drops below ``eta`` (that token is
  not drafted), at most ``max`` tokens (default: the pair's threshold). Needs the joint law of
  drafter confidence and acceptance, :class:`ConfidenceLaw` ``{"confidence": {"beta": [a, b],
  "logistic": [b0, b1]}}`` (A2): per drafted position the top probability ``C ~ Beta(a, b)``
  and, given ``C = c``, the token is accepted with probability ``sigmoid(b0 + b1 logit c)``
  (``b0 = 0, b1 = 1``: a calibrated drafter, ``P(accept | c) = c``); positions independent.
  :func:`confidence_two_model` is the exact two-model speedup, :func:`fit_confidence_law`
  the maximum-likelihood fit from ``(confidence, accepted)`` records (A3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_probability,
    as_real,
    as_real_array,
    require_keys,
)

__all__ = [
    "MAX_SCHEDULE_LENGTH",
    "HFSchedule",
    "ConfidenceSchedule",
    "schedule_from_config",
    "ConfidenceLaw",
    "ConfidenceFit",
    "fit_confidence_law",
    "stationary_distribution",
]

MAX_SCHEDULE_LENGTH = 128  # the HF length chain's largest state (finite state space)
_CLIP = 1e-9  # confidences are clipped to [_CLIP, 1 - _CLIP] in fits (a top probability of
# exactly 1.0 has no Beta density)


# --- schedules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFSchedule:
    """HF assisted generation's length schedule: ``+2`` after a fully accepted block, ``-1``
    otherwise, within ``[min, max]``, starting at ``start``."""

    start: int
    min: int = 1
    max: int = 16
    kind: str = "hf"

    def __post_init__(self):
        lo = as_int(self.min, "min", low=1, high=MAX_SCHEDULE_LENGTH)
        hi = as_int(self.max, "max", low=lo, high=MAX_SCHEDULE_LENGTH)
        st = as_int(self.start, "start", low=lo, high=hi)
        object.__setattr__(self, "min", lo)
        object.__setattr__(self, "max", hi)
        object.__setattr__(self, "start", st)

    @property
    def states(self) -> np.ndarray:
        """The lengths ``min..max``."""
        return np.arange(self.min, self.max + 1)

    def next_length(self, length: int, full: bool) -> int:
        return min(length + 2, self.max) if full else max(length - 1, self.min)

    def to_config(self) -> dict:
        return {"kind": "hf", "start": self.start, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class ConfidenceSchedule:
    """The drafter stops at the first position whose top probability is below ``eta`` (that
    token is not drafted) or after ``max`` tokens (``None``: the pair's threshold)."""

    eta: float
    max: int | None = None
    kind: str = "confidence"

    def __post_init__(self):
        object.__setattr__(self, "eta", as_probability(self.eta, "eta"))
        if self.max is not None:
            object.__setattr__(self, "max", as_int(self.max, "max", low=1, high=4096))

    def cap(self, threshold: int) -> int:
        return self.max if self.max is not None else int(threshold)

    def to_config(self) -> dict:
        out = {"kind": "confidence", "eta": self.eta}
        if self.max is not None:
            out["max"] = self.max
        return out


def schedule_from_config(spec, field: str = "schedule"):
    """``{"kind": "hf", "start", "min" (default 1), "max"}`` or ``{"kind": "confidence",
    "eta"[, "max"]}`` (schedules pass through)."""
    if isinstance(spec, (HFSchedule, ConfidenceSchedule)):
        return spec
    if not isinstance(spec, dict):
        raise PolyspecInputError(field, f"must be an object with a 'kind', got {spec!r}")
    kind = spec.get("kind")
    try:
        if kind == "hf":
            require_keys(spec, field, required=["kind", "start", "max"], optional=["min"])
            return HFSchedule(spec["start"], spec.get("min", 1), spec["max"])
        if kind == "confidence":
            require_keys(spec, field, required=["kind", "eta"], optional=["max"])
            return ConfidenceSchedule(spec["eta"], spec.get("max"))
    except PolyspecInputError as e:
        if e.field.startswith(field):
            raise
        raise PolyspecInputError(f"{field}.{e.field}", str(e).split(": ", 1)[1]) from None
    raise PolyspecInputError(f"{field}.kind", f"must be 'hf' or 'confidence', got {kind!r}")


# --- the joint law of confidence and acceptance (A2) -----------------------------------------


def _log_sigmoid(x):
    from scipy import special

    return special.log_expit(x)


class ConfidenceLaw(AcceptanceLaw):
    """A2: per drafted position, top probability ``C ~ Beta(a, b)``; accepted with
    probability ``sigmoid(b0 + b1 logit C)``; positions and rounds independent. Without a
    cut-off it is iid acceptance with ``alpha = E[sigmoid(b0 + b1 logit C)]``."""

    family = "confidence"

    def __init__(self, beta, logistic, field: str = "confidence"):
        for name, v in (("beta", beta), ("logistic", logistic)):
            if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) != 2:
                raise PolyspecInputError(f"{field}.{name}", f"must be two numbers, got {v!r}")
        self.a = as_real(beta[0], f"{field}.beta[0]", low=0.0, low_open=True)
        self.b = as_real(beta[1], f"{field}.beta[1]", low=0.0, low_open=True)
        self.b0 = as_real(logistic[0], f"{field}.logistic[0]")
        self.b1 = as_real(logistic[1], f"{field}.logistic[1]")
        self._alpha = self.joint(0.0)

    @property
    def n_params(self) -> int:
        return 4

    def to_config(self) -> dict:
        return {"confidence": {"beta": [self.a, self.b], "logistic": [self.b0, self.b1]}}

    def accept_probability(self, c):
        """``P(accepted | C = c) = sigmoid(b0 + b1 logit c)`` (c = 0 or 1: the limits)."""
        from scipy import special

        c = np.asarray(c, dtype=np.float64)
        with np.errstate(divide="ignore"):
            x = np.log(c) - np.log1p(-c)
        z = self.b0 + (self.b1 * x if self.b1 != 0 else 0.0)
        return special.expit(z)

    def draft_probability(self, eta) -> float:
        """``q(eta) = P(C >= eta)`` (a position is drafted under the cut-off)."""
        from scipy import stats

        eta = as_probability(eta, "eta")
        return float(stats.beta.sf(eta, self.a, self.b))

    def joint(self, eta) -> float:
        """``r(eta) = P(C >= eta, accepted) = int_{logit eta}^inf sigmoid(b0 + b1 x)
        sigmoid(x)^a sigmoid(-x)^b dx / B(a, b)`` (the Beta law in the logit domain: a smooth
        integrand with exponential tails, no endpoint singularity)."""
        from scipy import integrate, special

        eta = as_probability(eta, "eta")
        if eta >= 1.0:
            return 0.0
        a, b, b0, b1 = self.a, self.b, self.b0, self.b1
        lb = special.betaln(a, b)

        def f(x):
            return math.exp(a * _log_sigmoid(x) + b * _log_sigmoid(-x) - lb
                            + _log_sigmoid(b0 + b1 * x))

        lo = -math.inf if eta <= 0.0 else math.log(eta) - math.log1p(-eta)
        mode = math.log(a) - math.log(b)  # the integrand's bulk (logit of a/(a+b) scale)
        sd = math.sqrt(1.0 / a + 1.0 / b)  # its width in the logit domain
        knots = sorted({lo, *(k for k in (mode - 8 * sd, mode, mode + 8 * sd) if k > lo)})
        if knots[-1] != math.inf:
            knots.append(math.inf)
        total = 0.0
        for x0, x1 in zip(knots[:-1], knots[1:], strict=True):
            v, _ = integrate.quad(f, x0, x1, epsabs=1e-15, epsrel=1e-12, limit=200)
            total += v
        return float(min(max(total, 0.0), self.draft_probability(eta)))

    @property
    def alpha(self) -> float:
        """Acceptance without a cut-off, ``r(0)``."""
        return self._alpha

    def survival(self, kmax: int) -> np.ndarray:
        return np.power(self._alpha, np.arange(as_int(kmax, "kmax", low=0) + 1,
                                               dtype=np.float64))

    def _point_masses(self, s, cap):
        return s[:-1] * (1.0 - self._alpha)

    def mean(self, cap) -> float:
        return IIDGeometric(self._alpha).mean(cap)

    @classmethod
    def _mle(cls, d):
        raise PolyspecInputError(
            "confidence", "fit from (confidence, accepted) records with fit_confidence_law")


@dataclass(frozen=True)
class ConfidenceFit:
    """A3: the fitted law, the two log-likelihood factors and the sample sizes."""

    law: ConfidenceLaw
    loglik_confidence: float
    loglik_acceptance: float
    n_confidence: int
    n_accepted: int
    truncation: float

    def to_dict(self) -> dict:
        return {"law": self.law.to_config(), "loglik_confidence": self.loglik_confidence,
                "loglik_acceptance": self.loglik_acceptance, "n_confidence": self.n_confidence,
                "n_accepted": self.n_accepted, "truncation": self.truncation}


def _beta_loglik(a, b, s1, s2, n, trunc):
    from scipy import special, stats

    ll = (a - 1.0) * s1 + (b - 1.0) * s2 - n * special.betaln(a, b)
    if trunc > 0.0:
        ll -= n * math.log(max(float(stats.beta.sf(trunc, a, b)), 1e-300))
    return ll


def fit_confidence_law(confidence, accepted, truncation: float = 0.0) -> ConfidenceFit:
    """A3: maximum-likelihood :class:`ConfidenceLaw` from per-token records.

    ``confidence``: the drafter's top probability at each recorded position (drafted tokens,
    and, if the decoder records it, the position where it stopped). ``accepted``: 1/0 for
    tokens the verifier decided on (up to and including the first rejection of a round), NaN
    for the others (not drafted, or after the first rejection). The likelihood factorizes:
    the Beta part uses every confidence, left-truncated at ``truncation`` when only values
    ``>= truncation`` could be recorded (density ``f(c) / P(C >= truncation)``); the logistic
    part uses the decided tokens (Newton's method on ``(b0, b1)``; positions independent, so
    conditioning on being decided does not bias it). Confidences are clipped to
    ``[1e-9, 1 - 1e-9]``.
    """
    from scipy import optimize, special

    c = as_real_array(confidence, "confidence", low=0.0, high=1.0, min_len=2)
    acc = np.asarray(accepted, dtype=np.float64)
    if acc.shape != c.shape:
        raise PolyspecInputError("accepted", f"must have one entry per confidence ({c.size})")
    known = ~np.isnan(acc)
    if not np.all(np.isin(acc[known], (0.0, 1.0))):
        raise PolyspecInputError("accepted", "values must be 1 (accepted), 0 or NaN")
    trunc = as_real(truncation, "truncation", low=0.0, high=1.0, high_open=True)
    if (c < trunc).any():
        raise PolyspecInputError("confidence", f"values below the truncation {trunc}")
    cc = np.clip(c, _CLIP, 1.0 - _CLIP)
    s1, s2, n = float(np.log(cc).sum()), float(np.log1p(-cc).sum()), cc.size
    m, v = float(cc.mean()), float(cc.var())
    common = m * (1 - m) / v - 1.0 if v > 0 else 10.0
    x0 = np.log([max(m * common, 1e-2), max((1 - m) * common, 1e-2)])

    def nll(x):
        a, b = np.exp(np.clip(x, -20, 20))
        return -_beta_loglik(a, b, s1, s2, n, trunc)

    best = None
    for start in (x0, np.zeros(2)):
        res = optimize.minimize(nll, start, method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
        if best is None or res.fun < best.fun:
            best = res
    a, b = np.exp(np.clip(best.x, -20, 20))
    y = acc[known]
    if y.size < 2 or y.min() == y.max():
        raise PolyspecInputError(
            "accepted", "need decided tokens of both outcomes (accepted and rejected): the "
            "logistic slope is not identified otherwise")
    x = np.log(cc[known]) - np.log1p(-cc[known])
    X = np.stack([np.ones_like(x), x], axis=1)
    w = np.zeros(2)
    for _ in range(100):
        z = X @ w
        pr = special.expit(z)
        grad = X.T @ (y - pr)
        hess = (X * (pr * (1 - pr))[:, None]).T @ X
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            raise PolyspecInputError("confidence", "all decided tokens share one confidence: "
                                     "the logistic slope is not identified") from None
        w = w + step
        if np.max(np.abs(step)) < 1e-12 * (1 + np.max(np.abs(w))):
            break
    else:
        raise PolyspecInputError("accepted", "the logistic fit did not converge (the "
                                 "outcomes are (nearly) separated by the confidence)")
    z = X @ w
    ll_acc = float(np.sum(y * _log_sigmoid(z) + (1 - y) * _log_sigmoid(-z)))
    law = ConfidenceLaw([float(a), float(b)], [float(w[0]), float(w[1])])
    return ConfidenceFit(law, -float(best.fun), ll_acc, int(n), int(y.size), trunc)


# --- Markov chains -----------------------------------------------------------------------------


def _gth(P: np.ndarray) -> np.ndarray:
    """Stationary law of an irreducible stochastic matrix by Grassmann–Taksar–Heyman state
    reduction (no subtractions: accurate to rounding even when nearly reducible)."""
    A = np.array(P, dtype=np.float64)
    n = A.shape[0]
    for k in range(n - 1, 0, -1):
        s = A[k, :k].sum()
        A[:k, k] /= s
        A[:k, :k] += np.outer(A[:k, k], A[k, :k])
    pi = np.zeros(n)
    pi[0] = 1.0
    for k in range(1, n):
        pi[k] = pi[:k] @ A[:k, k]
    return pi / pi.sum()


def stationary_distribution(P, start: int, field: str = "schedule") -> np.ndarray:
    """The long-run state frequencies of the Markov chain ``P`` started at ``start``: the
    stationary law of the one closed class it reaches (GTH on that class). Several closed
    classes reachable from ``start`` make the long-run average random: an error."""
    P = as_real_array(P, "P", low=0.0, ndim=2)
    n = P.shape[0]
    if P.shape != (n, n) or np.any(np.abs(P.sum(axis=1) - 1.0) > 1e-9):
        raise PolyspecInputError("P", "must be a square stochastic matrix (rows sum to 1)")
    start = as_int(start, "start", low=0, high=n - 1)
    # transitive closure of the transition graph by repeated squaring (boolean)
    R = ((P > 0) | np.eye(n, dtype=bool)).astype(np.float64)
    for _ in range(max(1, int(np.ceil(np.log2(max(n, 2)))))):
        R = ((R @ R) > 0).astype(np.float64)
    reach = R > 0
    idx = np.flatnonzero(reach[start])
    # i is in a closed class iff everything it reaches reaches it back
    closed = [i for i in idx if np.all(reach[np.flatnonzero(reach[i]), i])]
    classes = {tuple(np.flatnonzero(reach[i])) for i in closed}
    if len(classes) != 1:
        raise PolyspecInputError(
            field, f"the length chain reaches {len(classes)} closed classes from its start: "
            "the long-run speedup depends on chance (change min/max/start or the law)")
    cls = np.asarray(sorted(next(iter(classes))))
    pi = np.zeros(n)
    pi[cls] = _gth(P[np.ix_(cls, cls)])
    return pi
