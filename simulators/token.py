"""Token-level Monte Carlo of an n-level polybasic cascade with real speculative sampling.

Each model ``M_j`` is a synthetic Markov language model of order ``k`` over a small vocabulary
(:class:`MarkovLMs`): next-token law ``p_j(.|h) = softmax(logits_j[h])`` with ``h`` the last
``k`` tokens; ``logits_0`` (the target) are random, and ``logits_{j+1} = logits_j +
perturbation_j * noise`` (the drafters drift away from the target by a controllable amount).
Acceptance is therefore context dependent and correlated along the sequence — unlike P1's
independence assumption, which this simulator measures (:func:`departure_from_p1`).

The cascade runs the block policy of docs/theory.md §6 with real tokens. One buffer per chain holds
the committed context followed by the pending blocks of every pair level, contiguously (the
"speculation stack"): pair level ``i`` verifies its block ``G_i`` (the accumulated output of
``S_{i+1}``) with ``M_i`` as verifier and ``Q = p_{i+1}`` as drafter law — the system
``S_{i+1}`` is lossless, so its tokens follow ``M_{i+1}`` (docs/theory.md §4). Every position ``j``
is checked in turn: accept ``d_j`` with probability ``min(1, P(d_j)/Q(d_j))``; at the first
rejection emit a token from ``(P - Q)_+`` (normalized), or the bonus token from ``P`` after
``G`` acceptances. The ``L = A + 1`` tokens then extend the parent's block in place. At the
bottom, ``M_n`` samples ``theta_{m-1}`` tokens autoregressively. Greedy mode (temperature 0)
uses point masses on the argmax, for which the same rule accepts iff the drafted token is the
verifier's argmax.

A planted bug (``bug="drafter_resample"``: on rejection sample from the drafter's law ``Q``
instead of the residual) must be caught by the F1 test (:func:`f1_test`).

Outputs: emitted ``(k+2)``-gram counts (F1: chi-square against the target's conditional laws),
per-level acceptance counts with the exact ``beta(h) = sum_x min(P, Q)`` of every checked
context (F2), joint (G, A) histograms, and the speedup in model-cost units (cascade costs).
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
from scipy import stats

from polyspec_theory.core.config import POLICIES, Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.fitting import pooled_chi2_terms
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_real,
    as_real_array,
)

from .length import split_bits
from .runtime import (
    RatioEstimate,
    chain_mesh,
    device_array,
    host_chains,
    make_key,
    ratio_estimate,
    shard_chains,
    to_host,
    uniform_from_bits,
)

__all__ = [
    "MarkovLMs",
    "make_lms",
    "TokenStatic",
    "TokenParams",
    "TokenState",
    "TokenModel",
    "TokenResult",
    "token_transition",
    "run_token_chunk",
    "simulate_tokens",
    "F1Result",
    "f1_test",
    "greedy_path",
    "greedy_check",
    "departure_from_p1",
    "BUGS",
]

BUGS = ("none", "drafter_resample")


# --- synthetic language models ---------------------------------------------------------------


@dataclass(frozen=True)
class MarkovLMs:
    """``probs[j, h, x] = p_j(x | h)`` for models ``j = 0..n-1`` (0 = target), contexts
    ``h = sum_r x_{t-r} V^{r-1}`` (r = 1..order, last token least significant)."""

    probs: np.ndarray  # (n, V**order, V)
    order: int
    greedy: bool = False

    @property
    def n(self) -> int:
        return int(self.probs.shape[0])

    @property
    def vocab(self) -> int:
        return int(self.probs.shape[2])

    def acceptance(self, i: int) -> np.ndarray:
        """F2: ``beta_i(h) = sum_x min(p_i, p_{i+1}) = 1 - TV`` per context (pair level i)."""
        return np.minimum(self.probs[i], self.probs[i + 1]).sum(axis=-1)


def make_lms(n: int, vocab: int = 8, order: int = 1, perturbation=0.6, sharpness: float = 1.5,
             seed: int = 0, greedy: bool = False) -> MarkovLMs:
    """One Markov LM per level: target logits ``sharpness * N(0, 1)``; level ``j+1`` =
    level ``j`` + ``perturbation[j] * N(0, 1)`` (a scalar applies to every pair). Greedy:
    point masses on each model's argmax (temperature 0)."""
    n = as_int(n, "n", low=2, high=16)
    vocab = as_int(vocab, "vocab", low=2, high=64)
    order = as_int(order, "order", low=1, high=3)
    if vocab ** (order + 2) > 1 << 22:
        raise PolyspecInputError("vocab", "vocab**(order + 2) must be <= 2**22 (n-gram table)")
    if np.ndim(perturbation) == 0:
        pert = np.full(n - 1, as_real(perturbation, "perturbation", low=0.0))
    else:
        pert = as_real_array(perturbation, "perturbation", low=0.0)
        if pert.size != n - 1:
            raise PolyspecInputError("perturbation", f"need {n - 1} values, got {pert.size}")
    sharpness = as_real(sharpness, "sharpness", low=0.0)
    rng = np.random.default_rng(as_int(seed, "seed", low=0))
    ctx = vocab**order
    logits = [sharpness * rng.standard_normal((ctx, vocab))]
    for j in range(n - 1):
        logits.append(logits[-1] + pert[j] * rng.standard_normal((ctx, vocab)))
    lg = np.stack(logits)
    if greedy:
        probs = np.zeros_like(lg)
        np.put_along_axis(probs, lg.argmax(axis=-1)[..., None], 1.0, axis=-1)
    else:
        z = np.exp(lg - lg.max(axis=-1, keepdims=True))
        probs = z / z.sum(axis=-1, keepdims=True)
    return MarkovLMs(probs, order, bool(greedy))


# --- compiled model --------------------------------------------------------------------------


class TokenStatic(NamedTuple):
    m: int  # pair levels
    width: int  # >= every block
    vocab: int
    order: int  # model context length k
    ctx_len: int  # committed tokens kept: k + 1 (for (k+2)-gram counts)
    buf_len: int
    theta_bottom: int
    truncate: bool


class TokenParams(NamedTuple):
    thresholds: jax.Array  # int32[m]
    probs: jax.Array  # f64[n, C, V]
    cdf: jax.Array  # f64[n, C, V] sampling laws of each model
    resample_cdf: jax.Array  # f64[m, C, V] law on rejection at pair level i
    beta: jax.Array  # f64[m, C] exact acceptance probability per context
    verify_cost: jax.Array  # f64[m, width + 1]: T_i(g + 1)
    bottom_cost: jax.Array  # f64: theta_{m-1} T_n(1)


class TokenState(NamedTuple):
    buf: jax.Array  # int32[buf_len]: committed context, then pending blocks of levels 0..m-1
    seglen: tuple  # m - 1 int32: pending block lengths of pair levels 0..m-2
    level: jax.Array
    tokens: jax.Array
    done: jax.Array
    rounds: tuple  # m int64
    block_sum: tuple  # m int64
    accepted_sum: tuple  # m int64: sum of A_i
    checked: tuple  # m int64: positions checked (min(A + 1, G) per round)
    beta_sum: tuple  # m f64: sum of beta(h) over checked positions
    model_time: tuple  # m + 1 f64


def _cdf(p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p, axis=-1)
    c /= c[..., -1:]
    c[..., -1] = 1.0
    return c


@dataclass(frozen=True)
class TokenModel:
    """LMs + the cascade's thresholds, policy and costs, compiled to device tables."""

    lms: MarkovLMs
    cascade: Cascade
    static: TokenStatic
    params: TokenParams = field(repr=False)
    bug: str = "none"

    @classmethod
    def build(cls, lms: MarkovLMs, thresholds, costs=None, policy: str = "accumulate",
              bug: str = "none", names=None) -> TokenModel:
        """``costs``: one cost per model (CostCurve or config form; default ``T_j = 4^-j``)."""
        if not isinstance(lms, MarkovLMs):
            raise PolyspecInputError("lms", "must be a MarkovLMs (use make_lms)")
        if bug not in BUGS:
            raise PolyspecInputError("bug", f"must be one of {BUGS}, got {bug!r}")
        if policy not in POLICIES:
            raise PolyspecInputError("policy", f"must be one of {POLICIES}, got {policy!r}")
        n = lms.n
        if costs is None:
            costs = [4.0**-j for j in range(n)]
        if len(costs) != n:
            raise PolyspecInputError("costs", f"need one cost per model ({n}), got {len(costs)}")
        from polyspec_theory.core.costs import cost_from_config
        from polyspec_theory.core.laws import IIDGeometric

        curves = [c if isinstance(c, CostCurve) else cost_from_config(c, f"costs[{j}]")
                  for j, c in enumerate(costs)]
        names = names or [f"M{j + 1}" for j in range(n)]
        beta = np.stack([lms.acceptance(i) for i in range(n - 1)])
        # a placeholder law per pair (the token simulator does not use it): the iid law at the
        # mean acceptance over contexts, so the Cascade is valid and predict() can run on it
        laws = tuple(IIDGeometric(float(np.clip(b.mean(), 0.0, 1.0))) for b in beta)
        cascade = Cascade(tuple(Model(nm, cv) for nm, cv in zip(names, curves, strict=True)),
                          laws, tuple(thresholds), policy, "token-level")
        m = n - 1
        gmax = block_bounds(cascade.thresholds, policy)
        w = max(gmax)
        ctx_len = lms.order + 1
        buf_len = ctx_len + sum(cascade.thresholds) + w + 2
        p = lms.probs
        cdf = _cdf(p)
        res = []
        for i in range(m):
            if bug == "drafter_resample":
                res.append(cdf[i + 1])
                continue
            r = np.maximum(p[i] - p[i + 1], 0.0)
            mass = r.sum(axis=-1, keepdims=True)
            r = np.where(mass > 0, r / np.where(mass > 0, mass, 1.0), p[i])
            res.append(_cdf(r))
        g = np.arange(w + 1)
        vcost = np.stack([np.asarray(curves[i](g + 1), dtype=np.float64) for i in range(m)])
        params = TokenParams(
            thresholds=device_array(cascade.thresholds, np.int32),
            probs=device_array(p, np.float64),
            cdf=device_array(cdf, np.float64),
            resample_cdf=device_array(np.stack(res), np.float64),
            beta=device_array(beta, np.float64),
            verify_cost=device_array(vcost, np.float64),
            bottom_cost=device_array(cascade.thresholds[-1] * curves[-1].t1, np.float64),
        )
        static = TokenStatic(m, w, lms.vocab, lms.order, ctx_len, buf_len,
                             cascade.thresholds[-1], policy == "truncate")
        return cls(lms, cascade, static, params, bug)

    @property
    def uniforms_per_step(self) -> int:
        return self.static.theta_bottom + self.static.width + 1


def init_token_state(static: TokenStatic, done=False) -> TokenState:
    """Fresh chain: committed context = token 0 repeated, nothing pending."""
    m = static.m
    z32, z64, zf = jnp.int32(0), jnp.int64(0), jnp.float64(0.0)
    return TokenState(
        buf=np.zeros(static.buf_len, np.int32),
        seglen=tuple(z32 for _ in range(m - 1)),
        level=jnp.int32(m - 1),
        tokens=z64,
        done=jnp.asarray(done, dtype=bool),
        rounds=tuple(z64 for _ in range(m)),
        block_sum=tuple(z64 for _ in range(m)),
        accepted_sum=tuple(z64 for _ in range(m)),
        checked=tuple(z64 for _ in range(m)),
        beta_sum=tuple(zf for _ in range(m)),
        model_time=tuple(zf for _ in range(m + 1)),
    )


def _sample(cdf_row, u):
    """Inverse CDF of a categorical law (``cdf_row[-1] == 1``) at ``u`` in (0, 1)."""
    return jnp.minimum(jnp.sum(cdf_row <= u, dtype=jnp.int32), cdf_row.shape[-1] - 1)


def _ctx(tokens_before, vocab: int):
    """Context index from the last ``k`` tokens (``tokens_before[..., -1]`` = most recent)."""
    k = tokens_before.shape[-1]
    weights = jnp.asarray([vocab**r for r in range(k)][::-1], jnp.int32)
    return jnp.sum(tokens_before * weights, axis=-1, dtype=jnp.int32)


def _draft_bottom(params: TokenParams, static: TokenStatic, state: TokenState, u_gen):
    """The start of the verifying level's pending segment in the buffer, and the buffer with
    the bottom drafter's ``theta_bottom`` tokens of ``M_n`` written (autoregressively) when
    the bottom pair verifies."""
    m, V, k, c = static.m, static.vocab, static.order, static.ctx_len
    lvl = state.level
    starts, s = [], jnp.int32(c)
    for i in range(m - 1):
        starts.append(s)
        s = s + state.seglen[i]
    starts.append(s)
    start = starts[m - 1]
    for i in range(m - 1):
        start = jnp.where(lvl == i, starts[i], start)
    hist0 = lax.dynamic_slice(state.buf, (starts[m - 1] - k,), (k,))

    def gen(h, uu):
        x = _sample(params.cdf[m][_ctx(h, V)], uu)
        return jnp.concatenate([h[1:], x[None]]), x

    _, drafted = lax.scan(gen, hist0, u_gen)
    buf_gen = lax.dynamic_update_slice(state.buf, drafted, (starts[m - 1],))
    return start, jnp.where(lvl == m - 1, buf_gen, state.buf)


def token_transition(params: TokenParams, static: TokenStatic, target, u, state: TokenState):
    """One verification event of one chain (uniforms ``u``: ``theta_bottom`` for the bottom
    drafter, ``width`` for acceptance tests, 1 for the correction/bonus token).

    Returns ``(state, (hist_code, ngram_codes))``: ``hist_code`` encodes (level, G, A) of the
    round; ``ngram_codes[j]`` is the (k+2)-gram code of the j-th token emitted by the target
    level (or the sink value ``V**(k+2)`` when none)."""
    m, w, V, k, c = static.m, static.width, static.vocab, static.order, static.ctx_len
    tb = static.theta_bottom
    th = params.thresholds
    lvl = state.level
    u_gen, u_acc, u_fix = u[:tb], u[tb:tb + w], u[tb + w]
    start, buf = _draft_bottom(params, static, state, u_gen)

    # block of this level
    block = th[m - 1]
    for i in range(m - 1):
        block = jnp.where(lvl == i, state.seglen[i], block)
    if static.truncate:
        block = jnp.minimum(block, th[lvl])

    # verify positions 0..w-1 of the block (and context of position w for the bonus)
    win = lax.dynamic_slice(buf, (start - c,), (c + w + 1,))
    j = jnp.arange(w + 1)
    ctx = _ctx(jnp.stack([win[c + j - r] for r in range(k, 0, -1)], axis=-1), V)  # [w+1]
    d = win[c:c + w]
    p_ver = params.probs[lvl]
    p_dr = params.probs[lvl + 1]
    pd = p_ver[ctx[:w], d]
    qd = p_dr[ctx[:w], d]
    ratio = jnp.where(qd > 0, pd / jnp.where(qd > 0, qd, 1.0), 1.0)
    ok = (u_acc < ratio) & (j[:w] < block)
    a = jnp.sum(jnp.cumprod(ok.astype(jnp.int32)), dtype=jnp.int32)
    a = jnp.minimum(a, block)
    ctx_a = ctx[a]
    fix_cdf = jnp.where(a < block, params.resample_cdf[lvl, ctx_a], params.cdf[lvl, ctx_a])
    fix = _sample(fix_cdf, u_fix)
    buf = lax.dynamic_update_slice(buf, fix[None], (start + a,))
    n_checked = jnp.minimum(a + 1, block)
    beta_here = jnp.sum(jnp.where(j[:w] < n_checked, params.beta[lvl, ctx[:w]], 0.0))

    emitted = a + 1
    fwd = params.verify_cost[lvl, block]
    seglen, nxt = [], jnp.int32(m - 1)
    for i in range(m - 1):
        li = jnp.where(lvl == i, 0, state.seglen[i]) + jnp.where(lvl == i + 1, emitted, 0)
        seglen.append(li.astype(jnp.int32))
        nxt = jnp.where((lvl == i + 1) & (li >= th[i]), jnp.int32(i), nxt)
    top = lvl == 0

    # emitted (k+2)-gram codes at the top, then drop the committed tokens from the buffer
    head = lax.dynamic_slice(buf, (0,), (c + w + 1,))
    jj = jnp.arange(w + 1)
    gram = jnp.stack([head[c + jj - r] for r in range(c, -1, -1)], axis=-1)
    codes = _ctx(gram, V)
    sink = V ** (c + 1)
    active = ~state.done
    codes = jnp.where(top & active & (jj < emitted), codes, sink).astype(jnp.int32)
    shifted = lax.dynamic_slice(jnp.concatenate([buf, jnp.zeros(w + 2, jnp.int32)]),
                                (emitted,), (static.buf_len,))
    buf = jnp.where(top, shifted, buf)

    tokens = state.tokens + jnp.where(top, emitted, 0).astype(jnp.int64)
    b64, a64 = block.astype(jnp.int64), a.astype(jnp.int64)
    times = [t + jnp.where(lvl == i, fwd, 0.0) for i, t in enumerate(state.model_time[:m])]
    times.append(state.model_time[m] + jnp.where(lvl == m - 1, params.bottom_cost, 0.0))

    def per_level(vals, inc):
        return tuple(v + jnp.where(lvl == i, inc, 0) for i, v in enumerate(vals))

    new = TokenState(
        buf=buf,
        seglen=tuple(seglen),
        level=nxt,
        tokens=tokens,
        done=top & (tokens >= target),
        rounds=per_level(state.rounds, jnp.int64(1)),
        block_sum=per_level(state.block_sum, b64),
        accepted_sum=per_level(state.accepted_sum, a64),
        checked=per_level(state.checked, n_checked.astype(jnp.int64)),
        beta_sum=tuple(v + jnp.where(lvl == i, beta_here, 0.0)
                       for i, v in enumerate(state.beta_sum)),
        model_time=tuple(times),
    )
    new = jax.tree.map(lambda nw, o: jnp.where(active, nw, o), new, state)
    hist_code = lvl * (w + 1) ** 2 + block * (w + 1) + a
    hist_code = jnp.where(active, hist_code, m * (w + 1) ** 2).astype(jnp.int32)
    return new, (hist_code, codes)


@partial(jax.jit, static_argnums=(1, 2, 3, 4))
def run_token_chunk(params: TokenParams, static: TokenStatic, chunk_len: int, chains: int,
                    n_uniforms: int, target, key, chunk_index, state: TokenState, /):
    """``chunk_len`` events of every chain (``lax.scan`` over events of ``vmap`` over chains).
    Bits of chunk ``t``: ``split_bits(fold_in(key, t), (chunk_len, chains, n_uniforms))``
    (partitionable threefry: independent of the device layout). Returns ``(state,
    round_hist[m, width+1, width+1] (G, A), ngram_counts[V**(k+2)])``."""
    m, w, V, c = static.m, static.width, static.vocab, static.ctx_len
    step = jax.vmap(lambda uu, s: token_transition(params, static, target, uu, s))
    bits = split_bits(jax.random.fold_in(key, chunk_index), (chunk_len, chains, n_uniforms),
                      axis=2)
    pad = state.level.shape[0] - chains
    if pad:
        bits = jnp.pad(bits, ((0, 0), (0, pad), (0, 0)))

    def body(s, b):
        return step(uniform_from_bits(b), s)

    state, (hc, nc) = lax.scan(body, state, bits)
    hsize = m * (w + 1) ** 2
    hist = jnp.zeros(hsize + 1, jnp.int64).at[hc.ravel()].add(1)[:-1]
    gsize = V ** (c + 1)
    grams = jnp.zeros(gsize + 1, jnp.int64).at[nc.ravel()].add(1)[:-1]
    return state, hist.reshape(m, w + 1, w + 1), grams


# --- driver and results ----------------------------------------------------------------------


@dataclass(frozen=True)
class TokenResult:
    model: TokenModel = field(repr=False)
    speedup: RatioEstimate
    tokens: int
    chains: int
    rounds: tuple[int, ...]
    verified_positions: int  # positions checked by verifiers (all levels)
    acceptance: tuple[RatioEstimate, ...]  # per pair level: accepted / checked
    expected_acceptance: tuple[float, ...]  # per pair level: mean beta(h) over checked h
    f2_gap: tuple[RatioEstimate, ...]  # per pair level: (accepted - sum beta) / checked
    phi: tuple[RatioEstimate, ...]  # phi_{i+1} for models 1..n-1
    mean_block: tuple[RatioEstimate, ...]
    mean_emitted: tuple[RatioEstimate, ...]
    round_hist: np.ndarray = field(repr=False)  # [m, G, A]
    ngram_counts: np.ndarray = field(repr=False)  # [V**(k+2)]
    chain_tokens: np.ndarray = field(repr=False)
    seed: int = 0

    def to_dict(self) -> dict:
        return {
            "speedup": self.speedup.value,
            "ci95": [self.speedup.low, self.speedup.high],
            "tokens": self.tokens,
            "chains": self.chains,
            "rounds": list(self.rounds),
            "acceptance": [a.to_dict() for a in self.acceptance],
            "expected_acceptance": list(self.expected_acceptance),
            "phi": [p.to_dict() for p in self.phi],
            "bug": self.model.bug,
            "greedy": self.model.lms.greedy,
        }


def _stack(fields) -> np.ndarray:
    return np.stack([to_host(f) for f in fields], axis=1)


def simulate_tokens(model: TokenModel, tokens: int, seed: int = 0, *, chains: int = 256,
                    chunk_len: int | None = None, devices=None, progress=None) -> TokenResult:
    """Run ``chains`` independent chains until each has emitted ``ceil(tokens/chains)``
    tokens (finishing the top-level round: a stopping time, so ratio estimators are
    consistent). Same seed -> identical result, for any device layout."""
    if not isinstance(model, TokenModel):
        raise PolyspecInputError("model", "must be a TokenModel (use TokenModel.build)")
    tokens = as_int(tokens, "tokens", low=1, high=10**12)
    seed = as_int(seed, "seed", low=0, high=2**63 - 1)
    chains = as_int(chains, "chains", low=2, high=2**22)
    per_chain = math.ceil(tokens / chains)
    if chunk_len is None:
        chunk_len = min(256, max(16, 1 << (per_chain - 1).bit_length()))
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=2**16)
    static = model.static
    mesh = chain_mesh(devices)
    padded = -(-chains // mesh.devices.size) * mesh.devices.size
    done0 = np.zeros(padded, bool)
    done0[chains:] = True
    state = shard_chains(host_chains(init_token_state(static), padded)._replace(done=done0),
                         mesh)
    key = make_key(seed)
    target = np.int64(per_chain)
    hist = grams = None
    chunk = 0
    while True:
        state, h, g = run_token_chunk(model.params, static, chunk_len, chains,
                                      model.uniforms_per_step, target, key, np.int64(chunk),
                                      state)
        chunk += 1
        hist = to_host(h) if hist is None else hist + to_host(h)
        grams = to_host(g) if grams is None else grams + to_host(g)
        if progress is not None:
            progress(int(to_host(state.tokens)[:chains].sum()), per_chain * chains)
        if to_host(state.done).all():
            break
    tok = to_host(state.tokens)[:chains].astype(np.float64)
    rounds = _stack(state.rounds)[:chains].astype(np.float64)
    bsum = _stack(state.block_sum)[:chains]
    asum = _stack(state.accepted_sum)[:chains].astype(np.float64)
    chk = _stack(state.checked)[:chains].astype(np.float64)
    bet = _stack(state.beta_sum)[:chains]
    mt = _stack(state.model_time)[:chains]
    m = static.m
    tb = model.cascade.thresholds[-1]
    phi = []
    for j in range(1, m + 1):
        fwd = rounds[:, j] if j < m else tb * rounds[:, m - 1]
        phi.append(ratio_estimate(fwd, rounds[:, j - 1]))
    return TokenResult(
        model=model,
        speedup=ratio_estimate(tok, mt.sum(axis=1), scale=model.cascade.costs[0].t1),
        tokens=int(tok.sum()),
        chains=chains,
        rounds=tuple(int(x) for x in rounds.sum(axis=0)),
        verified_positions=int(chk.sum()),
        acceptance=tuple(ratio_estimate(asum[:, i], chk[:, i]) for i in range(m)),
        expected_acceptance=tuple(float(bet[:, i].sum() / chk[:, i].sum()) for i in range(m)),
        f2_gap=tuple(ratio_estimate(asum[:, i] - bet[:, i], chk[:, i]) for i in range(m)),
        phi=tuple(phi),
        mean_block=tuple(ratio_estimate(bsum[:, i], rounds[:, i]) for i in range(m)),
        mean_emitted=tuple(ratio_estimate(asum[:, i] + rounds[:, i], rounds[:, i])
                           for i in range(m)),
        round_hist=hist,
        ngram_counts=grams,
        chain_tokens=to_host(state.tokens)[:chains],
        seed=seed,
    )


# --- F1: the emitted sequence law is the target's ----------------------------------------------


@dataclass(frozen=True)
class F1Result:
    """Pearson chi-square of the emitted (k+2)-gram counts against the target's conditional
    laws: cells ``(history of k+1 tokens, next token)``, pooled within each history until
    every expected count is >= ``min_expected``; ``df = sum over histories (cells - 1)``."""

    statistic: float
    df: int
    p_value: float
    n_tokens: int
    histories: int

    def passed(self, level: float) -> bool:
        return self.p_value >= level


def f1_test(result: TokenResult, min_expected: float = 5.0) -> F1Result:
    """F1 (lossless): chi-square goodness of fit of every emitted token given its ``k+1``
    predecessors against the target ``p_1(x | last k)``. Transition counts of a Markov
    process: the statistic is asymptotically chi-square with ``df`` degrees of freedom."""
    lms = result.model.lms
    V, k = lms.vocab, lms.order
    c = k + 1
    counts = result.ngram_counts.reshape(V**c, V).astype(np.float64)
    target = lms.probs[0]
    stat, df, hist_used = 0.0, 0, 0
    for h in range(V**c):
        n_h = counts[h].sum()
        if n_h == 0:
            continue
        model_ctx = h % (V**k)  # last k tokens: least significant digits
        exp = n_h * target[model_ctx]
        obs = counts[h]
        bad = (exp == 0) & (obs > 0)
        if bad.any():  # a token the target never emits: certain failure
            return F1Result(math.inf, max(df, 1), 0.0, int(counts.sum()), hist_used)
        terms = pooled_chi2_terms(exp, obs, min_expected)
        if terms is None:
            continue
        stat += terms[0]
        df += terms[1]
        hist_used += 1
    p = float(stats.chi2.sf(stat, df)) if df > 0 else math.nan
    return F1Result(stat, df, p, int(counts.sum()), hist_used)


def greedy_path(lms: MarkovLMs, length: int) -> np.ndarray:
    """The target's greedy continuation of the all-zero context, ``length`` tokens."""
    V, k = lms.vocab, lms.order
    hist = [0] * (k + 1)
    out = []
    top = lms.probs[0].argmax(axis=-1)
    for _ in range(length):
        h = sum(hist[-1 - r] * V**r for r in range(k))
        x = int(top[h])
        out.append(x)
        hist.append(x)
    return np.asarray(out, dtype=np.int64)


def greedy_check(result: TokenResult) -> bool:
    """Greedy mode F1: every chain emitted exactly the target's greedy sequence (its
    (k+2)-gram counts equal those of the greedy path of the same length)."""
    lms = result.model.lms
    V, k = lms.vocab, lms.order
    c = k + 1
    lengths = result.chain_tokens.astype(np.int64)
    path = greedy_path(lms, int(lengths.max()))
    seq = np.concatenate([np.zeros(c, np.int64), path])
    # code of token t with its c predecessors (oldest most significant, as in the simulator)
    weights = V ** np.arange(c, -1, -1)
    codes = np.stack([seq[t: t + c + 1] for t in range(path.size)]) @ weights
    per_len = np.bincount(lengths, minlength=path.size + 1)
    # a chain of length l counts codes[:l]: token t is counted by chains with length > t
    times = per_len[::-1].cumsum()[::-1][1:]  # chains with length > t, t = 0..max-1
    expected = np.bincount(codes, weights=times[: path.size], minlength=V ** (c + 1))
    return bool(np.array_equal(expected.astype(np.int64), result.ngram_counts))


# --- how far context-correlated acceptance departs from P1 ------------------------------------


def departure_from_p1(result: TokenResult) -> dict:
    """Feed P1 the acceptance laws fitted to this run's own rounds (iid at the measured
    acceptance rate; positional = per-position hazards; Beta-mixed) and compare its speedup
    with the token-level Monte Carlo. P1 assumes rounds independent with one law of ``A``
    censored by the block; context-dependent, correlated acceptance breaks that."""
    from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional
    from polyspec_theory.schemes import predict

    cas = result.model.cascade
    fitted = {"iid": [], "positional": [], "beta": []}
    fallback = []
    for i in range(cas.n - 1):
        h = result.round_hist[i]
        g_idx, a_idx = np.nonzero(h)
        cnt = h[g_idx, a_idx]
        caps = np.repeat(g_idx, cnt)
        acc = np.repeat(a_idx, cnt)
        iid = IIDGeometric.fit(acc, caps)
        fitted["iid"].append(iid.law)
        fitted["positional"].append(Positional.fit(acc, caps).law)
        beta = BetaMixed.fit(acc, caps)
        # Beta(a, b) tends to iid(a/(a+b)) as a + b -> inf, so its maximum likelihood is at
        # least the iid one; a fit below it did not converge (flat likelihood when the data
        # look iid): use that limit instead and say so.
        if beta.loglik < iid.loglik - 1e-6:
            fallback.append(i)
            fitted["beta"].append(iid.law)
        else:
            fitted["beta"].append(beta.law)
    mc = result.speedup
    out = {"mc_speedup": mc.value, "mc_ci95": [mc.low, mc.high], "fits": {},
           "beta_fit_replaced_by_iid_limit": fallback}
    for fam, laws in fitted.items():
        c2 = Cascade(cas.models, tuple(laws), cas.thresholds, cas.policy, cas.name)
        pred = predict(c2)
        out["fits"][fam] = {
            "p1_speedup": pred.speedup,
            "relative_departure": mc.value / pred.speedup - 1.0,
            "relative_departure_ci95": [mc.low / pred.speedup - 1.0,
                                        mc.high / pred.speedup - 1.0],
            "p1_phi": [lv.phi for lv in pred.levels[1:]],
            "p1_mean_emitted": [lv.mean_emitted for lv in pred.levels[:-1]],
            "laws": [law.to_config() for law in laws],
        }
    out["mc_phi"] = [p.value for p in result.phi]
    out["mc_mean_emitted"] = [e.value for e in result.mean_emitted]
    return out
