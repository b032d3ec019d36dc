"""Training of the default zoo (deterministic given the seed, the corpus and the thread count).

Each neural model trains with AdamW on random 256-byte windows of the train split (the batch of
step ``s`` is drawn from ``numpy.random.default_rng([seed, model_index, s])``, so a resumed run
sees the same batches), linear warm-up then cosine decay to 10 %, gradient clipping at 1.
Checkpoints (model + optimizer) are written every ``ckpt_every`` steps to ``<out>/ckpt/`` so
an interrupted run loses little and ``resume=True`` continues it. Final weights are written as
fp16 safetensors (upcast to fp32 at load); validation loss is reported in bits per byte.

A spec with ``grow_from`` starts from the final fp32 checkpoint of an earlier spec, deepened
by :func:`grow_depth` (each layer followed by a copy whose output projections are zero, so the
grown model computes exactly the same function at step 0, as in LLaMA Pro's block expansion),
then trains on. A spec with ``publish=False`` is an intermediate: it stays in ``ckpt/``.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from polyspec_theory._input import PolyspecInputError

from ..files import atomic_write_bytes, atomic_write_text
from .data import corpus_digest, load_split
from .model import GPT, GPTConfig

__all__ = ["TrainSpec", "DEFAULT_SPECS", "train_model", "eval_bpb", "train_zoo",
           "write_training_record", "grow_depth", "save_checkpoint", "load_checkpoint"]


def save_checkpoint(state: dict, path) -> None:
    """Write a training checkpoint (tensors, numbers, lists, dicts) atomically: a run killed
    while saving keeps the previous checkpoint whole."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path) -> dict:
    """A checkpoint written by :func:`save_checkpoint`, loaded with ``weights_only=True``:
    only tensors and plain containers are unpickled, so a planted file cannot run code; one
    that needs more, or is damaged, or lacks ``model``/``opt``/``step``/``history``, is
    refused with a :class:`PolyspecInputError` naming the file."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError (refused global), damaged zip, EOF, ...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PolyspecInputError(
            "checkpoint", f"{path}: refused (not a plain tensor checkpoint, loaded with "
            f"weights_only=True: {first[:160]})") from None
    ok = (isinstance(state, dict) and isinstance(state.get("model"), dict)
          and all(isinstance(v, torch.Tensor) for v in state["model"].values())
          and isinstance(state.get("opt"), dict) and isinstance(state.get("step"), int)
          and isinstance(state.get("history"), list))
    if not ok:
        raise PolyspecInputError("checkpoint", f"{path}: not a training checkpoint (a dict "
                                 "with model tensors, opt, step and history)")
    return state


@dataclass(frozen=True)
class TrainSpec:
    """One neural zoo model and its training schedule."""

    name: str
    config: GPTConfig
    steps: int
    lr: float
    batch_size: int = 16
    seq_len: int = 256
    warmup: int = 50
    weight_decay: float = 0.1
    grow_from: str | None = None
    publish: bool = True


DEFAULT_SPECS = (
    TrainSpec("small", GPTConfig(n_layer=2, n_head=4, d_model=128), steps=450, lr=3e-3,
              warmup=30),
    TrainSpec("mid", GPTConfig(n_layer=4, n_head=4, d_model=256), steps=450, lr=3e-3,
              warmup=30),
    TrainSpec("target_base", GPTConfig(n_layer=6, n_head=4, d_model=256), steps=900, lr=3e-3,
              warmup=30, publish=False),
    TrainSpec("target", GPTConfig(n_layer=12, n_head=4, d_model=256), steps=600, lr=1e-3,
              warmup=30, grow_from="target_base"),
)


def grow_depth(state: dict, n_layer_old: int, n_layer_new: int) -> dict:
    """State dict of a model ``n_layer_new / n_layer_old`` times deeper that computes the same
    function: layer ``i`` becomes layers ``f*i .. f*i+f-1``, the first a copy of ``i`` and the
    others copies with zero attention/MLP output weights (identity residual blocks)."""
    if n_layer_old < 1 or n_layer_new % n_layer_old:
        raise ValueError(f"n_layer_new ({n_layer_new}) must be a multiple of n_layer_old "
                         f"({n_layer_old})")
    f = n_layer_new // n_layer_old
    new = {k: v.clone() for k, v in state.items() if not k.startswith("blocks.")}
    for k, v in state.items():
        if not k.startswith("blocks."):
            continue
        _, i, rest = k.split(".", 2)
        for j in range(f):
            w = v.clone()
            if j and rest in ("proj.weight", "out.weight"):
                w.zero_()
            new[f"blocks.{f * int(i) + j}.{rest}"] = w
    return new


def _lr(spec: TrainSpec, step: int, time_frac: float = 0.0) -> float:
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    frac = max(time_frac, (step - spec.warmup) / max(1, spec.steps - spec.warmup))
    return spec.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def _batch(data: np.ndarray, spec: TrainSpec, seed: int, index: int, step: int):
    rng = np.random.default_rng([seed, index, step])
    starts = rng.integers(0, len(data) - spec.seq_len - 1, size=spec.batch_size)
    idx = starts[:, None] + np.arange(spec.seq_len + 1)[None, :]
    x = torch.from_numpy(data[idx].astype(np.int64))
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def eval_bpb(model: GPT, data: np.ndarray, n_windows: int = 64, seq_len: int = 256) -> float:
    """Mean next-byte cross-entropy in bits/byte over ``n_windows`` evenly spaced windows."""
    model.eval()
    n_windows = min(n_windows, (len(data) - 1) // seq_len)
    starts = np.linspace(0, len(data) - seq_len - 1, n_windows).astype(np.int64)
    total, count = 0.0, 0
    for chunk in np.array_split(starts, max(1, n_windows // 16)):
        idx = chunk[:, None] + np.arange(seq_len + 1)[None, :]
        x = torch.from_numpy(data[idx].astype(np.int64)).to(next(model.parameters()).device)
        logits = model(x[:, :-1]).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                               reduction="sum")
        total += float(loss)
        count += x[:, 1:].numel()
    model.train()
    return total / count / math.log(2)


def _decay_groups(model: GPT, wd: float):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "pos" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "pos" not in n)]
    return [{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}]


def train_model(spec: TrainSpec, index: int, seed: int, out: Path, *, resume: bool = False,
                ckpt_every: int = 100, log=print, device="cpu", amp: bool = False,
                max_seconds: float | None = None) -> dict:
    """Train one model, write ``<out>/<name>.safetensors``; return its record. On CUDA,
    ``amp`` trains under bf16 autocast; ``max_seconds`` caps the time (GPU script): the
    cosine schedule then follows max(step fraction, time fraction) and the number of steps
    reached is recorded."""
    from .weights import save_model

    out = Path(out)
    ckdir = out / "ckpt"
    ckdir.mkdir(parents=True, exist_ok=True)
    train = load_split("train")
    val = load_split("val")
    torch.manual_seed(seed * 1000 + index)
    model = GPT(spec.config).to(device)
    opt = torch.optim.AdamW(_decay_groups(model, spec.weight_decay), lr=spec.lr,
                            betas=(0.9, 0.95))
    step0, history = 0, []
    ck = ckdir / f"{spec.name}.pt"
    if resume and ck.exists():
        state = load_checkpoint(ck)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step0, history = state["step"], state["history"]
        log(f"[{spec.name}] resumed at step {step0}")
    elif spec.grow_from is not None:
        base_ck = ckdir / f"{spec.grow_from}.pt"
        if not base_ck.exists():
            raise FileNotFoundError(f"{spec.name} grows from {spec.grow_from}: train it first "
                                    f"({base_ck} is missing)")
        base = load_checkpoint(base_ck)["model"]
        n_old = 1 + max(int(k.split(".")[1]) for k in base if k.startswith("blocks."))
        model.load_state_dict(grow_depth(base, n_old, spec.config.n_layer))
        log(f"[{spec.name}] grown from {spec.grow_from} ({n_old} -> {spec.config.n_layer} "
            "layers)")
    t0 = time.perf_counter()
    model.train()
    steps_done = spec.steps
    for step in range(step0, spec.steps):
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            steps_done = step
            log(f"[{spec.name}] time budget reached at step {step}")
            break
        tf = 0.0 if max_seconds is None else (time.perf_counter() - t0) / max_seconds
        for g in opt.param_groups:
            g["lr"] = _lr(spec, step, tf)
        x, y = _batch(train, spec, seed, index, step)
        x, y = x.to(device), y.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 50 == 0:
            bpb = float(loss.detach()) / math.log(2)
            history.append([step + 1, round(bpb, 4)])
            log(f"[{spec.name}] step {step + 1}/{spec.steps} train {bpb:.3f} bits/byte "
                f"({time.perf_counter() - t0:.0f}s)")
        if (step + 1) % ckpt_every == 0 or step + 1 == spec.steps:
            save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                             "step": step + 1, "history": history}, ck)
    val_bpb = eval_bpb(model, val)
    model = model.cpu()
    record = {
        "name": spec.name, "config": spec.config.to_dict(), "params": model.num_params(),
        "steps": steps_done, "scheduled_steps": spec.steps, "device": str(device),
        "lr": spec.lr, "batch_size": spec.batch_size,
        "seq_len": spec.seq_len, "warmup": spec.warmup, "weight_decay": spec.weight_decay,
        "seed": seed, "val_bits_per_byte": round(val_bpb, 4),
        **({"grown_from": spec.grow_from} if spec.grow_from else {}),
        "train_curve_bits_per_byte": history,
        "train_seconds_this_run": round(time.perf_counter() - t0, 1),
    }
    if spec.publish:
        save_model(model, out / f"{spec.name}.safetensors", record)
    log(f"[{spec.name}] done: val {val_bpb:.4f} bits/byte, {model.num_params()} params")
    return record


def train_zoo(seed: int, out, *, specs=DEFAULT_SPECS, resume: bool = False, log=print,
              threads: int = 1, device="cpu", amp: bool = False,
              max_seconds: dict | None = None) -> list[dict]:
    """Train every model of ``specs`` in order and write ``<out>/zoo.json`` (manifest; records
    of models already there and not retrained are kept). A model's seed offset is its index
    in ``DEFAULT_SPECS`` (by name), so training a subset gives the same weights."""
    torch.set_num_threads(threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in DEFAULT_SPECS]
    mpath = out / "zoo.json"
    old_manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    old = old_manifest.get("models", []) + old_manifest.get("intermediate", [])
    publish = {sp.name: sp.publish for sp in (*DEFAULT_SPECS, *specs)}
    records = []
    for spec in specs:
        index = names.index(spec.name) if spec.name in names else len(names)
        rec = train_model(spec, index, seed, out, resume=resume, log=log, device=device,
                          amp=amp, max_seconds=(max_seconds or {}).get(spec.name))
        records.append(rec)
        done = {r["name"] for r in records}
        kept = [r for r in old if r["name"] not in done]
        order = {n: i for i, n in enumerate(names)}
        allrec = sorted(kept + records, key=lambda r: order.get(r["name"], len(names)))
        manifest = {"corpus_digest": corpus_digest(), "seed": seed, "threads": threads,
                    "torch": torch.__version__,
                    "models": [r for r in allrec if publish.get(r["name"], True)],
                    "intermediate": [r for r in allrec if not publish.get(r["name"], True)]}
        atomic_write_text(mpath, json.dumps(manifest, indent=2) + "\n")
    return records


def write_training_record(out, command: str, notes: str = "") -> str:
    """Write ``<out>/TRAINING.md`` from ``<out>/zoo.json``; return its text."""
    out = Path(out)
    man = json.loads((out / "zoo.json").read_text())
    lines = [
        "# How the committed zoo was trained", "",
        f"Command: `{command}`", "",
        f"Corpus: CPython {_py()} standard library `.py` sources (see `validation/zoo/data.py`"
        f" for the exclusions and the deterministic split), digest `{man['corpus_digest']}`.",
        f"Seed {man['seed']}, {man['threads']} torch thread(s), torch {man['torch']}; "
        "weights stored as fp16 safetensors, upcast to fp32 at load.", "",
        "| model | layers | heads | d_model | params | steps | batch × seq | peak lr | "
        "val bits/byte |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    inter = man.get("intermediate", [])
    for r in man["models"] + inter:
        c = r["config"]
        name = r["name"] + (" (intermediate, not shipped)" if r in inter else "")
        name += f" (grown from {r['grown_from']})" if r.get("grown_from") else ""
        lines.append(f"| {name} | {c['n_layer']} | {c['n_head']} | {c['d_model']} | "
                     f"{r['params']:,} | {r['steps']} | {r['batch_size']} × {r['seq_len']} | "
                     f"{r['lr']:g} | {r['val_bits_per_byte']:.4f} |")
    lines += ["", "Training loss (bits/byte, one batch) every 50 steps:", ""]
    for r in man["models"] + inter:
        curve = ", ".join(f"{s}: {v:.3f}" for s, v in r["train_curve_bits_per_byte"])
        lines.append(f"- {r['name']}: {curve}")
    if notes:
        lines += ["", notes]
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "TRAINING.md", text)
    return text


def _py() -> str:
    import sys

    return sys.version.split()[0]
