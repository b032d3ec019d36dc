"""P1 on a grid: exact speedups of one cascade (fixed models, laws, costs, policy) for many
threshold vectors at once — for planners and threshold searches.

The P1 kernel of :func:`polyspec_theory.core.p1.predict_chain` (:mod:`polyspec_theory.core.p1`,
docs/theory.md §6), organised for reuse: level ``i`` depends only on the suffix
``(theta_i, ..., theta_{n-1})``, so every distinct suffix is computed once, and for a given
lower suffix all requested ``theta_i`` are done together by one vectorised renewal fill (the
renewal masses ``f(s)`` once up to the largest ``theta_i``; the block laws are rows of one
matrix ``W[theta, g]``; the emitted laws ``W K``, ``K[g, a] = P(A = a | cap g)``). Results
agree with ``predict`` to ~1e-13 relative.

Public: :func:`predict_many` (any list of threshold vectors), :func:`predict_grid` (a
Cartesian grid, returns arrays shaped like the grid), :func:`optimize_thresholds`
(exhaustive search over ``1..max_threshold`` per pair).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import MAX_THRESHOLD, Cascade, as_cascade
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import BOTTOM_LENGTH_PMF, expected_forward_cost, fill_blocks
from polyspec_theory.errors import PolyspecInputError, as_int, as_int_array

__all__ = ["GridPrediction", "predict_many", "predict_grid", "optimize_thresholds"]

MAX_BATCH = 5_000_000


@dataclass(frozen=True)
class GridPrediction:
    """Row ``j`` belongs to ``thresholds[j]``: ``speedup = T_1(1)/tau_1``,
    ``time_per_token = tau_1``, ``mean_emitted = E[L_1]``, ``phi_top = phi_2`` (rounds of
    ``S_2`` per target forward)."""

    thresholds: np.ndarray  # (m, n-1) int
    speedup: np.ndarray
    time_per_token: np.ndarray
    mean_emitted: np.ndarray
    phi_top: np.ndarray
    policy: str


def _level(l_pmf, round_cost, thetas, law: AcceptanceLaw, cost: CostCurve, policy: str,
           overhead: float = 0.0):
    """One level for all ``thetas`` (the P1 kernel, :mod:`polyspec_theory.core.p1`) given the lower
    system's length law and round cost (``overhead``: fixed time per verification round)."""
    phi, w = fill_blocks(l_pmf, thetas, policy)
    fwd_cost = np.array([expected_forward_cost(row, cost) for row in w])
    rc = phi * round_cost + fwd_cost + overhead
    lp = np.zeros((thetas.size, w.shape[1] + 1))
    lp[:, 1:] = law.pmf_over_blocks(w)
    return phi, rc, lp


def predict_many(cascade: Cascade, thresholds) -> GridPrediction:
    """Exact P1 for ``cascade`` with each row of ``thresholds`` (shape ``(m, n-1)``, ints in
    ``1..MAX_THRESHOLD``) substituted for ``cascade.thresholds``. Models, laws, costs and
    policy are those of ``cascade``."""
    cascade = as_cascade(cascade, chain_only="P1 on a grid of thresholds")
    n = cascade.n
    th = np.asarray(thresholds)
    if th.ndim == 1 and n == 2:
        th = th[:, None]
    if th.ndim != 2 or th.shape[1] != n - 1:
        raise PolyspecInputError(
            "thresholds", f"must have shape (m, {n - 1}) (one threshold per pair), "
            f"got {th.shape}"
        )
    if th.shape[0] == 0:
        raise PolyspecInputError("thresholds", "must contain at least one threshold vector")
    if th.shape[0] > MAX_BATCH:
        raise PolyspecInputError("thresholds", f"at most {MAX_BATCH} rows, got {th.shape[0]}")
    th = as_int_array(th.ravel(), "thresholds", low=1).reshape(th.shape)
    if (th > MAX_THRESHOLD).any():
        raise PolyspecInputError("thresholds", f"values must be <= {MAX_THRESHOLD}")
    costs, laws, policy = cascade.costs, cascade.laws, cascade.policy
    # lower[suffix tuple] = (length pmf, round cost) of system S_{i+1} (suffix = thetas i..)
    lower: dict[tuple, tuple] = {(): (BOTTOM_LENGTH_PMF, costs[-1].t1)}
    for i in range(n - 2, 0, -1):
        suffixes = np.unique(th[:, i:], axis=0)
        new: dict[tuple, tuple] = {}
        groups: dict[tuple, list[int]] = {}
        for row in suffixes:
            groups.setdefault(tuple(int(x) for x in row[1:]), []).append(int(row[0]))
        for rest, ts in groups.items():
            pmf, rc_low = lower[rest]
            t_arr = np.asarray(sorted(ts), dtype=np.int64)
            _, rc, lp = _level(pmf, rc_low, t_arr, laws[i], costs[i], policy,
                               overhead=cascade.models[i].overhead)
            for j, t in enumerate(t_arr):
                row_pmf = np.trim_zeros(lp[j], "b")
                new[(int(t),) + rest] = (row_pmf, float(rc[j]))
        lower = new
    m = th.shape[0]
    tau = np.empty(m)
    mean_l = np.empty(m)
    phi_top = np.empty(m)
    rest_keys = [tuple(int(x) for x in row) for row in th[:, 1:]]
    by_rest: dict[tuple, list[int]] = {}
    for j, key in enumerate(rest_keys):
        by_rest.setdefault(key, []).append(j)
    for rest, rows in by_rest.items():
        pmf, rc_low = lower[rest]
        rows_arr = np.asarray(rows)
        t_all = th[rows_arr, 0]
        t_arr, inv = np.unique(t_all, return_inverse=True)
        phi, rc, lp = _level(pmf, rc_low, t_arr, laws[0], costs[0], policy,
                             overhead=cascade.models[0].overhead)
        ml = lp @ np.arange(lp.shape[1])
        tau[rows_arr] = (rc / ml)[inv]
        mean_l[rows_arr] = ml[inv]
        phi_top[rows_arr] = phi[inv]
    t_ar = costs[0].t1
    return GridPrediction(
        thresholds=th, speedup=t_ar / tau, time_per_token=tau, mean_emitted=mean_l,
        phi_top=phi_top, policy=policy,
    )


def predict_grid(cascade: Cascade, grids) -> dict:
    """Exact P1 on the Cartesian product ``grids[0] x ... x grids[n-2]`` of per-pair
    thresholds. Returns ``{"grids", "speedup", "time_per_token", "mean_emitted"}``; the
    arrays have shape ``(len(grids[0]), ..., len(grids[n-2]))``."""
    cascade = as_cascade(cascade, chain_only="P1 on a grid of thresholds")
    if not isinstance(grids, (list, tuple)) or len(grids) != cascade.n - 1:
        raise PolyspecInputError(
            "grids", f"need one list of thresholds per pair ({cascade.n - 1})"
        )
    gs = [as_int_array(g, f"grids[{i}]", low=1) for i, g in enumerate(grids)]
    shape = tuple(g.size for g in gs)
    size = int(np.prod(shape))
    if size > MAX_BATCH:
        raise PolyspecInputError("grids", f"at most {MAX_BATCH} grid points, got {size}")
    mesh = np.stack([x.ravel() for x in np.meshgrid(*gs, indexing="ij")], axis=1)
    bp = predict_many(cascade, mesh)
    return {
        "grids": gs,
        "speedup": bp.speedup.reshape(shape),
        "time_per_token": bp.time_per_token.reshape(shape),
        "mean_emitted": bp.mean_emitted.reshape(shape),
    }


def optimize_thresholds(cascade: Cascade, max_threshold=16) -> tuple[tuple[int, ...], float]:
    """Exhaustive search of every pair's threshold over ``1..max_threshold``; returns the
    threshold vector with the largest exact speedup (first in lexicographic order on ties)
    and that speedup."""
    cascade = as_cascade(cascade, chain_only="P1 on a grid of thresholds")
    mt = as_int(max_threshold, "max_threshold", low=1, high=MAX_THRESHOLD)
    grid = [np.arange(1, mt + 1)] * (cascade.n - 1)
    res = predict_grid(cascade, grid)
    flat = int(np.argmax(res["speedup"]))
    idx = np.unravel_index(flat, res["speedup"].shape)
    return tuple(int(grid[k][j]) for k, j in enumerate(idx)), float(res["speedup"][idx])
