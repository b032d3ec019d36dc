"""AS0–AS4: asynchronous pipelined cascades (docs/theory.md Part VI-AS).

Every model runs in its own process (PipeSpec's ``AsyncChainSpeculativeDecoder``). The bottom
drafter ``M_n`` drafts one token per forward (``c = T_n(1)``) without pause, unless it is
``queue`` drafts past its verifier's prefix. A verifier ``M_i`` starts a verify once ``wait``
drafts are ready past its prefix, checks ``m = min(ready, window)`` of them in one forward
(``T_i(m + 1) + o_i``), then syncs with its drafter at the drafter's next step boundary (at
once if the drafter is idle): on a rejection, or when the drafter's next draft disagrees with
the emitted bonus token, the drafter rolls back to the verifier's sequence. Config threshold
``theta`` is the wait (PipeSpec lookahead ``k``: ``theta = max(k - 1, 0)``) and every verify
checks all ready drafts up to :data:`READY_WINDOW` (``max_verify_tokens`` =
:data:`MAX_VERIFY_TOKENS` in ``decoding.py``), or the queue if smaller (:func:`async_pair`).

Two levels: the drafts ready at a verify start, ``D``, form a Markov chain (the drafter is at a
step boundary or idle at every verify start), and renewal-reward gives the exact time per token
``sum pi(D) E[cycle | D] / sum pi(D) E[L | D]``. ``n >= 3``: an exact bound pair
(:func:`async_bounds`); the simulator (``simulators/asynchronous.py``) gives the value.
Assumes acceptance independent across verifies, the law's positions counted from the first
draft a verify checks (as in P1).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..core.config import check_async_cascade
from ..errors import PolyspecInputError, as_real
from .async_exact import ChainTooLarge, exact_async
from .async_rules import (
    MAX_VERIFY_TOKENS,
    READY_WINDOW,
    TIE_RTOL,
    AsyncLevel,
    AsyncPair,
    AsyncPrediction,
    as_async_cascade,
    async_pair,
    async_rules,
    async_survival,
    async_tie_tolerance,
    lookahead_threshold,
)

__all__ = [
    "MAX_VERIFY_TOKENS",
    "READY_WINDOW",
    "async_pair",
    "lookahead_threshold",
    "AsyncPair",
    "AsyncLevel",
    "AsyncPrediction",
    "TIE_RTOL",
    "async_rules",
    "async_bounds",
    "async_survival",
    "as_async_cascade",
    "async_tie_tolerance",
    "check_async_cascade",
    "predict_async",
    "sync_ratio_bounds",
    "with_contention",
]

MAX_STATES = 4_000  # largest Markov chain AS1 builds


def _steps(t: float, c: float, eps: float = 0.0) -> float:
    """Drafter forwards that end by the end of a verify of length ``t`` started at a drafter
    boundary, the one in flight at its end included (the sync waits for it): the least ``k``
    with ``k c >= t - eps`` (AS0 ties: a boundary less than ``eps`` before the verify's end is
    at its end). ``inf``: a drafter so fast that it is free (``c = 0`` or ``t / c >= 2^52``)."""
    r = (t - eps) / c if c > 0.0 else math.inf
    if not r < 2.0**52:  # a drafter this much faster than the verifier is free for AS1
        return math.inf
    return float(max(math.ceil(r), 0))


def _two_level(t_verify, c: float, surv: np.ndarray, rule: AsyncPair, eps: float = 0.0):
    """Exact Markov chain of the two-level pipeline. ``t_verify(m)`` = ``T_1(m) + o_1``;
    ``eps``: the tie tolerance (:func:`async_tie_tolerance`).
    Returns (cycle, emitted, P, states, extras) with per-state expectations."""
    wait, window, queue = rule.wait, rule.window, rule.queue

    def transition(d):
        w = max(0, wait - d)
        ds = d + w
        m = min(ds, window)
        t = t_verify(m + 1)
        k = _steps(t, c, eps)
        delta = k if queue is None else min(queue - ds, k)
        if math.isinf(delta):
            cycle = t
        else:
            cycle = max(t, c * delta)
        return w, ds, m, t, delta, w * c + cycle

    if queue is not None:
        top, lump = queue, False
    else:
        k_w = _steps(t_verify(window + 1), c, eps)
        if k_w >= window + 1:  # at D >= window the drafter keeps up: states >= window lump
            top, lump = window, True
        else:
            top = max(window, max(_steps(t_verify(m + 1), c, eps) - 1
                                  for m in range(window + 1)), wait)
            lump = False
    if not top + 1 <= MAX_STATES:  # top = inf: a verify so long that the drafter is free
        need = "unboundedly many" if math.isinf(top) else f"{int(top) + 1}"
        raise PolyspecInputError("queue", f"the two-level chain needs {need} states (at most "
                                 f"{MAX_STATES}): bound the drafter's queue")
    top = int(top)
    size = top + 1
    P = np.zeros((size, size))
    cycle = np.zeros(size)
    emitted = np.zeros(size)
    checked = np.zeros(size)
    busy_v = np.zeros(size)
    drafted = np.zeros(size)
    kept = np.zeros(size)
    sums: dict[int, tuple[float, float]] = {}  # m -> the two sums of surv below (per m, once)
    for d in range(size):
        w, ds, m, t, delta, cyc = transition(d)
        cycle[d] = cyc
        checked[d] = m
        busy_v[d] = t
        if m not in sums:
            sums[m] = float(np.sum(surv[: m + 1])), float(np.sum(surv[1: m + 1]))
        emitted[d], kept_m = sums[m]  # E[min(R, m)] + 1; the drafts kept of those
        p_bonus = surv[m + 1]  # all m accepted and the drafter's next draft is the bonus
        # drafter forwards this cycle: the wait, then those ending by the sync (a drafter too
        # fast to count steps, t / c >= 2^52, makes about t / c of them)
        drafted[d] = w + (delta if not math.isinf(delta) else (t / c if c > 0 else 0.0))
        if ds + delta >= m + 1:
            nxt = ds + delta - m - 1
            nxt = size - 1 if (math.isinf(nxt) or (lump and nxt >= top)) else int(nxt)
            if nxt >= size:
                raise AssertionError("async state space bound violated")  # pragma: no cover
            P[d, nxt] += p_bonus
            P[d, 0] += 1.0 - p_bonus
            kept[d] = kept_m + p_bonus
        else:
            P[d, 0] += 1.0
            kept[d] = kept_m
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
    surv = async_survival(cascade.laws[i], rule.window + 2, f"acceptance[{i}]")

    times: dict[int, float] = {}  # m -> T_i(m) + o_i: the chains ask for few m, many times

    def t_verify(m):
        m = int(m)
        if m not in times:
            times[m] = float(cost(m)) + over
        return times[m]

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
    cascade = as_async_cascade(cascade)
    rules = async_rules(cascade)
    t1 = cascade.models[0].cost.t1
    t_verify, surv = _pair_inputs(cascade, 0, rules[0])
    lo_m = min(rules[0].wait, rules[0].window)
    ms = range(lo_m, rules[0].window + 1)
    e = [float(np.sum(surv[: m + 1])) for m in ms]
    upper = t1 * max(ei / t_verify(m + 1) for ei, m in zip(e, ms, strict=True))
    # X_i: longest cycle of level i (sync point to sync point); Y_i: X_i plus the sync
    # hand-offs below it. A middle level rolled back from above first waits for the stale
    # action below (one Y_{i+1} more); the target is never rolled back from above.
    n = cascade.n
    y_below = cascade.models[-1].cost.t1
    x_below = y_below
    for i in range(n - 2, -1, -1):
        tv, _ = _pair_inputs(cascade, i, rules[i])
        longest = max(tv(m + 1) for m in range(min(rules[i].wait, rules[i].window),
                                                rules[i].window + 1))
        x_i = (rules[i].wait + (1 if i == 0 else 2)) * y_below + longest
        x_below, y_below = x_i, x_i + y_below
    lower = t1 * e[0] / x_below
    return lower, upper


def sync_ratio_bounds(cascade) -> tuple[float, float] | None:
    """Two levels, threshold ``1 <= theta <= READY_WINDOW``, unbounded queue, and a drafter
    that makes at most ``theta + 1`` drafts per verify of ``theta`` (``ceil(T'/c) <= theta +
    1``): exact bounds on ``speedup_async / speedup_sync`` (AS4). There every async verify
    checks ``theta`` drafts as the sync round does, and lasts between ``c ceil(T'/c)`` and
    ``theta c + c ceil(T'/c)`` against ``theta c + T'`` (``T' = T_1(theta + 1) + o_1``).
    ``None`` outside that case (verifies then check more than ``theta``)."""
    cascade = as_async_cascade(cascade)
    rules = async_rules(cascade)
    if (cascade.n != 2 or rules[0].wait == 0 or rules[0].queue is not None
            or rules[0].wait > rules[0].window):
        return None
    c = cascade.models[1].cost.t1
    th = rules[0].wait
    t = float(cascade.models[0].cost(th + 1)) + cascade.models[0].overhead
    k = _steps(t, c, async_tie_tolerance(cascade))
    if k > th + 1:
        return None
    rounded = t if math.isinf(k) else max(t, c * k)
    sync_cycle = th * c + t
    return sync_cycle / (th * c + rounded), sync_cycle / rounded


def _contention(cascade, contention) -> tuple[float, ...]:
    """The contention factors ``kappa_i`` (one per model, each finite and > -1), checked."""
    if isinstance(contention, (str, bytes, dict)) or not hasattr(contention, "__len__"):
        raise PolyspecInputError("contention", "must be one factor kappa_i per model")
    if len(contention) != cascade.n:
        raise PolyspecInputError("contention", f"need one factor per model ({cascade.n}), got "
                                 f"{len(contention)}")
    return tuple(as_real(k, f"contention[{i}]", low=-1.0, low_open=True)
                 for i, k in enumerate(contention))


def with_contention(cascade, contention):
    """AS1c: ``cascade`` with every model's forward cost ``T_i(m)`` replaced by
    ``T_i(m) (1 + kappa_i)`` (``contention`` = ``(kappa_1, ..., kappa_n)``, target first),
    the overheads ``o_i`` kept: the costs of the forwards while all the pipeline's processes
    run (docs/theory.md AS1c)."""
    cascade = as_async_cascade(cascade)
    kap = _contention(cascade, contention)
    models = tuple(dataclasses.replace(m, cost=m.cost.scaled(1.0 + k))
                   for m, k in zip(cascade.models, kap, strict=True))
    return dataclasses.replace(cascade, models=models)


def predict_async(cascade, contention=None) -> AsyncPrediction:
    """Speedup of ``cascade`` run as an asynchronous pipeline (whatever its ``mode``). Exact
    for two levels (AS1); ``n >= 3``: exact by AS7 where its chain is at most
    :data:`~polyspec_theory.pipelines.async_exact.MAX_EXACT_STATES` states, otherwise
    ``speedup`` is ``None`` (``exact`` False) and ``bounds`` hold. ``contention``
    (``kappa_i`` per model, AS1c): the pipeline runs on the costs ``T_i(m) (1 + kappa_i)``
    (:func:`with_contention`) while the speedup stays against the target's solo ``T_1(1)``:
    ``speedup = T_1(1) / tau`` with ``tau`` the contended pipeline's time per token."""
    cascade = as_async_cascade(cascade)
    if contention is not None:
        slow = with_contention(cascade, contention)
        pred = predict_async(slow)
        solo = cascade.models[0].cost.t1
        f = solo / slow.models[0].cost.t1  # the bounds and speedup against the solo T_1(1)
        return dataclasses.replace(
            pred, speedup=None if pred.speedup is None else pred.speedup * f,
            autoregressive_time_per_token=solo,
            bounds=(pred.bounds[0] * f, pred.bounds[1] * f))
    rules = async_rules(cascade)
    t_ar = cascade.models[0].cost.t1
    bounds = async_bounds(cascade)
    if cascade.n != 2:  # AS7 where its chain is small enough, else the bounds alone
        try:
            ex = exact_async(cascade)
        except ChainTooLarge:
            return AsyncPrediction(None, None, t_ar, False, bounds, rules, (), None)
        return AsyncPrediction(ex.speedup, ex.time_per_token, t_ar, True, bounds, rules,
                               ex.levels, None)
    rule = rules[0]
    c = cascade.models[1].cost.t1
    t_verify, surv = _pair_inputs(cascade, 0, rule)
    cycle, emitted, P, checked, busy_v, drafted, kept = _two_level(
        t_verify, c, surv, rule, async_tie_tolerance(cascade))
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
