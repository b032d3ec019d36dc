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

import numpy as np

from polyspec_theory.core.costs import fit_cost_curve
from polyspec_theory.errors import PolyspecInputError, as_int

__all__ = ["profile_models", "UNITS"]

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


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _check_timing_args(max_m, repeats, context, warmup, unit, dtype, device, threads):
    """The options both timers share, checked (threads applied); returns ``max_m``, the
    positions timed ``1..max_m``, ``repeats, context, warmup``, the torch dtype, the unit
    scale."""
    import torch

    max_m = as_int(max_m, "--max-m", low=1, high=512)
    repeats = as_int(repeats, "--repeats", low=1, high=10_000)
    context = as_int(context, "--context", low=0, high=1_000_000)
    warmup = as_int(warmup, "--warmup", low=0, high=1000)
    if unit not in UNITS:
        raise PolyspecInputError("--unit", f"must be one of {', '.join(UNITS)}, got {unit!r}")
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in dtypes:
        raise PolyspecInputError("--dtype", f"must be one of {', '.join(dtypes)}")
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise PolyspecInputError("--device", f"must be cpu or cuda[:i], got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolyspecInputError("--device", "CUDA is not available on this machine")
    if threads is not None:
        torch.set_num_threads(as_int(threads, "--threads", low=1, high=1024))
    return (max_m, tuple(range(1, max_m + 1)), repeats, context, warmup, dtypes[dtype],
            UNITS[unit])


def profile_models(specs, *, max_m: int = 8, repeats: int = 5, context: int = 64,
                   warmup: int = 2, device: str = "cpu", dtype: str = "float32",
                   threads: int | None = None, unit: str = "ms", zoo_dir=None,
                   progress=None, batches=None) -> dict:
    """Measured cost tables of the models ``specs`` (see the module docstring). With
    ``batches`` (batch sizes, 1 among them): ``T(b, m)`` per batch size from batched forwards
    (:func:`validation.capture.batch.batch_cost_records`: ``b`` slots with ``context`` cached
    tokens each), written as ``{"batch_table": {"1": [...], "2": [...], ...}}`` costs."""
    import torch

    if batches is not None:
        return _profile_batches(specs, batches, max_m=max_m, repeats=repeats,
                                context=context, warmup=warmup, device=device, dtype=dtype,
                                threads=threads, unit=unit, zoo_dir=zoo_dir,
                                progress=progress)

    from validation.capture.single import cost_curve_records

    if isinstance(specs, str) or not specs:
        raise PolyspecInputError("models", "give at least one model")
    max_m, ms, repeats, context, warmup, torch_dtype, scale = _check_timing_args(
        max_m, repeats, context, warmup, unit, dtype, device, threads)
    out = []
    for spec in specs:
        t0 = time.perf_counter()
        level = _load(spec, context + max_m, device, torch_dtype, zoo_dir)
        filler = _filler(level.vocab_size, context + max_m)
        if warmup:
            cost_curve_records(level, [context], warmup, filler, "warmup", ms)
        recs = cost_curve_records(level, [context], repeats, filler, "profile", ms)
        m_all = np.concatenate([[r["m"]] * len(r["times_s"]) for r in recs])
        t_all = np.concatenate([r["times_s"] for r in recs])
        fit = fit_cost_curve(m_all, t_all, name=level.name)
        table = [float(x) * scale for x in fit.table]
        out.append({
            "name": level.name,
            "source": spec,
            "params": int(level.params),
            "cost": {"table": table},
            "affine": {"base": fit.base * scale, "per_token": max(fit.per_token, 0.0) * scale},
            "residual_rel_sd": fit.residual_rel_sd,
            "lack_of_fit_p": fit.lack_of_fit_p,
            "preferred": fit.preferred_kind,
            "repeats": repeats,
            "seconds": time.perf_counter() - t0,
        })
        if progress is not None:
            progress(spec, out[-1])
    first = out[0]["cost"]["table"][0]
    for o in out:
        o["relative_to_first"] = [x / first for x in o["cost"]["table"]] if first > 0 else None
    if device.startswith("cuda"):
        dev = torch.cuda.get_device_name(torch.device(device))
    else:
        dev = _cpu_name()
    return {
        "time_unit": unit,
        "device": dev,
        "torch_device": device,
        "dtype": dtype,
        "threads": torch.get_num_threads(),
        "context": context,
        "max_m": max_m,
        "repeats": repeats,
        "warmup": warmup,
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


def _profile_batches(specs, batches, *, max_m, repeats, context, warmup, device, dtype,
                     threads, unit, zoo_dir, progress) -> dict:
    import torch

    from validation.capture.batch import MAX_CAPTURE_BATCH, batch_cost_records
    from validation.capture.batch_models import batch_level

    if isinstance(specs, str) or not specs:
        raise PolyspecInputError("models", "give at least one model")
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise PolyspecInputError("--batch", f"must be a list of batch sizes, got {batches!r}")
    bs = sorted({as_int(b, "--batch", low=1, high=MAX_CAPTURE_BATCH) for b in batches})
    if 1 not in bs:
        raise PolyspecInputError("--batch", f"must include 1 (a batch_table's single-stream "
                                 f"row), got {bs}")
    max_m, ms, repeats, context, warmup, torch_dtype, scale = _check_timing_args(
        max_m, repeats, context, warmup, unit, dtype, device, threads)
    out = []
    for spec in specs:
        t0 = time.perf_counter()
        level = batch_level(_load(spec, context + max_m, device, torch_dtype, zoo_dir))
        filler = _filler(level.vocab_size, context + max_m)
        rows, affine = {}, {}
        for b in bs:
            if warmup:
                batch_cost_records(level, b, [context], warmup, filler, "warmup", ms)
            recs = batch_cost_records(level, b, [context], repeats, filler, "profile", ms)
            m_all = np.concatenate([[r["m"]] * len(r["times_s"]) for r in recs])
            t_all = np.concatenate([r["times_s"] for r in recs])
            fit = fit_cost_curve(m_all, t_all, name=level.name)
            rows[str(b)] = [float(x) * scale for x in fit.table]
            affine[str(b)] = {"base": fit.base * scale,
                              "per_token": max(fit.per_token, 0.0) * scale,
                              "residual_rel_sd": fit.residual_rel_sd}
        out.append({"name": level.name, "source": spec, "params": int(level.params),
                    "cost": {"batch_table": rows}, "batch_affine": affine,
                    "repeats": repeats, "seconds": time.perf_counter() - t0})
        if progress is not None:
            progress(spec, out[-1])
    dev = (torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda")
           else _cpu_name())
    return {"time_unit": unit, "device": dev, "torch_device": device, "dtype": dtype,
            "threads": torch.get_num_threads(), "context": context, "max_m": max_m,
            "batches": bs, "repeats": repeats, "warmup": warmup,
            "statistic": "median of the repeats per (b, m) (fit_cost_curve); b slots with "
                         "`context` cached tokens each score m positions",
            "models": out}
