"""What a model spec names, without loading it: the name it is recorded under and whether it
is a file or folder of weights (shared by the capture set-up, the model loaders and the
commands that only name models; no torch)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["model_name", "model_paths"]


def model_name(spec: str) -> str:
    """The name a model spec is loaded and recorded under (in traces, profiles and pools):
    ``ngram:3`` -> ``ngram3``, a ``.safetensors`` file -> its stem, a directory -> its name,
    a zoo name -> itself. Loads nothing."""
    if spec.startswith("ngram:"):
        return spec.replace(":", "")
    p = Path(spec)
    if p.suffix == ".safetensors":
        return p.stem
    return p.name if len(p.parts) > 1 else spec


def model_paths(models) -> list:
    """The model specs given as files or folders (weights, checkpoints), not zoo level names:
    the inputs a command's output must never overwrite."""
    import os

    return [m for m in models if str(m).endswith(".safetensors") or os.path.isdir(m)]
