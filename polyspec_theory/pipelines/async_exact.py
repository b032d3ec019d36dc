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

from ..errors import PolyspecInputError
from .async_rules import (
    AsyncLevel,
    AsyncPair,
    as_async_cascade,
    async_rules,
    async_survival,
    async_tie_tolerance,
)

__all__ = ["AsyncExact", "ChainTooLarge", "async_lattice", "exact_async", "MAX_EXACT_STATES"]

MAX_EXACT_STATES = 100_000  # largest embedded chain exact_async builds by default
_MAX_PATH = 100_000  # deterministic events between two verify ends (a stall is refused)
_MAX_TICKS = 10**6  # longest action in lattice ticks (finer: costs fitted to many digits)


class ChainTooLarge(PolyspecInputError):
    """AS7's chain for these costs is larger than asked for (field ``models``): the rate is
    not computed exactly here (``predict`` falls back to the simulator)."""

    def __init__(self, message: str):
        super().__init__("models", message)


# status codes of a level
FREE, BUSY, BLOCKED = 0, 1, 2


def _fraction(x: float) -> Fraction:
    """The decimal a cost was written as (``0.3`` is ``3/10``, not the nearest double)."""
    return Fraction(repr(float(x)))


def _exact_cost(cost, over: Fraction, window: int):
    """``T(m + 1) + o`` for ``m = 0..window``, exactly, from the decimals of the curve as
    written: ``(first, step, head)``: the values are ``head`` (a table's entries) followed by
    ``first + step * k``, ``k = 0, 1, ...`` (the affine part)."""
    if cost.table is None:
        return _fraction(cost.base) + over, _fraction(cost.per_token), []
    t = [_fraction(x) + over for x in cost.table]
    slope = max(t[-1] - t[-2], Fraction(0)) if len(t) > 1 else Fraction(0)
    head = t[: min(len(t), window + 1)]
    return t[-1] + slope, slope, head


def async_lattice(cascade, rules=None):
    """The lattice of ``cascade``'s action durations: ``(tick, verify_ticks, draft_ticks)``
    with ``tick`` a :class:`~fractions.Fraction` (the largest that divides them all),
    ``verify_ticks[j][m]`` the ticks of a verify of ``m`` drafts by level ``j``
    (``T_j(m + 1) + o_j``, ``m = 0..window_j``) and ``draft_ticks`` the bottom model's step.
    Every cost is read as the decimal it was written as (``0.3`` is ``3/10``)."""
    cascade = as_async_cascade(cascade)
    rules = async_rules(cascade) if rules is None else rules
    parts = [_exact_cost(cascade.models[j].cost, _fraction(cascade.models[j].overhead),
                         r.window) for j, r in enumerate(rules)]
    c = _fraction(cascade.models[-1].cost.t1)
    # every duration is an integer combination of these (and each of them is a duration or
    # a difference of two): they have the same largest common divisor
    gens = [c]
    for (first, step, head), r in zip(parts, rules, strict=True):
        gens += head
        affine = r.window + 1 - len(head)  # values of the affine part used
        gens += [first] if affine >= 1 else []
        gens += [step] if affine >= 2 else []
    den = math.lcm(*(v.denominator for v in gens))
    g = math.gcd(*(v.numerator * (den // v.denominator) for v in gens))
    if g == 0:
        raise PolyspecInputError("models", "every action of the asynchronous pipeline costs 0")
    tick = Fraction(g, den)
    verify_ticks = []
    for (first, step, head), r in zip(parts, rules, strict=True):
        a, b = first / tick, step / tick
        row = [int(h / tick) for h in head]
        row += [int(a + b * k) for k in range(r.window + 1 - len(head))]
        verify_ticks.append(row)
    longest = max(max(max(row) for row in verify_ticks), int(c / tick))
    if longest > _MAX_TICKS:
        raise ChainTooLarge(f"the costs written need a lattice of {longest:.3g} ticks per "
                            f"action (at most {_MAX_TICKS:.3g}): write them with fewer "
                            "significant digits")
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


# per-transition counters: columns of an ``acc`` array (per-level blocks of ``n``)
_TIME, _TOKENS, _ROLLBACK = 0, 1, 2
_BLOCKS = ("starts", "checked", "busy", "emitted", "completed", "accepted", "produced")


def _col(name: str, n: int) -> int:
    return 3 + _BLOCKS.index(name) * n


class _Machine:
    """AS0's rules on arrays of states (rows), ``n`` levels, durations in ticks; ``tol``:
    AS0's tie tolerance in ticks."""

    def __init__(self, n, verify_ticks, draft_ticks, surv, rules: tuple[AsyncPair, ...],
                 tol: int = 0):
        self.n = n
        self.L = _Layout(n)
        self.wait = [r.wait for r in rules]
        self.window = [r.window for r in rules]
        big = np.iinfo(np.int64).max
        self.queue = [big if r.queue is None else r.queue for r in rules]
        self.vt = [np.asarray(v, dtype=np.int64) for v in verify_ticks]
        self.c = int(draft_ticks)
        self.surv = surv
        self.tol = int(tol)
        self.width = 3 + len(_BLOCKS) * n
        self.cols = {name: _col(name, n) for name in _BLOCKS}
        # the bottom's steps may be run in blocks (_deterministic): exact ties only, a step
        # that takes time and a queue that never stops the bottom
        self.jump = self.tol == 0 and self.c > 0 and rules[-1].queue is None
        # a lead past four windows: the drafter outruns its verifier, the chain is unbounded
        self.lead_limit = np.array([4 * (w + 1) for w in self.window])

    def settle(self, S, acc):
        """Syncs bottom-up, then every start the rules allow, top-down (in place; ``acc``
        gains the counters)."""
        n, L, cols = self.n, self.L, self.cols
        for j in range(n - 2, -1, -1):
            cond = (S[:, L.st[j]] == BLOCKED) & (S[:, L.st[j + 1]] == FREE)
            if not cond.any():
                continue
            m = S[:, L.m[j]]
            ok = cond & (S[:, L.kept[j]] == 1) & (S[:, L.lead[j + 1]] >= m + 1)
            back = cond & ~ok
            acc[:, cols["accepted"] + j + 1] += ok  # the bonus position kept
            S[ok, L.lead[j + 1]] -= m[ok] + 1
            if back.any():
                S[back, L.lead[j + 1]] = 0
                if j == 0:
                    acc[:, _ROLLBACK] += back
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
            if j < n - 1:
                go &= S[:, L.lead[j + 1]] >= self.wait[j]
            if not go.any():
                continue
            if j == n - 1:
                m = np.zeros(int(go.sum()), dtype=np.int64)
                dur = np.full(m.size, self.c, dtype=np.int64)
            else:
                m = np.minimum(S[go, L.lead[j + 1]], self.window[j])
                dur = self.vt[j][m]
            S[go, L.st[j]] = BUSY
            S[go, L.rem[j]] = dur
            S[go, L.stale[j]] = 0
            S[go, L.m[j]] = m
            acc[go, cols["starts"] + j] += 1
            acc[go, cols["checked"] + j] += m
            acc[go, cols["busy"] + j] += dur

    def next_event(self, S):
        """(level completing next, time to it, whether it draws an outcome, any busy). AS0's
        tie rule: of the actions ending within ``tol`` of the earliest, the highest level."""
        L = self.L
        busy = S[:, L.st] == BUSY
        rem = np.where(busy, S[:, L.rem], np.iinfo(np.int64).max)
        if self.tol:
            early = rem.min(axis=1, keepdims=True)
            k = np.argmax(rem - early <= self.tol, axis=1)
        else:
            k = np.argmin(rem, axis=1)  # the first index among the earliest
        rows = np.arange(S.shape[0])
        dt = rem[rows, k]
        random = (k < self.n - 1) & (S[rows, L.stale[k]] == 0)
        return k, dt, random, busy.any(axis=1)

    def advance(self, S, k, dt):
        """Move the clock by ``dt`` and free level ``k`` (in place)."""
        L = self.L
        rows = np.arange(S.shape[0])
        busy = S[:, L.st] == BUSY
        rem = S[:, L.rem] - np.where(busy, dt[:, None], 0)
        S[:, L.rem] = np.maximum(rem, 0) if self.tol else rem
        S[rows, L.st[k]] = FREE
        S[rows, L.rem[k]] = 0


def _deterministic(mach: _Machine, S, acc):
    """Run the deterministic events (drafter forwards, discarded actions ending) of every row
    until its next event is a verify's end (in place)."""
    L, n = mach.L, mach.n
    produced = mach.cols["produced"] + n - 1
    todo = np.arange(S.shape[0])
    sub, sacc = S, acc
    for _ in range(_MAX_PATH):
        k, dt, random, anybusy = mach.next_event(sub)
        if not anybusy.all():
            raise PolyspecInputError("config", "the asynchronous pipeline stalls (no action can "
                                     "start): check thresholds and queues")
        if random.all():
            S[todo] = sub
            acc[todo] = sacc
            return
        if random.any():  # rows whose next event is a verify's end are done
            S[todo[random]] = sub[random]
            acc[todo[random]] = sacc[random]
            det = ~random
            todo, sub, sacc, k, dt = todo[det], sub[det], sacc[det], k[det], dt[det]
        rows = np.arange(todo.size)
        fresh = (sub[rows, L.stale[k]] == 0) & (k == n - 1)  # a bottom forward that counts
        steps = fresh.astype(np.int64)
        if mach.jump:
            # while the level above the bottom is in a forward nothing reads the bottom's
            # steps: run every step that ends before the next other event at once
            run = fresh & (sub[:, L.st[n - 2]] == BUSY)
            if run.any():
                rem = np.where(sub[:, L.st] == BUSY, sub[:, L.rem], np.iinfo(np.int64).max)
                other = rem[:, : n - 1].min(axis=1)
                jumps = -((dt - other) // mach.c)  # steps ending strictly before `other`
                steps = np.where(run, jumps, steps)
                dt = np.where(run, dt + (jumps - 1) * mach.c, dt)
                sacc[:, mach.cols["starts"] + n - 1] += np.where(run, jumps - 1, 0)
                sacc[:, mach.cols["busy"] + n - 1] += np.where(run, (jumps - 1) * mach.c, 0)
        mach.advance(sub, k, dt)
        sub[rows, L.stale[k]] = 0
        sub[:, L.lead[n - 1]] += steps
        sacc[:, _TIME] += dt
        sacc[:, produced] += steps
        mach.settle(sub, sacc)
    raise PolyspecInputError("config", "the asynchronous pipeline makes more than "
                             f"{_MAX_PATH} drafter forwards between two verifies: bound the "
                             "drafter's queue")


def _outcomes(mach: _Machine, S):
    """Expand each row (its next event a verify's end) into the outcomes of ``R``: rows of the
    states right after (settled), the source row, the probability, and the counters (their
    conditional means). A middle level's ``R = 0..m`` change its lead, so each is its own
    outcome; the target's ``R = 0..m`` all lead to a rollback and differ only in the tokens
    emitted, so they are one outcome (not kept) with the mean count, the other kept."""
    L, n, cols = mach.L, mach.n, mach.cols
    k, dt, _, _ = mach.next_event(S)
    rows = np.arange(S.shape[0])
    m = S[rows, L.m[k]]
    counts = np.where(k == 0, 2, m + 2)
    src = np.repeat(rows, counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    r = np.arange(src.size) - first  # target: 0 = not kept, 1 = kept
    kk, mm = k[src], m[src]
    top = kk == 0
    r = np.where(top, np.where(r == 1, mm + 1, 0), r)  # R >= m + 1 is the kept outcome
    p = np.empty(src.size)
    emitted = (np.minimum(r, mm) + 1).astype(np.float64)
    accepted = np.minimum(r, mm).astype(np.float64)
    for j in range(n - 1):
        sel = kk == j
        if not sel.any():
            continue
        s = mach.surv[j]
        rr, mj = r[sel], mm[sel]
        kept = rr >= mj + 1
        if j == 0:
            cum = np.cumsum(s)  # cum[m] = S_0 + ... + S_m
            tail = s[mj + 1]
            lost = 1.0 - tail
            safe = np.where(lost > 0, lost, 1.0)
            # E[min(R, m) + 1 | R <= m] and E[R | R <= m]
            e_emit = (cum[mj] - (mj + 1) * tail) / safe
            e_acc = (cum[mj] - s[0] - mj * tail) / safe
            p[sel] = np.where(kept, tail, lost)
            emitted[sel] = np.where(kept, mj + 1, e_emit)
            accepted[sel] = np.where(kept, mj, e_acc)
        else:
            p[sel] = np.where(kept, s[mj + 1], s[rr] - s[np.minimum(rr + 1, s.size - 1)])
    keep = p > 0
    src, r, kk, mm, p = src[keep], r[keep], kk[keep], mm[keep], p[keep]
    emitted, accepted, top = emitted[keep], accepted[keep], top[keep]
    T = S[src]
    rows = np.arange(src.size)
    mach.advance(T, kk, dt[src])
    T[rows, L.st[kk]] = BLOCKED
    T[rows, L.kept[kk]] = r >= mm + 1
    mid = ~top
    T[rows[mid], L.lead[kk[mid]]] += emitted[mid].astype(np.int64)
    acc = np.zeros((src.size, mach.width))
    acc[:, _TIME] = dt[src]
    acc[:, _TOKENS] = np.where(top, emitted, 0.0)
    acc[rows, cols["emitted"] + kk] = emitted
    acc[rows, cols["completed"] + kk] = 1.0
    acc[rows[mid], cols["produced"] + kk[mid]] = emitted[mid]
    # drafts of level k + 1 this verify accepted (a kept bonus is counted at the sync)
    acc[rows, cols["accepted"] + kk + 1] = accepted
    mach.settle(T, acc)
    return T, src, p, acc


def _void(S) -> np.ndarray:
    S = np.ascontiguousarray(S)
    return S.view(np.dtype((np.void, S.dtype.itemsize * S.shape[1]))).ravel()


def _keys(S) -> list:
    return _void(S).tolist()


def _closed_class(P) -> np.ndarray:
    """States of the chain's closed communicating class (every state is reached from the
    start; more than one closed class is refused)."""
    import scipy.sparse.csgraph as csgraph  # scipy loads where AS7 runs

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
    """Stationary law of an irreducible sparse stochastic matrix. Large chains: with ``r`` a
    frequent state (a few lazy power steps find one), ``pi / pi(r)`` off ``r`` is the expected
    number of visits per visit of ``r``, the series ``sum_k (Q^T)^k b`` (``Q``: ``P`` without
    ``r``, ``b``: ``P(r, .)``), summed until its geometric tail is below 1e-14 of the sum; a
    sparse LU where it converges slowly. Small chains: an LU of ``(I - P^T)`` with one
    equation replaced by the normalisation."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    N = P.shape[0]
    if N == 1:
        return np.ones(1)
    PT = P.T.tocsr()
    if N <= 400:
        A = (PT - sp.identity(N, format="csr")).toarray()
        A[-1, :] = 1.0
        b = np.zeros(N)
        b[-1] = 1.0
        pi = np.linalg.solve(A, b)
    else:
        v = np.full(N, 1.0 / N)
        for _ in range(30):
            v = 0.5 * (v + PT @ v)
        r = int(np.argmax(v))
        keep = np.ones(N, dtype=bool)
        keep[r] = False
        QT = PT[keep][:, keep].tocsr()
        b = PT[keep][:, [r]].toarray().ravel()
        x = _series(QT, b)
        if x is None:
            A = (sp.identity(N - 1, format="csc") - QT.tocsc())
            x = spla.spsolve(A, b, permc_spec="MMD_AT_PLUS_A")
        pi = np.empty(N)
        pi[keep] = x
        pi[r] = 1.0
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


def _series(QT, b, iters: int = 3000, rtol: float = 1e-14):
    """``sum_k QT^k b`` for a substochastic ``QT`` (``None`` if it has not converged after
    ``iters`` terms): stops once the next term, times ``rho / (1 - rho)`` with ``rho`` the
    ratio of the last two terms' sizes, is below ``rtol`` of the sum."""
    x = b.copy()
    term = b
    last = float(np.abs(b).sum())
    for _ in range(iters):
        term = QT @ term
        size = float(np.abs(term).sum())
        x += term
        if size == 0.0:
            return x
        rho = size / last if last > 0 else 1.0
        last = size
        if rho < 1.0 and size * rho / (1.0 - rho) <= rtol * float(np.abs(x).sum()):
            return x
    return None


def exact_async(cascade, max_states: int = MAX_EXACT_STATES) -> AsyncExact:
    """AS7: exact time per token of ``cascade`` run as AS0's asynchronous pipeline, any
    number of levels (:func:`async_lattice`: the costs as written). Refuses (naming
    ``models``) a chain of more than ``max_states`` states."""
    cascade = as_async_cascade(cascade)
    rules = async_rules(cascade)
    n = cascade.n
    tick, vt, c = async_lattice(cascade, rules)
    for j, row in enumerate(vt):
        if min(row) <= 0:
            raise PolyspecInputError(f"models[{j}].cost", "every verify must take time in "
                                     "the asynchronous pipeline")
    if c == 0 and rules[-1].queue is None:
        raise PolyspecInputError("models[-1].cost", "a drafter of cost 0 with an unbounded "
                                 "queue drafts forever: give \"queue\" a bound")
    surv = [np.asarray(async_survival(cascade.laws[j], r.window + 2, f"acceptance[{j}]"))
            for j, r in enumerate(rules)]
    tol = int(Fraction(async_tie_tolerance(cascade)) / tick)
    mach = _Machine(n, vt, c, surv, rules, tol)
    trans, total = _explore(mach, max_states, tick)
    return _solve(cascade, trans, total, tick)


def _explore(mach: _Machine, max_states: int, tick):
    """Every state of the embedded chain reached from the empty pipeline, breadth first.
    Returns the transitions ``(source ids, destination ids, probabilities, counters)`` in
    blocks, and the number of states. A state right after an outcome is settled and run to the
    next verify's end once (``memo``); its many sources share that run."""
    S0 = np.zeros((1, mach.L.width), dtype=np.int64)
    acc0 = np.zeros((1, mach.width))
    mach.settle(S0, acc0)
    _deterministic(mach, S0, acc0)
    index = {key: 0 for key in _keys(S0)}
    memo: dict = {}  # state after an outcome -> row of (destination id, path counters)
    memo_dst = np.zeros(64, dtype=np.int64)
    memo_acc = np.zeros((64, mach.width))
    frontier, front_ids = S0, np.zeros(1, dtype=np.int64)
    trans = []
    while frontier.shape[0]:
        T, src, p, acc = _outcomes(mach, frontier)
        uniq, first, inv = np.unique(_void(T), return_index=True, return_inverse=True)
        ukeys = uniq.tolist()
        rows = np.fromiter((memo.get(key, -1) for key in ukeys), dtype=np.int64,
                           count=len(ukeys))
        todo = np.flatnonzero(rows < 0)
        new_ids, new_rows = [], []
        if todo.size:
            U = T[first[todo]]
            uacc = np.zeros((todo.size, mach.width))
            _deterministic(mach, U, uacc)
            before = len(index)
            ids = np.fromiter((index.setdefault(key, len(index)) for key in _keys(U)),
                              dtype=np.int64, count=todo.size)
            fresh = np.flatnonzero(ids >= before)
            fresh = fresh[np.unique(ids[fresh], return_index=True)[1]]
            new_ids, new_rows = ids[fresh], U[fresh]
            base = len(memo)
            need = base + todo.size
            if need > memo_dst.size:
                grow = max(need, 2 * memo_dst.size)
                memo_dst = np.resize(memo_dst, grow)
                memo_acc = np.concatenate([memo_acc, np.zeros((grow - memo_acc.shape[0],
                                                               mach.width))])
            memo_dst[base:need] = ids
            memo_acc[base:need] = uacc
            for i, key in enumerate(todo.tolist()):
                memo[ukeys[key]] = base + i
            rows[todo] = np.arange(base, need)
        if len(index) > max_states:
            raise ChainTooLarge(f"AS7's chain for these costs has more than {max_states} "
                                f"states (lattice tick {tick}): round the costs to fewer "
                                "decimals")
        if len(new_ids) and np.any(new_rows[:, mach.L.lead[1:]] > mach.lead_limit):
            raise ChainTooLarge("a drafter runs more than four windows ahead of its "
                                "verifier (its lead grows without bound): bound its queue")
        r = rows[inv.ravel()]
        trans.append((front_ids[src], memo_dst[r], p, acc + memo_acc[r]))
        frontier = new_rows if len(new_ids) else np.zeros((0, mach.L.width), dtype=np.int64)
        front_ids = np.asarray(new_ids, dtype=np.int64)
    return trans, len(index)


def _solve(cascade, trans, total: int, tick: Fraction) -> AsyncExact:
    """Renewal-reward over the stationary law of the chain's closed class."""
    import scipy.sparse as sp

    n = cascade.n
    src = np.concatenate([t[0] for t in trans])
    dst = np.concatenate([t[1] for t in trans])
    p = np.concatenate([t[2] for t in trans])
    acc = np.concatenate([t[3] for t in trans])
    P = sp.csr_matrix((p, (src, dst)), shape=(total, total))
    cls = _closed_class(P)
    remap = -np.ones(total, dtype=np.int64)
    remap[cls] = np.arange(cls.size)
    sel = remap[src] >= 0
    Pc = sp.csr_matrix((p[sel], (remap[src[sel]], remap[dst[sel]])), shape=(cls.size,) * 2)
    pi = _stationary(Pc)
    w = pi[remap[src[sel]]] * p[sel]  # stationary weight of each transition
    mean = w @ acc[sel]
    time_ticks, tokens = float(mean[_TIME]), float(mean[_TOKENS])
    if not tokens > 0:
        raise PolyspecInputError("config", "the asynchronous pipeline emits no tokens")
    tpt = float(tick) * time_ticks / tokens
    t_ar = cascade.models[0].cost.t1
    blocks = {name: mean[_col(name, n): _col(name, n) + n] for name in _BLOCKS}
    levels = _levels(cascade, blocks, time_ticks, tokens)
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
        wasted = None if j == 0 else (max(0.0, 1.0 - float(mean["accepted"][j]) / produced)
                                      if produced > 0 else 0.0)  # as AS1: nothing made
        out.append(AsyncLevel(cascade.models[j].name, busy, 1.0 - busy, checked, emitted,
                              per_verify, starts / tokens, wasted))
    return tuple(out)
