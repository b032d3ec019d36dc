"""P2, P3: bounds on the forward count ``N`` of a renewal block fill (docs/theory.md §6).

Rounds emit iid lengths ``L >= 1`` (law ``l_pmf``, index = length) with ``mu = E[L]``,
``ell = max L``; ``S_k = L^(1) + ... + L^(k)`` and ``N = min{k : S_k >= theta}``,
``phi = E[N]`` (what :func:`polyspec_theory.core.p1.renewal_fill` computes exactly).

**P2 (derivation of the form implemented).** ``N`` is a stopping time and ``E[N] <= theta``,
so Wald's identity gives ``E[S_N] = mu phi``.
*Lower:* ``S_N >= theta`` gives ``phi >= theta/mu``; also ``N >= 1``, so
``phi >= max(1, theta/mu)`` (the spec's ``theta/mu`` is valid but not sharp when
``theta < mu``; we report both).
*Upper:* ``S_N >= theta`` is the same event as ``S_N > theta - 1`` (integer lengths), so ``N``
is the first passage strictly above level ``t = theta - 1`` and ``S_N = theta - 1 + R_t``
with ``R_t`` the overshoot. Lorden (1970): ``sup_{t>=0} E[R_t] <= E[L^2]/E[L]``. Hence
``phi <= (theta - 1 + E[L^2]/mu) / mu``. The trivial bound ``S_N <= theta - 1 + ell`` gives
``phi <= (theta - 1 + ell)/mu``. The spec's
``(theta + min(ell - 1, E[L^2]/mu - 1))/mu`` is exactly the smaller of the two, so the spec is
correct; note however that ``E[L^2] <= ell E[L]`` always (``L^2 <= ell L``), so the ``min``
is always attained by the Lorden term: the trivial term never improves the bound.
Both bounds are attained: the lower when there is no overshoot (``L = 1`` a.s.), the upper
for ``L = ell`` a.s. and ``theta = 1 (mod ell)`` (``R = ell = E[L^2]/mu``).

**P3.** ``P(N > k) = P(S_k < theta) = P(S_k <= theta - 1)``. Hoeffding for ``L`` in
``[1, ell]``: ``P(S_k - k mu <= -(k mu - theta)) <= exp(-2k(mu - theta/k)^2/(ell - 1)^2)``
for ``k > theta/mu`` (the spec's statement). Because lengths are integers the event is also
``S_k <= theta - 1``, which gives the sharper valid bound with ``theta`` replaced by
``theta - 1`` (``lattice=True``, for ``k > (theta-1)/mu``). :func:`exact_tail` gives the exact
``P(N > k)`` by dynamic programming. CLT for renewal counting: the number of rounds needed for
``N_tok`` tokens is ``N_tok/mu + O(sqrt(N_tok))`` with variance ``~ N_tok sigma^2 / mu^3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_real, as_real_array

__all__ = [
    "PhiBounds",
    "length_moments",
    "phi_bounds",
    "hoeffding_tail",
    "exact_tail",
    "forward_count_moments",
    "target_forwards_clt",
]


def _l_pmf(l_pmf, field: str = "l_pmf") -> np.ndarray:
    """A pmf over lengths 0..ell with P(L = 0) = 0, sums to 1 (within 1e-9)."""
    p = as_real_array(l_pmf, field, low=0.0, min_len=2)
    if p[0] != 0.0:
        raise PolyspecInputError(field, "P(L = 0) must be 0 (every round emits >= 1 token)")
    s = float(p.sum())
    if abs(s - 1.0) > 1e-9:
        raise PolyspecInputError(field, f"must sum to 1, sums to {s!r}")
    nz = np.flatnonzero(p)
    return p[: int(nz[-1]) + 1] / s


def length_moments(l_pmf) -> dict:
    """``mu = E[L]``, ``m2 = E[L^2]``, ``var = Var[L]``, ``ell = max L`` of a length pmf."""
    p = _l_pmf(l_pmf)
    k = np.arange(p.size, dtype=np.float64)
    mu = float(p @ k)
    m2 = float(p @ (k * k))
    var = float(p @ (k - mu) ** 2)
    return {"mu": mu, "m2": m2, "var": var, "ell": int(p.size - 1)}


@dataclass(frozen=True)
class PhiBounds:
    """P2 sandwich for ``phi = E[N]``. ``lower = max(1, wald_lower)``,
    ``upper = min(lorden_upper, trivial_upper)`` (always ``= lorden_upper``, see module)."""

    theta: int
    mu: float
    wald_lower: float  # theta / mu (the spec's P2)
    lower: float  # max(1, theta / mu)
    lorden_upper: float  # (theta - 1 + E[L^2]/mu) / mu
    trivial_upper: float  # (theta - 1 + ell) / mu
    upper: float

    def contains(self, phi: float, rtol: float = 1e-12) -> bool:
        tol = rtol * max(1.0, abs(phi))
        return self.lower - tol <= phi <= self.upper + tol

    def to_dict(self) -> dict:
        return {
            "theta": self.theta,
            "mu": self.mu,
            "lower": self.lower,
            "upper": self.upper,
            "wald_lower": self.wald_lower,
            "lorden_upper": self.lorden_upper,
            "trivial_upper": self.trivial_upper,
        }


def phi_bounds(l_pmf, theta) -> PhiBounds:
    """P2: ``max(1, theta/mu) <= phi <= (theta - 1 + E[L^2]/mu)/mu`` (Wald + Lorden at level
    ``theta - 1``); see the module docstring for the derivation and attainment."""
    theta = as_int(theta, "theta", low=1)
    m = length_moments(l_pmf)
    mu, m2, ell = m["mu"], m["m2"], m["ell"]
    wald = theta / mu
    lorden = (theta - 1 + m2 / mu) / mu
    trivial = (theta - 1 + ell) / mu
    return PhiBounds(
        theta=theta,
        mu=mu,
        wald_lower=wald,
        lower=max(1.0, wald),
        lorden_upper=lorden,
        trivial_upper=trivial,
        upper=min(lorden, trivial),
    )


def hoeffding_tail(l_pmf, theta, k, *, lattice: bool = False):
    """P3: Hoeffding bound on ``P(N > k)`` (``k`` int or int array).

    ``exp(-2 k (mu - t/k)^2 / (ell - 1)^2)`` with ``t = theta`` (the spec) or ``t = theta - 1``
    (``lattice=True``, valid because lengths are integers). Where ``k <= t/mu`` Hoeffding does
    not apply and the trivial bound 1 is returned. ``ell = 1`` (``L = 1`` a.s.): ``N = theta``
    exactly, so the bound is 0 for ``k >= theta`` and 1 otherwise.
    """
    theta = as_int(theta, "theta", low=1)
    scalar = np.ndim(k) == 0
    kk = np.atleast_1d(np.asarray(k))
    if kk.dtype.kind not in "iuf" or (kk < 0).any() or (kk != np.round(kk)).any():
        raise PolyspecInputError("k", "must be a non-negative integer or integer array")
    kk = kk.astype(np.float64)
    m = length_moments(l_pmf)
    mu, ell = m["mu"], m["ell"]
    t = theta - 1 if lattice else theta
    if ell == 1:
        out = np.where(kk >= theta, 0.0, 1.0)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            dev = mu - t / kk
            b = np.exp(-2.0 * kk * dev**2 / (ell - 1) ** 2)
        out = np.where((kk > 0) & (kk * mu > t), b, 1.0)
    return float(out[0]) if scalar else out


def exact_tail(l_pmf, theta, kmax=None) -> np.ndarray:
    """Exact ``P(N > k) = P(S_k <= theta - 1)`` for ``k = 0..kmax`` (default ``theta``; it is
    0 for ``k >= theta`` since ``L >= 1``), by convolving the law of ``S_k`` truncated below
    ``theta``."""
    theta = as_int(theta, "theta", low=1)
    kmax = theta if kmax is None else as_int(kmax, "kmax", low=0)
    p = _l_pmf(l_pmf)
    dist = np.zeros(theta)
    dist[0] = 1.0  # law of S_k on {0..theta-1} (defective: mass >= theta dropped)
    out = np.zeros(kmax + 1)
    out[0] = 1.0
    for k in range(1, kmax + 1):
        dist = np.convolve(dist, p)[:theta]
        out[k] = float(dist.sum())
        if out[k] == 0.0:
            break
    return out


def forward_count_moments(l_pmf, theta) -> dict:
    """Exact ``E[N]`` and ``Var[N]`` of the block-fill count from :func:`exact_tail`:
    ``E[N] = sum_k P(N > k)``, ``E[N^2] = sum_k (2k + 1) P(N > k)``."""
    tail = exact_tail(l_pmf, theta)
    k = np.arange(tail.size, dtype=np.float64)
    mean = float(tail.sum())
    second = float(np.sum((2 * k + 1) * tail))
    return {"mean": mean, "var": max(second - mean * mean, 0.0)}


def target_forwards_clt(l_pmf, n_tokens) -> dict:
    """P3: the number of target forwards (rounds of ``S_1``, length law ``l_pmf`` = law of
    ``L_1``) needed for ``n_tokens`` tokens is asymptotically normal with mean
    ``n_tokens/mu`` and variance ``n_tokens sigma^2 / mu^3`` (renewal CLT; ``sigma^2 = Var L``).
    Returns ``mean``, ``var``, ``sd`` and the per-token variance ``sigma^2/mu^3``."""
    n = as_real(n_tokens, "n_tokens", low=0.0, low_open=True)
    m = length_moments(l_pmf)
    rate = m["var"] / m["mu"] ** 3
    return {
        "mean": n / m["mu"],
        "var": n * rate,
        "sd": math.sqrt(n * rate),
        "var_per_token": rate,
    }
