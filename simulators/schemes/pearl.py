"""``pearl``: Monte Carlo of parallel draft-verify (PEARL; docs/theory.md Part VI-PL), in JAX:
the independent check of PL1-PL3. ``budget.chains`` lockstep batches of ``cascade.batch``
sequences (1 without a batch), each running a burn-in and then ``ceil(budget.tokens /
(chains x b))`` counted steps (a sequence verifies at least one token a step).

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

Every chain starts in all-pre-verify. ``burn_in`` steps are run and not counted, then ``steps``
counted steps. The start-up transient fades as the runs under way at the start end; the
default burn-in (:func:`default_burn_in`) runs until a run in the law's geometric tail survives
with probability below ``1e-12`` (at most ``MAX_BURN_IN`` steps). Long-run estimates are ratio
estimators over independent chains with delta-method CIs; the finite-run quantities of PL3
(``burn_in = 0``: tokens as nano-PEARL's benchmark counts them, its per-sequence MAT) are
means over chains. Random bits: step ``i`` of chunk ``k`` (``chunk_len`` steps a chunk, the
last cut to end at the last step) reads row ``i`` of ``bits(fold_in(key, k), (L, chains, b,
gamma))``, the same row for every draw length ``L`` past ``i`` (partitionable threefry); a
pure function of the seed and ``chunk_len``; float64 throughout.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory.core.config import Cascade
from polyspec_theory.errors import as_int
from polyspec_theory.schemes.pearl import (
    BENCH_STEPS,
    pearl_costs,
    pearl_horizon_cascade,
    pearl_pair,
    predict_pearl_cascade,
    run_acceptance,
)
from simulators.checks import ci_row
from simulators.runtime import (
    RatioEstimate,
    as_chains,
    make_key,
    mean_estimate,
    random_bits,
    ratio_estimate,
    to_host,
    uniform_from_bits,
)
from simulators.schemes import seed_of

__all__ = ["name", "source", "unit", "default_max_events", "work", "simulate", "report",
           "explain", "verify_key", "verify", "PearlState", "PearlSimResult", "pearl_step",
           "simulate_pearl", "default_burn_in", "MAX_SIM_BATCH", "MAX_SIM_GAMMA"]

MAX_SIM_BATCH = 4096
MAX_SIM_GAMMA = 256
MAX_BURN_IN = 100_000
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
def _run_chunk(accept, costs, gamma: int, chunk_len: int, key, chunk_index, steps,
               state: PearlState) -> PearlState:
    """The chunk's first ``n <= chunk_len`` steps of every chain; ``steps = (first step of the
    chunk, first counted step, n)``. The bits are drawn for ``chunk_len`` steps and step ``i``
    reads row ``i``: partitionable threefry numbers element ``(i, ...)`` of the draw by its
    flat index, so these rows equal those of a draw of ``n`` steps (``n`` is a value: one
    executable serves every ``n``)."""
    first_step, first_counted, n = steps
    chains, b = state.post.shape
    bits = random_bits(jax.random.fold_in(key, chunk_index), (chunk_len, chains, b, gamma),
                       jnp.uint32)
    step = jax.vmap(lambda u, counted, s: pearl_step(accept, costs, gamma, u, counted, s),
                    in_axes=(0, None, 0))

    def body(i, st):
        u = uniform_from_bits(lax.dynamic_index_in_dim(bits, i, keepdims=False))
        return step(u, first_step + i >= first_counted, st)

    return lax.fori_loop(jnp.int64(0), n, body, state)


def _chunk_lengths(total: int, chunk_len: int) -> tuple[int, list[int]]:
    """The static length of the chunks' draws and the steps each chunk runs: full chunks of
    ``chunk_len``, the last cut to end at step ``total``. A run shorter than a chunk draws the
    least power of two >= ``total`` steps (at most ``chunk_len``): one compilation per
    simulation, shared by runs whose lengths share the power of two."""
    runs = [min(chunk_len, total - k) for k in range(0, total, chunk_len)]
    if total >= chunk_len:
        return chunk_len, runs
    return min(chunk_len, 1 << (total - 1).bit_length()), runs


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
    seed: int | None
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


def default_burn_in(cascade) -> int:
    """Steps after which a run started at the beginning and still in the law's geometric tail
    (acceptance ``ratio`` per draft, ``gamma`` drafts a step) survives with probability below
    ``1e-12``, plus the steps the law's head takes; at most :data:`MAX_BURN_IN`."""
    run = run_acceptance(cascade.laws[0])
    gamma = cascade.thresholds[0]
    head = -(-len(run.accept) // gamma) + 1
    if run.ratio <= 0.0:
        return head
    if run.ratio >= 1.0:
        return MAX_BURN_IN
    return min(MAX_BURN_IN, head + math.ceil(math.log(1e-12) / (gamma * math.log(run.ratio))))


def simulate_pearl(cascade, batch=None, steps: int = 10_000, key=0, *,
                   chains: int = 256, burn_in: int | None = None, chunk_len: int | None = None
                   ) -> PearlSimResult:
    """Monte Carlo of a two-model ``cascade`` under parallel draft-verify (``thresholds[0]`` =
    ``gamma``, the target's ``overhead`` = the handshake) in lockstep batches of ``batch``
    (``None``: 1): ``chains`` independent batches, ``burn_in`` (``None``:
    :func:`default_burn_in`) uncounted then ``steps`` counted steps each. ``key``: an int seed
    or a JAX PRNG key; same key, same numbers."""
    cascade = pearl_pair(cascade)
    b = 1 if batch is None else as_int(batch, "batch", low=1, high=MAX_SIM_BATCH)
    gamma = as_int(cascade.thresholds[0], "thresholds[0]", low=1, high=MAX_SIM_GAMMA)
    steps = as_int(steps, "steps", low=1, high=10**9)
    burn_in = default_burn_in(cascade) if burn_in is None else as_int(
        burn_in, "burn_in", low=0, high=10**9)
    seed = seed_of(key)
    chains = as_chains(chains)
    if chunk_len is None:
        chunk_len = max(1, min(256, BITS_PER_CHUNK // (chains * b * gamma)))
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=1 << 16)
    accept, costs, ar = _tables(cascade, b)
    state = jax.vmap(lambda _: init_state(b))(jnp.arange(chains))
    key = make_key(key)
    total = burn_in + steps
    acc_j, cost_j = jnp.asarray(accept), jnp.asarray(costs)
    drawn, runs = _chunk_lengths(total, chunk_len)
    for k, n in enumerate(runs):  # the last chunk ends exactly at the last counted step
        state = _run_chunk(acc_j, cost_j, gamma, drawn, key, jnp.int64(k),
                           (jnp.int64(k * chunk_len), jnp.int64(burn_in), jnp.int64(n)), state)
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


# --- the simulator scheme (simulators.schemes) -----------------------------------------------

name = "pearl"
source = "simulators/schemes/pearl.py"
unit = "sequence steps"
sized_by = "tokens"  # the budget field that sizes a run
default_max_events = 1e9


def _steps(cascade, budget) -> int:
    return max(1, math.ceil(budget.tokens / (budget.chains * (cascade.batch or 1))))


def work(cascade, budget) -> float:
    """Sequence-steps over all chains, burn-in included."""
    return float(budget.chains * (cascade.batch or 1)
                 * (_steps(cascade, budget) + default_burn_in(cascade)))


def simulate(cascade, budget, key):
    w = work(cascade, budget)
    budget.refuse_work(w, f"this run needs about {w:.3g} sequence steps ({budget.chains} "
                       f"batches of {cascade.batch or 1}, burn-in {default_burn_in(cascade)} "
                       "steps included)", budget.cap(default_max_events),
                       f"{budget.name('tokens')} or {budget.name('chains')}")
    return simulate_pearl(cascade, cascade.batch, _steps(cascade, budget), key,
                          chains=budget.chains)


def report(cascade, result) -> dict:
    pred = predict_pearl_cascade(cascade, cascade.batch)
    out = result.to_dict()
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": pred.speedup, "time_per_token": pred.time_per_token,
                         "tokens_per_step": pred.chain.tokens_per_step,
                         "post_share": pred.chain.post_share, "mat": pred.chain.mat}
    return out


def explain(cascade, result) -> str:
    pred = predict_pearl_cascade(cascade, cascade.batch)
    s, t, p = result.speedup, result.tokens_per_step, result.post_share
    return "\n".join([
        f"cascade {cascade.name!r}: parallel draft-verify (PEARL), gamma {result.gamma}, "
        f"batch {result.batch}",
        f"simulated {result.tokens} tokens ({result.chains} chains x {result.steps} steps after "
        f"a burn-in of {result.burn_in}), seed {result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   PL exact "
        f"{pred.speedup:.4f}",
        f"tokens per step  MC {t.value:.4f} [{t.low:.4f}, {t.high:.4f}]   PL1 "
        f"{pred.chain.tokens_per_step:.4f}",
        f"post-verify share  MC {p.value:.4f} [{p.low:.4f}, {p.high:.4f}]   PL1 "
        f"{pred.chain.post_share:.4f}"])


# --- the rows of ``polyspec verify`` (PL1-PL3: docs/theory.md Part VI-PL) ---------------------
verify_key = "PL"
_DRAFTER_BOUND = {"roofline": {"weight_time": 0.35, "compute_time": 0.0001}}
# (row id, statement, config, batch); new rows go last (a row's seed follows its index)
PEARL_CASES = (
    ("PL1", "parallel draft-verify, one sequence, iid law, plain costs, handshake",
     {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.05},
                  "overhead": 0.03}, {"name": "draft", "cost": 0.3}],
      "acceptance": [{"alpha": 0.8}], "thresholds": [3]}, None),
    ("PL2", "lockstep batch 8, positional law, roofline: the drafter bounds a step until 3 "
     "sequences are in post-verify (E[max] over the binomial)",
     {"models": [{"name": "target", "cost": {"roofline": {"weight_time": 1.0,
                                                          "compute_time": 0.001,
                                                          "kv_time": 0.03}},
                  "overhead": 0.05}, {"name": "draft", "cost": _DRAFTER_BOUND}],
      "acceptance": [{"positional": [0.7, 0.9, 0.85]}], "thresholds": [4]}, 8),
    ("PL2", "lockstep batch 4, run law (hazard falling with the run's age, R1)",
     {"models": [{"name": "target", "cost": {"roofline": {"weight_time": 1.0,
                                                          "compute_time": 0.01,
                                                          "kv_time": 0.005}}},
                 {"name": "draft", "cost": {"roofline": {"weight_time": 0.2,
                                                         "compute_time": 0.002}}}],
      "acceptance": [{"run_hazard": [0.4, 0.2, 0.1, 0.05], "tail": 0.02}],
      "thresholds": [5]}, 4),
)


def verify(ctx) -> list:
    """PL1/PL2 (long-run speedup; tokens per step and post-verify share inside the row's
    level too) and PL3 (nano-PEARL's benchmark run of 100 steps from pre-verify: tokens
    counted per sequence and MAT) against the step-by-step simulator."""
    from scipy import stats

    from simulators.checks import ROW_ALPHA

    rows = []
    for i, (id_, statement, cfg, b) in enumerate(PEARL_CASES):
        cas = Cascade.from_config({**cfg, "mode": "pearl"})
        pred = predict_pearl_cascade(cas, b)
        seed = ctx.seed + zlib.crc32(f"PL{i}".encode()) % 100_000
        res = simulate_pearl(cas, b, ctx.size(1500, 15_000), seed, chains=128)
        z = float(stats.norm.isf(ROW_ALPHA / 6))  # 3 comparisons share the row's level
        zs = [abs(res.tokens_per_step.value - pred.chain.tokens_per_step)
              / res.tokens_per_step.se,
              abs(res.post_share.value - pred.chain.post_share) / res.post_share.se]
        rows.append(ci_row(id_, statement, pred.speedup, res.speedup,
                           f"tokens/step |z| {zs[0]:.2f}, post share |z| {zs[1]:.2f} (limit "
                           f"{z:.2f}); {res.tokens} tokens", extra_ok=max(zs) <= z, z=z))
    cas = Cascade.from_config({**PEARL_CASES[1][2], "mode": "pearl"})
    h = pearl_horizon_cascade(cas, 8, BENCH_STEPS)
    res = simulate_pearl(cas, 8, BENCH_STEPS, ctx.seed + 31, chains=ctx.size(512, 4096),
                         burn_in=0)
    z = float(stats.norm.isf(ROW_ALPHA / 4))
    z_mat = abs(res.mat.value - h.mat) / res.mat.se
    rows.append(ci_row("PL3", "nano-PEARL's benchmark run (100 steps from pre-verify, batch "
                       "8): tokens counted per sequence (prefill token and pending drafts "
                       "included) and MAT", h.counted, res.counted,
                       f"MAT {h.mat:.4f} vs {res.mat.value:.4f} (|z| {z_mat:.2f}, limit "
                       f"{z:.2f}); {res.chains} batches", extra_ok=z_mat <= z, z=z))
    return rows
