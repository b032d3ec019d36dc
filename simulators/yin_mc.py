"""Monte Carlo of Yin et al.'s setting (docs/theory.md §7) with real token draws, in JAX.

A sequence ``x_1..x_T`` continues a prompt ``x_0 ~ init``; at position ``n`` the previous token
is ``s = x_{n-1}``, the target law ``target[n-1, s]`` and the draft law ``draft[n-1, s]`` (both
Markov, so after a rejection the draft's next token is again a fresh draw from
``draft[n-1, s]`` given the corrected prefix — the draft cost is negligible and it proposes to
the end). One position is one rejection-based step:

* speculative decoding (``M = 1``): draft ``y``, accept with ``min(1, target/draft)``, else
  emit from ``(target - draft)_+``;
* any rejection-based rule (Y2/Y4): accept with a given ``b[n-1, s, y]``, else emit from a
  given resampling law;
* batch SD (Y3): ``M`` iid drafts checked in turn by recursive rejection sampling (each
  against the residual left by the previous failures); a rejection counts only when all ``M``
  fail. ``mode="sequences"``: the ``M``-way check happens at a round start (position 1 and
  after each rejection), the accepted sequence is then followed with plain SD;
  ``mode="per_position"``: ``M`` fresh drafts at every position.

Returns per-sequence rejection counts and the emitted transition counts ``[T, K, K]`` (to test
that the output law is the target's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory.core.fitting import pooled_chi2_terms
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.yin.markov import MarkovPair, as_chain

from .runtime import RatioEstimate, make_key, mean_estimate, random_bits, uniform_from_bits

__all__ = ["MarkovMC", "simulate_markov", "simulate_step", "transition_chi2"]


@dataclass(frozen=True)
class MarkovMC:
    rejections: np.ndarray = field(repr=False)  # per sequence
    transitions: np.ndarray = field(repr=False)  # [T, K, K] emitted (s -> x) counts
    mean_rejections: RatioEstimate = None


def _draw(cdf_row, u):
    return jnp.minimum(jnp.sum(cdf_row <= u, dtype=jnp.int32), cdf_row.shape[-1] - 1)


def _cdf(p):
    c = jnp.cumsum(p, axis=-1)
    tot = c[..., -1:]
    return jnp.where(jnp.arange(p.shape[-1]) == p.shape[-1] - 1, 1.0,
                     c / jnp.where(tot > 0, tot, 1.0))


@partial(jax.jit, static_argnums=(6, 7, 9))
def _run(init, target, draft, b, resampling, key, n_seq: int, M: int, per_position,
         general: bool, /):
    """``n_seq`` sequences; ``per_position`` (a traced bool: both modes share one executable):
    ``M`` drafts at every position, else at a round start only."""
    T, K = target.shape[0], target.shape[-1]
    n_u = 2 * M + 1
    bits = random_bits(key, (T + 1, n_seq, n_u), jnp.uint32)
    u = uniform_from_bits(bits)
    x0 = jax.vmap(lambda uu: _draw(_cdf(init), uu[0]))(u[0])

    def position(carry, inp):
        s, start, rej = carry
        n, uu = inp
        t_row = target[n, s]
        d_row = draft[n, s]
        d_cdf = _cdf(d_row)
        if general:  # one draft, acceptance b, resampling law given
            y = _draw(d_cdf, uu[0])
            ok = uu[1] < b[n, s, y]
            alt = _draw(_cdf(resampling[n, s]), uu[2 * M])
            x = jnp.where(ok, y, alt)
            failed = ~ok
        else:
            p = t_row
            done = jnp.bool_(False)
            x = jnp.int32(0)
            stages = jnp.where(per_position | start, M, 1)
            for i in range(M):
                y = _draw(d_cdf, uu[2 * i])
                py, dy = p[y], d_row[y]
                ratio = jnp.where(dy > 0, py / jnp.where(dy > 0, dy, 1.0), 1.0)
                live = ~done if i == 0 else (~done) & (i < stages)  # stages >= 1
                ok = live & (uu[2 * i + 1] < ratio)
                x = jnp.where(ok, y, x)
                done = done | ok
                r = jnp.maximum(p - d_row, 0.0)
                mass = r.sum()
                newp = jnp.where(mass > 0, r / jnp.where(mass > 0, mass, 1.0), p)
                p = jnp.where(live & ~ok, newp, p)
            fix = _draw(_cdf(p), uu[2 * M])
            x = jnp.where(done, x, fix)
            failed = ~done
        code = (n * K + s) * K + x
        return (x, failed, rej + failed.astype(jnp.int32)), code

    def one(x0_, us):
        (_, _, rej), codes = lax.scan(position, (x0_, jnp.bool_(True), jnp.int32(0)),
                                      (jnp.arange(T), us))
        return rej, codes

    rej, codes = jax.vmap(one, in_axes=(0, 1))(x0, u[1:])
    counts = jnp.zeros(T * K * K, jnp.int64).at[codes.ravel()].add(1)
    return rej, counts.reshape(T, K, K)


def simulate_markov(pair: MarkovPair, n_seq: int, seed: int = 0, *, M: int = 1,
                    mode: str = "sequences", accept=None, resampling=None) -> MarkovMC:
    """Simulate ``n_seq`` sequences (see module docstring). ``accept``/``resampling``
    (``(T, K, K)``) select a general rejection-based rule (then ``M`` must be 1)."""
    init, target, draft = as_chain(*pair)
    n_seq = as_int(n_seq, "n_seq", low=2, high=10**7)
    M = as_int(M, "M", low=1, high=64)
    if mode not in ("sequences", "per_position"):
        raise PolyspecInputError("mode", f"must be 'sequences' or 'per_position', got {mode!r}")
    general = accept is not None or resampling is not None
    if general:
        if accept is None or resampling is None or M != 1:
            raise PolyspecInputError("accept", "give both accept and resampling, with M = 1")
        b = np.asarray(accept, np.float64)
        res = np.asarray(resampling, np.float64)
        if b.shape != target.shape or res.shape != target.shape:
            raise PolyspecInputError("accept", f"accept/resampling must have shape {target.shape}")
    else:
        b = res = np.zeros((1, 1, 1))
    rej, counts = _run(jnp.asarray(init), jnp.asarray(target), jnp.asarray(draft),
                       jnp.asarray(b), jnp.asarray(res), make_key(seed), n_seq, M,
                       jnp.bool_(mode == "per_position"), general)
    rej = np.asarray(rej, np.float64)
    return MarkovMC(rej, np.asarray(counts), mean_estimate(rej))


@partial(jax.jit, static_argnames=("n",))
def _step_run(d_cdf, b, r_cdf, key, n: int):
    u = uniform_from_bits(jax.random.bits(key, (n, 3), jnp.uint32))

    def one(uu):
        y = _draw(d_cdf, uu[0])
        ok = uu[1] < b[y]
        return jnp.where(ok, y, _draw(r_cdf, uu[2])), ~ok

    x, rej = jax.vmap(one)(u)
    K = d_cdf.shape[0]
    return jnp.zeros(K, jnp.int64).at[x].add(1), jnp.sum(rej, dtype=jnp.int64)


def simulate_step(target, draft, b, resampling, n: int, seed: int = 0):
    """One rejection-based step ``n`` times: draft ``y ~ draft``, accept with ``b[y]``, else
    emit from ``resampling``. Returns ``(emitted_counts[K], rejections)``."""
    n = as_int(n, "n", low=1, high=10**9)
    d = jnp.asarray(np.asarray(draft, np.float64))
    counts, rej = _step_run(_cdf(d), jnp.asarray(np.asarray(b, np.float64)),
                            _cdf(jnp.asarray(np.asarray(resampling, np.float64))),
                            make_key(seed), n)
    return np.asarray(counts), int(rej)


def transition_chi2(transitions: np.ndarray, target: np.ndarray, min_expected: float = 5.0):
    """Pearson chi-square of emitted transition counts ``[T, K, K]`` against the target
    kernels, per (position, previous state) row; cells with expected < ``min_expected`` are
    pooled within the row. Returns ``(statistic, df, p_value)``."""
    from scipy import stats

    stat, df = 0.0, 0
    T, K, _ = transitions.shape
    for n in range(T):
        for s in range(K):
            obs = transitions[n, s].astype(np.float64)
            tot = obs.sum()
            if tot == 0:
                continue
            exp = tot * target[n, s]
            if ((exp == 0) & (obs > 0)).any():
                return float("inf"), max(df, 1), 0.0
            terms = pooled_chi2_terms(exp, obs, min_expected)
            if terms is None:
                continue
            stat += terms[0]
            df += terms[1]
    p = float(stats.chi2.sf(stat, df)) if df > 0 else float("nan")
    return stat, df, p
