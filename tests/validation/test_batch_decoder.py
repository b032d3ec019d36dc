"""The batched (lockstep) decoder: the batched zoo forward equals the single-sequence forward,
greedy output of every sequence is the target's own autoregressive output, the sampling law
per sequence is the target's (χ²), and on context-free levels with a fake clock the decoder
reproduces B2 exactly (forwards, E[max N], E[max G], idle share, speedup), which checks that
it implements the lockstep model B0 as the theory states it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats

from polyspec_theory import Cascade
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.serving.batch import predict_batch
from tests.validation.batch_fakes import FakeClock, fake_cascade, product_laws
from tests.validation.tiny_zoo import BatchForwardOnce, greedy_tokens, tiny_family, tiny_ngram
from validation.capture.batch_models import BatchZooLevel, batch_level
from validation.capture.models import HFModel
from validation.schemes.batch import (
    BatchCascadeDecoder,
    batch_autoregressive,
    round_extent,
)
from validation.schemes.chain import PolybasicDecoder, Sampler, autoregressive

torch.set_num_threads(1)

LEVELS16 = tiny_family(4, vocab=16)
LEVELS256 = tiny_family(3, vocab=256, d=32, noise=0.02, seed=3)
NGRAM = tiny_ngram()
THRESHOLDS = ([1, 1, 1], [3, 2, 2], [5, 3, 1], [2, 4, 3])


def _prompts(k, vocab, seed=0, lo=1, hi=12):
    rnd = random.Random(seed)
    return [[rnd.randrange(vocab) for _ in range(rnd.randrange(lo, hi))] for _ in range(k)]


def test_batched_forward_equals_single_forward():
    gpt = LEVELS16[0].model
    seqs = _prompts(4, 16, seed=1, lo=1, hi=20)
    with torch.inference_mode():
        ref = [gpt.forward_cached(torch.tensor([s]), 0, gpt.new_cache()) for s in seqs]
        cache = gpt.new_batch_cache(4, slack=20)
        cut = [max(len(s) // 2, 1) for s in seqs]
        outs = [[] for _ in seqs]
        starts = [0] * 4
        for part in (0, 1):
            lens = [c if part == 0 else len(s) - c for s, c in zip(seqs, cut, strict=True)]
            m = max(lens)
            toks = torch.zeros(4, m, dtype=torch.long)
            for j, s in enumerate(seqs):
                chunk = s[:cut[j]] if part == 0 else s[cut[j]:]
                toks[j, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
            out = gpt.forward_batched(toks, torch.tensor(starts), cache)
            for j in range(4):
                outs[j].append(out[j, : lens[j]])
                starts[j] += lens[j]
    for j in range(4):
        got = torch.cat(outs[j])
        assert got.shape == ref[j].shape
        assert torch.allclose(got, ref[j], atol=1e-5, rtol=0), j


@pytest.mark.parametrize("b", [1, 2, 5])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_greedy_every_sequence_is_its_target_greedy(n, b):
    prompts = _prompts(3 * b, 16, seed=10 * n + b)
    for th in THRESHOLDS:
        dec = BatchCascadeDecoder(LEVELS16[:n], th[: n - 1])
        for k in range(3):
            batch = prompts[k * b:(k + 1) * b]
            until = ("first", "all")[k % 2]
            r = dec.generate(batch, 24, decode_index=k, until=until)
            assert r.stop in ("tokens", "context")
            for j, p in enumerate(batch):
                assert r.tokens[j] == greedy_tokens(LEVELS16[0], p, r.n_generated[j]), (
                    n, b, th, k, j)
            if r.stop == "tokens":
                assert (min if until == "all" else max)(r.n_generated) >= 24
                if until == "first":  # the round before, nobody had them
                    last = [sum(x.L for x in r.seq_rounds if x.seq == j and x.level == 1
                                and x.round == r.top_rounds - 1) for j in range(b)]
                    assert all(g - x < 24 for g, x in zip(r.n_generated, last, strict=True))


@pytest.mark.parametrize("n,th", [(3, [3, 2]), (4, [4, 2, 2])])
def test_kept_rounds_are_the_single_stream_rounds(n, th):
    # the per-sequence rounds that were not lockstep padding are exactly the rounds the
    # single-stream decoder runs on that prompt (greedy): same blocks, same acceptance
    b = 5
    prompts = _prompts(b, 16, seed=21)
    r = BatchCascadeDecoder(LEVELS16[:n], th).generate(prompts, 30)
    for j, p in enumerate(prompts):
        single = PolybasicDecoder(LEVELS16[:n], th).generate(p, r.n_generated[j])
        assert single.n_generated == r.n_generated[j]
        for lv in range(1, n):
            got = [(x.ctx, x.G, x.A) for x in r.seq_rounds
                   if x.seq == j and x.level == lv and not x.discarded]
            want = [(x.ctx, x.G, x.A) for x in single.rounds if x.level == lv]
            assert got == want, (j, lv)


def test_greedy_with_ngram_drafter_byte_vocab():
    prompts = _prompts(10, 256, seed=7, lo=1, hi=30)
    for n, th in ((2, [3]), (3, [3, 2]), (4, [4, 2, 2])):
        lv = LEVELS256[:n - 1] + [NGRAM]
        for b in (2, 5):
            r = BatchCascadeDecoder(lv, th).generate(prompts[:b], 30)
            for j in range(b):
                assert r.tokens[j] == greedy_tokens(lv[0], prompts[j], r.n_generated[j])


def test_batched_autoregressive_equals_single():
    prompts = _prompts(5, 16, seed=3)
    r = batch_autoregressive(LEVELS16[0], prompts, 20)
    for j, p in enumerate(prompts):
        assert r.tokens[j] == autoregressive(LEVELS16[0], p, 20).tokens
    assert len(r.step_s) == 20 and len(r.forwards) == 20
    assert all(f.m == 1 and f.m0 == 1 and f.model == 0 for f in r.forwards)
    assert 0 < r.forward_s <= r.wall_s
    # sampling: same seed, same tokens; the laws are the target's (first token, b = 3)
    a = batch_autoregressive(LEVELS16[0], prompts[:3], 5, temperature=1.0, seed=4)
    c = batch_autoregressive(LEVELS16[0], prompts[:3], 5, temperature=1.0, seed=4)
    assert a.tokens == c.tokens


def test_records_follow_the_lockstep_policy():
    th = [4, 3, 2]
    b = 5
    dec = BatchCascadeDecoder(LEVELS16, th, temperature=1.0, seed=1)
    prompts = _prompts(b, 16, seed=5)
    r = dec.generate(prompts, 40, decode_index=3)
    assert r.batch == b and r.top_rounds > 0
    by = {lv: [x for x in r.seq_rounds if x.level == lv] for lv in (1, 2, 3)}
    bb = {lv: [x for x in r.batch_rounds if x.level == lv] for lv in (1, 2, 3)}
    assert all(x.G == 2 and x.waited == 0 for x in by[3])  # last pair: G = θ, nobody waits
    assert all(x.K == 2 for x in bb[3])
    for lv in (1, 2):
        assert all(th[lv - 1] <= x.G for x in by[lv])
    assert any(x.waited > 0 for x in by[1])  # ragged blocks: some sequences waited
    for x in r.seq_rounds:
        assert 0 <= x.A <= x.G and x.L == x.A + 1 and x.decode == 3
        assert 1 <= x.m - x.G <= x.level
        assert x.prompt == 3 * b + x.seq
    for lv in (1, 2, 3):
        assert len(by[lv]) == b * len(bb[lv])
        for br in bb[lv]:
            rows = [x for x in by[lv] if x.round == br.round]
            assert [x.seq for x in rows] == list(range(b))
            assert br.max_G == max(x.G for x in rows)
            assert br.waiting == sum(x.waited for x in rows)
            assert br.m >= br.max_G + 1 and br.m == max(x.m for x in rows)
            assert all(0 <= x.waited < br.K for x in rows)
            assert br.K - min(x.waited for x in rows) >= 1
    assert not any(x.discarded for x in by[1])
    assert any(x.discarded for x in by[2]) and any(x.discarded for x in by[3])
    # top-level: every sequence emitted Σ L of its level-1 rounds
    for j in range(b):
        assert sum(x.L for x in by[1] if x.seq == j) == r.n_generated[j]
    # one batched target forward per top round; lower levels: K forwards per round above
    assert r.forward_count[0] == len(bb[1]) == r.top_rounds
    assert r.forward_count[1] == len(bb[2]) == sum(x.K for x in bb[1])
    assert r.forward_count[3] == sum(x.K for x in bb[3])
    assert len(r.forwards) == sum(r.forward_count)
    assert 0 < sum(r.forward_s) <= r.wall_s
    for f in r.forwards:
        assert f.m >= f.m0 >= 1


def _first_two_law(target, prompt, sampler):
    v = target.vocab_size
    target.reset()
    p1 = sampler.probs(target.logits(list(prompt), len(prompt)))[-1]
    law = np.zeros((v, v))
    for x in range(v):
        target.reset()
        seq = list(prompt) + [x]
        p2 = sampler.probs(target.logits(seq, len(seq)))[-1]
        law[x] = p1[x] * p2
    return law.ravel()


def _chi2_ok(counts, exact, draws):
    expected = exact * draws
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    return chi2 < stats.chi2.ppf(1 - 1e-4, len(obs) - 1), chi2


@pytest.mark.parametrize("n,th,temperature,top_k", [(2, [3], 1.0, 0), (3, [3, 2], 1.0, 0),
                                                    (3, [2, 2], 0.7, 3)])
def test_sampling_law_per_sequence_matches_target(n, th, temperature, top_k):
    # batch of 5: slots 0-2 hold prompt A, slots 3-4 prompt B (another length), so positions
    # are ragged; χ² of the joint law of each sequence's first two tokens against the exact
    # target law per prompt (1 - 1e-4 quantile; fixed seed); each batched forward is run once
    # per history (BatchForwardOnce: the same cache and logits, bit for bit)
    levels = tiny_family(n, vocab=4, d=8, noise=0.3, scale=2.0, seed=5)
    pa, pb = [1, 2, 0], [3, 0, 1, 1, 2, 0]
    sampler = Sampler(temperature, top_k)
    exact = {0: _first_two_law(levels[0], pa, sampler), 1: _first_two_law(levels[0], pb, sampler)}
    dec = BatchCascadeDecoder([BatchForwardOnce(lv) for lv in levels], th,
                              temperature=temperature, top_k=top_k, seed=11)
    batches = 240
    counts = {0: np.zeros(16), 1: np.zeros(16)}
    accepted = waited = 0
    for _ in range(batches):
        r = dec.generate([pa, pa, pa, pb, pb], 2, until="all")
        for j, t in enumerate(r.tokens):
            counts[0 if j < 3 else 1][t[0] * 4 + t[1]] += 1
        accepted += sum(x.A for x in r.seq_rounds)
        waited += sum(x.waited for x in r.seq_rounds)
    assert accepted > 0
    if n == 3:
        assert waited > 0  # the discarded rounds of waiting slots are exercised
    for key, draws in ((0, 3 * batches), (1, 2 * batches)):
        ok, chi2 = _chi2_ok(counts[key], exact[key], draws)
        assert ok, (key, chi2)


def test_batch_forward_once_levels_decode_bit_for_bit_as_zoo_levels():
    """The batched sampling-law tests' levels (tiny_zoo.BatchForwardOnce: each batched forward
    run once per history since reset, then replayed) give the very decodes of plain zoo
    levels: tokens, per-sequence and batch rounds of sampled decodes of a ragged batch."""
    got = {}
    for memo in (False, True):
        zoo = tiny_family(3, vocab=4, d=8, noise=0.3, scale=2.0, seed=5)
        lv = [BatchForwardOnce(x) for x in zoo] if memo else zoo
        dec = BatchCascadeDecoder(lv, [3, 2], temperature=1.0, seed=11)
        got[memo] = []
        for _ in range(12):
            r = dec.generate([[1, 2, 0]] * 3 + [[3, 0, 1, 1, 2, 0]] * 2, 2, until="all")
            got[memo].append((r.tokens, r.seq_rounds, [x[:7] for x in r.batch_rounds]))
    assert got[True] == got[False]
    assert all(x.replayed > 0 and x.computed > 0 for x in lv)  # both paths were taken


def test_sampling_is_reproducible_with_seed():
    prompts = _prompts(4, 16, seed=2)
    a = BatchCascadeDecoder(LEVELS16[:3], [3, 2], temperature=1.0, seed=4).generate(prompts, 30)
    b = BatchCascadeDecoder(LEVELS16[:3], [3, 2], temperature=1.0, seed=4).generate(prompts, 30)
    assert a.tokens == b.tokens
    assert a.seq_rounds == b.seq_rounds
    assert [x[:7] for x in a.batch_rounds] == [x[:7] for x in b.batch_rounds]


# ------------------------------------------------------------------ B0 exactly (fake clock)
@pytest.mark.parametrize("n,th,b", [(2, [3], 4), (3, [3, 2], 4), (3, [2, 3], 8),
                                    (4, [3, 2, 2], 3)])
def test_lockstep_decoder_reproduces_b2(n, th, b):
    clock = FakeClock()
    levels, cfg = fake_cascade(n, clock)
    cfg["thresholds"] = th
    pr = predict_batch(Cascade.from_config(cfg), b)
    dec = BatchCascadeDecoder(levels, th, temperature=1.0, seed=1, clock=clock)
    wall, wall0, tok = [], [], []
    k_sum = {}
    g_sum = {}
    wait_sum = {}
    n_rounds = {}
    for d in range(30):
        r = dec.generate([[0, 1]] * b, 60, decode_index=d)
        assert r.stop == "tokens"
        # the clock advances only inside forwards: wall = Σ T(b, m) of the forwards run
        assert r.wall_s == pytest.approx(sum(levels[f.model].cost(b, f.m) for f in r.forwards))
        wall.append(r.wall_s)
        wall0.append(sum(levels[f.model].cost(b, f.m0) for f in r.forwards))
        tok.append(sum(r.n_generated))
        for br in r.batch_rounds:
            k_sum[br.level] = k_sum.get(br.level, 0) + br.K
            g_sum[br.level] = g_sum.get(br.level, 0) + br.max_G
            wait_sum[br.level] = wait_sum.get(br.level, 0) + br.waiting
            n_rounds[br.level] = n_rounds.get(br.level, 0) + 1
    tok = np.asarray(tok, dtype=np.float64)
    t_ar = levels[0].cost(b, 1)
    z = 4.5
    # speedup with B0's charges (m0: catch-up positions are not in B0) against B2
    w0 = np.asarray(wall0)
    tau = w0.sum() / tok.sum()
    k = w0.size
    se = np.sqrt(k / (k - 1) * np.sum((w0 - tau * tok) ** 2)) / tok.sum()
    s = t_ar / (b * tau)
    assert abs(s - pr.speedup) < z * s * se / tau, (s, pr.speedup)
    # structure: E[max N] and the idle share per level, E[max G] per verifier (ratio of sums
    # over ~10^3 rounds; tolerance from the theory's own spread is not needed: 3 %)
    for lv in range(1, n):
        assert k_sum[lv] / n_rounds[lv] == pytest.approx(pr.levels[lv].phi_batch, rel=0.03)
        assert g_sum[lv] / n_rounds[lv] == pytest.approx(pr.levels[lv - 1].mean_max_block,
                                                         rel=0.03)
        idle = wait_sum[lv] / (b * k_sum[lv])
        assert idle == pytest.approx(pr.levels[lv].idle_share, abs=0.02)


def test_product_laws_are_iid_acceptance():
    laws, alphas = product_laws(3)
    assert all(abs(p.sum() - 1) < 1e-12 for p in laws)
    for i, a in enumerate(alphas):
        assert a == pytest.approx(float(np.minimum(laws[i], laws[i + 1]).sum()))


class _ExtentProbe(BatchCascadeDecoder):
    """Records the most positions any sequence (waiting slots included) or any forward
    reaches past the start of the current top-level round."""

    most = 0

    def _round(self, i, base, dead):
        if i == 0:
            self._top = base.copy()
        out = super()._round(i, base, dead)
        self._probe()
        return out

    def _forward(self, i, ends, m0):
        out = super()._forward(i, ends, m0)
        self.most = max(self.most, int(np.max(np.asarray(ends) - self._top)))
        self._probe()
        return out

    def _probe(self):
        self.most = max(self.most, max(len(s) - int(t) for s, t in zip(self.seqs, self._top,
                                                                        strict=True)))


def test_round_extent_bounds_every_round():
    # the context guard relies on it: no top-level round (waiting slots' discarded rounds
    # included) reaches more than round_extent positions past its start, and the bound is
    # attained by greedy rounds that accept everything (identical models)
    assert round_extent([1]) == 2 and round_extent([3]) == 4 and round_extent([2, 2]) == 7
    for th in ([1], [3], [2, 2], [5, 3, 1], [2, 4, 3]):
        n = len(th) + 1
        for lv, temp in ((LEVELS16[:n], 1.0), ([LEVELS16[0]] * n, 0.0)):
            dec = _ExtentProbe(lv, th, temperature=temp, seed=3)
            dec.generate(_prompts(4, 16, seed=4), 30)
            assert dec.most <= round_extent(th), (th, temp)
        if n == 2:
            assert dec.most == round_extent(th)


def test_context_guard_and_input_errors():
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        BatchCascadeDecoder(LEVELS16[:3], [2])
    with pytest.raises(PolyspecInputError, match="^models"):
        BatchCascadeDecoder(LEVELS16[:1], [])
    with pytest.raises(PolyspecInputError, match="^models"):
        BatchCascadeDecoder([LEVELS16[0], LEVELS256[1]], [2])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        BatchCascadeDecoder(LEVELS16[:2], [0])
    with pytest.raises(PolyspecInputError, match="^temperature"):
        BatchCascadeDecoder(LEVELS16[:2], [2], temperature=-1)
    dec = BatchCascadeDecoder(LEVELS16[:2], [8])
    with pytest.raises(PolyspecInputError, match="^max_new_tokens"):
        dec.generate([[1, 2], [3]], 120)
    with pytest.raises(PolyspecInputError, match=r"^prompts\[1\]"):
        dec.generate([[1], [99]], 5)
    with pytest.raises(PolyspecInputError, match=r"^prompts\[0\]"):
        dec.generate([[]], 5)
    with pytest.raises(PolyspecInputError, match="^prompts"):
        dec.generate([], 5)
    with pytest.raises(PolyspecInputError, match="^prompt_ids"):
        dec.generate([[1], [2]], 5, prompt_ids=[0])
    with pytest.raises(PolyspecInputError, match="^until"):
        dec.generate([[1], [2]], 5, until="some")
    with pytest.raises(PolyspecInputError, match="^models"):
        batch_level(object.__new__(HFModel))
    assert isinstance(batch_level(LEVELS16[0]), BatchZooLevel)
    with pytest.raises(PolyspecInputError, match="^max_new_tokens"):
        batch_autoregressive(LEVELS16[0], [[1, 2]], 127)


def test_stop_on_context_keeps_output_lossless():
    # a context too short for every sequence to reach its tokens (the sequences run at
    # different speeds): the decode stops at a round boundary ("context") and what each
    # sequence emitted is still the target's greedy text
    levels = tiny_family(3, vocab=16, block_size=48, seed=2)
    prompts = _prompts(4, 16, seed=9, lo=2, hi=6)
    r = BatchCascadeDecoder(levels, [3, 2]).generate(prompts, 30, until="all")
    assert r.stop == "context"
    assert min(r.n_generated) < 30 and max(len(p) + k for p, k in
                                           zip(prompts, r.n_generated, strict=True)) <= 48
    for j, p in enumerate(prompts):
        assert r.tokens[j] == autoregressive(levels[0], p, r.n_generated[j]).tokens
