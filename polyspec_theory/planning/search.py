"""The planner's exact search (docs/theory.md E2; :mod:`polyspec_theory.planning.planner` states
the method): suffix states shared by every chain that ends with them, every threshold of a
verifier at once (the P1 kernel on batches of states), and the branch-and-bound cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.p1 import block_laws, renewal_masses
from polyspec_theory.planning.pool import Pool

__all__ = [
    "SearchStats",
    "search_pool",
    "PRUNE_MARGIN",
    "CHUNK_ELEMENTS",
]


# --------------------------------------------------------------------------------------
# precomputed tables
# --------------------------------------------------------------------------------------
PRUNE_MARGIN = 1e-9  # relative safety margin on the pruning cut (float rounding)
CHUNK_ELEMENTS = 2_000_000  # float64 elements per (states x thresholds x block) chunk


# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchStats:
    """What the search looked at. ``configs_*`` count complete (chain, thresholds)
    configurations; ``states_*`` count partial sub-cascade states (suffix, thresholds)."""

    chains_total: int
    chains_scored: int
    configs_total: int
    configs_scored: int
    states_computed: int
    states_pruned: int
    pruning: bool

    @property
    def configs_pruned(self) -> int:
        return self.configs_total - self.configs_scored

    @property
    def chains_pruned(self) -> int:
        return self.chains_total - self.chains_scored

    def to_dict(self) -> dict:
        return {
            "pruning": self.pruning,
            "chains_total": self.chains_total,
            "chains_scored": self.chains_scored,
            "chains_pruned": self.chains_pruned,
            "configs_total": self.configs_total,
            "configs_scored": self.configs_scored,
            "configs_pruned": self.configs_pruned,
            "states_computed": self.states_computed,
            "states_pruned": self.states_pruned,
        }


# --------------------------------------------------------------------------------------
def _convex_minorant(y: np.ndarray) -> np.ndarray:
    """Greatest convex minorant of the points ``(j, y[j])`` evaluated at every ``j``."""
    hull: list[int] = []
    for j in range(y.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b if it lies on or above the segment a -> j
            if (y[b] - y[a]) * (j - a) >= (y[j] - y[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(j)
    return np.interp(np.arange(y.size), hull, y[hull])


class _Tables:
    """Per-pool arrays indexed by model number (0 = target) and pair ``(u, v)``."""
    def __init__(self, pool: Pool, allowed: set[tuple[int, int]] | None = None):
        self.pool = pool
        self.k = len(pool.models)
        self.theta_max = pool.max_threshold
        self.truncate = pool.policy == "truncate"
        self.gamma = (self.k - 1) * self.theta_max  # any block G is <= Gamma
        width = self.gamma + 2
        g = np.arange(width)
        # Tg[u][g] = T_u(g + 1) + o_u (a verification round of u, per-round overhead
        # included); Tc = its greatest convex minorant (for the bound)
        self.tg = [m.cost(g + 1) + m.overhead for m in pool.models]
        self.tc = [_convex_minorant(t) for t in self.tg]
        self.t1 = [m.cost.t1 for m in pool.models]
        index = {nm: i for i, nm in enumerate(pool.names)}
        self.index = index
        self.pairs: dict[tuple[int, int], dict] = {}
        for (vn, dn), law in pool.pairs.items():
            key = (index[vn], index[dn])
            if allowed is not None and key not in allowed:
                continue
            # Q[g, a] = P(A = a | G = g), M(g) = E[A | G = g]; the bound needs a concave M:
            # its least concave majorant (module docstring)
            m = law.capped_mean_emitted(width) - 1.0
            self.pairs[key] = {"law": law, "q": law.cap_pmf_table(width), "m": m,
                               "mb": -_convex_minorant(-m)}
        self.above: dict[int, list[int]] = {}
        for u, v in sorted(self.pairs):
            self.above.setdefault(v, []).append(u)

    # ---- bound ---------------------------------------------------------------------
    def inverse(self, u: int, v: int, c: float) -> float:
        """``sup{t >= 0 : h_uv(t) <= c}`` = ``max_g (c (1 + M(g)) - Tc_u(g+1)) / g``."""
        if c == math.inf:
            return math.inf
        if c == -math.inf:
            return -math.inf
        g = np.arange(1, self.gamma + 1)
        m = self.pairs[(u, v)]["mb"][1 : self.gamma + 1]
        tc = self.tc[u][1 : self.gamma + 1]
        return float(np.max((c * (1.0 + m) - tc) / g))


class _Cuts:
    """``cut(v, U)``: the largest ``tau_v`` that some completion above could still turn into
    ``tau_1 <= c`` (module docstring); memoized per ``c``."""

    def __init__(self, tables: _Tables):
        self.tables = tables
        self.c = math.inf
        self.memo: dict[tuple[int, int], float] = {}

    def set_target_tau(self, c: float) -> None:
        if c != self.c:
            self.c = c
            self.memo.clear()

    def cut(self, v: int, used: int) -> float:
        if v == 0:
            return self.c
        key = (v, used)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        best = -math.inf
        for u in self.tables.above.get(v, ()):
            if u != 0 and used >> u & 1:
                continue
            inner = self.c if u == 0 else self.cut(u, used | 1 << u)
            if inner == -math.inf:
                continue
            best = max(best, self.tables.inverse(u, v, inner))
            if best == math.inf:
                break
        self.memo[key] = best
        return best


# --------------------------------------------------------------------------------------
# batched P1 step: one verifier on top of many states, all thresholds at once
# --------------------------------------------------------------------------------------
def _extend(tables: _Tables, p: np.ndarray, c: np.ndarray, u: int, v: int):
    """Exact ``(tau_u, E[C_u], f)`` for every state (rows of ``p`` = law of L_v, ``c`` =
    E[C_v]) under verifier ``u`` and every threshold ``1..theta_max`` (arrays (B, theta_max)).

    No block law is formed: for any ``h``, ``E[h(G)] = H(0) + sum_{1<=s<theta} f(s) (H(s) -
    h(s))`` with ``H(s) = E[h(s + L_v)]`` (``P(G=g) = sum_{s<theta} f(s) P(L=g-s)``, and the
    renewal mass at ``s >= 1`` is ``f(s)``), applied to ``h = T_u(. + 1)`` and ``h = M_uv``.
    """
    th = tables.theta_max
    pair = tables.pairs[(u, v)]
    f = renewal_masses(p, th)
    phi = np.cumsum(f, axis=1)  # phi[:, theta-1] = sum_{s<theta} f(s)
    thetas = np.arange(1, th + 1)
    if tables.truncate:  # G = theta exactly
        cost = phi * c[:, None] + tables.tg[u][thetas][None, :]
        return cost / (1.0 + pair["m"][thetas][None, :]), cost, f
    w = p.shape[1]
    hank = np.arange(w)[:, None] + np.arange(th)[None, :]  # s + l
    out = []
    for h in (tables.tg[u], pair["m"]):
        big_h = np.einsum("bl,ls->bs", p, h[hank])  # (B, th): E[h(s + L)]
        terms = f * (big_h - h[:th])
        terms[:, 0] = big_h[:, 0]
        out.append(np.cumsum(terms, axis=1))
    cost = phi * c[:, None] + out[0]
    return cost / (1.0 + out[1]), cost, f


def _emitted(tables: _Tables, gp: np.ndarray, u: int, v: int) -> np.ndarray:
    """Law of ``L_u`` (rows, index = l) from block laws ``gp`` (rows), trimmed."""
    a = tables.pairs[(u, v)]["law"].pmf_over_blocks(gp)
    out = np.concatenate([np.zeros((gp.shape[0], 1)), a], axis=1)
    nz = np.flatnonzero(out.any(axis=0))
    return out[:, : nz[-1] + 1]


def _truncate_emitted(tables: _Tables, u: int, v: int, theta: np.ndarray) -> np.ndarray:
    pair = tables.pairs[(u, v)]
    width = int(theta.max()) + 2
    out = np.zeros((theta.size, width))
    for i, t in enumerate(theta):
        out[i, 1 : t + 2] = pair["q"][t, : t + 1]
    return out


# --------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------
_MAX_BATCH = 20_000  # states per batch handed down the depth-first search (bounds memory)


@dataclass
class _Batch:
    models: tuple[int, ...]  # top first, bottom last (the target not included)
    p: np.ndarray  # (B, w) law of L of the top model's system
    c: np.ndarray  # (B,) E[C]
    tau: np.ndarray  # (B,) E[C] / E[L]
    thr: np.ndarray  # (B, len(models) - 1) thresholds, top first

    @property
    def used(self) -> int:
        mask = 0
        for m in self.models:
            mask |= 1 << m
        return mask


class _Records:
    """Best value found per chain, and the ``keep`` best of them (distinct chains).

    Values of a chain only increase, so the top set is maintained exactly; ``kth`` (the
    smallest value in the top set once it is full) is a speedup that ``keep`` distinct chains
    are known to reach."""

    def __init__(self, keep: int):
        self.keep = keep
        self.best: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}
        self.top: dict[tuple[int, ...], float] = {}

    def update(self, chain, val: float, thr) -> None:
        old = self.best.get(chain)
        if old is not None and val <= old[0]:
            return
        self.best[chain] = (val, tuple(int(x) for x in thr))
        if chain in self.top or len(self.top) < self.keep:
            self.top[chain] = val
            return
        low = min(self.top, key=self.top.__getitem__)
        if val > self.top[low]:
            del self.top[low]
            self.top[chain] = val

    @property
    def kth(self) -> float | None:
        return min(self.top.values()) if len(self.top) == self.keep else None


def _count_chains(tables: _Tables, starts) -> tuple[int, int]:
    """Number of chains and of (chain, thresholds) configurations reachable."""
    chains = configs = 0

    def walk(v: int, used: int, depth: int):
        nonlocal chains, configs
        for u in tables.above.get(v, ()):
            if u == 0:
                chains += 1
                configs += tables.theta_max ** depth
            elif not used >> u & 1:
                walk(u, used | 1 << u, depth + 1)

    for s in starts:
        walk(s, 1 << s, 1)
    return chains, configs


class _Search:
    """Exact search over chains and thresholds (module docstring): breadth-first for the
    two- and three-model chains (a good incumbent early), then depth-first from every
    two-model suffix, most promising first, in batches of at most ``_MAX_BATCH`` states."""

    def __init__(self, pool: Pool, top: int, prune: bool, only_chain=None, seed=None):
        allowed = None
        if only_chain is not None:
            idx = [pool.names.index(nm) for nm in only_chain]
            allowed = set(zip(idx[:-1], idx[1:], strict=True))
        self.tables = tables = _Tables(pool, allowed)
        self.starts = list(range(1, tables.k)) if only_chain is None else [idx[-1]]
        self.prune = prune
        self.records = _Records(top + 1)
        self.cuts = _Cuts(tables)
        self.seed_tau = tables.t1[0] / seed if (prune and seed) else math.inf
        self.cuts.set_target_tau(self.seed_tau)
        self.t_target = tables.t1[0]
        self.th = tables.theta_max
        self.n_computed = self.n_pruned = self.n_scored = 0

    # -- bookkeeping ----------------------------------------------------------------
    def _refresh_cut(self) -> None:
        if not self.prune:
            return
        kth = self.records.kth
        c = self.seed_tau if kth is None or kth <= 0 else min(self.seed_tau, self.t_target / kth)
        if c < self.cuts.c:
            self.cuts.set_target_tau(c)

    def _limit(self, cut: float) -> float:
        return cut * (1.0 + PRUNE_MARGIN) if self.prune else math.inf

    def _row_chunks(self, n: int, w: int):
        per = max(1, min(CHUNK_ELEMENTS // (self.th * (self.th + w)) * 8,
                         _MAX_BATCH // self.th))
        for lo in range(0, n, per):
            yield lo, min(n, lo + per)

    # -- steps ----------------------------------------------------------------------
    def score(self, bt: _Batch) -> None:
        """Complete chains: the target on top of ``bt`` (two-model chains in full)."""
        v = bt.models[0]
        if (0, v) not in self.tables.pairs:
            return
        chain = (0, *bt.models)
        full = not self.prune or len(bt.models) == 1
        if full:
            alive = np.ones(bt.tau.size, dtype=bool)
        else:
            alive = bt.tau <= self._limit(self.tables.inverse(0, v, self.cuts.c))
        self.n_pruned += self.th * int(alive.size - alive.sum())
        if not alive.any():
            return
        p, c, thr = bt.p[alive], bt.c[alive], bt.thr[alive]
        for lo, hi in self._row_chunks(p.shape[0], p.shape[1]):
            tau, _, _ = _extend(self.tables, p[lo:hi], c[lo:hi], 0, v)
            self.n_scored += tau.size
            j = int(np.argmin(tau))
            r, t = divmod(j, self.th)
            self.records.update(chain, float(self.t_target / tau[r, t]),
                                (t + 1, *thr[lo + r]))
            self._refresh_cut()

    def children(self, bt: _Batch, u: int):
        """Batches of the states ``u`` on top of ``bt`` (all thresholds) that survive."""
        v, used = bt.models[0], bt.used
        new_used = used | 1 << u
        tables = self.tables
        ps, cs, taus, ts, count = [], [], [], [], 0
        for lo, hi in self._row_chunks(bt.p.shape[0], bt.p.shape[1]):
            cut = self.cuts.cut(u, new_used) if self.prune else math.inf
            alive = bt.tau[lo:hi] <= self._limit(tables.inverse(u, v, cut))
            self.n_pruned += self.th * int(alive.size - alive.sum())
            if not alive.any():
                continue
            p, c, thr = bt.p[lo:hi][alive], bt.c[lo:hi][alive], bt.thr[lo:hi][alive]
            tau, cost, f = _extend(tables, p, c, u, v)
            self.n_computed += tau.size
            rows, ti = np.nonzero(tau <= self._limit(cut))
            self.n_pruned += tau.size - rows.size
            if rows.size == 0:
                continue
            thetas = ti + 1
            if tables.truncate:
                lp = _truncate_emitted(tables, u, v, thetas)
            else:
                per = max(1, CHUNK_ELEMENTS // (self.th * (self.th + p.shape[1])))
                parts = [_emitted(tables, block_laws(p[r], f[r], thetas[a:a + per]), u, v)
                         for a in range(0, rows.size, per)
                         for r in (rows[a:a + per],)]
                wmax = max(x.shape[1] for x in parts)
                lp = np.concatenate([np.pad(x, ((0, 0), (0, wmax - x.shape[1]))) for x in parts])
            ps.append(lp)
            cs.append(cost[rows, ti])
            taus.append(tau[rows, ti])
            ts.append(np.column_stack([thetas, thr[rows]]))
            count += rows.size
            if count >= _MAX_BATCH:
                yield self._batch((u, *bt.models), ps, cs, taus, ts)
                ps, cs, taus, ts, count = [], [], [], [], 0
        if ps:
            yield self._batch((u, *bt.models), ps, cs, taus, ts)

    @staticmethod
    def _batch(models, ps, cs, taus, ts) -> _Batch:
        w = max(x.shape[1] for x in ps)
        pp = np.concatenate([np.pad(x, ((0, 0), (0, w - x.shape[1]))) for x in ps])
        return _Batch(models, pp, np.concatenate(cs), np.concatenate(taus), np.concatenate(ts))

    def verifiers(self, bt: _Batch) -> list[int]:
        used = bt.used
        return [u for u in self.tables.above.get(bt.models[0], ())
                if u != 0 and not used >> u & 1]

    def visit(self, bt: _Batch) -> None:
        """Depth-first: score ``bt``'s chain, then every longer suffix above it."""
        self.score(bt)
        for u in self.verifiers(bt):
            for child in self.children(bt, u):
                self.visit(child)

    def run(self):
        tables = self.tables
        level1 = []
        for m in self.starts:
            t = tables.t1[m]
            level1.append(_Batch((m,), np.array([[0.0, 1.0]]), np.array([t]), np.array([t]),
                                 np.zeros((1, 0), dtype=np.int64)))
        self.n_computed += len(level1)
        for bt in level1:
            self.score(bt)
        level2 = [ch for bt in level1 for u in self.verifiers(bt) for ch in self.children(bt, u)]
        for bt in level2:
            self.score(bt)

        def promise(bt: _Batch) -> float:  # best recorded speedup of this suffix's chain
            rec = self.records.best.get((0, *bt.models))
            return -(rec[0] if rec else 0.0)

        for bt in sorted(level2, key=promise):
            for u in self.verifiers(bt):
                for child in self.children(bt, u):
                    self.visit(child)
        chains_total, configs_total = _count_chains(tables, self.starts)
        stats = SearchStats(
            chains_total=chains_total,
            chains_scored=len(self.records.best),
            configs_total=configs_total,
            configs_scored=self.n_scored,
            states_computed=self.n_computed,
            states_pruned=self.n_pruned,
            pruning=self.prune,
        )
        return tables, self.records.best, stats


def search_pool(pool: Pool, top: int, prune: bool, only_chain: tuple[str, ...] | None = None,
            seed: float | None = None):
    """Exact search. Returns ``(tables, {chain index tuple: (speedup, thresholds)}, stats)``;
    every chain among the ``top + 1`` best has its exact optimum recorded. ``only_chain``
    restricts the search to that one chain (its optimal thresholds); ``seed`` is a speedup
    known to be achievable by ``top + 1`` distinct chains (or by the chain), a first
    incumbent."""
    return _Search(pool, top, prune, only_chain, seed).run()
