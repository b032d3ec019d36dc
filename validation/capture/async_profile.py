"""Contention profile of the asynchronous pipeline (``polyspec profile --cascade --mode
async``): each model's forward time alone and while the other process runs, on the pipeline's
own processes, cores and threads (:class:`validation.schemes.async_.AsyncDecoder` with other
loops), without decoding.

On a CPU the two processes of the pipeline slow each other's forwards (shared caches, memory
bandwidth, the host's other vCPU): AS1 with each model's single-core costs over-predicts the
pipeline by 16-27 % on the idle machine (``data/traces/cpu-async/README.md``). The profile
measures the slowdown before a capture, as docs/theory.md AS1c states it: ``kappa_i`` =
(mean forward time of model ``i`` while the other process runs forwards) / (the same forwards
alone) - 1.

- **target**: verify forwards scoring ``m`` positions (the last verified token and ``m - 1``
  drafts) at the contexts the decoder verifies at (midpoints of ``prompt_len .. prompt_len +
  tokens``), ``m`` on a grid of ``1 .. W + 1`` (``W``: AS0's window), each followed by the
  decoder's own decision (:func:`~validation.schemes.async_.accept_block`) and cache
  rollback, timed apart: the per-verify overhead ``o_1``.
- **drafter**: one-position drafting forwards, context advancing one token per forward from
  ``prompt_len`` to ``prompt_len + tokens + W`` and rolled back, as it drafts.
- **solo**: one process runs its forwards, the other waits blocked (no CPU); **together**:
  both start at one barrier and time the same forwards as solo; the one that finishes first
  keeps running its forwards untimed until the other has finished, so every timed forward
  runs while the other process computes. Solo target, solo drafter and together alternate,
  in reversed order every other repeat.
- **autoregressive**: the target decoding the prompts alone in this process pinned to the
  target's core (the single-core baseline the speedup of a capture is measured against),
  interleaved with the repeats.

The forecast (:mod:`validation.analysis.async_forecast`) reads the solo costs, ``kappa`` per
model, ``o_1`` and the autoregressive time per token. :func:`run_profile` is the command
itself (the async scheme's ``PROFILE`` hook, :func:`validation.schemes.command_hook`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.capture.setup import alternate
from validation.schemes._two_process import STOP, barrier, views
from validation.schemes.async_ import (
    DLEN,
    VLEN,
    AsyncDecoder,
    accept_block,
    check_async_args,
)
from validation.schemes.chain import autoregressive

__all__ = ["AsyncProfile", "ContentionPipeline", "profile_async", "verify_sizes",
           "ASYNC_PROFILE_FORMAT", "read_async_profile", "run_profile"]

ASYNC_PROFILE_FORMAT = "polyspec-async-profile-1"
N_CONTEXTS = 4  # verify contexts: midpoints of the decoder's range
# the profile's flags in the pipeline's shared control array (slots the decoder uses for the
# texts' lengths; run_job sets them to 0 with an empty text)
TARGET_DONE, DRAFTER_DONE = DLEN, VLEN


def _target_loop(model, shared, lock, job):
    """Verify forwards at ``job["cells"]`` ``(ctx, m)`` (contexts descending), each followed
    by the decoder's decision and rollback. ``together``: from the barrier, and after its
    timed cells the same forwards untimed until the drafter has done its own."""
    ctrl = views(shared)[0]
    seq, cells = job["filler"], job["cells"]
    model.reset()
    model.logits(seq, max(c for c, _ in cells))
    together = job["phase"] == "together"
    if together:
        barrier(ctrl, lock, 2)
    fwd, over = [], []
    timed = True
    while True:
        for ctx, m in cells:
            model.rollback(ctx)
            t0 = time.perf_counter()
            lg = model.logits(seq, ctx + m)
            t1 = time.perf_counter()
            a, _ = accept_block(lg, seq[ctx + 1: ctx + m])
            model.rollback(ctx + a)
            t2 = time.perf_counter()
            if timed:
                fwd.append(t1 - t0)
                over.append(t2 - t1)
            elif ctrl[DRAFTER_DONE] or ctrl[STOP]:
                break
        ctrl[TARGET_DONE] = 1
        timed = False
        if not together or ctrl[DRAFTER_DONE] or ctrl[STOP]:
            return {"forward_s": fwd, "overhead_s": over}
        model.reset()
        model.logits(seq, max(c for c, _ in cells))


def _draft_loop(model, shared, lock, job):
    """One-position forwards from ``lo`` to ``hi``, timed; ``together``: from the barrier, and
    after them the same forwards untimed until the target has done its own."""
    ctrl = views(shared)[0]
    seq, lo, hi = job["filler"], job["lo"], job["hi"]
    model.reset()
    model.logits(seq, lo)
    together = job["phase"] == "together"
    if together:
        barrier(ctrl, lock, 2)
    fs = []
    timed = True
    while True:
        model.rollback(lo)
        for n in range(lo, hi):
            t0 = time.perf_counter()
            lg = model.logits(seq, n + 1)
            t1 = time.perf_counter()
            int(torch.argmax(lg[-1]).item())
            if timed:
                fs.append(t1 - t0)
            elif ctrl[TARGET_DONE] or ctrl[STOP]:
                break
        ctrl[DRAFTER_DONE] = 1
        timed = False
        if not together or ctrl[TARGET_DONE] or ctrl[STOP]:
            return {"forward_s": fs}


class ContentionPipeline(AsyncDecoder):
    """The async pipeline's two processes (same start, pinning, threads and shared state as
    :class:`AsyncDecoder`) running the profile's loops instead of decoding."""

    LOOPS = (_target_loop, _draft_loop)


def verify_sizes(window: int) -> list[int]:
    """The verify sizes ``m`` the profile times: ``1 .. 8``, then ``12, 16, 24, 32, 48, 64,
    96`` and ``W + 1``, up to ``W + 1`` (a verify checks at most ``W`` drafts)."""
    top = as_int(window, "window", low=0) + 1
    grid = set(range(1, 9)) | {12, 16, 24, 32, 48, 64, 96} | {top}
    return sorted(m for m in grid if m <= top)


def _finite_times(xs, what: str, *, zero_ok: bool = False) -> list[float]:
    out = []
    for j, t in enumerate(xs):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                or not (t >= 0 if zero_ok else t > 0):
            raise PolyspecInputError("profile", f"{what}[{j}]: must be a finite time "
                                     f"{'>=' if zero_ok else '>'} 0 s, got {t!r}"[:200])
        out.append(float(t))
    return out


@dataclass
class AsyncProfile:
    """What a forecast of the async pipeline reads (seconds): the target's solo verify costs
    ``target_table[m - 1] = T_1(m)``, ``m = 1 .. W + 1``; the drafter's solo forward
    ``draft_s``; ``contention`` = ``(kappa_1, kappa_2)`` (together / solo - 1, AS1c); the
    per-verify overhead ``overhead_s`` (``o_1``); the target's single-core autoregressive
    time per token ``ar_s``. ``raw``: the measurements they come from; ``settings``: how
    (``source`` says when they come from a capture, not a profile)."""

    models: list[str]
    threshold: int
    queue: int | None
    window: int
    target_table: list[float]
    draft_s: float
    contention: tuple[float, float]
    overhead_s: float
    ar_s: float
    raw: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def cost_curves(self) -> tuple[CostCurve, CostCurve]:
        """The solo costs: the target's table and the drafter's constant step."""
        return CostCurve.from_table(self.target_table), CostCurve.constant(self.draft_s)

    def to_dict(self) -> dict:
        return {"format": ASYNC_PROFILE_FORMAT, "mode": "async", "models": list(self.models),
                "threshold": self.threshold, "queue": self.queue, "window": self.window,
                "target_table": list(self.target_table), "draft_s": self.draft_s,
                "contention": list(self.contention), "overhead_s": self.overhead_s,
                "ar_s": self.ar_s, "raw": self.raw, "settings": self.settings}

    @classmethod
    def from_dict(cls, d, field_name: str = "profile") -> AsyncProfile:
        """A profile read back; every time finite and > 0 (the overhead >= 0), every
        ``kappa`` finite and > -1, the table covering ``m = 1 .. W + 1``."""
        if not isinstance(d, dict) or d.get("format") != ASYNC_PROFILE_FORMAT:
            raise PolyspecInputError(field_name, f"not an async profile (expected format "
                                     f"{ASYNC_PROFILE_FORMAT!r}: polyspec profile --cascade "
                                     "--mode async)")
        try:
            models = [str(m) for m in d["models"]]
            th = as_int(d["threshold"], f"{field_name}: threshold", low=0)
            q = None if d["queue"] is None else as_int(d["queue"], f"{field_name}: queue",
                                                       low=max(1, th))
            w = as_int(d["window"], f"{field_name}: window", low=max(1, th))
            table = _finite_times(d["target_table"], f"{field_name}: target_table")
            if len(table) != w + 1:
                raise PolyspecInputError(field_name, f"target_table: need T(1..W + 1), "
                                         f"{w + 1} entries, got {len(table)}")
            draft = _finite_times([d["draft_s"]], f"{field_name}: draft_s")[0]
            over = _finite_times([d["overhead_s"]], f"{field_name}: overhead_s",
                                 zero_ok=True)[0]
            ar = _finite_times([d["ar_s"]], f"{field_name}: ar_s")[0]
            kap = d["contention"]
            if not isinstance(kap, list) or len(kap) != 2 or not all(
                    not isinstance(k, bool) and isinstance(k, (int, float)) and math.isfinite(k)
                    and k > -1 for k in kap):
                raise PolyspecInputError(field_name, f"contention: need [kappa_1, kappa_2], "
                                         f"each finite and > -1, got {kap!r}"[:200])
            if len(models) != 2:
                raise PolyspecInputError(field_name, f"models: an async profile has two "
                                         f"(target, drafter), got {models}")
            return cls(models=models, threshold=th, queue=q, window=w, target_table=table,
                       draft_s=draft, contention=(float(kap[0]), float(kap[1])),
                       overhead_s=over, ar_s=ar, raw=dict(d.get("raw", {})),
                       settings=dict(d.get("settings", {})))
        except PolyspecInputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PolyspecInputError(field_name, f"malformed async profile ({e})") from None


def read_async_profile(path, field_name: str = "--profile") -> AsyncProfile:
    """The async profile in the JSON file ``path`` (errors name ``field_name``)."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise PolyspecInputError(field_name, f"{p}: no such file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PolyspecInputError(field_name, f"{p}: not JSON ({e})") from None
    return AsyncProfile.from_dict(data, f"{field_name}: {p}")


def _mean(xs) -> float:
    return float(np.mean(xs))


def _checked(models, threshold, queue, prompts, max_new_tokens, timing) -> tuple:
    """:func:`profile_async`'s inputs checked: ``(threshold, queue, window, tokens, repeats,
    warmup, prompt length, highest position)``."""
    threshold, queue, window = check_async_args(models, threshold, queue)
    tokens = as_int(max_new_tokens, "tokens", low=1)
    if not isinstance(timing, tuple) or len(timing) != 2:
        raise PolyspecInputError("timing", "must be (repeats, warmup)")
    repeats = as_int(timing[0], "repeats", low=1, high=10_000)
    warmup = as_int(timing[1], "warmup", low=0, high=100)
    if not prompts or len({len(p) for p in prompts}) != 1:
        raise PolyspecInputError("prompts", "need prompts of one length")
    plen = len(prompts[0])
    cap = min((lv.max_len for lv in models if lv.max_len is not None), default=None)
    hi = plen + tokens + window
    if cap is not None and hi > cap:
        raise PolyspecInputError("tokens", f"prompt ({plen}) + tokens ({tokens}) + verify "
                                 f"window ({window}) = {hi} exceeds the context {cap}; "
                                 "fewer tokens or a queue bound")
    return threshold, queue, window, tokens, repeats, warmup, plen, hi


def profile_async(models, threshold, queue, prompts, max_new_tokens: int, *,
                  timing: tuple[int, int] = (5, 1), cores=None, threads: int = 1) -> AsyncProfile:
    """Time the pipeline of ``models`` (loaded, target first) at ``threshold`` / ``queue``
    (module docstring): ``timing = (repeats, warmup)``: ``repeats`` alternations of solo
    target, solo drafter and together, after ``warmup`` untimed ones; the autoregressive
    target on every prompt."""
    threshold, queue, window, tokens, repeats, warmup, plen, hi = _checked(
        models, threshold, queue, prompts, max_new_tokens, timing)
    contexts = sorted({plen + int(tokens * (j + 0.5) / N_CONTEXTS) for j in range(N_CONTEXTS)},
                      reverse=True)
    ms = verify_sizes(window)
    cells = [(c, m) for c in contexts for m in ms]
    flat = [t for p in prompts for t in p]
    filler = (flat * (1 + (hi + 1) // len(flat)))[: hi + 1]
    tjob = {"cells": cells, "filler": filler}
    djob = {"lo": plen, "hi": hi, "filler": filler}
    solo_t, tog_t = [[] for _ in cells], [[] for _ in cells]
    over, solo_d, tog_d = [], [], []
    ar_wall, ar_tok = 0.0, 0
    t_start = time.perf_counter()
    with ContentionPipeline(models, threshold=threshold, queue=queue, cores=cores,
                            threads=threads) as pipe:
        core = pipe.cores[0]

        def phases(record: bool, rev: bool):
            order = ["target", "drafter", "together"]
            for ph in reversed(order) if rev else order:
                if ph == "target":
                    r = pipe.run_job({**tjob, "phase": "solo"}, roles=(0,))[0]
                    if record:
                        for j, t in enumerate(r["forward_s"]):
                            solo_t[j].append(t)
                elif ph == "drafter":
                    r = pipe.run_job({**djob, "phase": "solo"}, roles=(1,))[0]
                    if record:
                        solo_d.extend(r["forward_s"])
                else:
                    rt, rd = pipe.run_job({**tjob, **djob, "phase": "together"})
                    if record:
                        for j, t in enumerate(rt["forward_s"]):
                            tog_t[j].append(t)
                        over.extend(rt["overhead_s"])
                        tog_d.extend(rd["forward_s"])

        def run_ar(r, record=True):
            nonlocal ar_wall, ar_tok
            own = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {core})  # the single-core baseline, as a capture's
            try:
                for k, p in enumerate(prompts):
                    if not record:
                        autoregressive(models[0], p, min(16, tokens))
                        return
                    if k % repeats == r:
                        res = autoregressive(models[0], p, tokens)
                        ar_wall += res.wall_s
                        ar_tok += len(res.tokens)
            finally:
                os.sched_setaffinity(0, own)

        for w in range(warmup):
            phases(False, w % 2 == 1)
            run_ar(0, record=False)
        for r in range(repeats):
            alternate(r, lambda r=r: phases(True, r % 2 == 1), lambda r=r: run_ar(r))
        cores_used = list(pipe.cores)
    if not solo_d or not tog_d or ar_tok == 0:
        raise PolyspecInputError("tokens", "the profile timed no drafter forward or no "
                                 "autoregressive token: more tokens")
    by_m = {m: [] for m in ms}
    for (_, m), ts in zip(cells, solo_t, strict=True):
        by_m[m].append(_mean(ts))
    mean_m = np.array([_mean(by_m[m]) for m in ms])  # contexts weighed equally
    table = np.interp(np.arange(1, window + 2), np.array(ms, dtype=np.float64), mean_m)
    k1 = sum(_mean(t) for t in tog_t) / sum(_mean(t) for t in solo_t) - 1.0
    k2 = _mean(tog_d) / _mean(solo_d) - 1.0
    per_m = {str(m): sum(_mean(tog_t[j]) for j, (_, mm) in enumerate(cells) if mm == m)
             / sum(_mean(solo_t[j]) for j, (_, mm) in enumerate(cells) if mm == m) - 1.0
             for m in ms}
    raw = {"cells": [list(c) for c in cells],
           "target_solo_s": solo_t, "target_together_s": tog_t, "target_overhead_s": over,
           "drafter_solo_s": solo_d, "drafter_together_s": tog_d,
           "target_contention_by_m": per_m,
           "ar_tokens": ar_tok, "ar_wall_s": ar_wall}
    settings = {"source": "profile", "n_prompts": len(prompts), "prompt_len": plen,
                "max_new_tokens": tokens, "contexts": contexts, "verify_sizes": ms,
                "drafter_contexts": [plen, hi], "repeats": repeats, "warmup": warmup,
                "cores": cores_used, "threads": int(threads),
                "elapsed_s": round(time.perf_counter() - t_start, 3)}
    return AsyncProfile(models=[m.name for m in models], threshold=threshold, queue=queue,
                        window=window, target_table=[float(x) for x in table],
                        draft_s=_mean(solo_d), contention=(float(k1), float(k2)),
                        overhead_s=float(np.median(over)), ar_s=ar_wall / ar_tok, raw=raw,
                        settings=settings)


def run_profile(args) -> int:
    """``polyspec profile --cascade --mode async`` (the async scheme's ``PROFILE``; ``args``:
    the command's parsed options): :func:`profile_async` of the two models, printed or
    written as JSON (every input checked, each error naming its option, then the load, then
    the models loaded and timed)."""
    import sys

    from polyspec_theory.errors import options_named, parse_ints, refuse_options
    from validation.capture.machine import check_load, machine_state
    from validation.capture.model_specs import model_paths
    from validation.capture.models import load_model
    from validation.capture.setup import make_prompts
    from validation.files import check_output, dump_json, write_output
    from validation.schemes.async_ import pick_cores

    refuse_options((("--traces", args.traces), ("--exclude", args.exclude),
                    ("--batch", args.batch)),
                   "does not apply with --mode async (the profile times forwards; the laws "
                   "come in at forecast time)")
    refuse_options((("--max-m", args.max_m != 8 or None),
                    ("--context", args.context != 64 or None),
                    ("--unit", args.unit != "ms" or None),
                    ("--dtype", args.dtype != "float32" or None)),
                   "does not apply with --mode async (verify sizes 1 .. W + 1 at the "
                   "decoder's contexts, in seconds, float32)")
    if args.device != "cpu":
        raise PolyspecInputError("--device", f"the async pipeline pins each level to a CPU "
                                 f"core: cpu only, got {args.device!r}")
    if len(args.models) != 2:
        raise PolyspecInputError("models", f"--mode async profiles two models (target, one "
                                 f"drafter), got {len(args.models)}")
    th = parse_ints(args.thresholds if args.thresholds is not None else "0", "--thresholds",
                    low=0, example="0")
    if len(th) != 1:
        raise PolyspecInputError("--thresholds", f"--mode async takes one threshold (two "
                                 f"levels), got {len(th)}")
    with options_named({"cores": "--cores"}):
        cores = pick_cores(2, None if args.cores is None else parse_ints(
            args.cores, "--cores", low=0, example="0,1"))
    n_prompts = as_int(args.prompts, "--prompts", low=1, high=1000)
    tokens = as_int(args.tokens, "--tokens", low=1, high=100_000)
    repeats = as_int(args.repeats, "--repeats", low=1, high=10_000)
    warmup = as_int(args.warmup, "--warmup", low=0, high=100)
    threads = 1 if args.threads is None else as_int(args.threads, "--threads", low=1,
                                                     high=1024)
    if args.out:  # before loading anything: never over the weights read
        check_output(args.out, "--out", inputs=model_paths(args.models))
    torch.set_num_threads(threads)
    loaded = [load_model(m, zoo_dir=args.zoo_dir) for m in args.models]
    with options_named({"threshold": "--thresholds", "queue": "--queue",
                        "temperature": "--temperature"}):
        threshold, queue, _ = check_async_args(loaded, th[0], args.queue, args.temperature)
    prompts, _ = make_prompts(n_prompts, args.prompt_len, args.seed)
    load_check = check_load(args.allow_load, "a profile")  # every input checked first
    machine = machine_state()
    with options_named({"tokens": "--tokens"}):
        prof = profile_async(loaded, threshold, queue, prompts, tokens,
                             timing=(repeats, warmup), cores=cores, threads=threads)
    prof.settings.update({"seed": args.seed, "load_check": load_check, "machine": machine,
                          "machine_end": machine_state()})
    text = dump_json(prof.to_dict())
    if args.out:
        write_output(args.out, text + "\n", "--out")
    if args.json:
        print(text)
        return 0
    k1, k2 = prof.contention
    print(f"async contention profile of {' <- '.join(prof.models)} θ={threshold} queue="
          f"{queue} (window {prof.window}; cores {prof.settings['cores']}; {repeats} repeats, "
          f"{prof.settings['elapsed_s']:.1f} s):", file=sys.stdout)
    print(f"  target autoregressive (single core): {1e3 * prof.ar_s:.4f} ms/token")
    print(f"  {prof.models[0]:<10} verify T(m) solo, ms: " + ", ".join(
        f"{m}: {1e3 * prof.target_table[m - 1]:.4f}" for m in prof.settings["verify_sizes"]))
    print(f"  {prof.models[0]:<10} together / solo: 1 + κ_1 = {1 + k1:.4f}; per-verify "
          f"overhead {1e3 * prof.overhead_s:.4f} ms")
    print(f"  {prof.models[1]:<10} drafting forward solo {1e3 * prof.draft_s:.4f} ms; "
          f"together / solo: 1 + κ_2 = {1 + k2:.4f}")
    if args.out:
        print(f"written to {args.out}")
    return 0
