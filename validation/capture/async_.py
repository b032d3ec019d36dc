"""Capture traces of the asynchronous two-process pipeline (:mod:`validation.schemes.async_`)
in the trace schema (:mod:`validation.traces.schema`, ``"mode": "async"`` in the header).

Protocol as :func:`validation.capture.single.capture`: fixed thread count, warm-up, cost curves
T_i(m) at the start and the end, and for each prompt the pipeline and the autoregressive
baselines interleaved (pipeline first on even prompts). The pipeline runs each level in its
own process on its own core (two cores); the autoregressive baselines and the cost curves
run in this process pinned to the target's core alone (single-core baseline).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import torch

from polyspec_theory.errors import PolyspecInputError
from validation.capture.machine import machine_state
from validation.capture.model_specs import model_name
from validation.capture.setup import (
    CaptureSpec,
    alternate,
    capture_header,
    check_name,
    json_bytes,
    load_models,
    make_prompts,
    progress_bar,
    tokenizer_for,
)
from validation.capture.single import ar_record, iter_cost_curve
from validation.schemes.async_ import ROLLBACK, AsyncDecoder, check_async_args, pick_cores
from validation.schemes.chain import POLICY, autoregressive
from validation.traces.records import TraceWriter

__all__ = ["capture_async", "async_name", "async_header"]


def async_name(models, threshold: int, queue: int | None) -> str:
    """``<models>_async_th<threshold>[_q<queue>]_T0``."""
    q = "" if queue is None else f"_q{queue}"
    return f"{'-'.join(model_name(m) for m in models)}_async_th{threshold}{q}_T0"


def async_header(loaded, threshold, queue, window, cores, name) -> dict:
    """The header fields that make a trace an async one (merged into the capture header):
    the cascade in the config format with ``"mode": "async"`` (docs/theory.md AS0) and the
    pipeline's settings under ``async``."""
    cascade = {"name": name, "models": [{"name": lv.name} for lv in loaded],
               "thresholds": [threshold], "acceptance": None, "policy": POLICY,
               "mode": "async"}
    if queue is not None:
        cascade["queue"] = [queue]
    return {"mode": "async", "cascade": cascade,
            "async": {"threshold": threshold, "queue": queue, "window": window,
                      "cores": list(cores), "processes": len(loaded), "rollback": ROLLBACK,
                      "ar_cores": [cores[0]]}}


def capture_async(spec: CaptureSpec, *, out, name=None, resume=False, force=False,
                  progress=True, argv=None) -> Path:
    """Run one async capture of ``spec`` (target + one drafter; ``thresholds[0]``, ``queue``
    and ``cores`` are the pipeline's) and return ``<out>/<name>.jsonl``."""
    spec = spec.checked()
    models = spec.models
    if len(models) != 2:
        raise PolyspecInputError("models", f"the async pipeline runs two levels (target + one "
                                 f"drafter, one core each), got {len(models)} models")
    cores = pick_cores(2, spec.cores)
    if spec.device != "cpu":
        raise PolyspecInputError("device", f"the async pipeline pins each level to a CPU "
                                 f"core: device must be cpu, got {spec.device!r}")
    if resume:
        raise PolyspecInputError("resume", "async captures cannot be resumed: use --force to "
                                 "start again or another --name")
    torch.set_num_threads(spec.threads)
    dev, loaded = load_models(models, spec.device, spec.dtype, spec.zoo_dir)
    threshold, queue, window = check_async_args(loaded, spec.thresholds[0], spec.queue,
                                                spec.temperature)
    name = check_name(name if name is not None else async_name(models, threshold, queue), out)
    path = Path(out) / f"{name}.jsonl"
    if path.exists() and not force:
        raise PolyspecInputError("out", f"{path} exists: pass --force to overwrite it")
    tok = tokenizer_for(loaded, models)
    prompts, offsets = make_prompts(spec.n_prompts, spec.prompt_len, spec.seed, tok)
    maxlen = min((lv.max_len for lv in loaded if lv.max_len is not None), default=None)
    if maxlen is not None and spec.prompt_len + spec.max_new_tokens + window > maxlen:
        raise PolyspecInputError("queue" if threshold == 0 else "threshold",
                                 f"prompt ({spec.prompt_len}) + tokens ({spec.max_new_tokens})"
                                 f" + verify window ({window}) exceeds the context {maxlen}"
                                 + ("; bound the queue" if threshold == 0 else ""))
    contexts = [int(c) for c in spec.cost_contexts if maxlen is None or c + 16 <= maxlen]
    header = _header(spec, loaded, dev, name, argv, (prompts, offsets, tok), contexts)
    header.update(async_header(loaded, threshold, queue, window, cores, name))
    with AsyncDecoder(loaded, threshold=threshold, queue=queue, cores=cores,
                      threads=spec.threads) as dec, TraceWriter(path, header) as writer:
        _record(spec, dec, loaded, prompts, writer, (cores[0], contexts, progress, name))
    return path


def _header(spec, loaded, dev, name, argv, prompt_set, contexts) -> dict:
    """The header of an async capture but its ``async`` fields (:func:`async_header`);
    ``prompt_set``: the prompts, their offsets in the split and the tokenizer."""
    from validation.zoo.data import corpus_digest

    prompts, offsets, tok = prompt_set
    header = capture_header(spec, loaded, dev, name=name, tool="polyspec capture --mode async",
                            policy=POLICY, argv=argv)
    header.update({
        "prompts": {"source": "stdlib validation split" if tok is None else
                    "stdlib validation split, HF tokenizer", "n_prompts": spec.n_prompts,
                    "prompt_len": spec.prompt_len, "max_new_tokens": spec.max_new_tokens,
                    "offsets": offsets,
                    "sha256": hashlib.sha256(json_bytes(prompts)).hexdigest()[:16],
                    "corpus_digest": corpus_digest()},
        "cost_curve": {"m": list(range(1, 17)), "contexts": contexts,
                       "repeats": spec.cost_repeats},
        "ar_models": spec.ar_models, "time_base": "seconds", "prefill": "excluded",
    })
    return header


def _record(spec, dec, loaded, prompts, writer, where) -> None:
    """Warm-up, cost curves, every prompt, cost curves, end: the baselines and cost curves
    pinned to the target's core ``where[0]`` alone."""
    core, contexts, progress, name = where
    ar_loaded = loaded if spec.ar_models == "all" else loaded[:1]
    max_new = spec.max_new_tokens
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, spec.prompt_len))
    own = os.sched_getaffinity(0)
    t_start = time.perf_counter()
    os.sched_setaffinity(0, {core})  # baselines and cost curves: one core
    try:
        for _ in range(spec.warmup):
            dec.generate(prompts[0], min(32, max_new))
            for lv in ar_loaded:
                autoregressive(lv, prompts[0], min(16, max_new))
        for lv in loaded:
            for rec in iter_cost_curve(lv, contexts, spec.cost_repeats, filler, "start"):
                writer.write(rec)
        for k in progress_bar(range(spec.n_prompts), progress, name):
            _one_prompt(k, prompts[k], dec, ar_loaded, loaded, max_new, writer)
        for lv in loaded:
            for rec in iter_cost_curve(lv, contexts, spec.cost_repeats, filler, "end"):
                writer.write(rec)
        writer.write({"type": "end", "n_prompts": spec.n_prompts,
                      "wall_s": round(time.perf_counter() - t_start, 3),
                      "machine": machine_state()})
    finally:
        os.sched_setaffinity(0, own)


def _one_prompt(k, prompt, dec, ar_loaded, loaded, max_new, writer) -> None:
    """The pipeline and the AR baselines on prompt ``k`` (pipeline first on even prompts)."""

    def run_ar():
        res = {}
        for lv in ar_loaded:
            r = autoregressive(lv, prompt, max_new)
            writer.write(ar_record(k, lv, prompt, r))
            res[lv.name] = r
        return res

    res, ares = alternate(k, lambda: dec.generate(prompt, max_new, prompt_index=k), run_ar)
    for r in res.rounds:
        writer.write(r)
    writer.write({"type": "dforwards", "prompt": k, "model": loaded[1].name,
                  "m": res.draft_m, "wall_s": [round(x, 7) for x in res.draft_fwd_s],
                  "discarded": res.discarded, "rollbacks": res.rollbacks})
    tgt = ares[loaded[0].name]
    writer.write({"type": "summary", "prompt": k, "n_prompt_tokens": len(prompt),
                  "n_generated": res.n_generated, "wall_s": round(res.wall_s, 7),
                  "prefill_s": round(res.prefill_s, 7),
                  "forward_s": [round(x, 7) for x in res.forward_s],
                  "forward_count": res.forward_count,
                  "overhead_s": round(res.overhead_s, 7), "n_rounds": [len(res.rounds)],
                  "matches_target_ar": res.tokens[:max_new] == tgt.tokens})
