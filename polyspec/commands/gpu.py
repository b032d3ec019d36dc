"""The GPU forecasts as options of three commands: ``polyspec profile --gpu``, ``polyspec
forecast --rows``, ``polyspec plan --gpu`` (those command files add the options below and hand
over here; the work is in :mod:`validation.hardware`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError, refuse_options

from .common import require_options, write_and_print_json

__all__ = ["add_profile_arguments", "run_profile", "add_forecast_arguments", "run_forecast",
           "add_plan_arguments", "run_plan", "profile_report", "GpuProfile"]


# ------------------------------------------------------------------------------------------
# profile --gpu
# ------------------------------------------------------------------------------------------
def add_profile_arguments(p) -> None:
    g = p.add_argument_group("a named GPU from the cost database (polyspec[gpu])")
    g.add_argument("--gpu", default=None, metavar="NAME",
                   help="price the forwards on this GPU from aiconfigurator-core's "
                        "per-operation database (h200_sxm, H100, l40s, ...) instead of "
                        "timing them here")
    g.add_argument("--engine", default=None, metavar="NAME",
                   help="with --gpu: the engine whose kernels are priced (vllm, sglang, "
                        "trtllm, nano-PEARL, SSD)")
    g.add_argument("--model", action="append", default=None, metavar="ID|config.json",
                   help="with --gpu: a Hugging Face id or a config.json path (repeatable)")
    g.add_argument("--tp", default=None, metavar="N[,N...]",
                   help="with --gpu: tensor-parallel size, one for all models or one per "
                        "--model (default 1)")
    g.add_argument("--head", default=None, choices=("eagle3", "mtp"),
                   help="with --gpu: price a one-layer draft head of the model's shape")
    g.add_argument("--draft-vocab", type=int, default=None,
                   help="with --head eagle3: the head's draft vocabulary (default 32000)")
    g.add_argument("--attention", default="multi", choices=("multi", "packed"),
                   help="with --gpu: verify attention: m queries per sequence reading its "
                        "cache once (multi), or m independent decode samples (packed, "
                        "nano-PEARL's target)")
    g.add_argument("--engine-correction", action="store_true",
                   help="with --gpu: add the engine correction fitted on the shared GPU "
                        "tables (host time per forward, per sequence; docs/theory.md HW2)")


def GPU_PROFILE_OPTIONS(args):  # noqa: N802 - a table, named like one
    """``(option, given)`` for the options that only apply with ``--gpu``."""
    return (("--engine", args.engine), ("--model", args.model), ("--tp", args.tp),
            ("--head", args.head), ("--draft-vocab", args.draft_vocab),
            ("--attention", args.attention != "multi"),
            ("--engine-correction", args.engine_correction))


def _tp_list(text, n: int) -> list[int]:
    if text is None:
        return [1] * n
    try:
        tps = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise PolyspecInputError("--tp", f"must be comma-separated integers, got "
                                 f"{text!r}") from None
    if len(tps) == 1:
        tps = tps * n
    if len(tps) != n or any(not 1 <= t <= 64 for t in tps):
        raise PolyspecInputError("--tp", f"give one size in 1..64 or one per --model ({n}), "
                                 f"got {text!r}")
    return tps


@dataclass(frozen=True)
class GpuProfile:
    """What ``profile --gpu`` prices: ``gpu``, ``engine``, the batch sizes, ``m = 1..max_m``,
    the KV length ``context``, the ``head`` shape (or ``None``) and the verify ``attention``."""

    gpu: str
    engine: str
    batches: tuple
    max_m: int
    context: int
    head: dict | None = None
    attention: str = "multi"


def profile_report(models, tps, spec: GpuProfile, corrections=None) -> dict:
    """``T(b, m)`` per model in the config's ``batch_table`` cost format, the prefill of
    ``context`` tokens per batch, each number's database tier, and the provenance."""
    from validation.hardware.database import database_version
    from validation.hardware.engines import Corrections, engine_model

    gpu, engine, batches = spec.gpu, spec.engine, spec.batches
    max_m, context, head, attention = spec.max_m, spec.context, spec.head, spec.attention
    c = corrections or Corrections.none()
    out = []
    for name, tp in zip(models, tps, strict=True):
        em = engine_model(name, gpu, engine, tp, c, head=head, field_name="--model")
        table, tiers = {}, {}
        for b in batches:
            row = []
            for m in range(1, max_m + 1):
                if attention == "packed":
                    ms = em.packed(b * m, context, b) if corrections else \
                        em.costs.forward(b * m, 1, context, attention="packed").ms
                else:
                    ms = em.verify(b, m, context) if corrections else \
                        em.costs.forward(b, m, context).ms
                row.append(ms)
            table[str(b)] = row
            fw = em.costs.forward(b, 1, context)
            tiers[str(b)] = sorted(set(fw.tiers.values()))
        prefill = {str(b): (em.prefill(b, context) if corrections else
                            em.costs.prefill(b, context).ms) for b in batches}
        out.append({"name": em.costs.name, "tp": tp, "cost": {"batch_table": table},
                    "prefill_ms": prefill, "database_tiers": tiers,
                    "provenance": em.costs.provenance})
    return {"time_unit": "ms", "gpu": out[0]["provenance"]["system"],
            "engine": engine, "context": context, "max_m": max_m, "attention": attention,
            "device": f"{out[0]['provenance']['system']} (aiconfigurator-core "
                      f"{database_version()} database, {out[0]['provenance']['backend']} "
                      f"{out[0]['provenance']['backend_version']})",
            "construction": "docs/theory.md HW1: GEMMs and the other operations at b*m "
                            "tokens, attention per the 'attention' field, the LM head at b*m "
                            "positions; prefill: the database's own",
            "engine_correction": None if corrections is None else corrections.to_dict(),
            "models": out}


def run_profile(args) -> int:
    from validation.hardware.database import require_database
    from validation.hardware.names import engine_named

    from ..output import check_output

    require_database("--gpu")
    if args.models:
        raise PolyspecInputError("models", "with --gpu give the models as --model ID (the "
                                 "positional models are timed on this machine)")
    require_options((("--model", args.model), ("--engine", args.engine)), "required with --gpu")
    engine_named(args.engine, "--engine")
    refuse_options((("--cascade", args.cascade), ("--device", args.device != "cpu"),
                    ("--threads", args.threads), ("--dtype", args.dtype != "float32"),
                    ("--unit", args.unit != "ms"), ("--repeats", args.repeats != 5),
                    ("--warmup", args.warmup != 2), ("--zoo-dir", args.zoo_dir)),
                   "does not apply with --gpu (nothing is timed here: the database is "
                   "measured on that GPU)")
    if args.draft_vocab is not None and args.head != "eagle3":
        raise PolyspecInputError("--draft-vocab", "only applies with --head eagle3")
    if args.out:
        check_output(args.out, "--out", inputs=[m for m in args.model if Path(m).exists()])
    from polyspec_theory.errors import as_int
    from validation.hardware.fit import load_corrections

    from .common import parse_batches

    batches = parse_batches(args.batch or "1", "--batch")
    if 1 not in batches:
        raise PolyspecInputError("--batch", "must include 1 (a batch_table's single-stream "
                                 "row)")
    max_m = as_int(args.max_m, "--max-m", low=1, high=512)
    context = as_int(args.context, "--context", low=0, high=1 << 20)
    head = None
    if args.head:
        head = {"kind": args.head}
        if args.head == "eagle3":
            head["draft_vocab_size"] = as_int(32000 if args.draft_vocab is None
                                              else args.draft_vocab, "--draft-vocab",
                                              low=1, high=1 << 22)
    c = load_corrections() if args.engine_correction else None
    spec = GpuProfile(args.gpu, args.engine, tuple(batches), max_m, context, head,
                      args.attention)
    rep = profile_report(args.model, _tp_list(args.tp, len(args.model)), spec, c)
    if write_and_print_json(rep, args):
        return 0
    print(f"T(b, m) on {rep['device']}, KV length {context}, {args.attention} attention"
          + (", engine-corrected" if c else ", database kernels only") + ", ms:")
    for m in rep["models"]:
        for b, row in m["cost"]["batch_table"].items():
            print(f"  {m['name']:<28} TP {m['tp']} b = {b:>4}: T(b, 1..{max_m}) = ["
                  + ", ".join(f"{x:.4g}" for x in row) + f"]  prefill({context}) "
                  f"{m['prefill_ms'][b]:.4g}")
    print("config syntax: {\"name\": ..., \"cost\": {\"batch_table\": {...}}} with "
          "\"time_unit\": \"ms\"" + (f"; written to {args.out}" if args.out else ""))
    return 0


# ------------------------------------------------------------------------------------------
# forecast --rows
# ------------------------------------------------------------------------------------------
def add_forecast_arguments(p) -> None:
    g = p.add_argument_group("rows of a GPU table, before they run (polyspec[gpu])")
    g.add_argument("--rows", default=None, metavar="ROWS.json",
                   help="rows in the shared GPU tables' format (settings only; measured "
                        "fields are ignored): forecast each one's speedup, interval and "
                        "throughputs on its named GPU and engine")
    g.add_argument("--acceptance-from", default=None, metavar="TABLE.json",
                   help="with --rows: a measured table of the same model pairs (e.g. another "
                        "GPU's), the acceptance source for rows that carry none")


def run_forecast(args) -> int:
    from validation.hardware.acceptance import AcceptanceLog
    from validation.hardware.database import require_database
    from validation.hardware.fit import load_corrections
    from validation.hardware.forecast import forecast_rows, load_interval
    from validation.hardware.rows import read

    from ..output import dump_json

    require_database("--rows")
    refuse_options([(f"--{o}", getattr(args, f"retired_{o}", None)) for o in ("lookahead",
                                                                                 "gamma")],
                   "does not apply with --rows (a row carries its own settings)")
    refuse_options([(f"--{o.replace('_', '-')}", getattr(args, o, None)) for o in (
        "traces", "models", "thresholds", "profile", "profiles", "dtype", "mode",
        "tree", "schedule", "batch", "score", "name", "batch_profile", "laws_from")],
        "does not apply with --rows (a row carries its own settings)")
    refuse_options((("--temperature", args.temperature != 0.0),),
                   "does not apply with --rows (rows are greedy)")
    rows, refused = read(args.rows, "--rows")
    log = AcceptanceLog.read(args.acceptance_from) if args.acceptance_from else None
    c = load_corrections()
    done, more = forecast_rows(rows, c, log, load_interval())
    refused = refused + more
    out = {"rows": [f.to_dict() for f in done], "refused": [r.to_dict() for r in refused]}
    if args.json:
        print(dump_json(out))
    else:
        print(f"{'id':<72} {'speedup':>8} {'95 % interval':>17} {'AR tok/s':>10} "
              f"{'SD tok/s':>10}")
        for f in done:
            lo, hi = f.interval95
            print(f"{f.id:<72} {f.speedup:8.3f} [{lo:6.3f}, {hi:6.3f}] {f.ar_tok_s:10.1f} "
                  f"{f.sd_tok_s:10.1f}")
        if done:
            print("sources: " + "; ".join(dict.fromkeys(s for f in done for s in
                                                         f.sources[:2])))
    for r in refused:
        print(f"polyspec forecast: refused row {r.id}: {r.reason}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------
# plan --gpu
# ------------------------------------------------------------------------------------------
def add_plan_arguments(p) -> None:
    g = p.add_argument_group("a named GPU before it runs (polyspec[gpu])")
    g.add_argument("--gpu", default=None, metavar="NAME",
                   help="plan on this GPU from the cost database (with --engine and --pool)")
    g.add_argument("--engine", default=None, metavar="NAME",
                   help="with --gpu: the engine (vllm, sglang, nano-PEARL, ...)")
    g.add_argument("--pool", dest="gpu_pool", default=None, metavar="POOL.json",
                   help="with --gpu: the GPU pool: target, drafters, acceptance source, "
                        "lengths, batch sizes (validation/hardware/plan.py)")
    g.add_argument("--figure", default=None, metavar="FILE.png",
                   help="with --gpu: also draw speedup vs batch per candidate, the "
                        "crossover marked")


def run_plan(args) -> int:
    from polyspec.configs import read_config
    from validation.hardware.database import require_database
    from validation.hardware.fit import load_corrections
    from validation.hardware.forecast import gamma_rule, load_interval
    from validation.hardware.names import engine_named
    from validation.hardware.plan import plan_gpu, read_pool

    from ..output import check_output, dump_json

    require_database("--gpu")
    require_options((("--engine", args.engine), ("--pool", args.gpu_pool)), "required with --gpu")
    refuse_options((("pool", args.pool), ("--traces", args.traces),
                    ("--write-config", args.write_config), ("--write-pool", args.write_pool),
                    ("--law", args.law != "best"), ("--horizon", args.horizon),
                    ("--temperature", args.temperature), ("--aa", args.aa),
                    ("--max-threshold", args.max_threshold), ("--no-prune", args.no_prune),
                    ("--allow-truncated", args.allow_truncated)),
                   "does not apply with --gpu (the GPU plan reads its pool from --pool)")
    engine_named(args.engine, "--engine")
    if args.figure:
        check_output(args.figure, "--figure", inputs=[args.gpu_pool])
    c = load_corrections()
    cfg = read_config(args.gpu_pool, "--pool")
    pool = read_pool(cfg, Path(args.gpu_pool).parent, gamma_of=gamma_rule(c),
                     origin=Path(args.gpu_pool).name)
    if args.batch is not None:
        from .common import parse_batches

        pool.batches = sorted(parse_batches(args.batch, "--batch"))
    out = plan_gpu(pool, args.gpu, args.engine, c, load_interval())
    if args.figure:
        from paper_figures.fig13_gpu_plan import draw_file

        draw_file(out, args.figure)
        out["figure"] = str(args.figure)
    if args.json:
        print(dump_json(out))
        return 0
    print(f"{pool.target['name']} (TP {pool.target['tp']}) on {out['gpu']} with "
          f"{out['engine']}, KV ~{out['kv_length']} tokens; speedup over the target's decode "
          "at the same batch, 95 % interval:")
    for r in out["best"]:
        lo, hi = r["interval95"]
        s = r["setting"]
        how = (f"gamma {s['gamma']}" if "gamma" in s else
               f"thresholds {s['thresholds']}" if "thresholds" in s else "")
        print(f"  b = {r['batch']:>4}: {r['best']:<40} {r['speedup']:6.3f} "
              f"[{lo:.3f}, {hi:.3f}] {how}")
    sp = out.get("stops_paying")
    if sp is not None:
        lo, hi = sp["interval95"]
        if sp["batch"] is None:
            print(f"Speculation pays at every batch planned (up to {pool.batches[-1]})"
                  + ("" if lo is None else f"; it may stop from b ~ {lo:.0f} (the interval's "
                     "low end)"))
        else:
            print(f"Speculation stops paying from b ~ {sp['batch']:.0f} (95 %: "
                  f"{'?' if lo is None else f'{lo:.0f}'} .. "
                  f"{'beyond ' + str(pool.batches[-1]) if hi is None else f'{hi:.0f}'})")
    if args.figure:
        print(f"figure written to {args.figure}")
    return 0
