"""The models of the batched decoder (:mod:`validation.schemes.batch`): one level decodes ``b``
sequences at once, each with its own length.

A batch level keeps ``pos[j]`` = how many leading tokens of sequence ``j`` its cache holds.
``logits(seqs, ends)`` feeds ``seqs[j][pos[j]:ends[j]]`` for every ``j`` in ONE forward over
all ``b`` slots, padded to ``m = max_j (ends[j] - pos[j])`` positions, and returns the logits
``(b, m, V)`` and the real counts ``m_j`` (row ``r < m_j`` of slot ``j`` is the law of token
``pos[j] + r + 1``; rows ``>= m_j`` are padding). A slot with ``m_j = 0`` is pure padding: it
is computed like the others (the lockstep model B0 of docs/theory.md: every forward
covers all ``b`` slots) and its output is ignored. ``rollback(j, n)`` forgets sequence ``j``
from index ``n`` on: an index move, for every sequence on its own.

Levels: :class:`BatchZooLevel` (a zoo GPT with a :class:`~validation.zoo.model.BatchKVCache`
and per-sequence positions and attention masks) and :class:`BatchNGramLevel` (the n-gram
drafter: stateless, one law per slot and position, padding included). :func:`batch_level`
wraps a loaded :class:`~validation.capture.models.DecoderModel`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.capture.models import DecoderModel, ModelInfo, NGramDrafter, ZooModel

__all__ = ["BatchLevel", "BatchZooLevel", "BatchNGramLevel", "batch_level"]


class BatchLevel(ModelInfo, ABC):
    """A level of the batched decoder (see the module docstring; :class:`ModelInfo` set by
    subclasses)."""

    batch: int = 0

    def reset(self, batch: int, slack: int = 0) -> None:
        """Empty caches for ``batch`` sequences; ``slack`` = positions a padded forward may
        run past ``max_len``."""
        self.batch = as_int(batch, "batch", low=1, high=4096)
        self.pos = np.zeros(self.batch, dtype=np.int64)

    def rollback(self, j: int, n: int) -> None:
        if n < self.pos[j]:
            self.pos[j] = n

    def _counts(self, seqs, ends) -> np.ndarray:
        ends = np.asarray(ends, dtype=np.int64)
        if ends.shape != (self.batch,):
            raise PolyspecInputError("ends", f"need one end per sequence ({self.batch})")
        mj = ends - self.pos
        if (mj < 0).any():
            j = int(np.flatnonzero(mj < 0)[0])
            raise PolyspecInputError("ends", f"sequence {j}: end {int(ends[j])} is before the "
                                     f"cached length {int(self.pos[j])}")
        for j in range(self.batch):
            if ends[j] > len(seqs[j]):
                raise PolyspecInputError("ends", f"sequence {j}: end {int(ends[j])} is past "
                                         f"its length {len(seqs[j])}")
        return mj

    @abstractmethod
    def logits(self, seqs, ends) -> tuple[torch.Tensor, np.ndarray]:
        """``(logits (b, m, V), m_j)``; advances ``pos`` to ``ends``."""

class BatchZooLevel(BatchLevel):
    """A zoo GPT over ``b`` sequences: one :class:`BatchKVCache` row per sequence, position
    ids and causal masks per sequence (:meth:`GPT.forward_batched`)."""

    kind = "zoo-gpt"

    def __init__(self, model: ZooModel):
        self.zoo = model
        self.gpt = model.model
        self.name = model.name
        self.params = model.params
        self.vocab_size = model.vocab_size
        self.max_len = model.max_len
        self.device = model.device
        self.cache = None
        self._slack = -1

    def reset(self, batch, slack=0):
        super().reset(batch, slack)
        slack = as_int(slack, "slack", low=0)
        c = self.cache
        if c is None or c.batch != self.batch or self._slack < slack:
            self.cache = self.gpt.new_batch_cache(self.batch, slack)
            self._slack = slack

    @torch.inference_mode()
    def logits(self, seqs, ends):
        mj = self._counts(seqs, ends)
        m = max(int(mj.max()), 1)
        toks = np.zeros((self.batch, m), dtype=np.int64)
        for j in range(self.batch):
            if mj[j]:
                toks[j, : mj[j]] = seqs[j][self.pos[j] : ends[j]]
        out = self.gpt.forward_batched(torch.from_numpy(toks).to(self.device),
                                       torch.from_numpy(self.pos), self.cache)
        self.pos = np.asarray(ends, dtype=np.int64).copy()
        return out, mj

    def describe(self):
        return self.zoo.describe()


class BatchNGramLevel(BatchLevel):
    """The n-gram drafter over ``b`` sequences: log-probabilities from counts for every slot
    and position (a padding row uses its slot's last real context, as a padded forward
    computes its padding too)."""

    kind = "ngram"

    def __init__(self, model: NGramDrafter):
        self.drafter = model
        self.ngram = model.ngram
        self.name = model.name
        self.params = 0
        self.vocab_size = model.vocab_size
        self.max_len = None
        self.device = model.device

    def logits(self, seqs, ends):
        mj = self._counts(seqs, ends)
        m = max(int(mj.max()), 1)
        order = self.ngram.order
        rows = np.empty((self.batch, m, self.vocab_size))
        for j in range(self.batch):
            s = seqs[j]
            last = max(int(self.pos[j]) + int(mj[j]) - 1, 0)
            for r in range(m):
                t = min(int(self.pos[j]) + r, last, len(s) - 1)
                rows[j, r] = self.ngram.probs(s[max(0, t + 1 - order) : t + 1])
        self.pos = np.asarray(ends, dtype=np.int64).copy()
        out = torch.from_numpy(np.log(rows)).to(device=self.device, dtype=torch.float32)
        return out, mj

    def describe(self):
        return self.drafter.describe()


def batch_level(model) -> BatchLevel:
    """A batch level from a loaded level (:class:`ZooModel`, :class:`NGramDrafter`) or a
    :class:`BatchLevel` (returned as is)."""
    if isinstance(model, BatchLevel):
        return model
    if isinstance(model, ZooModel):
        return BatchZooLevel(model)
    if isinstance(model, NGramDrafter):
        return BatchNGramLevel(model)
    kind = model.kind if isinstance(model, DecoderModel) else type(model).__name__
    raise PolyspecInputError("models", f"{getattr(model, 'name', kind)!r} ({kind}): batched "
                             "decoding runs zoo GPTs and n-gram drafters only")
