"""``polyspec profile``: measure ``T(m)`` per model on this device and write cost tables.

For each model (a zoo level, a zoo ``.safetensors`` file or a Hugging Face checkpoint
directory) the time of one forward scoring ``m`` new positions, ``m = 1..max_m``, is measured
``repeats`` times with ``context`` tokens already in the KV cache (after ``warmup`` untimed
forwards), and summarized by its median per ``m``
(:func:`polyspec_theory.core.costs.fit_cost_curve`:
timing noise is heavy-tailed) and an affine fit. The output's ``models`` entries have the
config syntax (``{"name", "cost": {"table": [...]}}``) in ``time_unit`` (default ms), ready
to paste into a cascade config or a pool, or to give ``polyspec calibrate`` known costs.

The level loading and the timed forwards are those of the capture
(:func:`validation.capture.models.load_model`,
:func:`validation.capture.single.cost_curve_records`); this
module is the only place that uses them for profiling.
"""

from __future__ import annotations

import platform
import re
import time
from typing import NamedTuple

import numpy as np

from polyspec_theory.core.costs import fit_cost_curve
from polyspec_theory.errors import PolyspecInputError, as_int

__all__ = ["profile_models", "ProfileSpec", "UNITS"]

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


def _filler(vocab_size: int, n: int, seed: int = 0) -> list[int]:
    """Tokens to fill the cache: bytes of the zoo's validation text for byte-level models,
    seeded random ids otherwise (the cost of a forward does not depend on the ids)."""
    if vocab_size == 256:
        try:
            from validation.zoo.data import load_split

            data = load_split("val")
            return [int(b) for b in data[:n]]
        except (OSError, FileNotFoundError):
            pass
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, vocab_size, size=n)]


def cpu_name() -> str:
    """This machine's CPU model name (``/proc/cpuinfo``), what profiles and captures record
    as their device."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class ProfileSpec(NamedTuple):
    """How :func:`profile_models` times: positions ``1..max_m``, ``repeats`` timed forwards
    (median) after ``warmup`` untimed ones, ``context`` cached tokens, on ``device`` in
    ``dtype`` with ``threads`` torch threads, times in ``unit``; ``batches``: batch sizes for
    ``T(b, m)`` tables (1 among them), ``None`` for single-stream tables."""

    max_m: int = 8
    repeats: int = 5
    context: int = 64
    warmup: int = 2
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None
    unit: str = "ms"
    zoo_dir: str | None = None
    batches: tuple | None = None

    @classmethod
    def of(cls, options: dict) -> ProfileSpec:
        """A spec from keyword options; an unknown one is refused, naming it."""
        unknown = sorted(set(options) - set(cls._fields))
        if unknown:
            raise PolyspecInputError(unknown[0], f"not a profile option (options: "
                                     f"{', '.join(cls._fields)})")
        return cls(**options)


class _Timing(NamedTuple):
    max_m: int
    ms: tuple
    repeats: int
    context: int
    warmup: int
    torch_dtype: object
    scale: float


def _check_timing_args(spec: ProfileSpec) -> _Timing:
    """The options both timers share, checked (threads applied): the positions timed
    ``1..max_m``, the torch dtype, the unit scale."""
    import torch

    max_m = as_int(spec.max_m, "--max-m", low=1, high=512)
    repeats = as_int(spec.repeats, "--repeats", low=1, high=10_000)
    context = as_int(spec.context, "--context", low=0, high=1_000_000)
    warmup = as_int(spec.warmup, "--warmup", low=0, high=1000)
    if spec.unit not in UNITS:
        raise PolyspecInputError("--unit", f"must be one of {', '.join(UNITS)}, got "
                                 f"{spec.unit!r}")
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if spec.dtype not in dtypes:
        raise PolyspecInputError("--dtype", f"must be one of {', '.join(dtypes)}")
    device = spec.device
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise PolyspecInputError("--device", f"must be cpu or cuda[:i], got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolyspecInputError("--device", "CUDA is not available on this machine")
    if spec.threads is not None:
        torch.set_num_threads(as_int(spec.threads, "--threads", low=1, high=1024))
    return _Timing(max_m, tuple(range(1, max_m + 1)), repeats, context, warmup,
                   dtypes[spec.dtype], UNITS[spec.unit])


def _device_name(device: str) -> str:
    import torch

    return (torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda")
            else cpu_name())


def profile_models(specs, spec: ProfileSpec | None = None, progress=None) -> dict:
    """Measured cost tables of the models ``specs`` (see the module docstring), timed as
    ``spec`` says. With ``spec.batches`` (batch sizes, 1 among them): ``T(b, m)`` per batch
    size from batched forwards (:func:`validation.capture.batch.batch_cost_records`: ``b``
    slots with ``context`` cached tokens each), written as ``{"batch_table": {"1": [...],
    "2": [...], ...}}`` costs."""
    import torch

    spec = ProfileSpec() if spec is None else spec
    if spec.batches is not None:
        return _profile_batches(specs, spec, progress)

    from validation.capture.single import cost_curve_records

    if isinstance(specs, str) or not specs:
        raise PolyspecInputError("models", "give at least one model")
    tm = _check_timing_args(spec)
    out = []
    for name in specs:
        t0 = time.perf_counter()
        level = _load(name, tm.context + tm.max_m, spec.device, tm.torch_dtype, spec.zoo_dir)
        filler = _filler(level.vocab_size, tm.context + tm.max_m)
        if tm.warmup:
            cost_curve_records(level, [tm.context], tm.warmup, filler, "warmup", tm.ms)
        recs = cost_curve_records(level, [tm.context], tm.repeats, filler, "profile", tm.ms)
        m_all = np.concatenate([[r["m"]] * len(r["times_s"]) for r in recs])
        t_all = np.concatenate([r["times_s"] for r in recs])
        fit = fit_cost_curve(m_all, t_all, name=level.name)
        table = [float(x) * tm.scale for x in fit.table]
        out.append({
            "name": level.name,
            "source": name,
            "params": int(level.params),
            "cost": {"table": table},
            "affine": {"base": fit.base * tm.scale,
                       "per_token": max(fit.per_token, 0.0) * tm.scale},
            "residual_rel_sd": fit.residual_rel_sd,
            "lack_of_fit_p": fit.lack_of_fit_p,
            "preferred": fit.preferred_kind,
            "repeats": tm.repeats,
            "seconds": time.perf_counter() - t0,
        })
        if progress is not None:
            progress(name, out[-1])
    first = out[0]["cost"]["table"][0]
    for o in out:
        o["relative_to_first"] = [x / first for x in o["cost"]["table"]] if first > 0 else None
    return {
        "time_unit": spec.unit,
        "device": _device_name(spec.device),
        "torch_device": spec.device,
        "dtype": spec.dtype,
        "threads": torch.get_num_threads(),
        "context": tm.context,
        "max_m": tm.max_m,
        "repeats": tm.repeats,
        "warmup": tm.warmup,
        "statistic": "median of the repeats per m (fit_cost_curve); affine: least squares",
        "models": out,
    }


def _load(spec, positions: int, device, torch_dtype, zoo_dir):
    """The model ``spec``, refused when it holds fewer than ``positions`` positions."""
    from validation.capture.models import load_model

    level = load_model(spec, device=device, dtype=torch_dtype, zoo_dir=zoo_dir)
    if level.max_len is not None and positions > level.max_len:
        raise PolyspecInputError("--context", f"{spec}: context + max_m = {positions} exceeds "
                                 f"the model's {level.max_len} positions")
    return level


def _profile_batches(specs, spec: ProfileSpec, progress) -> dict:
    import torch

    from validation.capture.batch import MAX_CAPTURE_BATCH, CostCells, batch_cost_records
    from validation.capture.batch_models import batch_level

    batches = spec.batches
    if isinstance(specs, str) or not specs:
        raise PolyspecInputError("models", "give at least one model")
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise PolyspecInputError("--batch", f"must be a list of batch sizes, got {batches!r}")
    bs = sorted({as_int(b, "--batch", low=1, high=MAX_CAPTURE_BATCH) for b in batches})
    if 1 not in bs:
        raise PolyspecInputError("--batch", f"must include 1 (a batch_table's single-stream "
                                 f"row), got {bs}")
    tm = _check_timing_args(spec)
    out = []
    for name in specs:
        t0 = time.perf_counter()
        level = batch_level(_load(name, tm.context + tm.max_m, spec.device, tm.torch_dtype,
                                  spec.zoo_dir))
        filler = _filler(level.vocab_size, tm.context + tm.max_m)
        rows, affine = {}, {}
        for b in bs:
            if tm.warmup:
                batch_cost_records(level, b, filler, "warmup",
                                   CostCells([tm.context], tm.warmup, tm.ms))
            recs = batch_cost_records(level, b, filler, "profile",
                                      CostCells([tm.context], tm.repeats, tm.ms))
            m_all = np.concatenate([[r["m"]] * len(r["times_s"]) for r in recs])
            t_all = np.concatenate([r["times_s"] for r in recs])
            fit = fit_cost_curve(m_all, t_all, name=level.name)
            rows[str(b)] = [float(x) * tm.scale for x in fit.table]
            affine[str(b)] = {"base": fit.base * tm.scale,
                              "per_token": max(fit.per_token, 0.0) * tm.scale,
                              "residual_rel_sd": fit.residual_rel_sd}
        out.append({"name": level.name, "source": name, "params": int(level.params),
                    "cost": {"batch_table": rows}, "batch_affine": affine,
                    "repeats": tm.repeats, "seconds": time.perf_counter() - t0})
        if progress is not None:
            progress(name, out[-1])
    return {"time_unit": spec.unit, "device": _device_name(spec.device),
            "torch_device": spec.device, "dtype": spec.dtype,
            "threads": torch.get_num_threads(), "context": tm.context, "max_m": tm.max_m,
            "batches": bs, "repeats": tm.repeats, "warmup": tm.warmup,
            "statistic": "median of the repeats per (b, m) (fit_cost_curve); b slots with "
                         "`context` cached tokens each score m positions",
            "models": out}
