"""AS0–AS4: asynchronous pipelined cascades (docs/theory.md Part VI-AS).

Every model runs in its own process (PipeSpec's ``AsyncChainSpeculativeDecoder``). The bottom
drafter ``M_n`` drafts one token per forward (``c = T_n(1)``) without pause, unless it is
``queue`` drafts past its verifier's prefix. A verifier ``M_i`` starts a verify once ``wait``
drafts are ready past its prefix, checks ``m = min(ready, window)`` of them in one forward
(``T_i(m + 1) + o_i``), then syncs with its drafter at the drafter's next step boundary (at
once if the drafter is idle): on a rejection, or when the drafter's next draft disagrees with
the emitted bonus token, the drafter rolls back to the verifier's sequence. Config threshold
``theta >= 1`` means ``wait = window = theta`` (PipeSpec lookahead ``k = theta + 1``: the
accepted count per verify is capped at ``k``); ``theta = 0`` means PipeSpec lookahead 0: no
wait, at most :data:`READY_WINDOW` drafts per verify (``max_verify_tokens = 100`` in
``decoding.py``).

Two levels: the drafts ready at a verify start, ``D``, form a Markov chain (the drafter is at a
step boundary or idle at every verify start), and renewal-reward gives the exact time per token
``sum pi(D) E[cycle | D] / sum pi(D) E[L | D]``. ``n >= 3``: an exact bound pair
(:func:`async_bounds`); the simulator (``simulators/asynchronous.py``) gives the value.
Assumes acceptance independent across verifies, the law's positions counted from the first
draft a verify checks (as in P1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.config import Cascade, check_async_cascade
from ..errors import PolyspecInputError

__all__ = [
    "READY_WINDOW",
    "AsyncPair",
    "AsyncLevel",
    "AsyncPrediction",
    "async_rules",
    "async_bounds",
    "check_async_cascade",
    "predict_async",
    "sync_ratio_bounds",
]

MAX_STATES = 4_000  # largest Markov chain AS1 builds
READY_WINDOW = 99  # decoding.py: verify input = last verified token + up to 99 drafts


@dataclass(frozen=True)
class AsyncPair:
    """Rules of one (verifier, drafter) pair: start a verify once ``wait`` drafts are ready,
    check at most ``window`` of them; the drafter runs at most ``queue`` drafts past the
    verifier's prefix (``None``: unbounded, as in PipeSpec)."""

    wait: int
    window: int
    queue: int | None

    def to_dict(self) -> dict:
        return {"wait": self.wait, "window": self.window, "queue": self.queue}


def _survival(law, kmax: int, field: str) -> np.ndarray:
    if getattr(law, "cap_conditional", False):
        raise PolyspecInputError(field, "the asynchronous theory needs a law given by one "
                                 "survival sequence (iid, positional, beta); this law's "
                                 "acceptance depends on the block length")
    s = np.asarray(law.survival(kmax), dtype=np.float64)
    if s.shape != (kmax + 1,) or not np.all(np.isfinite(s)):
        raise PolyspecInputError(field, "the law's survival sequence is not finite")
    return s




def async_rules(cascade) -> tuple[AsyncPair, ...]:
    """Per pair: the rules a config's thresholds and queues mean in async mode."""
    queues = cascade.queues or (None,) * (cascade.n - 1)
    rules = []
    for th, q in zip(cascade.thresholds, queues, strict=True):
        window = READY_WINDOW if th == 0 else th
        if q is not None:
            window = min(window, q) if th == 0 else window
        rules.append(AsyncPair(wait=th, window=window, queue=q))
    return tuple(rules)


def _as_chain(cascade):
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError("cascade", "must be a Cascade (use Cascade.from_config)")
    check_async_cascade(cascade)
    return cascade


@dataclass(frozen=True)
class AsyncLevel:
    """Per-model accounting of the async pipeline (two levels: exact)."""

    name: str
    busy_fraction: float  # share of wall time this model computes
    idle_fraction: float  # share of wall time it waits (verifier: for drafts or the sync)
    mean_checked: float | None  # verifier: drafts checked per verify, E[m]
    mean_emitted: float | None  # verifier: tokens emitted per verify, E[L]
    verifies_per_token: float | None
    forwards_per_token: float  # forwards of this model per generated token
    wasted_fraction: float | None  # drafter: share of its drafts rolled back

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AsyncPrediction:
    """``speedup = T_1(1) / time_per_token`` (``None`` for ``n >= 3``: use the bounds and the
    simulator); ``bounds``: the exact pair of :func:`async_bounds`."""

    speedup: float | None
    time_per_token: float | None
    autoregressive_time_per_token: float
    exact: bool
    bounds: tuple[float, float]
    rules: tuple[AsyncPair, ...]
    levels: tuple[AsyncLevel, ...]
    ready_pmf: np.ndarray | None  # stationary law of drafts ready at a verify start

    def to_dict(self) -> dict:
        return {
            "mode": "async",
            "speedup": self.speedup,
            "time_per_token": self.time_per_token,
            "autoregressive_time_per_token": self.autoregressive_time_per_token,
            "exact": self.exact,
            "bounds": list(self.bounds),
            "rules": [r.to_dict() for r in self.rules],
            "levels": [lv.to_dict() for lv in self.levels],
            "ready_pmf": None if self.ready_pmf is None else self.ready_pmf.tolist(),
        }


def _steps(t: float, c: float) -> float:
    """Drafter forwards started by time ``t`` after a boundary: ``ceil(t / c)`` (inf if c=0)."""
    r = t / c if c > 0.0 else math.inf
    if not r < 2.0**52:  # a drafter this much faster than the verifier is free for AS1
        return math.inf
    k = math.ceil(r - 1e-12 * max(1.0, r))  # a verify ending on a boundary syncs there
    return float(max(k, 0))


def _two_level(t_verify, c: float, surv: np.ndarray, rule: AsyncPair):
    """Exact Markov chain of the two-level pipeline. ``t_verify(m)`` = ``T_1(m) + o_1``.
    Returns (cycle, emitted, P, states, extras) with per-state expectations."""
    wait, window, queue = rule.wait, rule.window, rule.queue

    def transition(d):
        w = max(0, wait - d)
        ds = d + w
        m = min(ds, window)
        t = t_verify(m + 1)
        k = _steps(t, c)
        delta = k if queue is None else min(queue - ds, k)
        if math.isinf(delta):
            cycle = t
        else:
            cycle = max(t, c * delta)
        return w, ds, m, t, delta, w * c + cycle

    if queue is not None:
        top, lump = queue, False
    else:
        k_w = _steps(t_verify(window + 1), c)
        if k_w >= window + 1:  # at D >= window the drafter keeps up: states >= window lump
            top, lump = window, True
        else:
            top = max(window, max(int(_steps(t_verify(m + 1), c)) - 1
                                  for m in range(window + 1)), wait)
            lump = False
    size = top + 1
    if size > MAX_STATES:
        raise PolyspecInputError("queue", f"the two-level chain needs {size} states (at most "
                                 f"{MAX_STATES}): bound the drafter's queue")
    P = np.zeros((size, size))
    cycle = np.zeros(size)
    emitted = np.zeros(size)
    checked = np.zeros(size)
    busy_v = np.zeros(size)
    drafted = np.zeros(size)
    kept = np.zeros(size)
    for d in range(size):
        w, ds, m, t, delta, cyc = transition(d)
        cycle[d] = cyc
        checked[d] = m
        busy_v[d] = t
        emitted[d] = float(np.sum(surv[: m + 1]))  # E[min(R, m)] + 1
        p_bonus = surv[m + 1]  # all m accepted and the drafter's next draft is the bonus
        drafted[d] = w + (0.0 if math.isinf(delta) else delta)
        if ds + delta >= m + 1:
            nxt = ds + delta - m - 1
            nxt = size - 1 if (math.isinf(nxt) or (lump and nxt >= top)) else int(nxt)
            if nxt >= size:
                raise AssertionError("async state space bound violated")  # pragma: no cover
            P[d, nxt] += p_bonus
            P[d, 0] += 1.0 - p_bonus
            kept[d] = float(np.sum(surv[1: m + 1])) + p_bonus
        else:
            P[d, 0] += 1.0
            kept[d] = float(np.sum(surv[1: m + 1]))
    return cycle, emitted, P, checked, busy_v, drafted, kept


def _stationary(P: np.ndarray) -> np.ndarray:
    """Stationary law on the states reachable from 0 (state 0 is reached from every state
    with probability 1 when some draft can be rejected; otherwise the walk is deterministic
    and its states are those reachable from 0)."""
    n = P.shape[0]
    seen = np.zeros(n, dtype=bool)
    seen[0] = True
    frontier = [0]
    while frontier:
        nxt = np.flatnonzero((P[frontier].sum(axis=0) > 0) & ~seen)
        seen[nxt] = True
        frontier = list(nxt)
    idx = np.flatnonzero(seen)
    sub = P[np.ix_(idx, idx)]
    k = idx.size
    a = sub.T - np.eye(k)
    a[-1, :] = 1.0
    b = np.zeros(k)
    b[-1] = 1.0
    pi_sub = np.linalg.solve(a, b)
    pi = np.zeros(n)
    pi[idx] = np.clip(pi_sub, 0.0, None)
    return pi / pi.sum()


def _pair_inputs(cascade, i: int, rule: AsyncPair):
    cost = cascade.models[i].cost
    over = cascade.models[i].overhead
    surv = _survival(cascade.laws[i], rule.window + 2, f"acceptance[{i}]")

    def t_verify(m):
        return float(cost(int(m))) + over

    for m in range(1, rule.window + 2):  # every verify the pipeline can make takes time
        if not t_verify(m) > 0:
            raise PolyspecInputError(
                f"models[{i}].cost", f"a verify of {m} tokens costs {t_verify(m):g} (T({m}) "
                f"+ overhead): the asynchronous pipeline needs every verify to take time")
    return t_verify, surv


def async_bounds(cascade) -> tuple[float, float]:
    """Exact speedup bounds for any ``n``: upper ``T_1(1) max_m e(m) / (T_1(m+1) + o_1)``
    over the block sizes the target can check (no verify emits more per unit of its own time);
    lower ``T_1(1) e(m_min) / X_1`` with ``X_1`` the longest possible target cycle
    (docs/theory.md AS3)."""
    cascade = _as_chain(cascade)
    rules = async_rules(cascade)
    t1 = cascade.models[0].cost.t1
    t_verify, surv = _pair_inputs(cascade, 0, rules[0])
    lo_m = min(rules[0].wait, rules[0].window)
    ms = range(lo_m, rules[0].window + 1)
    e = [float(np.sum(surv[: m + 1])) for m in ms]
    upper = t1 * max(ei / t_verify(m + 1) for ei, m in zip(e, ms, strict=True))
    # X_i: longest cycle of level i (sync point to sync point); Y_i: X_i plus the sync
    # hand-offs below it
    n = cascade.n
    y_below = cascade.models[-1].cost.t1
    x_below = y_below
    for i in range(n - 2, -1, -1):
        tv, _ = _pair_inputs(cascade, i, rules[i])
        longest = max(tv(m + 1) for m in range(min(rules[i].wait, rules[i].window),
                                                rules[i].window + 1))
        x_i = (rules[i].wait + 2) * y_below + longest
        x_below, y_below = x_i, x_i + y_below
    lower = t1 * e[0] / x_below
    return lower, upper


def sync_ratio_bounds(cascade) -> tuple[float, float] | None:
    """Two levels, ``wait = window = theta >= 1``, unbounded queue: exact bounds on
    ``speedup_async / speedup_sync`` (AS4): every async verify checks ``theta`` drafts as
    the sync round does, and lasts between ``c ceil(T'/c)`` and ``theta c + c ceil(T'/c)``
    against ``theta c + T'`` (``T' = T_1(theta + 1) + o_1``). ``None`` outside that case."""
    cascade = _as_chain(cascade)
    rules = async_rules(cascade)
    if cascade.n != 2 or rules[0].wait == 0 or rules[0].queue is not None:
        return None
    c = cascade.models[1].cost.t1
    th = rules[0].window
    t = float(cascade.models[0].cost(th + 1)) + cascade.models[0].overhead
    k = _steps(t, c)
    rounded = t if math.isinf(k) else c * k
    sync_cycle = th * c + t
    return sync_cycle / (th * c + rounded), sync_cycle / rounded


def predict_async(cascade) -> AsyncPrediction:
    """AS1: speedup of ``cascade`` run as an asynchronous pipeline (whatever its ``mode``).
    Exact for two levels (AS1); ``n >= 3``: ``speedup`` is ``None`` and ``bounds`` hold."""
    cascade = _as_chain(cascade)
    rules = async_rules(cascade)
    t_ar = cascade.models[0].cost.t1
    bounds = async_bounds(cascade)
    if cascade.n != 2:
        return AsyncPrediction(None, None, t_ar, False, bounds, rules, (), None)
    rule = rules[0]
    c = cascade.models[1].cost.t1
    t_verify, surv = _pair_inputs(cascade, 0, rule)
    cycle, emitted, P, checked, busy_v, drafted, kept = _two_level(t_verify, c, surv, rule)
    pi = _stationary(P)
    mean_cycle = float(pi @ cycle)
    mean_l = float(pi @ emitted)
    tpt = mean_cycle / mean_l
    if not (math.isfinite(tpt) and tpt > 0):
        raise PolyspecInputError("config", "AS1 is out of double-precision range for this "
                                 "cascade")
    mean_busy = float(pi @ busy_v)
    mean_drafted = float(pi @ drafted)
    per_token = 1.0 / mean_l
    if c > 0:
        d_busy = min(1.0, mean_drafted * c / mean_cycle)
        d_fwd = mean_drafted * per_token
        wasted = max(0.0, 1.0 - float(pi @ kept) / mean_drafted) if mean_drafted > 0 else 0.0
    else:
        d_busy, d_fwd, wasted = 0.0, 0.0, None
    levels = (
        AsyncLevel(cascade.models[0].name, mean_busy / mean_cycle, 1.0 - mean_busy / mean_cycle,
                   float(pi @ checked), mean_l, per_token, per_token, None),
        AsyncLevel(cascade.models[1].name, d_busy, 1.0 - d_busy, None, None, None, d_fwd,
                   wasted),
    )
    return AsyncPrediction(t_ar / tpt, tpt, t_ar, True, bounds, rules, levels, pi)
