"""Monte Carlo of a two-level synchronous chain whose acceptance runs over output positions
(docs/theory.md Part III-E, R1), in JAX: the independent check of R1.

It draws the agreement of every output position the rounds touch from the run law (age =
agreements since the last disagreement, hazard ``q(age)``) and plays the rounds on it, one
round per step, under either round policy:

* P1's round: the drafter drafts ``θ`` tokens (``θ T_2(1)``), the verifier scores ``θ + 1``
  positions (``T_1(θ + 1) + o_1``) and accepts the leading agreements ``j``; ``j < θ``: ``j +
  1`` tokens and the run restarts (age 0); ``j = θ``: ``θ + 1`` tokens, and the bonus position
  (never checked) agrees with probability ``1 - q`` at its age: the next round starts one
  position later at the run's next age, or at age 0;
* PipeSpec's round (lookahead ``K = θ + 1``): a fully accepted round leaves the drafter to
  re-predict the bonus position: the next round drafts ``θ + 1`` tokens; if the bonus draft
  disagrees the verifier scores 1 position (``T_1(1) + o_1``), emits 1 token, and the next
  position goes unchecked; else it scores ``θ + 1`` positions and checks ``θ`` drafts from the
  run's next age.

Chains are ``vmap``-ed; rounds run under ``lax.fori_loop`` with uniforms from
``fold_in(key, round)``: same key, same numbers. Each chain discards ``burn_in`` rounds and
measures ``rounds`` more (the carried state starts at age 0); the speedup is the ratio
estimator over chains with a delta-method CI.

One compiled run serves many configs (compiles, not numbers): ``rounds`` and ``burn_in`` are
traced, and the hazard table is padded with its tail to a multiple of 8 entries (an age past
the law's last entry reads the tail either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory.core.runs import as_run_law, check_runs
from polyspec_theory.errors import PolyspecInputError, as_int

from .runtime import RatioEstimate, as_chains, make_key, ratio_estimate, to_host

__all__ = ["RunSimResult", "simulate_runs", "DEFAULT_BURN_IN"]

DEFAULT_BURN_IN = 50  # rounds discarded per chain (the carried state forgets its start)
HAZARD_STEP = 8  # hazard table entries: a multiple of this (the tail repeated)


@dataclass(frozen=True)
class RunSimResult:
    """Monte-Carlo speedup (``T_1(1)`` x tokens / time) and tokens per round with their CIs;
    ``round``: the round policy simulated."""

    speedup: RatioEstimate
    time_per_token: RatioEstimate
    tokens_per_round: RatioEstimate
    tokens: int
    chains: int
    rounds_per_chain: int
    burn_in: int
    round: str
    seed: int | None

    def to_dict(self) -> dict:
        return {"speedup": self.speedup.value, "ci95": [self.speedup.low, self.speedup.high],
                "se": self.speedup.se, "time_per_token": self.time_per_token.value,
                "tokens_per_round": self.tokens_per_round.to_dict(), "tokens": self.tokens,
                "chains": self.chains, "rounds_per_chain": self.rounds_per_chain,
                "burn_in": self.burn_in, "round": self.round, "seed": self.seed}


def _tables(cascade):
    """(hazard by capped age, the tail repeated to a multiple of :data:`HAZARD_STEP` entries;
    costs: fresh round, continuing round, 1-position verify)."""
    law = as_run_law(cascade.laws[0])
    size = -(-(len(law.hazard) + 1) // HAZARD_STEP) * HAZARD_STEP
    q = np.asarray([*law.hazard, *[law.tail] * (size - len(law.hazard))], dtype=np.float64)
    target, drafter = cascade.models
    th = cascade.thresholds[0]
    d, o = drafter.cost.t1, target.overhead
    v_full = float(target.cost(th + 1)) + o
    costs = np.array([th * d + v_full, (th + 1) * d + v_full, (th + 1) * d
                      + float(target.cost(1)) + o])
    return q, costs


def _round(q, costs, theta: int, recheck: bool, state, u):
    """One round from ``state = (age, continuing)`` driven by the uniforms ``u`` (``θ +
    2``): ``(new state, tokens, time)``."""
    big = q.shape[0] - 1
    age, cont = state

    def hz(a):
        return q[jnp.minimum(a, big)]

    bonus_ok = u[0] >= hz(age)
    skip_ok = u[1] >= hz(0)  # the unchecked position after a 1-token verify
    start = jnp.where(cont, age + 1, age)
    k = jnp.arange(theta)
    agree = u[2:] >= hz(start + k)
    j = jnp.sum(jnp.cumprod(agree.astype(jnp.int32)))
    full = j == theta
    end = start + theta  # the age at the bonus position
    if recheck:
        nxt_age = jnp.where(full, end, 0)
        nxt_cont = full
    else:
        end_ok = u[1] >= hz(end)  # the bonus position, agreeing unobserved
        nxt_age = jnp.where(full & end_ok, end + 1, 0)
        nxt_cont = jnp.zeros_like(full)
    tokens = j + 1
    time = jnp.where(cont, costs[1], costs[0])
    if recheck:  # a continuing round whose bonus draft disagrees: 1 position, 1 token
        miss = cont & ~bonus_ok
        nxt_age = jnp.where(miss, jnp.where(skip_ok, 1, 0), nxt_age)
        nxt_cont = jnp.where(miss, False, nxt_cont)
        tokens = jnp.where(miss, 1, tokens)
        time = jnp.where(miss, costs[2], time)
    return (jnp.minimum(nxt_age, big), nxt_cont), tokens, time


@partial(jax.jit, static_argnames=("theta", "recheck", "chains"))
def _run(q, costs, key, theta: int, recheck: bool, chains: int, rounds, burn_in):
    """``chains`` chains of ``burn_in`` + ``rounds`` rounds (traced counts: one executable
    serves every length): tokens and time of the rounds after the burn-in, per chain."""
    one = jax.vmap(partial(_round, q, costs, theta, recheck))

    def body(t, carry):
        state, tok, tim = carry
        u = jax.random.uniform(jax.random.fold_in(key, t), (chains, theta + 2),
                               dtype=jnp.float64)
        state, k, c = one(state, u)
        on = t >= burn_in
        return state, tok + jnp.where(on, k, 0), tim + jnp.where(on, c, 0.0)

    z = jnp.zeros(chains, dtype=jnp.int64)
    init = ((z, jnp.zeros(chains, dtype=bool)), z, jnp.zeros(chains))
    _, tok, tim = lax.fori_loop(jnp.int64(0), rounds + burn_in, body, init)
    return tok, tim


def simulate_runs(cascade, rounds: int, seed=0, *, chains: int = 256,
                  burn_in: int = DEFAULT_BURN_IN) -> RunSimResult:
    """Simulate ``cascade`` (two models, a run or iid law; its ``"round"`` policy):
    ``chains`` chains of ``burn_in`` discarded and ``rounds`` measured rounds. ``seed``: an
    int or a JAX PRNG key."""
    check_runs(cascade)
    if cascade.n != 2:
        raise PolyspecInputError("models", "the run simulator covers two models")
    rounds = as_int(rounds, "rounds", low=1, high=10**9)
    burn_in = as_int(burn_in, "burn_in", low=0, high=10**9)
    chains = as_chains(chains)
    key = make_key(seed)
    seed = seed if isinstance(seed, int) else None
    q, costs = _tables(cascade)
    rnd = cascade.option("round", "p1")
    tok, tim = _run(jnp.asarray(q), jnp.asarray(costs), key, cascade.thresholds[0],
                    rnd == "pipespec", chains, jnp.int64(rounds), jnp.int64(burn_in))
    tok, tim = to_host(tok).astype(np.float64), to_host(tim)
    t1 = cascade.models[0].cost.t1
    per_round = ratio_estimate(tok, np.full(chains, float(rounds)))
    return RunSimResult(ratio_estimate(tok, tim, scale=t1), ratio_estimate(tim, tok),
                        per_round, int(tok.sum()), chains, rounds, burn_in, rnd, seed)
