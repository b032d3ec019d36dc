"""AS7: the exact long-run rate of an asynchronous pipeline of any depth (docs/theory.md
Part VI-AS).

AS0's process has no memory beyond what a state holds: per level its status (free, busy,
busy on a discarded action, blocked at its sync), the time left in its action, the drafts it
checks and whether the verify it waits to sync kept its bonus, and per drafter level the
tokens it is ahead of its verifier. With every action's duration a whole number of ticks of
one lattice (the costs as written: ``0.3`` is ``3/10``) the reachable states are finitely
many. Randomness enters only when a verify ends (its ``R``), so the chain is embedded at those
instants: from such a state each outcome leads, through the deterministic events that follow
(drafter forwards, discarded actions ending), to the next verify end. Renewal-reward over its
stationary law gives the exact time per token

    tau = E_pi[time of a transition] / E_pi[tokens the target emits in it].

Two levels: equal to AS1 (:func:`polyspec_theory.pipelines.asynchronous.predict_async`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

from ..errors import PolyspecInputError
from .asynchronous import (
    AsyncLevel,
    AsyncPair,
    _as_chain,
    _survival,
    async_rules,
    async_tie_tolerance,
)

__all__ = ["AsyncExact", "async_lattice", "exact_async", "MAX_EXACT_STATES"]

MAX_EXACT_STATES = 400_000  # largest embedded chain exact_async builds
_MAX_PATH = 100_000  # deterministic events between two verify ends (a stall is refused)

# status codes of a level
FREE, BUSY, BLOCKED = 0, 1, 2


def _fraction(x: float) -> Fraction:
    """The decimal a cost was written as (``0.3`` is ``3/10``, not the nearest double)."""
    return Fraction(repr(float(x)))


def async_lattice(cascade, rules=None):
    """The lattice of ``cascade``'s action durations: ``(tick, verify_ticks, draft_ticks)``
    with ``tick`` a :class:`~fractions.Fraction`, ``verify_ticks[j][m]`` the ticks of a verify
    of ``m`` drafts by level ``j`` (``T_j(m + 1) + o_j``, ``m = 0..window_j``) and
    ``draft_ticks`` the bottom model's step. Every cost is read as the decimal it was written
    as. ``None`` when the tick is finer than AS0's tie tolerance (actions closer than it end
    at the same instant there, so the lattice would not describe AS0's process)."""
    cascade = _as_chain(cascade)
    rules = async_rules(cascade) if rules is None else rules
    fr = []
    for j, r in enumerate(rules):
        m = cascade.models[j]
        over = _fraction(m.overhead)
        if m.cost.table is None:
            base, slope = _fraction(m.cost.base), _fraction(m.cost.per_token)
            fr.append([base + slope * k + over for k in range(r.window + 1)])
        else:
            fr.append([_fraction(m.cost(k + 1)) + over for k in range(r.window + 1)])
    c = _fraction(cascade.models[-1].cost.t1)
    values = [v for row in fr for v in row] + [c]
    den = math.lcm(*(v.denominator for v in values))
    g = math.gcd(*(v.numerator * (den // v.denominator) for v in values))
    if g == 0:  # every duration 0: refused earlier (a verify must take time)
        return None  # pragma: no cover
    tick = Fraction(g, den)
    if float(tick) < 2 * async_tie_tolerance(cascade):
        return None
    verify_ticks = [[int(v / tick) for v in row] for row in fr]
    return tick, verify_ticks, int(c / tick)


@dataclass(frozen=True)
class AsyncExact:
    """AS7's exact rate: ``time_per_token`` (the cascade's time unit), ``speedup`` over the
    target alone, the per-model accounting (:class:`AsyncLevel`, target first), the lattice
    tick and the size of the embedded chain (``states``: all reached, ``recurrent``: its
    closed class)."""

    speedup: float
    time_per_token: float
    levels: tuple[AsyncLevel, ...]
    tick: Fraction
    states: int
    recurrent: int

    def to_dict(self) -> dict:
        return {"speedup": self.speedup, "time_per_token": self.time_per_token,
                "levels": [lv.to_dict() for lv in self.levels], "tick": str(self.tick),
                "states": self.states, "recurrent": self.recurrent}


class _Layout:
    """Columns of a state row: per level ``status, rem, stale, m, kept``; per drafter level
    ``lead`` (tokens ahead of its verifier)."""

    def __init__(self, n: int):
        self.n = n
        self.st = np.arange(n) * 5
        self.rem = self.st + 1
        self.stale = self.st + 2
        self.m = self.st + 3
        self.kept = self.st + 4
        self.lead = 5 * n + np.arange(n) - 1  # lead[0] unused (-1 is never read)
        self.width = 6 * n - 1


class _Machine:
    """AS0's rules on arrays of states (rows), ``n`` levels, durations in ticks."""

    def __init__(self, n, verify_ticks, draft_ticks, surv, rules: tuple[AsyncPair, ...]):
        self.n = n
        self.L = _Layout(n)
        self.wait = [r.wait for r in rules]
        self.window = [r.window for r in rules]
        big = np.iinfo(np.int64).max
        self.queue = [big if r.queue is None else r.queue for r in rules]
        self.vt = [np.asarray(v, dtype=np.int64) for v in verify_ticks]
        self.c = int(draft_ticks)
        self.surv = surv

    def settle(self, S, acc):
        """Syncs bottom-up, then every start the rules allow, top-down (in place).
        ``acc``: per-row counters (updated in place)."""
        n, L = self.n, self.L
        for j in range(n - 2, -1, -1):
            cond = (S[:, L.st[j]] == BLOCKED) & (S[:, L.st[j + 1]] == FREE)
            if not cond.any():
                continue
            m = S[:, L.m[j]]
            ok = cond & (S[:, L.kept[j]] == 1) & (S[:, L.lead[j + 1]] >= m + 1)
            back = cond & ~ok
            acc["accepted"][:, j + 1] += ok  # the bonus position kept
            S[:, L.lead[j + 1]] -= np.where(ok, m + 1, 0)
            if back.any():
                S[back, L.lead[j + 1]] = 0
                if j == 0:
                    acc["rollbacks"] += back
                for i in range(j + 2, n):
                    S[back, L.lead[i]] = 0
                    busy = back & (S[:, L.st[i]] == BUSY)
                    S[busy, L.stale[i]] = 1
                    S[busy, L.m[i]] = 0
                    blk = back & (S[:, L.st[i]] == BLOCKED)
                    S[blk, L.st[i]] = FREE
                    S[blk, L.m[i]] = 0
                    S[blk, L.kept[i]] = 0
            S[cond, L.st[j]] = FREE
            S[cond, L.m[j]] = 0
            S[cond, L.kept[j]] = 0
        for j in range(n):
            go = S[:, L.st[j]] == FREE
            if j > 0:
                go &= S[:, L.lead[j]] < self.queue[j - 1]
            if j == n - 1:
                dur = np.full(S.shape[0], self.c, dtype=np.int64)
                m = np.zeros(S.shape[0], dtype=np.int64)
            else:
                go &= S[:, L.lead[j + 1]] >= self.wait[j]
                m = np.minimum(S[:, L.lead[j + 1]], self.window[j])
                dur = self.vt[j][np.where(go, m, 0)]
            if not go.any():
                continue
            S[go, L.st[j]] = BUSY
            S[go, L.rem[j]] = dur[go]
            S[go, L.stale[j]] = 0
            S[go, L.m[j]] = m[go]
            acc["starts"][:, j] += go
            acc["checked"][:, j] += np.where(go, m, 0)
            acc["busy"][:, j] += np.where(go, dur, 0)

    def next_event(self, S):
        """(level completing next, its time, whether it draws an outcome)."""
        L = self.L
        busy = S[:, L.st] == BUSY
        rem = np.where(busy, S[:, L.rem], np.iinfo(np.int64).max)
        k = np.argmin(rem, axis=1)  # the lowest index among the earliest: AS0's tie rule
        rows = np.arange(S.shape[0])
        dt = rem[rows, k]
        random = (k < self.n - 1) & (S[rows, L.stale[k]] == 0)
        return k, dt, random, busy.any(axis=1)

    def advance(self, S, k, dt):
        """Move the clock by ``dt`` and free level ``k`` (in place)."""
        L = self.L
        rows = np.arange(S.shape[0])
        busy = S[:, L.st] == BUSY
        S[:, L.rem] -= np.where(busy, dt[:, None], 0)
        S[rows, L.st[k]] = FREE
        S[rows, L.rem[k]] = 0


def _new_acc(rows: int, n: int) -> dict:
    z = lambda: np.zeros((rows, n), dtype=np.int64)  # noqa: E731
    return {"time": np.zeros(rows, dtype=np.int64), "tokens": np.zeros(rows, dtype=np.int64),
            "starts": z(), "checked": z(), "busy": z(), "emitted": z(), "completed": z(),
            "accepted": z(), "produced": z(),
            "rollbacks": np.zeros(rows, dtype=np.int64)}


def _deterministic(mach: _Machine, S, acc):
    """Run the deterministic events (drafter forwards, discarded actions ending) of every row
    until its next event is a verify's end (in place)."""
    L, n = mach.L, mach.n
    todo = np.arange(S.shape[0])
    for _ in range(_MAX_PATH):
        if todo.size == 0:
            return
        sub = S[todo]
        k, dt, random, anybusy = mach.next_event(sub)
        if not anybusy.all():
            raise PolyspecInputError("config", "the asynchronous pipeline stalls (no action can "
                                     "start): check thresholds and queues")
        det = ~random
        todo, sub, k, dt = todo[det], sub[det], k[det], dt[det]
        if todo.size == 0:
            return
        rows = np.arange(todo.size)
        was_stale = sub[rows, L.stale[k]] == 1
        mach.advance(sub, k, dt)
        sub[rows, L.stale[k]] = 0
        fresh = ~was_stale  # a bottom forward that counts
        bottom = k == n - 1
        sub[fresh & bottom, L.lead[n - 1]] += 1
        sub_acc = {key: v[todo] for key, v in acc.items()}
        sub_acc["time"] += dt
        sub_acc["produced"][:, n - 1] += fresh & bottom
        mach.settle(sub, sub_acc)
        S[todo] = sub
        for key, v in sub_acc.items():
            acc[key][todo] = v
    raise PolyspecInputError("config", "the asynchronous pipeline makes more than "
                             f"{_MAX_PATH} drafter forwards between two verifies: bound the "
                             "drafter's queue")


def _outcomes(mach: _Machine, S):
    """Expand each row (its next event a verify's end) into the outcomes of ``R``: rows of the
    states right after (settled), the completing level's probability, and the counters."""
    L, n = mach.L, mach.n
    k, dt, _, _ = mach.next_event(S)
    rows = np.arange(S.shape[0])
    m = S[rows, L.m[k]]
    counts = m + 2  # R = 0..m (not kept), R >= m + 1 (all accepted, bonus kept)
    src = np.repeat(rows, counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    r = np.arange(src.size) - first
    kk, mm = k[src], m[src]
    p = np.empty(src.size)
    for j in range(n - 1):
        sel = kk == j
        if sel.any():
            s = mach.surv[j]
            rr, mj = r[sel], mm[sel]
            p[sel] = np.where(rr <= mj, s[rr] - s[np.minimum(rr + 1, s.size - 1)],
                              s[np.minimum(mj + 1, s.size - 1)])
    keep = p > 0
    src, r, kk, mm, p = src[keep], r[keep], kk[keep], mm[keep], p[keep]
    T = S[src].copy()
    rows = np.arange(src.size)
    mach.advance(T, kk, dt[src])
    emitted = np.minimum(r, mm) + 1
    T[rows, L.st[kk]] = BLOCKED
    T[rows, L.kept[kk]] = (r >= mm + 1).astype(np.int64)
    top = kk == 0
    mid = ~top
    T[rows[mid], L.lead[kk[mid]]] += emitted[mid]
    acc = _new_acc(src.size, n)
    acc["time"] += dt[src]
    acc["tokens"] += np.where(top, emitted, 0)
    acc["emitted"][rows, kk] += emitted
    acc["completed"][rows, kk] += 1
    acc["produced"][rows[mid], kk[mid]] += emitted[mid]
    # drafts of level k + 1 this verify accepted (a kept bonus is counted at the sync)
    acc["accepted"][rows, kk + 1] += np.minimum(r, mm)
    mach.settle(T, acc)
    return T, src, p, acc


def _keys(S) -> list:
    S = np.ascontiguousarray(S)
    return S.view(np.dtype((np.void, S.dtype.itemsize * S.shape[1]))).ravel().tolist()


def _closed_class(P) -> np.ndarray:
    """States of the chain's closed communicating class (every state is reached from the
    start; more than one closed class is refused)."""
    ncomp, lab = csgraph.connected_components(P, directed=True, connection="strong")
    # a class is closed iff no transition leaves it
    coo = P.tocoo()
    leaves = np.zeros(ncomp, dtype=bool)
    out = lab[coo.row] != lab[coo.col]
    leaves[lab[coo.row[out]]] = True
    closed = np.flatnonzero(~leaves)
    if closed.size != 1:
        raise PolyspecInputError("acceptance", "the asynchronous pipeline's long-run rate "
                                 "depends on chance at the start (the chain has "
                                 f"{closed.size} closed classes): a law with some "
                                 "acceptance probability strictly between 0 and 1 avoids it")
    return np.flatnonzero(lab == closed[0])


def _stationary(P) -> np.ndarray:
    """Stationary law of an irreducible sparse stochastic matrix."""
    N = P.shape[0]
    if N == 1:
        return np.ones(1)
    A = (P.T - sp.identity(N, format="csr")).tolil()
    A[N - 1, :] = np.ones(N)
    b = np.zeros(N)
    b[-1] = 1.0
    pi = spla.spsolve(A.tocsc(), b)
    pi = np.clip(np.asarray(pi, dtype=np.float64), 0.0, None)
    return pi / pi.sum()


def exact_async(cascade, max_states: int = MAX_EXACT_STATES) -> AsyncExact:
    """AS7: exact time per token of ``cascade`` run as AS0's asynchronous pipeline, any
    number of levels, costs on a lattice (:func:`async_lattice`). Refuses (naming
    ``models``) costs off a lattice and chains of more than ``max_states`` states."""
    cascade = _as_chain(cascade)
    rules = async_rules(cascade)
    n = cascade.n
    lat = async_lattice(cascade, rules)
    if lat is None:
        raise PolyspecInputError("models", "the costs have no common lattice coarser than "
                                 "AS0's tie tolerance: AS7 needs costs written with few "
                                 "decimals")
    tick, vt, c = lat
    for j, row in enumerate(vt):
        if min(row) <= 0:
            raise PolyspecInputError(f"models[{j}].cost", "every verify must take time in "
                                     "the asynchronous pipeline")
    surv = [np.asarray(_survival(cascade.laws[j], r.window + 2, f"acceptance[{j}]"))
            for j, r in enumerate(rules)]
    if c == 0 and rules[-1].queue is None:
        raise PolyspecInputError("models[-1].cost", "a drafter of cost 0 with an unbounded "
                                 "queue drafts forever: give \"queue\" a bound")
    mach = _Machine(n, vt, c, surv, rules)
    S0 = np.zeros((1, mach.L.width), dtype=np.int64)
    acc0 = _new_acc(1, n)
    mach.settle(S0, acc0)
    _deterministic(mach, S0, acc0)
    index = {key: 0 for key in _keys(S0)}
    frontier = S0
    front_ids = np.zeros(1, dtype=np.int64)
    trans = []  # (src ids, dst ids, p, acc)
    total = 1
    while frontier.shape[0]:
        T, src, p, acc = _outcomes(mach, frontier)
        _deterministic(mach, T, acc)
        keys = _keys(T)
        dst = np.empty(len(keys), dtype=np.int64)
        new_rows = []
        for i, key in enumerate(keys):
            j = index.get(key)
            if j is None:
                j = total
                index[key] = j
                total += 1
                new_rows.append(i)
            dst[i] = j
        if total > max_states:
            raise PolyspecInputError("models", f"AS7's chain for these costs has more than "
                                     f"{max_states} states (lattice tick {tick}): round the "
                                     "costs to fewer decimals")
        trans.append((front_ids[src], dst, p, acc))
        frontier = T[new_rows]
        front_ids = dst[new_rows] if new_rows else np.zeros(0, dtype=np.int64)
    src = np.concatenate([t[0] for t in trans])
    dst = np.concatenate([t[1] for t in trans])
    p = np.concatenate([t[2] for t in trans])
    acc = {key: np.concatenate([t[3][key] for t in trans]) for key in trans[0][3]}
    P = sp.csr_matrix((p, (src, dst)), shape=(total, total))
    cls = _closed_class(P)
    inside = np.zeros(total, dtype=bool)
    inside[cls] = True
    remap = -np.ones(total, dtype=np.int64)
    remap[cls] = np.arange(cls.size)
    sel = inside[src]
    Pc = sp.csr_matrix((p[sel], (remap[src[sel]], remap[dst[sel]])), shape=(cls.size,) * 2)
    pi = _stationary(Pc)
    w = pi[remap[src[sel]]] * p[sel]  # stationary weight of each transition

    def mean(key):
        v = acc[key][sel]
        return (w[:, None] * v).sum(axis=0) if v.ndim == 2 else float(w @ v)

    time_ticks = mean("time")
    tokens = mean("tokens")
    if not tokens > 0:
        raise PolyspecInputError("config", "the asynchronous pipeline emits no tokens")
    tpt = float(tick) * time_ticks / tokens
    t_ar = cascade.models[0].cost.t1
    levels = _levels(cascade, {k: mean(k) for k in acc}, time_ticks, tokens)
    return AsyncExact(t_ar / tpt, tpt, levels, tick, total, int(cls.size))


def _levels(cascade, mean, time_ticks, tokens) -> tuple[AsyncLevel, ...]:
    """Per-model accounting from the stationary means of the counters (per transition)."""
    n = cascade.n
    out = []
    for j in range(n):
        busy = min(1.0, float(mean["busy"][j]) / time_ticks) if time_ticks > 0 else 0.0
        starts = float(mean["starts"][j])
        if j < n - 1:
            done = float(mean["completed"][j])
            checked = float(mean["checked"][j]) / starts if starts > 0 else None
            emitted = float(mean["emitted"][j]) / done if done > 0 else None
            per_verify = starts / tokens
        else:
            checked = emitted = per_verify = None
        produced = float(mean["produced"][j])
        wasted = (max(0.0, 1.0 - float(mean["accepted"][j]) / produced)
                  if j > 0 and produced > 0 else None)
        out.append(AsyncLevel(cascade.models[j].name, busy, 1.0 - busy, checked, emitted,
                              per_verify, starts / tokens, wasted))
    return tuple(out)
