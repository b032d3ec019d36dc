"""The models the decoder runs: zoo GPTs, the n-gram drafter and Hugging Face checkpoints.

A level keeps ``pos`` = how many leading tokens of the current sequence its cache holds.
``logits(seq, end)`` feeds ``seq[pos:end]`` in ONE forward and returns the next-token logits
(or log-probabilities) at those positions, shape ``(end - pos, V)``: row ``r`` is the law of
token ``pos + r + 1`` given ``seq[:pos + r + 1]``. ``rollback(n)`` forgets everything from
index ``n`` on (an index move for the static zoo cache; ``DynamicCache.crop`` for HF).

Token trees (docs/theory.md Part III-D T3; :mod:`validation.schemes.structured`): a level with
``supports_tree`` also has *speculative slots* after its committed prefix ``seq[:base]``.
``tree_forward(seq, base, tokens, ancestors)`` feeds, in ONE forward, the committed tokens
``seq[pos:base]`` it has not seen (causal; only when no speculative slot is held) and then
the drafted ``tokens``, token ``j`` at speculative slot ``spec + j`` seeing the committed
prefix, the slots ``ancestors[j]`` (its drafted ancestors, root excluded) and itself, at
position ``base - 1 + depth`` (depth = ``len(ancestors[j]) + 1``): a tree attention mask. It
returns one row per fed token. ``keep(base, slots)`` makes the speculative ``slots`` (the
accepted path, in order) the committed positions ``base, base + 1, ...`` and drops the other
slots (the zoo cache gathers those entries to the front: rolling back stays an index move).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import torch

from validation import paths
from validation.capture.model_specs import model_name

__all__ = ["ModelInfo", "DecoderModel", "ZooModel", "NGramDrafter", "HFModel", "load_model",
           "ZOO_MODELS"]

ZOO_MODELS = ("target", "mid", "draft-t", "small", "ngram")


class ModelInfo:
    """What a decoder's model says about itself (subclasses set it): ``name``, ``kind``,
    ``params``, ``vocab_size``, ``max_len`` (``None``: unbounded), ``device``; its trace header
    entry is :meth:`describe`."""

    name: str
    kind: str
    params: int
    vocab_size: int
    max_len: int | None
    device: torch.device

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "params": int(self.params),
                "vocab_size": int(self.vocab_size), "max_len": self.max_len}


class DecoderModel(ModelInfo, ABC):
    """Base class of the single-stream models (:class:`ModelInfo` set by subclasses)."""

    pos: int = 0
    spec: int = 0  # speculative (tree) slots held after ``pos`` (module docstring)
    supports_tree: bool = False

    def reset(self) -> None:
        self.pos = 0
        self.spec = 0

    def rollback(self, n: int) -> None:
        self.spec = 0
        if n < self.pos:
            self.pos = n

    def tree_forward(self, seq, base: int, tokens, ancestors) -> torch.Tensor:
        """One forward over ``seq[pos:base]`` and the drafted ``tokens`` with a tree mask
        (module docstring); rows ``(base - pos) + len(tokens)``."""
        from polyspec_theory.errors import PolyspecInputError

        raise PolyspecInputError("models", f"{self.name} ({self.kind}) cannot score a token "
                                 "tree (no tree attention mask): use a zoo GPT or the n-gram")

    def keep(self, base: int, slots) -> None:
        """Commit the speculative ``slots`` (in order) as positions ``base, base + 1, ...``."""
        self._check_keep(base, slots)
        self.pos = base + len(slots)
        self.spec = 0

    def _tree_args(self, seq, base, tokens, ancestors):
        base = int(base)
        if not self.pos <= base <= len(seq):
            raise ValueError(f"{self.name}: base {base} outside [{self.pos}, {len(seq)}]")
        if self.pos < base and self.spec:
            raise ValueError(f"{self.name}: catch-up tokens while speculative slots are held")
        if len(ancestors) != len(tokens):
            raise ValueError("need one ancestor list per drafted token")
        if self.pos == base and not len(tokens):
            raise ValueError(f"{self.name}: nothing to feed")
        spec0 = self.spec
        for j, anc in enumerate(ancestors):
            if any(not 0 <= a < spec0 + j for a in anc) or list(anc) != sorted(set(anc)):
                raise ValueError(f"ancestors[{j}] must be increasing earlier slots, got {anc}")
        return base, spec0

    def _check_keep(self, base, slots):
        if list(slots) != sorted(set(slots)) or any(not 0 <= s < self.spec for s in slots):
            raise ValueError(f"{self.name}: keep slots {list(slots)} not increasing in "
                             f"[0, {self.spec})")
        if base != self.pos:
            raise ValueError(f"{self.name}: keep at {base}, but the committed prefix is "
                             f"{self.pos}")

    @abstractmethod
    def logits(self, seq: list[int], end: int) -> torch.Tensor:
        """Logits (m, V) for positions ``self.pos..end-1`` of ``seq``; advances the cache."""

class ZooModel(DecoderModel):
    """A zoo GPT with a preallocated KV cache (rollback = index move)."""

    kind = "zoo-gpt"
    supports_tree = True

    def __init__(self, model, name: str, source: str = "", sha256: str | None = None):
        self.model = model.eval()
        self.name = name
        self.source = source
        self.sha256 = sha256
        self.params = model.num_params()
        self.vocab_size = model.cfg.vocab_size
        self.max_len = model.cfg.block_size
        p = model.tok.weight
        self.device = p.device
        self.dtype = p.dtype
        self.cache = model.new_cache()
        self.pos = 0

    @torch.inference_mode()
    def logits(self, seq, end):
        toks = torch.tensor(seq[self.pos : end], dtype=torch.long, device=self.device)
        out = self.model.forward_cached(toks[None], self.pos, self.cache)
        self.pos = end
        self.spec = 0
        return out

    @torch.inference_mode()
    def tree_forward(self, seq, base, tokens, ancestors):
        base, spec0 = self._tree_args(seq, base, tokens, ancestors)
        c, k = base - self.pos, len(tokens)
        start = self.pos if c else base + spec0
        m = c + k
        end = start + m
        if base + spec0 + k > self.max_len:
            raise ValueError(f"{self.name}: tree needs slot {base + spec0 + k} > "
                             f"{self.max_len}")
        vis = np.zeros((m, end), dtype=bool)
        vis[:, :base] = True  # committed prefix (catch-up rows: causal, set below)
        for r in range(c):
            vis[r, self.pos + r + 1: base] = False
        pos_ids = list(range(self.pos, base))
        for j, anc in enumerate(ancestors):
            row = c + j
            vis[row, [base + a for a in anc]] = True
            vis[row, base + spec0 + j] = True
            pos_ids.append(base - 1 + len(anc) + 1)
        toks = torch.tensor(list(seq[self.pos: base]) + [int(t) for t in tokens],
                            dtype=torch.long, device=self.device)
        out = self.model.forward_cached(toks[None], start, self.cache, positions=pos_ids,
                                        mask=torch.from_numpy(vis).to(self.device))
        self.pos = base
        self.spec = spec0 + k
        return out

    def keep(self, base, slots):
        self._check_keep(base, slots)
        self.cache.keep(base, [base + s for s in slots])
        self.pos = base + len(slots)
        self.spec = 0

    def describe(self):
        d = super().describe()
        c = self.model.cfg
        d.update(n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model, source=self.source,
                 sha256=self.sha256)
        return d


class NGramDrafter(DecoderModel):
    """The n-gram drafter as a level: log-probabilities from counts; stateless (no cache)."""

    kind = "ngram"
    supports_tree = True

    def __init__(self, ngram, name: str = "ngram", device="cpu"):
        self.ngram = ngram
        self.name = name
        self.params = 0
        self.vocab_size = 256
        self.max_len = None
        self.device = torch.device(device)
        self.pos = 0
        self._spec_tokens: list[int] = []

    def logits(self, seq, end):
        order = self.ngram.order
        rows = [self.ngram.probs(seq[max(0, t + 1 - order) : t + 1]) for t in range(self.pos, end)]
        self.pos = end
        self.spec = 0
        out = torch.from_numpy(np.log(np.stack(rows)))
        return out.to(device=self.device, dtype=torch.float32)

    def tree_forward(self, seq, base, tokens, ancestors):
        base, spec0 = self._tree_args(seq, base, tokens, ancestors)
        order = self.ngram.order
        if spec0 == 0:
            self._spec_tokens = []
        rows = [self.ngram.probs(seq[max(0, t + 1 - order): t + 1])
                for t in range(self.pos, base)]
        head = list(seq[max(0, base - order): base])
        for tok, anc in zip(tokens, ancestors, strict=True):
            ctx = head + [self._spec_tokens[a] for a in anc] + [int(tok)]
            rows.append(self.ngram.probs(ctx[max(0, len(ctx) - order):]))
            self._spec_tokens.append(int(tok))
        self.pos = base
        self.spec = spec0 + len(tokens)
        out = torch.from_numpy(np.log(np.stack(rows)))
        return out.to(device=self.device, dtype=torch.float32)

    def describe(self):
        d = super().describe()
        d.update(order=self.ngram.order, entries=self.ngram.n_entries,
                 min_count=self.ngram.min_count)
        return d


class HFModel(DecoderModel):
    """A local Hugging Face causal-LM checkpoint directory (``transformers`` needed)."""

    kind = "hf"

    def __init__(self, path, name: str | None = None, device="cpu", dtype=torch.float32):
        try:
            from transformers import AutoModelForCausalLM
        except ImportError as e:  # pragma: no cover
            raise ImportError("HF models need the 'hf' extra: pip install polyspec[hf]") from e
        self.path = str(path)
        self.model = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype)
        self.model = self.model.to(device).eval()
        self.name = name or Path(path).name
        self.params = sum(p.numel() for p in self.model.parameters())
        cfg = self.model.config
        self.vocab_size = int(cfg.vocab_size)
        self.max_len = getattr(cfg, "max_position_embeddings", None) or getattr(
            cfg, "n_positions", None)
        self.device = torch.device(device)
        self.cache = None
        self.pos = 0
        import inspect

        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def reset(self):
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.pos = 0

    def rollback(self, n):
        if n < self.pos:
            if n <= 0:
                self.reset()
                return
            # negative crop = drop that many trailing positions (all transformers versions)
            self.cache.crop(n - self.pos)
            self.pos = n

    @torch.inference_mode()
    def logits(self, seq, end):
        if self.cache is None:
            self.reset()
        ids = torch.tensor(seq[self.pos : end], dtype=torch.long, device=self.device)[None]
        kw = {self._cache_kw: self.cache}
        out = self.model(input_ids=ids, use_cache=True, **kw)
        new = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
        if new is not None:
            self.cache = new
        self.pos = end
        return out.logits[0].float()

    def describe(self):
        d = super().describe()
        d.update(source=self.path, model_type=self.model.config.model_type)
        return d


def load_model(spec: str, *, device="cpu", dtype=torch.float32, zoo_dir=None) -> DecoderModel:
    """A level from a zoo name (``target``, ``mid``, ``draft-t``, ``small``, ``ngram``, or
    ``ngram:K`` for an n-gram of context length K), a zoo
    ``.safetensors`` file, or a Hugging Face checkpoint directory (has ``config.json``)."""
    from polyspec_theory.errors import PolyspecInputError
    from validation.zoo.weights import load_gpt

    zdir = Path(zoo_dir) if zoo_dir is not None else paths.zoo_dir()
    if spec == "ngram" or spec.startswith("ngram:"):
        from validation.zoo.ngram import NGramModel

        if spec == "ngram":
            return NGramDrafter(NGramModel.default(), device=device)
        try:
            order = int(spec.split(":", 1)[1])
        except ValueError:
            order = -1
        if not 0 <= order <= 7:
            raise PolyspecInputError("models", f"{spec!r}: n-gram order must be 0..7")
        return NGramDrafter(NGramModel.default(order), name=model_name(spec),
                          device=device)
    if spec in ZOO_MODELS:
        path = zdir / f"{spec}.safetensors"
        if not path.exists():
            raise PolyspecInputError("models", f"zoo weights not found: {path}")
        src = f"zoo:{path.name}" if zoo_dir is None else str(path)
        return ZooModel(load_gpt(path, device=device, dtype=dtype), spec, src,
                        _digest(path))
    p = Path(spec)
    if p.is_file() and p.suffix == ".safetensors":
        return ZooModel(load_gpt(p, device=device, dtype=dtype), p.stem, str(p), _digest(p))
    if p.is_dir() and (p / "config.json").exists():
        from validation.files import note_read

        note_read(p)  # a checkpoint's files are inputs: no command writes over them
        return HFModel(p, device=device, dtype=dtype)
    raise PolyspecInputError(
        "models", f"{spec!r} is neither a zoo level {ZOO_MODELS}, a zoo .safetensors file, "
        "nor a Hugging Face checkpoint directory with config.json")


def _digest(path) -> str:
    """First 16 hex digits of the file's SHA-256 (identifies the weights in traces)."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
