"""The polybasic decoder: greedy losslessness, sampling law (χ²), block-policy invariants,
input errors."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from scipy import stats

from polyspec_theory.errors import PolyspecInputError
from tests.validation.tiny_zoo import greedy_tokens, tiny_family, tiny_ngram
from validation.schemes.chain import PolybasicDecoder, Sampler, autoregressive

torch.set_num_threads(1)

LEVELS16 = tiny_family(4, vocab=16)
LEVELS256 = tiny_family(3, vocab=256, d=32, noise=0.02, seed=3)
NGRAM = tiny_ngram()
THRESHOLDS = ([1, 1, 1], [3, 2, 2], [5, 3, 1], [2, 4, 3], [7, 1, 2])


def _prompts(k, vocab, seed=0):
    rnd = random.Random(seed)
    return [[rnd.randrange(vocab) for _ in range(rnd.randrange(1, 12))] for _ in range(k)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_greedy_identical_to_target_greedy(n):
    for th, prompt in itertools.product(THRESHOLDS, _prompts(4, 16, seed=n)):
        dec = PolybasicDecoder(LEVELS16[:n], th[: n - 1])
        r = dec.generate(prompt, 30)
        assert r.tokens == greedy_tokens(LEVELS16[0], prompt, r.n_generated), (n, th, prompt)
        assert r.n_generated >= 30


def test_greedy_tokens_are_a_prefix_of_a_longer_greedy_run():
    """The memoised reference of the greedy tests (tiny_zoo.greedy_tokens) is the model's
    own greedy run of that length, also when a longer run was made first."""
    p = [3, 1, 4]
    long = greedy_tokens(LEVELS16[0], p, 40)
    assert greedy_tokens(LEVELS16[0], p, 12) == autoregressive(LEVELS16[0], p, 12).tokens
    assert long[:12] == autoregressive(LEVELS16[0], p, 12).tokens and len(long) == 40
    assert greedy_tokens(LEVELS16[0], p, 45) == autoregressive(LEVELS16[0], p, 45).tokens


def test_greedy_with_ngram_drafter_byte_vocab():
    levels = LEVELS256 + [NGRAM]
    for n in (2, 3, 4):
        lv = levels[:n - 1] + [NGRAM]
        for th, prompt in itertools.product(THRESHOLDS[1:3], _prompts(3, 256, seed=7)):
            r = PolybasicDecoder(lv, th[: n - 1]).generate(prompt, 25)
            assert r.tokens == greedy_tokens(lv[0], prompt, r.n_generated)


def test_block_policy_invariants():
    th = [4, 3, 2]
    dec = PolybasicDecoder(LEVELS16, th, temperature=1.0, seed=1)
    r = dec.generate([1, 2, 3], 80)
    by = {lv: [x for x in r.rounds if x.level == lv] for lv in (1, 2, 3)}
    assert all(x.G == 2 for x in by[3])  # last pair: G = θ exactly
    for lv in (1, 2):
        assert all(th[lv - 1] <= x.G for x in by[lv])
    assert any(x.G > th[0] for x in by[1])  # accumulation overshoots sometimes
    for x in r.rounds:
        assert 0 <= x.A <= x.G and x.L == x.A + 1
        assert 1 <= x.m - x.G <= x.level  # catch-up positions (decoder comment)
    assert sum(x.L for x in by[1]) == r.n_generated
    assert r.forward_count[0] == len(by[1])
    assert 0 < sum(r.forward_s) <= r.wall_s
    # a level-(i) block is the tokens emitted by S_{i+1}: G_1 = Σ L of the level-2 rounds
    assert sum(x.G for x in by[1]) <= sum(x.L for x in by[2])


def _reference_probs(logits, temperature, top_k):
    """Next-token law written independently of :class:`Sampler`: float64 softmax of
    ``logits / temperature`` over the ``top_k`` largest logits, found by sorting (all when
    ``top_k`` is 0 or at least the vocabulary)."""
    x = np.array(torch.as_tensor(logits).detach().cpu().double().numpy(), dtype=np.float64)
    x = np.atleast_2d(x) / temperature
    out = np.zeros_like(x)
    for r, row in enumerate(x):
        keep = np.argsort(-row, kind="stable")
        if 0 < top_k < row.size:
            keep = keep[:top_k]
        e = np.exp(row[keep] - row[keep].max())
        out[r, keep] = e / e.sum()
    return out


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5])
@pytest.mark.parametrize("top_k", [0, 1, 2, 3, 7, 8, 12])
def test_sampler_law_equals_an_independent_softmax_with_top_k(temperature, top_k):
    logits = np.random.default_rng(17).normal(0.0, 3.0, size=(5, 8))  # no ties
    p = Sampler(temperature, top_k).probs(logits)
    ref = _reference_probs(logits, temperature, top_k)
    np.testing.assert_allclose(p, ref, rtol=1e-12, atol=1e-15)
    kept = min(top_k, 8) if top_k else 8
    assert (np.count_nonzero(p, axis=1) == kept).all()
    # torch float32 logits give the law of their float32 values
    t = torch.tensor(logits, dtype=torch.float32)
    np.testing.assert_allclose(Sampler(temperature, top_k).probs(t),
                               _reference_probs(t, temperature, top_k), rtol=1e-12, atol=1e-15)


def _first_two_law(target, prompt, temperature, top_k):
    """Exact law of the first two tokens of the target (after temperature/top-k), from the
    independent reference law (not the decoder's sampler)."""
    v = target.vocab_size
    target.reset()
    p1 = _reference_probs(target.logits(list(prompt), len(prompt)), temperature, top_k)[-1]
    law = np.zeros((v, v))
    for x in range(v):
        target.reset()
        seq = list(prompt) + [x]
        p2 = _reference_probs(target.logits(seq, len(seq)), temperature, top_k)[-1]
        law[x] = p1[x] * p2
    return law.ravel()


@pytest.mark.parametrize(
    "n,th,temperature,top_k",
    [(2, [3], 1.0, 0), (3, [2, 2], 1.0, 0), (4, [2, 1, 1], 0.7, 3)],
)
def test_sampling_law_matches_target(n, th, temperature, top_k):
    # χ² test of the joint law of the first two tokens against the exact target law
    # (vocab 4, 1000 draws). The threshold is the 1 - 1e-4 quantile, so the false-failure
    # rate is 1e-4 per case (3e-4 for the 3 cases); the seed is fixed, so runs repeat. The
    # forwards are computed once per cache state (ForwardOnce: the same cache and logits, bit
    # for bit).
    levels = tiny_family(n, vocab=4, d=8, noise=0.3, scale=2.0, seed=5, forward_once=True)
    prompt = [1, 2, 0]
    exact = _first_two_law(levels[0], prompt, temperature, top_k)
    dec = PolybasicDecoder(levels, th, temperature=temperature, top_k=top_k, seed=11)
    draws = 1000
    counts = np.zeros(16)
    accepted = 0
    for _ in range(draws):
        r = dec.generate(prompt, 2)
        counts[r.tokens[0] * 4 + r.tokens[1]] += 1
        accepted += sum(x.A for x in r.rounds)
    assert accepted > 0  # the drafts are sometimes accepted: the test exercises both paths
    expected = exact * draws
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    assert chi2 < stats.chi2.ppf(1 - 1e-4, len(obs) - 1), (chi2, obs, exp)


def test_sampling_is_reproducible_with_seed():
    a = PolybasicDecoder(LEVELS16[:3], [3, 2], temperature=1.0, seed=4).generate([1], 40)
    b = PolybasicDecoder(LEVELS16[:3], [3, 2], temperature=1.0, seed=4).generate([1], 40)
    assert a.tokens == b.tokens
    assert [x.A for x in a.rounds] == [x.A for x in b.rounds]


def test_input_errors():
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        PolybasicDecoder(LEVELS16[:3], [2])
    with pytest.raises(PolyspecInputError, match="^models"):
        PolybasicDecoder(LEVELS16[:1], [])
    with pytest.raises(PolyspecInputError, match="^models"):
        PolybasicDecoder([LEVELS16[0], LEVELS256[1]], [2])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        PolybasicDecoder(LEVELS16[:2], [0])
    with pytest.raises(PolyspecInputError, match="^temperature"):
        PolybasicDecoder(LEVELS16[:2], [2], temperature=-1)
    dec = PolybasicDecoder(LEVELS16[:2], [8])
    with pytest.raises(PolyspecInputError, match="^max_new_tokens"):
        dec.generate([1, 2], 125)
    with pytest.raises(PolyspecInputError, match="^prompt"):
        dec.generate([99], 5)
    with pytest.raises(PolyspecInputError, match="^prompt"):
        dec.generate([], 5)
