"""The structured decoder (token trees with a tree attention mask, HF schedule, confidence
cut-off): tree forwards equal path forwards, the KV cache compaction, greedy losslessness
against the target's own autoregressive output, the sampling law (χ² against the exact
target law), SpecInfer's rank law (T2) against the theory, records, input errors."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from scipy import stats

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.structures.trees import Tree, residual_rank_probs
from tests.validation.tiny_zoo import greedy_tokens, tiny_family, tiny_ngram
from validation.schemes.chain import Sampler
from validation.schemes.structured import StructuredDecoder, parse_schedule, parse_tree
from validation.traces.schema import StructuredRound, check_round_extras

torch.set_num_threads(1)

LEVELS16 = tiny_family(4, vocab=16)
LEVELS256 = tiny_family(2, vocab=256, d=32, noise=0.02, seed=3)
NGRAM = tiny_ngram()
TREES = ([-1, 0], [-1, 0, 1, 2, 3], [-1, 0, 0, 1, 1, 2, 4],
         [-1, 0, 0, 0, 1, 1, 2, 3, 5, 5], [-1, 0, 0, 0, 0, 0])


def _prompts(k, vocab, seed=0):
    rnd = random.Random(seed)
    return [[rnd.randrange(vocab) for _ in range(rnd.randrange(1, 12))] for _ in range(k)]


# --- the model layer ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["zoo", "ngram"])
def test_tree_forward_rows_equal_path_forwards_and_keep_compacts(which):
    model = LEVELS256[0] if which == "zoo" else NGRAM
    fresh = tiny_family(1, vocab=256, d=32, noise=0.02, seed=3)[0] if which == "zoo" else \
        tiny_ngram()
    tree = Tree([-1, 0, 0, 1, 1, 2, 3, 3])
    rng = np.random.default_rng(1)
    seq = [int(x) for x in rng.integers(97, 123, size=9)]
    toks = [None] + [int(x) for x in rng.integers(97, 123, size=tree.n_nodes)]
    model.reset()
    model.logits(seq, 5)  # the cache lags: 4 catch-up tokens + the root are fed with the tree
    base = len(seq)
    anc = []
    for v in range(1, tree.n_nodes + 1):
        a, u = [], tree.parents[v]
        while u != 0:
            a.append(u - 1)
            u = tree.parents[u]
        anc.append(sorted(a))
    # two forwards: depth <= 1 with the catch-up, then the rest (slots continue)
    first = [v for v in range(1, 8) if tree.depth[v] == 1]
    rest = [v for v in range(1, 8) if tree.depth[v] > 1]
    lg1 = model.tree_forward(seq, base, [toks[v] for v in first], [anc[v - 1] for v in first])
    lg2 = model.tree_forward(seq, base, [toks[v] for v in rest], [anc[v - 1] for v in rest])
    assert lg1.shape[0] == (base - 5) + len(first) and model.spec == len(first) + len(rest)
    rows = {0: lg1[base - 5 - 1]}
    rows.update({v: lg1[base - 5 + j] for j, v in enumerate(first)})
    rows.update({v: lg2[j] for j, v in enumerate(rest)})
    for v in range(tree.n_nodes + 1):
        path, u = [], v
        while u != 0:
            path.append(toks[u])
            u = tree.parents[u]
        full = seq + path[::-1]
        fresh.reset()
        ref = fresh.logits(full, len(full))[-1]
        assert torch.allclose(rows[v], ref, atol=1e-5), v
    # keep the path 0 -> 1 -> 3 -> 6 (slots 0, 2, 5): the cache is the committed text again
    model.keep(base, [0, 2, 5])
    assert model.pos == base + 3 and model.spec == 0
    full = seq + [toks[1], toks[3], toks[6], 100, 101]
    got = model.logits(full, len(full))
    fresh.reset()
    ref = fresh.logits(full, len(full))[-got.shape[0]:]
    assert torch.allclose(got, ref, atol=1e-5)


def test_model_tree_errors():
    m = LEVELS16[0]
    m.reset()
    m.logits([1, 2, 3], 3)
    with pytest.raises(ValueError, match="ancestors"):
        m.tree_forward([1, 2, 3], 3, [4], [[0]])
    with pytest.raises(ValueError, match="outside"):
        m.tree_forward([1, 2, 3], 2, [4], [[]])
    m.tree_forward([1, 2, 3, 4], 4, [5, 6], [[], [0]])
    with pytest.raises(ValueError, match="catch-up"):
        m.tree_forward([1, 2, 3, 4, 5], 5, [1], [[]])
    with pytest.raises(ValueError, match="keep slots"):
        m.keep(4, [1, 0])
    m.rollback(4)
    assert m.spec == 0


# --- greedy: identical to the target's own output ----------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4])
def test_tree_greedy_identical_to_target(n):
    for tr, prompt in itertools.product(TREES, _prompts(4, 16, seed=n)):
        dec = StructuredDecoder(LEVELS16[:n], [3, 2, 2][: n - 1], tree=tr)
        r = dec.generate(prompt, 30)
        assert r.tokens == greedy_tokens(LEVELS16[0], prompt, r.n_generated), (tr, prompt)
        assert r.n_generated >= 30
        t = Tree(tr)
        for x, e in zip(r.rounds, r.extras, strict=True):
            if x.level == n - 1:
                assert x.G == t.n_nodes == e["nodes"]  # top-k children always exist
                assert check_round_extras({**x._asdict(), **e}) is None
                assert e["ranks"] == [v for _, v in e["visits"] if v]
            else:
                assert e is None


def test_tree_greedy_with_ngram_drafter_and_iid_children():
    for tr, prompt in itertools.product(TREES[1:4], _prompts(3, 256, seed=7)):
        for sampling in ("distinct", "iid"):
            dec = StructuredDecoder([LEVELS256[0], NGRAM], [2], tree=tr, tree_sampling=sampling)
            r = dec.generate(prompt, 25)
            assert r.tokens == greedy_tokens(LEVELS256[0], prompt, r.n_generated)
            if sampling == "iid":  # identical children: only rank 1 is ever accepted
                assert all(k == 1 for e in r.extras for k in e["ranks"])
    # n-gram verifier over a zoo drafter: the n-gram's own output
    dec = StructuredDecoder([NGRAM, LEVELS256[1]], [2], tree=TREES[3])
    prompt = [104, 101, 108]
    r = dec.generate(prompt, 20)
    assert r.tokens == greedy_tokens(NGRAM, prompt, r.n_generated)


def test_tree_round_counts_and_the_path_tree_is_the_chain():
    t = Tree(TREES[3])
    dec = StructuredDecoder(LEVELS16[:2], [9], tree=t)
    r = dec.generate([1, 2, 3], 60)
    rounds = r.rounds
    assert r.forward_count[0] == len(rounds)  # one verifier forward per round
    assert r.forward_count[1] == sum(len(e["draft_m"]) for e in r.extras)
    dm = t.draft_positions()
    for x, e in zip(rounds, r.extras, strict=True):
        assert len(e["draft_m"]) == t.max_depth and e["draft_m"][1:] == dm[1:].tolist()
        assert e["draft_m"][0] >= 1 and x.m == x.G + (x.m - x.G) and x.m >= x.G + 1
    assert sum(x.L for x in rounds) == r.n_generated
    # a path of G nodes decodes exactly as the chain decoder with threshold G (greedy)
    from validation.schemes.chain import PolybasicDecoder

    for g in (1, 3, 5):
        prompt = [4, 7, 1, 9]
        a = StructuredDecoder(LEVELS16[:2], [1], tree=[-1, *range(g)]).generate(prompt, 40)
        b = PolybasicDecoder(LEVELS16[:2], [g]).generate(prompt, 40)
        assert a.tokens == b.tokens and [x.A for x in a.rounds] == [x.A for x in b.rounds]


# --- adaptive draft length ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_hf_schedule_greedy_lossless_and_follows_the_rule(n):
    for pair in range(n - 1):
        sch = [None] * (n - 1)
        sch[pair] = "hf:3:1:7"
        for prompt in _prompts(3, 16, seed=10 + n):
            dec = StructuredDecoder(LEVELS16[:n], [2] * (n - 1), schedules=sch)
            r = dec.generate(prompt, 40)
            assert r.tokens == greedy_tokens(LEVELS16[0], prompt, r.n_generated)
            mine = [(x, e) for x, e in zip(r.rounds, r.extras, strict=True)
                    if x.level == pair + 1]
            g = 3
            for x, e in mine:
                assert e == {"theta": g}
                if pair == n - 2:
                    assert x.G == g
                else:
                    assert x.G >= g
                g = min(g + 2, 7) if x.A == x.G else max(g - 1, 1)
            assert len({e["theta"] for _, e in mine}) > 1  # the length moved


@pytest.mark.parametrize("n", [2, 3])
def test_confidence_cutoff_greedy_lossless_and_records(n):
    for eta, cap in ((0.3, None), (0.6, 4), (0.0, 3)):
        spec = f"confidence:{eta}" + ("" if cap is None else f":{cap}")
        sch = [None] * (n - 2) + [spec]
        for prompt in _prompts(3, 16, seed=20 + n):
            dec = StructuredDecoder(LEVELS16[:n], [2] * (n - 2) + [5], schedules=sch)
            r = dec.generate(prompt, 40)
            assert r.tokens == greedy_tokens(LEVELS16[0], prompt, r.n_generated)
            c = cap or 5
            fwd = 0
            for x, e in zip(r.rounds, r.extras, strict=True):
                if x.level != n - 1:
                    continue
                assert e["theta"] == c and len(e["conf"]) == x.G <= c
                assert all(v >= eta for v in e["conf"])
                if x.G < c:
                    assert e["conf_stop"] is not None and e["conf_stop"] < eta
                else:
                    assert e["conf_stop"] is None
                assert check_round_extras({**x._asdict(), **e}) is None
                fwd += x.G + (x.G < c)
            assert r.forward_count[n - 1] == fwd
            if eta == 0.0:
                assert all(x.G == c for x in r.rounds if x.level == n - 1)


def test_confidence_is_the_drafters_top_probability():
    d = LEVELS16[1]
    dec = StructuredDecoder(LEVELS16[:2], [3], schedules=["confidence:0.0:3"])
    prompt = [3, 1, 4]
    r = dec.generate(prompt, 3)
    x, e = r.rounds[0], r.extras[0]
    seq = prompt + r.tokens[: x.G]
    d.reset()
    lg = d.logits(seq, len(seq))[-x.G - 1: -1 if x.G else None].double()
    top = torch.softmax(lg, dim=-1).max(dim=-1).values.numpy()
    assert np.allclose(e["conf"], top[: x.G], atol=1e-9)


# --- sampling: the law of the output is the target's -------------------------------------------


def _first_two_law(target, prompt, sampler):
    v = target.vocab_size
    target.reset()
    p1 = sampler.probs(target.logits(list(prompt), len(prompt)))[-1]
    law = np.zeros((v, v))
    for x in range(v):
        target.reset()
        seq = list(prompt) + [x]
        law[x] = p1[x] * sampler.probs(target.logits(seq, len(seq)))[-1]
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
    p = float(stats.chi2.sf(chi2, len(obs) - 1))
    return p, chi2


CASES = [  # (n, thresholds, kwargs, temperature, top_k)
    (2, [3], {"tree": [-1, 0, 0, 0, 1, 1, 2]}, 1.0, 0),
    (2, [3], {"tree": [-1, 0, 0, 0, 1, 1, 2], "tree_sampling": "iid"}, 1.0, 0),
    (3, [2, 1], {"tree": [-1, 0, 0, 1, 2]}, 1.0, 0),
    (2, [1], {"tree": [-1, 0, 0, 0, 0, 1]}, 0.7, 3),  # top-3: the 4th child is never drawn
    (2, [4], {"schedules": ["confidence:0.5"]}, 1.0, 0),
    (3, [2, 3], {"schedules": ["hf:2:1:4", "confidence:0.4"]}, 1.0, 0),
]


@pytest.mark.parametrize("n,th,kw,temperature,top_k", CASES)
def test_sampling_law_matches_target(n, th, kw, temperature, top_k):
    # χ² of the joint law of the first two tokens against the exact target law (vocab 4,
    # 1000 draws); threshold: the 1 - 1e-4 quantile (false-failure rate 1e-4 per case),
    # fixed seeds, so runs repeat; each forward is computed once per cache state (ForwardOnce)
    levels = tiny_family(n, vocab=4, d=8, noise=0.3, scale=2.0, seed=5, forward_once=True)
    prompt = [1, 2, 0]
    exact = _first_two_law(levels[0], prompt, Sampler(temperature, top_k))
    dec = StructuredDecoder(levels, th, temperature=temperature, top_k=top_k, seed=11, **kw)
    draws = 1000
    counts = np.zeros(16)
    accepted = rejected = 0
    for _ in range(draws):
        r = dec.generate(prompt, 2)
        counts[r.tokens[0] * 4 + r.tokens[1]] += 1
        accepted += sum(x.A for x in r.rounds)
        rejected += sum(x.A < x.G for x in r.rounds)
    assert accepted > 0 and rejected > 0  # both paths of the verification are exercised
    p, chi2 = _chi2_ok(counts, exact, draws)
    assert p > 1e-4, (chi2, p)


def test_forward_once_levels_decode_bit_for_bit_as_zoo_levels():
    """The sampling-law tests' levels (tiny_zoo.ForwardOnce: each forward computed once per
    cache state, then replayed) give the very decodes of plain zoo levels: tokens, rounds and
    records of sampled tree, schedule and chain decodes over repeated and interleaved
    prompts."""
    from validation.schemes.chain import PolybasicDecoder

    def strip(r):
        ex = [None if e is None else {k: v for k, v in e.items() if k != "draft_fwd_s"}
              for e in getattr(r, "extras", [])]
        return r.tokens, [(x.level, x.ctx, x.G, x.A, x.m) for x in r.rounds], ex

    prompts = [[1, 2, 0], [3], [1, 2, 0], [0, 3, 3, 1, 2], [1, 2, 0]] * 6
    got = {}
    for memo in (False, True):
        lv = tiny_family(3, vocab=4, d=8, noise=0.3, scale=2.0, seed=5, forward_once=memo)
        decs = [StructuredDecoder(lv, [2, 1], tree=[-1, 0, 0, 1, 2], temperature=1.0, seed=2),
                StructuredDecoder(lv[:2], [3], schedules=["confidence:0.4"], temperature=0.8,
                                  seed=3),
                PolybasicDecoder(lv, [2, 2], temperature=1.0, seed=4)]
        got[memo] = [strip(d.generate(p, 3)) for p in prompts for d in decs]
    assert got[True] == got[False]
    # each level's prefills of the longer prompts (prompt[:-1]) were kept, so replayed, and
    # chain and tree forwards after them were replayed too
    prefills = {(1, 2), (0, 3, 3, 1)}
    for x in lv:
        assert prefills <= {op[2] for ops, _, _, op in x._memo if not ops and op[1] == "logits"}
        assert x.replayed["logits"] > 0, x.replayed
    assert lv[1].replayed["tree"] > 0 and lv[2].replayed["tree"] > 0  # the bottom pair's tree


def _root_laws(levels, prompt, temperature):
    s = Sampler(temperature)
    out = []
    for lv in levels:
        lv.reset()
        out.append(s.probs(lv.logits(list(prompt), len(prompt)))[-1])
    return out


def _rank_law_without_replacement(p, q, k):
    """Exact law of the accepted rank (0 = none) of Sequoia's rule: children drawn without
    replacement from q, tried in order (enumeration of every ordered tuple)."""
    v = p.size
    out = np.zeros(k + 1)
    for xs in itertools.permutations(range(v), k):
        w, rest = 1.0, q.copy()
        for x in xs:  # probability of this ordered draw without replacement
            w *= rest[x] / rest.sum()
            rest[x] = 0.0
        qj, pj, alive = q.copy(), p.copy(), 1.0
        for j, x in enumerate(xs):
            qn = qj / qj.sum()
            acc = min(1.0, pj[x] / qn[x])
            out[j + 1] += w * alive * acc
            alive *= 1.0 - acc
            r = np.maximum(pj - qn, 0.0)
            pj = r / r.sum() if r.sum() > 0 else pj
            qj = qj.copy()
            qj[x] = 0.0
        out[0] += w * alive
    return out


@pytest.mark.parametrize("sampling", ["iid", "distinct"])
def test_root_rank_law_is_specinfer_t2(sampling):
    # the accepted rank at the root over 3000 one-token generations, χ² against the exact
    # rank law: T2's residual_rank_probs (iid) or an enumeration of Sequoia's rule; the
    # forwards are computed once per cache state (ForwardOnce)
    levels = tiny_family(2, vocab=4, d=8, noise=0.6, scale=2.0, seed=5, forward_once=True)
    prompt = [1, 2, 0]
    p, q = _root_laws(levels, prompt, 1.0)
    k = 3
    if sampling == "iid":
        ranks = residual_rank_probs(p, q, k)
        law = np.concatenate([[1.0 - ranks.sum()], ranks])
    else:
        law = _rank_law_without_replacement(p, q, k)
    assert law[2] > 0.02  # rank 2 is a real event here
    dec = StructuredDecoder(levels, [1], tree=[-1, 0, 0, 0], tree_sampling=sampling,
                            temperature=1.0, seed=3)
    counts = np.zeros(k + 1)
    draws = 3000
    for _ in range(draws):
        e = dec.generate(prompt, 1).extras[0]
        counts[e["visits"][0][1]] += 1
    pv, chi2 = _chi2_ok(counts, law, draws)
    assert pv > 1e-4, (chi2, counts, law * draws)


def test_sampling_is_reproducible_with_seed():
    kw = dict(tree=TREES[3], temperature=1.0, seed=4)
    a = StructuredDecoder(LEVELS16[:3], [3, 2], **kw).generate([1], 40)
    b = StructuredDecoder(LEVELS16[:3], [3, 2], **kw).generate([1], 40)
    assert a.tokens == b.tokens

    def strip(ex):  # forward times differ run to run
        return [None if e is None else {k: v for k, v in e.items() if k != "draft_fwd_s"}
                for e in ex]

    assert strip(a.extras) == strip(b.extras)


def test_on_round_gets_structured_records():
    got = []
    dec = StructuredDecoder(LEVELS16[:3], [3, 2], tree=TREES[2], schedules=["hf:2:1:5", None])
    dec.on_round = got.append
    dec.generate([5, 6], 20)
    assert got and all(isinstance(x, StructuredRound) for x in got)
    recs = [x.to_record() for x in got]
    assert {tuple(sorted(set(r) - {"type"})) for r in recs if r["level"] == 1} == {
        ("A", "G", "L", "ctx", "draft_s", "level", "m", "prompt", "round_s", "theta",
         "verify_s")}
    assert all("visits" in r for r in recs if r["level"] == 2)


def test_input_errors():
    lv = LEVELS16[:3]
    with pytest.raises(PolyspecInputError, match=r"^schedules\[0\]"):
        StructuredDecoder(lv, [2, 2], schedules=["confidence:0.5", None])
    with pytest.raises(PolyspecInputError, match=r"^schedules\[1\]"):
        StructuredDecoder(lv, [2, 2], tree=[-1, 0], schedules=[None, "hf:2:1:4"])
    with pytest.raises(PolyspecInputError, match=r"^schedules: "):
        StructuredDecoder(lv, [2, 2], schedules=["hf:2:1:4"])
    with pytest.raises(PolyspecInputError, match=r"^schedules\[0\]"):
        StructuredDecoder(lv, [2, 2], schedules=["hf:2:1", None])
    with pytest.raises(PolyspecInputError, match=r"^schedules\[0\]\.start"):
        StructuredDecoder(lv, [2, 2], schedules=["hf:9:1:4", None])
    with pytest.raises(PolyspecInputError, match=r"^tree\.parents\[2\]"):
        StructuredDecoder(lv, [2, 2], tree=[-1, 0, 3, 1])
    with pytest.raises(PolyspecInputError, match=r"^tree_sampling"):
        StructuredDecoder(lv, [2, 2], tree=[-1, 0], tree_sampling="beam")
    with pytest.raises(PolyspecInputError, match=r"^tree\.parents"):
        StructuredDecoder(lv, [2, 2], tree=[-1] + [0] * 17)  # 17 children > vocab 16
    with pytest.raises(PolyspecInputError, match=r"^schedule\.eta"):
        parse_schedule("confidence:1.5")
    with pytest.raises(PolyspecInputError, match=r"^tree\.parents"):
        parse_tree("-1,0,x")
    dec = StructuredDecoder(lv[:2], [2], tree=[-1] + [0] * 10)
    with pytest.raises(PolyspecInputError, match="^max_new_tokens"):
        dec.generate([1, 2], 116)  # + 11 slots of the tree exceed the context (128)


# --- theory = decoder: context-free laws make the theory exact ---------------------------------

P4 = [0.4, 0.3, 0.2, 0.1]
Q4 = [0.1, 0.2, 0.3, 0.4]


def _constant_pair():
    from tests.validation.tiny_zoo import ConstantModel

    t, d = ConstantModel(P4, "t"), ConstantModel(Q4, "d")
    s = Sampler(1.0)
    return [t, d], s.probs(t.row[None])[0], s.probs(d.row[None])[0]


@pytest.mark.parametrize("sampling", ["iid", "distinct"])
def test_tree_decoder_matches_t1_t2_exactly(sampling):
    # with context-free laws the accepted path length A of every round has exactly the law
    # of T1 with T2's rank law (iid children) or the enumerated law of Sequoia's rule
    # (distinct children): χ² of the A histogram over ~1500 rounds and a z-test of E[L]
    from polyspec_theory.structures.trees import (
        ResidualLaw,
        SiblingLaw,
        accepted_pmf,
        expected_emitted_tree,
    )

    levels, p, q = _constant_pair()
    tree = Tree([-1, 0, 0, 0, 1, 1, 2, 4, 4, 7])
    if sampling == "iid":
        law = ResidualLaw(p, q)
    else:
        law = SiblingLaw(_rank_law_without_replacement(p, q, 3)[1:].tolist())
    dec = StructuredDecoder(levels, [1], tree=tree, tree_sampling=sampling, temperature=1.0,
                            seed=7)
    a = np.array([x.A for x in dec.generate([0], 3000).rounds])
    pmf = accepted_pmf(tree, law)
    counts = np.bincount(a, minlength=pmf.size).astype(float)
    pv, chi2 = _chi2_ok(counts, pmf, a.size)
    assert pv > 1e-4, (chi2, counts, pmf * a.size)
    el = expected_emitted_tree(tree, law)
    z = (a.mean() + 1 - el) / (a.std(ddof=1) / np.sqrt(a.size))
    assert abs(z) < 4.5, (a.mean() + 1, el)


def test_hf_schedule_occupancy_matches_a1():
    # HF lengths form the Markov chain of A1 (iid alpha = 1 - TV(P, Q)): the mean length over
    # ~2500 rounds against the stationary mean (batch-means standard error)
    from polyspec_theory.structures.schedule_models import hf_two_model

    levels, p, q = _constant_pair()
    alpha = float(np.minimum(p, q).sum())
    sch = {"kind": "hf", "start": 3, "min": 1, "max": 6}
    pred = hf_two_model({"alpha": alpha}, sch, 1.0, 0.1)
    dec = StructuredDecoder(levels, [1], schedules=[sch], temperature=1.0, seed=9)
    r = dec.generate([0], 5000)
    g = np.array([e["theta"] for e in r.extras], dtype=float)[20:]
    b = g[: g.size // 50 * 50].reshape(50, -1).mean(axis=1)
    z = (b.mean() - pred.mean_length) / (b.std(ddof=1) / np.sqrt(b.size))
    assert abs(z) < 4.5, (b.mean(), pred.mean_length)
    occ = np.bincount(g.astype(int) - 1, minlength=6) / g.size
    assert np.abs(occ - pred.stationary).max() < 0.06, (occ, pred.stationary)
