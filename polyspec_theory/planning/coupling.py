"""Acceptance coupled across the levels of a cascade (an extension of P1; docs/theory.md E5).

P1 assumes the rounds of every pair independent. On real text the levels agree or disagree
together: a block that grew long because the rounds below were fully accepted (easy text) is
then accepted by the verifier far more often. :class:`LevelCoupling` models this with a
latent *class* drawn once per top-level round and shared by every level of that round; each
class has iid acceptance ``alphas[c][i]`` per pair (Leviathan's law within the class). The
class of a round is not observed: :func:`fit_coupling` fits the classes by EM on the rounds
grouped by top-level round (:func:`group_rounds`), and :func:`select_coupling` picks the
number of classes by BIC. :func:`coupled_forwards` is P1's renewal–reward accounting over the
mixture (exact under the model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import Cascade, as_cascade
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.schemes import predict

__all__ = ["LevelCoupling", "group_rounds", "fit_coupling", "select_coupling",
           "coupled_forwards"]


def group_rounds(rounds, n_levels: int):
    """Assign every round to the top-level round whose block it helped build.

    ``rounds[i]`` has arrays ``G``, ``A``, ``prompt`` in chronological order for level ``i + 1``
    (``rounds[0]``: the target verifies). Under the accumulate policy a level-``i``
    round consumes the next consecutive level-``i+1`` rounds of the same prompt whose emitted
    lengths add up to exactly its ``G``. Returns, per level, the index of the top-level round
    of each of its rounds; raises if the identity ``G_i = sum L_{i+1}`` fails.
    """
    top = [np.arange(len(rounds[0].G))]
    for i in range(1, n_levels - 1):
        up, lo = rounds[i - 1], rounds[i]
        owner = np.full(len(lo.G), -1, dtype=np.int64)
        for p in np.unique(up.prompt):
            iu = np.flatnonzero(up.prompt == p)
            il = np.flatnonzero(lo.prompt == p)
            k = 0
            for j in iu:
                s = 0
                while s < up.G[j] and k < il.size:
                    s += lo.A[il[k]] + 1
                    owner[il[k]] = top[i - 1][j]
                    k += 1
                if s != up.G[j]:
                    raise PolyspecInputError(
                        "rounds", f"level {i} rounds do not add up to the level {i - 1} block "
                        f"(prompt {p}): not an accumulate-policy trace")
            if k != il.size:
                raise PolyspecInputError("rounds", f"level {i} has rounds after the last "
                                         f"level {i - 1} block of prompt {p}")
        top.append(owner)
    return top


@dataclass(frozen=True)
class LevelCoupling:
    """``K`` classes drawn once per top-level round (shared by every level of that round),
    iid acceptance ``alphas[c][i]`` per class and pair, class weights ``weights``."""

    weights: np.ndarray
    alphas: np.ndarray  # (K, n-1)
    loglik: float
    bic: float
    n_top: int

    @property
    def k(self) -> int:
        return len(self.weights)


def fit_coupling(rounds, n_levels: int, k: int, seed: int = 0, n_init: int = 8,
                 iters: int = 300) -> LevelCoupling:
    """EM for :class:`LevelCoupling` with ``k`` classes (censored geometric per class and
    level). ``rounds[i]`` has arrays ``G``, ``A``, ``prompt`` of level ``i + 1``, in order."""
    k = as_int(k, "k", low=1)
    n_init = as_int(n_init, "n_init", low=1)
    iters = as_int(iters, "iters", low=1)
    owner = group_rounds(rounds, n_levels)
    m = n_levels - 1
    n_top = len(rounds[0].G)
    succ = np.zeros((n_top, m))
    fail = np.zeros((n_top, m))
    for i in range(m):
        r = rounds[i]
        np.add.at(succ[:, i], owner[i], r.A)
        np.add.at(fail[:, i], owner[i], (r.A < r.G).astype(float))
    tried = succ + fail
    rng = np.random.default_rng(seed)
    starts = []
    # one class: the first E step sets every responsibility to exactly 1 (exp(0) / 1) from
    # any start, so with two or more iterations every start ends on the first start's
    # (loglik, weights, alphas) and the first is kept (a later one must be strictly
    # better); the rng serves this call alone
    for t in range(n_init if k > 1 or iters < 2 else min(n_init, 1)):
        if t == 0:
            # initial split by the top level's acceptance ratio
            q = (succ[:, 0] + 0.5) / (succ[:, 0] + fail[:, 0] + 1.0)
            resp = np.zeros((n_top, k))
            resp[np.arange(n_top), np.minimum((np.argsort(np.argsort(q)) * k) // n_top,
                                              k - 1)] = 1.0
        else:
            resp = rng.dirichlet(np.ones(k), size=n_top)
        starts.append(resp)
    best = None
    for ll, w, a in _em_side_by_side(np.stack(starts), succ, fail, tried, iters):
        if best is None or ll > best[0]:
            best = (ll, w, a)
    ll, w, a = best
    n_par = (k - 1) + k * m
    return LevelCoupling(np.asarray(w), np.asarray(a), ll, n_par * np.log(n_top) - 2 * ll,
                         n_top)


def _em_side_by_side(resp, succ, fail, tried, iters: int) -> list:
    """The EM of :func:`fit_coupling` from each start ``resp[t]`` (responsibilities, ``(n_top,
    k)``), the starts run side by side: per start, the same numbers to the last bit as its
    own loop (every sum over rounds or classes is taken per start in the same order; a start
    that has converged is left as it stopped). Returns per start ``(loglik, weights,
    alphas)`` of its last iteration."""
    n_start, _, k = resp.shape
    out: list = [None] * n_start
    ll_old = np.full(n_start, -np.inf)
    live = np.arange(n_start)
    for it in range(iters):
        w = resp.sum(1) + 1e-12  # (S, k): per start resp.sum(0)
        rt = resp.transpose(0, 2, 1)
        a = (rt @ succ + 1e-9) / (rt @ tried + 2e-9)
        a = np.clip(a, 1e-9, 1 - 1e-9)
        # (x + y) + z with the sums taken in place: the same numbers, fewer arrays made
        logp = succ @ np.log(a).transpose(0, 2, 1)
        logp += fail @ np.log1p(-a).transpose(0, 2, 1)
        logp += np.log(w / w.sum(1)[:, None])[:, None, :]
        # row max and row sum over the k classes column by column (left to right, as
        # numpy sums a row): the same numbers as logp.max(-1), .sum(-1), faster
        mx = logp[:, :, 0].copy()
        for c in range(1, k):
            np.maximum(mx, logp[:, :, c], out=mx)
        logp -= mx[:, :, None]
        resp = np.exp(logp, out=logp)
        tot = resp[:, :, 0].copy()
        for c in range(1, k):
            tot += resp[:, :, c]
        ll = (mx + np.log(tot)).sum(1)
        resp /= tot[:, :, None]
        done = (ll - ll_old < 1e-10) | (it == iters - 1)
        for s_ in np.flatnonzero(done):
            out[live[s_]] = (float(ll[s_]), w[s_] / w[s_].sum(), a[s_])
        if done.all():
            break
        keep = ~done
        resp, ll_old, live = resp[keep], ll[keep], live[keep]
    return out


def select_coupling(rounds, n_levels: int, k_max: int = 3, seed: int = 0) -> LevelCoupling:
    """The BIC-best :class:`LevelCoupling` with 1..``k_max`` classes."""
    fits = [fit_coupling(rounds, n_levels, k, seed) for k in range(1, k_max + 1)]
    return min(fits, key=lambda f: f.bic)


def coupled_forwards(cascade: Cascade, mix: LevelCoupling) -> tuple[np.ndarray, float]:
    """Forwards per token of each model and the time per token under the coupling:
    renewal–reward over top-level rounds whose class is drawn per round (exact also when
    the class persists across rounds as a stationary Markov chain, since within a round
    the levels see only that round's class): ``F_i = sum_c w_c E[forwards_i | c] /
    sum_c w_c E[L_1 | c]`` and ``tau = sum_c w_c E[C_1 | c] / sum_c w_c E[L_1 | c]`` (P1 per
    class with ``cascade``'s costs and thresholds)."""

    cascade = as_cascade(cascade, chain_only="the level coupling")
    num = np.zeros(cascade.n)
    den = cost = 0.0
    for w, a in zip(mix.weights, mix.alphas, strict=True):
        c = Cascade(cascade.models, tuple(IIDGeometric(float(x)) for x in a),
                    cascade.thresholds, cascade.policy)
        p = predict(c)
        el = p.levels[0].mean_emitted
        num += w * el * np.array([lv.forwards_per_token for lv in p.levels])
        den += w * el
        cost += w * p.levels[0].round_cost
    return num / den, cost / den
