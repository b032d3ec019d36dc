"""GPU, engine and model names as tables and users write them, mapped to the cost database's.

* GPUs: ``"H200"``, ``"NVIDIA H100 80GB"``, ``"h200_sxm"`` ... -> the database's system name.
* Engines: the engine a row names -> the database backend whose kernels it runs and the
  engine family whose host-side behaviour (:mod:`validation.hardware.engines`) applies.
  nano-PEARL and SSD are nano-vllm-style engines: FlashAttention kernels (the ``vllm``
  tables), CUDA graphs for decode, a host sync per forward.
* Models: a Hugging Face id the database ships a config for, an ``-Instruct`` checkpoint of a
  shipped base (same architecture numbers), a config this repository ships
  (``validation/hardware/model_configs/``, sources in its README), or a path to a folder or a
  ``config.json`` file. Nothing is ever downloaded: an unknown id is refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError

__all__ = ["GPUS", "ENGINES", "Engine", "gpu_system", "engine_named", "model_source",
           "MODEL_CONFIGS"]

MODEL_CONFIGS = Path(__file__).resolve().parent / "model_configs"

# table spelling (upper case, "NVIDIA " and memory sizes dropped) -> database system
GPUS = {
    "H200": "h200_sxm", "H200 SXM": "h200_sxm",
    "H100": "h100_sxm", "H100 SXM": "h100_sxm", "H100 HBM3": "h100_sxm",
    "A100": "a100_sxm", "A100 SXM": "a100_sxm",
    "B200": "b200_sxm", "B300": "b300_sxm", "GB200": "gb200", "GB300": "gb300",
    "L40S": "l40s", "RTX PRO 6000": "rtx_pro_6000_server",
}
_SYSTEMS = frozenset(GPUS.values())


@dataclass(frozen=True)
class Engine:
    """An engine as the forecast models it: ``backend`` (the database's kernels), ``family``
    (whose host behaviour and graph sizes apply), ``verify_attention`` (``"packed"``: each
    verified token is an independent decode sample reading its sequence's KV cache, nano-PEARL's
    target forward; ``"multi"``: m queries per sequence read the cache once)."""

    name: str
    backend: str
    family: str
    verify_attention: str


ENGINES = {
    "nano-pearl": Engine("nano-PEARL", "vllm", "nano-vllm", "packed"),
    "ssd": Engine("SSD", "vllm", "nano-vllm", "multi"),
    "nano-vllm": Engine("nano-vllm", "vllm", "nano-vllm", "multi"),
    "vllm": Engine("vLLM", "vllm", "vllm", "multi"),
    "sglang": Engine("SGLang", "sglang", "sglang", "multi"),
    "trtllm": Engine("TensorRT-LLM", "trtllm", "trtllm", "multi"),
    "tensorrt-llm": Engine("TensorRT-LLM", "trtllm", "trtllm", "multi"),
}


def gpu_system(name, field: str = "gpu") -> str:
    """The database system of a GPU name (``"H200"`` -> ``"h200_sxm"``); refused when the
    database has no such GPU."""
    if not isinstance(name, str) or not name.strip():
        raise PolyspecInputError(field, f"must be a GPU name such as H200, got {name!r}")
    raw = name.strip()
    if raw.lower() in _SYSTEMS:
        return raw.lower()
    key = re.sub(r"^NVIDIA\s+", "", raw.upper())
    key = re.sub(r"\s*\d+\s*GB\b", "", key).replace("-", " ").strip()
    key = re.sub(r"\s+", " ", key)
    if key in GPUS:
        return GPUS[key]
    known = sorted({k for k in GPUS if not k.endswith((" SXM", " HBM3"))})
    raise PolyspecInputError(field, f"no cost database for GPU {name!r}; known: "
                             f"{', '.join(known)} (or a database name: "
                             f"{', '.join(sorted(_SYSTEMS))})")


def engine_named(name, field: str = "engine") -> Engine:
    """The :class:`Engine` of an engine name (case-insensitive)."""
    if not isinstance(name, str) or name.strip().lower() not in ENGINES:
        raise PolyspecInputError(field, f"unknown engine {name!r}; known: "
                                 f"{', '.join(sorted({e.name for e in ENGINES.values()}))}")
    return ENGINES[name.strip().lower()]


def _shipped() -> frozenset:
    from aiconfigurator_core.sdk import common

    return frozenset(common.DefaultHFModels)


def model_source(name, field: str = "model") -> tuple[str, str]:
    """``(what the database compiles, where the architecture comes from)`` for a model name or
    config path. Order: a path; a config shipped here; an id the database ships; an
    ``-Instruct`` id whose base the database ships (instruction tuning keeps the architecture).
    """
    if not isinstance(name, str) or not name.strip():
        raise PolyspecInputError(field, f"must be a Hugging Face id or a config.json path, got "
                                 f"{name!r}")
    name = name.strip()
    p = Path(name)
    if name.endswith(".json") or os.sep in name and p.exists():
        folder = p.parent if p.name.endswith(".json") else p
        if p.name.endswith(".json") and p.name != "config.json":
            raise PolyspecInputError(field, f"{name}: the file must be named config.json (the "
                                     "database reads <folder>/config.json)")
        if not (folder / "config.json").is_file():
            raise PolyspecInputError(field, f"{name}: no config.json there")
        return str(folder.resolve()), f"config {folder / 'config.json'}"
    ours = MODEL_CONFIGS / name.replace("/", "--")
    if (ours / "config.json").is_file():
        return str(ours), f"polyspec's config of {name} (validation/hardware/model_configs)"
    shipped = _shipped()
    if name in shipped:
        return name, f"aiconfigurator-core's config of {name}"
    base = re.sub(r"-Instruct$", "", name)
    if base != name and base in shipped:
        return base, f"aiconfigurator-core's config of {base} (the architecture of {name})"
    raise PolyspecInputError(field, f"no architecture for {name!r}: neither the database nor "
                             "polyspec ships its config; give the path of its Hugging Face "
                             "config.json (nothing is downloaded)")
