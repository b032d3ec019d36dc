"""Capture traces of the batched (lockstep) decoder: one trace per cascade configuration and
batch size ``b`` (schema: :mod:`validation.traces.schema`, batched records).

Protocol, as for the single-stream captures (:mod:`validation.capture.single`): fixed thread count;
warm-up (one decode, not recorded); batched cost samples ``T(b, m)``, ``m = 1..16``, at a few
context lengths at the start and again at the end (``bcost``); the prompts (the same
windows of the validation split as a single-stream capture with the same seed and count) are
decoded ``b`` at a time — decode ``d`` holds prompts ``d·b .. d·b + b − 1`` — and for each
decode the cascade run and the batched autoregressive run of the target on the same prompts
are interleaved (cascade first on even decodes, AR first on odd ones). Sampling seeds are per
decode, so ``resume`` reproduces the remaining decodes. Records are written after each run
(never inside the timed loop).

:func:`capture_batch` runs one batch size, :func:`capture_batches` a sweep (one trace per
size, named ``<name>_b<b>``); :func:`record_decodes` is the loop itself on loaded levels (the
tests run it on levels with a fake clock).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

import validation.capture.setup as setup
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.capture.batch_models import batch_level
from validation.capture.machine import machine_state
from validation.capture.setup import COST_M, CaptureSpec
from validation.schemes.batch import (
    BATCH_POLICY,
    POLICY,
    BatchCascadeDecoder,
    batch_autoregressive,
    forwards_record,
)
from validation.schemes.chain import wall_clock

__all__ = ["capture_batch", "capture_batches", "record_decodes", "batch_cost_records",
           "batch_header", "batch_size", "CostCells", "MAX_CAPTURE_BATCH", "FINGERPRINT"]

MAX_CAPTURE_BATCH = 256
FINGERPRINT = ("cascade", "temperature", "top_k", "seed", "prompts", "dtype", "device",
               "threads", "cost_curve", "batch")


class CostCells(NamedTuple):
    """The cells of a cost curve: ``contexts`` (cached tokens), ``repeats`` timed forwards
    per cell, positions ``ms`` scored."""

    contexts: tuple
    repeats: int
    ms: tuple = COST_M


def batch_cost_records(level, batch: int, filler, phase: str, cells: CostCells, *, clock=None,
                       skip=frozenset()) -> list[dict]:
    """``T(b, m)`` samples: for each context ``c`` and ``m`` of ``cells``, ``repeats`` timed
    forwards of ``batch`` slots that each hold ``c`` cached tokens and score ``m`` new
    positions (the caches rolled back to ``c`` between repeats); cells ``(c, m)`` in
    ``skip`` (recorded by an interrupted attempt) are not measured."""
    lv = batch_level(level)
    b = as_int(batch, "batch", low=1, high=MAX_CAPTURE_BATCH)
    repeats = as_int(cells.repeats, "cost_repeats", low=1, high=1000)
    contexts, ms = cells.contexts, cells.ms
    now = clock or wall_clock(lv.device)
    out = []
    with torch.inference_mode():
        for c in contexts:
            c = as_int(c, "cost_contexts", low=0)
            todo = [m for m in ms if (c, int(m)) not in skip]
            if not todo:
                continue
            need = c + max(ms)
            if len(filler) < max(need, 1):
                raise PolyspecInputError("filler", f"needs {need} tokens, got {len(filler)}")
            seqs = [list(filler[: max(need, 1)]) for _ in range(b)]
            lv.reset(b, max(ms) + 1)
            if c > 0:
                lv.logits(seqs, np.full(b, c, dtype=np.int64))
            for m in todo:
                times = []
                for _ in range(repeats):
                    for j in range(b):
                        lv.rollback(j, c)
                    t0 = now()
                    lv.logits(seqs, np.full(b, c + m, dtype=np.int64))
                    times.append(now() - t0)
                out.append({"type": "bcost", "model": lv.name, "batch": b, "phase": phase,
                            "ctx": int(c), "m": int(m), "times_s": [round(t, 7) for t in times],
                            "median_s": round(float(np.median(times)), 7)})
    return out


def batch_size(spec) -> int:
    """The one batch size of a batched capture's spec."""
    bs = spec.batches
    if bs is None or len(bs) != 1:
        raise PolyspecInputError("batches", f"one batch size per trace, got {bs!r}")
    return as_int(bs[0], "batch", low=1, high=MAX_CAPTURE_BATCH)


def batch_header(spec: CaptureSpec, levels, dev=None, *, name, prompts, contexts, argv=None,
                 prompt_info=None) -> dict:
    """The header of a batched trace of ``spec`` (its one batch size; schema:
    :mod:`validation.traces.schema`); ``dev`` and ``load_check`` as
    :func:`validation.capture.setup.capture_header`'s."""
    b = batch_size(spec)
    info = {"source": "given", "n_prompts": len(prompts),
            "prompt_len": max(len(p) for p in prompts)}
    info.update(prompt_info or {})
    info["sha256"] = hashlib.sha256(setup.json_bytes(prompts)).hexdigest()[:16]
    header = setup.capture_header(spec, levels, dev, name=name,
                                  tool="polyspec capture --batch", policy=POLICY, argv=argv)
    header.update({
        "prompts": info,
        "batch": {"size": b, **BATCH_POLICY, "decodes": len(prompts) // b,
                  "prompts_per_decode": b},
        "cost_curve": {"m": list(COST_M), "contexts": list(contexts),
                       "repeats": spec.cost_repeats, "batch": b},
        "ar_models": "target", "time_base": "seconds", "prefill": "excluded",
    })
    return header


def record_decodes(spec: CaptureSpec, levels, prompts, writer, *, decodes=None, clock=None,
                   progress=False, name="capture") -> None:
    """Decode ``prompts`` ``b`` at a time (``spec``'s one batch size; decode ``d`` = prompts
    ``d·b ..``) with the cascade and with the batched autoregressive target, interleaved, and
    write every record of each decode to ``writer`` after its runs."""
    levels = [batch_level(lv) for lv in levels]
    b = batch_size(spec)
    if len(prompts) % b:
        raise PolyspecInputError("n_prompts", f"{len(prompts)} prompts do not split into "
                                 f"decodes of batch {b}")
    n_dec = len(prompts) // b
    decodes = range(n_dec) if decodes is None else decodes
    dec = BatchCascadeDecoder(levels, spec.thresholds, temperature=spec.temperature,
                              top_k=spec.top_k, seed=spec.seed, clock=clock)
    bar = setup.progress_bar(decodes, progress, name)
    tally = [0.0, 0, 0.0, 0]  # AR seconds, AR tokens, cascade seconds, cascade tokens
    for d in bar:
        _decode(spec, dec, levels[0], prompts[d * b:(d + 1) * b], (d, clock), writer, tally)
        if hasattr(bar, "set_postfix") and tally[2] > 0 and tally[1] > 0:
            bar.set_postfix(speedup=f"{(tally[0] / tally[1]) / (tally[2] / tally[3]):.2f}")


def _decode(spec, dec, tgt, bp, at, writer, tally) -> None:
    """Decode ``at[0]`` (prompts ``bp``): the cascade and the batched AR target interleaved,
    then its records (``at[1]``: the clock)."""
    d, clock = at
    b, max_new = len(bp), spec.max_new_tokens
    s = int(spec.seed) * 1_000_003 + d

    def run_cascade():
        dec.sampler.reseed(s)
        return dec.generate(bp, max_new, decode_index=d)

    def run_ar():
        return batch_autoregressive(tgt, bp, max_new, temperature=spec.temperature,
                                    top_k=spec.top_k, seed=s, clock=clock)

    cres, ares = setup.alternate(d, run_cascade, run_ar)
    for r in cres.seq_rounds:
        writer.write(r.to_record())
    for r in cres.batch_rounds:
        writer.write(r.to_record())
    writer.write(forwards_record(cres.forwards, d, "cascade", b))
    writer.write(forwards_record(ares.forwards, d, "ar", b))
    ids = [d * b + j for j in range(b)]
    writer.write({"type": "bar", "decode": d, "prompts": ids, "model": tgt.name,
                  "batch": b, "n_steps": len(ares.step_s), "wall_s": round(ares.wall_s, 7),
                  "forward_s": round(ares.forward_s, 7),
                  "prefill_s": round(ares.prefill_s, 7), "ctx0": [len(p) for p in bp],
                  "step_s": [round(x, 7) for x in ares.step_s]})
    match = None
    if dec.greedy:
        match = [cres.tokens[j][:min(cres.n_generated[j], max_new)]
                 == ares.tokens[j][:min(cres.n_generated[j], max_new)] for j in range(b)]
    writer.write({"type": "bsummary", "decode": d, "prompts": ids, "batch": b,
                  "n_prompt_tokens": [len(p) for p in bp],
                  "n_generated": cres.n_generated, "wall_s": round(cres.wall_s, 7),
                  "prefill_s": round(cres.prefill_s, 7),
                  "forward_s": [round(x, 7) for x in cres.forward_s],
                  "forward_count": cres.forward_count,
                  "overhead_s": round(cres.overhead_s, 7), "top_rounds": cres.top_rounds,
                  "stop": cres.stop,
                  "n_rounds": [sum(1 for r in cres.batch_rounds if r.level == i)
                               for i in range(1, len(spec.thresholds) + 1)],
                  "matches_target_ar": match})
    tally[0] += ares.wall_s
    tally[1] += b * len(ares.step_s)
    tally[2] += cres.wall_s
    tally[3] += sum(cres.n_generated)


def _load(models, device, dtype, zoo_dir):
    dev, loaded = setup.load_models(models, device, dtype, zoo_dir)
    return dev, loaded, [batch_level(lv) for lv in loaded]


class _Run(NamedTuple):
    """Where a capture writes and how (the keyword arguments of :func:`capture_batch`)."""

    out: object
    name: str | None = None
    resume: bool = False
    force: bool = False
    progress: bool = True
    argv: list | None = None


def capture_batch(spec: CaptureSpec, *, out, name=None, resume=False, force=False,
                  progress=True, argv=None) -> Path:
    """Run the batched capture ``spec`` describes (its one batch size ``b`` of ``batches``:
    ``b`` sequences per decode, ``n_prompts / b`` decodes) and return the trace path
    ``<out>/<name>.jsonl`` (default name: the single-stream name + ``_b<b>``)."""
    return _capture_one(spec, _Run(out, name, resume, force, progress, argv))


def _capture_one(spec: CaptureSpec, run: _Run, loaded=None) -> Path:
    """:func:`capture_batch` with the models already loaded (``(device, models, levels)``,
    :func:`capture_batches`)."""
    out, name, resume, force, progress, argv = run
    spec = spec.checked(batched=True)
    b = batch_size(spec)
    if spec.n_prompts % b:
        raise PolyspecInputError("n_prompts", f"{spec.n_prompts} prompts do not split into "
                                 f"decodes of batch {b}: use a multiple of {b}")
    torch.set_num_threads(spec.threads)
    path = setup.trace_path(name if name is not None else f"{spec.name()}_b{b}", out,
                            resume=resume, force=force)
    dev, loaded, levels = loaded or _load(spec.models, spec.device, spec.dtype, spec.zoo_dir)
    if setup.tokenizer_for(loaded, spec.models) is not None:
        raise PolyspecInputError("models", "batched captures run byte-level zoo models")
    prompts, offsets = setup.make_prompts(spec.n_prompts, spec.prompt_len, spec.seed, None)
    maxlen = min((lv.max_len for lv in levels if lv.max_len is not None), default=None)
    contexts = [int(c) for c in spec.cost_contexts
                if maxlen is None or c + max(COST_M) <= maxlen]
    from validation.zoo.data import corpus_digest

    header = batch_header(
        spec, levels, dev, name=path.stem, prompts=prompts, contexts=contexts, argv=argv,
        prompt_info={"source": "stdlib validation split", "prompt_len": spec.prompt_len,
                     "max_new_tokens": spec.max_new_tokens, "offsets": offsets,
                     "corpus_digest": corpus_digest()})
    writer, start, done_cells = setup.open_trace(path, header, resume=resume,
                                                 fingerprint=FINGERPRINT, batch=b)
    if writer is None:
        return path
    with writer:
        _record(spec, levels, prompts, writer, (start, done_cells, contexts, progress,
                                                path.stem))
    return path


def _record(spec, levels, prompts, writer, plan) -> None:
    """Warm-up, start cost curves, the decodes from ``plan[0]`` on, end cost curves, end
    (``plan``: first decode, cells already recorded, contexts, progress, name)."""
    start, done_cells, contexts, progress, name = plan
    b, max_new = batch_size(spec), spec.max_new_tokens
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, spec.prompt_len))
    t_start = time.perf_counter()
    if spec.warmup:
        dec = BatchCascadeDecoder(levels, spec.thresholds, temperature=spec.temperature,
                                  top_k=spec.top_k, seed=spec.seed)
        for _ in range(spec.warmup):
            dec.generate(prompts[:b], min(32, max_new))
            batch_autoregressive(levels[0], prompts[:b], min(16, max_new),
                                 temperature=spec.temperature, top_k=spec.top_k,
                                 seed=spec.seed)

    def cost_curves(phase):
        for lv in levels:
            skip = {(c, m) for (nm, ph, c, m) in done_cells
                    if nm == batch_level(lv).name and ph == phase}
            for rec in batch_cost_records(lv, b, filler, phase,
                                          CostCells(contexts, spec.cost_repeats), skip=skip):
                writer.write(rec)

    cost_curves("start")
    record_decodes(spec, levels, prompts, writer, decodes=range(start, spec.n_prompts // b),
                   progress=progress, name=name)
    cost_curves("end")
    writer.write({"type": "end", "n_prompts": spec.n_prompts,
                  "n_decodes": spec.n_prompts // b,
                  "wall_s": round(time.perf_counter() - t_start, 3),
                  "machine": machine_state()})


def capture_batches(spec: CaptureSpec, *, out, name=None, resume=False, force=False,
                    progress=True, argv=None) -> list[Path]:
    """:func:`capture_batch` at every batch size of ``spec.batches`` (models loaded once); one
    trace per size, ``<name>_b<b>.jsonl``."""
    batches = spec.batches
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise PolyspecInputError("batches", f"must be a list of batch sizes, got {batches!r}")
    bs = [as_int(x, f"batches[{i}]", low=1, high=MAX_CAPTURE_BATCH)
          for i, x in enumerate(batches)]
    if not bs:
        raise PolyspecInputError("batches", "must list at least one batch size")
    if len(set(bs)) != len(bs):
        raise PolyspecInputError("batches", f"lists a batch size twice: {bs}")
    checked = spec.checked(batched=True)
    bad = [b for b in bs if checked.n_prompts % b]
    if bad:
        raise PolyspecInputError("n_prompts", f"{checked.n_prompts} prompts do not split into "
                                 f"decodes of batch {bad[0]}: use a multiple of every batch "
                                 "size")
    torch.set_num_threads(checked.threads)
    loaded = _load(checked.models, checked.device, checked.dtype, checked.zoo_dir)
    base = name or checked.name()
    if len(bs) == 1 and base.endswith(f"_b{bs[0]}"):  # the name of the one trace, given
        base = base[:-len(f"_b{bs[0]}")]
    return [_capture_one(spec._replace(batches=(b,)),
                         _Run(out, f"{base}_b{b}", resume, force, progress, argv), loaded)
            for b in bs]
