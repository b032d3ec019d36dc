"""Yin, Chen, Huang, Wang (NeurIPS'24) results Y1–Y5 (docs/theory.md §7), exact on small chains.

Setting (:mod:`polyspec_theory.yin.markov`): prompt law ``init`` ``(K,)``, target and draft kernels
``(T, K, K)``; draft cost negligible, the draft proposes until the end of the horizon, so after
each rejection it restarts from the corrected prefix. Because both models are Markov, the draft
token at position ``n`` is always a fresh draw from ``draft_n(.|x_{n-1})`` given the emitted
prefix, and everything below is an exact finite computation (no sampling).

Names: ``target`` is the paper's ``q``, ``draft`` its ``p``. A rejection-based step drafts
``x ~ draft``, accepts it with probability ``b(x)`` and otherwise emits a token from a
resampling law ``P``; its output law is ``draft*b + (1 - sum draft*b) * P`` and it rejects
with probability ``1 - sum draft*b``. SD is ``b = min(1, target/draft)`` (``b = 1`` where
``draft = 0``, irrelevant there) with ``P = (target - draft)_+ / ||.||_1``.

Shapes: per-step functions take laws of shape ``(..., K)`` (one law, or stacks such as
``(T, K, K)`` kernels) and return floats for 1-D inputs, arrays ``(...)`` otherwise. Chain
functions take ``init (K,)``, ``target, draft, b, resampling (T, K, K)`` and return floats or
``(T,)`` per-position arrays. Inputs are plain numpy-convertible arrays; outputs are float64
numpy arrays or Python floats.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_real_array
from polyspec_theory.yin.markov import (
    MarkovPair,
    as_chain,
    as_kernels,
    as_law,
    as_output,
    augmented_sequence_law,
    check_sequence_size,
    kernel_marginals,
    random_pair,
)

__all__ = [
    "UNBIASED_TOL",
    "BATCH_MODES",
    # Y1
    "sd_acceptance",
    "sd_residual",
    "sd_output_law",
    "sd_output_kernels",
    "sd_rejections_dp",
    "sd_rejections_tv",
    "sd_expected_rejections",
    "sd_sequence_law",
    # Y2
    "rejection_probability",
    "output_law",
    "chain_rejections",
    "unbiased_resampling",
    "unbiased_resampling_chain",
    "Y2Result",
    "y2_step",
    "y2_chain",
    # Y3
    "batch_step_rejection",
    "batch_output_law",
    "batch_rejections",
    "batch_expected_rejections",
    "batch_improvement",
    "batch_lower_bound",
    "batch_sequence_law",
    "BatchSaturation",
    "batch_saturation",
    # Y4-Y5
    "require_over_acceptance",
    "optimal_resampling",
    "optimal_loss",
    "output_tv",
    "pareto_point",
    "ParetoFront",
    "pareto_front",
    # demo
    "yin_demo_chain",
    "yin_demo",
]

UNBIASED_TOL = 1e-12
"""Slack allowed in ``target - draft*b >= 0`` (and in over-acceptance ``b >= b_SD``)."""

BATCH_MODES = ("sequences", "per_position")


# --- validation helpers --------------------------------------------------------------------


def _pair(target, draft) -> tuple[np.ndarray, np.ndarray]:
    t = as_law(target, "target")
    d = as_law(draft, "draft")
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    return t, d


def _check_b(b, shape: tuple, field: str = "b") -> np.ndarray:
    arr = as_real_array(b, field, low=0.0, high=1.0, ndim=None, min_len=0)
    if arr.shape != shape:
        raise PolyspecInputError(field, f"must have the shape of draft {shape}, got {arr.shape}")
    return arr


def _check_resampling(p, shape: tuple) -> np.ndarray:
    arr = as_law(p, "resampling")
    if arr.shape != shape:
        raise PolyspecInputError(
            "resampling", f"must have the shape of draft {shape}, got {arr.shape}"
        )
    return arr


def _check_M(M, field: str = "M"):
    """A batch size: an integer >= 1, or ``math.inf`` for the M -> infinity limit."""
    if isinstance(M, (float, np.floating)) and math.isinf(M) and M > 0:
        return math.inf
    return as_int(M, field, low=1)


def _check_mode(mode) -> str:
    if mode not in BATCH_MODES:
        raise PolyspecInputError("mode", f"must be one of {', '.join(BATCH_MODES)}, got {mode!r}")
    return mode


# --- per-step mechanics (vectorized over leading axes, no validation) ----------------------


def _sd_accept(t: np.ndarray, d: np.ndarray) -> np.ndarray:
    pos = d > 0
    return np.where(pos, np.minimum(1.0, t / np.where(pos, d, 1.0)), 1.0)


def _normalized_or(g: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    m = g.sum(axis=-1, keepdims=True)
    return np.where(m > 0, g / np.where(m > 0, m, 1.0), fallback)


def _sd_residual(t: np.ndarray, d: np.ndarray) -> np.ndarray:
    return _normalized_or(np.maximum(t - d, 0.0), t)


def _sd_mechanics(t: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SD step from the algorithm: (output law, rejection probability)."""
    b = _sd_accept(t, d)
    rej = (d * (1.0 - b)).sum(axis=-1)  # P(drafted token is rejected)
    return d * b + rej[..., None] * _sd_residual(t, d), rej


def _rrs(t: np.ndarray, d: np.ndarray, M) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Recursive rejection sampling with ``M`` iid drafts from ``d`` against target ``t``.

    Stage ``i`` checks draft ``y_i`` against the current residual ``p_{i-1}`` (``p_0 = t``):
    accept with ``min(1, p_{i-1}(y)/d(y))``, else ``p_i = (p_{i-1} - d)_+ / ||.||``; after ``M``
    failures emit from ``p_M`` (one rejection). Tracked unnormalized: ``w_i = r_i p_i`` with
    ``r_i = P(first i fail)``, ``w_i = (w_{i-1} - r_{i-1} d)_+``. Returns ``(acc, w_M, r_M)``:
    ``acc[x] = P(some draft accepted and it is x)``, ``w_M[x] = P(all fail, emit x)``,
    ``r_M = P(all fail)``. ``M = inf``: the limit ``w = t * [d == 0]``.
    """
    if M == math.inf:
        w = np.where(d > 0, 0.0, t)
        return t - w, w, w.sum(axis=-1)
    w = t.copy()
    r = np.ones(t.shape[:-1])
    acc = np.zeros_like(t)
    on_support = d > 0
    for _ in range(M):
        a = np.minimum(w, r[..., None] * d)
        acc += a
        w = w - a
        r = w.sum(axis=-1)
        if not (w[on_support] > 0).any():  # nothing left the drafts can reach
            break
    return acc, w, r


def _forward(init_aug: np.ndarray, trans: np.ndarray, rej: np.ndarray) -> np.ndarray:
    """Per-position expected rejections of a chain on (state, flag): ``(T,)``."""
    mu = init_aug
    out = np.empty(trans.shape[0])
    for n in range(trans.shape[0]):
        out[n] = float((mu * rej[n]).sum())
        mu = np.einsum("sf,sfxg->xg", mu, trans[n])
    return out


# --- Y1: speculative decoding --------------------------------------------------------------


def sd_acceptance(target, draft):
    """SD acceptance ``b_SD(x) = min(1, target(x)/draft(x))`` (1 where draft = 0): ``(..., K)``."""
    t, d = _pair(target, draft)
    return _sd_accept(t, d)


def sd_residual(target, draft):
    """SD resampling law ``(target - draft)_+ / ||.||_1`` (``target`` if draft = target)."""
    t, d = _pair(target, draft)
    return _sd_residual(t, d)


def sd_output_law(target, draft):
    """Law of the token one SD step emits, from the algorithm: ``(..., K)``. Equals target (F1)."""
    t, d = _pair(target, draft)
    return _sd_mechanics(t, d)[0]


def sd_output_kernels(target, draft) -> np.ndarray:
    """Effective ``(T, K, K)`` kernels of the tokens SD emits (from the algorithm, Y1)."""
    t = as_kernels(target, "target")
    d = as_kernels(draft, "draft")
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    return _sd_mechanics(t, d)[0]


def sd_rejections_dp(init, target, draft) -> np.ndarray:
    """Y1 by dynamic programming over states: ``E[1{rejection at position n}]``, shape ``(T,)``.

    Runs the SD mechanics forward: the law of ``x_{n-1}`` is propagated with the kernels SD
    actually emits (not assumed to be the target's), and position ``n`` contributes
    ``sum_s P(x_{n-1}=s) sum_x draft_n(x|s) (1 - b_SD(x))``.
    """
    i, t, d = as_chain(init, target, draft)
    kern, rej = _sd_mechanics(t, d)
    return _forward(i[:, None], kern[:, :, None, :, None], rej[:, :, None])


def sd_rejections_tv(init, target, draft) -> np.ndarray:
    """Y1 TV-sum terms ``E_{x_{1:n-1} ~ target}[TV(draft_n, target_n)]``, shape ``(T,)``."""
    i, t, d = as_chain(init, target, draft)
    mu = kernel_marginals(i, t)[:-1]
    return (mu * 0.5 * np.abs(t - d).sum(axis=-1)).sum(axis=-1)


def sd_expected_rejections(init, target, draft, method="dp") -> float:
    """Y1: ``E[N_rej]`` of SD; ``method="dp"`` (mechanics) or ``"tv"`` (the TV-sum formula).

    Theorem Y1: the two agree, ``E[N_rej] = sum_{n=1}^T E_{x_{1:n-1}~target}[TV(draft_n,
    target_n)]``.
    """
    if method == "dp":
        return float(sd_rejections_dp(init, target, draft).sum())
    if method == "tv":
        return float(sd_rejections_tv(init, target, draft).sum())
    raise PolyspecInputError("method", f"must be 'dp' or 'tv', got {method!r}")


def sd_sequence_law(init, target, draft) -> np.ndarray:
    """Exact law of the sequence ``x_1..x_T`` SD emits: shape ``(K,) * T``; equals the target's.

    Built from the SD mechanics (the emitted process is Markov because both models are).
    """
    i, t, d = as_chain(init, target, draft)
    check_sequence_size(t.shape[1], t.shape[0], "target")
    kern = _sd_mechanics(t, d)[0]
    return augmented_sequence_law(i[:, None], kern[:, :, None, :, None])


# --- Y2: unbiased rejection-based algorithms -----------------------------------------------


def rejection_probability(draft, b):
    """``1 - sum_x draft(x) b(x)``: probability that the drafted token is rejected. ``(...)``."""
    d = as_law(draft, "draft")
    bb = _check_b(b, d.shape)
    return as_output(1.0 - (d * bb).sum(axis=-1))


def output_law(draft, b, resampling):
    """Law of the emitted token: ``draft*b + (1 - sum draft*b) * resampling``, shape ``(..., K)``.

    Works per step ``(K,)`` or for whole kernel stacks ``(T, K, K)`` (the effective kernels).
    """
    d = as_law(draft, "draft")
    bb = _check_b(b, d.shape)
    p = _check_resampling(resampling, d.shape)
    return d * bb + (1.0 - (d * bb).sum(axis=-1))[..., None] * p


def chain_rejections(init, draft, b, resampling) -> np.ndarray:
    """Per-position expected rejections ``(T,)`` of a general rejection-based algorithm.

    ``b``, ``resampling``: ``(T, K, K)`` (``[n, s, x]``: step ``n+1``, previous state ``s``,
    token ``x``). Forward DP with the algorithm's own emitted kernels; the target is not
    needed (the output law need not be the target's).
    """
    i, d = as_chain(init, draft, target_field="draft")
    bb = _check_b(b, d.shape)
    p = _check_resampling(resampling, d.shape)
    rej = 1.0 - (d * bb).sum(axis=-1)
    kern = d * bb + rej[..., None] * p
    return _forward(i[:, None], kern[:, :, None, :, None], rej[:, :, None])


def _unbiased(t, d, b):
    """(law ``(t - d b)_+`` normalized or t, mask of steps where it makes the step unbiased)."""
    g = t - d * b
    ok = (g >= -UNBIASED_TOL).all(axis=-1)
    return _normalized_or(np.maximum(g, 0.0), t), ok


def _biased_message(t, d, b, ok_mask) -> str:
    g = t - d * b
    bad = (~ok_mask)[..., None] & (g < -UNBIASED_TOL)
    j = int(np.flatnonzero(bad.ravel())[0])
    idx = np.unravel_index(j, g.shape)
    return (
        f"no resampling law makes this b unbiased: draft*b exceeds target by "
        f"{-g[idx]:.3g} at {list(map(int, idx))} (need b <= min(1, target/draft))"
    )


def unbiased_resampling(target, draft, b, strict=False):
    """Y2: the resampling law making acceptance ``b`` unbiased, or ``None`` if none exists.

    Unbiased means ``draft*b + r*P = target`` with ``r = 1 - sum draft*b``; so
    ``P = (target - draft*b) / r``, a law iff ``target - draft*b >= 0`` (``b <= b_SD``; within
    :data:`UNBIASED_TOL`). If ``r = 0`` (then ``draft*b = target``) every ``P`` works and
    ``target`` is returned. Shape ``(..., K)``: ``None`` if any step fails. ``strict=True``
    raises :class:`PolyspecInputError` (field ``b``) instead of returning ``None``.
    """
    t, d = _pair(target, draft)
    bb = _check_b(b, d.shape)
    p, ok = _unbiased(t, d, bb)
    if np.all(ok):
        return p
    if strict:
        raise PolyspecInputError("b", _biased_message(t, d, bb, ok))
    return None


def unbiased_resampling_chain(init, target, draft, b, strict=False):
    """Y2 over a chain: ``(T, K, K)`` resampling kernels making ``b`` unbiased, or ``None``.

    Only previous states the target reaches with positive probability must be unbiased (the
    others never occur); every row gets ``(target - draft*b)_+`` normalized (``target`` if 0).
    """
    i, t, d = as_chain(init, target, draft)
    bb = _check_b(b, d.shape)
    p, ok = _unbiased(t, d, bb)
    reach = kernel_marginals(i, t)[:-1] > 0
    ok = ok | ~reach
    if np.all(ok):
        return p
    if strict:
        raise PolyspecInputError("b", _biased_message(t, d, bb, ok))
    return None


class Y2Result(NamedTuple):
    """Y2 report. Per step: ``rejection = 1 - sum draft*b`` and ``sd = TV``; over a chain:
    ``rejection = E[N_rej]`` of the algorithm and ``sd`` = the Y1 sum. ``gap = rejection -
    sd`` (>= 0 when unbiased, Y2); ``at_sd``: ``draft*b == draft*b_SD`` (on reachable states).
    ``resampling`` is the unbiased law (``None`` if none exists)."""

    unbiased: bool
    resampling: np.ndarray | None
    rejection: float
    sd: float
    gap: float
    at_sd: bool


def y2_step(target, draft, b) -> Y2Result:
    """Y2 for one step (1-D laws): rejection ``1 - sum draft*b >= TV(draft, target)`` for every
    unbiased ``b``, with equality iff ``b = min(1, target/draft)`` on the draft's support."""
    t = as_law(target, "target", ndim=1)
    d = as_law(draft, "draft", ndim=1)
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    bb = _check_b(b, d.shape)
    p, ok = _unbiased(t, d, bb)
    rej = float(1.0 - (d * bb).sum())
    tv = float(0.5 * np.abs(t - d).sum())
    at_sd = bool(np.all(np.abs(d * (bb - _sd_accept(t, d))) <= UNBIASED_TOL))
    return Y2Result(bool(ok), p if ok else None, rej, tv, rej - tv, at_sd)


def y2_chain(init, target, draft, b) -> Y2Result:
    """Y2 over a chain: ``E[N_rej]`` of acceptance ``b`` ``(T, K, K)`` with its unbiased
    resampling law vs the Y1 sum. When no unbiased law exists, ``rejection`` is computed with
    the TV-optimal law ``(target - draft*b)_+`` (Y4) and ``resampling`` is ``None``."""
    i, t, d = as_chain(init, target, draft)
    bb = _check_b(b, d.shape)
    p, ok = _unbiased(t, d, bb)
    reach = kernel_marginals(i, t)[:-1] > 0
    unbiased = bool(np.all(ok | ~reach))
    rej = float(chain_rejections(i, d, bb, p).sum())
    y1 = sd_expected_rejections(i, t, d, method="tv")
    dev = np.abs(d * (bb - _sd_accept(t, d))).max(axis=-1)
    at_sd = bool(np.all((dev <= UNBIASED_TOL) | ~reach))
    return Y2Result(unbiased, p if unbiased else None, rej, y1, rej - y1, at_sd)


# --- Y3: batch speculative decoding --------------------------------------------------------
#
# Exact semantics. At a position where several drafts are available, the M draft tokens are
# iid ``draft_n(.|x_{n-1})`` and are checked in turn by recursive rejection sampling (each
# against the residual left by the previous failures, see ``_rrs``); a rejection is counted
# only when all M fail, and the token is then drawn from the last residual. This is lossless
# (each stage is an SD step of the current residual against the draft).
#  * ``mode="sequences"`` (docs/theory.md §7, our reading of the paper's batch algorithm): each
#    round drafts M sequences to the end of the horizon; the M-way check happens at the
#    round's first position; after an acceptance the accepted sequence is followed with plain
#    SD until it is rejected, which starts a new round (M fresh sequences from the corrected
#    prefix). Position 1 starts a round. As M -> inf only round-start positions improve, so
#    rejections stay bounded below by ``batch_lower_bound``, which is > 0 as soon as the
#    draft misses target mass, or draft != target at some position n >= 2 after a state
#    the target reaches (then the improvement saturates strictly below the Y1 sum).
#  * ``mode="per_position"``: M fresh drafts at every position (a width-M draft tree regrown
#    after each acceptance). As M -> inf the rejection probability at a state tends to the
#    target mass outside the draft's support, reached at finite M when that mass is > 0.


def batch_step_rejection(target, draft, M):
    """P(all M iid drafts fail) for one step of recursive rejection sampling: ``(...)``.

    ``M = math.inf`` gives the limit, the target mass outside the draft's support.
    """
    t, d = _pair(target, draft)
    return as_output(_rrs(t, d, _check_M(M))[2])


def batch_output_law(target, draft, M):
    """Law of the token emitted by one M-draft step, from the mechanics: ``(..., K)`` (= target)."""
    t, d = _pair(target, draft)
    acc, w, _ = _rrs(t, d, _check_M(M))
    return acc + w


def _batch_chain(i, t, d, M, mode):
    """(init_aug, trans, rej) of the batch process on (state, round-start flag)."""
    acc_m, w_m, r_m = _rrs(t, d, M)
    if mode == "per_position":
        return i[:, None], (acc_m + w_m)[:, :, None, :, None], r_m[:, :, None]
    acc_1, w_1, r_1 = _rrs(t, d, 1)  # plain SD along the followed sequence
    T, K = t.shape[0], t.shape[1]
    trans = np.zeros((T, K, 2, K, 2))  # flag 1 = round start (M drafts), 0 = following
    trans[:, :, 0, :, 0] = acc_1
    trans[:, :, 0, :, 1] = w_1
    trans[:, :, 1, :, 0] = acc_m
    trans[:, :, 1, :, 1] = w_m
    init_aug = np.zeros((K, 2))
    init_aug[:, 1] = i
    return init_aug, trans, np.stack([r_1, r_m], axis=-1)


def batch_rejections(init, target, draft, M, mode="sequences") -> np.ndarray:
    """Y3: per-position expected rejections ``(T,)`` of batch SD with ``M`` drafts (exact DP).

    ``M = math.inf`` gives the M -> infinity limit. See the module notes for ``mode``.
    """
    i, t, d = as_chain(init, target, draft)
    return _forward(*_batch_chain(i, t, d, _check_M(M), _check_mode(mode)))


def batch_expected_rejections(init, target, draft, M, mode="sequences") -> float:
    """Y3: exact ``E[N_rej]`` of batch SD with ``M`` drafts (``M = 1`` is SD, Y1)."""
    return float(batch_rejections(init, target, draft, M, mode).sum())


def batch_improvement(init, target, draft, M, mode="sequences") -> float:
    """Y3 batch-improvement term: Y1 sum minus the batch ``E[N_rej]`` (>= 0, 0 at ``M = 1``)."""
    y1 = sd_expected_rejections(init, target, draft, method="tv")
    return y1 - batch_expected_rejections(init, target, draft, M, mode)


def batch_lower_bound(init, target, draft, mode="sequences") -> float:
    """A lower bound on batch ``E[N_rej]`` valid for every M, including M -> infinity.

    With ``mu_n`` the target marginals, ``m0_n(s)`` the target mass outside the draft's support
    and ``TV_n(s)``: every position rejects with probability ``>= m0``. In ``"sequences"``
    mode position ``n >= 2`` moreover follows an accepted sequence (plain SD, rejection
    ``TV``) with probability ``>= nu_n(s) = sum_{s'} mu_{n-2}(s') min(target, draft)_{n-1}(s'
    -> s)`` (the previous token was accepted; M drafts only raise acceptance), so the bound is
    ``sum_n sum_s [mu m0 + nu (TV - m0)]``. In ``"per_position"`` mode it is
    ``sum_n sum_s mu m0``, which equals the M -> infinity limit.
    """
    i, t, d = as_chain(init, target, draft)
    mode = _check_mode(mode)
    mu = kernel_marginals(i, t)[:-1]
    m0 = np.where(d > 0, 0.0, t).sum(axis=-1)
    bound = (mu * m0).sum()
    if mode == "sequences":
        tv = 0.5 * np.abs(t - d).sum(axis=-1)
        nu = np.zeros_like(mu)
        nu[1:] = np.einsum("ns,nsx->nx", mu[:-1], np.minimum(t, d)[:-1])
        bound += (nu * (tv - m0)).sum()
    return float(bound)


def batch_sequence_law(init, target, draft, M, mode="sequences") -> np.ndarray:
    """Exact law ``(K,) * T`` of the sequence batch SD emits (flag marginalized): = target's."""
    i, t, d = as_chain(init, target, draft)
    check_sequence_size(t.shape[1], t.shape[0], "target")
    init_aug, trans, _ = _batch_chain(i, t, d, _check_M(M), _check_mode(mode))
    return augmented_sequence_law(init_aug, trans)


class BatchSaturation(NamedTuple):
    """Y3 saturation table: ``rejections[j]`` = batch ``E[N_rej]`` at ``M[j]``; ``improvement``
    = ``sd_rejections - rejections``; ``limit_*`` at M -> infinity; ``lower_bound`` from
    :func:`batch_lower_bound`."""

    mode: str
    M: np.ndarray
    rejections: np.ndarray
    improvement: np.ndarray
    sd_rejections: float
    limit_rejections: float
    limit_improvement: float
    lower_bound: float


def batch_saturation(init, target, draft, Ms=(1, 2, 3, 4, 5, 6, 7, 8), mode="sequences"):
    """Y3: batch ``E[N_rej]`` and improvement for each integer M in ``Ms``, the exact
    M -> infinity limit and the M-free lower bound, as a :class:`BatchSaturation`."""
    i, t, d = as_chain(init, target, draft)
    mode = _check_mode(mode)
    if isinstance(Ms, (str, bytes)) or np.ndim(Ms) != 1 or len(Ms) == 0:
        raise PolyspecInputError("Ms", f"must be a non-empty list of integers >= 1, got {Ms!r}")
    ms = np.array([as_int(m, f"Ms[{j}]", low=1) for j, m in enumerate(Ms)], dtype=np.int64)
    rej = np.array([batch_expected_rejections(i, t, d, int(m), mode) for m in ms])
    y1 = sd_expected_rejections(i, t, d, method="tv")
    lim = batch_expected_rejections(i, t, d, math.inf, mode)
    return BatchSaturation(
        mode,
        ms,
        rej,
        y1 - rej,
        y1,
        lim,
        y1 - lim,
        batch_lower_bound(i, t, d, mode),
    )


# --- Y4-Y5: over-acceptance and the quality/rejection Pareto front -------------------------


def require_over_acceptance(target, draft, b) -> np.ndarray:
    """Validate an over-acceptance ``b >= min(1, target/draft)`` on the draft's support."""
    t, d = _pair(target, draft)
    bb = _check_b(b, d.shape)
    short = (d > 0) & (bb < _sd_accept(t, d) - UNBIASED_TOL)
    if short.any():
        j = int(np.flatnonzero(short.ravel())[0])
        idx = np.unravel_index(j, d.shape)
        raise PolyspecInputError(
            "b",
            f"over-acceptance needs b >= min(1, target/draft); got {bb[idx]} < "
            f"{_sd_accept(t, d)[idx]} at {list(map(int, idx))}",
        )
    return bb


def optimal_resampling(target, draft, b):
    """Y4: ``P* = (target - draft*b)_+ / ||.||_1`` (``target`` if 0), minimizing
    ``TV(output_law, target)`` over resampling laws, for any ``b`` in [0, 1]: ``(..., K)``."""
    t, d = _pair(target, draft)
    bb = _check_b(b, d.shape)
    return _normalized_or(np.maximum(t - d * bb, 0.0), t)


def optimal_loss(target, draft, b):
    """Y4: ``Loss*(b) = min_P TV(draft*b + r*P, target) = sum_x (draft(x) b(x) - target(x))_+``."""
    t, d = _pair(target, draft)
    bb = _check_b(b, d.shape)
    return as_output(np.maximum(d * bb - t, 0.0).sum(axis=-1))


def output_tv(target, draft, b, resampling):
    """``TV(draft*b + (1 - sum draft*b) * resampling, target)``: the loss of a given law."""
    t, d = _pair(target, draft)
    out = output_law(d, b, resampling)
    return as_output(0.5 * np.abs(out - t).sum(axis=-1))


def pareto_point(target, draft, b) -> tuple[float, float]:
    """Y5: ``(P(reject), Loss*(b))`` of an over-acceptance ``b`` (1-D laws).

    Theorem Y5: ``P(reject) + Loss*(b) = TV(draft, target)`` (linear Pareto front).
    """
    t = as_law(target, "target", ndim=1)
    d = as_law(draft, "draft", ndim=1)
    bb = require_over_acceptance(t, d, b)
    return float(1.0 - (d * bb).sum()), float(np.maximum(d * bb - t, 0.0).sum())


class ParetoFront(NamedTuple):
    """Points along ``b_lam = b_SD + lam (1 - b_SD)``: ``rejection[j] + loss[j] = tv``."""

    lam: np.ndarray
    rejection: np.ndarray
    loss: np.ndarray
    tv: float


def pareto_front(target, draft, num=21) -> ParetoFront:
    """Y5 front for plotting: ``num`` points from SD (``lam = 0``: rejection TV, loss 0) to
    always-accept (``lam = 1``: rejection 0, loss TV), each with the optimal resampling P*."""
    t = as_law(target, "target", ndim=1)
    d = as_law(draft, "draft", ndim=1)
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    n = as_int(num, "num", low=2)
    lam = np.linspace(0.0, 1.0, n)
    b_sd = _sd_accept(t, d)
    b = np.clip(b_sd[None, :] + lam[:, None] * (1.0 - b_sd[None, :]), 0.0, 1.0)
    rej = 1.0 - (d[None, :] * b).sum(axis=-1)
    loss = np.maximum(d[None, :] * b - t[None, :], 0.0).sum(axis=-1)
    return ParetoFront(lam, rej, loss, float(0.5 * np.abs(t - d).sum()))


# --- the paper's simulation setting --------------------------------------------------------


def yin_demo_chain(seed=0, draft_drop=0) -> MarkovPair:
    """A 7-state non-stationary chain with T = 50 (the paper's setting; its matrices are not
    published, so ours are random and deterministic in ``seed``): target rows
    ``Dirichlet(1)``, draft ``0.5 * target + 0.5 * Dirichlet(1)``, uniform prompt law.
    ``draft_drop > 0`` removes that many tokens from every draft row's support."""
    return random_pair(
        50, 7, seed, kind="mixture", eps=0.5, concentration=1.0, draft_drop=draft_drop
    )


def yin_demo(seed=0, Ms=(1, 2, 3, 4, 5, 6, 7, 8), draft_drop=0) -> dict:
    """Exact numbers on :func:`yin_demo_chain`: Y1 ``E[N_rej]`` (DP and TV sum) and the Y3
    saturation table (``Ms``, M -> infinity limit, lower bound) in both batch modes."""
    pair = yin_demo_chain(seed, draft_drop)
    out = {
        "K": pair.K,
        "T": pair.T,
        "seed": int(as_int(seed, "seed", low=0)),
        "draft_drop": int(draft_drop),
        "expected_rejections_dp": sd_expected_rejections(*pair, method="dp"),
        "expected_rejections_tv": sd_expected_rejections(*pair, method="tv"),
        "batch": {},
    }
    for mode in BATCH_MODES:
        s = batch_saturation(*pair, Ms=Ms, mode=mode)
        out["batch"][mode] = {
            "M": [int(m) for m in s.M],
            "rejections": [float(x) for x in s.rejections],
            "improvement": [float(x) for x in s.improvement],
            "limit_rejections": s.limit_rejections,
            "limit_improvement": s.limit_improvement,
            "lower_bound": s.lower_bound,
        }
    return out
