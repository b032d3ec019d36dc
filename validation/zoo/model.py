"""A small GPT (pre-LayerNorm, tied embeddings, learned positions) with a static KV cache.

The cache is preallocated to ``block_size`` positions (gpt-fast style): a forward over ``m``
new tokens at position ``start`` writes keys/values into ``[start, start+m)`` and attends to
``[0, start+m)``; rolling back is only a change of the caller's length index (stale entries
beyond it are overwritten later), so rejection costs nothing.

Token trees (docs/theory.md Part III-D, T3): :meth:`GPT.forward_cached` also takes explicit
position ids and an attention mask among the new tokens (a tree attention mask: each drafted
node sees the committed prefix, its ancestors and itself); :meth:`KVCache.keep` then moves the
entries of the accepted path to the front of the speculative area, so that the committed
prefix is again contiguous and rolling back stays an index move.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPTConfig", "GPT", "KVCache", "BatchKVCache"]


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of one zoo model (byte vocabulary by default)."""

    n_layer: int
    n_head: int
    d_model: int
    vocab_size: int = 256
    block_size: int = 256

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        return cls(**{k: int(d[k]) for k in cls.__dataclass_fields__})


class KVCache:
    """Preallocated keys/values of shape (n_layer, 1, n_head, max_len, head_dim)."""

    def __init__(self, cfg: GPTConfig, device, dtype):
        hd = cfg.d_model // cfg.n_head
        shape = (cfg.n_layer, 1, cfg.n_head, cfg.block_size, hd)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = cfg.block_size

    def keep(self, dst: int, src) -> None:
        """Move the entries of slots ``src`` (increasing, each ``>= dst + its index``) to
        ``dst, dst + 1, ...`` (gather then write: overlapping ranges are safe)."""
        if len(src) == 0:
            return
        idx = torch.as_tensor(list(src), dtype=torch.long, device=self.k.device)
        end = dst + idx.numel()
        self.k[:, :, :, dst:end] = self.k[:, :, :, idx]
        self.v[:, :, :, dst:end] = self.v[:, :, :, idx]


class BatchKVCache:
    """Keys/values of ``batch`` sequences, shape (n_layer, batch, n_head, block_size + slack,
    head_dim). Each sequence keeps its own length (held by the caller, as for
    :class:`KVCache`); ``slack`` extra positions take the padding of a batched forward that
    runs past a sequence's end (padding is written there and never attended to)."""

    def __init__(self, cfg: GPTConfig, batch: int, device, dtype, slack: int = 0):
        hd = cfg.d_model // cfg.n_head
        shape = (cfg.n_layer, int(batch), cfg.n_head, cfg.block_size + int(slack), hd)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.batch = int(batch)
        self.max_len = cfg.block_size
        self.capacity = cfg.block_size + int(slack)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.out = nn.Linear(4 * d, d, bias=False)

    # The layers are applied through torch.nn.functional on their parameters (the same ops
    # as calling the submodules, without the module-call machinery, which dominates the
    # cost of a forward of the tiny models the decoder tests run thousands of times).
    def _split(self, x):
        b, t, d = x.shape
        ln = self.ln1
        h = F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)
        q, k, v = F.linear(h, self.qkv.weight).split(d, dim=2)
        nh = self.n_head
        return [z.view(b, t, nh, d // nh).transpose(1, 2) for z in (q, k, v)]

    def _rest(self, x, y):
        """The attention output ``y`` (b, h, t, hd) projected and added to ``x``, then the
        MLP's residual."""
        b, t, d = x.shape
        x = x + F.linear(y.transpose(1, 2).reshape(b, t, d), self.proj.weight)
        ln = self.ln2
        h = F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)
        return x + F.linear(F.gelu(F.linear(h, self.fc.weight)), self.out.weight)

    def forward(self, x):
        q, k, v = self._split(x)
        return self._rest(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def forward_cached(self, x, kc, vc, start: int, mask):
        q, k, v = self._split(x)
        end = start + x.shape[1]
        kc[:, :, start:end] = k
        vc[:, :, start:end] = v
        return self._rest(x, F.scaled_dot_product_attention(q, kc[:, :, :end], vc[:, :, :end],
                                                            attn_mask=mask))

    def forward_batched(self, x, kc, vc, rows, positions, end: int, mask):
        """``x`` (b, t, d) at ``positions`` (b, t) of each sequence's own cache row."""
        q, k, v = self._split(x)
        kc[rows, :, positions] = k.transpose(1, 2)
        vc[rows, :, positions] = v.transpose(1, 2)
        return self._rest(x, F.scaled_dot_product_attention(q, kc[:, :, :end], vc[:, :, :end],
                                                            attn_mask=mask))


class GPT(nn.Module):
    """Causal byte-level language model."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.d_model % cfg.n_head:
            raise ValueError("d_model must be divisible by n_head")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def num_params(self) -> int:
        """Parameter count (tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx):
        """Training forward: logits (B, T, V) for token ids (B, T)."""
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.tok.weight)

    def _logits(self, x):
        """Final norm and tied output projection (functional, as in :class:`Block`)."""
        ln = self.ln_f
        return F.linear(F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps),
                        self.tok.weight)

    def new_cache(self) -> KVCache:
        p = self.tok.weight
        return KVCache(self.cfg, p.device, p.dtype)

    def forward_cached(self, tokens, start: int, cache: KVCache, positions=None, mask=None):
        """Logits (m, V) for ``tokens`` (1, m) written to cache slots ``start..start+m-1``,
        with the cache holding slots ``< start``; the cache is updated in place.

        Default: the tokens sit at positions ``start..start+m-1`` and attend causally.
        ``positions`` (m ints): their position ids instead (a tree node at depth ``d`` below
        the last committed token at position ``b - 1`` has position ``b - 1 + d``, whatever
        its slot). ``mask`` (bool, True = may attend): (m, m) = which of the new tokens each
        new token sees (slots ``< start`` all visible), or (m, start + m) = which slots."""
        m = tokens.shape[1]
        end = start + m
        if end > self.cfg.block_size:
            raise ValueError(f"context {end} exceeds block_size {self.cfg.block_size}")
        dev = tokens.device
        if positions is None:
            x = F.embedding(tokens, self.tok.weight) + self.pos.weight[start:end]
        else:
            pos = torch.as_tensor(positions, dtype=torch.long, device=dev)
            if pos.shape != (m,) or int(pos.min()) < 0 or int(pos.max()) >= self.cfg.block_size:
                raise ValueError(f"positions must be {m} ids in [0, {self.cfg.block_size})")
            x = F.embedding(tokens, self.tok.weight) + self.pos.weight[pos]
        if mask is not None:
            new = torch.as_tensor(mask, dtype=torch.bool, device=dev)
            if new.shape == (m, m):
                new = torch.cat([torch.ones(m, start, dtype=torch.bool, device=dev), new], dim=1)
            elif new.shape != (m, end):
                raise ValueError(f"mask must have shape ({m}, {m}) or ({m}, {end}), got "
                                 f"{tuple(new.shape)}")
            mask = new
        elif m == 1:
            mask = None
        else:
            rows = torch.arange(start, end, device=dev).unsqueeze(1)
            mask = torch.arange(end, device=dev).unsqueeze(0) <= rows
        for li, blk in enumerate(self.blocks):
            x = blk.forward_cached(x, cache.k[li], cache.v[li], start, mask)
        return self._logits(x[0])

    def new_batch_cache(self, batch: int, slack: int = 0) -> BatchKVCache:
        p = self.tok.weight
        return BatchKVCache(self.cfg, batch, p.device, p.dtype, slack)

    def forward_batched(self, tokens, starts, cache: BatchKVCache):
        """Logits (b, m, V) for ``tokens`` (b, m): row ``j`` is placed at positions
        ``starts[j] .. starts[j] + m - 1`` of sequence ``j`` (its cache holds positions
        ``< starts[j]``), so every sequence keeps its own length and position ids. Query
        ``r`` of row ``j`` attends to keys ``0 .. starts[j] + r`` of its own row (an attention
        mask), so a row's stale cache entries and the padding of shorter rows are never read.
        Padding (a row with fewer real tokens than ``m``) is written past that row's end and
        overwritten later; real positions must be ``< block_size``, padded ones
        ``< cache.capacity``."""
        b, m = tokens.shape
        if b != cache.batch:
            raise ValueError(f"batch {b} does not match the cache's {cache.batch}")
        dev = tokens.device
        pos = starts.to(device=dev, dtype=torch.long)[:, None] + torch.arange(m, device=dev)
        end = int(pos[:, -1].max()) + 1
        if end > cache.capacity:
            raise ValueError(f"position {end - 1} exceeds the cache capacity {cache.capacity}")
        x = F.embedding(tokens, self.tok.weight) + self.pos.weight[
            pos.clamp(max=self.cfg.block_size - 1)]
        mask = (torch.arange(end, device=dev)[None, None, :] <= pos[:, :, None])[:, None]
        rows = torch.arange(b, device=dev)[:, None]
        for li, blk in enumerate(self.blocks):
            x = blk.forward_batched(x, cache.k[li], cache.v[li], rows, pos, end, mask)
        return self._logits(x)
