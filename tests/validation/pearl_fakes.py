"""Context-hash models for the parallel draft-verify decoder tests: greedy, context-dependent
and cheap. The target's next token is a hash of the prefix; the drafter agrees with it with
probability ``alpha``, decided by a second hash of the same prefix. Every check of a draft
sees a prefix never seen before (it grows, and a correction changes it), so the checks are
independent Bernoulli(``alpha``) draws: the run law is geometric (iid ``alpha``), as PL1-PL3
assume, while every decision is still the decoder's own greedy comparison."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from validation.capture.batch_models import BatchLevel


def _hash(prefix, salt: bytes) -> int:
    data = np.asarray(prefix[-12:], dtype=np.int64).tobytes() + len(prefix).to_bytes(8, "little")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=salt).digest(), "little")


def target_token(prefix, vocab: int) -> int:
    return _hash(prefix, b"target") % vocab


def draft_token(prefix, vocab: int, alpha: float) -> int:
    t = target_token(prefix, vocab)
    agree = (_hash(prefix, b"agree") >> 11) / float(1 << 53) < alpha
    return t if agree else (t + 1) % vocab


class HashLevel(BatchLevel):
    """A batch level whose logits are one-hot at :func:`target_token` (``alpha=None``) or at
    :func:`draft_token`."""

    kind = "hash"

    def __init__(self, name: str, vocab: int = 1000, alpha: float | None = None):
        self.name = name
        self.params = 0
        self.vocab_size = vocab
        self.max_len = None
        self.device = torch.device("cpu")
        self.alpha = alpha

    def token(self, prefix) -> int:
        if self.alpha is None:
            return target_token(prefix, self.vocab_size)
        return draft_token(prefix, self.vocab_size, self.alpha)

    def logits(self, seqs, ends):
        mj = self._counts(seqs, ends)
        m = max(int(mj.max()), 1)
        out = torch.zeros(self.batch, m, self.vocab_size)
        for j in range(self.batch):
            for r in range(int(mj[j])):
                out[j, r, self.token(seqs[j][: int(self.pos[j]) + r + 1])] = 1.0
        self.pos = np.asarray(ends, dtype=np.int64).copy()
        return out, mj

    def describe(self):
        return {"name": self.name, "kind": self.kind, "params": 0,
                "vocab_size": self.vocab_size, "max_len": None}
