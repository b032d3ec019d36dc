"""What a capture runs (:class:`CaptureSpec`) and the set-up every capture shares, single-stream
(:mod:`validation.capture.single`) or batched (:mod:`validation.capture.batch`): the checked spec,
trace names, prompts, loaded models, the header's common part, and the trace opened fresh
or resumed after an interruption (:func:`open_trace`).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from polyspec_theory.schemes import DEFAULT_MODE, scheme_named, threshold_floor
from validation.schemes import torch  # on first use: a spec is checked without it
from validation.traces.records import TraceRecords, TraceWriter, read_records

__all__ = ["CaptureSpec", "COST_M", "default_name", "make_prompts", "check_name",
           "trace_path", "load_models", "tokenizer_for", "device_name", "capture_header",
           "open_trace", "OpenedTrace", "resume_point", "recorded_cost_cells", "json_bytes",
           "progress_bar", "now_iso", "model_name"]

COST_M = tuple(range(1, 17))
DTYPES = ("float32", "float16", "bfloat16")
AR_MODELS = ("all", "target")


class CaptureSpec(NamedTuple):
    """One capture's settings (``polyspec capture`` builds it from its flags): the cascade
    (``models`` target first, ``thresholds`` one per adjacent pair), sampling, prompts, the
    machine and the cost-curve protocol. ``None`` stands for the kind's default: ``n_prompts``
    12 single-stream, 48 batched; ``warmup`` 2 / 1; ``ar_models`` ``"all"`` / ``"target"`` (a
    batched capture runs the target's baseline only). ``tree`` (parents list, text
    ``"-1,0,0,1"`` or ``{"parents": ...}``), ``schedules`` (one entry per pair: ``None``,
    ``"hf:START:MIN:MAX"``, ``"confidence:ETA[:MAX]"`` or a config object) and
    ``tree_sampling`` (``"distinct"`` / ``"iid"``) are single-stream only
    (:mod:`validation.schemes.structured`). ``load_check``: the refusal check the command ran
    before the capture (:func:`validation.capture.machine.check_load`), recorded in the header
    (``None``: none ran)."""

    models: list
    thresholds: list
    temperature: float = 0.0
    top_k: int = 0
    n_prompts: int | None = None
    prompt_len: int = 64
    max_new_tokens: int = 128
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    warmup: int | None = None
    cost_contexts: tuple = (32, 96, 160)
    cost_repeats: int = 3
    ar_models: str | None = None
    zoo_dir: str | None = None
    tree: object = None
    schedules: object = None
    tree_sampling: str = "distinct"
    load_check: dict | None = None
    mode: str = DEFAULT_MODE
    queue: int | None = None
    cores: tuple | None = None
    batches: tuple | None = None

    @property
    def scheme(self) -> str:
        """The scheme this capture runs: the theory's decision on its mode, structures and
        serving batch (:func:`polyspec_theory.schemes.scheme_named`)."""
        return scheme_named(self.mode, structured=self.structured, batch=self.batches)

    def checked(self, batched: bool | None = None) -> CaptureSpec:
        """This spec with every field checked (errors name the field) and the defaults of
        its kind filled in (``batched``: a batched capture's, by default when ``batches`` is
        set); ``tree`` and ``schedules`` parsed (all-``None`` schedules become ``None``)."""
        batched = self.batches is not None if batched is None else batched
        models = list(self.models)
        if len(models) < 2:
            raise PolyspecInputError("models", f"need at least 2 models (target first), got "
                                     f"{len(models)}")
        floor = threshold_floor(self.mode)  # the theory's (async: 0, verify what is ready)
        thresholds = [as_int(t, f"thresholds[{i}]", low=floor, high=4096)
                      for i, t in enumerate(self.thresholds)]
        if len(thresholds) != len(models) - 1:
            raise PolyspecInputError("thresholds", f"need {len(models) - 1} thresholds (one "
                                     f"per adjacent pair), got {len(thresholds)}")
        temperature = as_real(self.temperature, "temperature", low=0.0, high=100.0)
        top_k = as_int(self.top_k, "top_k", low=0)
        max_new = as_int(self.max_new_tokens, "max_new_tokens", low=1)
        threads = as_int(self.threads, "threads", low=1, high=1024)
        cost_repeats = as_int(self.cost_repeats, "cost_repeats", low=1, high=1000)
        if self.dtype not in DTYPES:
            raise PolyspecInputError("dtype", f"must be float32, float16 or bfloat16, got "
                                     f"{self.dtype!r}")
        n_prompts = as_int(self.n_prompts if self.n_prompts is not None
                           else 48 if batched else 12, "n_prompts", low=1, high=100000)
        warmup = as_int(self.warmup if self.warmup is not None else 1 if batched else 2,
                        "warmup", low=0, high=1000)
        ar_models = self.ar_models if self.ar_models is not None else (
            "target" if batched else "all")
        if ar_models not in AR_MODELS or (batched and ar_models != "target"):
            raise PolyspecInputError("ar_models", ("a batched capture times the target's "
                                     "baseline only: must be 'target'" if batched else
                                     "must be 'all' or 'target'") + f", got {ar_models!r}")
        from validation.schemes.structured import TREE_SAMPLING, parse_schedule, parse_tree

        if batched and (self.tree is not None or self.schedules is not None):
            raise PolyspecInputError("tree" if self.tree is not None else "schedules",
                                     "batched captures run chains only (no tree, no schedule)")
        tree = None if self.tree is None else parse_tree(self.tree)
        schedules = self.schedules
        if schedules is not None:
            m_pairs = len(models) - 1
            if isinstance(schedules, (str, dict)) or len(schedules) != m_pairs:
                raise PolyspecInputError("schedules", f"need one entry per adjacent pair "
                                         f"({m_pairs}), null for none")
            schedules = [None if sc is None else parse_schedule(sc, f"schedules[{i}]")
                         for i, sc in enumerate(schedules)]
            if all(sc is None for sc in schedules):
                schedules = None
        if self.tree_sampling not in TREE_SAMPLING:
            raise PolyspecInputError("tree_sampling", f"must be one of {TREE_SAMPLING}, got "
                                     f"{self.tree_sampling!r}")
        return self._replace(
            models=models, thresholds=thresholds, temperature=temperature, top_k=top_k,
            n_prompts=n_prompts, prompt_len=as_int(self.prompt_len, "prompt_len", low=1),
            max_new_tokens=max_new, seed=as_int(self.seed, "seed", low=0), threads=threads,
            warmup=warmup, cost_repeats=cost_repeats, ar_models=ar_models, tree=tree,
            schedules=schedules)

    @property
    def structured(self) -> bool:
        """A tree or a schedule at some pair (a checked spec)."""
        return self.tree is not None or self.schedules is not None

    def name(self) -> str:
        """The default trace name of a checked spec (:func:`default_name`)."""
        return default_name(self.models, self.thresholds, self.temperature, self.top_k,
                            self.tree, self.schedules, self.tree_sampling)


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
    from validation.zoo.data import SEPARATOR, load_split

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


def trace_path(name, out, *, resume: bool, force: bool) -> Path:
    """``<out>/<name>.jsonl`` (``name`` checked); an existing file needs ``resume`` or
    ``force``."""
    path = Path(out) / f"{check_name(name, out)}.jsonl"
    if path.exists() and not (resume or force):
        raise PolyspecInputError("out", f"{path} exists: pass --resume to continue it or "
                                 "--force to overwrite")
    return path


def load_models(models, device, dtype, zoo_dir) -> tuple:
    """The device and the loaded models (:class:`validation.capture.models.DecoderModel`), a
    repeated name made unique (``small#1``)."""
    from validation.capture.models import load_model

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


def tokenizer_for(loaded, specs):
    """The tokenizer of the prompts: ``None`` for byte-level models, else the first Hugging
    Face checkpoint's."""
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


def device_name(device) -> str:
    """The GPU's name, else the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def now_iso() -> str:
    """The current UTC time, to the second (the ``created`` and ``at`` fields)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def capture_header(spec: CaptureSpec, levels, dev=None, *, name, tool, policy,
                   argv=None) -> dict:
    """The header fields every capture of ``spec`` writes first (schema:
    :mod:`validation.traces.schema`) on the device ``dev`` (``None``: a CPU without a name),
    the machine's state and ``spec.load_check`` included
    (:func:`validation.capture.machine.header_fields`); the caller adds its prompts,
    cost-curve protocol and baselines."""
    from validation.capture.machine import header_fields

    return {
        "created": now_iso(),
        "tool": tool,
        "argv": list(argv) if argv is not None else None,
        "models": [lv.describe() for lv in levels],
        "dtype": spec.dtype, "device": "cpu" if dev is None else dev.type,
        "device_name": "" if dev is None else device_name(dev),
        "torch": torch.__version__, "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
        "cascade": {"name": name, "models": [{"name": lv.name} for lv in levels],
                    "thresholds": list(spec.thresholds), "acceptance": None,
                    "policy": policy},
        "temperature": spec.temperature, "top_k": spec.top_k, "seed": int(spec.seed),
        **header_fields(spec.load_check),
    }


def resume_point(records: TraceRecords, batched: bool = False) -> tuple[int, bool]:
    """Where ``capture --resume`` continues an interrupted trace (its records as
    :func:`validation.traces.records.read_records` keeps them): the first prompt (batched: decode)
    without a ``summary`` (``bsummary``) record (they run in order, each ends with its
    summary, so this is the number of summaries; its partial records are discarded by the
    ``resume`` record), and whether the start-phase cost curves were recorded."""
    summary, cost = ("bsummary", "bcost") if batched else ("summary", "cost")
    start = len(records.of_type(summary))
    have_start_costs = any(c.get("phase") == "start" for c in records.of_type(cost))
    return start, have_start_costs


def recorded_cost_cells(records: TraceRecords, batched: bool = False) -> set:
    """The cost cells ``(model, phase, ctx, m)`` an interrupted trace already holds: a resumed
    capture measures only the others, so that no cell of any model or phase is lost or
    recorded twice, wherever the kill fell."""
    return {(r["model"], r.get("phase"), r["ctx"], r["m"])
            for r in records.of_type("bcost" if batched else "cost")}


class OpenedTrace(NamedTuple):
    """A capture's trace, opened: ``writer`` (``None`` when the trace is complete already),
    the first prompt (batched: decode) still to run, the cost cells already recorded."""

    writer: TraceWriter | None
    start: int
    done_cells: set


def open_trace(path: Path, header: dict, *, resume: bool, fingerprint, batch=None):
    """The trace at ``path`` opened for writing: new (``header`` first) or, with ``resume``
    and records there, continued: the ``fingerprint`` fields of its header must equal
    ``header``'s, and a ``resume`` record names where the capture goes on. ``batch``: the
    batch size of a batched capture (decodes of ``batch`` prompts)."""
    if path.exists() and resume and b"\n" not in path.read_bytes():
        resume = False  # killed before the header was written: nothing to keep
    if not (path.exists() and resume):
        return OpenedTrace(TraceWriter(path, header), 0, set())
    old = read_records(path, allow_truncated=True)
    diff = [k for k in fingerprint if old.header.get(k) != header.get(k)]
    if diff:
        raise PolyspecInputError("resume", f"{path} was captured with different settings "
                                 f"({', '.join(diff)}); use --force or another --name")
    if old.complete:
        return OpenedTrace(None, 0, set())
    batched = batch is not None
    start, _ = resume_point(old, batched)
    writer = TraceWriter(path, append=True)
    rec = {"type": "resume", "next_prompt": start * (batch or 1)}
    if batched:
        rec["next_decode"] = start
    rec["at"] = now_iso()
    # the machine when the capture went on, and this attempt's load check (the header kept
    # in the file is the first attempt's)
    from validation.capture.machine import machine_state

    rec["machine"], rec["load_check"] = machine_state(), header.get("load_check")
    writer.write(rec)
    return OpenedTrace(writer, start, recorded_cost_cells(old, batched))


def json_bytes(obj) -> bytes:
    """Compact JSON bytes (the prompts' digest)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def progress_bar(it, enabled, name):
    """``it`` with a tqdm bar on stderr when ``enabled`` (and tqdm is installed)."""
    if not enabled:
        return it
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return it
    return tqdm(it, desc=name, unit="prompt", file=sys.stderr, leave=True)


def alternate(k: int, cascade, baseline):
    """Run ``cascade()`` and ``baseline()`` (the autoregressive runs) on decode ``k``, the
    cascade first on even ``k`` and the baseline first on odd ``k`` (so a slow drift of the
    machine's speed biases neither); returns ``(cascade result, baseline result)``. The one
    run order of every capture (sync, batch, async, composition profile)."""
    if k % 2 == 0:
        first = cascade()
        return first, baseline()
    second = baseline()
    return cascade(), second


def model_name(spec: str) -> str:
    """The name a model spec is loaded and recorded under (in traces, profiles and pools):
    ``ngram:3`` -> ``ngram3``, a ``.safetensors`` file -> its stem, a directory -> its name,
    a zoo name -> itself. Loads nothing."""
    if spec.startswith("ngram:"):
        return spec.replace(":", "")
    p = Path(spec)
    if p.suffix == ".safetensors":
        return p.stem
    return p.name if len(p.parts) > 1 else spec
