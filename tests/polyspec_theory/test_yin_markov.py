"""Finite-state non-stationary Markov models (polyspec_theory.yin.markov): laws, marginals,
whole-sequence laws, random generators with a chosen divergence, input validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.yin.markov import (
    MAX_SEQUENCE_LAW_SIZE,
    MarkovPair,
    as_chain,
    as_kernels,
    as_law,
    drop_support,
    logit_draft,
    mixture_draft,
    random_kernels,
    random_law,
    random_pair,
    sequence_law,
    state_marginals,
    step_tv,
    tv_distance,
)

EXACT = 1e-12

pairs = st.builds(
    lambda T, K, seed, kind, eps, drop: random_pair(
        T, K, seed, kind=kind, eps=eps, draft_drop=min(drop, K - 1)
    ),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["mixture", "logit"]),
    st.floats(0.0, 1.0),
    st.integers(0, 3),
)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(pairs)
def test_random_pairs_are_valid_chains(pair):
    i, t, d = as_chain(*pair)
    assert t.shape == d.shape == (pair.T, pair.K, pair.K) and i.shape == (pair.K,)
    np.testing.assert_allclose(t.sum(-1), 1.0, atol=EXACT)
    np.testing.assert_allclose(d.sum(-1), 1.0, atol=EXACT)
    assert (t >= 0).all() and (d >= 0).all()


@settings(derandomize=True, deadline=None, max_examples=40)
@given(pairs)
def test_marginals_and_sequence_law_agree(pair):
    mu = state_marginals(pair.init, pair.target)
    assert mu.shape == (pair.T + 1, pair.K)
    np.testing.assert_allclose(mu.sum(-1), 1.0, atol=EXACT)
    law = sequence_law(pair.init, pair.target)
    assert law.shape == (pair.K,) * pair.T
    assert law.sum() == pytest.approx(1.0, abs=EXACT)
    for n in range(pair.T):  # the marginal of x_{n+1} in the joint law
        other = tuple(j for j in range(pair.T) if j != n)
        np.testing.assert_allclose(law.sum(axis=other), mu[n + 1], atol=EXACT)


def test_sequence_law_matches_explicit_product():
    pair = random_pair(3, 3, 11, eps=0.3)
    law = sequence_law(pair.init, pair.target)
    for seq in itertools.product(range(3), repeat=3):
        p = sum(
            pair.init[x0]
            * pair.target[0, x0, seq[0]]
            * pair.target[1, seq[0], seq[1]]
            * pair.target[2, seq[1], seq[2]]
            for x0 in range(3)
        )
        assert law[seq] == pytest.approx(p, abs=EXACT)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_mixture_draft_divergence_is_at_most_eps(T, K, seed, eps):
    t = random_kernels(T, K, seed)
    d = mixture_draft(t, eps, seed + 1)
    tv = step_tv(t, d)
    assert tv.shape == (T, K)
    assert np.all(tv <= eps + EXACT)
    np.testing.assert_allclose(tv, tv_distance(t, d), atol=EXACT)
    if eps == 0:
        np.testing.assert_array_equal(d, t)


def test_logit_draft_and_drop_support():
    t = random_kernels(4, 5, 3, concentration=0.5)
    np.testing.assert_allclose(logit_draft(t, 1.0, 0.0, 0), t, atol=EXACT)
    hot = logit_draft(t, 3.0, 0.0, 0)
    cold = logit_draft(t, 0.3, 0.0, 0)
    ent = lambda p: -(p * np.log(np.where(p > 0, p, 1))).sum(-1)  # noqa: E731
    assert np.all(ent(hot) >= ent(t) - EXACT) and np.all(ent(cold) <= ent(t) + EXACT)
    z = drop_support(t, 2, 0)
    assert np.all((z > 0).sum(-1) == np.minimum((t > 0).sum(-1), 3))
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=EXACT)
    assert np.all(logit_draft(z, 2.0, 1.0, 1)[z == 0] == 0)  # zeros stay zeros
    one = drop_support([0.0, 1.0, 0.0], 5, 0)  # never empties a law
    np.testing.assert_array_equal(one, [0.0, 1.0, 0.0])


def test_generators_are_deterministic_in_the_seed():
    a, b = random_pair(6, 4, 7), random_pair(6, 4, 7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(random_pair(6, 4, 8).target, a.target)
    assert np.array_equal(random_law(5, 1), random_law(5, 1))
    assert isinstance(a, MarkovPair) and (a.T, a.K) == (6, 4)


def test_tv_distance_values():
    assert tv_distance([1.0, 0.0], [0.0, 1.0]) == 1.0
    assert tv_distance([0.5, 0.5], [0.5, 0.5]) == 0.0
    assert tv_distance([0.2, 0.8], [0.6, 0.4]) == pytest.approx(0.4)
    out = tv_distance([[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(out, [1.0, 0.0])


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: as_law([0.5, -0.1, 0.6], "p"), "p"),
        (lambda: as_law([0.5, 0.4], "p"), "p"),
        (lambda: as_law(0.5, "p"), "p"),
        (lambda: as_law("ab", "p"), "p"),
        (lambda: as_law([0.5, float("inf")], "p"), "p"),
        (lambda: as_law([[0.5, 0.5]], "p", ndim=1), "p"),
        (lambda: as_law([0.5, 0.5], "p", size=3), "p"),
        (lambda: as_kernels(np.full((2, 2), 0.5), "target"), "target"),
        (lambda: as_kernels(np.full((0, 2, 2), 0.5), "target"), "target"),
        (lambda: as_kernels(np.full((2, 2, 2), 0.5), "target", T=3), "target"),
        (lambda: as_chain([1.0], np.full((1, 2, 2), 0.5)), "init"),
        (lambda: as_chain([0.5, 0.5], np.full((1, 2, 2), 0.5), np.eye(2)), "draft"),
        (lambda: state_marginals([0.5, 0.5], np.full((1, 2, 2), 0.6)), "kernels"),
        (lambda: sequence_law([0.5, 0.5], np.full((23, 2, 2), 0.5)), "kernels"),
        (lambda: tv_distance([0.5, 0.5], [1.0, 0.0, 0.0]), "q"),
        (lambda: step_tv(np.full((1, 2, 2), 0.5), np.full((2, 2, 2), 0.5)), "draft"),
        (lambda: random_kernels(0, 3, 0), "T"),
        (lambda: random_kernels(2, 0, 0), "K"),
        (lambda: random_kernels(2, 3, -1), "seed"),
        (lambda: random_kernels(2, 3, 0, concentration=0), "concentration"),
        (lambda: random_law(3, 1.5), "seed"),
        (lambda: mixture_draft(np.full((1, 2, 2), 0.5), 1.5, 0), "eps"),
        (lambda: logit_draft([0.5, 0.5], temperature=0.0), "temperature"),
        (lambda: logit_draft([0.5, 0.5], noise=-1.0), "noise"),
        (lambda: drop_support([0.5, 0.5], -1, 0), "n_drop"),
        (lambda: random_pair(2, 2, 0, kind="gauss"), "kind"),
        (lambda: random_pair(2, 2, 0, init=[1.0]), "init"),
    ],
)
def test_bad_input_names_the_argument(call, field):
    with pytest.raises(PolyspecInputError) as e:
        call()
    assert e.value.field == field
    assert str(e.value).startswith(field)


def test_sequence_law_up_to_the_size_limit():
    T = int(np.log2(MAX_SEQUENCE_LAW_SIZE))
    law = sequence_law([0.5, 0.5], np.full((T, 2, 2), 0.5))
    assert law.shape == (2,) * T and law.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(law, 0.5**T, rtol=1e-12)
