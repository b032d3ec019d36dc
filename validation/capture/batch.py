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
           "batch_header", "MAX_CAPTURE_BATCH", "FINGERPRINT"]

MAX_CAPTURE_BATCH = 256
FINGERPRINT = ("cascade", "temperature", "top_k", "seed", "prompts", "dtype", "device",
               "threads", "cost_curve", "batch")


def batch_cost_records(level, batch: int, contexts, repeats: int, filler, phase: str,
                       ms=COST_M, clock=None, skip=frozenset()) -> list[dict]:
    """``T(b, m)`` samples: for each context ``c`` and ``m``, ``repeats`` timed forwards of
    ``batch`` slots that each hold ``c`` cached tokens and score ``m`` new positions (the
    caches rolled back to ``c`` between repeats); cells ``(c, m)`` in ``skip`` (recorded by an
    interrupted attempt) are not measured."""
    lv = batch_level(level)
    b = as_int(batch, "batch", low=1, high=MAX_CAPTURE_BATCH)
    repeats = as_int(repeats, "cost_repeats", low=1, high=1000)
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


def batch_header(levels, thresholds, batch: int, *, name, temperature, top_k, seed, prompts,
                 n_decodes: int, contexts, cost_repeats, ms=COST_M, dtype="float32",
                 device="cpu", device_name="", argv=None, prompt_info=None,
                 load_check=None) -> dict:
    """The header of a batched trace (schema: :mod:`validation.traces.schema`); ``load_check`` as
    :func:`validation.capture.setup.capture_header`'s."""
    info = {"source": "given", "n_prompts": len(prompts),
            "prompt_len": max(len(p) for p in prompts)}
    info.update(prompt_info or {})
    info["sha256"] = hashlib.sha256(setup.json_bytes(prompts)).hexdigest()[:16]
    header = setup.capture_header(levels, thresholds, name=name, tool="polyspec capture --batch",
                            policy=POLICY, dtype=dtype, device=device,
                            device_name=device_name, argv=argv, temperature=temperature,
                            top_k=top_k, seed=seed, load_check=load_check)
    header.update({
        "prompts": info,
        "batch": {"size": int(batch), **BATCH_POLICY, "decodes": int(n_decodes),
                  "prompts_per_decode": int(batch)},
        "cost_curve": {"m": list(ms), "contexts": list(contexts), "repeats": cost_repeats,
                       "batch": int(batch)},
        "ar_models": "target", "time_base": "seconds", "prefill": "excluded",
    })
    return header


def record_decodes(levels, thresholds, prompts, batch: int, max_new: int, writer, *,
                   temperature=0.0, top_k=0, seed=0, decodes=None, clock=None,
                   progress=False, name="capture") -> None:
    """Decode ``prompts`` ``batch`` at a time (decode ``d`` = prompts ``d·b ..``) with the
    cascade and with the batched autoregressive target, interleaved, and write every record
    of each decode to ``writer`` after its runs."""
    levels = [batch_level(lv) for lv in levels]
    b = as_int(batch, "batch", low=1, high=MAX_CAPTURE_BATCH)
    if len(prompts) % b:
        raise PolyspecInputError("n_prompts", f"{len(prompts)} prompts do not split into "
                                 f"decodes of batch {b}")
    n_dec = len(prompts) // b
    decodes = range(n_dec) if decodes is None else decodes
    dec = BatchCascadeDecoder(levels, thresholds, temperature=temperature, top_k=top_k,
                              seed=seed, clock=clock)
    greedy = dec.greedy
    tgt = levels[0]
    bar = setup.progress_bar(decodes, progress, name)
    ar_tt, cas_tt = [0.0, 0], [0.0, 0]
    for d in bar:
        bp = prompts[d * b:(d + 1) * b]
        s = int(seed) * 1_000_003 + d

        def run_cascade(bp=bp, s=s, d=d):
            dec.sampler.reseed(s)
            return dec.generate(bp, max_new, decode_index=d)

        def run_ar(bp=bp, s=s):
            return batch_autoregressive(tgt, bp, max_new, temperature=temperature,
                                        top_k=top_k, seed=s, clock=clock)

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
        if greedy:
            match = []
            for j in range(b):
                k = min(cres.n_generated[j], max_new)
                match.append(cres.tokens[j][:k] == ares.tokens[j][:k])
        else:
            match = None
        writer.write({"type": "bsummary", "decode": d, "prompts": ids, "batch": b,
                      "n_prompt_tokens": [len(p) for p in bp],
                      "n_generated": cres.n_generated, "wall_s": round(cres.wall_s, 7),
                      "prefill_s": round(cres.prefill_s, 7),
                      "forward_s": [round(x, 7) for x in cres.forward_s],
                      "forward_count": cres.forward_count,
                      "overhead_s": round(cres.overhead_s, 7), "top_rounds": cres.top_rounds,
                      "stop": cres.stop,
                      "n_rounds": [sum(1 for r in cres.batch_rounds if r.level == i)
                                   for i in range(1, len(levels))],
                      "matches_target_ar": match})
        ar_tt[0] += ares.wall_s
        ar_tt[1] += b * len(ares.step_s)
        cas_tt[0] += cres.wall_s
        cas_tt[1] += sum(cres.n_generated)
        if hasattr(bar, "set_postfix") and cas_tt[0] > 0 and ar_tt[1] > 0:
            bar.set_postfix(speedup=f"{(ar_tt[0] / ar_tt[1]) / (cas_tt[0] / cas_tt[1]):.2f}")


def _load(models, device, dtype, zoo_dir):
    dev, loaded = setup.load_models(models, device, dtype, zoo_dir)
    return dev, loaded, [batch_level(lv) for lv in loaded]


def capture_batch(spec: CaptureSpec, *, batch, out, name=None, resume=False, force=False,
                  progress=True, argv=None, loaded=None) -> Path:
    """Run the batched capture ``spec`` describes (``batch`` sequences per decode,
    ``n_prompts / batch`` decodes) and return the trace path ``<out>/<name>.jsonl`` (default
    name: the single-stream name + ``_b<batch>``); ``loaded``: the models already loaded
    (``(device, models, levels)``, :func:`capture_batches`)."""
    spec = spec.checked(batched=True)
    models, thresholds, max_new = spec.models, spec.thresholds, spec.max_new_tokens
    temperature, top_k, seed = spec.temperature, spec.top_k, spec.seed
    n_prompts, prompt_len = spec.n_prompts, spec.prompt_len
    b = as_int(batch, "batch", low=1, high=MAX_CAPTURE_BATCH)
    if n_prompts % b:
        raise PolyspecInputError("n_prompts", f"{n_prompts} prompts do not split into decodes "
                                 f"of batch {b}: use a multiple of {b}")
    torch.set_num_threads(spec.threads)
    path = setup.trace_path(name if name is not None else f"{spec.name()}_b{b}", out,
                      resume=resume, force=force)
    name = path.stem
    dev, loaded, levels = loaded or _load(models, spec.device, spec.dtype, spec.zoo_dir)
    if setup.tokenizer_for(loaded, models) is not None:
        raise PolyspecInputError("models", "batched captures run byte-level zoo models")
    prompts, offsets = setup.make_prompts(n_prompts, prompt_len, seed, None)
    maxlen = min((lv.max_len for lv in levels if lv.max_len is not None), default=None)
    contexts = [int(c) for c in spec.cost_contexts
                if maxlen is None or c + max(COST_M) <= maxlen]
    from validation.zoo.data import corpus_digest

    header = batch_header(
        levels, thresholds, b, name=name, temperature=temperature, top_k=top_k, seed=seed,
        prompts=prompts, n_decodes=n_prompts // b, contexts=contexts,
        cost_repeats=spec.cost_repeats, dtype=spec.dtype, device=dev.type,
        device_name=setup.device_name(dev), argv=argv,
        prompt_info={"source": "stdlib validation split", "prompt_len": prompt_len,
                     "max_new_tokens": max_new, "offsets": offsets,
                     "corpus_digest": corpus_digest()}, load_check=spec.load_check)
    writer, start, done_cells = setup.open_trace(path, header, resume=resume,
                                           fingerprint=FINGERPRINT, batch=b)
    if writer is None:
        return path
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, prompt_len))
    t_start = time.perf_counter()
    with writer:
        if spec.warmup:
            dec = BatchCascadeDecoder(levels, thresholds, temperature=temperature,
                                      top_k=top_k, seed=seed)
            for _ in range(spec.warmup):
                dec.generate(prompts[:b], min(32, max_new))
                batch_autoregressive(levels[0], prompts[:b], min(16, max_new),
                                     temperature=temperature, top_k=top_k, seed=seed)
        def cost_curves(phase):
            for lv in levels:
                skip = {(c, m) for (nm, ph, c, m) in done_cells
                        if nm == batch_level(lv).name and ph == phase}
                for rec in batch_cost_records(lv, b, contexts, spec.cost_repeats, filler,
                                              phase, skip=skip):
                    writer.write(rec)

        cost_curves("start")
        record_decodes(levels, thresholds, prompts, b, max_new, writer,
                       temperature=temperature, top_k=top_k, seed=seed,
                       decodes=range(start, n_prompts // b), progress=progress, name=name)
        cost_curves("end")
        writer.write({"type": "end", "n_prompts": n_prompts, "n_decodes": n_prompts // b,
                      "wall_s": round(time.perf_counter() - t_start, 3),
                      "machine": machine_state()})
    return path


def capture_batches(spec: CaptureSpec, *, batches, out, name=None, resume=False, force=False,
                    progress=True, argv=None) -> list[Path]:
    """:func:`capture_batch` at every batch size of ``batches`` (models loaded once); one trace
    per size, ``<name>_b<b>.jsonl``."""
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
    return [capture_batch(spec, batch=b, out=out, name=f"{base}_b{b}", resume=resume,
                          force=force, progress=progress, argv=argv, loaded=loaded)
            for b in bs]
