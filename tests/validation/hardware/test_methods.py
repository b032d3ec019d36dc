"""The methods' timed runs (validation/hardware/methods.py) on costs given in closed form (a
stand-in for :class:`~validation.hardware.engines.EngineModel`), against sums written out
here: the PEARL step's expectation over the Binomial number of post-verify sequences by
direct enumeration, the autoregressive run step by step, the chain tokens by their series,
the cache-hit probability by enumerating the ranks, the prefix cache by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.hardware import methods as M
from validation.hardware.engines import Corrections, graph_padded


class Linear:
    """Costs linear in tokens and KV length; ``c`` carries the correction's fields."""

    def __init__(self, a, per_tok, per_kv, *, sample=0.0, handshake=0.0):
        self.a, self.per_tok, self.per_kv = a, per_tok, per_kv
        self.c = Corrections(per_sample_ms=sample, handshake_ms=handshake)

    def decode(self, b, s):
        return self.a + self.per_tok * b + self.per_kv * b * s

    def verify(self, b, m, s):
        return self.a + self.per_tok * b * m + self.per_kv * b * s

    def packed(self, tokens, s, sequences):
        return self.a + self.per_tok * tokens + self.per_kv * tokens * s \
            + self.c.per_sample_ms * tokens

    def prefill(self, b, p, cached=0):
        return 10 * self.a + self.per_tok * b * (p - cached)


def _post_by_step(alpha, gamma, steps):
    """P(post-verify) before each step from all-pre-verify: the two-state chain of one
    sequence under iid acceptance (pre -> post w.p. alpha; post stays w.p. alpha**gamma)."""
    p, out = 0.0, []
    for _ in range(steps):
        out.append(p)
        p = p * alpha**gamma + (1 - p) * alpha
    return out


def _counted(alpha, gamma, steps):
    """Tokens the benchmark counts: 1 + verified + (gamma - 1) if the run ends in post."""
    pre_v = 1.0
    post_v = gamma * alpha**gamma + sum((n + 1) * alpha**n * (1 - alpha) for n in range(gamma))
    ps = _post_by_step(alpha, gamma, steps + 1)
    return 1 + sum((1 - p) * pre_v + p * post_v for p in ps[:steps]) + (gamma - 1) * ps[steps]


@settings(max_examples=25, deadline=None)
@given(alpha=st.floats(0.05, 0.98), gamma=st.integers(1, 10), batch=st.integers(1, 24),
       sample=st.floats(0.0, 0.05))
def test_pearl_step_is_the_binomial_expectation_of_the_max(alpha, gamma, batch, sample):
    t = Linear(5.0, 0.03, 1e-5, sample=sample, handshake=0.3)
    d = Linear(0.5, 0.01, 2e-6)
    steps, prompt = 50, 200
    run = M.pearl_run(t, d, batch, prompt, steps, alpha, gamma)
    tokens = _counted(alpha, gamma, steps)
    posts = _post_by_step(alpha, gamma, steps)

    def expected_at(s):
        tot = 0.0
        for q in posts:  # step t: k ~ Binomial(batch, P(post at t)), averaged over the steps
            for k in range(batch + 1):
                w = math.comb(batch, k) * q**k * (1 - q) ** (batch - k)
                x = batch - k + gamma * k
                tot += w * max(gamma * d.decode(batch, s), t.packed(x, s, batch)) / steps
        return tot

    a, b = prompt + 1, int(round(prompt + tokens))
    step = (expected_at(a) + 4 * expected_at((a + b) // 2) + expected_at(b)) / 6 + 0.3
    pre = max(t.prefill(batch, prompt), d.prefill(batch, prompt))
    assert run.ms == pytest.approx(pre + steps * step, rel=1e-7)
    assert run.tokens == pytest.approx(tokens)
    assert run.tok_s == pytest.approx(1e3 * batch * tokens / run.ms)


@settings(max_examples=15, deadline=None)
@given(alpha=st.floats(0.0, 1.0), gamma=st.integers(1, 10), batch=st.integers(1, 300),
       steps=st.integers(1, 150))
def test_pearl_weights_are_the_step_by_step_ones(alpha, gamma, batch, steps):
    """The step-averaged Binomial weights of pearl_terms, computed for all steps in one call
    (issue 41), are the very floats of one Binomial per step averaged as before."""
    import numpy as np
    from scipy.stats import binom

    terms = M.pearl_terms(Linear(5.0, 0.03, 1e-5), Linear(0.5, 0.01, 2e-6), batch, 100,
                          steps, alpha, gamma)
    _, post = M.pearl_counts(alpha, gamma, steps)
    ks = np.arange(batch + 1)
    w = np.mean([binom.pmf(ks, batch, min(max(p, 0.0), 1.0)) for p in post], axis=0)
    keep = w > 1e-9
    assert terms.w.tolist() == (w[keep] / w[keep].sum()).tolist()


def test_ar_run_sums_every_step():
    t = Linear(4.0, 0.02, 1e-4)
    run = M.ar_run(t, 8, 300, 200, cached=100)
    exact = t.prefill(8, 300, 100) + sum(t.decode(8, 300 + j) for j in range(1, 200))
    assert run.ms == pytest.approx(exact, rel=1e-12)  # Simpson is exact on a linear cost
    assert run.tokens == 200
    decode_only = M.ar_run(t, 8, 300, 200, prefill=False)
    assert decode_only.tokens == 199 and decode_only.ms == pytest.approx(exact - t.prefill(
        8, 300, 100), rel=1e-12)


@given(alpha=st.floats(0.0, 0.999), k=st.integers(1, 20))
def test_chain_tokens_is_the_series(alpha, k):
    assert M.chain_tokens(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_async_hit_by_enumeration():
    # ranks of the target's token in the drafter's list: 1 w.p. alpha; later ranks each
    # covered with probability `cov`, independently; rejection: the first rank was wrong
    alpha, cov, k, f = 0.8, 0.6, 4, 3
    p_all = alpha**k
    bonus = alpha + (1 - alpha) * (1 - (1 - cov) ** (f - 1))
    after_reject = 1 - (1 - cov) ** (f - 1)
    assert M.async_hit(alpha, k, f, cov) == pytest.approx(p_all * bonus
                                                          + (1 - p_all) * after_reject)
    assert M.async_hit(alpha, k, 1, cov) == pytest.approx(p_all * alpha)  # top-1 only


def test_shared_prefix_cache_by_hand():
    gsm = {"dataset": "GSM8K", "engine": "nano-PEARL"}
    # 632-token prompts, 65 of them the question: 567 shared -> two full 256-token blocks
    # for the 31 sequences after the first of a batch of 32
    assert M.shared_prefix_cached(gsm, 632, 32) == round(512 * 31 / 32)
    assert M.shared_prefix_cached(gsm, 632, 1) == 0
    assert M.shared_prefix_cached({"dataset": "AIME", "engine": "nano-PEARL"}, 632, 32) == 0
    assert M.shared_prefix_cached({"shared_prefix": 300}, 632, 2) == 128


def test_gamma_rule_rounds_the_speed_ratio():
    t = SimpleNamespace(decode=lambda b, s: 22.4)
    assert M.pearl_gamma(t, SimpleNamespace(decode=lambda b, s: 2.04)) == 11  # 10.98
    assert M.pearl_gamma(t, SimpleNamespace(decode=lambda b, s: 4.48)) == 5  # 5.0
    assert M.pearl_gamma(t, SimpleNamespace(decode=lambda b, s: 8.96)) == 2  # 2.5: half to even
    assert M.pearl_gamma(t, SimpleNamespace(decode=lambda b, s: 15.0)) == 1  # 1.49


@pytest.mark.parametrize("x,family,want", [(1, "nano-vllm", 1), (3, "nano-vllm", 4),
                                           (17, "nano-vllm", 32), (33, "nano-vllm", 48),
                                           (513, "nano-vllm", 513), (9, "vllm", 16),
                                           (13, "sglang", 16), (161, "sglang", 161)])
def test_graph_padding(x, family, want):
    assert graph_padded(x, family) == want


def test_pearl_prefill_is_the_slower_of_the_two():
    """Both models prefill in the timed region, in parallel on their own GPUs."""
    t = Linear(5.0, 0.03, 1e-5)
    slow_drafter = Linear(0.5, 2.0, 2e-6)  # prefill 5 + 2 * 8 * 300 ms
    run = M.pearl_run(t, slow_drafter, 8, 300, 10, 0.8, 4)
    assert run.detail["prefill_ms"] == pytest.approx(slow_drafter.prefill(8, 300))
    fast = M.pearl_run(t, Linear(0.5, 0.01, 2e-6), 8, 300, 10, 0.8, 4)
    assert fast.detail["prefill_ms"] == pytest.approx(t.prefill(8, 300))
