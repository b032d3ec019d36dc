"""The hidden-regime E-step (regimes.py: the pairwise product tree and ``_estep``) against
independent computations: the tree's forward and backward directions against the
products taken one matrix at a time; the log-likelihood and every expected count against
brute-force enumeration of the hidden regime of every token position (tiny inputs) and
against a textbook scaled forward-backward over token positions (long inputs, many
sequences of uneven lengths). Inputs drawn by hypothesis."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.regimes import (
    HiddenRegimes,
    _backward,
    _estep,
    _forward,
    _RoundData,
    _upsweep,
)

SETTINGS = settings(derandomize=True, deadline=None, max_examples=60)


# ---- independent references ----------------------------------------------------------
def _token_observations(a, g, groups):
    """Per sequence (labels in sorted order), the observation of every token position: 1
    accepted, 0 rejected, None unobserved (a full round's bonus token, and the position
    after the last round, which the last transition enters)."""
    out = []
    for lab in np.unique(groups):
        sel = groups == lab
        obs = []
        for aa, gg in zip(a[sel], g[sel], strict=True):
            obs += [1] * int(aa) + [0 if aa < gg else None]
        out.append(obs + [None])
    return out


def _emission(m: HiddenRegimes, x) -> np.ndarray:
    return m.accept if x == 1 else 1.0 - m.accept if x == 0 else np.ones(m.k)


def _brute_force(m: HiddenRegimes, a, g, groups):
    """Log-likelihood and expected counts by enumerating every regime path of every
    sequence (``K ** positions`` paths)."""
    k = m.k
    ll = 0.0
    cnt = {"init": np.zeros(k), "trans": np.zeros((k, k)), "ones": np.zeros(k),
           "zeros": np.zeros(k)}
    for obs in _token_observations(a, g, groups):
        paths = np.array(list(itertools.product(range(k), repeat=len(obs))))
        w = m.init[paths[:, 0]].copy()
        for t, x in enumerate(obs):
            w *= _emission(m, x)[paths[:, t]]
            if t + 1 < len(obs):
                w *= m.trans[paths[:, t], paths[:, t + 1]]
        total = w.sum()
        ll += math.log(total)
        p = w / total
        cnt["init"] += np.bincount(paths[:, 0], weights=p, minlength=k)
        for t, x in enumerate(obs):
            if x is not None:
                key = "ones" if x == 1 else "zeros"
                cnt[key] += np.bincount(paths[:, t], weights=p, minlength=k)
            if t + 1 < len(obs):
                np.add.at(cnt["trans"], (paths[:, t], paths[:, t + 1]), p)
    return ll, cnt


def _token_forward_backward(m: HiddenRegimes, a, g, groups):
    """Log-likelihood and expected counts by the scaled forward-backward algorithm over
    token positions, one sequence after the other (Rabiner's recursions)."""
    k, tr = m.k, m.trans
    ll = 0.0
    cnt = {"init": np.zeros(k), "trans": np.zeros((k, k)), "ones": np.zeros(k),
           "zeros": np.zeros(k)}
    for obs in _token_observations(a, g, groups):
        n = len(obs)
        e = np.array([_emission(m, x) for x in obs])
        al = np.empty((n, k))
        c = np.empty(n)
        v = m.init * e[0]
        for t in range(n):
            if t:
                v = (al[t - 1] @ tr) * e[t]
            c[t] = v.sum()
            al[t] = v / c[t]
        be = np.ones((n, k))
        for t in range(n - 2, -1, -1):
            be[t] = tr @ (e[t + 1] * be[t + 1]) / c[t + 1]
        ll += float(np.log(c).sum())
        gam = al * be
        cnt["init"] += gam[0]
        for t, x in enumerate(obs):
            if x is not None:
                cnt["ones" if x == 1 else "zeros"] += gam[t]
            if t + 1 < n:
                cnt["trans"] += (al[t][:, None] * tr * (e[t + 1] * be[t + 1])[None, :]
                                 / c[t + 1])
    return ll, cnt


# ---- strategies ----------------------------------------------------------------------
def _rows(k, low):
    return st.lists(st.floats(low, 1.0), min_size=k, max_size=k).map(
        lambda r: np.asarray(r) / np.sum(r))


@st.composite
def models(draw, kmax=3, low=0.02):
    k = draw(st.integers(1, kmax))
    init = draw(_rows(k, low))
    trans = np.stack([draw(_rows(k, low)) for _ in range(k)])
    acc = draw(st.lists(st.floats(low, 1.0 - low), min_size=k, max_size=k))
    return HiddenRegimes(init, trans, acc)


@st.composite
def rounds(draw, max_seqs, max_rounds, gmax):
    """(accepted, caps, groups): sequences with uneven numbers of rounds, interleaved at
    random (the fit groups rounds by label and keeps their order within a label)."""
    seqs = []
    for _ in range(draw(st.integers(1, max_seqs))):
        seq = []
        for _ in range(draw(st.integers(1, max_rounds))):
            gg = draw(st.integers(1, gmax))
            seq.append((draw(st.integers(0, gg)), gg))
        seqs.append(seq)
    labels = draw(st.permutations(range(len(seqs))))  # labels not in order of appearance
    slots = draw(st.permutations([i for i, s in enumerate(seqs) for _ in s]))
    nxt = [0] * len(seqs)
    a, g, grp = [], [], []
    for i in slots:
        aa, gg = seqs[i][nxt[i]]
        nxt[i] += 1
        a.append(aa)
        g.append(gg)
        grp.append(labels[i])
    return np.array(a), np.array(g), np.array(grp)


def _assert_counts_close(got, ref, rel):
    for name in ("init", "trans", "ones", "zeros"):
        np.testing.assert_allclose(got[name], ref[name], rtol=rel, atol=rel * 1e-3,
                                   err_msg=name)


# ---- the tree --------------------------------------------------------------------------
@SETTINGS
@given(k=st.integers(1, 4), n=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_tree_directions_equal_products_one_matrix_at_a_time(k, n, seed):
    rng = np.random.default_rng(seed)
    b = rng.uniform(0.01, 1.0, (k, k, n)) ** 3  # positive, entries over three decades
    start = rng.uniform(0.1, 1.0, k)
    levels = _upsweep(b)
    fwd, bwd = _forward(levels, start), _backward(levels)
    assert fwd.shape == bwd.shape == (k, n)
    v = start / start.sum()
    for t in range(n):
        np.testing.assert_allclose(fwd[:, t], v, rtol=1e-12)
        v = v @ b[:, :, t]
        v /= v.sum()
    w = np.full(k, 1.0 / k)
    for t in range(n - 1, -1, -1):
        np.testing.assert_allclose(bwd[:, t], w, rtol=1e-12)
        w = b[:, :, t] @ w
        w /= w.sum()


# ---- the E-step ----------------------------------------------------------------------
@SETTINGS
@given(m=models(), data=rounds(max_seqs=3, max_rounds=3, gmax=2))
def test_estep_equals_brute_force_enumeration(m, data):
    a, g, grp = data
    if max(len(o) for o in _token_observations(a, g, grp)) > 9:
        return  # keep the enumeration small (3 ** 9 paths)
    ll, cnt = _estep(m, _RoundData.build(a, g, grp))
    ref_ll, ref = _brute_force(m, a, g, grp)
    assert ll == pytest.approx(ref_ll, rel=1e-12, abs=1e-12)
    assert _estep(m, _RoundData.build(a, g, grp), want_counts=False)[0] == ll
    _assert_counts_close(cnt, ref, 1e-11)


@settings(derandomize=True, deadline=None, max_examples=25)
@given(m=models(kmax=4, low=0.005), data=rounds(max_seqs=12, max_rounds=60, gmax=9))
def test_estep_equals_token_forward_backward(m, data):
    a, g, grp = data
    ll, cnt = _estep(m, _RoundData.build(a, g, grp))
    ref_ll, ref = _token_forward_backward(m, a, g, grp)
    assert ll == pytest.approx(ref_ll, rel=1e-12)
    _assert_counts_close(cnt, ref, 1e-10)
    # every observed position is in some regime; one start per sequence
    assert cnt["ones"].sum() + cnt["zeros"].sum() == pytest.approx(
        a.sum() + np.sum(a < g), rel=1e-11)
    assert cnt["init"].sum() == pytest.approx(np.unique(grp).size, rel=1e-12)


def test_one_long_sequence():
    """One sequence of 5 000 rounds (the tree has 13 levels) against the token algorithm."""
    m = HiddenRegimes([0.5, 0.3, 0.2], [[0.9, 0.08, 0.02], [0.1, 0.85, 0.05],
                                        [0.01, 0.04, 0.95]], [0.1, 0.6, 0.97])
    a, _ = m.sample_rounds(5, 20_000, 1, seed=4)
    g = np.full(a.size, 5)
    assert a.size > 4000
    ll, cnt = _estep(m, _RoundData.build(a, g, None))
    ref_ll, ref = _token_forward_backward(m, a, g, np.zeros(a.size))
    assert ll == pytest.approx(ref_ll, rel=1e-12)
    _assert_counts_close(cnt, ref, 1e-10)
