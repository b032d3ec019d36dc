"""``polyspec forecast``: predict the speedup a capture of a configuration will measure, before
capturing it (acceptance from the committed captures, costs from a composition profile), with
a prediction interval calibrated on the leave-one-out errors of the committed captures. A
``--mode`` whose scheme forecasts our captures itself (its module's ``FORECAST_CAPTURES``,
:func:`validation.schemes.command_hook`; the async pipeline) runs that; on a folder of PipeSpec
runs the scheme's ``FORECAST_FOLDER`` runs."""

from __future__ import annotations

from .common import add_mode_argument, add_thresholds_argument, parse_models, thresholds_of

HELP = ("Predict the measured speedup of a configuration before capturing it: acceptance per "
        "prompt from the captures in --traces, in-cascade costs from a composition profile "
        "(polyspec profile --cascade), with a calibrated 95 % prediction interval.")


def add_arguments(p):
    p.add_argument("--traces", metavar="DIR",
                   help="committed captures (the same prompts as the capture to predict)")
    p.add_argument("--models", help="comma-separated models, target first")
    add_thresholds_argument(p, "comma-separated θ per adjacent pair; on a folder of PipeSpec "
                               "runs one θ for every level (their lookahead K = θ + 1; the "
                               "async pipeline's θ = 0: lookahead 0, verify what is ready)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--profile", metavar="FILE.json",
                   help="composition profile of this cascade (polyspec profile --cascade; "
                        "chains), or with --mode async its contention profile (polyspec "
                        "profile --cascade --mode async)")
    p.add_argument("--queue", type=int, default=None,
                   help="--mode async on captures: the drafter's queue bound (as capture "
                        "--mode async)")
    from .forecast_kinds import add_kind_arguments

    add_kind_arguments(p)
    p.add_argument("--profiles", default=None, metavar="DIR",
                   help="profiles of the committed captures, for the interval (default: "
                        "DIR/profiles)")
    p.add_argument("--dtype", default=None, metavar="MODEL=DTYPE,...",
                   help="a folder of PipeSpec runs: precision per model (default: its greedy "
                        "run's)")
    add_mode_argument(p, "a folder of PipeSpec runs: the decoder: synchronous chain (sync, "
                         "default) or the asynchronous pipeline (async: docs/theory.md Part "
                         "VI-AS); on our own captures, async forecasts our two-process "
                         "pipeline (docs/theory.md AS1c; --profile from profile --cascade "
                         "--mode async)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from .gpu import add_forecast_arguments

    add_forecast_arguments(p)


def run(args) -> int:
    if args.rows is not None:  # GPU-table rows before they run (validation.hardware)
        from .gpu import run_forecast as run_rows

        return run_rows(args)
    from polyspec_theory.errors import refuse_options

    refuse_options((("--acceptance-from", args.acceptance_from),), "only applies with --rows")
    return _run(args)


def _run(args) -> int:
    from pathlib import Path

    from polyspec.configs import read_config
    from polyspec_theory.errors import PolyspecInputError, as_real, refuse_options
    from polyspec_theory.schemes import scheme_named
    from validation.analysis.forecast import (
        Config,
        count_factors,
        forecast,
        loo_errors,
    )
    from validation.analysis.score import interval_errors, prediction_interval
    from validation.capture.composition_profile import CompositionProfile, load_profiles
    from validation.capture.model_specs import model_name
    from validation.formats import detect_dir
    from validation.schemes import command_hook
    from validation.traces.records import read_traces

    from ..output import dump_json
    from .common import require_options
    from .forecast_kinds import run_kind

    thresholds_of(args, low=0)  # the retired spellings refused with the conversion
    if args.traces is not None and detect_dir(args.traces) is not None:  # PipeSpec runs
        refuse_options((("--tree", args.tree), ("--batch", args.batch),
                        ("--schedule", args.schedule), ("--score", args.score),
                        ("--profile", args.profile), ("--profiles", args.profiles),
                        ("--name", args.name), ("--batch-profile", args.batch_profile),
                        ("--laws-from", args.laws_from),
                        ("--interval-from", args.interval_from),
                        ("--costs-from", args.costs_from),
                        ("--temperature", args.temperature != 0.0 or None)),
                       "does not apply to a folder of GPU runs (a forecast of a greedy "
                       "decoder of the measured models at one θ)")
        require_options((("--models", args.models), ("--thresholds", args.thresholds)))
        return _run_gpu(args.traces, args.models, thresholds_of(args, low=0), (args.dtype,
                        args.mode), args.json)
    own = None if args.mode is None else command_hook(scheme_named(args.mode),
                                                        "FORECAST_CAPTURES")
    if own is not None:  # the scheme's own forecast of our captures (async: AS1c)
        return own(args)
    refuse_options((("--mode", args.mode), ("--dtype", args.dtype)),
                   "only applies to a folder of GPU runs (PipeSpec), or async on captures")
    refuse_options((("--queue", args.queue),), "only applies with --mode async")
    if args.score or args.tree or args.schedule or args.batch:
        return run_kind(args)
    refuse_options((("--costs-from", args.costs_from),), "only for --tree / --schedule (a "
                   "chain's costs come from --profile)")
    require_options([(f"--{o}", getattr(args, o)) for o in ("traces", "models", "thresholds",
                                                             "profile")],
                    "required (or --score FILE)")
    models = [model_name(m) for m in parse_models(args.models)]
    th = thresholds_of(args)
    temp = as_real(args.temperature, "--temperature", low=0.0)
    prof = CompositionProfile.from_dict(read_config(Path(args.profile)),
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
    errs = {} if args.interval_from else loo_errors(caps, load_profiles(pdir, caps),
                                                   temperature=temp)
    errs, floor, of = interval_errors(args.interval_from, errs,
                                      "the captures at this temperature")
    out = {**fc.to_dict(),
           **prediction_interval(fc.speedup, errs.values(), of, floor),
           "profile": str(args.profile), "traces": str(args.traces),
           "kind": scheme_named(), "levels": len(models), "batch": 1}
    if args.name:
        out["name"] = args.name
    if args.json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    print(f"{' <- '.join(models)} θ={th} T={temp:g}: forecast speedup {fc.speedup:.3f}"
          + ("" if iv is None else f", 95 % prediction interval [{iv[0]:.3f}, {iv[1]:.3f}] "
             f"(from {len(errs)} errors of {of}; leave-one-out coverage "
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


def _run_gpu(traces, models_target_first: str, thresholds, options, as_json) -> int:
    """``forecast --thresholds θ`` on a folder of PipeSpec runs: the chain (``--mode sync``)
    or the pipeline (``async``) of the named models, target first, at one θ for every level
    (``options``: ``--dtype`` and ``--mode``)."""
    import sys

    from polyspec_theory.errors import PolyspecInputError
    from validation.analysis.folders import forecast_folder

    from ..output import dump_json

    dtypes, mode = options
    if len(set(thresholds)) != 1:
        raise PolyspecInputError("--thresholds", f"a PipeSpec decoder drafts one θ at every "
                                 f"level, got {thresholds}")
    names = parse_models(models_target_first)
    if len(names) < 2:
        raise PolyspecInputError("--models", "needs at least two models, target first")
    unknown = sorted(set(parse_dtypes(dtypes)) - set(names))
    if unknown:
        raise PolyspecInputError("--dtype", f"names {', '.join(unknown)}, not one of the "
                                 f"--models {', '.join(names)}")
    out = forecast_folder(traces, tuple(reversed(names)), thresholds[0],
                          parse_dtypes(dtypes), mode)
    for w in out.get("warnings", []):
        print(f"polyspec forecast: warning: {w}", file=sys.stderr)
    if as_json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    names = list(reversed(out.get("models_resolved", names[::-1])))
    prec = ", ".join(out["precisions"][m] for m in names)
    print(f"{' <- '.join(names)} lookahead {out['lookahead']} ({prec}): forecast speedup "
          f"{out['speedup']:.3f}, " + ("no 95 % interval (see the warning)" if iv is None
                                       else f"95 % interval [{iv[0]:.3f}, {iv[1]:.3f}]"))
    lo, hi = out.get("cost_interval") or iv
    iv = iv or [lo, hi]
    pos = (out["speedup"] - iv[0]) / (iv[1] - iv[0]) if iv[1] > iv[0] else 0.5
    if pos < 0.15 or pos > 0.85:  # say why before the sources, not among them
        why = [x for x in out["cost_source"] if "interval:" in x] or out["cost_source"]
        print(f"  the point sits near the {'bottom' if pos < 0.15 else 'top'} of its "
              f"interval: the costs' range [{lo:.3f}, {hi:.3f}] is one-sided -- "
              + "; ".join(why))
    for line in out["acceptance_source"] + out["cost_source"]:
        print(f"  {line}")
    return 0
