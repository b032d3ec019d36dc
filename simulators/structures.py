"""Monte Carlo of cascades with token trees and adaptive draft lengths, in JAX (the independent
check of :mod:`polyspec_theory.structures.structured`, :mod:`polyspec_theory.structures.trees` and
:mod:`polyspec_theory.structures.schedule`; docs/theory.md Part III-D).

Length level (:func:`simulate_structured`): the algorithm itself, event by event, one event =
one verification round at some pair level, as in :mod:`simulators.length`:

* upper pairs and chain / HF bottom pairs: block ``G`` (bottom: the current length), accepted
  count by inverse CDF of the pair's law, ``A = min(#{k >= 1 : S_k > u}, G)``;
* a tree at the bottom: the accepted path is walked from the root, one uniform per depth
  choosing the accepted child by rank (``p_{d,1}, p_{d,2}, ...`` among the children present)
  or none; ``A`` = the depth reached; the drafter's time is ``sum_d T_n(m_d)``;
* a confidence cut-off at the bottom: per position a top probability ``C ~ Beta(a, b)``
  (``jax.random.beta``) and an acceptance ``u < sigmoid(b0 + b1 logit C)``; the drafter stops
  at the first ``C < eta`` (that forward counts) or at the cap;
* an HF schedule: the pair's length moves ``+2`` after ``A = G``, ``-1`` otherwise.

Each chain runs ``burn_in`` top-level rounds (discarded: the length chains forget their start)
and then exactly ``rounds`` measured top-level rounds. A fixed number of rounds per chain, not
a token target: with Markov-modulated rounds a token-count stopping time would bias the ratio,
whereas over a fixed number of rounds ``E[tokens] / E[time]`` is the finite-horizon value of
:meth:`~polyspec_theory.structures.structured.StructuredPrediction.finite_horizon`, within
``exp(-burn_in / mixing time)`` of the stationary one. Chains are independent: ratio
estimator ``T_1(1) sum tokens / sum time`` with a delta-method CI (:mod:`simulators.runtime`).

Token level (:func:`simulate_residual_tree`): SpecInfer's multi-step speculative sampling on
a tree with real categorical draws — children iid from ``Q``, residual updates of ``P``,
correction / bonus tokens — for a :class:`~polyspec_theory.structures.trees.ResidualLaw`.

Random numbers: ``jax.random`` (threefry) keys ``fold_in(key(seed), chunk)``; results depend
on ``(seed, chains, chunk_len)`` only. float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from polyspec_theory import RegimeLaw
from polyspec_theory.core.config import Cascade, as_cascade
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.structures.schedule import ConfidenceLaw, ConfidenceSchedule, HFSchedule
from polyspec_theory.structures.trees import ResidualLaw, Tree, TreeLaw

from .runtime import (
    RatioEstimate,
    as_chains,
    make_key,
    random_uniform,
    ratio_estimate,
    to_host,
)

__all__ = [
    "StructStatic",
    "StructModel",
    "StructLevel",
    "StructuredResult",
    "simulate_structured",
    "ResidualTreeResult",
    "simulate_residual_tree",
    "DEFAULT_BURN_IN",
]

DEFAULT_BURN_IN = 200  # top-level rounds discarded per chain when a schedule is present
BOTTOM_KINDS = ("chain", "hf", "tree", "confidence")


class StructStatic(NamedTuple):
    m: int
    width: int  # survival / cost tables cover blocks 0..width
    bottom: str  # one of BOTTOM_KINDS
    hf: tuple  # bool per pair level
    truncate: bool
    depth: int  # tree depth (0 if none)
    kmax: int  # tree: most children of a node, rounded up to a power of two
    cap: int  # confidence: cap (0 if none)
    n_unif: int  # uniforms per event


class StructParams(NamedTuple):
    thresholds: jax.Array  # int32[m] (HF levels: unused)
    hf_min: jax.Array  # int32[m]
    hf_max: jax.Array  # int32[m]
    hf_start: jax.Array  # int32[m]
    survival: jax.Array  # f64[m, width]: S_k, k = 1..width
    verify_cost: jax.Array  # f64[m, width + 1]: T_i(g + 1)
    draft_t1: jax.Array  # f64: T_n(1)
    child: jax.Array  # int32[width + 1, kmax]: node v's children (v <= N), -1 past them
    nchild: jax.Array  # int32[width + 1]: 0 past node N
    rank_cum: jax.Array  # f64[depth, kmax]: cumulative rank probabilities per child depth
    tree_nodes: jax.Array  # int32
    tree_draft_time: jax.Array  # f64
    conf: jax.Array  # f64[5]: a, b, b0, b1, eta


def _bounds(cascade: Cascade) -> list[int]:
    """Largest block per pair level (sizes the tables)."""
    m = cascade.n - 1
    g = [0] * m
    lmax_below = 1
    for i in range(m - 1, -1, -1):
        t = cascade.trees[i] if cascade.trees else None
        s = cascade.schedules[i] if cascade.schedules else None
        if t is not None:
            g[i], lmax_below = t.n_nodes, t.max_depth + 1
            continue
        if isinstance(s, ConfidenceSchedule):
            g[i] = s.cap(cascade.thresholds[i])
            lmax_below = g[i] + 1
            continue
        th = s.max if isinstance(s, HFSchedule) else cascade.thresholds[i]
        g[i] = th if cascade.policy == "truncate" else th - 1 + (1 if i == m - 1 else lmax_below)
        lmax_below = g[i] + 1
    return g


@dataclass(frozen=True)
class StructModel:
    """A :class:`Cascade` with trees / schedules compiled to tables for the simulator."""

    cascade: Cascade
    static: StructStatic
    params: StructParams = field(repr=False)
    gmax: tuple

    @classmethod
    def from_cascade(cls, cascade: Cascade) -> StructModel:
        as_cascade(cascade)
        n, m = cascade.n, cascade.n - 1
        for i, law in enumerate(cascade.laws):
            if isinstance(law, RegimeLaw):
                raise PolyspecInputError(
                    f"acceptance[{i}]", "cap-conditional (regime) laws are not simulated here")
        trees = cascade.trees or (None,) * m
        scheds = cascade.schedules or (None,) * m
        gmax = _bounds(cascade)
        width = max(8, 1 << (max(gmax) - 1).bit_length())
        bottom_tree: Tree | None = trees[m - 1]
        bs = scheds[m - 1]
        bottom = ("tree" if bottom_tree is not None else
                  "confidence" if isinstance(bs, ConfidenceSchedule) else
                  "hf" if isinstance(bs, HFSchedule) else "chain")
        hf = tuple(isinstance(s, HFSchedule) for s in scheds)
        surv = np.zeros((m, width))
        for i, law in enumerate(cascade.laws):
            surv[i] = law.survival(width)[1:]
        g = np.arange(width + 1)
        # a verification round of M_i: T_i(g + 1) plus its per-round overhead o_i (O1)
        vcost = np.stack([np.asarray(cascade.costs[i](g + 1), dtype=np.float64)
                          + cascade.models[i].overhead for i in range(m)])
        # tree tables
        if bottom_tree is not None:
            # tables padded to ``width + 1`` nodes (no node reaches a padded row) and to a power
            # of two of children (a padded rank is never drawn: ``k < c``), so trees of one
            # depth and width share one compilation
            t = bottom_tree
            D, k_max = t.max_depth, max(t.max_children, 1)
            K = 1 << (k_max - 1).bit_length()
            child = np.full((width + 1, K), -1, dtype=np.int32)
            for v, cs in enumerate(t.children):
                child[v, : len(cs)] = cs
            nch = np.zeros(width + 1, dtype=np.int32)
            nch[: t.n_nodes + 1] = [len(c) for c in t.children]
            law = cascade.laws[m - 1]
            if isinstance(law, TreeLaw):
                rp = law.rank_probs(D, k_max)
            else:  # a chain law on a path: the hazards of its survival
                s = law.survival(D)
                with np.errstate(divide="ignore", invalid="ignore"):
                    h = np.where(s[:-1] > 0, s[1:] / s[:-1], 0.0)
                rp = np.zeros((D, k_max))
                rp[:, 0] = h
            rank_cum = np.pad(np.cumsum(rp, axis=1), ((0, 0), (0, K - k_max)), mode="edge")
            tdt = float(np.sum(cascade.costs[n - 1](t.draft_positions())))
            tn = t.n_nodes
        else:
            D = K = 0
            child = np.full((1, 1), -1, dtype=np.int32)
            nch = np.zeros(1, dtype=np.int32)
            rank_cum = np.zeros((1, 1))
            tdt, tn = 0.0, 0
        if bottom == "confidence":
            law = cascade.laws[m - 1]
            assert isinstance(law, ConfidenceLaw)
            cap = bs.cap(cascade.thresholds[m - 1])
            conf = np.array([law.a, law.b, law.b0, law.b1, bs.eta])
        else:
            cap = 0
            conf = np.array([1.0, 1.0, 0.0, 0.0, 0.0])
        hmin = np.array([s.min if isinstance(s, HFSchedule) else 1 for s in scheds], np.int32)
        hmax = np.array([s.max if isinstance(s, HFSchedule) else 1 for s in scheds], np.int32)
        hst = np.array([s.start if isinstance(s, HFSchedule) else cascade.thresholds[i]
                        for i, s in enumerate(scheds)], np.int32)
        params = StructParams(
            thresholds=jnp.asarray(cascade.thresholds, jnp.int32),
            hf_min=jnp.asarray(hmin), hf_max=jnp.asarray(hmax), hf_start=jnp.asarray(hst),
            survival=jnp.asarray(surv, jnp.float64),
            verify_cost=jnp.asarray(vcost, jnp.float64),
            draft_t1=jnp.asarray(cascade.costs[n - 1].t1, jnp.float64),
            child=jnp.asarray(child), nchild=jnp.asarray(nch),
            rank_cum=jnp.asarray(rank_cum, jnp.float64),
            tree_nodes=jnp.asarray(tn, jnp.int32),
            tree_draft_time=jnp.asarray(tdt, jnp.float64),
            conf=jnp.asarray(conf, jnp.float64),
        )
        static = StructStatic(m, width, bottom, hf, cascade.policy == "truncate", D, K, cap,
                              max(1, D, cap))
        return cls(cascade, static, params, tuple(gmax))


class _State(NamedTuple):
    level: jax.Array  # int32
    acc: jax.Array  # int32[m] pending blocks (entry m-1 unused)
    theta: jax.Array  # int32[m] current thresholds / HF lengths
    top_rounds: jax.Array  # int64 top-level rounds completed
    done: jax.Array  # bool
    tokens: jax.Array  # int64 (measured)
    rounds: jax.Array  # int64[m]
    gsum: jax.Array  # int64[m]
    lsum: jax.Array  # int64[m]
    full: jax.Array  # int64[m]
    fwd: jax.Array  # int64[n]
    time: jax.Array  # f64[n]


def _init(params: StructParams, static: StructStatic, done) -> _State:
    m = static.m
    theta = jnp.where(jnp.asarray(static.hf), params.hf_start, params.thresholds)
    z = jnp.zeros(m, jnp.int64)
    return _State(jnp.int32(m - 1), jnp.zeros(m, jnp.int32), theta.astype(jnp.int32),
                  jnp.int64(0), jnp.asarray(done), jnp.int64(0), z, z, z, z,
                  jnp.zeros(m + 1, jnp.int64), jnp.zeros(m + 1, jnp.float64))


def _tree_walk(params: StructParams, static: StructStatic, u):
    K = static.kmax
    ks = jnp.arange(K)

    def body(d, carry):
        node, a, alive = carry
        c = params.nchild[node]
        k = jnp.sum((ks < c) & (params.rank_cum[d] <= u[d]), dtype=jnp.int32)
        ok = alive & (k < c)
        nxt = params.child[node, jnp.minimum(k, K - 1)]
        return jnp.where(ok, nxt, node), a + ok.astype(jnp.int32), ok

    _, a, _ = lax.fori_loop(0, static.depth, body, (jnp.int32(0), jnp.int32(0), True))
    return a


def _confidence_draft(params: StructParams, static: StructStatic, u, c):
    cap = static.cap
    eta, b0, b1 = params.conf[4], params.conf[2], params.conf[3]
    drafted = c[:cap] >= eta
    x = jnp.log(c[:cap]) - jnp.log1p(-c[:cap])
    z = b0 + jnp.where(b1 == 0.0, 0.0, b1 * x)
    accepted = u[:cap] < jax.nn.sigmoid(z)
    g = jnp.sum(jnp.cumprod(drafted.astype(jnp.int32)), dtype=jnp.int32)
    a = jnp.sum(jnp.cumprod((drafted & accepted).astype(jnp.int32)), dtype=jnp.int32)
    fwd = g + (g < cap).astype(jnp.int32)
    return g, a, fwd


def _event(params: StructParams, static: StructStatic, n_measure, burn_in, u, c, st: _State):
    """One verification round of one chain (a no-op once done)."""
    m = static.m
    active = ~st.done
    lvl = st.level
    bottom = lvl == m - 1
    th = st.theta
    g_up = st.acc[lvl]
    if static.truncate:
        g_up = jnp.minimum(g_up, th[lvl])
    a_surv_all = jnp.sum(params.survival[lvl] > u[0], dtype=jnp.int32)
    dt1 = params.draft_t1
    if static.bottom == "tree":
        g_b = params.tree_nodes
        a_b = _tree_walk(params, static, u)
        fwd_b = jnp.int32(static.depth)
        dtime = params.tree_draft_time
    elif static.bottom == "confidence":
        g_b, a_b, fwd_b = _confidence_draft(params, static, u, c)
        dtime = fwd_b.astype(jnp.float64) * dt1
    else:
        g_b = th[m - 1]
        a_b = jnp.minimum(a_surv_all, g_b)
        fwd_b = g_b
        dtime = g_b.astype(jnp.float64) * dt1
    block = jnp.where(bottom, g_b, g_up).astype(jnp.int32)
    a = jnp.where(bottom, a_b, jnp.minimum(a_surv_all, g_up)).astype(jnp.int32)
    emitted = a + 1
    vtime = params.verify_cost[lvl, block]
    measuring = active & (st.top_rounds >= burn_in)
    mi = measuring.astype(jnp.int64)
    onehot_l = (jnp.arange(m) == lvl).astype(jnp.int64) * mi
    full = (a == block).astype(jnp.int64)
    # pending blocks and the next level
    parent = jnp.maximum(lvl - 1, 0)
    acc = jnp.where(active, st.acc.at[lvl].set(0), st.acc)
    acc = jnp.where(active & (lvl > 0), acc.at[parent].add(emitted), acc)
    nxt = jnp.where((lvl > 0) & (acc[parent] >= th[parent]), parent, m - 1).astype(jnp.int32)
    # HF length update of this level
    hf = jnp.asarray(static.hf)[lvl]
    new_len = jnp.where(a == block, jnp.minimum(th[lvl] + 2, params.hf_max[lvl]),
                        jnp.maximum(th[lvl] - 1, params.hf_min[lvl]))
    theta = jnp.where(active & hf, th.at[lvl].set(new_len), th)
    top = active & (lvl == 0)
    top_rounds = st.top_rounds + top.astype(jnp.int64)
    done = st.done | (top & (top_rounds >= burn_in + n_measure))
    fwd_inc = jnp.zeros(m + 1, jnp.int64).at[lvl].set(1)
    fwd_inc = fwd_inc.at[m].add(jnp.where(bottom, fwd_b, 0).astype(jnp.int64))
    time_inc = jnp.zeros(m + 1, jnp.float64).at[lvl].set(vtime)
    time_inc = time_inc.at[m].add(jnp.where(bottom, dtime, 0.0))
    new = _State(
        level=jnp.where(active, nxt, lvl),
        acc=acc,
        theta=theta,
        top_rounds=top_rounds,
        done=done,
        tokens=st.tokens + jnp.where(measuring & (lvl == 0), emitted, 0).astype(jnp.int64),
        rounds=st.rounds + onehot_l,
        gsum=st.gsum + onehot_l * block.astype(jnp.int64),
        lsum=st.lsum + onehot_l * emitted.astype(jnp.int64),
        full=st.full + onehot_l * full,
        fwd=st.fwd + fwd_inc * mi,
        time=st.time + time_inc * measuring.astype(jnp.float64),
    )
    code_lvl = jnp.where(measuring, lvl, -1)
    return new, (code_lvl, block, a, th[lvl])


@partial(jax.jit, static_argnums=(1, 2, 3))
def _run_chunk(params, static: StructStatic, chunk_len: int, chains: int, n_measure, burn_in,
               key, chunk_index, state: _State, /):
    ck = jax.random.fold_in(key, chunk_index)
    ku, kb = jax.random.split(ck)
    u = random_uniform(ku, (chunk_len, chains, static.n_unif), jnp.float64)
    if static.cap:
        a, b = params.conf[0], params.conf[1]
        c = jax.random.beta(kb, a, b, (chunk_len, chains, static.cap), jnp.float64)
    else:
        c = jnp.zeros((chunk_len, chains, 1), jnp.float64)
    step = jax.vmap(lambda uu, cc, st: _event(params, static, n_measure, burn_in, uu, cc, st))

    def body(st, xs):
        uu, cc = xs
        st, out = step(uu, cc, st)
        return st, out

    return lax.scan(body, state, (u, c))


@dataclass(frozen=True)
class StructLevel:
    """Per-model Monte-Carlo estimates (ratio estimators over chains, 95 % CIs)."""

    name: str
    phi: RatioEstimate | None
    mean_block: RatioEstimate | None
    mean_emitted: RatioEstimate | None
    full_acceptance: RatioEstimate | None
    forwards_per_token: RatioEstimate
    time_per_token: RatioEstimate
    time_share: float

    def to_dict(self) -> dict:
        def est(e):
            return None if e is None else e.to_dict()

        return {"name": self.name, "phi": est(self.phi), "mean_block": est(self.mean_block),
                "mean_emitted": est(self.mean_emitted),
                "full_acceptance": est(self.full_acceptance),
                "forwards_per_token": est(self.forwards_per_token),
                "time_per_token": est(self.time_per_token), "time_share": self.time_share}


@dataclass(frozen=True)
class StructuredResult:
    speedup: RatioEstimate
    time_per_token: RatioEstimate
    levels: tuple[StructLevel, ...]
    tokens: int
    chains: int
    rounds_per_chain: int
    burn_in: int
    seed: int | None  # None when a PRNG key was passed
    hist: np.ndarray = field(repr=False)  # [m, G, L]: measured rounds by block and emitted
    lengths: np.ndarray = field(repr=False)  # [m, theta]: measured rounds by current length
    chain_tokens: np.ndarray = field(default=None, repr=False)
    chain_time: np.ndarray = field(default=None, repr=False)
    ci_method: str = ("independent chains, each burn_in discarded + a fixed number of "
                      "top-level rounds; ratio estimator with a delta-method normal 95% CI")

    def to_dict(self) -> dict:
        return {"speedup": self.speedup.value, "ci95": [self.speedup.low, self.speedup.high],
                "se": self.speedup.se, "time_per_token": self.time_per_token.value,
                "tokens": self.tokens, "chains": self.chains,
                "rounds_per_chain": self.rounds_per_chain, "burn_in": self.burn_in,
                "seed": self.seed, "ci_method": self.ci_method,
                "levels": [lv.to_dict() for lv in self.levels]}


def simulate_structured(cascade: Cascade, rounds: int, seed: int = 0, *, chains: int = 256,
                        burn_in: int | None = None, chunk_len: int = 64,
                        max_events: int | None = None) -> StructuredResult:
    """Monte Carlo of ``cascade`` (trees / schedules allowed; module docstring): ``chains``
    independent chains, each ``burn_in`` discarded top-level rounds (default
    :data:`DEFAULT_BURN_IN` with a schedule, else 0) then ``rounds`` measured ones. ``seed``:
    an int or a JAX PRNG key; same seed -> identical result."""
    if not isinstance(cascade, StructModel):
        as_cascade(cascade)
    rounds = as_int(rounds, "rounds", low=1, high=10**9)
    key = make_key(seed)  # an int seed or a typed PRNG key
    seed = seed if isinstance(seed, int) else None
    chains = as_chains(chains)
    chunk_len = as_int(chunk_len, "chunk_len", low=1, high=4096)
    model = cascade if isinstance(cascade, StructModel) else StructModel.from_cascade(cascade)
    cas, static, params = model.cascade, model.static, model.params
    if burn_in is None:
        burn_in = DEFAULT_BURN_IN if any(static.hf) else 0
    burn_in = as_int(burn_in, "burn_in", low=0, high=10**9)
    if max_events is not None:
        max_events = as_int(max_events, "max_events", low=1)
    m, n, w = static.m, cas.n, static.width
    state = jax.vmap(lambda d: _init(params, static, d))(jnp.zeros(chains, bool))
    hist = np.zeros((m, w + 1, w + 2), np.int64)
    lmax_theta = int(max(int(np.max(np.asarray(params.hf_max))), *cas.thresholds)) + 1
    lengths = np.zeros((m, lmax_theta), np.int64)
    chunk = 0
    while True:
        state, (lv, blk, acc, th) = _run_chunk(params, static, chunk_len, chains,
                                               jnp.int64(rounds), jnp.int64(burn_in), key,
                                               jnp.int64(chunk), state)
        chunk += 1
        lv, blk, acc, th = (to_host(x).ravel() for x in (lv, blk, acc, th))
        sel = lv >= 0
        np.add.at(hist, (lv[sel], blk[sel], acc[sel] + 1), 1)
        np.add.at(lengths, (lv[sel], np.minimum(th[sel], lmax_theta - 1)), 1)
        if to_host(state.done).all():
            break
        if max_events is not None and chunk * chunk_len >= max_events:
            raise PolyspecInputError(
                "max_events", f"chains not finished after {chunk * chunk_len} events per chain")
    tok = to_host(state.tokens).astype(np.float64)
    rnd = to_host(state.rounds).astype(np.float64)
    gs, ls, fu = (to_host(x).astype(np.float64) for x in (state.gsum, state.lsum, state.full))
    fwd = to_host(state.fwd).astype(np.float64)
    tm = to_host(state.time)
    total = tm.sum(axis=1)
    sys_rounds = np.concatenate([rnd, fwd[:, m:]], axis=1)  # rounds of S_j (S_n: forwards)
    levels = []
    for j in range(n):
        levels.append(StructLevel(
            name=cas.models[j].name,
            phi=None if j == 0 else ratio_estimate(sys_rounds[:, j], sys_rounds[:, j - 1]),
            mean_block=ratio_estimate(gs[:, j], rnd[:, j]) if j < m else None,
            mean_emitted=ratio_estimate(ls[:, j], rnd[:, j]) if j < m else None,
            full_acceptance=ratio_estimate(fu[:, j], rnd[:, j]) if j < m else None,
            forwards_per_token=ratio_estimate(fwd[:, j], tok),
            time_per_token=ratio_estimate(tm[:, j], tok),
            time_share=float(tm[:, j].sum() / total.sum()),
        ))
    t1 = cas.costs[0].t1
    return StructuredResult(
        speedup=ratio_estimate(tok, total, scale=t1),
        time_per_token=ratio_estimate(total, tok),
        levels=tuple(levels), tokens=int(tok.sum()), chains=chains, rounds_per_chain=rounds,
        burn_in=burn_in, seed=seed, hist=hist, lengths=lengths, chain_tokens=tok,
        chain_time=total)


# --- token level: SpecInfer's residual rule on a tree ----------------------------------------


@dataclass(frozen=True)
class ResidualTreeResult:
    """Counts from :func:`simulate_residual_tree`: ``rank_counts[c, k]`` nodes with ``c``
    children whose accepted child had rank ``k`` (0 = none); ``token_counts[z, x]`` tokens
    emitted at nodes in context ``z``; ``accepted_counts[d]`` rounds with ``A = d``."""

    rank_counts: np.ndarray
    token_counts: np.ndarray
    accepted_counts: np.ndarray
    rounds: int
    seed: int | None

    def mean_emitted(self) -> RatioEstimate:
        d = np.arange(self.accepted_counts.size)
        x = np.repeat(d + 1.0, self.accepted_counts)
        from .runtime import mean_estimate

        return mean_estimate(x)


def _categorical(cdf, u):
    return jnp.minimum(jnp.sum(cdf <= u, dtype=jnp.int32), cdf.shape[-1] - 1)


def simulate_residual_tree(tree: Tree, law: ResidualLaw, rounds: int, seed: int = 0,
                           batch: int = 65536) -> ResidualTreeResult:
    """SpecInfer's multi-step speculative sampling on ``tree``, token by token: at each
    accepted node draw its context ``z ~ weights``, its children's tokens iid from ``Q_z``
    (one per child, in rank order), try them in order accepting child j with probability
    ``min(1, P_j(x_j) / Q_z(x_j))`` and replacing ``P_{j+1} = (P_j - Q_z)_+ / ||.||`` after
    a rejection; if all are rejected (or the node is a leaf) emit a token from the last
    residual (``P_z`` at a leaf) and stop. Checks T2 (rank law) and losslessness."""
    if not isinstance(tree, Tree):
        raise PolyspecInputError("tree", "must be a Tree")
    if not isinstance(law, ResidualLaw):
        raise PolyspecInputError("law", "must be a ResidualLaw")
    rounds = as_int(rounds, "rounds", low=1, high=10**9)
    key = make_key(seed)  # an int seed or a typed PRNG key
    seed = seed if isinstance(seed, int) else None
    batch = as_int(batch, "batch", low=1, high=2**22)
    P = jnp.asarray(law.target)
    Q = jnp.asarray(law.draft)
    Z, V = law.target.shape
    qcdf = jnp.cumsum(Q, axis=1)
    wcdf = jnp.cumsum(jnp.asarray(law.weights))
    D, K = tree.max_depth, max(tree.max_children, 1)
    child = np.full((tree.n_nodes + 1, K), -1, np.int32)
    for v, cs in enumerate(tree.children):
        child[v, : len(cs)] = cs
    child = jnp.asarray(child)
    nch = jnp.asarray([len(c) for c in tree.children], jnp.int32)
    steps, nu = D + 1, 2 * K + 2

    def one_round(u):  # u: [steps, nu]
        def step(carry, ud):
            node, alive = carry
            z = _categorical(wcdf, ud[0])
            p0, q = P[z], Q[z]
            c = nch[node]

            def try_child(j, s):
                pj, acc_rank, tok = s
                x = _categorical(qcdf[z], ud[1 + 2 * j])
                ok = (j < c) & (acc_rank == 0) & (ud[2 + 2 * j] * q[x] < pj[x])
                res = jnp.maximum(pj - q, 0.0)
                zs = res.sum()
                rej = (j < c) & (acc_rank == 0) & ~ok
                pj = jnp.where(rej & (zs > 0), res / jnp.where(zs > 0, zs, 1.0), pj)
                return pj, jnp.where(ok, j + 1, acc_rank), jnp.where(ok, x, tok)

            pj, rank, tok = lax.fori_loop(0, K, try_child, (p0, jnp.int32(0), jnp.int32(0)))
            corr = _categorical(jnp.cumsum(pj), ud[nu - 1])
            tok = jnp.where(rank > 0, tok, corr)
            nxt = child[node, jnp.maximum(rank - 1, 0)]
            out = (jnp.where(alive, c, -1), rank, z, tok)
            return (jnp.where(alive & (rank > 0), nxt, node), alive & (rank > 0)), out

        (_, _), outs = lax.scan(step, (jnp.int32(0), True), u)
        return outs

    run = jax.jit(jax.vmap(one_round))
    rank_counts = np.zeros((K + 1, K + 1), np.int64)
    token_counts = np.zeros((Z, V), np.int64)
    acc_counts = np.zeros(D + 1, np.int64)
    done, b = 0, 0
    while done < rounds:
        nb = min(batch, rounds - done)
        u = random_uniform(jax.random.fold_in(key, b), (batch, steps, nu), jnp.float64)
        cs, rk, zz, tk = (to_host(x)[:nb] for x in run(u))
        vis = cs >= 0
        np.add.at(rank_counts, (cs[vis], rk[vis]), 1)
        np.add.at(token_counts, (zz[vis], tk[vis]), 1)
        acc_counts += np.bincount(vis.sum(axis=1) - 1, minlength=D + 1)
        done += nb
        b += 1
    return ResidualTreeResult(rank_counts, token_counts, acc_counts, rounds, seed)

