"""The P1 kernel (docs/theory.md §6): the renewal fill of a block and the fold of one level,
computed here once for :func:`predict_chain` (the ``chain`` scheme), the serving batch
(:func:`~polyspec_theory.serving.batch.predict_batch`, B6's table), the threshold grid
(:mod:`polyspec_theory.planning.grid`) and the planner.

Level ``i`` runs rounds of the system below (length law ``P(L = l)``, ``l >= 1``) until at
least ``theta_i`` tokens have accumulated: ``N`` rounds, block ``G`` (``"truncate"``: exactly
``theta_i``). With the renewal masses ``f(0) = 1``, ``f(s) = sum_l f(s - l) P(L = l)``:
``phi = E[N] = sum_{s < theta} f(s)`` and ``P(G = g) = sum_{s < theta} f(s) P(L = g - s)``
for ``g >= theta``. The verifier emits ``L_i = A_i + 1`` with ``P(A_i = a) = sum_g P(G = g)
K[g, a]``, ``K = law.cap_pmf_table`` (:meth:`AcceptanceLaw.pmf_over_blocks`), and a round
costs ``E[C_i] = rounds * E[C_{i+1}] + forward_cost + o_i`` (``rounds = phi`` for one
sequence; Wald's identity).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_int_array

__all__ = ["block_bounds", "block_laws", "BOTTOM_LENGTH_PMF", "expected_forward_cost",
           "fill_blocks", "fold_levels", "FoldedLevel", "LevelPrediction", "Prediction",
           "predict_chain", "renewal_masses", "renewal_fill", "emitted_law"]

BOTTOM_LENGTH_PMF = np.array([0.0, 1.0])  # M_n alone: one token per forward


def _length_pmf(l_pmf) -> np.ndarray:
    p = np.asarray(l_pmf, dtype=np.float64)
    if p.ndim not in (1, 2) or p.shape[-1] < 2 or (p[..., 0] != 0.0).any():
        raise PolyspecInputError("l_pmf", "must be a pmf over lengths with P(L = 0) = 0")
    return p


def renewal_masses(l_pmf, tmax: int) -> np.ndarray:
    """``f(s)`` for s = 0..tmax-1 (``f(0) = 1``, ``f(s) = sum_l f(s - l) P(L = l)``); rows of a
    2-d ``l_pmf`` are independent length laws."""
    p = _length_pmf(l_pmf)
    tmax = as_int(tmax, "tmax", low=1)
    lmax = p.shape[-1] - 1
    f = np.zeros(p.shape[:-1] + (tmax,))
    f[..., 0] = 1.0
    for s in range(1, tmax):
        lo = max(0, s - lmax)
        if p.ndim == 1:
            f[s] = np.dot(f[lo:s][::-1], p[1 : s - lo + 1])
        else:
            f[:, s] = (f[:, lo:s][:, ::-1] * p[:, 1 : s - lo + 1]).sum(axis=1)
    return f


def renewal_fill(l_pmf, theta: int) -> tuple[float, np.ndarray]:
    """Fill a block of at least ``theta`` tokens from iid rounds with length law ``l_pmf``.

    ``l_pmf[l] = P(L = l)`` (index 0 must be 0: every round emits >= 1 token). Returns
    ``(phi, g_pmf)``: ``phi = E[N]``, ``N = min{k : L^(1)+...+L^(k) >= theta}``, and
    ``g_pmf[g] = P(S_N = g)`` for g = 0..theta+lmax-1."""
    p = np.asarray(l_pmf, dtype=np.float64)
    theta = as_int(theta, "theta", low=1)
    if p.ndim != 1 or p.size < 2 or p[0] != 0.0:
        raise PolyspecInputError("l_pmf", "must be a pmf over lengths with P(L = 0) = 0")
    f = renewal_masses(p, theta)
    return float(f.sum()), block_laws(p, f, [theta])[0]


def emitted_law(g_pmf, law) -> np.ndarray:
    """``P(L = l) = sum_g P(G = g) P(A = l - 1 | cap g)`` for l = 0..gmax+1 (index = l), for
    an :class:`~polyspec_theory.core.laws.AcceptanceLaw` ``law``."""
    return np.concatenate([[0.0], law.pmf_over_blocks(g_pmf)])


def block_laws(l_pmf, f, thetas) -> np.ndarray:
    """Rows ``P(G = g | theta_j) = 1[g >= theta_j] sum_{s < theta_j} f(s) P(L = g - s)`` for
    g = 0..max(theta)+lmax-1 (accumulate policy). ``l_pmf`` and ``f`` are one law (1-d) or one
    per row (2-d); the sum runs over ascending ``s`` for every row."""
    p = _length_pmf(l_pmf)
    th = as_int_array(thetas, "thetas", low=1)
    f = np.asarray(f, dtype=np.float64)
    rows, w = th.size, p.shape[-1]
    tmax = int(th.max())
    if f.shape[-1] < tmax:
        raise PolyspecInputError("f", f"needs the renewal masses up to s = {tmax - 1}")
    pr = np.broadcast_to(p, (rows, w)) if p.ndim == 1 else p
    fs = np.broadcast_to(f[..., :tmax], (rows, tmax)) * (np.arange(tmax)[None, :] < th[:, None])
    gp = np.zeros((rows, tmax + w - 1))
    for s in range(tmax):
        gp[:, s : s + w] += fs[:, s : s + 1] * pr
    gp *= np.arange(gp.shape[1])[None, :] >= th[:, None]
    return gp


def fill_blocks(l_pmf, thetas, policy: str = "accumulate") -> tuple[np.ndarray, np.ndarray]:
    """One vectorised renewal fill: ``(phi, W)`` with ``phi[j] = E[N | theta_j]`` and
    ``W[j, g] = P(G = g | theta_j)`` (``"truncate"``: ``G = theta_j``), columns trimmed after
    the last nonzero one."""
    p = _length_pmf(l_pmf)
    if p.ndim != 1:
        raise PolyspecInputError("l_pmf", "must be one pmf over lengths")
    th = as_int_array(np.atleast_1d(thetas), "thetas", low=1)
    f = renewal_masses(p, int(th.max()))
    phi = np.array([f[:t].sum() for t in th])
    if policy == "truncate":
        w = np.zeros((th.size, int(th.max()) + 1))
        w[np.arange(th.size), th] = 1.0
    else:
        w = block_laws(p, f, th)
        w = w[:, : np.flatnonzero(w.any(axis=0))[-1] + 1]
    return phi, w


class FoldedLevel(NamedTuple):
    """One verifying level ``i < n`` (0 = the target): ``phi = E[N_i]`` (rounds of the system
    below per block), ``rounds`` (rounds of the system below paid per round: ``phi``, or the
    batch's slowest sequence), block law, ``E[T_i(G_i + 1)]``, ``o_i``, ``E[C_i]``, law of
    ``L_i``."""

    phi: float
    rounds: float
    block_pmf: np.ndarray
    forward_cost: float
    overhead: float
    round_cost: float
    emitted_pmf: np.ndarray


def expected_forward_cost(block_pmf: np.ndarray, cost) -> float:
    """``E[T(G + 1)]`` over the support of the block law."""
    gs = np.arange(block_pmf.size)
    nz = block_pmf > 0
    return float(np.dot(block_pmf[nz], cost(gs[nz] + 1)))


def fold_levels(cascade, costs=None, *,
                rounds: Callable[[np.ndarray, int, float], float] | None = None,
                forward_cost: Callable[[np.ndarray, int], float] | None = None
                ) -> tuple[FoldedLevel, ...]:
    """Fold P1's recursion bottom-up over ``cascade``'s pair levels; returns one
    :class:`FoldedLevel` per verifier, the target first. ``costs`` (default ``cascade.costs``),
    ``rounds(l_pmf_below, theta, phi)`` and ``forward_cost(block_pmf, i)`` replace the
    single-sequence ``phi`` and ``E[T_i(G + 1)]`` (the serving batch, B2)."""
    costs = cascade.costs if costs is None else costs
    l_pmf = BOTTOM_LENGTH_PMF
    round_cost = costs[-1].t1
    out: list[FoldedLevel] = []
    for i in range(cascade.n - 2, -1, -1):
        theta = cascade.thresholds[i]
        phi_a, w = fill_blocks(l_pmf, [theta], cascade.policy)
        phi, g_pmf = float(phi_a[0]), w[0]
        n_rounds = phi if rounds is None else rounds(l_pmf, theta, phi)
        fc = (expected_forward_cost(g_pmf, costs[i]) if forward_cost is None
              else forward_cost(g_pmf, i))
        overhead = cascade.models[i].overhead
        round_cost = n_rounds * round_cost + fc + overhead
        l_pmf = np.concatenate([[0.0], cascade.laws[i].pmf_over_blocks(g_pmf)])
        out.append(FoldedLevel(phi, n_rounds, g_pmf, fc, overhead, round_cost, l_pmf))
    return tuple(out[::-1])


@dataclass(frozen=True)
class LevelPrediction:
    """Per-model quantities. ``phi`` (= E[N_i], rounds of ``S_i`` per block of level i-1) is
    ``None`` for the target; block/emitted/acceptance fields are ``None`` for ``M_n``."""

    name: str
    phi: float | None
    block_pmf: np.ndarray | None
    mean_block: float | None
    emitted_pmf: np.ndarray
    mean_emitted: float
    round_cost: float  # E[C_i]
    tau: float  # time per token of system S_i
    forwards_per_token: float  # forwards of M_i per token generated by the whole cascade
    forward_cost: float  # E[T_i(G_i + 1)] (M_n: T_n(1))
    time_per_token: float  # forwards_per_token * (forward_cost + overhead)
    time_share: float
    overhead: float = 0.0  # o_i: fixed time per verification round (0 for M_n)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "phi": self.phi,
            "mean_block": self.mean_block,
            "mean_emitted": self.mean_emitted,
            "forwards_per_token": self.forwards_per_token,
            "time_per_token": self.time_per_token,
            "time_share": self.time_share,
            "round_cost": self.round_cost,
            "tau": self.tau,
            "overhead": self.overhead,
        }


@dataclass(frozen=True)
class Prediction:
    speedup: float
    time_per_token: float
    autoregressive_time_per_token: float
    levels: tuple[LevelPrediction, ...]
    policy: str

    def to_dict(self) -> dict:
        return {
            "speedup": self.speedup,
            "time_per_token": self.time_per_token,
            "autoregressive_time_per_token": self.autoregressive_time_per_token,
            "policy": self.policy,
            "levels": [lv.to_dict() for lv in self.levels],
        }


def predict_chain(cascade) -> Prediction:
    """P1 for a chain cascade (no trees, no schedules): exact speedup and per-level
    accounting from :func:`fold_levels`."""
    n = cascade.n
    costs = cascade.costs
    folded = fold_levels(cascade)
    mean_l1 = float(np.dot(np.arange(folded[0].emitted_pmf.size), folded[0].emitted_pmf))
    tau1 = folded[0].round_cost / mean_l1
    # forwards per generated token: F_1 = 1/E[L_1], F_{i+1} = F_i phi_{i+1}
    fwd = 1.0 / mean_l1
    out = []
    for i in range(n):
        if i < n - 1:
            lv = folded[i]
            lp, g, rc, fc, overhead = (lv.emitted_pmf, lv.block_pmf, lv.round_cost,
                                       lv.forward_cost, lv.overhead)
        else:  # M_n alone
            lp, g, overhead = BOTTOM_LENGTH_PMF.copy(), None, 0.0
            rc = fc = costs[-1].t1
        mean_l = float(np.dot(np.arange(lp.size), lp))
        tpt = fwd * (fc + overhead)
        out.append(
            LevelPrediction(
                name=cascade.models[i].name,
                phi=folded[i - 1].phi if i > 0 else None,
                block_pmf=g,
                mean_block=None if g is None else float(np.dot(np.arange(g.size), g)),
                emitted_pmf=lp,
                mean_emitted=mean_l,
                round_cost=rc,
                tau=rc / mean_l,
                forwards_per_token=fwd,
                forward_cost=fc,
                time_per_token=tpt,
                time_share=tpt / tau1,
                overhead=overhead,
            )
        )
        if i + 1 < n:
            fwd = fwd * folded[i].phi
    t_ar = costs[0].t1
    if not (math.isfinite(tau1) and tau1 > 0 and math.isfinite(t_ar / tau1)):
        raise PolyspecInputError(
            "config", f"P1 is out of double-precision range for this cascade (time per token "
            f"{tau1!r} in cost units): too many levels or forwards per token")
    return Prediction(
        speedup=t_ar / tau1,
        time_per_token=tau1,
        autoregressive_time_per_token=t_ar,
        levels=tuple(out),
        policy=cascade.policy,
    )


def block_bounds(thresholds, policy: str = "accumulate") -> list[int]:
    """Largest possible block ``G_i`` per pair level: bottom ``theta_{m-1}``; accumulate
    ``theta_i + Gmax_{i+1}`` (at most ``theta_i - 1`` tokens, then one round of at most
    ``Gmax_{i+1} + 1``); truncate ``theta_i``."""
    th = [int(t) for t in thresholds]
    g = [0] * len(th)
    g[-1] = th[-1]
    for i in range(len(th) - 2, -1, -1):
        g[i] = th[i] if policy == "truncate" else th[i] + g[i + 1]
    return g
