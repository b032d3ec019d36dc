"""Saving / loading zoo weights: fp16 safetensors with the config and training record in the
metadata; loading upcasts to the requested dtype (fp32 by default)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from validation.zoo.model import GPT, GPTConfig

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


def _bad(path, why: str):
    from polyspec_theory.errors import PolyspecInputError

    return PolyspecInputError("models", f"{path}: {why}")


def _metadata(path) -> dict:
    """A zoo weight file's metadata; a file that is not a readable safetensors file (empty,
    truncated, corrupt) or not a zoo file is one line naming it (PolyspecInputError)."""
    from safetensors import SafetensorError, safe_open

    from validation.files import note_read

    note_read(path)  # model weights are an input: no command writes over them
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise _bad(path, f"not a readable .safetensors file ({e})") from None
    if meta.get("format") != "polyspec-zoo-1":
        raise _bad(path, "not a polyspec zoo weight file")
    return meta


def _meta_json(path, meta: dict, key: str):
    try:
        return json.loads(meta[key])
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"metadata.{key}: missing or not JSON ({e})") from None


def read_record(path) -> dict:
    """The training record stored in a zoo weight file's metadata."""
    return _meta_json(path, _metadata(path), "record")


def load_gpt(path, *, device="cpu", dtype=torch.float32) -> GPT:
    """Load a zoo model (eval mode) from its safetensors file; a corrupt, empty or mismatched
    file is a PolyspecInputError naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    meta = _metadata(path)
    try:
        cfg = GPTConfig.from_dict(_meta_json(path, meta, "config"))
        model = GPT(cfg)
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"metadata.config: not a zoo model config ({e})") from None
    try:
        state = load_file(str(path))
        model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _bad(path, f"weights do not load ({why})") from None
    return model.to(device=device, dtype=dtype).eval()
