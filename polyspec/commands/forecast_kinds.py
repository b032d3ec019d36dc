"""``polyspec forecast`` for token trees, adaptive schedules and batched decoding, and
``--score FILE`` (pre-registered forecasts against their captures)."""

from __future__ import annotations


def add_kind_arguments(p) -> None:
    p.add_argument("--tree", default=None, metavar="PARENTS",
                   help="forecast a token tree drafted at the bottom pair (parent indices, as "
                        "polyspec capture --tree)")
    p.add_argument("--tree-sampling", default="distinct", choices=["distinct", "iid"])
    p.add_argument("--schedule", action="append", default=None, metavar="[PAIR@]SPEC",
                   help="forecast an adaptive draft length (hf:START:MIN:MAX, as capture)")
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="forecast lockstep batched decoding of B sequences (--traces: the "
                        "batched captures; with --batch-profile and --laws-from)")
    p.add_argument("--batch-profile", default=None, metavar="FILE.json",
                   help="batched cost profile (polyspec profile --batch)")
    p.add_argument("--laws-from", default=None, metavar="DIR",
                   help="single-stream captures that also give acceptance (batched)")
    p.add_argument("--costs-from", default=None, metavar="DIR",
                   help="trees and schedules: single-stream captures taken on the machine the "
                        "forecast is for, whose verify-path cost tables (same models and "
                        "temperature) replace those of --traces (a speedup is a ratio of one "
                        "machine's costs)")
    p.add_argument("--name", default=None, help="name of the capture the forecast is for")
    p.add_argument("--interval-from", default=None, metavar="FILE",
                   help="calibrate the 95 %% interval on a scored pre-registered round (its "
                        "forecasts file beside its captures and aa/): its errors pooled over "
                        "kinds, at least 1.96 x its A/A floor (default: the leave-one-out "
                        "errors of --traces)")
    p.add_argument("--score", default=None, metavar="FILE",
                   help="score a pre-registered forecasts file (one JSON per line with name, "
                        "kind, levels, batch, speedup, interval95) against the captures found "
                        "by name under its folder")


def _score(args) -> int:
    from validation.analysis.score import calibration, score_forecasts
    from validation.files import dump_json

    out = score_forecasts(args.score)
    if out["captured"]:
        out["calibration"] = calibration(args.score, out)
    if args.json:
        print(dump_json(out))
        return 0
    for r in out["configs"]:
        if r["measured"] is None:
            print(f"{r['name']}: forecast {r['forecast']:.3f}, not captured yet")
            continue
        lo, hi = r["interval95"]
        print(f"{r['name']} ({r['kind']}, {r['levels']} models, b={r['batch']}): forecast "
              f"{r['forecast']:.3f} [{lo:.3f}, {hi:.3f}], measured {r['measured']:.3f} "
              f"({100 * r['error']:+.1f} %, {'inside' if r['inside'] else 'OUTSIDE'})")
    if out["captured"]:
        print(f"{out['captured']} captured: median |error| {100 * out['median_abs_error']:.2f} "
              f"%, max {100 * out['max_abs_error']:.2f} %, inside {out['inside_fraction']:.0%} "
              f"({out['inside']}/{out['captured']}), median interval half-width "
              f"{100 * out['median_half_width']:.2f} %")
        c = out["calibration"]
        print(f"calibrated on these errors (forecast --interval-from; in-sample here): "
              f"half-width {100 * c['quantile']:.2f} % (A/A floor {100 * c['floor']:.2f} %), "
              f"inside {c['in_sample_coverage']:.0%}, conformal coverage >= "
              f"{c['guarantee']:.1%}")
    return 0


def interval_errors(args, loo: dict, of: str) -> tuple[dict, float, str]:
    """The calibration errors, A/A floor and their description for a forecast's interval:
    ``--interval-from``'s scored round (:func:`validation.analysis.score.calibration`) if
    given, else the leave-one-out errors ``loo`` (floor 0)."""
    if not getattr(args, "interval_from", None):
        return loo, 0.0, of
    from validation.analysis.score import calibration

    c = calibration(args.interval_from)
    return ({f"#{i}": e for i, e in enumerate(c["errors"])}, c["floor"],
            f"the scored forecasts {args.interval_from} (pooled over kinds)")


def run_async(args) -> int:
    """``forecast --mode async`` on our own captures: AS1 with the contention term on a
    contention profile (:func:`validation.analysis.async_forecast.forecast_async_config`);
    the interval from the leave-one-out errors of the chain forecasts at T = 0 (no async
    capture has a profile taken before it)."""
    from pathlib import Path

    from polyspec_theory.errors import PolyspecInputError, as_int, as_real
    from validation.analysis.async_forecast import (
        already_captured,
        check_profile_of,
        forecast_async_config,
    )
    from validation.analysis.forecast import loo_errors
    from validation.analysis.score import prediction_interval
    from validation.capture.async_profile import read_async_profile
    from validation.capture.composition_profile import load_profiles
    from validation.capture.models import model_name
    from validation.files import dump_json
    from validation.schemes import synchronous_captures
    from validation.traces.records import read_traces

    from .common import parse_ints, refuse_options

    refuse_options((("--tree", args.tree), ("--schedule", args.schedule),
                    ("--batch", args.batch), ("--batch-profile", args.batch_profile),
                    ("--laws-from", args.laws_from), ("--score", args.score),
                    ("--dtype", args.dtype), ("--costs-from", args.costs_from)),
                   "does not apply with --mode async (two models, one chain, greedy)")
    for opt in ("traces", "models", "thresholds", "profile"):
        if getattr(args, opt) is None:
            raise PolyspecInputError(f"--{opt}", "required with --mode async")
    models = [model_name(m.strip()) for m in args.models.split(",") if m.strip()]
    if len(models) != 2:
        raise PolyspecInputError("--models", f"--mode async forecasts two models (target, one "
                                 f"drafter), got {len(models)}")
    th = parse_ints(args.thresholds, "--thresholds", low=0, example="0")
    if len(th) != 1:
        raise PolyspecInputError("--thresholds", f"--mode async takes one threshold, got "
                                 f"{len(th)}")
    temp = as_real(args.temperature, "--temperature", low=0.0)
    if temp != 0:
        raise PolyspecInputError("--temperature", f"the async pipeline is greedy (0), got "
                                 f"{temp:g}")
    if not Path(args.traces).is_dir():
        raise PolyspecInputError("--traces", f"{args.traces}: no such folder of captures")
    prof = read_async_profile(args.profile)
    threshold = th[0]
    queue = None if args.queue is None else as_int(args.queue, "--queue",
                                                   low=max(1, threshold), high=4096)
    check_profile_of(prof, models, threshold, queue)  # before the captures are read
    caps = read_traces(args.traces)
    if already_captured(caps, models, threshold, queue):
        raise PolyspecInputError("--models", "this configuration is already captured in "
                                 f"{args.traces}: forecast a new one (validate predicts the "
                                 "committed ones)")
    fc = forecast_async_config(models, threshold, queue, caps, prof)
    pdir = Path(args.profiles) if args.profiles else Path(args.traces) / "profiles"
    sync = synchronous_captures(caps)
    errs = {} if args.interval_from else loo_errors(sync, load_profiles(pdir, sync),
                                                   temperature=0.0)
    errs, floor, of = interval_errors(args, errs, f"the chain forecasts at T = 0 (profiles in "
                                      f"{pdir})")
    out = {**fc, **prediction_interval(fc["speedup"], errs.values(), of, floor),
           "profile": str(args.profile), "traces": str(args.traces), "kind": "async",
           "levels": 2, "batch": 1, "name": args.name or "forecast"}
    if args.json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    k1, k2 = fc["contention"]
    print(f"{' <- '.join(models)} async θ={threshold} queue={queue}: forecast speedup "
          f"{fc['speedup']:.3f}" + ("" if iv is None else
                                    f", 95 % prediction interval [{iv[0]:.3f}, {iv[1]:.3f}]"
                                    f" (from {len(errs)} errors of {of})"))
    print(f"  contention 1 + κ = {1 + k1:.4f} (target), {1 + k2:.4f} (drafter); without it "
          f"{fc['speedup_without_contention']:.3f}")
    print(f"  acceptance: {fc['acceptance_law']}, from {len(fc['acceptance_from'])} "
          "capture(s)")
    return 0


def run_kind(args) -> int:
    from pathlib import Path

    from polyspec_theory.errors import PolyspecInputError, as_real
    from validation.analysis import forecast_kinds as fk
    from validation.analysis.score import prediction_interval
    from validation.capture.models import model_name
    from validation.files import dump_json

    from .capture import parse_ints, parse_schedules
    from .common import parse_models, require_options, thresholds_of

    if args.score:
        return _score(args)
    require_options([(f"--{o}", getattr(args, o)) for o in ("traces", "models", "thresholds")])
    if args.batch is not None and (args.tree or args.schedule):
        raise PolyspecInputError("--batch", "batched trees or schedules are not forecast")
    if args.costs_from is not None and not (args.tree or args.schedule):
        raise PolyspecInputError("--costs-from", "only for --tree / --schedule (a chain's "
                                 "costs come from --profile, a batch's from --batch-profile)")
    models = [model_name(m) for m in parse_models(args.models)]
    th = thresholds_of(args)
    temp = as_real(args.temperature, "--temperature", low=0.0)
    name = args.name or "forecast"
    sched = parse_schedules(args.schedule, len(models) - 1)
    if sched is not None:
        from validation.schemes.structured import parse_schedule

        sched = [None if s is None else parse_schedule(s, "--schedule").to_config()
                 for s in sched]
    fc, errs, kind = fk.forecast_request(fk.KindRequest(
        tuple(models), tuple(th), temp, args.traces, name,
        tree=tuple(parse_ints(args.tree, "--tree")) if args.tree else None,
        schedules=sched, tree_sampling=args.tree_sampling, batch=args.batch,
        batch_profile=args.batch_profile, laws_from=args.laws_from,
        costs_from=args.costs_from, loo_errors=not args.interval_from))
    errs, floor, of = interval_errors(args, errs, "the captures of this kind")
    out = {"models": models, "thresholds": th, "temperature": temp, **fc,
           **prediction_interval(fc["speedup"], errs.values(), of, floor),
           "traces": str(Path(args.traces)),
           "kind": kind, "levels": len(models), "batch": args.batch or 1, "name": name}
    if args.json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    print(f"{' <- '.join(models)} θ={th} T={temp:g} ({kind}"
          + (f", b={args.batch}" if args.batch else "") + f"): forecast speedup "
          f"{fc['speedup']:.3f}" + ("" if iv is None else
                                    f", 95 % prediction interval [{iv[0]:.3f}, {iv[1]:.3f}]"
                                    f" (from {len(errs)} errors of {of})"))
    return 0
