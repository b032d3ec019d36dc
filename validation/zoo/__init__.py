"""The model zoo: byte-level GPTs of increasing size trained on the CPython standard library's
``.py`` sources, a drafter distilled from the target (``draft-t``, :mod:`.distill`), plus a
statistical n-gram drafter, sharing the byte vocabulary (256).

Committed weights live in the data folder's ``zoo/`` (:func:`validation.paths.zoo_dir`; fp16
safetensors, upcast to fp32 at load) with the manifest ``zoo.json`` and the record
``TRAINING.md``; the n-gram counts are rebuilt
from the train split at load time. ``polyspec zoo train`` rebuilds everything.
"""

from __future__ import annotations

import json
from pathlib import Path

from validation import paths

__all__ = ["zoo_info", "encode", "decode", "NEURAL_MODELS"]

NEURAL_MODELS = ("target", "mid", "draft-t", "small")


def encode(text: str) -> list[int]:
    """Byte tokenizer: UTF-8 bytes as token ids 0..255."""
    return list(text.encode("utf-8"))


def decode(tokens) -> str:
    """Inverse of :func:`encode` (invalid UTF-8 replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def zoo_info(weights_dir=None, evaluate: bool = False) -> dict:
    """Description of the zoo: per level name, params, architecture and validation
    bits/byte (as recorded at training, or recomputed with ``evaluate=True``)."""
    from polyspec_theory.errors import PolyspecInputError
    from validation.zoo.data import corpus_digest
    from validation.zoo.ngram import NGramModel

    wdir = Path(weights_dir) if weights_dir is not None else paths.zoo_dir()
    mpath = wdir / "zoo.json"
    if not mpath.exists():
        raise PolyspecInputError("dir", f"no zoo manifest (zoo.json) in {wdir}")
    manifest = json.loads(mpath.read_text())
    models = []
    for r in manifest["models"]:
        entry = {"name": r["name"], "params": r["params"], **r["config"],
                 "steps": r["steps"], "val_bits_per_byte": r["val_bits_per_byte"]}
        if evaluate:
            from validation.zoo.data import load_split
            from validation.zoo.train import eval_bpb
            from validation.zoo.weights import load_gpt

            m = load_gpt(wdir / f"{r['name']}.safetensors")
            entry["val_bits_per_byte"] = round(eval_bpb(m, load_split("val")), 4)
        models.append(entry)
    models.sort(key=lambda e: -e["params"])
    ng = NGramModel.default()
    models.append({"name": "ngram", "params": 0, "order": ng.order, "entries": ng.n_entries,
                   "val_bits_per_byte": round(ng.eval_bpb(), 4)})
    return {"dir": str(wdir), "corpus_digest": manifest.get("corpus_digest"),
            "current_corpus_digest": corpus_digest(), "seed": manifest.get("seed"),
            "models": models}
