"""B1–B6: speculative and polybasic decoding in a synchronous serving batch
(docs/theory.md Part III-C is the statement of record; numbering B0–B6).

**Model (B0).** ``b`` sequences are decoded together in *lockstep*: every forward of ``M_i`` is
one batched forward over all ``b`` slots scoring the same number ``m`` of new positions per
slot (padded to the longest), at cost ``T_i(b, m)`` (:mod:`polyspec_theory.core.costs`; a plain
cost curve
is taken as independent of ``b``). One round of the batched system ``S_i`` runs batched
rounds of ``S_{i+1}`` until *every* sequence has accumulated at least ``theta_i`` new tokens
(a sequence whose block is full waits: its slot is padding in the remaining rounds, whatever
it drafts there is discarded), then one forward of ``M_i`` verifies all blocks, scoring
``max_j G_ij + 1`` positions. Acceptance is independent across sequences and rounds, with
the pair's law (docs/theory.md §1.4) for each sequence.

What is iid: batched rounds of ``S_{i+1}`` are iid random objects (fresh draws, the same
program for every slot, whichever sequences are waiting), and within one batched round of
``S_i`` the per-sequence pairs ``(N_{i+1,j}, G_ij)`` are iid over ``j`` with the
single-stream law (each is a function of its own sequence's draws only). What is not: the
cost of a batched round depends on all ``b`` sequences (through maxima), and the number
``K_i = max_j N_{i+1,j}`` of lower rounds is shared by the whole batch.

**B2 (exact).** ``E[C_n^b] = T_n(b, 1)``;
``E[C_i^b] = E[max_j N_{i+1,j}] E[C_{i+1}^b] + E[T_i(b, max_j G_ij + 1)]`` (Wald: ``K_i`` is a
stopping time of the iid batched rounds of ``S_{i+1}``); per-sequence time per token
``tau_b = E[C_1^b] / E[L_1]`` with ``E[L_1]`` the single-stream value; throughput
``b / tau_b``; speedup against autoregressive ``M_1`` at the same batch ``T_1(b, 1) / tau_b``.
**B3**: ``P(max_j N_j <= k) = P(N <= k)^b``, ``P(max_j G_j <= g) = P(G <= g)^b``; computed as
the single-stream value plus a correction ``sum_k F(1 - F^(b-1))`` that is exactly 0 at
``b = 1``, so ``b = 1`` reproduces P1 (:func:`polyspec_theory.core.p1.predict_chain`) bit for bit,
and ``n = 2``
is P1 with the costs ``T_i(b, .)`` (B1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.bounds.tails import exact_tail
from polyspec_theory.core.config import MAX_THRESHOLD, Cascade, Model, as_cascade
from polyspec_theory.core.costs import (
    MAX_BATCH_SIZE,
    BatchCostCurve,
    BatchTableCost,
    CostCurve,
    RooflineCost,
)
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import (
    BOTTOM_LENGTH_PMF,
    block_laws,
    emitted_law,
    fill_blocks,
    fold_levels,
    predict_chain,
    renewal_fill,
)
from polyspec_theory.errors import PolyspecInputError, as_int

__all__ = [
    "batch_models",
    "as_batch",
    "as_batches",
    "batch_cost",
    "batch_cascade",
    "max_excess",
    "max_fill_mean",
    "max_fill_bounds",
    "max_block_law",
    "BatchLevel",
    "BatchPrediction",
    "predict_batch",
    "BatchOptimum",
    "optimize_batch_thresholds",
    "BatchPoint",
    "batch_sweep",
    "Crossover",
    "crossover_batch",
    "large_batch_limit",
    "MAX_SEARCH_CONFIGS",
]

MAX_SEARCH_CONFIGS = 2_000_000


def as_batch(batch, field: str = "batch") -> int:
    return as_int(batch, field, low=1, high=MAX_BATCH_SIZE)


# --------------------------------------------------------------------------------------------
# costs at a batch size
# --------------------------------------------------------------------------------------------
def batch_cost(curve, batch) -> CostCurve:
    """``T(batch, .)`` of one model: :meth:`BatchCostCurve.at_batch`, or the curve itself for
    a plain (batch-independent) cost."""
    b = as_batch(batch)
    if isinstance(curve, BatchCostCurve):
        return curve.at_batch(b)
    if not isinstance(curve, CostCurve):
        raise PolyspecInputError("cost", f"must be a CostCurve, got {type(curve).__name__}")
    return curve


def batch_cascade(cascade, batch) -> Cascade:
    """``cascade`` with every model's cost replaced by ``T_i(batch, .)`` (plain table/affine
    curves): P1 on it is the *unsynchronised* batch prediction."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    return Cascade(batch_models(cascade.models, as_batch(batch)), cascade.laws,
                   cascade.thresholds, cascade.policy, cascade.name)


def batch_models(models, b: int) -> tuple[Model, ...]:
    """``models`` with each cost replaced by its curve at batch ``b`` (errors name the
    model's cost)."""
    out = []
    for i, m in enumerate(models):
        try:
            out.append(Model(m.name, batch_cost(m.cost, b), m.overhead))
        except PolyspecInputError as e:
            raise PolyspecInputError(f"models[{i}].cost", str(e)) from None
    return tuple(out)


def _batch_independent(cascade: Cascade) -> list[str]:
    return [m.name for m in cascade.models if not isinstance(m.cost, BatchCostCurve)]


# --------------------------------------------------------------------------------------------
# B3: maxima of b iid copies
# --------------------------------------------------------------------------------------------
def max_excess(sf, batch) -> np.ndarray:
    """``P(max_b X > x) - P(X > x) = F - F^b`` with ``F = 1 - sf`` for survival values ``sf =
    P(X > x)``; computed as ``F (1 - F^(b-1))`` with ``log1p``/``expm1`` (no cancellation for
    small tails) and exactly 0 for ``b = 1``."""
    b = as_batch(batch)
    s = np.clip(np.asarray(sf, dtype=np.float64), 0.0, 1.0)
    if b == 1:
        return np.zeros_like(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        pw = -np.expm1((b - 1) * np.log1p(-s))  # 1 - F^(b-1)
    out = np.where(s >= 1.0, 0.0, (1.0 - s) * pw)
    return np.maximum(out, 0.0)


def _check_pmf(l_pmf, field="l_pmf") -> np.ndarray:
    p = np.asarray(l_pmf, dtype=np.float64)
    if p.ndim != 1 or p.size < 2 or p[0] != 0.0 or (p < 0).any() or not np.isfinite(p).all():
        raise PolyspecInputError(field, "must be a pmf over lengths with P(L = 0) = 0")
    if abs(p.sum() - 1.0) > 1e-9:
        raise PolyspecInputError(field, f"must sum to 1, got {p.sum()!r}")
    return p


def max_fill_mean(l_pmf, theta, batch) -> float:
    """B3: ``E[max_{j<=b} N_j]`` for iid block-fill counts ``N_j`` (rounds of a system with
    length law ``l_pmf`` until >= ``theta`` tokens): ``sum_k 1 - P(N <= k)^b`` over
    ``k < theta``, as ``phi + sum_k F(k)(1 - F(k)^(b-1))``."""
    p = _check_pmf(l_pmf)
    theta = as_int(theta, "theta", low=1, high=MAX_THRESHOLD)
    phi, _ = renewal_fill(p, theta)
    tail = exact_tail(p, theta)
    return phi + float(max_excess(tail, batch).sum())


def max_fill_bounds(l_pmf, theta, batch) -> dict:
    """B3 bounds: ``phi <= E[max_b N] <= min(N_max, phi + sd(N) (b-1)/sqrt(2b-1))`` (the
    second term: Hartley & David 1954 / Gumbel 1954, any iid law with finite variance);
    ``N_max`` = the largest value ``N`` takes (``= theta`` when ``P(L = 1) > 0``). Returns
    ``{"exact", "lower", "upper", "n_max", "hartley_david"}``."""
    p = _check_pmf(l_pmf)
    theta = as_int(theta, "theta", low=1, high=MAX_THRESHOLD)
    b = as_batch(batch)
    tail = exact_tail(p, theta)
    k = np.arange(tail.size, dtype=np.float64)
    phi = float(tail.sum())
    var = max(float(np.sum((2 * k + 1) * tail)) - phi * phi, 0.0)
    n_max = int(np.count_nonzero(tail > 0.0))
    hd = phi + math.sqrt(var) * (b - 1) / math.sqrt(2 * b - 1)
    return {"exact": max_fill_mean(p, theta, b), "lower": phi, "upper": min(float(n_max), hd),
            "n_max": n_max, "hartley_david": hd}


def max_block_law(g_pmf, batch) -> np.ndarray:
    """``P(max_{j<=b} G_j = g)`` for iid blocks with pmf ``g_pmf`` (index = g): differences of
    ``P(G <= g)^b``, from the survival side (accurate in the tail)."""
    g = np.asarray(g_pmf, dtype=np.float64)
    if g.ndim != 1 or g.size < 1 or (g < 0).any() or abs(g.sum() - 1.0) > 1e-9:
        raise PolyspecInputError("g_pmf", "must be a pmf (index = block length)")
    sf = np.concatenate([np.cumsum(g[::-1])[::-1][1:], [0.0]])  # P(G > g)
    sf_max = sf + max_excess(sf, batch)  # P(max G > g)
    out = np.concatenate([[1.0 - sf_max[0]], sf_max[:-1] - sf_max[1:]])
    return np.maximum(out, 0.0)


def _max_forward_cost(g_pmf: np.ndarray, cost: CostCurve, batch: int) -> tuple[float, float]:
    """``(E[T(G + 1)], E[T(max_b G + 1)])``: the first exactly as P1 forms it, the second as
    the first plus ``sum_g (T(g+2) - T(g+1)) (P(max G > g) - P(G > g))``."""
    gs = np.arange(g_pmf.size)
    nz = g_pmf > 0
    single = float(np.dot(g_pmf[nz], cost(gs[nz] + 1)))
    if batch == 1:
        return single, single
    sf = np.concatenate([np.cumsum(g_pmf[::-1])[::-1][1:], [0.0]])
    t = np.asarray(cost(np.arange(1, g_pmf.size + 2)), dtype=np.float64)
    return single, single + float(np.dot(np.diff(t)[: g_pmf.size], max_excess(sf, batch)))


# --------------------------------------------------------------------------------------------
# B1/B2: exact prediction at one batch size
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchLevel:
    """Per-model quantities at batch ``b``. ``phi = E[N]`` (single stream) and ``phi_batch =
    E[max_b N]`` (rounds of batched ``S_i`` per batched round of ``S_{i-1}``) are ``None`` for
    the target; ``idle_share = 1 - phi/phi_batch`` is the share of a sequence's slot-rounds of
    ``S_i`` spent waiting. Block fields are ``None`` for ``M_n``."""

    name: str
    phi: float | None
    phi_batch: float | None
    idle_share: float | None
    mean_block: float | None
    mean_max_block: float | None
    mean_emitted: float
    forward_cost: float  # E[T_i(b, max G + 1)] (M_n: T_n(b, 1))
    round_cost: float  # E[C_i^b]
    forwards_per_token: float  # batched forwards of M_i per token of one sequence
    time_per_token: float
    time_share: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BatchPrediction:
    """B2 at batch ``batch``. ``time_per_token`` = per-sequence ``tau_b``;
    ``tokens_per_time`` = batch throughput ``b / tau_b``; ``speedup = T_1(b,1) / tau_b``
    (= throughput ratio against autoregressive ``M_1`` at the same batch);
    ``speedup_unsynchronised`` = P1 with the costs ``T_i(b, .)`` (no waiting), an upper bound
    when every ``T_i(b, .)`` is nondecreasing (B4)."""

    batch: int
    thresholds: tuple[int, ...]
    policy: str
    speedup: float
    speedup_unsynchronised: float
    time_per_token: float
    tokens_per_time: float
    autoregressive_time_per_token: float
    autoregressive_tokens_per_time: float
    levels: tuple[BatchLevel, ...]
    batch_independent_costs: tuple[str, ...]

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "levels"}
        out["thresholds"] = list(self.thresholds)
        out["batch_independent_costs"] = list(self.batch_independent_costs)
        out["levels"] = [lv.to_dict() for lv in self.levels]
        return out


def predict_batch(cascade, batch) -> BatchPrediction:
    """B2: exact speedup, throughput and per-sequence time per token of ``cascade`` decoded
    in a lockstep batch of ``batch`` sequences (model B0, see module docstring)."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    b = as_batch(batch)
    bc = batch_cascade(cascade, b)
    costs = bc.costs
    n = cascade.n
    t_n = costs[-1].t1
    # per-round overhead o_i: once per batched verification
    folded = fold_levels(
        cascade, costs,
        rounds=lambda l_pmf, theta, phi: phi + float(
            max_excess(exact_tail(l_pmf, theta), b).sum()),
        forward_cost=lambda g_pmf, i: _max_forward_cost(g_pmf, costs[i], b)[1])
    top = folded[0]
    mean_l1 = float(np.dot(np.arange(top.emitted_pmf.size), top.emitted_pmf))
    tau = top.round_cost / mean_l1
    fwd = 1.0 / mean_l1
    levels = []
    for i in range(n):
        if i < n - 1:
            lv = folded[i]
            lp, g, fc, rc, o = (lv.emitted_pmf, lv.block_pmf, lv.forward_cost, lv.round_cost,
                                lv.overhead)
            gm = max_block_law(g, b)
            gmax = float(np.dot(np.arange(gm.size), gm))
        else:  # M_n alone
            lp, g, fc, rc, o, gmax = BOTTOM_LENGTH_PMF.copy(), None, t_n, t_n, 0.0, None
        phi, phib = (None, None) if i == 0 else (folded[i - 1].phi, folded[i - 1].rounds)
        tpt = fwd * (fc + o)
        levels.append(BatchLevel(
            name=cascade.models[i].name,
            phi=phi, phi_batch=phib,
            idle_share=None if phi is None else 1.0 - phi / phib,
            mean_block=None if g is None else float(np.dot(np.arange(g.size), g)),
            mean_max_block=gmax,
            mean_emitted=float(np.dot(np.arange(lp.size), lp)),
            forward_cost=fc, round_cost=rc, forwards_per_token=fwd,
            time_per_token=tpt, time_share=tpt / tau))
        if i + 1 < n:
            fwd = fwd * folded[i].rounds
    t_ar = costs[0].t1
    return BatchPrediction(
        batch=b, thresholds=cascade.thresholds, policy=cascade.policy,
        speedup=t_ar / tau, speedup_unsynchronised=predict_chain(bc).speedup,
        time_per_token=tau, tokens_per_time=b / tau,
        autoregressive_time_per_token=t_ar, autoregressive_tokens_per_time=b / t_ar,
        levels=tuple(levels), batch_independent_costs=tuple(_batch_independent(cascade)))


# --------------------------------------------------------------------------------------------
# B6: optimal thresholds at a batch size (exhaustive, every threshold vector)
# --------------------------------------------------------------------------------------------
def _level_all(p: np.ndarray, rc_low: float, tmax: int, law: AcceptanceLaw, cost: CostCurve,
               policy: str, b: int, top: bool, /, overhead: float = 0.0):
    """One level for every threshold ``1..tmax`` above a system with length law ``p`` and
    round cost ``rc_low``: returns ``(rc[theta-1], mean_l or l_pmf rows)``."""
    lmax = p.size - 1
    thetas = np.arange(1, tmax + 1)
    # law of S_k on {0..tmax-1} (defective), k = 0..tmax: u[k, s]
    u = np.zeros((tmax + 1, tmax))
    u[0, 0] = 1.0
    for k in range(1, tmax + 1):
        u[k] = np.convolve(u[k - 1], p)[:tmax]
    tail = np.cumsum(u, axis=1)  # tail[k, theta-1] = P(N > k | theta) (0 once k >= theta)
    f = u.sum(axis=0)  # renewal masses f(s) = sum_k P(S_k = s)
    phi = np.cumsum(f)
    phib = phi + max_excess(tail, b).sum(axis=0)
    width = tmax + lmax
    if policy == "truncate":
        w = np.zeros((tmax, width))
        w[np.arange(tmax), thetas] = 1.0
    else:
        w = block_laws(p, f, thetas)
    gmax = width - 1
    t = np.asarray(cost(np.arange(1, gmax + 3)), dtype=np.float64)  # T(g + 1), g = 0..gmax+1
    sf = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
    sf = np.concatenate([sf[:, 1:], np.zeros((tmax, 1))], axis=1)  # P(G > g)
    fc = w @ t[: gmax + 1] + max_excess(sf, b) @ np.diff(t)[: gmax + 1]
    rc = phib * rc_low + fc + overhead
    if top:
        return rc, w @ law.capped_mean_emitted(gmax)
    a = w @ law.cap_pmf_table(gmax)
    lp = np.zeros((tmax, gmax + 2))
    lp[:, 1:] = a
    return rc, lp


@dataclass(frozen=True)
class BatchOptimum:
    """Best threshold vector at batch ``batch`` (ties: first in lexicographic order)."""

    batch: int
    thresholds: tuple[int, ...]
    speedup: float
    max_threshold: int
    configs: int

    def to_dict(self) -> dict:
        return {"batch": self.batch, "thresholds": list(self.thresholds),
                "speedup": self.speedup, "max_threshold": self.max_threshold,
                "configs": self.configs}


def _speedup_table(cascade: Cascade, b: int, tmax: int) -> np.ndarray:
    """B2 speedup of every threshold vector in ``1..tmax`` per pair: array of shape
    ``(tmax,) * (n-1)`` (index ``theta - 1``). Suffix states (law of ``L_i``, ``E[C_i^b]``)
    are computed once each."""
    bc = batch_cascade(cascade, b)
    n = cascade.n
    costs = bc.costs
    lower: dict[tuple, tuple] = {(): (np.array([0.0, 1.0]), costs[-1].t1)}
    for i in range(n - 2, 0, -1):
        new = {}
        for rest, (pmf, rc_low) in lower.items():
            rc, lp = _level_all(pmf, rc_low, tmax, cascade.laws[i], costs[i], cascade.policy,
                                b, False, overhead=cascade.models[i].overhead)
            for j in range(tmax):
                new[(j + 1,) + rest] = (np.trim_zeros(lp[j], "b"), float(rc[j]))
        lower = new
    out = np.empty((tmax,) * (n - 1))
    t_ar = costs[0].t1
    for rest, (pmf, rc_low) in lower.items():
        rc, ml = _level_all(pmf, rc_low, tmax, cascade.laws[0], costs[0], cascade.policy, b,
                            True, overhead=cascade.models[0].overhead)
        idx = (slice(None),) + tuple(r - 1 for r in rest)
        out[idx] = t_ar * ml / rc
    return out


def optimize_batch_thresholds(cascade, batch, max_threshold=16) -> BatchOptimum:
    """B6: the threshold vector (each ``theta_i`` in ``1..max_threshold``) with the largest
    exact B2 speedup at ``batch``, by exhaustive search."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    b = as_batch(batch)
    mt = as_int(max_threshold, "max_threshold", low=1, high=MAX_THRESHOLD)
    configs = mt ** (cascade.n - 1)
    if configs > MAX_SEARCH_CONFIGS:
        raise PolyspecInputError(
            "max_threshold", f"{mt}^{cascade.n - 1} = {configs} threshold vectors exceed "
            f"{MAX_SEARCH_CONFIGS}: lower it")
    tab = _speedup_table(cascade, b, mt)
    flat = int(np.argmax(tab))  # C order = lexicographic; argmax takes the first maximum
    idx = np.unravel_index(flat, tab.shape)
    return BatchOptimum(b, tuple(int(i) + 1 for i in idx), float(tab[idx]), mt, configs)


# --------------------------------------------------------------------------------------------
# sweeps, crossover, large-batch limit
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPoint:
    """One row of ``predict --batch``: the cascade's own thresholds (``speedup``,
    ``tokens_per_time``) and the optimum (``thresholds_optimal``, ``speedup_optimal``)."""

    batch: int
    speedup: float
    tokens_per_time: float
    time_per_token: float
    speedup_unsynchronised: float
    autoregressive_tokens_per_time: float
    thresholds_optimal: tuple[int, ...]
    speedup_optimal: float
    phi_batch: tuple[float, ...]
    idle_share: tuple[float, ...]

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["thresholds_optimal"] = list(self.thresholds_optimal)
        out["phi_batch"] = list(self.phi_batch)
        out["idle_share"] = list(self.idle_share)
        return out


def as_batches(batches) -> list[int]:
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise PolyspecInputError("batches", f"must be a list of batch sizes, got {batches!r}")
    out = [as_batch(x, f"batches[{i}]") for i, x in enumerate(batches)]
    if not out:
        raise PolyspecInputError("batches", "must list at least one batch size")
    return out


def batch_sweep(cascade, batches, max_threshold=16) -> tuple[BatchPoint, ...]:
    """B2 at the cascade's thresholds and B6's optimum, for each batch size in ``batches``."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    bs = as_batches(batches)
    mt = as_int(max_threshold, "max_threshold", low=1, high=MAX_THRESHOLD)
    out = []
    for b in bs:
        pr = predict_batch(cascade, b)
        opt = optimize_batch_thresholds(cascade, b, mt)
        out.append(BatchPoint(
            batch=b, speedup=pr.speedup, tokens_per_time=pr.tokens_per_time,
            time_per_token=pr.time_per_token, speedup_unsynchronised=pr.speedup_unsynchronised,
            autoregressive_tokens_per_time=pr.autoregressive_tokens_per_time,
            thresholds_optimal=opt.thresholds, speedup_optimal=opt.speedup,
            phi_batch=tuple(lv.phi_batch for lv in pr.levels[1:]),
            idle_share=tuple(lv.idle_share for lv in pr.levels[1:])))
    return tuple(out)


@dataclass(frozen=True)
class Crossover:
    """B6 crossover: ``batch`` = an integer ``b*`` with ``S(b* - 1) > 1 >= S(b*)`` (``S`` the
    optimal speedup, or the speedup at fixed ``thresholds``), found by doubling from ``b = 1``
    and bisection; ``None`` when ``S > 1`` at every probed batch up to ``max_batch``.
    ``evaluated``: ``{b: S(b)}`` probed. When ``S`` is monotone in ``b`` (e.g. a two-model
    roofline) ``b*`` is *the* crossover; otherwise it is the first crossing on the doubling
    grid."""

    batch: int | None
    max_batch: int
    optimal: bool
    evaluated: dict

    def to_dict(self) -> dict:
        return {"batch": self.batch, "max_batch": self.max_batch, "optimal": self.optimal,
                "evaluated": {str(k): v for k, v in sorted(self.evaluated.items())}}


def _default_max_batch(cascade: Cascade) -> int:
    lims = [m.cost.max_batch for m in cascade.models
            if isinstance(m.cost, BatchCostCurve) and m.cost.max_batch is not None]
    return min(lims) if lims else 1 << 16


def crossover_batch(cascade, *, max_batch=None, max_threshold=16, optimal=True) -> Crossover:
    """B6: the batch size beyond which speculation stops paying (see :class:`Crossover`).
    ``optimal``: compare the optimal thresholds at each batch (else the cascade's own)."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    mb = _default_max_batch(cascade) if max_batch is None else as_batch(max_batch,
                                                                          "max_batch")
    mt = as_int(max_threshold, "max_threshold", low=1, high=MAX_THRESHOLD)
    seen: dict[int, float] = {}

    def s(b: int) -> float:
        if b not in seen:
            seen[b] = (optimize_batch_thresholds(cascade, b, mt).speedup if optimal
                       else predict_batch(cascade, b).speedup)
        return seen[b]

    if s(1) <= 1.0:
        return Crossover(1, mb, bool(optimal), seen)
    lo, hi = 1, None
    b = 1
    while b < mb:
        b = min(2 * b, mb)
        if s(b) <= 1.0:
            hi = b
            break
        lo = b
    if hi is None:
        return Crossover(None, mb, bool(optimal), seen)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if s(mid) <= 1.0:
            hi = mid
        else:
            lo = mid
    return Crossover(hi, mb, bool(optimal), seen)


def large_batch_limit(cascade) -> dict:
    """B5: ``lim_{b -> inf}`` of the B2 speedup at the cascade's thresholds, for roofline
    costs (plain costs: batch-independent, rate 0). With ``r_i(m) = lim T_i(b, m)/b =
    max(kv_time_i, compute_time_i m)``, ``N_max``/``G_max`` the largest values of ``N``/``G``:
    ``C_n = r_n(1)``, ``C_i = N_max,i+1 C_{i+1} + r_i(G_max,i + 1)``, limit
    ``r_1(1) E[L_1] / C_1``. When every ``kv_time_i <= compute_time_i`` the limit is
    ``<= E[L_1] / (G_max,1 + 1) <= 1``. Returns ``{"speedup", "bound", "rates"}``."""
    cascade = as_cascade(cascade, chain_only="the serving-batch prediction")
    rates = []
    for i, m in enumerate(cascade.models):
        if isinstance(m.cost, RooflineCost):
            rates.append(m.cost.large_batch_rate)
        elif isinstance(m.cost, BatchTableCost):
            raise PolyspecInputError(
                f"models[{i}].cost", "a batch_table has no large-batch limit (it ends at its "
                "largest listed batch size); use a roofline cost")
        else:
            rates.append(lambda mm: 0.0 * np.asarray(mm, dtype=np.float64))
    if not isinstance(cascade.models[0].cost, RooflineCost) or rates[0](1) <= 0.0:
        raise PolyspecInputError("models[0].cost", "the target needs a roofline cost with "
                                 "compute_time or kv_time > 0 for a large-batch limit")
    n = cascade.n
    c_low = float(rates[-1](1))
    l_pmf = np.array([0.0, 1.0])
    gmax1 = None
    for i in range(n - 2, -1, -1):
        theta = cascade.thresholds[i]
        tail = exact_tail(l_pmf, theta)
        n_max = int(np.count_nonzero(tail > 0.0))
        g_pmf = fill_blocks(l_pmf, [theta], cascade.policy)[1][0]
        g_max = int(np.flatnonzero(g_pmf > 0).max())
        c_low = n_max * c_low + float(rates[i](g_max + 1))
        l_pmf = emitted_law(g_pmf, cascade.laws[i])
        gmax1 = g_max
    mean_l1 = float(np.dot(np.arange(l_pmf.size), l_pmf))
    r11 = float(rates[0](1))
    return {"speedup": r11 * mean_l1 / c_low,
            "bound": mean_l1 / (gmax1 + 1),
            "rates": [float(r(1)) for r in rates]}
