"""Capture traces of the polybasic decoder on real models (see ``validation.traces`` for the
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
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from polyspec_theory.errors import PolyspecInputError, as_int, as_real

from .decoder import POLICY, PolybasicDecoder, autoregressive
from .models import DecoderModel, load_model
from .traces import TraceRecords, TraceWriter, read_records

__all__ = ["capture", "make_prompts", "cost_curve_records", "iter_cost_curve", "default_name",
           "resume_point", "recorded_cost_cells", "check_name", "COST_M"]

COST_M = tuple(range(1, 17))
_FINGERPRINT = ("cascade", "temperature", "top_k", "seed", "prompts", "dtype", "device",
                "threads", "cost_curve", "tree_sampling")


def default_name(models, thresholds, temperature, top_k=0, tree=None, schedules=None,
                 tree_sampling="distinct") -> str:
    """``<models>_th<thresholds>_T<temperature>[_k<top_k>]`` plus, for structured captures,
    ``_tree<N>n<D>d<digest>[iid]`` and ``_hf<start>-<min>-<max>`` / ``_conf<eta>[-<max>]`` per
    scheduled pair (``p<i>`` before it when not the bottom pair)."""
    names = [Path(m).stem if ("/" in m or m.endswith(".safetensors")) else m.replace(":", "")
             for m in models]
    t = f"{temperature:g}".replace(".", "p")
    s = f"{'-'.join(names)}_th{'-'.join(str(x) for x in thresholds)}_T{t}"
    s += f"_k{top_k}" if top_k else ""
    if tree is not None:
        dig = hashlib.sha256(",".join(map(str, tree.parents)).encode()).hexdigest()[:6]
        s += f"_tree{tree.n_nodes}n{tree.max_depth}d{dig}" + ("iid" if tree_sampling == "iid"
                                                              else "")
    for i, sc in enumerate(schedules or ()):
        if sc is None:
            continue
        pre = "" if i == len(thresholds) - 1 else f"p{i}"
        if sc.kind == "hf":
            s += f"_{pre}hf{sc.start}-{sc.min}-{sc.max}"
        else:
            s += f"_{pre}conf{sc.eta:g}".replace(".", "p") + (
                f"-{sc.max}" if sc.max is not None else "")
    return s


def make_prompts(n_prompts: int, prompt_len: int, seed: int, tokenizer=None):
    """``n_prompts`` prompts of ``prompt_len`` tokens from the validation split (line
    starts, no file separator inside); returns (prompts, byte offsets)."""
    from .zoo.data import SEPARATOR, load_split

    n_prompts = as_int(n_prompts, "n_prompts", low=1, high=100000)
    prompt_len = as_int(prompt_len, "prompt_len", low=1)
    data = load_split("val")
    span = prompt_len * (4 if tokenizer is not None else 1)
    rng = np.random.default_rng([seed, 7919])
    offsets, prompts = [], []
    tries = 0
    while len(prompts) < n_prompts:
        tries += 1
        if tries > 100 * n_prompts + 1000:
            raise PolyspecInputError("prompt_len", f"cannot find {n_prompts} windows of "
                                     f"{prompt_len} tokens in the validation split")
        s = int(rng.integers(0, len(data) - span - 256))
        nl = np.flatnonzero(data[s : s + 256] == ord("\n"))
        if len(nl) == 0:
            continue
        s += int(nl[0]) + 1
        win = data[s : s + span]
        if (win == SEPARATOR).any() or s in offsets:
            continue
        if tokenizer is None:
            toks = [int(b) for b in win]
        else:
            toks = list(tokenizer(bytes(win).decode("utf-8", "replace"))["input_ids"])
            if len(toks) < prompt_len:
                continue
            toks = toks[:prompt_len]
        offsets.append(s)
        prompts.append(toks)
    return prompts, offsets


def resume_point(records: TraceRecords) -> tuple[int, bool]:
    """Where ``capture --resume`` continues an interrupted trace (its records as
    :func:`validation.traces.read_records` keeps them): the first prompt without a
    ``summary`` record (prompts run in order, each ends with its summary, so this is the
    number of summaries; that prompt's partial records are discarded by the ``resume``
    record), and whether the start-phase cost curves were recorded."""
    start_prompt = len(records.of_type("summary"))
    have_start_costs = any(c.get("phase") == "start" for c in records.of_type("cost"))
    return start_prompt, have_start_costs


def recorded_cost_cells(records: TraceRecords) -> set:
    """The cost cells ``(model, phase, ctx, m)`` an interrupted trace already holds: a resumed
    capture measures only the others, so that no cell of any model or phase is lost or
    recorded twice, wherever the kill fell."""
    return {(r["model"], r.get("phase"), r["ctx"], r["m"]) for r in records.of_type("cost")}


def _now_fn(device):
    if device.type == "cuda":
        def now():
            torch.cuda.synchronize()
            return time.perf_counter()
        return now
    return time.perf_counter


def cost_curve_records(model: DecoderModel, contexts, repeats: int, filler, phase: str,
                       ms=COST_M, skip=frozenset()) -> list[dict]:
    """T(m) samples: for each context length c and m, ``repeats`` timed forwards scoring m
    new positions with c tokens in the cache (cache rolled back to c between repeats); cells
    ``(c, m)`` in ``skip`` are not measured."""
    return list(iter_cost_curve(model, contexts, repeats, filler, phase, ms, skip))


def iter_cost_curve(model: DecoderModel, contexts, repeats: int, filler, phase: str,
                    ms=COST_M, skip=frozenset()):
    """:func:`cost_curve_records` one record at a time, each yielded as soon as its cell is
    measured (a capture writes it at once: a kill loses at most the cell in progress)."""
    now = _now_fn(model.device)
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


def check_name(name, out) -> str:
    """A trace name that stays inside ``out``: a plain file name, no directory part, not
    absolute, not ``.``/``..``."""
    if not isinstance(name, str) or not name.strip():
        raise PolyspecInputError("name", f"must be a non-empty file name, got {name!r}")
    bad = (name in (".", "..") or "/" in name or "\\" in name or "\0" in name
           or Path(name).is_absolute() or name.startswith("~"))
    if not bad:
        target = (Path(out) / f"{name}.jsonl").resolve()
        bad = target.parent != Path(out).resolve()
    if bad:
        raise PolyspecInputError("name", f"must be a plain file name inside --out (no "
                                 f"directory part, not absolute), got {name!r}")
    return name


def _device_name(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _tokenizer_for(loaded, specs):
    if all(lv.vocab_size == 256 for lv in loaded):
        return None
    for lv, spec in zip(loaded, specs, strict=True):
        if lv.kind == "hf":
            try:
                from transformers import AutoTokenizer

                return AutoTokenizer.from_pretrained(spec)
            except (OSError, ValueError):
                continue
    raise PolyspecInputError("models", "models with a non-byte vocabulary need a tokenizer in "
                             "one of the Hugging Face checkpoint directories")



def check_capture_args(models, thresholds, temperature, top_k, max_new_tokens, threads, dtype,
                       cost_repeats):
    """The arguments every capture (single-stream or batched) shares, checked; returns
    ``models, thresholds, temperature, top_k, max_new_tokens, threads, cost_repeats``."""
    models = list(models)
    if len(models) < 2:
        raise PolyspecInputError("models", f"need at least 2 models (target first), got "
                                 f"{len(models)}")
    thresholds = [as_int(t, f"thresholds[{i}]", low=1, high=4096)
                  for i, t in enumerate(thresholds)]
    if len(thresholds) != len(models) - 1:
        raise PolyspecInputError("thresholds", f"need {len(models) - 1} thresholds (one per "
                                 f"adjacent pair), got {len(thresholds)}")
    temperature = as_real(temperature, "temperature", low=0.0, high=100.0)
    top_k = as_int(top_k, "top_k", low=0)
    max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
    threads = as_int(threads, "threads", low=1, high=1024)
    cost_repeats = as_int(cost_repeats, "cost_repeats", low=1, high=1000)
    if dtype not in ("float32", "float16", "bfloat16"):
        raise PolyspecInputError("dtype", f"must be float32, float16 or bfloat16, got {dtype!r}")
    return models, thresholds, temperature, top_k, max_new, threads, cost_repeats


def load_models(models, device, dtype, zoo_dir) -> tuple[torch.device, list[DecoderModel]]:
    """The device and the loaded models, a repeated name made unique (``small#1``)."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PolyspecInputError("device", "CUDA requested but not available")
    loaded = [load_model(m, device=dev, dtype=getattr(torch, dtype), zoo_dir=zoo_dir)
              for m in models]
    seen = {}
    for lv in loaded:
        if lv.name in seen:
            seen[lv.name] += 1
            lv.name = f"{lv.name}#{seen[lv.name]}"
        else:
            seen[lv.name] = 0
    return dev, loaded

def capture(models, thresholds, *, out, temperature=0.0, top_k=0, n_prompts=12,
            prompt_len=64, max_new_tokens=128, seed=0, name=None, resume=False,
            force=False, threads=1, device="cpu", dtype="float32", warmup=2,
            cost_contexts=(32, 96, 160), cost_repeats=3, progress=True, zoo_dir=None,
            ar_models="all", argv=None, tree=None, schedules=None,
            tree_sampling="distinct") -> Path:
    """Run one capture and return the trace path ``<out>/<name>.jsonl``.

    ``tree`` (parents list / text ``"-1,0,0,1"`` / ``{"parents": ...}``): a token tree at the
    bottom pair; ``schedules``: one entry per pair (``None``, ``"hf:START:MIN:MAX"``,
    ``"confidence:ETA[:MAX]"`` or config objects); ``tree_sampling``: ``"distinct"`` or
    ``"iid"`` (:mod:`validation.tree_decoder`). The header's cascade then carries ``trees`` /
    ``schedules`` in the config format and the rounds of those pairs their optional fields
    (:mod:`validation.schema`)."""
    models, thresholds, temperature, top_k, max_new, threads, cost_repeats = check_capture_args(
        models, thresholds, temperature, top_k, max_new_tokens, threads, dtype, cost_repeats)
    if ar_models not in ("all", "target"):
        raise PolyspecInputError("ar_models", f"must be 'all' or 'target', got {ar_models!r}")
    from .tree_decoder import TREE_SAMPLING, parse_schedule, parse_tree

    m_pairs = len(models) - 1
    tree_obj = None if tree is None else parse_tree(tree)
    if schedules is not None:
        if isinstance(schedules, (str, dict)) or len(schedules) != m_pairs:
            raise PolyspecInputError("schedules", f"need one entry per adjacent pair "
                                     f"({m_pairs}), null for none")
        schedules = [None if sc is None else parse_schedule(sc, f"schedules[{i}]")
                     for i, sc in enumerate(schedules)]
        if all(sc is None for sc in schedules):
            schedules = None
    if tree_sampling not in TREE_SAMPLING:
        raise PolyspecInputError("tree_sampling", f"must be one of {TREE_SAMPLING}, got "
                                 f"{tree_sampling!r}")
    structured = tree_obj is not None or schedules is not None
    torch.set_num_threads(threads)
    name = check_name(name if name is not None else
                      default_name(models, thresholds, temperature, top_k, tree_obj, schedules,
                                   tree_sampling), out)
    path = Path(out) / f"{name}.jsonl"
    if path.exists() and not (resume or force):
        raise PolyspecInputError("out", f"{path} exists: pass --resume to continue it or "
                                 "--force to overwrite")

    dev, loaded = load_models(models, device, dtype, zoo_dir)
    tok = _tokenizer_for(loaded, models)
    prompts, offsets = make_prompts(n_prompts, prompt_len, seed, tok)
    sha = hashlib.sha256(json_bytes(prompts)).hexdigest()[:16]
    maxlen = min((lv.max_len for lv in loaded if lv.max_len is not None), default=None)
    # a tree's verifier scores N + 1 positions: time T(m) up to there when it exceeds 16
    cost_m = (COST_M if tree_obj is None or tree_obj.n_nodes + 1 <= max(COST_M)
              else tuple(range(1, tree_obj.n_nodes + 2)))
    contexts = [int(c) for c in cost_contexts if maxlen is None or c + max(cost_m) <= maxlen]
    from .zoo.data import corpus_digest

    header = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "tool": "polyspec capture",
        "argv": list(argv) if argv is not None else None,
        "models": [lv.describe() for lv in loaded],
        "dtype": dtype, "device": dev.type, "device_name": _device_name(dev),
        "torch": torch.__version__, "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
        "cascade": {"name": name, "models": [{"name": lv.name} for lv in loaded],
                    "thresholds": thresholds, "acceptance": None, "policy": POLICY},
        "temperature": temperature, "top_k": top_k, "seed": int(seed),
        "prompts": {"source": "stdlib validation split" if tok is None else
                    "stdlib validation split, HF tokenizer", "n_prompts": n_prompts,
                    "prompt_len": prompt_len, "max_new_tokens": max_new,
                    "offsets": offsets, "sha256": sha, "corpus_digest": corpus_digest()},
        "cost_curve": {"m": list(cost_m), "contexts": contexts, "repeats": cost_repeats},
        "ar_models": ar_models, "time_base": "seconds", "prefill": "excluded",
    }
    if structured:
        header["cascade"]["trees"] = (None if tree_obj is None
                                      else [None] * (m_pairs - 1) + [tree_obj.to_config()])
        header["cascade"]["schedules"] = (None if schedules is None else
                                          [None if sc is None else sc.to_config()
                                           for sc in schedules])
        if tree_obj is not None:
            header["tree_sampling"] = tree_sampling
        if schedules is not None and any(sc is not None and sc.kind == "hf"
                                          for sc in schedules):
            header["schedule_restart"] = "prompt"
    if structured:
        from .tree_decoder import StructuredDecoder

        dec = StructuredDecoder(loaded, thresholds, tree=tree_obj, schedules=schedules,
                                tree_sampling=tree_sampling, temperature=temperature,
                                top_k=top_k, seed=seed)
    else:
        dec = PolybasicDecoder(loaded, thresholds, temperature=temperature, top_k=top_k,
                               seed=seed)
    start_prompt, done_cells = 0, set()
    if path.exists() and resume and b"\n" not in path.read_bytes():
        resume = False  # killed before the header was written: nothing to keep
    if path.exists() and resume:
        old = read_records(path, allow_truncated=True)
        diff = [k for k in _FINGERPRINT if old.header.get(k) != header.get(k)]
        if diff:
            raise PolyspecInputError("resume", f"{path} was captured with different "
                                     f"settings ({', '.join(diff)}); use --force or another "
                                     "--name")
        if old.complete:
            return path
        start_prompt, _ = resume_point(old)
        done_cells = recorded_cost_cells(old)
        writer = TraceWriter(path, append=True)
        writer.write({"type": "resume", "next_prompt": start_prompt,
                      "at": datetime.now(UTC).isoformat(timespec="seconds")})
    else:
        writer = TraceWriter(path, header)

    def cost_curves(phase):
        # only the cells not recorded yet, per model and phase (a resumed capture)
        for lv in loaded:
            skip = {(c, m) for (nm, ph, c, m) in done_cells if nm == lv.name and ph == phase}
            for rec in iter_cost_curve(lv, contexts, cost_repeats, filler, phase, cost_m,
                                       skip):
                writer.write(rec)

    ar_loaded = loaded if ar_models == "all" else loaded[:1]
    filler = [t for p in prompts for t in p] * (1 + 256 // max(1, prompt_len))
    t_start = time.perf_counter()
    with writer:
        # warm-up (not recorded)
        for _ in range(max(0, warmup)):
            dec.generate(prompts[0], min(32, max_new))
            for lv in ar_loaded:
                autoregressive(lv, prompts[0], min(16, max_new))
        cost_curves("start")
        bar = _progress(range(start_prompt, n_prompts), progress, name)
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
                    writer.write({"type": "ar", "prompt": k, "model": lv.name,
                                  "n_tokens": len(r.tokens), "wall_s": round(r.wall_s, 7),
                                  "forward_s": round(r.forward_s, 7),
                                  "prefill_s": round(r.prefill_s, 7), "ctx0": len(prompt),
                                  "step_s": [round(s, 7) for s in r.step_s]})
                    res[lv.name] = r
                return res

            if k % 2 == 0:
                cres = run_cascade()
                ares = run_ar()
            else:
                ares = run_ar()
                cres = run_cascade()
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
                      "wall_s": round(time.perf_counter() - t_start, 3)})
    return path


def json_bytes(obj) -> bytes:
    import json

    return json.dumps(obj, separators=(",", ":")).encode()


def _progress(it, enabled, name):
    if not enabled:
        return it
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return it
    return tqdm(it, desc=name, unit="prompt", file=sys.stderr, leave=True)
