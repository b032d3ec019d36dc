"""Monte Carlo of a cascade decoded in a synchronous serving batch (docs/theory.md Part III-C,
model B0), in JAX: the independent check of B1/B2.

The simulator runs the lockstep algorithm itself, event by event. A *chain* is one batch of
``b`` sequences; its state is the pending block of every sequence at every pair level
(``acc[i, j]``) and the pair level that verifies next. One event is one batched verification
round at pair level ``i`` (verifier ``M_i``, 0-based, ``m = n - 1`` pair levels):

* bottom pair (``i = m - 1``): ``M_n`` runs ``theta_{m-1}`` batched forwards (cost
  ``theta_{m-1} T_n(b, 1)``), every block is ``theta_{m-1}``; above it the block of sequence
  ``j`` is ``acc[i, j] >= theta_i`` (``"truncate"``: ``theta_i``, the excess dropped);
* ``M_i`` scores ``max_j G_ij + 1`` positions for every slot: cost ``T_i(b, max_j G_ij + 1)``
  plus its per-round overhead ``o_i`` (``Model.overhead``, once per batched round);
  each sequence's accepted count ``A_ij`` is drawn from the pair's law capped at ``G_ij`` with
  one uniform by inverse CDF (``A = min(#{k >= 1 : S_k > u}, G)``), independently per sequence;
* each sequence adds ``L_ij = A_ij + 1`` to its parent block ``acc[i-1, j]`` *unless that
  block is already full* (``>= theta_{i-1}``: the sequence is waiting, its tokens are
  discarded); at the top (``i = 0``) the ``L_0j`` are the batch's output;
* the parent verifies next when *every* sequence's parent block is full, else the bottom pair.

Chains are ``vmap``-ed; events run under ``lax.scan`` in chunks. A chain stops at the end of
the first top-level round at which the batch has emitted ``>= tokens_per_chain`` tokens; top
rounds are iid cycles (all blocks empty at their start), so by Wald's identity the ratio
estimator ``sum(tokens)/sum(time)`` over independent chains is consistent, with a
delta-method CI. Random bits: ``jax.random.bits(fold_in(key, chunk), (chunk_len, chains,
b))`` — a pure function of the seed; float64 throughout (``runtime`` turns it on).
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
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.serving.batch import batch_cascade

from .length import block_bounds, chain_totals
from .runtime import (
    RatioEstimate,
    as_chains,
    device_array,
    host_chains,
    make_key,
    random_bits,
    ratio_estimate,
    to_host,
    uniform_from_bits,
)

__all__ = [
    "ServingStatic",
    "ServingParams",
    "ServingState",
    "ServingModel",
    "ServingLevel",
    "ServingResult",
    "init_state",
    "transition",
    "run_chunk",
    "simulate_serving",
    "MAX_SIM_BATCH",
]

MAX_SIM_BATCH = 4096


class ServingStatic(NamedTuple):
    """Compile-time structure: pair levels ``m``, batch ``b``, table width, truncate."""

    m: int
    b: int
    width: int
    truncate: bool


class ServingParams(NamedTuple):
    thresholds: jax.Array  # int32[m]
    survival: jax.Array  # f64[m, width]: S_k = P(A >= k), k = 1..width
    verify_cost: jax.Array  # f64[m, width + 1]: T_i(b, g + 1), g = 0..width
    bottom_cost: jax.Array  # f64: theta_{m-1} T_n(b, 1)


class ServingState(NamedTuple):
    """One chain (one batch). ``acc`` has ``max(m - 1, 1)`` rows (a dummy row when m = 1)."""

    level: jax.Array  # int32
    acc: jax.Array  # int32[max(m-1, 1), b]
    tokens: jax.Array  # int64: tokens emitted by the whole batch
    done: jax.Array  # bool
    rounds: jax.Array  # int64[m]: batched verifications per pair level
    max_block_sum: jax.Array  # int64[m]: sum of max_j G_ij
    block_sum: jax.Array  # int64[m]: sum over rounds and sequences of G_ij
    emitted_sum: jax.Array  # int64[m]: sum over rounds and sequences of L_ij
    model_time: jax.Array  # f64[m + 1]


def _bucket(w: int) -> int:
    return max(8, 1 << (int(w) - 1).bit_length())


@dataclass(frozen=True)
class ServingModel:
    """A :class:`Cascade` at batch ``b`` compiled to tables (costs ``T_i(b, .)``)."""

    cascade: Cascade
    batch: int
    static: ServingStatic
    params: ServingParams = field(repr=False)
    t_ar: float  # T_1(b, 1)

    @classmethod
    def from_cascade(cls, cascade: Cascade, batch) -> ServingModel:
        as_cascade(cascade)
        b = as_int(batch, "batch", low=1, high=MAX_SIM_BATCH)
        bc = batch_cascade(cascade, b)
        m = cascade.n - 1
        w = _bucket(max(block_bounds(cascade.thresholds, cascade.policy)))
        surv = np.stack([law.survival(w)[1:] for law in cascade.laws])
        g = np.arange(w + 1)
        # a batched verification round of M_i: T_i(b, max_j G_ij + 1) plus its per-round
        # overhead o_i (once per batched round, as in B2)
        vcost = np.stack([np.asarray(bc.costs[i](g + 1), dtype=np.float64)
                          + cascade.models[i].overhead for i in range(m)])
        params = ServingParams(
            thresholds=device_array(cascade.thresholds, np.int32),
            survival=device_array(surv, np.float64),
            verify_cost=device_array(vcost, np.float64),
            bottom_cost=device_array(cascade.thresholds[-1] * bc.costs[-1].t1, np.float64),
        )
        static = ServingStatic(m, b, w, cascade.policy == "truncate")
        return cls(cascade, b, static, params, float(bc.costs[0].t1))


def init_state(m: int, b: int, done=False) -> ServingState:
    z = np.zeros(m, np.int64)
    return ServingState(
        level=np.int32(m - 1), acc=np.zeros((max(m - 1, 1), b), np.int32),
        tokens=np.int64(0), done=jnp.asarray(done, dtype=bool), rounds=z, max_block_sum=z,
        block_sum=z, emitted_sum=z, model_time=np.zeros(m + 1, np.float64))


def transition(params: ServingParams, static: ServingStatic, target, u,
               state: ServingState) -> ServingState:
    """One batched verification event of one chain driven by ``u`` (``b`` uniforms); a no-op
    once ``state.done``."""
    m, b = static.m, static.b
    th = params.thresholds
    lvl = state.level
    active = ~state.done
    is_bottom = lvl == m - 1
    if m > 1:
        own = state.acc[jnp.minimum(lvl, m - 2)]
        block = jnp.where(is_bottom, th[m - 1], own)
    else:
        block = jnp.full((b,), th[0], jnp.int32)
    if static.truncate:
        block = jnp.minimum(block, th[lvl])
    surv = params.survival[lvl]
    a = jnp.minimum(jnp.sum(surv[None, :] > u[:, None], axis=1, dtype=jnp.int32), block)
    e = a + 1
    gmax = jnp.max(block)
    fwd = params.verify_cost[lvl, gmax]
    acc = state.acc
    nxt = jnp.int32(m - 1)
    if m > 1:
        rows = jnp.arange(m - 1, dtype=jnp.int32)[:, None]
        full = acc >= th[: m - 1, None]
        # own block emptied; the parent's non-full blocks receive the emitted tokens
        acc = jnp.where((rows == lvl) & active, 0, acc)
        add = (rows == lvl - 1) & ~full & active
        acc = acc + jnp.where(add, e[None, :], 0)
        parent_full = jnp.all(jnp.where(rows == lvl - 1, acc >= th[: m - 1, None], True))
        nxt = jnp.where((lvl > 0) & parent_full, lvl - 1, nxt)
    top = active & (lvl == 0)
    tokens = state.tokens + jnp.where(top, jnp.sum(e, dtype=jnp.int64), 0)
    stop = top & (tokens >= target)
    hit = (jnp.arange(m) == lvl) & active
    h64 = hit.astype(jnp.int64)
    mt = state.model_time.at[:m].add(jnp.where(hit, fwd, 0.0))
    mt = mt.at[m].add(jnp.where(active & is_bottom, params.bottom_cost, 0.0))
    return ServingState(
        level=jnp.where(active, nxt, lvl).astype(jnp.int32), acc=acc, tokens=tokens,
        done=state.done | stop, rounds=state.rounds + h64,
        max_block_sum=state.max_block_sum + h64 * gmax.astype(jnp.int64),
        block_sum=state.block_sum + h64 * jnp.sum(block, dtype=jnp.int64),
        emitted_sum=state.emitted_sum + h64 * jnp.sum(e, dtype=jnp.int64),
        model_time=mt)


@partial(jax.jit, static_argnames=("static", "chunk_len"))
def run_chunk(params: ServingParams, static: ServingStatic, chunk_len: int, target, key,
              chunk_index, state: ServingState) -> ServingState:
    """``chunk_len`` events of every chain (``lax.scan`` over events of ``vmap``-ed
    :func:`transition`); event ``t`` of chain ``c`` uses
    ``bits(fold_in(key, chunk_index), (chunk_len, chains, b))[t, c]``."""
    chains = state.level.shape[0]
    bits = random_bits(jax.random.fold_in(key, chunk_index), (chunk_len, chains, static.b))
    step = jax.vmap(lambda u, s: transition(params, static, target, u, s))

    def body(st, bt):
        return step(uniform_from_bits(bt), st), None

    state, _ = lax.scan(body, state, bits)
    return state


@dataclass(frozen=True)
class ServingLevel:
    """Per-model estimates (ratio estimators over chains). ``phi_batch``: batched rounds of
    ``S_i`` per batched round of ``S_{i-1}`` (None for the target); block and emitted fields
    None for ``M_n``. ``mean_block``/``mean_emitted`` are per sequence."""

    name: str
    phi_batch: RatioEstimate | None
    mean_max_block: RatioEstimate | None
    mean_block: RatioEstimate | None
    mean_emitted: RatioEstimate | None
    time_share: float

    def to_dict(self) -> dict:
        def est(x):
            return None if x is None else x.to_dict()

        return {"name": self.name, "phi_batch": est(self.phi_batch),
                "mean_max_block": est(self.mean_max_block), "mean_block": est(self.mean_block),
                "mean_emitted": est(self.mean_emitted), "time_share": self.time_share}


@dataclass(frozen=True)
class ServingResult:
    """``speedup`` = ``T_1(b,1) tokens / (b time)`` (throughput against autoregressive ``M_1``
    at the same batch); ``tokens_per_time`` = batch throughput; ``time_per_token`` = per
    sequence. 95 % delta-method CIs; ``.se`` for other levels."""

    batch: int
    speedup: RatioEstimate
    tokens_per_time: RatioEstimate
    time_per_token: RatioEstimate
    levels: tuple[ServingLevel, ...]
    tokens: int
    chains: int
    seed: int | None  # None when a PRNG key was passed
    policy: str
    chain_tokens: np.ndarray = field(default=None, repr=False)
    chain_time: np.ndarray = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """The shape of the chains' and trees' results (``speedup`` a number, ``se`` and
        ``ci95`` beside it; ``time_per_token`` a number), plus the batch's throughput and
        every estimate with its CI under ``estimates``."""
        est = {"speedup": self.speedup.to_dict(),
               "tokens_per_time": self.tokens_per_time.to_dict(),
               "time_per_token": self.time_per_token.to_dict()}
        return {"batch": self.batch, "speedup": self.speedup.value, "se": self.speedup.se,
                "ci95": [self.speedup.low, self.speedup.high],
                "time_per_token": self.time_per_token.value,
                "tokens_per_time": self.tokens_per_time.value, "estimates": est,
                "tokens": self.tokens,
                "chains": self.chains, "seed": self.seed, "policy": self.policy,
                "levels": [lv.to_dict() for lv in self.levels]}


def _summarize(model: ServingModel, host: dict, seed: int) -> ServingResult:
    cas = model.cascade
    m, b = model.static.m, model.batch
    tok, rounds, mt, total = chain_totals(host)
    levels = []
    for j in range(cas.n):
        if j == 0:
            phi = None
        elif j < m:
            phi = ratio_estimate(rounds[:, j], rounds[:, j - 1])
        else:  # M_n: theta_{m-1} forwards per bottom round (deterministic)
            phi = ratio_estimate(cas.thresholds[-1] * rounds[:, m - 1], rounds[:, m - 1])
        if j < m:
            mmb = ratio_estimate(host["max_block_sum"][:, j], rounds[:, j])
            mb = ratio_estimate(host["block_sum"][:, j], b * rounds[:, j])
            me = ratio_estimate(host["emitted_sum"][:, j], b * rounds[:, j])
        else:
            mmb = mb = me = None
        levels.append(ServingLevel(cas.models[j].name, phi, mmb, mb, me,
                                   float(mt[:, j].sum() / total.sum())))
    return ServingResult(
        batch=b,
        speedup=ratio_estimate(tok, total, scale=model.t_ar / b),
        tokens_per_time=ratio_estimate(tok, total),
        time_per_token=ratio_estimate(total, tok, scale=float(b)),
        levels=tuple(levels), tokens=int(host["tokens"].sum()), chains=int(tok.size),
        seed=seed, policy=cas.policy, chain_tokens=host["tokens"], chain_time=total)


def simulate_serving(cascade, batch, tokens: int, seed: int = 0, *, chains: int = 256,
                     chunk_len: int | None = None, max_events: int | None = None
                     ) -> ServingResult:
    """Monte-Carlo throughput and speedup of ``cascade`` decoded in lockstep batches of
    ``batch`` sequences (compare with :func:`polyspec_theory.serving.batch.predict_batch`).

    ``tokens``: total tokens asked for over all chains (each chain = one batch runs until it
    has emitted ``ceil(tokens / chains)``, finishing its top-level round). ``cascade`` may be
    a prebuilt :class:`ServingModel` (then ``batch`` must match). Results depend on
    ``(seed, chains, chunk_len)`` only: same seed, same numbers.
    """
    tokens = as_int(tokens, "tokens", low=1, high=10**12)
    key = make_key(seed)  # an int seed or a typed PRNG key
    seed = seed if isinstance(seed, int) else None
    chains = as_chains(chains)
    if isinstance(cascade, ServingModel):
        model = cascade
        if as_int(batch, "batch", low=1) != model.batch:
            raise PolyspecInputError("batch", f"the model was built for batch {model.batch}, "
                                     f"got {batch}")
    else:
        model = ServingModel.from_cascade(cascade, batch)
    per_chain = math.ceil(tokens / chains)
    if chunk_len is None:
        chunk_len = 64
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=1 << 16)
    if max_events is not None:
        max_events = as_int(max_events, "max_events", low=1)
    static = model.static
    state = host_chains(init_state(static.m, static.b), chains)
    target = np.int64(per_chain)
    chunk = 0
    while True:
        state = run_chunk(model.params, static, chunk_len, target, key, np.int64(chunk),
                          state)
        chunk += 1
        if bool(to_host(state.done).all()):
            break
        if max_events is not None and chunk * chunk_len >= max_events:
            raise PolyspecInputError(
                "max_events", f"chains not finished after {chunk * chunk_len} events per chain")
    host = {k: to_host(getattr(state, k)) for k in
            ("tokens", "rounds", "max_block_sum", "block_sum", "emitted_sum", "model_time")}
    return _summarize(model, host, seed)


# The cascades of the ``polyspec verify`` B rows (simulators/verify.py: check_b).
VERIFY_TWO_MODEL = {
    "name": "roofline-pair",
    "models": [{"name": "target", "cost": {"roofline": {"overhead": 0.05, "weight_time": 1.0,
                                                        "compute_time": 0.01}}},
               {"name": "draft", "cost": {"roofline": {"weight_time": 0.05,
                                                       "compute_time": 0.0005}}}],
    "acceptance": [{"beta": [4.0, 1.5]}],
    "thresholds": [5],
}
VERIFY_THREE_LEVEL = {
    "name": "three-level-mixed-costs",
    "models": [
        {"name": "target", "cost": {"roofline": {"overhead": 0.1, "weight_time": 1.0,
                                                 "compute_time": 0.05, "kv_time": 0.002}}},
        {"name": "mid", "cost": {"batch_table": {"1": [0.2, 0.21, 0.22], "4": [0.25, 0.3],
                                                 "16": [0.4, 0.6, 0.8]}}},
        {"name": "ngram", "cost": 0.03}],
    "acceptance": [{"alpha": 0.7}, {"positional": [0.8, 0.5]}],
    "thresholds": [4, 2],
}
# a per-round overhead of the target with a batch (O1 with B2; issue 27's example)
VERIFY_OVERHEAD = {
    "name": "overhead-pair",
    "models": [{"name": "target", "cost": 1.0, "overhead": 0.5},
               {"name": "draft", "cost": 0.05}],
    "acceptance": [{"alpha": 0.7}],
    "thresholds": [4],
}
