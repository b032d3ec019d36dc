"""``polyspec forecast``: predict the speedup a capture of a configuration will measure, before
capturing it (acceptance from the committed captures, costs from a composition profile), with
a prediction interval calibrated on the leave-one-out errors of the committed captures."""

from __future__ import annotations

HELP = ("Predict the measured speedup of a configuration before capturing it: acceptance per "
        "prompt from the captures in --traces, in-cascade costs from a composition profile "
        "(polyspec profile --cascade), with a calibrated 95 % prediction interval.")


def add_arguments(p):
    p.add_argument("--traces", metavar="DIR",
                   help="committed captures (the same prompts as the capture to predict)")
    p.add_argument("--models", help="comma-separated models, target first")
    p.add_argument("--thresholds", help="comma-separated θ per adjacent pair")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--profile", metavar="FILE.json",
                   help="composition profile of this cascade (polyspec profile --cascade; "
                        "chains)")
    from .forecast_kinds import add_kind_arguments

    add_kind_arguments(p)
    p.add_argument("--profiles", default=None, metavar="DIR",
                   help="profiles of the committed captures, for the interval (default: "
                        "DIR/profiles)")
    p.add_argument("--lookahead", type=int, default=None, metavar="K",
                   help="external GPU traces (PipeSpec folder): the decoder's lookahead, one K "
                        "for every level; replaces --thresholds/--profile")
    p.add_argument("--dtype", default=None, metavar="MODEL=DTYPE,...",
                   help="with --lookahead: precision per model (default: its greedy run's)")
    p.add_argument("--mode", default=None, choices=("sync", "async"),
                   help="with --lookahead: the decoder: synchronous chain (default) or the "
                        "asynchronous pipeline (docs/theory.md Part VI-AS; lookahead 0 = "
                        "verify what is ready)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from .gpu import add_forecast_arguments

    add_forecast_arguments(p)


def run(args) -> int:
    if args.rows is not None:  # GPU-table rows before they run (validation.hardware)
        from .gpu import run_forecast as run_rows

        return run_rows(args)
    from .common import refuse_options

    refuse_options((("--acceptance-from", args.acceptance_from),), "only applies with --rows")
    return _run(args)


def _run(args) -> int:
    from pathlib import Path

    from polyspec_theory.errors import PolyspecInputError, as_real
    from validation.analysis.forecast import (
        Config,
        count_factors,
        error_quantile,
        forecast,
        loo_errors,
    )
    from validation.analysis.score import loo_coverage
    from validation.capture.composition import CompositionProfile, load_profiles
    from validation.capture.models import model_name
    from validation.files import dump_json, read_mapping
    from validation.traces.records import read_traces

    from .forecast_kinds import run_kind

    if args.lookahead is not None:  # a folder of PipeSpec runs
        if args.traces is None or args.models is None:
            raise PolyspecInputError("--traces" if args.traces is None else "--models",
                                     "required with --lookahead")
        for opt, val in (("--tree", args.tree), ("--batch", args.batch),
                         ("--schedule", args.schedule), ("--score", args.score),
                         ("--thresholds", args.thresholds), ("--profile", args.profile),
                         ("--profiles", args.profiles), ("--name", args.name),
                         ("--batch-profile", args.batch_profile),
                         ("--laws-from", args.laws_from),
                         ("--temperature", args.temperature != 0.0 or None)):
            if val is not None:
                raise PolyspecInputError(opt, "does not apply with --lookahead (a GPU trace "
                                         "forecast: a greedy chain of the measured models at "
                                         "lookahead K)")
        return _run_lookahead(args.traces, args.models, args.lookahead, args.dtype, args.mode,
                              args.json)
    for opt, val in (("--mode", args.mode), ("--dtype", args.dtype)):
        if val is not None:
            raise PolyspecInputError(opt, "only applies with --lookahead K (GPU trace "
                                     "forecasts)")
    if args.score or args.tree or args.schedule or args.batch:
        return run_kind(args)
    for opt in ("traces", "models", "thresholds", "profile"):
        if getattr(args, opt) is None:
            raise PolyspecInputError(f"--{opt}", "required (or --score FILE)")
    models = [model_name(m.strip()) for m in args.models.split(",") if m.strip()]
    try:
        th = [int(x) for x in args.thresholds.split(",") if x.strip()]
    except ValueError:
        raise PolyspecInputError("--thresholds", f"expected comma-separated integers, got "
                                 f"{args.thresholds!r}") from None
    temp = as_real(args.temperature, "--temperature", low=0.0)
    prof = CompositionProfile.from_dict(read_mapping(Path(args.profile)),
                                       f"--profile: {args.profile}")
    if prof.models != models or prof.thresholds != th:
        raise PolyspecInputError("--profile", f"is of {prof.models} {prof.thresholds}, not of "
                                 f"{models} {th}")
    caps = read_traces(args.traces)
    if any(c.models == tuple(models) and c.thresholds == tuple(th) and c.temperature == temp
           for c in caps):
        raise PolyspecInputError("--models", "this configuration is already captured in "
                                 f"{args.traces}: forecast a new one (validate predicts the "
                                 "committed ones)")
    fc = forecast(Config(models, th, temp), caps, prof.cost_curves(), prof.ar_s,
                  count_factor=count_factors(len(models), temp, caps))
    pdir = Path(args.profiles) if args.profiles else Path(args.traces) / "profiles"
    errs = loo_errors(caps, load_profiles(pdir, caps), temperature=temp)
    q = error_quantile(list(errs.values())) if errs else None
    out = {**fc.to_dict(),
           "interval95": None if q is None else [fc.speedup * (1 - q), fc.speedup * (1 + q)],
           "interval_from": {"loo_errors": len(errs), "quantile": q,
                             "loo_coverage": loo_coverage(errs.values()),
                             "method": "split-conformal order statistic of the leave-one-out "
                                       "|relative errors| of the captures at this temperature"},
           "profile": str(args.profile), "traces": str(args.traces),
           "kind": "chain", "levels": len(models), "batch": 1}
    if args.name:
        out["name"] = args.name
    if args.json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    print(f"{' <- '.join(models)} θ={th} T={temp:g}: forecast speedup {fc.speedup:.3f}"
          + ("" if iv is None else f", 95 % prediction interval [{iv[0]:.3f}, {iv[1]:.3f}] "
             f"(from {len(errs)} leave-one-out errors; leave-one-out coverage "
             f"{out['interval_from']['loo_coverage']['coverage']:.0%})"))
    print(f"  time per token {1e3 * fc.time_per_token:.4f} ms (forwards "
          f"{1e3 * fc.forward_time_per_token:.4f} + overhead "
          f"{1e3 * fc.overhead_per_token:.4f}); autoregressive {1e3 * fc.ar_time_per_token:.4f}")
    print(f"  acceptance from {len(fc.acceptance_from)} capture(s): "
          + ", ".join(fc.acceptance_from))
    return 0


def parse_dtypes(text) -> dict[str, str]:
    """``MODEL=DTYPE,...`` -> ``{model: dtype}``."""
    from polyspec_theory.errors import PolyspecInputError

    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise PolyspecInputError("--dtype", f"expected MODEL=DTYPE, got {part!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if not k or not v:
            raise PolyspecInputError("--dtype", f"expected MODEL=DTYPE, got {part!r}")
        out[k] = v
    return out


def _run_lookahead(traces, models_target_first: str, lookahead, dtypes, mode, as_json) -> int:
    """``forecast --lookahead K`` on a folder of PipeSpec runs: the chain (``--mode sync``)
    or the pipeline (``async``) of the named models, target first."""
    from polyspec_theory.errors import PolyspecInputError
    from validation.files import dump_json
    from validation.gpu_traces.async_forecast import forecast_async_dir
    from validation.gpu_traces.forecast import forecast_dir

    if mode not in (None, "sync", "async"):
        raise PolyspecInputError("--mode", f"must be 'sync' or 'async', got {mode!r}")
    names = [m.strip() for m in models_target_first.split(",") if m.strip()]
    if len(names) < 2:
        raise PolyspecInputError("--models", "needs at least two models, target first")
    unknown = sorted(set(parse_dtypes(dtypes)) - set(names))
    if unknown:
        raise PolyspecInputError("--dtype", f"names {', '.join(unknown)}, not one of the "
                                 f"--models {', '.join(names)}")
    run = forecast_async_dir if mode == "async" else forecast_dir  # docs/theory.md Part VI-AS
    out = run(traces, tuple(reversed(names)), lookahead, parse_dtypes(dtypes))
    if as_json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    names = list(reversed(out.get("models_resolved", names[::-1])))
    print(f"{' <- '.join(names)} lookahead {out['lookahead']}: forecast speedup "
          f"{out['speedup']:.3f}, 95 % interval [{iv[0]:.3f}, {iv[1]:.3f}]")
    for line in out["acceptance_source"] + out["cost_source"]:
        print(f"  {line}")
    return 0
