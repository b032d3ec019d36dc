"""Monte Carlo of parallel draft-verify (PEARL; docs/theory.md Part VI-PL), in JAX: the
independent check of PL1-PL3.

The simulator runs PL0's protocol step by step. A *chain* is one lockstep batch of ``b``
sequences; each sequence carries its mode (pre-/post-verify) and its age (drafts accepted
since the drafter's last resync). One step of a chain:

* its cost is ``max(gamma T_d(b), T_t(b + (gamma - 1) n_post)) + o`` with ``n_post`` counted
  from the modes before the step;
* every sequence checks its drafts one by one -- 1 in pre-verify, ``gamma`` in post-verify,
  the ``i``-th at age ``a + i`` accepted iff its own uniform is below the law's acceptance at
  that age -- and stops at the first rejection;
* pre-verify: accepted -> post-verify (age 1), 1 token; rejected -> 1 token (the correction).
  Post-verify: all accepted -> ``gamma`` tokens, age + ``gamma``; ``n`` accepted then a
  rejection -> ``n + 1`` tokens, back to pre-verify (age 0).

Every chain starts in all-pre-verify. ``burn_in`` steps are run and not counted (the start-up
transient decays geometrically), then ``steps`` counted steps. Long-run estimates are ratio
estimators over independent chains with delta-method CIs; the finite-run quantities of PL3
(``burn_in = 0``: tokens as nano-PEARL's benchmark counts them, its per-sequence MAT) are
means over chains. Random bits ``bits(fold_in(key, chunk), (chunk_len, chains, b, gamma))``:
a pure function of the seed; float64 throughout.
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

from polyspec_theory.errors import as_int
from polyspec_theory.pipelines.pearl import pearl_costs, run_acceptance

from .runtime import (
    RatioEstimate,
    make_key,
    mean_estimate,
    ratio_estimate,
    to_host,
    uniform_from_bits,
)

__all__ = ["PearlState", "PearlSimResult", "pearl_step", "simulate_pearl", "MAX_SIM_BATCH",
           "MAX_SIM_GAMMA"]

MAX_SIM_BATCH = 4096
MAX_SIM_GAMMA = 256
BITS_PER_CHUNK = 1 << 22  # uint32 draws per chunk (memory bound)


class PearlState(NamedTuple):
    """One chain: per sequence ``post`` (bool), ``age``, verified tokens ``ver`` and
    rejections ``rej`` of the counted steps; the chain's counted ``time`` and post-steps."""

    post: jax.Array  # bool[b]
    age: jax.Array  # int32[b]
    ver: jax.Array  # int64[b]
    rej: jax.Array  # int64[b]
    time: jax.Array  # f64
    post_steps: jax.Array  # int64


def init_state(b: int) -> PearlState:
    return PearlState(post=jnp.zeros(b, bool), age=jnp.zeros(b, jnp.int32),
                      ver=jnp.zeros(b, jnp.int64), rej=jnp.zeros(b, jnp.int64),
                      time=jnp.float64(0.0), post_steps=jnp.int64(0))


def pearl_step(accept, costs, gamma: int, u, counted, state: PearlState) -> PearlState:
    """One lockstep step of one chain. ``accept``: f64[K + 1], the acceptance at ages
    ``0..K`` (ages past ``K`` use ``accept[K]``); ``costs``: f64[b + 1], the step's cost by
    ``n_post``; ``u``: f64[b, gamma] uniforms; ``counted``: whether the step is counted."""
    top = accept.shape[0] - 1
    n_post = jnp.sum(state.post, dtype=jnp.int32)
    ages = jnp.minimum(state.age[:, None] + jnp.arange(gamma, dtype=jnp.int32)[None, :], top)
    ok = u < accept[ages]  # check i of each sequence accepted
    checks = jnp.where(state.post, gamma, 1)
    lead = jnp.sum(jnp.cumprod(ok, axis=1), axis=1, dtype=jnp.int32)  # leading accepts
    acc = jnp.minimum(lead, checks)
    full = acc == checks
    tokens = jnp.where(full, checks, acc + 1).astype(jnp.int64)
    age = jnp.where(full, jnp.minimum(state.age + checks, top), 0).astype(jnp.int32)
    c = counted.astype(jnp.int64)
    return PearlState(
        post=full, age=age, ver=state.ver + c * tokens,
        rej=state.rej + c * (~full).astype(jnp.int64),
        time=state.time + jnp.where(counted, costs[n_post], 0.0),
        post_steps=state.post_steps + c * n_post.astype(jnp.int64))


@partial(jax.jit, static_argnames=("gamma", "chunk_len"))
def _run_chunk(accept, costs, gamma: int, chunk_len: int, key, chunk_index, first_step,
               first_counted, state: PearlState) -> PearlState:
    chains, b = state.post.shape
    bits = jax.random.bits(jax.random.fold_in(key, chunk_index), (chunk_len, chains, b, gamma),
                           jnp.uint32)
    step = jax.vmap(lambda u, counted, s: pearl_step(accept, costs, gamma, u, counted, s),
                    in_axes=(0, None, 0))

    def body(st, xs):
        bt, t = xs
        return step(uniform_from_bits(bt), t >= first_counted, st), None

    ts = first_step + jnp.arange(chunk_len, dtype=jnp.int64)
    state, _ = lax.scan(body, state, (bits, ts))
    return state


@dataclass(frozen=True)
class PearlSimResult:
    """Long-run estimates (ratio estimators, 95 % CIs; ``.se`` for other levels):
    ``speedup`` (against the autoregressive target at the same batch), ``time_per_token`` (per
    sequence), ``tokens_per_time`` (the batch), ``tokens_per_step`` and ``post_share`` per
    sequence. Finite-run estimates of the counted steps (means over chains): ``counted``
    tokens per sequence as nano-PEARL's benchmark counts them (``1 + verified`` + the
    ``gamma - 1`` pending drafts when ending in post-verify), ``mat`` (per-sequence MAT,
    averaged), ``time`` of the counted steps; meaningful as PL3's with ``burn_in = 0``."""

    batch: int
    gamma: int
    speedup: RatioEstimate
    time_per_token: RatioEstimate
    tokens_per_time: RatioEstimate
    tokens_per_step: RatioEstimate
    post_share: RatioEstimate
    counted: RatioEstimate
    mat: RatioEstimate
    time: RatioEstimate
    steps: int
    burn_in: int
    chains: int
    seed: int
    tokens: int

    def to_dict(self) -> dict:
        est = {k: getattr(self, k).to_dict() for k in (
            "speedup", "time_per_token", "tokens_per_time", "tokens_per_step", "post_share",
            "counted", "mat", "time")}
        return {"scheme": "pearl", "batch": self.batch, "gamma": self.gamma,
                "speedup": self.speedup.value, "se": self.speedup.se,
                "ci95": [self.speedup.low, self.speedup.high],
                "time_per_token": self.time_per_token.value,
                "tokens_per_time": self.tokens_per_time.value, "estimates": est,
                "steps": self.steps, "burn_in": self.burn_in, "chains": self.chains,
                "seed": self.seed, "tokens": self.tokens}


def _tables(cascade, batch: int):
    """The law's acceptance by age (ages ``0..K``, the tail last) and the step costs by
    ``n_post``, charged as PL0 states; the autoregressive step."""
    gamma = cascade.thresholds[0]
    run = run_acceptance(cascade.laws[0])
    accept = np.array(list(run.accept) + [run.ratio], dtype=np.float64)
    draft, target_cost, ar = pearl_costs(cascade, batch)
    over = cascade.models[0].overhead
    costs = np.array([max(gamma * draft, target_cost(batch + (gamma - 1) * k)) + over
                      for k in range(batch + 1)], dtype=np.float64)
    return accept, costs, ar


def simulate_pearl(cascade, batch=None, steps: int = 10_000, seed: int = 0, *,
                   chains: int = 256, burn_in: int = 1000, chunk_len: int | None = None
                   ) -> PearlSimResult:
    """Monte Carlo of a two-model ``cascade`` under parallel draft-verify (``thresholds[0]`` =
    ``gamma``, the target's ``overhead`` = the handshake) in lockstep batches of ``batch``
    (``None``: 1): ``chains`` independent batches, ``burn_in`` uncounted then ``steps``
    counted steps each. Same seed, same numbers."""
    from polyspec_theory.pipelines.pearl import _check

    cascade = _check(cascade)
    b = 1 if batch is None else as_int(batch, "batch", low=1, high=MAX_SIM_BATCH)
    gamma = as_int(cascade.thresholds[0], "thresholds[0]", low=1, high=MAX_SIM_GAMMA)
    steps = as_int(steps, "steps", low=1, high=10**9)
    burn_in = as_int(burn_in, "burn_in", low=0, high=10**9)
    seed = as_int(seed, "seed", low=0, high=2**63 - 1)
    chains = as_int(chains, "chains", low=2, high=2**20)
    if chunk_len is None:
        chunk_len = max(1, min(256, BITS_PER_CHUNK // (chains * b * gamma)))
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=1 << 16)
    accept, costs, ar = _tables(cascade, b)
    state = jax.vmap(lambda _: init_state(b))(jnp.arange(chains))
    key = make_key(seed)
    total = burn_in + steps
    acc_j, cost_j = jnp.asarray(accept), jnp.asarray(costs)
    for k in range(math.ceil(total / chunk_len)):
        # the last chunk is cut to end exactly at the last counted step
        length = min(chunk_len, total - k * chunk_len)
        state = _run_chunk(acc_j, cost_j, gamma, length, key, jnp.int64(k),
                           jnp.int64(k * chunk_len), jnp.int64(burn_in), state)
    host = {f: to_host(getattr(state, f)) for f in PearlState._fields}
    return _summarize(host, b, gamma, ar, steps, burn_in, chains, seed)


def _summarize(host, b, gamma, ar, steps, burn_in, chains, seed) -> PearlSimResult:
    ver = host["ver"].astype(np.float64)  # [chains, b]
    tok = ver.sum(axis=1)
    time = host["time"]
    counted = 1.0 + ver + (gamma - 1) * host["post"]
    mat = ver / (host["rej"] + 1.0)
    return PearlSimResult(
        batch=b, gamma=gamma,
        speedup=ratio_estimate(tok, time, scale=ar / b),
        time_per_token=ratio_estimate(time, tok, scale=float(b)),
        tokens_per_time=ratio_estimate(tok, time),
        tokens_per_step=ratio_estimate(tok, np.full(chains, float(b * steps))),
        post_share=ratio_estimate(host["post_steps"].astype(np.float64),
                                  np.full(chains, float(b * steps))),
        counted=mean_estimate(counted.mean(axis=1)), mat=mean_estimate(mat.mean(axis=1)),
        time=mean_estimate(time), steps=steps, burn_in=burn_in, chains=chains, seed=seed,
        tokens=int(tok.sum()))
