"""The models the decoder runs: zoo GPTs, the n-gram drafter and Hugging Face checkpoints.

A level keeps ``pos`` = how many leading tokens of the current sequence its cache holds.
``logits(seq, end)`` feeds ``seq[pos:end]`` in ONE forward and returns the next-token logits
(or log-probabilities) at those positions, shape ``(end - pos, V)``: row ``r`` is the law of
token ``pos + r + 1`` given ``seq[:pos + r + 1]``. ``rollback(n)`` forgets everything from
index ``n`` on (an index move for the static zoo cache; ``DynamicCache.crop`` for HF).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import torch

from . import paths

__all__ = ["DecoderModel", "ZooModel", "NGramDrafter", "HFModel", "load_model", "ZOO_MODELS"]

ZOO_MODELS = ("target", "mid", "small", "ngram")


class DecoderModel(ABC):
    """Base class; subclasses set name, kind, params, vocab_size, max_len, device."""

    name: str
    kind: str
    params: int
    vocab_size: int
    max_len: int | None
    device: torch.device
    pos: int = 0

    def reset(self) -> None:
        self.pos = 0

    def rollback(self, n: int) -> None:
        if n < self.pos:
            self.pos = n

    @abstractmethod
    def logits(self, seq: list[int], end: int) -> torch.Tensor:
        """Logits (m, V) for positions ``self.pos..end-1`` of ``seq``; advances the cache."""

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "params": int(self.params),
                "vocab_size": int(self.vocab_size), "max_len": self.max_len}


class ZooModel(DecoderModel):
    """A zoo GPT with a preallocated KV cache (rollback = index move)."""

    kind = "zoo-gpt"

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
        return out

    def describe(self):
        d = super().describe()
        c = self.model.cfg
        d.update(n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model, source=self.source,
                 sha256=self.sha256)
        return d


class NGramDrafter(DecoderModel):
    """The n-gram drafter as a level: log-probabilities from counts; stateless (no cache)."""

    kind = "ngram"

    def __init__(self, ngram, name: str = "ngram", device="cpu"):
        self.ngram = ngram
        self.name = name
        self.params = 0
        self.vocab_size = 256
        self.max_len = None
        self.device = torch.device(device)
        self.pos = 0

    def logits(self, seq, end):
        order = self.ngram.order
        rows = [self.ngram.probs(seq[max(0, t + 1 - order) : t + 1]) for t in range(self.pos, end)]
        self.pos = end
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
    """A level from a zoo name (``target``, ``mid``, ``small``, ``ngram``, or ``ngram:K`` for
    an n-gram of context length K), a zoo
    ``.safetensors`` file, or a Hugging Face checkpoint directory (has ``config.json``)."""
    from polyspec_theory._input import PolyspecInputError

    from .zoo.weights import load_gpt

    zdir = Path(zoo_dir) if zoo_dir is not None else paths.zoo_dir()
    if spec == "ngram" or spec.startswith("ngram:"):
        from .zoo.ngram import NGramModel

        if spec == "ngram":
            return NGramDrafter(NGramModel.default(), device=device)
        try:
            order = int(spec.split(":", 1)[1])
        except ValueError:
            order = -1
        if not 0 <= order <= 7:
            raise PolyspecInputError("models", f"{spec!r}: n-gram order must be 0..7")
        return NGramDrafter(NGramModel.default(order), name=spec.replace(":", ""),
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
        return HFModel(p, device=device, dtype=dtype)
    raise PolyspecInputError(
        "models", f"{spec!r} is neither a zoo level {ZOO_MODELS}, a zoo .safetensors file, "
        "nor a Hugging Face checkpoint directory with config.json")


def _digest(path) -> str:
    """First 16 hex digits of the file's SHA-256 (identifies the weights in traces)."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
