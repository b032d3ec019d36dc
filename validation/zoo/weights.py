"""Saving / loading zoo weights: fp16 safetensors with the config and training record in the
metadata; loading upcasts to the requested dtype (fp32 by default)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .model import GPT, GPTConfig

__all__ = ["save_model", "load_gpt", "read_record"]


def save_model(model: GPT, path, record: dict) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    meta = {"config": json.dumps(model.cfg.to_dict()), "record": json.dumps(record),
            "format": "polyspec-zoo-1"}
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata=meta)
    tmp.replace(path)


def read_record(path) -> dict:
    """The training record stored in a zoo weight file's metadata."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != "polyspec-zoo-1":
        raise ValueError(f"{path}: not a polyspec zoo weight file")
    return json.loads(meta["record"])


def load_gpt(path, *, device="cpu", dtype=torch.float32) -> GPT:
    """Load a zoo model (eval mode) from its safetensors file."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != "polyspec-zoo-1":
        raise ValueError(f"{path}: not a polyspec zoo weight file")
    cfg = GPTConfig.from_dict(json.loads(meta["config"]))
    model = GPT(cfg)
    state = load_file(str(path))
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    return model.to(device=device, dtype=dtype).eval()
