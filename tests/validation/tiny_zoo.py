"""Tiny random models for the decoder tests: a random target and drafters that are noisy
copies of it (noise grows with the level), so acceptance is neither 0 nor 1."""

from __future__ import annotations

import collections

import numpy as np
import torch

from validation.capture.batch_models import BatchZooLevel
from validation.capture.models import DecoderModel, NGramDrafter, ZooModel
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.ngram import NGramModel


class ForwardOnce(ZooModel):
    """A zoo level that runs each forward once per cache state and replays it after: the
    same keys and values copied into the slots the forward wrote and the same logits, bit
    for bit. The state is the list of operations since ``reset`` (``logits``,
    ``tree_forward``, ``keep``), each with the position it started at; ``rollback(n)`` drops
    those that started at or after ``n`` (every operation writes only slots at or after its
    start, and a forward writes its slots before it reads them, so the slots the list does
    not determine are never read). For sampling-law tests that decode one prompt thousands
    of times (a few hundred distinct forwards among thousands); tested against
    :class:`ZooModel` in tests/validation/test_tree_decoder.py. ``computed`` / ``replayed``
    count the forwards run and replayed by kind (``"logits"``, ``"tree"``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._memo: dict = {}
        self._ops: tuple = ()
        self.computed, self.replayed = collections.Counter(), collections.Counter()

    def reset(self) -> None:
        super().reset()
        self._ops = ()

    def rollback(self, n: int) -> None:
        super().rollback(n)
        self._ops = tuple(op for op in self._ops if op[0] < n)

    def _replay(self, op, run, start_end):
        """``run()`` once per (state, ``op``); ``start_end(out)``: the slots it wrote."""
        key = (self._ops, self.pos, self.spec, op)
        hit = self._memo.get(key)
        if hit is None:
            out = run()
            a, b = start_end(out)
            c = self.cache
            self._memo[key] = (a, b, c.k[..., a:b, :].clone(), c.v[..., a:b, :].clone(),
                               out.clone(), self.pos, self.spec)
            self.computed[op[1]] += 1
        else:
            a, b, k, v, out, self.pos, self.spec = hit
            self.cache.k[..., a:b, :] = k
            self.cache.v[..., a:b, :] = v
            out = out.clone()
            self.replayed[op[1]] += 1
        self._ops += (op,)
        return out

    @torch.inference_mode()
    def logits(self, seq, end):
        p = self.pos
        op = (p, "logits", tuple(int(t) for t in seq[p:end]))
        return self._replay(op, lambda: super(ForwardOnce, self).logits(seq, end),
                            lambda out: (p, end))

    @torch.inference_mode()
    def tree_forward(self, seq, base, tokens, ancestors):
        p, spec0, base = self.pos, self.spec, int(base)
        op = (p, "tree", tuple(int(t) for t in seq[p:base]), base,
              tuple(int(t) for t in tokens), tuple(tuple(int(a) for a in anc)
                                                   for anc in ancestors))
        start = p if base > p else base + spec0  # ZooModel.tree_forward's first slot
        return self._replay(
            op, lambda: super(ForwardOnce, self).tree_forward(seq, base, tokens, ancestors),
            lambda out: (start, start + out.shape[0]))

    def keep(self, base, slots):
        super().keep(base, slots)
        self._ops += ((int(base), "keep", tuple(int(s) for s in slots)),)


class BatchForwardOnce(BatchZooLevel):
    """A batched zoo level (:class:`BatchZooLevel` over ``model``) that runs each batched
    forward once per history since ``reset`` (every forward's positions, ends and tokens and
    every rollback, in order: the same history leaves the same cache) and replays it after:
    the keys and values of the slots it wrote (each row's ``m`` slots from its start,
    padding included) and the same logits, bit for bit. For the batched sampling-law tests,
    whose batches repeat their prompts; tested against :class:`BatchZooLevel` in
    tests/validation/test_batch_decoder.py. ``computed`` / ``replayed`` count the forwards
    run and replayed."""

    def __init__(self, model: ZooModel):
        super().__init__(model)
        self._memo: dict = {}
        self._hist: tuple = ()
        self.computed = self.replayed = 0

    def reset(self, batch, slack=0):
        super().reset(batch, slack)
        self._hist = (int(batch), int(slack))

    def rollback(self, j, n):
        super().rollback(j, n)
        self._hist += (("rollback", int(j), int(n)),)

    @torch.inference_mode()
    def logits(self, seqs, ends):
        starts = self.pos.copy()
        ends_t = tuple(int(e) for e in ends)
        # (a wrong number of ends is a miss: the level itself refuses it)
        toks = tuple(tuple(int(t) for t in s[a:e])
                     for s, a, e in zip(seqs, starts, ends_t, strict=False))
        call = ("logits", tuple(starts.tolist()), ends_t, toks)
        key = (self._hist, call)
        hit = self._memo.get(key)
        c = self.cache
        if hit is None:
            out, mj = super().logits(seqs, ends)
            m = out.shape[1]
            rows = [(c.k[:, j, :, a:a + m].clone(), c.v[:, j, :, a:a + m].clone())
                    for j, a in enumerate(starts.tolist())]
            self._memo[key] = (m, rows, out.clone(), mj.copy())
            self.computed += 1
        else:
            m, rows, out, mj = hit
            for j, a in enumerate(starts.tolist()):
                c.k[:, j, :, a:a + m] = rows[j][0]
                c.v[:, j, :, a:a + m] = rows[j][1]
            out, mj = out.clone(), mj.copy()
            self.pos = np.asarray(ends_t, dtype=np.int64)
            self.replayed += 1
        self._hist += (call,)
        return out, mj


def tiny_family(n: int, vocab: int = 16, noise: float = 0.03, d: int = 16, seed: int = 0,
                block_size: int = 128, scale: float = 4.0, forward_once: bool = False):
    """``n`` ZooLevels, target first (:class:`ForwardOnce` levels with ``forward_once``)."""
    level = ForwardOnce if forward_once else ZooModel
    out = []
    for s in range(n):
        torch.manual_seed(seed)
        m = GPT(GPTConfig(1, 2, d, vocab_size=vocab, block_size=block_size))
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(scale)
            torch.manual_seed(seed * 100 + 1 + s)
            for p in m.parameters():
                p.add_(torch.randn_like(p) * noise * s)
        out.append(level(m, f"m{s}"))
    return out


def tiny_ngram(seed: int = 0, length: int = 4000, order: int = 3) -> NGramDrafter:
    """An n-gram level over bytes trained on a small random 'text' with repeats."""
    rng = np.random.default_rng(seed)
    words = [rng.integers(97, 123, size=rng.integers(2, 6)).astype(np.uint8) for _ in range(30)]
    data = np.concatenate([words[i] for i in rng.integers(0, 30, size=length // 3)])
    return NGramDrafter(NGramModel(data, order=order, min_count=1))


_GREEDY: dict = {}  # (id(model), prompt) -> (model, its greedy tokens so far)


def greedy_tokens(model, prompt, n: int) -> list[int]:
    """The first ``n`` tokens of ``model``'s greedy continuation of ``prompt``
    (:func:`~validation.schemes.chain.autoregressive`), one run per (model, prompt) and
    process: greedy decoding is deterministic token by token, so a shorter run is a prefix
    of a longer one. The entry holds the model, so its id is not reused."""
    from validation.schemes.chain import autoregressive

    key = (id(model), tuple(int(t) for t in prompt))
    have = _GREEDY.get(key, (model, []))[1]
    if len(have) < n:
        have = autoregressive(model, prompt, n).tokens
        _GREEDY[key] = (model, have)
    return have[:n]


class ConstantModel(DecoderModel):
    """A level whose next-token law is the same in every context (log-probabilities
    ``logp``): acceptance is then exactly iid per position / node, so the decoder's counts
    can be compared with the exact theory (T1–T2, A1)."""

    kind = "constant"
    supports_tree = True

    def __init__(self, probs, name: str):
        p = np.asarray(probs, dtype=np.float64)
        self.row = torch.from_numpy(np.log(p / p.sum())).to(torch.float32)
        self.name = name
        self.params = 0
        self.vocab_size = p.size
        self.max_len = None
        self.device = torch.device("cpu")
        self.pos = 0

    def logits(self, seq, end):
        m = end - self.pos
        self.pos = end
        self.spec = 0
        return self.row.expand(m, -1).clone()

    def tree_forward(self, seq, base, tokens, ancestors):
        base, spec0 = self._tree_args(seq, base, tokens, ancestors)
        m = base - self.pos + len(tokens)
        self.pos = base
        self.spec = spec0 + len(tokens)
        return self.row.expand(m, -1).clone()
