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

A spec with ``teacher`` is a *distilled drafter* (:mod:`.distill`): on the same seeded
windows it minimises the token-level KL (``kl``: forward, reverse or a mix) between the
teacher's next-byte laws — computed on the fly from the teacher's published weights, exactly
what the decoder runs — and its own. ``init_from`` starts it from a published model's weights
(``init_layers`` picks which of its layers, DistilBERT-style). Its record carries the
acceptance of the pair (teacher, student) before and after distillation: greedy agreement
and 1 - TV on held-out text and on the teacher's greedy continuations of held-out prompts.

Checkpoints hold tensors, numbers and lists only (:func:`save_checkpoint`, atomic) and are read
with ``torch.load(..., weights_only=True)`` (:func:`load_checkpoint`: no pickled code runs).
"""

from __future__ import annotations

import errno
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from polyspec_theory.errors import PolyspecInputError
from validation.files import atomic_write_bytes, atomic_write_text
from validation.zoo.data import corpus_digest, load_split
from validation.zoo.model import GPT, GPTConfig

__all__ = ["TrainSpec", "DEFAULT_SPECS", "train_model", "eval_bpb", "train_zoo",
           "write_training_record", "grow_depth", "save_checkpoint", "load_checkpoint",
           "estimate_seconds", "spec_index"]


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
    # distillation (see the module docstring); teacher/init_from name published models
    teacher: str | None = None
    kl: str = "forward"
    init_from: str | None = None
    init_layers: tuple[int, ...] | None = None
    # acceptance evaluation of a distilled spec: held-out windows of 256 bytes, and prompts
    # of 64 held-out bytes continued greedily by the teacher for ``eval_new_tokens`` bytes
    eval_windows: int = 64
    eval_prompts: int = 32
    eval_new_tokens: int = 128
    # validation bits/byte: mean over this many evenly spaced windows of 256 bytes
    val_windows: int = 64

    @property
    def distilled(self) -> bool:
        return self.teacher is not None


DEFAULT_SPECS = (
    TrainSpec("small", GPTConfig(n_layer=2, n_head=4, d_model=128), steps=450, lr=3e-3,
              warmup=30),
    TrainSpec("mid", GPTConfig(n_layer=4, n_head=4, d_model=256), steps=450, lr=3e-3,
              warmup=30),
    TrainSpec("target_base", GPTConfig(n_layer=6, n_head=4, d_model=256), steps=900, lr=3e-3,
              warmup=30, publish=False),
    TrainSpec("target", GPTConfig(n_layer=12, n_head=4, d_model=256), steps=600, lr=1e-3,
              warmup=30, grow_from="target_base"),
    # the target's drafter: one layer of the target's width, started from the target's
    # embeddings, first layer and final norm, then distilled from the target (forward KL);
    # chosen with P1 (data/zoo/TRAINING.md, "Distilled drafters")
    TrainSpec("draft-t", GPTConfig(n_layer=1, n_head=4, d_model=256), steps=1500, lr=1e-3,
              warmup=30, teacher="target", kl="forward", init_from="target", init_layers=(0,),
              eval_prompts=64),
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


def spec_index(name: str) -> int:
    """A model's seed offset: its index in :data:`DEFAULT_SPECS` (len of it if absent), so
    training a subset, or one model in its own process, gives the same weights."""
    names = [s.name for s in DEFAULT_SPECS]
    return names.index(name) if name in names else len(names)


def _missing(path: Path, message: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, message, str(path))


def _published(out: Path, name: str, role: str, spec_name: str) -> Path:
    path = Path(out) / f"{name}.safetensors"
    if not path.exists():
        raise _missing(path, f"{spec_name}'s {role} {name} is not published in {out}: train "
                       "it first")
    return path


def _check_inputs(specs, out: Path) -> None:
    """Before any work: every teacher / initialisation / base a spec needs is published in
    ``out`` (or in ``out/ckpt`` for ``grow_from``), or made by an earlier spec of this run; a
    base checkpoint of an earlier run loads (:func:`load_checkpoint`: a planted or damaged one
    is refused before the run-time probe and the training)."""
    made: set[str] = set()
    for spec in specs:
        needs = [(spec.teacher, "teacher"), (spec.init_from, "initialisation")]
        for name, role in needs:
            if name is not None and name not in made:
                _published(out, name, role, spec.name)
        if spec.grow_from is not None and spec.grow_from not in made:
            ck = Path(out) / "ckpt" / f"{spec.grow_from}.pt"
            if not ck.exists():
                raise _missing(ck, f"{spec.name} grows from {spec.grow_from}: train it first")
            load_checkpoint(ck)
        made.add(spec.name)


def _init_state(spec: TrainSpec, out: Path) -> dict:
    """Student state from ``spec.init_from``'s published weights (``init_layers`` of its
    layers, in that order; embeddings, positions and final norm copied)."""
    from validation.zoo.weights import load_gpt

    src = load_gpt(_published(out, spec.init_from, "initialisation", spec.name))
    c, s = spec.config, src.cfg
    if (c.d_model, c.n_head, c.vocab_size) != (s.d_model, s.n_head, s.vocab_size) or \
            c.block_size > s.block_size:
        raise ValueError(f"{spec.name}: cannot initialise {c} from {spec.init_from} ({s})")
    layers = spec.init_layers if spec.init_layers is not None else tuple(range(c.n_layer))
    if len(layers) != c.n_layer or not all(0 <= i < s.n_layer for i in layers):
        raise ValueError(f"{spec.name}: init_layers {layers} must name {c.n_layer} layer(s) of "
                         f"{spec.init_from} (0..{s.n_layer - 1})")
    state = src.state_dict()
    new = {k: v.clone() for k, v in state.items() if not k.startswith("blocks.")}
    new["pos.weight"] = new["pos.weight"][: c.block_size].clone()
    for j, i in enumerate(layers):
        for k, v in state.items():
            if k.startswith(f"blocks.{i}."):
                new[f"blocks.{j}." + k.split(".", 2)[2]] = v.clone()
    return new


def _fresh_model(spec: TrainSpec, index: int, seed: int, out: Path, ckdir: Path, log,
                 device) -> GPT:
    """The model at step 0: seeded random init, then ``grow_from`` / ``init_from``."""
    torch.manual_seed(seed * 1000 + index)
    model = GPT(spec.config).to(device)
    if spec.grow_from is not None:
        base_ck = ckdir / f"{spec.grow_from}.pt"
        if not base_ck.exists():
            raise _missing(base_ck, f"{spec.name} grows from {spec.grow_from}: train it first")
        base = load_checkpoint(base_ck)["model"]
        n_old = 1 + max(int(k.split(".")[1]) for k in base if k.startswith("blocks."))
        model.load_state_dict(grow_depth(base, n_old, spec.config.n_layer))
        log(f"[{spec.name}] grown from {spec.grow_from} ({n_old} -> {spec.config.n_layer} "
            "layers)")
    elif spec.init_from is not None:
        model.load_state_dict(_init_state(spec, out))
        layers = "" if spec.init_layers is None else f" layers {list(spec.init_layers)}"
        log(f"[{spec.name}] initialised from {spec.init_from}{layers}")
    return model


def _load_teacher(spec: TrainSpec, out: Path, device) -> GPT:
    from validation.zoo.weights import load_gpt

    teacher = load_gpt(_published(out, spec.teacher, "teacher", spec.name), device=device)
    if teacher.cfg.vocab_size != spec.config.vocab_size:
        raise ValueError(f"{spec.name}: teacher {spec.teacher} has another vocabulary")
    if teacher.cfg.block_size < spec.seq_len:
        raise ValueError(f"{spec.name}: teacher {spec.teacher}'s context is shorter than "
                         f"seq_len {spec.seq_len}")
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


class _AcceptanceEval:
    """Acceptance of the pair (teacher, student) on held-out text and on the teacher's greedy
    continuations of held-out prompts; the teacher's laws are computed once."""

    PROMPT = 64

    def __init__(self, spec: TrainSpec, teacher: GPT, val: np.ndarray):
        from validation.zoo.distill import eval_windows, greedy_texts, next_byte_laws

        seq = min(256, teacher.cfg.block_size, spec.config.block_size)
        new = min(spec.eval_new_tokens, seq - self.PROMPT)
        self.sets = {
            "heldout": eval_windows(val, spec.eval_windows, seq),
            "teacher_greedy": greedy_texts(teacher, val, spec.eval_prompts, self.PROMPT, new),
        }
        self.laws = {k: next_byte_laws(teacher, w, self.PROMPT) for k, w in self.sets.items()}

    def __call__(self, student: GPT) -> dict:
        from validation.zoo.distill import pair_acceptance

        return {k: pair_acceptance(None, student, w, self.PROMPT,
                                   verifier_laws=self.laws[k]).to_dict()
                for k, w in self.sets.items()}


def _progress_bar(spec: TrainSpec, step0: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    import sys

    return tqdm(total=spec.steps, initial=step0, desc=spec.name, unit="step", file=sys.stderr,
                leave=True, dynamic_ncols=True)


class TrainRun(NamedTuple):
    """How a training run goes: ``resume`` from the checkpoints, ``log`` its lines,
    ``device`` (on CUDA ``amp`` trains under bf16 autocast), a progress bar (stderr),
    a checkpoint every ``ckpt_every`` steps; for a whole zoo, ``threads`` torch threads and
    the expected run time measured and logged first (``estimate``)."""

    resume: bool = False
    log: object = print
    device: str = "cpu"
    amp: bool = False
    progress: bool = False
    ckpt_every: int = 100
    threads: int = 1
    estimate: bool = True


def train_model(spec: TrainSpec, index: int, seed: int, out: Path, run: TrainRun | None = None,
                max_seconds: float | None = None) -> dict:
    """Train one model as ``run`` says, write ``<out>/<name>.safetensors``; return its
    record. ``max_seconds`` caps the time (GPU script): the cosine schedule then follows
    max(step fraction, time fraction) and the number of steps reached is recorded. A
    distilled spec (``teacher``) minimises the KL to the teacher's laws instead of the
    cross-entropy to the text (module docstring)."""
    from validation.zoo.weights import save_model

    tr = _Training(spec, index, seed, Path(out), run or TrainRun())
    tr.steps(max_seconds)
    record = tr.record()
    model = tr.model.cpu()
    if spec.publish:
        save_model(model, Path(out) / f"{spec.name}.safetensors", record)
    tr.run.log(f"[{spec.name}] done: val {record['val_bits_per_byte']:.4f} bits/byte, "
               f"{model.num_params()} params")
    return record


class _Training:
    """One model's training: its model, optimiser, teacher (a distilled spec), history."""

    def __init__(self, spec: TrainSpec, index: int, seed: int, out: Path, run: TrainRun):
        self.spec, self.index, self.seed, self.run = spec, index, seed, run
        log, device = run.log, run.device
        ckdir = out / "ckpt"
        ckdir.mkdir(parents=True, exist_ok=True)
        self.train, self.val = load_split("train"), load_split("val")
        self.teacher = _load_teacher(spec, out, device) if spec.distilled else None
        self.ck = ckdir / f"{spec.name}.pt"
        resuming = run.resume and self.ck.exists()
        self.model = _fresh_model(spec, index, seed, out, ckdir,
                                  log if not resuming else (lambda m: None), device)
        self.opt = torch.optim.AdamW(_decay_groups(self.model, spec.weight_decay), lr=spec.lr,
                                     betas=(0.9, 0.95))
        self.accept = None
        if self.teacher is not None:
            t_eval = time.perf_counter()
            self.accept_eval = _AcceptanceEval(spec, self.teacher, self.val)
            self.accept = {"before": self.accept_eval(self.model)}  # step 0 (also resuming)
            b = self.accept["before"]
            log(f"[{spec.name}] acceptance by {spec.teacher} before distillation: greedy "
                f"{b['teacher_greedy']['greedy']:.3f} / 1-TV {b['heldout']['one_minus_tv']:.3f}"
                f" ({time.perf_counter() - t_eval:.0f}s)")
        self.step0, self.history, self.kl_history = 0, [], []
        if resuming:
            state = load_checkpoint(self.ck)
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["opt"])
            self.step0, self.history = int(state["step"]), state["history"]
            self.kl_history = state.get("kl_history", [])
            log(f"[{spec.name}] resumed at step {self.step0}")
        self.steps_done = spec.steps
        self.t0 = time.perf_counter()

    def steps(self, max_seconds) -> None:
        """Train from the first step not done to the last (or the time budget)."""
        spec = self.spec
        self.model.train()
        bar = _progress_bar(spec, self.step0, self.run.progress)
        say = bar.write if bar is not None and self.run.log is print else self.run.log
        try:
            for step in range(self.step0, spec.steps):
                if max_seconds is not None and time.perf_counter() - self.t0 > max_seconds:
                    self.steps_done = step
                    say(f"[{spec.name}] time budget reached at step {step}")
                    break
                tf = 0.0 if max_seconds is None else (time.perf_counter() - self.t0) / max_seconds
                logits, y, loss = self._step(step, tf)
                if bar is not None:
                    bar.update(1)
                if (step + 1) % 50 == 0:
                    self._log_loss(step, logits, y, loss, (bar, say))
                if (step + 1) % self.run.ckpt_every == 0 or step + 1 == spec.steps:
                    save_checkpoint({"model": self.model.state_dict(),
                                     "opt": self.opt.state_dict(), "step": step + 1,
                                     "history": self.history, "kl_history": self.kl_history},
                                    self.ck)
        finally:
            if bar is not None:
                bar.close()

    def _step(self, step: int, tf: float):
        """One optimiser step (learning rate at step / time fraction ``tf``)."""
        from validation.zoo.distill import distill_loss

        spec, device = self.spec, self.run.device
        for g in self.opt.param_groups:
            g["lr"] = _lr(spec, step, tf)
        x, y = _batch(self.train, spec, self.seed, self.index, step)
        x, y = x.to(device), y.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.run.amp):
            if self.teacher is not None:
                with torch.no_grad():
                    t_logits = self.teacher(x)
            logits = self.model(x)
        if self.teacher is not None:
            loss = distill_loss(logits, t_logits, spec.kl)
        else:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                   y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return logits, y, loss

    def _log_loss(self, step, logits, y, loss, out) -> None:
        """The training curve's point at ``step`` (bits/byte; KL bits when distilling)."""
        bar, say = out
        spec = self.spec
        if self.teacher is not None:
            with torch.no_grad():
                ce = float(F.cross_entropy(logits.detach().float().reshape(
                    -1, logits.shape[-1]), y.reshape(-1)))
            kl_bits = float(loss.detach()) / math.log(2)
            self.kl_history.append([step + 1, round(kl_bits, 4)])
        else:
            ce = float(loss.detach())
        bpb = ce / math.log(2)
        self.history.append([step + 1, round(bpb, 4)])
        msg = f"[{spec.name}] step {step + 1}/{spec.steps} train {bpb:.3f} bits/byte"
        if self.teacher is not None:
            msg += f", KL {kl_bits:.4f} bits"
            if bar is not None:
                bar.set_postfix(kl_bits=f"{kl_bits:.3f}", refresh=False)
        elif bar is not None:
            bar.set_postfix(bpb=f"{bpb:.3f}", refresh=False)
        say(msg + f" ({time.perf_counter() - self.t0:.0f}s)")

    def record(self) -> dict:
        """The model's record in the manifest (and its weights' metadata)."""
        spec = self.spec
        val_bpb = eval_bpb(self.model, self.val, n_windows=spec.val_windows,
                           seq_len=min(256, spec.config.block_size))
        record = {
            "name": spec.name, "config": spec.config.to_dict(),
            "params": self.model.num_params(), "steps": self.steps_done,
            "scheduled_steps": spec.steps, "device": str(self.run.device),
            "lr": spec.lr, "batch_size": spec.batch_size,
            "seq_len": spec.seq_len, "warmup": spec.warmup, "weight_decay": spec.weight_decay,
            "seed": self.seed, "val_bits_per_byte": round(val_bpb, 4),
            "val_windows": spec.val_windows,
            **({"grown_from": spec.grow_from} if spec.grow_from else {}),
            "train_curve_bits_per_byte": self.history,
        }
        if self.teacher is not None:
            self.accept["after"] = self.accept_eval(self.model)
            a = self.accept["after"]
            self.run.log(f"[{spec.name}] acceptance by {spec.teacher} after distillation: "
                         f"greedy {a['teacher_greedy']['greedy']:.3f} / 1-TV "
                         f"{a['heldout']['one_minus_tv']:.3f}")
            record.update({
                "teacher": spec.teacher, "kl": spec.kl,
                **({"init_from": spec.init_from} if spec.init_from else {}),
                **({"init_layers": list(spec.init_layers)} if spec.init_layers else {}),
                "train_curve_kl_bits": self.kl_history,
                "acceptance": {"measure": "teacher-forced; greedy = P(argmax teacher = argmax "
                               "student), one_minus_tv = E[sum min(p, q)]; heldout: "
                               f"{spec.eval_windows} windows of the validation split, contexts "
                               ">= 64 bytes; teacher_greedy: the teacher's greedy continuations "
                               f"({spec.eval_new_tokens} bytes) of {spec.eval_prompts} "
                               "validation prompts of 64 bytes", **self.accept},
            })
        record["train_seconds_this_run"] = round(time.perf_counter() - self.t0, 1)
        return record


# ------------------------------------------------------------------------ run-time estimate
def _spec_by_name(name: str, specs) -> TrainSpec | None:
    for s in (*specs, *DEFAULT_SPECS):
        if s.name == name:
            return s
    return None


def _teacher_config(spec: TrainSpec, out: Path, specs) -> GPTConfig:
    path = Path(out) / f"{spec.teacher}.safetensors"
    if path.exists():
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return GPTConfig.from_dict(json.loads(f.metadata()["config"]))
    ts = _spec_by_name(spec.teacher, specs)
    if ts is None:
        raise FileNotFoundError(f"{spec.name}'s teacher {spec.teacher} is neither published in "
                                f"{out} nor trained by these specs")
    return ts.config


def _probe(spec: TrainSpec, teacher_cfg: GPTConfig | None, device) -> tuple[float, float,
                                                                              float]:
    """Measured seconds of one training step of ``spec`` (teacher forward included) and of
    one forward per token of the student and of the teacher (0 without one), on a throwaway
    model with random weights and bytes (the global RNG state is restored). One warm-up step
    on a tiny batch (one row of 16 bytes) runs every code path first; each measure is then
    one call at full size."""
    b = min(spec.batch_size, 4)
    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, size=(b, spec.seq_len)))
    x = x.to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = GPT(spec.config).to(device)
        t = GPT(teacher_cfg).to(device).eval() if teacher_cfg is not None else None
    opt = torch.optim.AdamW(m.parameters(), lr=1e-6)

    def step(xb):
        if t is not None:
            with torch.no_grad():
                tl = t(xb)
        lg = m(xb)
        loss = lg.float().logsumexp(-1).mean() if t is None else (lg - tl).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def fwd(model, xb):
        with torch.no_grad():
            model(xb)

    def timed(fn, *a):
        t0 = time.perf_counter()
        fn(*a)
        return time.perf_counter() - t0

    step(x[:1, :16])  # warm-up: every code path once, at negligible cost

    tokens = b * spec.seq_len
    scale = spec.batch_size / b
    return (timed(step, x) * scale, timed(fwd, m, x) / tokens,
            timed(fwd, t, x) / tokens if t is not None else 0.0)


# A cached greedy step of a batch costs about this many times a full-forward token (measured
# on the zoo's CPU: small matrix products run less efficiently).
_GEN_FACTOR = 4.0


def estimate_seconds(specs, out, *, resume: bool = False, device="cpu") -> dict[str, float]:
    """Expected seconds per spec (remaining steps when resuming), from a timed probe step of
    each spec on this machine plus its evaluations (validation bits/byte; for a distilled
    spec, the acceptance evaluation before and after)."""
    out = Path(out)
    est = {}
    for spec in specs:
        tcfg = _teacher_config(spec, out, specs) if spec.distilled else None
        t_step, t_tok, t_tok_teacher = _probe(spec, tcfg, device)
        done = 0
        ck = out / "ckpt" / f"{spec.name}.pt"
        if resume and ck.exists():
            done = int(load_checkpoint(ck)["step"])
        sec = max(0, spec.steps - done) * t_step + spec.val_windows * 256 * t_tok  # + eval_bpb
        if spec.distilled:
            seq = min(256, spec.config.block_size)
            held = spec.eval_windows * seq
            greedy = spec.eval_prompts * (64 + spec.eval_new_tokens)
            sec += (held + greedy) * t_tok_teacher  # teacher laws
            sec += spec.eval_prompts * spec.eval_new_tokens * _GEN_FACTOR * t_tok_teacher
            sec += 2 * (held + greedy) * t_tok  # student laws, before and after
        est[spec.name] = sec
    return est


def _fmt_seconds(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def train_zoo(seed: int, out, specs=DEFAULT_SPECS, run: TrainRun | None = None,
              max_seconds: dict | None = None) -> list[dict]:
    """Train every model of ``specs`` in order as ``run`` says (:class:`TrainRun`) and write
    ``<out>/zoo.json`` (manifest; records of models already there and not retrained are
    kept). A model's seed offset is its index in ``DEFAULT_SPECS`` (by name,
    :func:`spec_index`), so training a subset gives the same weights. ``max_seconds``: a time
    budget per model name."""
    run = run or TrainRun()
    resume, log, threads, device = run.resume, run.log, run.threads, run.device
    torch.set_num_threads(threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in DEFAULT_SPECS]
    mpath = out / "zoo.json"
    old_manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    old = old_manifest.get("models", []) + old_manifest.get("intermediate", [])
    publish = {sp.name: sp.publish for sp in (*DEFAULT_SPECS, *specs)}
    _check_inputs(specs, out)
    if run.estimate and max_seconds is None:
        est = estimate_seconds(specs, out, resume=resume, device=device)
        parts = ", ".join(f"{k} {_fmt_seconds(v)}" for k, v in est.items())
        log(f"expected run time: {_fmt_seconds(sum(est.values()))} on {threads} thread(s) "
            f"({parts}; measured from one probe step per model)")
    t_all = time.perf_counter()
    records = []
    for spec in specs:
        rec = train_model(spec, spec_index(spec.name), seed, out, run,
                          max_seconds=(max_seconds or {}).get(spec.name))
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
    log(f"trained {len(records)} model(s) in {_fmt_seconds(time.perf_counter() - t_all)}")
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
        name += f" (distilled from {r['teacher']})" if r.get("teacher") else ""
        lines.append(f"| {name} | {c['n_layer']} | {c['n_head']} | {c['d_model']} | "
                     f"{r['params']:,} | {r['steps']} | {r['batch_size']} × {r['seq_len']} | "
                     f"{r['lr']:g} | {r['val_bits_per_byte']:.4f} |")
    lines += ["", "Training loss (bits/byte, one batch) every 50 steps:", ""]
    for r in man["models"] + inter:
        curve = ", ".join(f"{s}: {v:.3f}" for s, v in r["train_curve_bits_per_byte"])
        lines.append(f"- {r['name']}: {curve}")
    distilled = [r for r in man["models"] + inter if r.get("teacher")]
    if distilled:
        lines += ["", "Distilled drafters: KL to the teacher (bits per position, one batch) every "
                  "50 steps:", ""]
        for r in distilled:
            curve = ", ".join(f"{s}: {v:.3f}" for s, v in r["train_curve_kl_bits"])
            init = r.get("init_from", "random")
            if r.get("init_layers"):
                init += f" layers {r['init_layers']}"
            lines.append(f"- {r['name']} ({r['kl']} KL to {r['teacher']}, initialised from "
                         f"{init}): {curve}")
        lines += ["", "Acceptance of each distilled drafter by its teacher, before (the "
                  "initialisation) → after distillation (teacher-forced; greedy: P(arg max "
                  "agree); 1 − TV: speculative sampling's acceptance at T = 1):", "",
                  "| pair | greedy, teacher's greedy text | 1 − TV, teacher's greedy text | "
                  "greedy, held-out text | 1 − TV, held-out text |",
                  "|---|---|---|---|---|"]
        for r in distilled:
            b, a = r["acceptance"]["before"], r["acceptance"]["after"]
            cells = [f"{b[w][k]:.3f} → {a[w][k]:.3f}" for w in ("teacher_greedy", "heldout")
                     for k in ("greedy", "one_minus_tv")]
            lines.append(f"| {r['teacher']} ← {r['name']} | " + " | ".join(cells) + " |")
        lines += ["", distilled[0]["acceptance"]["measure"] + "."]
    if notes:
        lines += ["", notes]
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "TRAINING.md", text)
    return text


def _py() -> str:
    import sys

    return sys.version.split()[0]
