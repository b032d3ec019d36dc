"""Capture traces of the polybasic decoder on real models (see ``validation.traces.records`` for the
schema). One capture = one cascade configuration = one ``<name>.jsonl`` file.

Protocol (timing on a shared CPU is noisy): fixed thread count; warm-up of every model and
of the cascade before anything is recorded; cost curves T_i(m), m = 1..16, at a few context
lengths at the start and again at the end; for each prompt the cascade run and the
autoregressive runs of every model of the cascade are interleaved (cascade first on even
prompts, AR first on odd ones), all on the same prompt with the same sampling settings.
Prompts are windows of the held-out (validation) split starting at a line start, chosen by
the seed. Sampling seeds are per prompt, so ``resume`` reproduces the remaining prompts.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import torch

from validation.capture.machine import machine_state
from validation.capture.models import DecoderModel
from validation.capture.setup import (
    COST_M,
    CaptureSpec,
    alternate,
    capture_header,
    device_name,
    json_bytes,
    load_models,
    make_prompts,
    open_trace,
    progress_bar,
    tokenizer_for,
    trace_path,
)
from validation.schemes.chain import POLICY, PolybasicDecoder, autoregressive, wall_clock

__all__ = ["capture", "cost_curve_records", "iter_cost_curve", "ar_record", "FINGERPRINT"]

FINGERPRINT = ("cascade", "temperature", "top_k", "seed", "prompts", "dtype", "device",
               "threads", "cost_curve", "tree_sampling")


def cost_curve_records(model: DecoderModel, contexts, repeats: int, filler, phase: str,
                       ms=COST_M, skip=frozenset()) -> list[dict]:
    """T(m) samples: for each context length c and m, ``repeats`` timed forwards scoring m
    new positions with c tokens in the cache (cache rolled back to c between repeats); cells
    ``(c, m)`` in ``skip`` are not measured."""
    return list(iter_cost_curve(model, contexts, repeats, filler, phase, ms, skip))


def ar_record(k: int, model, prompt, r) -> dict:
    """The trace record of one autoregressive baseline run ``r`` of ``model`` on prompt ``k``."""
    return {"type": "ar", "prompt": k, "model": model.name,
            "n_tokens": len(r.tokens), "wall_s": round(r.wall_s, 7),
            "forward_s": round(r.forward_s, 7),
            "prefill_s": round(r.prefill_s, 7), "ctx0": len(prompt),
            "step_s": [round(s, 7) for s in r.step_s]}


def iter_cost_curve(model: DecoderModel, contexts, repeats: int, filler, phase: str,
                    ms=COST_M, skip=frozenset()):
    """:func:`cost_curve_records` one record at a time, each yielded as soon as its cell is
    measured (a capture writes it at once: a kill loses at most the cell in progress)."""
    now = wall_clock(model.device)
    with torch.inference_mode():
        for c in contexts:
            todo = [m for m in ms if (int(c), int(m)) not in skip]
            if not todo:
                continue
            model.reset()
            seq = list(filler[: c + max(ms)])
            if c > 0:
                model.logits(seq, c)
            for m in todo:
                times = []
                for _ in range(repeats):
                    model.rollback(c)
                    t0 = now()
                    model.logits(seq, c + m)
                    times.append(now() - t0)
                yield {"type": "cost", "model": model.name, "phase": phase, "ctx": int(c),
                       "m": int(m), "times_s": [round(t, 7) for t in times],
                       "median_s": round(float(np.median(times)), 7)}


def capture(spec: CaptureSpec, *, out, name=None, resume=False, force=False, progress=True,
            argv=None) -> Path:
    """Run the capture ``spec`` describes and return the trace path ``<out>/<name>.jsonl``
    (default name: :meth:`CaptureSpec.name`); ``resume`` continues an interrupted trace of
    the same settings, ``force`` overwrites one; ``argv`` is recorded in the header. With a
    tree or schedules the header's cascade carries ``trees`` / ``schedules`` in the config
    format and the rounds of those pairs their optional fields (:mod:`validation.traces.schema`)."""
    spec = spec.checked()
    models, thresholds, max_new = spec.models, spec.thresholds, spec.max_new_tokens
    temperature, top_k, seed = spec.temperature, spec.top_k, spec.seed
    n_prompts, prompt_len = spec.n_prompts, spec.prompt_len
    tree_obj, schedules = spec.tree, spec.schedules
    m_pairs = len(models) - 1
    torch.set_num_threads(spec.threads)
    name = name if name is not None else spec.name()
    path = trace_path(name, out, resume=resume, force=force)

    dev, loaded = load_models(models, spec.device, spec.dtype, spec.zoo_dir)
    tok = tokenizer_for(loaded, models)
    prompts, offsets = make_prompts(n_prompts, prompt_len, seed, tok)
    sha = hashlib.sha256(json_bytes(prompts)).hexdigest()[:16]
    maxlen = min((lv.max_len for lv in loaded if lv.max_len is not None), default=None)
    # a tree's verifier scores N + 1 positions: time T(m) up to there when it exceeds 16
    cost_m = (COST_M if tree_obj is None or tree_obj.n_nodes + 1 <= max(COST_M)
              else tuple(range(1, tree_obj.n_nodes + 2)))
    contexts = [int(c) for c in spec.cost_contexts
                if maxlen is None or c + max(cost_m) <= maxlen]
    from validation.zoo.data import corpus_digest

    header = capture_header(
        loaded, thresholds, name=name, tool="polyspec capture", policy=POLICY,
        dtype=spec.dtype, device=dev.type, device_name=device_name(dev), argv=argv,
        temperature=temperature, top_k=top_k, seed=seed, load_check=spec.load_check)
    header.update({
        "prompts": {"source": "stdlib validation split" if tok is None else
                    "stdlib validation split, HF tokenizer", "n_prompts": n_prompts,
                    "prompt_len": prompt_len, "max_new_tokens": max_new,
                    "offsets": offsets, "sha256": sha, "corpus_digest": corpus_digest()},
        "cost_curve": {"m": list(cost_m), "contexts": contexts, "repeats": spec.cost_repeats},
        "ar_models": spec.ar_models, "time_base": "seconds", "prefill": "excluded",
    })
    if spec.structured:
        header["cascade"]["trees"] = (None if tree_obj is None
                                      else [None] * (m_pairs - 1) + [tree_obj.to_config()])
        header["cascade"]["schedules"] = (None if schedules is None else
                                          [None if sc is None else sc.to_config()
                                           for sc in schedules])
        if tree_obj is not None:
            header["tree_sampling"] = spec.tree_sampling
        if schedules is not None and any(sc is not None and sc.kind == "hf"
                                          for sc in schedules):
            header["schedule_restart"] = "prompt"
    if spec.structured:
        from validation.schemes.structured import StructuredDecoder

        dec = StructuredDecoder(loaded, thresholds, tree=tree_obj, schedules=schedules,
                                tree_sampling=spec.tree_sampling, temperature=temperature,
                                top_k=top_k, seed=seed)
    else:
        dec = PolybasicDecoder(loaded, thresholds, temperature=temperature, top_k=top_k,
                               seed=seed)
    writer, start_prompt, done_cells = open_trace(path, header, resume=resume,
                                                  fingerprint=FINGERPRINT)
    if writer is None:
        return path

    def cost_curves(phase):
        # only the cells not recorded yet, per model and phase (a resumed capture)
        for lv in loaded:
            skip = {(c, m) for (nm, ph, c, m) in done_cells if nm == lv.name and ph == phase}
            for rec in iter_cost_curve(lv, contexts, spec.cost_repeats, filler, phase, cost_m,
                                       skip):
                writer.write(rec)

    ar_loaded = loaded if spec.ar_models == "all" else loaded[:1]
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, prompt_len))
    t_start = time.perf_counter()
    with writer:
        # warm-up (not recorded)
        for _ in range(spec.warmup):
            dec.generate(prompts[0], min(32, max_new))
            for lv in ar_loaded:
                autoregressive(lv, prompts[0], min(16, max_new))
        cost_curves("start")
        bar = progress_bar(range(start_prompt, n_prompts), progress, name)
        ar_tt, cas_tt = [0.0, 0], [0.0, 0]
        for k in bar:
            prompt = prompts[k]

            dec.on_round = writer.write

            def run_cascade(k=k, prompt=prompt):
                dec.sampler.reseed(int(seed) * 1_000_003 + k)
                return dec.generate(prompt, max_new, prompt_index=k)

            def run_ar(k=k, prompt=prompt):
                res = {}
                for lv in ar_loaded:
                    r = autoregressive(lv, prompt, max_new, temperature=temperature,
                                       top_k=top_k, seed=int(seed) * 1_000_003 + k)
                    writer.write(ar_record(k, lv, prompt, r))
                    res[lv.name] = r
                return res

            cres, ares = alternate(k, run_cascade, run_ar)
            tgt = ares[loaded[0].name]
            match = (cres.tokens[:max_new] == tgt.tokens) if temperature == 0 else None
            n_rounds = [sum(1 for r in cres.rounds if r.level == i)
                        for i in range(1, len(loaded))]
            writer.write({"type": "summary", "prompt": k, "n_prompt_tokens": len(prompt),
                          "n_generated": cres.n_generated, "wall_s": round(cres.wall_s, 7),
                          "prefill_s": round(cres.prefill_s, 7),
                          "forward_s": [round(x, 7) for x in cres.forward_s],
                          "forward_count": cres.forward_count,
                          "overhead_s": round(cres.overhead_s, 7), "n_rounds": n_rounds,
                          "matches_target_ar": match})
            ar_tt[0] += tgt.wall_s
            ar_tt[1] += len(tgt.tokens)
            cas_tt[0] += cres.wall_s
            cas_tt[1] += cres.n_generated
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(speedup=f"{(ar_tt[0] / ar_tt[1]) / (cas_tt[0] / cas_tt[1]):.2f}")
        cost_curves("end")
        writer.write({"type": "end", "n_prompts": n_prompts,
                      "wall_s": round(time.perf_counter() - t_start, 3),
                      "machine": machine_state()})
    return path
