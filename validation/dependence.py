"""P1 extended for acceptance that depends on the block: a law of ``A`` per block length.

On real text the levels of a cascade agree or disagree together: a block that reached
``G = theta + k`` because the rounds below were fully accepted (easy, predictable text) is
then accepted by the verifier far more often than a block of ``G = theta`` (measured on the
zoo with greedy decoding: mean ``A`` 5.5 of 6 vs 0.3 of 4 in the same capture). P1 assumes
``A`` independent of ``G`` given the cap; here each pair gets a **cap-conditional law**
``P(A = a | G = g)`` (the empirical histogram of the rounds with that block length when
there are at least ``min_rounds`` of them, else the pair's fitted law capped at ``g``), and
optionally the **rounds of each level form a Markov chain** in their emitted length ``L``
(transition matrix estimated from consecutive rounds of the same level and prompt), so the
block-filling renewal of THEORY §4 becomes a Markov-renewal dynamic programme over
(accumulated length, last round's length). Everything else is P1's renewal–reward
accounting (Wald: ``E[C_i] = phi_{i+1} E[C_{i+1}] + E[T_i(G_i + 1)]``, ``tau = E[C_1]/E[L_1]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory._input import PolyspecInputError
from polyspec_theory.config import Cascade
from polyspec_theory.laws import AcceptanceLaw
from polyspec_theory.polybasic import renewal_fill

__all__ = ["CapConditionalLaw", "MarkovLengths", "DependentPrediction", "predict_dependent",
           "markov_fill", "group_rounds", "RegimeMixture", "fit_regimes", "select_regimes",
           "mixture_forwards"]


@dataclass(frozen=True)
class CapConditionalLaw:
    """``P(A = a | G = g)``: empirical per block length where ``rounds >= min_rounds``,
    otherwise ``fallback.pmf_vector(g)``."""

    fallback: AcceptanceLaw
    empirical: dict  # g -> pmf over a = 0..g

    @classmethod
    def fit(cls, accepted, caps, fallback: AcceptanceLaw, min_rounds: int = 20):
        a = np.asarray(accepted, dtype=np.int64)
        g = np.asarray(caps, dtype=np.int64)
        emp = {}
        for cap in np.unique(g):
            sel = g == cap
            if sel.sum() >= min_rounds:
                emp[int(cap)] = np.bincount(a[sel], minlength=int(cap) + 1)[: cap + 1] / sel.sum()
        return cls(fallback, emp)

    def pmf_vector(self, cap: int) -> np.ndarray:
        if cap in self.empirical:
            return self.empirical[cap]
        return self.fallback.pmf_vector(int(cap))


@dataclass(frozen=True)
class MarkovLengths:
    """Emitted lengths of consecutive rounds of one level as a Markov chain on ``1..lmax``:
    ``trans[l, l']`` (rows of unseen states: the marginal), ``first[l]``: law of the first
    round of a block (the chain's state after a block is closed is not tracked)."""

    trans: np.ndarray
    first: np.ndarray

    @classmethod
    def fit(cls, lengths, prompts, first_in_block=None, lmax: int | None = None):
        L = np.asarray(lengths, dtype=np.int64)
        p = np.asarray(prompts)
        lmax = int(L.max()) if lmax is None else lmax
        marg = np.bincount(L, minlength=lmax + 1)[: lmax + 1].astype(float)
        marg[0] = 0.0
        marg /= marg.sum()
        cnt = np.zeros((lmax + 1, lmax + 1))
        same = p[1:] == p[:-1]
        np.add.at(cnt, (L[:-1][same], L[1:][same]), 1.0)
        trans = np.empty_like(cnt)
        for i in range(lmax + 1):
            s = cnt[i].sum()
            trans[i] = cnt[i] / s if s > 0 else marg
        first = marg if first_in_block is None else first_in_block
        return cls(trans, np.asarray(first, dtype=float))


def markov_fill(chain: MarkovLengths, theta: int) -> tuple[float, np.ndarray]:
    """Markov-renewal analogue of :func:`polyspec_theory.polybasic.renewal_fill`: rounds with
    Markov lengths fill a block of at least ``theta`` tokens; returns ``(E[N], P(G = g))``."""
    q = chain.trans
    lmax = q.shape[0] - 1
    f = np.zeros((theta, lmax + 1))  # f[s, l]: partial sum s < theta reached, last length l
    g_pmf = np.zeros(theta + lmax)
    first = chain.first
    for ln in range(1, lmax + 1):
        if first[ln] == 0:
            continue
        if ln < theta:
            f[ln, ln] += first[ln]
        else:
            g_pmf[ln] += first[ln]
    for s in range(1, theta):
        for last in range(1, lmax + 1):
            w = f[s, last]
            if w == 0:
                continue
            for ln in range(1, lmax + 1):
                pr = w * q[last, ln]
                if pr == 0:
                    continue
                if s + ln < theta:
                    f[s + ln, ln] += pr
                else:
                    g_pmf[s + ln] += pr
    phi = 1.0 + float(f[1:].sum())
    return phi, g_pmf


@dataclass(frozen=True)
class DependentPrediction:
    speedup: float
    time_per_token: float
    forwards_per_token: tuple[float, ...]
    forward_costs: tuple[float, ...]
    mean_emitted: tuple[float, ...]
    mean_block: tuple[float | None, ...]


def predict_dependent(cascade: Cascade, cap_laws, chains=None) -> DependentPrediction:
    """P1's accounting with cap-conditional acceptance (``cap_laws[i]``: a
    :class:`CapConditionalLaw` or a plain law per pair) and, where ``chains[i+1]`` is given, a
    Markov-renewal block fill from the emitted lengths of level ``i+1`` (the bottom level
    always emits 1). Costs and thresholds come from ``cascade``."""
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError("cascade", "must be a Cascade")
    n = cascade.n
    if len(cap_laws) != n - 1:
        raise PolyspecInputError("cap_laws", f"need one law per pair ({n - 1})")
    chains = chains or [None] * n
    costs = cascade.costs
    l_pmf = np.array([0.0, 1.0])
    round_cost = costs[-1].t1
    phis = [None] * n
    fcost = [0.0] * n
    fcost[-1] = costs[-1].t1
    mean_l = [1.0] * n
    mean_g: list = [None] * n
    for i in range(n - 2, -1, -1):
        theta = cascade.thresholds[i]
        ch = chains[i + 1] if i + 1 < n - 1 else None
        if ch is not None:
            phi, g_pmf = markov_fill(ch, theta)
        else:
            phi, g_pmf = renewal_fill(l_pmf, theta)
        g_pmf = np.trim_zeros(g_pmf, "b")
        phis[i + 1] = phi
        gs = np.flatnonzero(g_pmf > 0)
        fcost[i] = float(np.dot(g_pmf[gs], costs[i](gs + 1)))
        law = cap_laws[i]
        out = np.zeros(g_pmf.size + 1)
        for g in gs:
            pa = law.pmf_vector(int(g))
            out[1: g + 2] += g_pmf[g] * pa
        l_pmf = out
        round_cost = phi * round_cost + fcost[i]
        mean_l[i] = float(np.dot(np.arange(l_pmf.size), l_pmf))
        mean_g[i] = float(np.dot(np.arange(g_pmf.size), g_pmf))
    tau = round_cost / mean_l[0]
    fwd = [1.0 / mean_l[0]]
    for i in range(1, n):
        fwd.append(fwd[-1] * phis[i])
    return DependentPrediction(
        speedup=costs[0].t1 / tau, time_per_token=tau, forwards_per_token=tuple(fwd),
        forward_costs=tuple(fcost), mean_emitted=tuple(mean_l), mean_block=tuple(mean_g))


# --------------------------------------------------------------------------------------------
# regimes shared by all levels within a top-level round
# --------------------------------------------------------------------------------------------
def group_rounds(rounds, n_levels: int):
    """Assign every round to the top-level round whose block it helped build.

    ``rounds[i]`` has arrays ``G``, ``A``, ``prompt`` in chronological order (file order) for
    verifying level ``i`` (0 = the target verifies). Under the accumulate policy a level-``i``
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
class RegimeMixture:
    """``K`` regimes drawn once per top-level round (shared by every level of that round),
    iid acceptance ``alphas[r][i]`` per regime and pair, regime weights ``weights``."""

    weights: np.ndarray
    alphas: np.ndarray  # (K, n-1)
    loglik: float
    bic: float
    n_top: int

    @property
    def k(self) -> int:
        return len(self.weights)


def fit_regimes(rounds, n_levels: int, k: int, seed: int = 0, n_init: int = 8,
                iters: int = 300) -> RegimeMixture:
    """EM for :class:`RegimeMixture` (censored geometric per regime and level)."""
    owner = group_rounds(rounds, n_levels)
    m = n_levels - 1
    n_top = len(rounds[0].G)
    succ = np.zeros((n_top, m))
    fail = np.zeros((n_top, m))
    for i in range(m):
        r = rounds[i]
        np.add.at(succ[:, i], owner[i], r.A)
        np.add.at(fail[:, i], owner[i], (r.A < r.G).astype(float))
    rng = np.random.default_rng(seed)
    best = None
    for t in range(n_init):
        if t == 0:
            # initial split by the top level's acceptance ratio
            q = (succ[:, 0] + 0.5) / (succ[:, 0] + fail[:, 0] + 1.0)
            resp = np.zeros((n_top, k))
            resp[np.arange(n_top), np.minimum((np.argsort(np.argsort(q)) * k) // n_top,
                                              k - 1)] = 1.0
        else:
            resp = rng.dirichlet(np.ones(k), size=n_top)
        ll_old = -np.inf
        for _ in range(iters):
            w = resp.sum(0) + 1e-12
            a = (resp.T @ succ + 1e-9) / (resp.T @ (succ + fail) + 2e-9)
            a = np.clip(a, 1e-9, 1 - 1e-9)
            logp = succ @ np.log(a).T + fail @ np.log1p(-a).T + np.log(w / w.sum())
            mx = logp.max(1, keepdims=True)
            ll = float(np.sum(mx[:, 0] + np.log(np.exp(logp - mx).sum(1))))
            resp = np.exp(logp - mx)
            resp /= resp.sum(1, keepdims=True)
            if ll - ll_old < 1e-10:
                break
            ll_old = ll
        if best is None or ll > best[0]:
            best = (ll, w / w.sum(), a)
    ll, w, a = best
    n_par = (k - 1) + k * m
    return RegimeMixture(np.asarray(w), np.asarray(a), ll, n_par * np.log(n_top) - 2 * ll,
                         n_top)


def select_regimes(rounds, n_levels: int, k_max: int = 3, seed: int = 0) -> RegimeMixture:
    """The BIC-best :class:`RegimeMixture` with 1..``k_max`` regimes."""
    fits = [fit_regimes(rounds, n_levels, k, seed) for k in range(1, k_max + 1)]
    return min(fits, key=lambda f: f.bic)


def mixture_forwards(cascade: Cascade, mix: RegimeMixture) -> tuple[np.ndarray, float]:
    """Forwards per token of each model and the time per token under the regime mixture:
    renewal–reward over top-level rounds whose regime is drawn per round (exact also when
    the regime persists across rounds as a stationary Markov chain, since within a round
    the levels see only that round's regime): ``F_i = sum_r w_r E[forwards_i | r] /
    sum_r w_r E[L_1 | r]`` and ``tau = sum_r w_r E[C_1 | r] / sum_r w_r E[L_1 | r]`` (P1 per
    regime with ``cascade``'s costs and thresholds)."""
    from polyspec_theory.laws import IIDGeometric
    from polyspec_theory.polybasic import predict

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
