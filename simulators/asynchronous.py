"""Discrete-event Monte Carlo of an asynchronous pipelined cascade (docs/theory.md Part VI-AS).

The independent check of AS1: it runs the protocol of PipeSpec's ``AsyncChainSpeculativeDecoder``
action by action, for any number of levels, instead of the Markov chain of
:mod:`polyspec_theory.pipelines.asynchronous`. Levels ``0..n-1`` (0 the target), each its
own process:

* the bottom model drafts one token per forward (``T_n(1)``) while it is less than ``queue``
  drafts past its verifier's prefix;
* a verifier ``j`` that is free and sees ``lead[j+1] >= wait_j`` drafts past its prefix (and, for
  a middle level, is itself less than ``queue`` past its own verifier) checks
  ``m = min(lead, window_j)`` of them in one forward (``T_j(m + 1) + o_j``); at its end the
  pair's law gives ``R`` (one uniform, inverse survival; independent across verifies) and it
  emits ``min(R, m) + 1`` tokens into its own stream (the output, for the target);
* it then blocks until its drafter is free (at the end of the drafter's current action) and
  syncs: the drafter keeps its stream, less the ``m + 1`` positions just settled, if every
  checked draft was accepted and its next draft equals the bonus token (``R >= m + 1``);
  otherwise it and every level below roll back (leads 0; actions in flight below are
  discarded when they end). A middle level handles its verifier's sync only when free.

Rates are measured between the first and the last rollback of the top pair (regeneration
points of the two-level pipeline; for ``n >= 3`` lower levels may still be busy then); if some
chain has fewer than two, over the last 80 % of the events. Chains are ``vmap``-ed; events run
under ``lax.fori_loop`` with the count traced; random bits come from ``jax.random`` with
``fold_in(key, event)``: same seed -> same numbers. Pure functions of the key.

One compiled run serves many configs (compiles, not numbers): the event count is traced, a run
of fewer than :data:`MIN_LANES` chains runs that many lanes and keeps its own (partitionable
threefry draws lane ``i``'s uniform from ``(key, i)`` alone, and no lane reads another), and
the survival and cost tables are zero-padded to a multiple of 8 columns (``S_k > u`` never
holds for a padded ``0``, a padded cost is never read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory import (
    MAX_VERIFY_TOKENS,
    Cascade,
    as_cascade,
    async_rules,
    async_tie_tolerance,
    check_async_cascade,
)
from polyspec_theory.errors import PolyspecInputError, as_int

from .runtime import RatioEstimate, as_chains, make_key, ratio_estimate, to_host

__all__ = ["AsyncSimResult", "AsyncParams", "async_params", "simulate_async"]

_NO_QUEUE = 2**40
MAX_STEPS_PER_VERIFY = 1e6  # an unbounded drafter this much faster than a verify is refused
MIN_VERIFIES = 20  # events per chain must hold this many verifies of the longest kind
MIN_LANES = 16  # lanes run at least (the first `chains` reported); 2: one per chain
WIDTH_STEP = 8  # table columns: a multiple of this (at most MAX_VERIFY_TOKENS)


class AsyncParams(NamedTuple):
    """Numeric tables: ``survival[j, k-1] = S_k`` (k = 1..width), ``cost[j, m]`` =
    ``T_j(m) + o_j`` (m = 1..width, column 0 unused), ``draft_cost`` = ``T_n(1)``."""

    survival: jax.Array  # f64[n-1, width]
    cost: jax.Array  # f64[n-1, width + 1]
    draft_cost: jax.Array  # f64
    wait: jax.Array  # int64[n-1]
    window: jax.Array  # int64[n-1]
    queue: jax.Array  # int64[n-1] (2^40: unbounded)
    tie: jax.Array  # f64: AS0's tie tolerance (polyspec_theory.async_tie_tolerance)


class _State(NamedTuple):
    now: jax.Array  # clock (sum of the steps between events)
    t_end: jax.Array  # f64[n]: time left in each action in flight (from now)
    status: jax.Array  # int32[n]: 0 free, 1 busy, 2 blocked (verified, waiting to sync)
    stale: jax.Array  # bool[n]
    mcur: jax.Array  # int64[n]
    lead: jax.Array  # int64[n] (lead[0] unused)
    pend_r: jax.Array  # int64[n]
    out: jax.Array  # int64
    busy: jax.Array  # f64[n] compute time started
    verifies: jax.Array  # int64[n]
    checked: jax.Array  # int64[n]
    regen: jax.Array  # int64: rollbacks of the top pair
    first: jax.Array  # f64[2]: (time, tokens) at the first
    last: jax.Array  # f64[2]: at the last
    mark: jax.Array  # f64[2]: at the burn-in event


def async_params(cascade: Cascade) -> AsyncParams:
    """Tables of ``cascade`` run asynchronously (rules: :func:`async_rules`)."""
    check_async_cascade(as_cascade(cascade))
    rules = async_rules(cascade)
    width = max(r.window for r in rules) + 1
    width = min(-(-width // WIDTH_STEP) * WIDTH_STEP, MAX_VERIFY_TOKENS)  # window <= 99
    surv = np.zeros((cascade.n - 1, width))
    cost = np.zeros((cascade.n - 1, width + 1))
    for j, r in enumerate(rules):
        law = cascade.laws[j]
        if getattr(law, "cap_conditional", False):
            raise PolyspecInputError(f"acceptance[{j}]", "the asynchronous simulator needs a "
                                     "law given by one survival sequence")
        s = np.asarray(law.survival(r.window + 1), dtype=np.float64)
        surv[j, : r.window + 1] = s[1:]
        m = cascade.models[j]
        cost[j, 1: r.window + 2] = np.asarray(m.cost(np.arange(1, r.window + 2))) + m.overhead
    c = cascade.models[-1].cost.t1
    if c <= 0 and rules[-1].queue is None:
        raise PolyspecInputError("models[-1].cost", "a drafter of cost 0 with an unbounded "
                                 "queue drafts forever: give \"queue\" a bound")
    if np.any(cost[:, 1:][np.arange(width)[None, :] <= np.array([[r.window]
                                                               for r in rules])] <= 0):
        raise PolyspecInputError("models", "every verifier cost T_j(m) must be > 0 in "
                                 "asynchronous mode (a verify of zero time never ends)")
    if rules[-1].queue is None and c > 0:
        steps = float(np.max(cost[:, 1:])) / c  # drafter forwards per longest verify
        if not steps <= MAX_STEPS_PER_VERIFY:
            raise PolyspecInputError(
                "models[-1].cost", f"the drafter takes {steps:.3g} forwards per verify (at "
                f"most {MAX_STEPS_PER_VERIFY:g} simulated): an unbounded queue this fast cannot "
                "be run action by action; bound \"queue\" or use predict (AS1)")
    return AsyncParams(
        jnp.asarray(surv), jnp.asarray(cost), jnp.float64(c),
        jnp.asarray([r.wait for r in rules], dtype=jnp.int64),
        jnp.asarray([r.window for r in rules], dtype=jnp.int64),
        jnp.asarray([_NO_QUEUE if r.queue is None else r.queue for r in rules],
                    dtype=jnp.int64),
        jnp.float64(async_tie_tolerance(cascade)))


def _init(n: int) -> _State:
    z = jnp.zeros(n, dtype=jnp.int64)
    return _State(jnp.float64(0.0), jnp.full(n, jnp.inf), jnp.zeros(n, dtype=jnp.int32),
                  jnp.zeros(n, dtype=bool), z, z, z, jnp.int64(0), jnp.zeros(n), z, z,
                  jnp.int64(0), jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))


def _settle(p: AsyncParams, n: int, st: _State) -> _State:
    """Syncs (bottom-up, so a freed middle level can sync with its verifier at once), then
    starts every action whose rule allows it."""
    idx = jnp.arange(n)
    status, lead, stale = st.status, st.lead, st.stale
    regen, first, last = st.regen, st.first, st.last
    for j in range(n - 2, -1, -1):
        cond = (status[j] == 2) & (status[j + 1] == 0)
        m = st.mcur[j]
        ok = (st.pend_r[j] >= m + 1) & (lead[j + 1] >= m + 1)
        lead = lead.at[j + 1].add(jnp.where(cond & ok, -(m + 1), 0))
        back = cond & ~ok
        below = idx >= j + 1
        lead = jnp.where(back & below, 0, lead)
        deeper = idx >= j + 2
        stale = stale | (back & deeper & (status == 1))
        status = jnp.where(back & deeper & (status == 2), 0, status)
        status = status.at[j].set(jnp.where(cond, 0, status[j]))
        if j == 0:
            mark = jnp.stack([st.now, st.out.astype(jnp.float64)])
            first = jnp.where(back & (regen == 0), mark, first)
            last = jnp.where(back, mark, last)
            regen = regen + back.astype(jnp.int64)
    t_end, mcur, busy = st.t_end, st.mcur, st.busy
    verifies, checked = st.verifies, st.checked
    for j in range(n):
        free = status[j] == 0
        room = True if j == 0 else lead[j] < p.queue[j - 1]
        if j == n - 1:
            go = free & room
            dur = p.draft_cost
            m = jnp.int64(0)
        else:
            go = free & room & (lead[j + 1] >= p.wait[j])
            m = jnp.minimum(lead[j + 1], p.window[j])
            dur = p.cost[j, m + 1]
            verifies = verifies.at[j].add(go.astype(jnp.int64))
            checked = checked.at[j].add(jnp.where(go, m, 0))
        t_end = t_end.at[j].set(jnp.where(go, dur, t_end[j]))
        status = status.at[j].set(jnp.where(go, 1, status[j]))
        mcur = mcur.at[j].set(jnp.where(go, m, mcur[j]))
        busy = busy.at[j].add(jnp.where(go, dur, 0.0))
    return st._replace(status=status, lead=lead, stale=stale, regen=regen, first=first,
                       last=last, t_end=t_end, mcur=mcur, busy=busy, verifies=verifies,
                       checked=checked)


def _event(p: AsyncParams, n: int, burn, st: _State, inp) -> tuple[_State, None]:
    """Complete the earliest action, then settle. Ties (AS0): of the actions ending within
    ``p.tie`` of the earliest, the highest level (lowest index) completes first, so a verify
    ending on its drafter's boundary syncs there, the drafter's step included. Times are kept
    relative to the last event (no drift with the clock's size)."""
    t_idx, u = inp
    te = jnp.where(st.status == 1, st.t_end, jnp.inf)
    k = jnp.argmax(te <= jnp.min(te) + p.tie)
    dt = jnp.maximum(te[k], 0.0)
    now = st.now + dt
    oh = jnp.arange(n) == k
    was_stale = st.stale[k]
    # drafter forward: one more draft; verify: R from the pair's law, emit min(R, m) + 1
    kv = jnp.minimum(k, n - 2)
    r = jnp.sum(p.survival[kv] > u).astype(jnp.int64)
    m = st.mcur[k]
    emitted = jnp.minimum(r, m) + 1
    is_draft = k == n - 1
    gain = jnp.where(was_stale, 0, jnp.where(is_draft, 1, emitted))
    lead = st.lead + jnp.where(oh & (k > 0), gain, 0)
    out = st.out + jnp.where(k == 0, gain, 0)
    status = jnp.where(oh, jnp.where(is_draft | was_stale, 0, 2), st.status).astype(jnp.int32)
    st = st._replace(now=now, lead=lead, out=out, status=status,
                     stale=st.stale & ~oh, pend_r=jnp.where(oh, r, st.pend_r),
                     t_end=jnp.where(oh, jnp.inf, st.t_end - dt))
    st = _settle(p, n, st)
    mark = jnp.stack([st.now, st.out.astype(jnp.float64)])
    st = st._replace(mark=jnp.where(t_idx == burn, mark, st.mark))
    return st, None


@partial(jax.jit, static_argnames=("n", "lanes"))
def _run(p: AsyncParams, key, n: int, events, lanes: int) -> _State:
    """``lanes`` chains of ``events`` events (a traced count: one executable serves every
    run length; the burn-in mark at event ``events // 5``)."""
    burn = events // 5
    st0 = jax.vmap(lambda _: _settle(p, n, _init(n)))(jnp.arange(lanes))

    def body(t, st):
        u = jax.random.uniform(jax.random.fold_in(key, t), (lanes,), dtype=jnp.float64)
        return jax.vmap(lambda s, uu: _event(p, n, burn, s, (t, uu)))(st, u)[0]

    return lax.fori_loop(jnp.int64(0), events, body, st0)


@dataclass(frozen=True)
class AsyncSimResult:
    """Monte-Carlo speedup (``T_1(1)`` x tokens / time) with its CI, per-level verifies and
    drafts checked per verify, the window measured (``"regeneration"`` or ``"burn-in"``)."""

    speedup: RatioEstimate
    time_per_token: RatioEstimate
    mean_checked: tuple[float, ...]
    busy_fraction: tuple[float, ...]
    tokens: int
    events: int
    chains: int
    window: str
    seed: int | None  # None when a PRNG key was passed

    def to_dict(self) -> dict:
        return {
            "mode": "async",
            "speedup": self.speedup.value,
            "speedup_ci95": [self.speedup.low, self.speedup.high],
            "speedup_se": self.speedup.se,
            "time_per_token": self.time_per_token.value,
            "mean_checked": list(self.mean_checked),
            "busy_fraction": list(self.busy_fraction),
            "tokens": self.tokens,
            "events_per_chain": self.events,
            "chains": self.chains,
            "window": self.window,
            "seed": self.seed,
        }


def simulate_async(cascade: Cascade, events: int, seed: int = 0, *,
                   chains: int = 64) -> AsyncSimResult:
    """Simulate ``cascade`` as an asynchronous pipeline: ``chains`` independent chains of
    ``events`` completed actions each (drafter forwards and verifies; the default budget is
    ``simulators.schemes.DEFAULT_EVENTS``)."""
    events = as_int(events, "events", low=50, high=10**8)
    chains = as_chains(chains)
    key = make_key(seed)  # an int seed or a typed PRNG key
    seed = seed if isinstance(seed, int) else None
    p = async_params(cascade)
    n = cascade.n
    c = float(p.draft_cost)
    if async_rules(cascade)[-1].queue is None and c > 0:
        steps = float(np.max(np.asarray(p.cost)[:, 1:])) / c
        if events < MIN_VERIFIES * (steps + 1):
            raise PolyspecInputError(
                "events", f"the drafter takes up to {steps:.3g} forwards per verify: {events} "
                f"events per chain hold fewer than {MIN_VERIFIES} verifies; give at least "
                f"{math.ceil(MIN_VERIFIES * (steps + 1))} or bound \"queue\"")
    st = _run(p, key, n, jnp.int64(events), max(chains, MIN_LANES))
    h = {f: to_host(getattr(st, f))[:chains] for f in ("now", "out", "regen", "first", "last",
                                                       "mark", "verifies", "checked", "busy")}
    if not np.all(np.isfinite(h["now"])):
        raise PolyspecInputError("config", "the simulated pipeline stalled (no action can "
                                 "start): check thresholds and queues")
    if np.all(h["regen"] >= 2):
        tok = h["last"][:, 1] - h["first"][:, 1]
        dt = h["last"][:, 0] - h["first"][:, 0]
        window = "regeneration"
    else:
        tok = h["out"] - h["mark"][:, 1]
        dt = h["now"] - h["mark"][:, 0]
        window = "burn-in"
    t1 = cascade.models[0].cost.t1
    speed = ratio_estimate(tok, dt, scale=t1)
    tpt = ratio_estimate(dt, tok)
    ver = h["verifies"].sum(axis=0)
    mean_checked = tuple(float(h["checked"].sum(axis=0)[j] / ver[j]) if ver[j] else math.nan
                         for j in range(n - 1))
    busy = tuple(float(x) for x in np.minimum(1.0, h["busy"].sum(axis=0) / h["now"].sum()))
    return AsyncSimResult(speed, tpt, mean_checked, busy, int(np.sum(tok)), events, chains,
                          window, seed)
