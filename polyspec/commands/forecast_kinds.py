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
    p.add_argument("--name", default=None, help="name of the capture the forecast is for")
    p.add_argument("--score", default=None, metavar="FILE",
                   help="score a pre-registered forecasts file (one JSON per line with name, "
                        "kind, levels, batch, speedup, interval95) against the captures found "
                        "by name under its folder")


def _score(args) -> int:
    from validation.analysis.score import score_forecasts
    from validation.files import dump_json

    out = score_forecasts(args.score)
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
              f"%, max {100 * out['max_abs_error']:.2f} %, inside {out['inside_fraction']:.0%}")
    return 0


def run_async(args) -> int:
    """``forecast --mode async`` on our own captures: AS1 with the contention term on a
    contention profile (:func:`validation.analysis.async_forecast.forecast_async_config`);
    the interval from the leave-one-out errors of the chain forecasts at T = 0 (no async
    capture has a profile taken before it)."""
    from pathlib import Path

    from polyspec_theory.errors import PolyspecInputError, as_int, as_real
    from validation.analysis.async_forecast import forecast_async_config
    from validation.analysis.forecast import loo_errors
    from validation.analysis.score import prediction_interval
    from validation.capture.async_profile import read_async_profile
    from validation.capture.composition import load_profiles
    from validation.capture.models import model_name
    from validation.files import dump_json
    from validation.traces.records import read_traces

    from .common import parse_ints, refuse_options

    refuse_options((("--tree", args.tree), ("--schedule", args.schedule),
                    ("--batch", args.batch), ("--batch-profile", args.batch_profile),
                    ("--laws-from", args.laws_from), ("--score", args.score),
                    ("--dtype", args.dtype)),
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
    caps = read_traces(args.traces)
    if any(c.mode == "async" and tuple(c.models) == tuple(models)
           and c.thresholds[0] == threshold and c.header.get("async", {}).get("queue") == queue
           for c in caps):
        raise PolyspecInputError("--models", "this configuration is already captured in "
                                 f"{args.traces}: forecast a new one (validate predicts the "
                                 "committed ones)")
    fc = forecast_async_config(models, threshold, queue, caps, prof)
    pdir = Path(args.profiles) if args.profiles else Path(args.traces) / "profiles"
    errs = loo_errors([c for c in caps if c.mode == "sync"], load_profiles(
        pdir, [c for c in caps if c.mode == "sync"]), temperature=0.0)
    out = {**fc, **prediction_interval(fc["speedup"], errs.values(),
                                       "the chain forecasts at T = 0 (profiles in "
                                       f"{pdir})"),
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
                                    f" (from {len(errs)} leave-one-out errors)"))
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
    from validation.capture.setup import CaptureSpec
    from validation.files import dump_json
    from validation.traces.records import read_traces

    from .capture import parse_ints, parse_schedules

    if args.score:
        return _score(args)
    for opt in ("traces", "models", "thresholds"):
        if getattr(args, opt) is None:
            raise PolyspecInputError(f"--{opt}", "required")
    if args.batch is not None and (args.tree or args.schedule):
        raise PolyspecInputError("--batch", "batched trees or schedules are not forecast")
    models = [model_name(m.strip()) for m in args.models.split(",") if m.strip()]
    th = parse_ints(args.thresholds, "--thresholds")
    temp = as_real(args.temperature, "--temperature", low=0.0)
    name = args.name or "forecast"
    if args.batch is not None:
        from validation.analysis.batch_validate import load_profile
        from validation.traces.batch import read_batch_traces

        if args.batch_profile is None or args.laws_from is None:
            raise PolyspecInputError("--batch", "needs --batch-profile and --laws-from")
        spec = fk.spec_config(CaptureSpec(models, th, temp, batches=(args.batch,)), name)
        bcaps = read_batch_traces(args.traces)
        if any(c.config_key == spec.config_key and c.batch == spec.batch for c in bcaps):
            raise PolyspecInputError("--batch", "this configuration is already captured")
        laws = read_traces(args.laws_from)
        prof = load_profile(args.batch_profile)
        fc = fk.forecast_batch(spec, bcaps, laws, prof)
        errs = fk.batch_loo_errors(bcaps, laws, prof)
        kind = "batch"
    else:
        sched = parse_schedules(args.schedule, len(models) - 1)
        if sched is not None:
            from validation.schemes.structured import parse_schedule

            sched = [None if s is None else parse_schedule(s, "--schedule").to_config()
                     for s in sched]
        tree = parse_ints(args.tree, "--tree") if args.tree else None
        spec = fk.spec_config(CaptureSpec(models, th, temp, tree=tree, schedules=sched,
                                          tree_sampling=args.tree_sampling), name)
        caps = read_traces(args.traces)
        if args.laws_from:
            caps += read_traces(args.laws_from)
        fc = fk.forecast_structured(spec, caps)
        kind = "tree" if tree else "schedule"
        errs = fk.structured_loo_errors(caps, temperature=temp, kind="tree" if tree else "hf",
                                        nodes=len(tree) - 1 if tree else None)
        if not errs:  # no capture of this kind yet: the chain forecasts' errors
            errs = fk.chain_loo_errors(caps, temperature=temp, models=models)
            fc["notes"] = ["no captured schedule: interval from the leave-one-out errors of "
                           "the chain captures of these models"]
    out = {"models": models, "thresholds": th, "temperature": temp, **fc,
           **prediction_interval(fc["speedup"], errs.values(), "the captures of this kind"),
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
                                    f" (from {len(errs)} leave-one-out errors)"))
    return 0
