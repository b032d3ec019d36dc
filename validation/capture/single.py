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
from typing import NamedTuple

import numpy as np
import torch

from validation import schemes
from validation.capture.machine import machine_state
from validation.capture.models import DecoderModel
from validation.capture.setup import (
    COST_M,
    CaptureSpec,
    alternate,
    capture_header,
    json_bytes,
    load_models,
    make_prompts,
    open_trace,
    progress_bar,
    tokenizer_for,
    trace_path,
)
from validation.schemes.chain import POLICY, autoregressive, wall_clock

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
    the same settings, ``force`` overwrites one; ``argv`` is recorded in the header. The
    decoder, the header fields and the positions of the cost curves are the scheme's
    (:mod:`validation.schemes`: a tree or schedules add ``trees`` / ``schedules`` to the
    header's cascade and their optional fields to the rounds)."""
    spec = spec.checked()
    scheme = schemes.get(spec.scheme)
    torch.set_num_threads(spec.threads)
    name = name if name is not None else spec.name()
    path = trace_path(name, out, resume=resume, force=force)
    dev, loaded = load_models(spec.models, spec.device, spec.dtype, spec.zoo_dir)
    header, prompts, plan = _header(spec, scheme, loaded, dev, name, argv)
    dec = scheme.decoder(loaded, spec)
    writer, start_prompt, done_cells = open_trace(path, header, resume=resume,
                                                  fingerprint=FINGERPRINT)
    if writer is not None:
        with writer:
            _run(spec, dec, loaded, prompts, writer, plan._replace(
                start=start_prompt, done_cells=done_cells, progress=progress, name=name))
    return path


class _Plan(NamedTuple):
    """How a capture runs besides its spec: the cost curves' contexts and positions, where
    it starts (a resumed one), what it shows."""

    contexts: list
    cost_m: tuple
    start: int = 0
    done_cells: frozenset = frozenset()
    progress: bool = True
    name: str = "capture"


def _header(spec, scheme, loaded, dev, name, argv):
    """(header, prompts, plan) of a single-stream capture: the common header, its prompts and
    cost-curve protocol, and the scheme's own fields."""
    from validation.zoo.data import corpus_digest

    tok = tokenizer_for(loaded, spec.models)
    prompts, offsets = make_prompts(spec.n_prompts, spec.prompt_len, spec.seed, tok)
    sha = hashlib.sha256(json_bytes(prompts)).hexdigest()[:16]
    maxlen = min((lv.max_len for lv in loaded if lv.max_len is not None), default=None)
    cost_m = scheme.cost_positions(spec)
    contexts = [int(c) for c in spec.cost_contexts
                if maxlen is None or c + max(cost_m) <= maxlen]
    header = capture_header(spec, loaded, dev, name=name, tool="polyspec capture",
                            policy=POLICY, argv=argv)
    header.update({
        "prompts": {"source": "stdlib validation split" if tok is None else
                    "stdlib validation split, HF tokenizer", "n_prompts": spec.n_prompts,
                    "prompt_len": spec.prompt_len, "max_new_tokens": spec.max_new_tokens,
                    "offsets": offsets, "sha256": sha, "corpus_digest": corpus_digest()},
        "cost_curve": {"m": list(cost_m), "contexts": contexts, "repeats": spec.cost_repeats},
        "ar_models": spec.ar_models, "time_base": "seconds", "prefill": "excluded",
    })
    extra = scheme.capture_fields(spec)
    header["cascade"].update(extra.pop("cascade", {}))
    header.update(extra)
    return header, prompts, _Plan(contexts, cost_m)


def _run(spec, dec, loaded, prompts, writer, plan: _Plan) -> None:
    """Warm-up, start cost curves, every prompt (cascade and baselines interleaved), end
    cost curves, the end record."""
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, spec.prompt_len))

    def cost_curves(phase):
        # only the cells not recorded yet, per model and phase (a resumed capture)
        for lv in loaded:
            skip = {(c, m) for (nm, ph, c, m) in plan.done_cells
                    if nm == lv.name and ph == phase}
            for rec in iter_cost_curve(lv, plan.contexts, spec.cost_repeats, filler, phase,
                                       plan.cost_m, skip):
                writer.write(rec)

    ar_loaded = loaded if spec.ar_models == "all" else loaded[:1]
    t_start = time.perf_counter()
    max_new = spec.max_new_tokens
    for _ in range(spec.warmup):  # not recorded
        dec.generate(prompts[0], min(32, max_new))
        for lv in ar_loaded:
            autoregressive(lv, prompts[0], min(16, max_new))
    cost_curves("start")
    bar = progress_bar(range(plan.start, spec.n_prompts), plan.progress, plan.name)
    tally = [0.0, 0, 0.0, 0]  # AR seconds, AR tokens, cascade seconds, cascade tokens
    dec.on_round = writer.write
    for k in bar:
        _prompt(spec, k, prompts[k], dec, ar_loaded, writer, tally)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(speedup=f"{(tally[0] / tally[1]) / (tally[2] / tally[3]):.2f}")
    cost_curves("end")
    writer.write({"type": "end", "n_prompts": spec.n_prompts,
                  "wall_s": round(time.perf_counter() - t_start, 3),
                  "machine": machine_state()})


def _prompt(spec, k, prompt, dec, ar_loaded, writer, tally) -> None:
    """Prompt ``k``: the cascade and the autoregressive baselines (cascade first on even
    prompts), their records and the summary."""
    max_new, seed = spec.max_new_tokens, int(spec.seed)

    def run_cascade():
        dec.sampler.reseed(seed * 1_000_003 + k)
        return dec.generate(prompt, max_new, prompt_index=k)

    def run_ar():
        res = {}
        for lv in ar_loaded:
            r = autoregressive(lv, prompt, max_new, temperature=spec.temperature,
                               top_k=spec.top_k, seed=seed * 1_000_003 + k)
            writer.write(ar_record(k, lv, prompt, r))
            res[lv.name] = r
        return res

    cres, ares = alternate(k, run_cascade, run_ar)
    tgt = ares[ar_loaded[0].name]
    match = (cres.tokens[:max_new] == tgt.tokens) if spec.temperature == 0 else None
    n_rounds = [sum(1 for r in cres.rounds if r.level == i) for i in range(1, len(spec.models))]
    writer.write({"type": "summary", "prompt": k, "n_prompt_tokens": len(prompt),
                  "n_generated": cres.n_generated, "wall_s": round(cres.wall_s, 7),
                  "prefill_s": round(cres.prefill_s, 7),
                  "forward_s": [round(x, 7) for x in cres.forward_s],
                  "forward_count": cres.forward_count,
                  "overhead_s": round(cres.overhead_s, 7), "n_rounds": n_rounds,
                  "matches_target_ar": match})
    tally[0] += tgt.wall_s
    tally[1] += len(tgt.tokens)
    tally[2] += cres.wall_s
    tally[3] += cres.n_generated
