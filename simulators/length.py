"""Length-level Monte Carlo of an n-level polybasic cascade (docs/theory.md §6), in JAX.

The simulator runs the algorithm itself, event by event, not a formula: it is the independent
check of P1. Pair level ``i`` (verifier ``M_i``, drafter ``M_{i+1}``, 0-based, ``m = n - 1``
pair levels) holds a pending block of ``acc[i]`` tokens. One *event* (one step) is one
verification round:

* the level to verify is ``m - 1`` (the bottom pair) unless a parent block just filled up;
  at the bottom, ``M_n`` first runs ``theta_{m-1}`` forwards (one token each, no randomness),
  so ``G_{m-1} = theta_{m-1}``; at level ``i < m - 1`` the block is the accumulated
  ``G_i = acc[i] >= theta_i`` (policy ``"truncate"``: ``G_i = theta_i``, the excess dropped);
* ``M_i`` scores ``G_i + 1`` positions at cost ``T_i(G_i + 1)`` plus the model's fixed
  per-round overhead ``o_i`` (``Model.overhead``, counted in ``M_i``'s time); ``A_i``
  follows the pair's law capped at ``G_i``, drawn with ONE uniform ``u`` by inverse CDF:
  ``A = min(#{k >= 1 : S_k > u}, G)`` with ``S_k = P(A >= k)`` the law's survival vector
  (iid: closed form ``floor(log u / log alpha)``). For the Beta-mixed law ``S_k`` is the
  *marginal* survival ``B(a+k, b)/B(a, b)``: rounds are independent and ``alpha`` enters only
  its own round, so drawing ``A`` from its marginal is exactly "one Beta draw per round";
* the round emits ``L_i = A_i + 1`` tokens into the parent's block ``acc[i-1]`` (at the top,
  ``i = 0``, they are the output); if ``acc[i-1] >= theta_{i-1}`` the parent verifies next.

Chains are ``vmap``-ed and sharded over a device mesh; rounds run under ``lax.scan`` in
fixed-size chunks. A chain stops at the end of the first top-level round at which it has
emitted ``>= tokens_per_chain`` tokens: a stopping time of the iid top-level rounds, so by
Wald's identity ``E[tokens] / E[time] = E[L_1] / E[C_1]`` exactly and the ratio estimator
over chains is consistent with a delta-method CI (no batch means needed).

Random bits: chunk ``k`` gets a 64-bit seed from threefry (``fold_in(key, k)``); event ``t``
of chain ``c`` uses the high 32 bits of SplitMix64 state ``t * chains + c + 1`` from that seed
(:func:`event_bits`) — a counter-based generator, so the
bits are independent of the sharding, and several times cheaper than threefry bits on CPU
(``benchmarks/bench_simulator.py``). Uniforms ``u = (b + 1/2) / 2^32``: every simulated
probability is exact to within ``2^-32``. (The BlackJAX-style :func:`make_kernel` draws
threefry bits per step.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory.core.config import Cascade, as_cascade
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.core.runs import uses_runs
from polyspec_theory.errors import PolyspecInputError, as_int

from .runtime import (
    RatioEstimate,
    as_chains,
    chain_mesh,
    device_array,
    host_chains,
    make_key,
    random_bits,
    ratio_estimate,
    shard_chains,
    to_host,
    uniform_from_bits,
)

__all__ = [
    "LengthStatic",
    "LengthParams",
    "LengthState",
    "StepInfo",
    "LengthModel",
    "LengthKernel",
    "LevelStats",
    "LengthResult",
    "init_state",
    "transition",
    "make_kernel",
    "run_chunk",
    "chunk_bits",
    "chunk_seed",
    "event_bits",
    "split_bits",
    "simulate_lengths",
    "histograms_fit",
    "estimate_events",
    "chain_totals",
    "CI_METHOD",
]

CI_METHOD = (
    "independent chains (each stopped at a top-level round boundary, a stopping time); "
    "ratio estimator sum(tokens)/sum(time) with a delta-method normal 95% CI"
)


# --- static structure, parameters and state ------------------------------------------------


class LengthStatic(NamedTuple):
    """Compile-time structure (hashable): pair levels ``m``, table width ``width`` (>= every
    possible block), truncate policy, iid closed form, histogram outputs, affine verify costs
    (``T_i(g + 1) = base_i + slope_i g``: a chunk's model time follows from its counters)."""

    m: int
    width: int
    truncate: bool
    closed_form: bool
    histograms: bool
    affine: bool = False


class LengthParams(NamedTuple):
    """Numeric tables (device arrays); shapes depend only on ``(m, width)`` so configs of the
    same shape share one compiled simulator."""

    thresholds: jax.Array  # int32[m]
    survival: jax.Array  # f64[m, width]: S_k = P(A >= k), k = 1..width
    inv_log_alpha: jax.Array  # f64[m]: 1/log(alpha) (iid closed form)
    alpha_one: jax.Array  # bool[m]: alpha == 1 (always accept)
    verify_cost: jax.Array  # f64[m, width + 1]: T_i(g + 1) + o_i, g = 0..width
    cost_base: jax.Array  # f64[m]: T_i(1) + o_i (affine costs, per-round overhead included)
    cost_slope: jax.Array  # f64[m]: T_i(g + 2) - T_i(g + 1) (affine costs)
    bottom_cost: jax.Array  # f64: theta_{m-1} * T_n(1), the drafter's forwards per bottom block


class LengthState(NamedTuple):
    """State of one chain. ``level``: the pair level verified at the next event. Per-level
    quantities are tuples of scalars (one per level) so that, batched over chains, every field
    is one contiguous vector."""

    level: jax.Array  # int32
    acc: tuple  # m - 1 int32: pending block of pair levels 0..m-2 (the bottom block is fixed)
    tokens: jax.Array  # int64 tokens emitted by the top level
    done: jax.Array  # bool: stopped (frozen)
    rounds: tuple  # m int64: verifications per pair level
    block_sum: tuple  # m int64: sum of G_i
    emitted_sum: tuple  # m int64: sum of L_i
    model_time: tuple  # m + 1 f64: time spent in forwards of each model


class StepInfo(NamedTuple):
    level: jax.Array
    block: jax.Array
    accepted: jax.Array
    active: jax.Array


def _bucket(w: int) -> int:
    """Round the table width up (8, 16, 32, ...) so nearby configs reuse one compilation."""
    return max(8, 1 << (int(w) - 1).bit_length())


MAX_HIST_BINS = 1 << 24


def histograms_fit(cascade: Cascade) -> bool:
    """Whether the joint (G, L) histograms of ``cascade`` fit in :data:`MAX_HIST_BINS` (wide
    blocks, e.g. theta = 4096, do not: simulate them without histograms)."""
    w = _bucket(max(block_bounds(cascade.thresholds, cascade.policy)))
    return (cascade.n - 1) * (w + 2) ** 2 <= MAX_HIST_BINS


def estimate_events(cascade: Cascade, tokens: int) -> float:
    """Expected verification rounds (simulator events) to emit ``tokens`` tokens: P1's
    forwards per token of every verifying model times ``tokens`` (``inf`` when P1 is out of
    range)."""
    from polyspec_theory.schemes import predict

    try:
        pred = predict(cascade)
    except PolyspecInputError:
        return math.inf
    per_token = sum(lv.forwards_per_token for lv in pred.levels[:-1])
    return float(per_token) * float(tokens) if math.isfinite(per_token) else math.inf


@dataclass(frozen=True)
class LengthModel:
    """A :class:`Cascade` compiled to tables for the simulator."""

    cascade: Cascade
    static: LengthStatic
    params: LengthParams = field(repr=False)
    gmax: tuple[int, ...]

    @classmethod
    def from_cascade(cls, cascade: Cascade, histograms: bool = True,
                     width: int | None = None) -> LengthModel:
        as_cascade(cascade, chain_only="the length simulator (simulate trees and schedules "
                   "with simulators.structures.simulate_structured)")
        if uses_runs(cascade):
            raise PolyspecInputError(
                "cascade", "acceptance runs over positions (a run law or PipeSpec's round): "
                "simulate it with simulators.runs.simulate_runs")
        m = cascade.n - 1
        gmax = block_bounds(cascade.thresholds, cascade.policy)
        need = max(gmax)
        w = _bucket(need) if width is None else as_int(width, "width", low=need)
        if histograms and m * (w + 2) ** 2 > MAX_HIST_BINS:
            raise PolyspecInputError(
                "histograms", f"blocks up to {need} tokens are too wide for the joint (G, L) "
                "histograms; run with histograms off")
        closed = all(isinstance(law, IIDGeometric) for law in cascade.laws)
        surv = np.stack([law.survival(w)[1:] for law in cascade.laws])
        alphas = np.array(
            [law.alpha if isinstance(law, IIDGeometric) else 0.5 for law in cascade.laws]
        )
        with np.errstate(divide="ignore"):
            inv = np.where(alphas >= 1.0, 0.0, 1.0 / np.log(alphas))
        g = np.arange(w + 1)
        # a verification round of M_i costs T_i(G + 1) plus its fixed per-round overhead o_i
        over = [cascade.models[i].overhead for i in range(m)]
        vcost = np.stack([np.asarray(cascade.costs[i](g + 1), dtype=np.float64) + over[i]
                          for i in range(m)])
        bottom = cascade.thresholds[-1] * cascade.costs[-1].t1
        affine = all(cascade.costs[i].table is None for i in range(m))
        params = LengthParams(
            thresholds=device_array(cascade.thresholds, np.int32),
            survival=device_array(surv, np.float64),
            inv_log_alpha=device_array(inv, np.float64),
            alpha_one=device_array(alphas >= 1.0, bool),
            verify_cost=device_array(vcost, np.float64),
            cost_base=device_array([cascade.costs[i].base + over[i] for i in range(m)],
                                   np.float64),
            cost_slope=device_array([cascade.costs[i].per_token for i in range(m)], np.float64),
            bottom_cost=device_array(bottom, np.float64),
        )
        static = LengthStatic(m, w, cascade.policy == "truncate", closed, bool(histograms),
                              affine)
        return cls(cascade, static, params, tuple(gmax))


def init_state(m: int, done=False) -> LengthState:
    """Fresh chain: nothing pending, the bottom pair verifies first."""
    z32, z64 = jnp.int32(0), jnp.int64(0)
    return LengthState(
        level=jnp.int32(m - 1),
        acc=tuple(z32 for _ in range(m - 1)),
        tokens=z64,
        done=jnp.asarray(done, dtype=bool),
        rounds=tuple(z64 for _ in range(m)),
        block_sum=tuple(z64 for _ in range(m)),
        emitted_sum=tuple(z64 for _ in range(m)),
        model_time=tuple(jnp.float64(0.0) for _ in range(m + 1)),
    )


# --- one event -------------------------------------------------------------------------------


def _pick(lvl, values, default):
    """``values[lvl]`` for a small static list of per-level scalars (``default`` past the
    end), as a chain of selects: elementwise, so it fuses where a gather would not."""
    out = default
    for i, v in enumerate(values):
        out = jnp.where(lvl == i, v, out)
    return out


def _accepted(params: LengthParams, static: LengthStatic, level, block, u):
    """Inverse CDF of the capped law of ``level`` at ``u``: one draw per round."""
    if static.closed_form:
        x = jnp.floor(jnp.log(u) * params.inv_log_alpha[level])
        a = jnp.minimum(x, block.astype(jnp.float64)).astype(jnp.int32)
        return jnp.where(params.alpha_one[level], block, a)
    # #{k : S_k > u} of every level by broadcast compares (m * width), then a select: no
    # per-chain gather of a survival row
    counts = [jnp.sum(params.survival[i] > u, dtype=jnp.int32) for i in range(static.m)]
    return jnp.minimum(_pick(level, counts[:-1], counts[-1]), block)


def _event(params: LengthParams, static: LengthStatic, target, u, lvl, acc, tokens, active):
    """The core of one event: block, accepted count, and the updated ``(next level, acc,
    tokens, stop)``. Inactive chains (``active`` false) leave ``acc`` and ``tokens`` as they
    are (every per-level update is masked by ``active``); ``lvl`` must be a valid level for
    the table lookups."""
    m = static.m
    th = params.thresholds
    thl = [th[i] for i in range(m)]
    block = _pick(lvl, acc, thl[m - 1])
    if static.truncate:
        block = jnp.minimum(block, _pick(lvl, thl[:m - 1], thl[m - 1]))
    a = _accepted(params, static, lvl, block, u)
    emitted = a + 1
    hit = [active & (lvl == i) for i in range(m)]
    new_acc, nxt = [], jnp.int32(m - 1)
    for i in range(m - 1):
        ai = jnp.where(hit[i], 0, acc[i]) + jnp.where(hit[i + 1], emitted, 0)
        new_acc.append(ai.astype(jnp.int32))
        nxt = jnp.where(hit[i + 1] & (ai >= thl[i]), jnp.int32(i), nxt)
    tokens = tokens + jnp.where(hit[0], emitted, 0).astype(jnp.int64)
    stop = hit[0] & (tokens >= target)
    return block, a, hit, nxt, tuple(new_acc), tokens, stop


def transition(params: LengthParams, static: LengthStatic, target, u, state: LengthState):
    """One verification event of one chain driven by the uniform ``u``; a no-op once
    ``state.done``. Returns ``(new_state, StepInfo)``."""
    m = static.m
    lvl = state.level
    active = ~state.done
    block, a, hit, nxt, acc, tokens, stop = _event(
        params, static, target, u, lvl, state.acc, state.tokens, active)
    e64, b64 = (a + 1).astype(jnp.int64), block.astype(jnp.int64)
    fwd = params.verify_cost[lvl, block]
    times = [t + jnp.where(hit[j], fwd, 0.0) for j, t in enumerate(state.model_time[:m])]
    times.append(state.model_time[m] + jnp.where(hit[m - 1], params.bottom_cost, 0.0))
    new = LengthState(
        level=jnp.where(active, nxt, lvl),
        acc=acc,
        tokens=tokens,
        done=state.done | stop,
        rounds=tuple(r + hit[i] for i, r in enumerate(state.rounds)),
        block_sum=tuple(r + jnp.where(hit[i], b64, 0) for i, r in enumerate(state.block_sum)),
        emitted_sum=tuple(
            r + jnp.where(hit[i], e64, 0) for i, r in enumerate(state.emitted_sum)),
        model_time=tuple(times),
    )
    return new, StepInfo(lvl, block, a, active)


class LengthKernel(NamedTuple):
    """BlackJAX-style kernel: ``state = init()``, ``state, info = step(key, state)``."""

    init: object
    step: object


def make_kernel(model: LengthModel, tokens_per_chain: int) -> LengthKernel:
    """``step(key, state) -> (state, info)``: one event drawing its uniform from ``key``."""
    target = jnp.int64(as_int(tokens_per_chain, "tokens_per_chain", low=1))
    params, static = model.params, model.static

    def init():
        return init_state(static.m)

    def step(key, state):
        bits = jax.random.bits(key, (), jnp.uint32)
        return transition(params, static, target, uniform_from_bits(bits), state)

    return LengthKernel(init, step)


# --- chunks of events over many chains -------------------------------------------------------


def split_bits(key, shape, axis: int = 0):
    """uint32 bits of ``shape`` from half as many uint64 threefry outputs: each threefry block
    yields 64 bits, and ``jax.random.bits(..., uint32)`` would XOR its two words into one, so
    splitting 64-bit outputs doubles the rate. Both halves are independent uniform words.
    Partitionable threefry (set by ``runtime``): values do not depend on the sharding."""
    shape = tuple(shape)
    half = list(shape)
    half[axis] = (shape[axis] + 1) // 2
    b = random_bits(key, half, jnp.uint64)
    hi = (b >> jnp.uint64(32)).astype(jnp.uint32)
    lo = b.astype(jnp.uint32)
    both = jnp.concatenate([hi, lo], axis=axis)
    return lax.slice_in_dim(both, 0, shape[axis], axis=axis)


_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment (odd, 2^64 / golden ratio)


def _mix64(z):
    """SplitMix64's output function (Steele, Lea & Flood 2014; the ``mix64variant13``
    finalizer): a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> jnp.uint64(30))) * jnp.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> jnp.uint64(27))) * jnp.uint64(0x94D049BB133111EB)
    return z ^ (z >> jnp.uint64(31))


def chunk_seed(key, chunk_index):
    """64-bit seed of chunk ``chunk_index``: threefry bits of ``fold_in(key, chunk_index)``."""
    return jax.random.bits(jax.random.fold_in(key, chunk_index), (), jnp.uint64)


def event_bits(seed, t, c, chains: int):
    """uint32 bits of event ``t`` of chain ``c``: the high word of SplitMix64 state number
    ``t * chains + c + 1`` from ``seed``. A pure function of ``(seed, t, c, chains)``, so the
    bits do not depend on how chains are sharded or padded; two 64-bit multiplies each."""
    idx = (jnp.asarray(t, jnp.uint64) * jnp.uint64(chains) + jnp.asarray(c, jnp.uint64)
           + jnp.uint64(1))
    return (_mix64(seed + jnp.uint64(_GOLDEN) * idx) >> jnp.uint64(32)).astype(jnp.uint32)


@partial(jax.jit, static_argnames=("chunk_len", "chains", "columns"))
def chunk_bits(key, chunk_index, chunk_len: int, chains: int, columns: int | None = None):
    """uint32 bits ``[chunk_len, columns]`` (default ``columns = chains``) of chunk
    ``chunk_index``: ``[t, c] = event_bits(seed, t, c, chains)``, the values :func:`run_chunk`
    draws (columns past ``chains`` feed padding chains). Jitted: called on its own it compiles
    one program, not one per eager operation (inside :func:`run_chunk` it is inlined)."""
    shape = (chunk_len, chains if columns is None else columns)
    t = lax.broadcasted_iota(jnp.uint64, shape, 0)
    c = lax.broadcasted_iota(jnp.uint64, shape, 1)
    return event_bits(chunk_seed(key, chunk_index), t, c, chains)


@partial(jax.jit, static_argnames=("static", "chunk_len", "chains"))
def run_chunk(params: LengthParams, static: LengthStatic, chunk_len: int, chains: int, target,
              key, chunk_index, state: LengthState):
    """``chunk_len`` events of every chain: ``lax.scan`` over events of ``vmap``-ed
    :func:`transition` logic over chains (time-major, so every field is a contiguous vector of
    chains).

    Event ``t`` of chain ``c < chains`` uses ``chunk_bits(key, chunk_index, chunk_len,
    chains)[t, c]``; chains past ``chains`` (padding up to a multiple of the device count) must
    start frozen.
    Returns ``(state, hist)``; ``hist[level, G, L]`` counts this chunk's rounds by block and
    emitted length (empty when ``static.histograms`` is off).

    The scan carries only the policy state (next level, pending blocks; a frozen chain has
    level ``m``) and, per level, the chunk's ``(rounds, sum G, sum L)`` packed in one int64
    and its model time (``[m, chains]`` arrays updated by one masked add each event); the
    top level's tokens are its emitted sum. Same events and uniforms as :func:`transition`
    (integer state identical; model times summed per chunk, then added)."""
    m, w = static.m, static.width
    stride = (w + 2) ** 2
    sink = m * stride
    # per-level (rounds, sum G, sum L) of the chunk packed in one int64 as 21-bit fields when
    # they cannot overflow (each is at most chunk_len * (w + 1)), else three counters
    shift = 21 if chunk_len * (w + 1) < (1 << 21) else 0
    levels = jnp.arange(m, dtype=jnp.int32)[:, None]

    def one(u, lev, acc, tokens):
        active = lev < m
        lvl = jnp.minimum(lev, m - 1)
        block, a, _, nxt, acc, tokens, stop = _event(
            params, static, target, u, lvl, acc, tokens, active)
        lev = jnp.where(active & ~stop, nxt, jnp.int32(m))
        fwd = (jnp.zeros((), jnp.float64) if static.affine
               else params.verify_cost.reshape(-1)[lvl * (w + 1) + block])
        return lev, acc, tokens, (jnp.where(active, lvl, m), block, a, fwd)

    step = jax.vmap(one)

    def body(carry, bits):
        lev, acc, counts, times = carry
        # the top level's emitted tokens are its emitted sum: no separate token counter
        top = (counts[0] >> (2 * shift)) if shift else counts[2][0]
        lev, acc, _, (lvl, block, a, fwd) = step(uniform_from_bits(bits), lev, acc,
                                                 state.tokens + top)
        hit = lvl[None, :] == levels
        b64, e64 = block.astype(jnp.int64), (a + 1).astype(jnp.int64)
        if shift:
            counts = counts + jnp.where(hit, 1 + (b64 << shift) + (e64 << (2 * shift)), 0)
        else:
            incs = (1, b64, e64)
            counts = tuple(c + jnp.where(hit, x, 0) for c, x in zip(counts, incs, strict=True))
        if not static.affine:
            times = times + jnp.where(hit, fwd, 0.0)
        if not static.histograms:
            return (lev, acc, counts, times), None
        code = jnp.where(lvl < m, lvl * stride + block * (w + 2) + a + 1, sink)
        return (lev, acc, counts, times), code

    nc = state.level.shape[0]
    # materialized before the scan: one fused pass over [chunk_len, nc] is faster here than
    # the same arithmetic inside every event
    bits = chunk_bits(key, chunk_index, chunk_len, chains, nc)
    lev0 = jnp.where(state.done, jnp.int32(m), state.level)
    zero = jnp.zeros((m, nc), jnp.int64)
    counts0 = zero if shift else (zero, zero, zero)
    carry = (lev0, state.acc, counts0, jnp.zeros((m, nc), jnp.float64))
    (lev, acc, counts, times), out = lax.scan(body, carry, bits)
    done = lev == m
    # a chain stops at the end of a top-level round, after which the bottom verifies next
    level = jnp.where(done, jnp.where(state.done, state.level, jnp.int32(m - 1)), lev)
    if shift:
        mask = jnp.int64((1 << shift) - 1)
        counts = (counts & mask, (counts >> shift) & mask, counts >> (2 * shift))
    if static.affine:
        times = (counts[0].astype(jnp.float64) * params.cost_base[:, None]
                 + counts[1].astype(jnp.float64) * params.cost_slope[:, None])
    tokens = state.tokens + counts[2][0]
    rounds = tuple(state.rounds[i] + counts[0][i] for i in range(m))
    block_sum = tuple(state.block_sum[i] + counts[1][i] for i in range(m))
    emitted_sum = tuple(state.emitted_sum[i] + counts[2][i] for i in range(m))
    bottom = counts[0][m - 1].astype(jnp.float64) * params.bottom_cost
    model_time = tuple(state.model_time[i] + times[i] for i in range(m)) + (
        state.model_time[m] + bottom,)
    state = LengthState(level, acc, tokens, done, rounds, block_sum, emitted_sum, model_time)
    if not static.histograms:
        return state, jnp.zeros((m, 0, 0), jnp.int64)
    hist = jnp.zeros(sink + 1, jnp.int64).at[out.ravel()].add(1)
    return state, hist[:-1].reshape(m, w + 2, w + 2)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelStats:
    """Per-model Monte-Carlo estimates (ratio estimators over chains, 95 % CIs).

    ``phi``: rounds of ``S_j`` per block of level ``j-1`` (None for the target);
    ``mean_block``/``mean_emitted``/histograms: None for ``M_n`` (it verifies nothing)."""

    name: str
    phi: RatioEstimate | None
    mean_block: RatioEstimate | None
    mean_emitted: RatioEstimate | None
    forwards_per_token: RatioEstimate
    time_per_token: RatioEstimate
    time_share: float
    block_hist: np.ndarray | None  # counts by G (index = G)
    emitted_hist: np.ndarray | None  # counts by L (index = L)
    joint_hist: np.ndarray | None = field(default=None, repr=False)  # counts [G, L]

    def to_dict(self) -> dict:
        def est(e):
            return None if e is None else e.to_dict()

        def hist(h):
            return None if h is None else np.trim_zeros(h, "b").tolist()

        return {
            "name": self.name,
            "phi": est(self.phi),
            "mean_block": est(self.mean_block),
            "mean_emitted": est(self.mean_emitted),
            "forwards_per_token": est(self.forwards_per_token),
            "time_per_token": est(self.time_per_token),
            "time_share": self.time_share,
            "block_hist": hist(self.block_hist),
            "emitted_hist": hist(self.emitted_hist),
        }


@dataclass(frozen=True)
class LengthResult:
    speedup: RatioEstimate
    time_per_token: RatioEstimate
    levels: tuple[LevelStats, ...]
    tokens: int
    chains: int
    rounds: tuple[int, ...]  # verifications per pair level
    drafted_positions: int  # sum over pair levels of all verified blocks G_i
    policy: str
    seed: int | None  # None when a PRNG key was passed
    ci_method: str = CI_METHOD
    chain_tokens: np.ndarray = field(default=None, repr=False)  # [chains]
    chain_time: np.ndarray = field(default=None, repr=False)  # [chains]
    chain_forwards: np.ndarray = field(default=None, repr=False)  # [chains, n] per model
    chain_model_time: np.ndarray = field(default=None, repr=False)  # [chains, n]

    @property
    def forwards(self) -> tuple[int, ...]:
        """Total forwards of each model (target first)."""
        return tuple(int(x) for x in self.chain_forwards.sum(axis=0))

    @property
    def model_times(self) -> tuple[float, ...]:
        """Total time spent in each model's forwards."""
        return tuple(float(x) for x in self.chain_model_time.sum(axis=0))

    def to_dict(self) -> dict:
        return {
            "speedup": self.speedup.value,
            "ci95": [self.speedup.low, self.speedup.high],
            "se": self.speedup.se,
            "time_per_token": self.time_per_token.value,
            "tokens": self.tokens,
            "chains": self.chains,
            "seed": self.seed,
            "policy": self.policy,
            "rounds": list(self.rounds),
            "drafted_positions": self.drafted_positions,
            "ci_method": self.ci_method,
            "levels": [lv.to_dict() for lv in self.levels],
        }


def chain_totals(host: dict):
    """A run's per-chain counters on the host: ``(tokens, rounds)`` as float64, the model times
    ``[chains, n]`` and each chain's total time."""
    tok = host["tokens"].astype(np.float64)
    rounds = host["rounds"].astype(np.float64)
    mt = host["model_time"]
    return tok, rounds, mt, mt.sum(axis=1)


def _summarize(model: LengthModel, st: dict, hist, seed: int) -> LengthResult:
    cas = model.cascade
    m, n = model.static.m, cas.n
    tok, rounds, mt, total = chain_totals(st)
    t1 = cas.costs[0].t1
    theta_b = cas.thresholds[-1]
    levels = []
    fwds = np.concatenate([rounds, theta_b * rounds[:, m - 1:m]], axis=1)
    for j in range(n):
        fwd = fwds[:, j]
        phi = None if j == 0 else ratio_estimate(fwd, rounds[:, j - 1])
        if j < m:
            mb = ratio_estimate(st["block_sum"][:, j], rounds[:, j])
            me = ratio_estimate(st["emitted_sum"][:, j], rounds[:, j])
        else:
            mb = me = None
        joint = hist[j] if (hist is not None and j < m) else None
        levels.append(LevelStats(
            name=cas.models[j].name,
            phi=phi,
            mean_block=mb,
            mean_emitted=me,
            forwards_per_token=ratio_estimate(fwd, tok),
            time_per_token=ratio_estimate(mt[:, j], tok),
            time_share=float(mt[:, j].sum() / total.sum()),
            block_hist=None if joint is None else joint.sum(axis=1),
            emitted_hist=None if joint is None else joint.sum(axis=0),
            joint_hist=joint,
        ))
    return LengthResult(
        speedup=ratio_estimate(tok, total, scale=t1),
        time_per_token=ratio_estimate(total, tok),
        levels=tuple(levels),
        tokens=int(st["tokens"].sum()),
        chains=int(tok.size),
        rounds=tuple(int(x) for x in st["rounds"].sum(axis=0)),
        drafted_positions=int(st["block_sum"].sum()),
        policy=cas.policy,
        seed=seed,
        chain_tokens=st["tokens"],
        chain_time=total,
        chain_forwards=fwds.astype(np.int64),
        chain_model_time=mt,
    )


def _stack(fields) -> np.ndarray:
    """A tuple of per-level ``[chains]`` arrays -> ``[chains, levels]`` on the host."""
    return np.stack([to_host(f) for f in fields], axis=1)


def simulate_lengths(cascade: Cascade, tokens: int, seed: int = 0, *, chains: int = 1024,
                     chunk_len: int | None = None, devices=None, progress=None,
                     max_events: int | None = None) -> LengthResult:
    """Monte-Carlo speedup and per-level accounting of ``cascade`` (compare with P1).

    ``tokens``: total emitted tokens asked for (each of ``chains`` independent chains runs
    until it has emitted ``ceil(tokens / chains)``, finishing its top-level round).
    ``devices``: the devices to spread chains over (default all; results do not depend on
    it). ``progress``: a callable ``f(tokens_so_far, tokens_asked)`` called between chunks.
    ``cascade`` may be a prebuilt :class:`LengthModel`. ``chunk_len`` (events per chain per
    compiled chunk) defaults to a power of two from ``tokens / chains`` in [32, 512]. Results
    depend on ``(seed, chains, chunk_len)`` only: same seed -> identical result.
    Histograms are on when :func:`histograms_fit` (pass a :class:`LengthModel` built with
    ``histograms=False`` to skip them).
    ``max_events``: stop with an error once any chain has run that many events.
    """
    tokens = as_int(tokens, "tokens", low=1, high=10**13)
    key = make_key(seed)  # an int seed or a typed PRNG key
    seed = seed if isinstance(seed, int) else None
    chains = as_chains(chains)
    per_chain = math.ceil(tokens / chains)
    if chunk_len is None:
        chunk_len = min(512, max(32, 1 << (per_chain - 1).bit_length()))
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=2**20)
    if max_events is not None:
        max_events = as_int(max_events, "max_events", low=1)
    model = cascade if isinstance(cascade, LengthModel) else LengthModel.from_cascade(
        cascade, histograms=isinstance(cascade, Cascade) and histograms_fit(cascade))
    static = model.static
    mesh = chain_mesh(devices)
    ndev = mesh.devices.size
    padded = -(-chains // ndev) * ndev
    done0 = np.zeros(padded, dtype=bool)
    done0[chains:] = True
    state = shard_chains(host_chains(init_state(static.m), padded)._replace(done=done0), mesh)
    target = np.int64(per_chain)
    hist = None
    chunk = 0
    while True:
        state, h = run_chunk(model.params, static, chunk_len, chains, target, key,
                             np.int64(chunk), state)
        chunk += 1
        if static.histograms:
            hist = to_host(h) if hist is None else hist + to_host(h)
        if progress is not None:
            progress(int(to_host(state.tokens)[:chains].sum()), per_chain * chains)
        if to_host(state.done).all():
            break
        if max_events is not None and chunk * chunk_len >= max_events:
            raise PolyspecInputError(
                "max_events", f"chains not finished after {chunk * chunk_len} events per chain")
    host = {
        "tokens": to_host(state.tokens)[:chains],
        "rounds": _stack(state.rounds)[:chains],
        "block_sum": _stack(state.block_sum)[:chains],
        "emitted_sum": _stack(state.emitted_sum)[:chains],
        "model_time": _stack(state.model_time)[:chains],
    }
    return _summarize(model, host, hist, seed)
