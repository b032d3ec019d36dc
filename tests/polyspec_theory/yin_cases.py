"""Shared cases for the tests of Yin et al.'s theorems (test_yin_theorems.py,
test_yin_batch.py): hypothesis strategies for laws and Markov chains, and brute-force
enumerators that simulate the algorithms literally (whole draft sequences, normalized
residuals, explicit branching over every random outcome), sharing no code with
polyspec_theory.yin.theorems; every probability they produce is exact up to float rounding.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
from hypothesis import strategies as st

from polyspec_theory.yin.markov import (
    MarkovPair,
    drop_support,
    logit_draft,
    mixture_draft,
    sequence_law,
)

EXACT = 1e-12


# --- strategies ----------------------------------------------------------------------------


@st.composite
def laws(draw, K: int):
    """A probability vector of length K, often with exact zeros."""
    w = draw(
        st.lists(st.one_of(st.just(0.0), st.floats(0.001, 1.0)), min_size=K, max_size=K).filter(
            lambda v: sum(v) > 0
        )
    )
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


@st.composite
def law_pairs(draw, k_min: int = 1, k_max: int = 6):
    K = draw(st.integers(k_min, k_max))
    return draw(laws(K)), draw(laws(K))


@st.composite
def chains(
    draw,
    k_min=2,
    k_max=4,
    t_min=1,
    t_max=5,
    kinds=("mixture", "logit"),
    eps=(0.0, 1.0),
    zeros=True,
    draft_drop=None,
):
    """A random target/draft pair: Dirichlet target rows (optionally with zeros), draft a
    mixture or a logit perturbation, optionally missing part of the target's support."""
    K = draw(st.integers(k_min, k_max))
    T = draw(st.integers(t_min, t_max))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    conc = draw(st.sampled_from([0.3, 1.0, 4.0]))
    target = rng.dirichlet(np.full(K, conc), size=(T, K))
    target /= target.sum(axis=-1, keepdims=True)
    init = rng.dirichlet(np.ones(K))
    if zeros and draw(st.booleans()):
        target = drop_support(target, draw(st.integers(1, K - 1)), rng)
        init = drop_support(init, draw(st.integers(0, K - 1)), rng)
    kind = draw(st.sampled_from(kinds))
    if kind == "mixture":
        e = draw(st.floats(*eps))
        draft = mixture_draft(target, e, rng, conc)
    else:
        draft = logit_draft(target, draw(st.floats(0.3, 3.0)), draw(st.floats(0.0, 2.0)), rng)
    drop = draft_drop
    if drop is None:
        drop = draw(st.integers(0, K - 1)) if zeros and draw(st.booleans()) else 0
    if drop:
        draft = drop_support(draft, drop, rng)
    return MarkovPair(init, target, draft)


# --- brute-force enumerators ---------------------------------------------------------------


def residual(p, d):
    r = np.maximum(p - d, 0.0)
    return r / r.sum()


def brute_force_sd(init, target, draft):
    """Literal SD (draft proposes to the end of the horizon, verify in order, restart after a
    rejection) enumerated over every draft sequence and every accept/resample outcome.

    Returns ``(law over x_1..x_T as a dict, E[N_rej])``.
    """
    T, K = target.shape[0], target.shape[1]
    law = defaultdict(float)
    acc = [0.0]

    def finish(seq, prob, nrej):
        law[seq] += prob
        acc[0] += prob * nrej

    def round_(prefix, s, n, prob, nrej):
        if n == T:
            finish(prefix, prob, nrej)
            return
        for ys in itertools.product(range(K), repeat=T - n):
            q, prev = prob, s
            for k, y in enumerate(ys):
                q *= draft[n + k, prev, y]
                prev = y
            if q > 0:
                verify(prefix, s, n, ys, q, nrej)

    def verify(prefix, s, n, ys, q, nrej):
        prev = s
        for k, y in enumerate(ys):
            t, d = target[n + k, prev], draft[n + k, prev]
            a = min(1.0, t[y] / d[y])
            if a < 1.0:
                res = residual(t, d)
                for z in range(K):
                    if res[z] > 0:
                        round_(prefix + ys[:k] + (z,), z, n + k + 1, q * (1 - a) * res[z], nrej + 1)
            q *= a
            if q == 0:
                return
            prev = y
        finish(prefix + ys, q, nrej)

    for x0 in range(K):
        if init[x0] > 0:
            round_((), x0, 0, init[x0], 0)
    return dict(law), acc[0]


def rrs_outcomes(t, d, ys):
    """Recursive rejection sampling over draft tokens ``ys`` (normalized residuals):
    yields ``(i, prob)`` for "draft i accepted" and finally ``(None, prob, residual)``."""
    p, q = t.copy(), 1.0
    for i, y in enumerate(ys):
        a = min(1.0, p[y] / d[y])
        yield i, q * a
        q *= 1 - a
        if q == 0:
            return
        p = residual(p, d)
    yield None, q, p


def brute_force_batch(init, target, draft, M, mode):
    """Literal batch SD with ``M`` drafts (see polyspec_theory.yin.theorems for the two modes),
    enumerated over all draft tuples/sequences and outcomes: ``(law dict, E[N_rej])``."""
    T, K = target.shape[0], target.shape[1]
    law = defaultdict(float)
    acc = [0.0]

    def finish(seq, prob, nrej):
        law[seq] += prob
        acc[0] += prob * nrej

    def per_position(prefix, s, n, prob, nrej):
        if n == T:
            finish(prefix, prob, nrej)
            return
        t, d = target[n, s], draft[n, s]
        for ys in itertools.product(range(K), repeat=M):
            q = prob * np.prod([d[y] for y in ys])
            if q == 0:
                continue
            for out in rrs_outcomes(t, d, ys):
                if out[0] is None:
                    for z in range(K):
                        if out[2][z] > 0:
                            per_position(prefix + (z,), z, n + 1, q * out[1] * out[2][z], nrej + 1)
                elif out[1] > 0:
                    y = ys[out[0]]
                    per_position(prefix + (y,), y, n + 1, q * out[1], nrej)

    def sequences(prefix, s, n, prob, nrej):
        if n == T:
            finish(prefix, prob, nrej)
            return
        L = T - n
        for flat in itertools.product(range(K), repeat=M * L):
            seqs = [flat[m * L : (m + 1) * L] for m in range(M)]
            q = prob
            for seq in seqs:
                prev = s
                for k, y in enumerate(seq):
                    q *= draft[n + k, prev, y]
                    prev = y
            if q == 0:
                continue
            t, d = target[n, s], draft[n, s]
            for out in rrs_outcomes(t, d, [seq[0] for seq in seqs]):
                if out[0] is None:
                    for z in range(K):
                        if out[2][z] > 0:
                            sequences(prefix + (z,), z, n + 1, q * out[1] * out[2][z], nrej + 1)
                elif out[1] > 0:
                    follow(prefix, seqs[out[0]], n, q * out[1], nrej)

    def follow(prefix, seq, n, q, nrej):
        """First token of ``seq`` accepted at position n; plain SD on the rest of it."""
        prev = seq[0]
        for k in range(1, len(seq)):
            y = seq[k]
            t, d = target[n + k, prev], draft[n + k, prev]
            a = min(1.0, t[y] / d[y])
            if a < 1.0:
                res = residual(t, d)
                for z in range(K):
                    if res[z] > 0:
                        sequences(
                            prefix + seq[:k] + (z,), z, n + k + 1, q * (1 - a) * res[z], nrej + 1
                        )
            q *= a
            if q == 0:
                return
            prev = y
        finish(prefix + seq, q, nrej)

    run = per_position if mode == "per_position" else sequences
    for x0 in range(K):
        if init[x0] > 0:
            run((), x0, 0, init[x0], 0)
    return dict(law), acc[0]


def law_to_array(law: dict, K: int, T: int) -> np.ndarray:
    out = np.zeros((K,) * T)
    for seq, p in law.items():
        out[seq] += p
    return out


def tv_of(p, q):
    return 0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum(axis=-1)


def target_law(pair):
    return sequence_law(pair.init, pair.target)
