"""Tiny random models for the decoder tests: a random target and drafters that are noisy
copies of it (noise grows with the level), so acceptance is neither 0 nor 1."""

from __future__ import annotations

import numpy as np
import torch

from validation.capture.models import DecoderModel, NGramDrafter, ZooModel
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.ngram import NGramModel


class PrefillOnce(ZooModel):
    """A zoo level that runs the forward of a fresh sequence (``logits`` from an empty cache:
    a decoder's prefill) once per token prefix and replays it after: the same keys and values
    copied into the cache slots ``[0, end)`` and the same logits, bit for bit (a forward
    writes its slots before it reads them, so the slots beyond ``end`` never matter). For
    sampling-law tests that decode one prompt thousands of times; tested against
    :class:`ZooModel` in tests/validation/test_tree_decoder.py."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prefills: dict = {}

    @torch.inference_mode()
    def logits(self, seq, end):
        if self.pos or self.spec:
            return super().logits(seq, end)
        key = tuple(int(t) for t in seq[:end])
        hit = self._prefills.get(key)
        if hit is None:
            out = super().logits(seq, end)
            c = self.cache
            self._prefills[key] = (c.k[..., :end, :].clone(), c.v[..., :end, :].clone(),
                                   out.clone())
            return out
        k, v, out = hit
        self.cache.k[..., :end, :] = k
        self.cache.v[..., :end, :] = v
        self.pos = end
        self.spec = 0
        return out.clone()


def tiny_family(n: int, vocab: int = 16, noise: float = 0.03, d: int = 16, seed: int = 0,
                block_size: int = 128, scale: float = 4.0, prefill_once: bool = False):
    """``n`` ZooLevels, target first (:class:`PrefillOnce` levels with ``prefill_once``)."""
    level = PrefillOnce if prefill_once else ZooModel
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
