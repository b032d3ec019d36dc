"""``polyspec validate TRACES_DIR``: predicted vs measured speedup on captured traces. The
headline is predictive (acceptance from the other captures, costs from the cascade's
composition profile, nothing of the capture itself); in-sample fits are reported as
diagnostics, with the residual explained. Writes Markdown + PNG + JSON."""

from __future__ import annotations

import sys

HELP = ("Predict every captured configuration without using it (acceptance from the other "
        "captures, costs from a composition profile) and compare with its measured speedup; "
        "in-sample diagnostics explain the residual (report: Markdown, PNG plots, JSON); "
        "batched traces (capture --batch) per batch size with B2 and the crossover batch. "
        "data/traces/cpu (35 configurations) takes about 3 minutes on 2 CPU cores; progress "
        "and the time left on stderr.")


PROGRESS_MIN = 20  # traces from which validate shows a progress bar on a terminal


def add_arguments(p):
    p.add_argument("traces_dir", metavar="TRACES_DIR",
                   help="directory of trace files (one captured configuration per file)")
    p.add_argument("--out", default=None,
                   help="report directory (default: out/validate/<name of TRACES_DIR>)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: headline, configs (name, measured_speedup, "
                        "measured_ci95, predicted_speedup, error, inside_ci, diagnostics), "
                        "median_abs_error, max_abs_error, summary")
    p.add_argument("--profiles", default=None, metavar="DIR",
                   help="composition profiles, one <capture name>.json per capture "
                        "(default: TRACES_DIR/profiles if it exists)")
    p.add_argument("--allow-truncated", action="store_true",
                   help="skip (and report) a truncated last line instead of failing")
    p.add_argument("--laws", default="iid,positional,beta,gaussian",
                   help="comma-separated law families to fit (default: all four)")
    p.add_argument("--pool-laws", action="store_true",
                   help="fit each pair's laws on the rounds of every configuration using the "
                        "pair (default: on each configuration's own rounds)")
    p.add_argument("--no-insertions", action="store_true",
                   help="skip the P5 insertion analysis")
    p.add_argument("--confidence", choices=("delta", "bootstrap"), default="delta",
                   help="P5 decision-confidence method (default: delta)")
    p.add_argument("--n-boot", type=int, default=200,
                   help="bootstrap replicates for --confidence bootstrap (default 200)")
    p.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    p.add_argument("--no-progress", action="store_true",
                   help=f"no progress bar (shown on a terminal from {PROGRESS_MIN} traces)")
    p.add_argument("--batch-profile", default=None, metavar="FILE.json",
                   help="batched traces: cost tables T(b, m) from `polyspec profile --batch` "
                        "for the predictive variant (default: TRACES_DIR/profile.json if it "
                        "exists, else the other captures' batched cost samples at the same b)")
    p.add_argument("--laws-from", default=None, metavar="DIR",
                   help="batched or async traces: single-stream traces used as extra "
                        "acceptance data (e.g. data/traces/cpu): the predictive variant and "
                        "the predicted crossover then take laws from outside the predicted "
                        "captures; async captures also take their costs from them")
    p.add_argument("--costs-from", default=None, metavar="DIR",
                   help="Spec-Bench folder: take the cost model from another folder of the "
                        "same method (fitted on all its categories, scaled by this folder's "
                        "autoregressive step) instead of leaving categories or questions out")
    p.add_argument("--aa", default=None, metavar="DIR",
                   help="A/A captures (one configuration captured repeatedly, interleaved): "
                        "the noise floor reported as noise_floor (default: TRACES_DIR/aa if "
                        "it exists)")


def _noise_floor(args, tdir):
    """The A/A noise floor (:func:`validation.analysis.plan_uncertainty.noise_floor`) of
    ``--aa`` or TRACES_DIR/aa; ``None`` when there is none."""
    from pathlib import Path

    from polyspec_theory.errors import PolyspecInputError
    from validation.analysis.plan_uncertainty import noise_floor
    from validation.traces import read_traces

    aa = Path(args.aa) if args.aa else tdir / "aa"
    if not aa.is_dir() or not any(aa.glob("*.jsonl")):
        if args.aa:
            raise PolyspecInputError("--aa", f"not a directory: {aa}")
        return None
    return noise_floor(read_traces(aa))


def run(args) -> int:
    import sys

    from polyspec_theory.errors import PolyspecInputError
    from validation.files import check_output_dir
    from validation.gpu_traces.cli import detect_dir, run_validate

    if args.out:
        check_output_dir(args.out, "--out")  # before the (slow) validation
    if detect_dir(args.traces_dir):  # PipeSpec / Spec-Bench GPU trace folder
        if args.out:
            raise PolyspecInputError("--out", "a GPU trace folder's validation is printed "
                                     "(use --json > FILE); no report folder is written")
        return run_validate(args.traces_dir, args.json, costs_from=args.costs_from)
    if args.costs_from:
        raise PolyspecInputError("--costs-from", "only for a Spec-Bench answer folder")
    from pathlib import Path

    from polyspec_theory.core.laws import LAW_FAMILIES
    from polyspec_theory.errors import PolyspecInputError, as_int
    from validation.analysis.validate import validate
    from validation.files import dump_json
    from validation.report import write_report
    from validation.traces import read_traces

    fams = [f.strip() for f in args.laws.split(",") if f.strip()]
    for f in fams:
        if f not in LAW_FAMILIES:
            raise PolyspecInputError("--laws", f"unknown law family {f!r}; choose from "
                                     f"{', '.join(LAW_FAMILIES)}")
    if not fams:
        raise PolyspecInputError("--laws", "give at least one law family")
    n_boot = as_int(args.n_boot, "--n-boot", low=1, high=100_000)
    tdir = Path(args.traces_dir)
    out = Path(args.out) if args.out else Path("out") / "validate" / (tdir.resolve().name or "x")
    batched = _validate_batched(args, tdir, fams, out)
    if batched is not None and not _has_single(tdir):
        return _print_batched(args, batched)
    captures = read_traces(tdir, allow_truncated=args.allow_truncated)
    notes = [n for c in captures for n in c.notes]
    async_caps = [c for c in captures if c.mode == "async"]
    captures = [c for c in captures if c.mode != "async"]
    from validation.analysis.async_validate import earlier_window

    for c in [c for c in async_caps if earlier_window(c) is not None]:
        notes.append(f"{c.name}: captured when a verify checked at most {earlier_window(c)} "
                     f"drafts (header async.window); AS0 now checks every ready draft up to "
                     f"min(99, queue) (docs/theory.md AS0): not predicted")
        async_caps.remove(c)
    async_res = _validate_async(args, async_caps, captures, fams) if async_caps else None
    if not captures:
        return _print_async(args, async_res, notes)
    from validation.composition import load_profiles

    if args.profiles and not Path(args.profiles).is_dir():
        raise PolyspecInputError("--profiles", f"not a directory: {args.profiles}")
    profiles = load_profiles(Path(args.profiles) if args.profiles else tdir / "profiles",
                             captures)
    missing = [c.name for c in captures if c.name not in profiles]
    if missing and profiles:
        notes.append(f"no composition profile for {len(missing)} capture(s) "
                     f"({', '.join(missing)}): no headline prediction for them")
    bar = progress = None
    if not args.no_progress and len(captures) >= PROGRESS_MIN and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(captures), unit="config", file=sys.stderr, desc="validate")

        def progress(done, total):
            bar.n = done
            bar.refresh()
    elif not args.no_progress and len(captures) >= PROGRESS_MIN:
        progress = _progress_lines()
    try:
        result = validate(captures, fams, laws="pooled" if args.pool_laws else "config",
                          insertions=not args.no_insertions, confidence=args.confidence,
                          n_boot=n_boot, profiles=profiles, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    paths = write_report(result, captures, out, title=f"Validation: {tdir}", notes=notes,
                         plots=not args.no_plots)
    if args.json:
        obj = result.to_json()
        obj["report"] = paths
        obj["notes"] = list(notes)
        obj["noise_floor"] = _noise_floor(args, tdir)
        if batched is not None:
            obj["batch"] = dict(batched[0].to_json(), report=batched[1])
        if async_res is not None:
            obj["async"] = [r.to_dict() for r in async_res]
        print(dump_json(obj))
        return 0
    s = result.summary()
    if result.structured:
        ss = s["structured"]
        w = max(len(c.name) for c in result.structured)
        print(f"{ss['n_configs']} configurations with token trees / adaptive draft lengths "
              f"from {tdir} (structured P1)")
        print(f"{'config':<{w}}  measured  predicted   error  holdout err  in-run err  pairs")
        for c in result.structured:
            he = "          —" if c.holdout_error is None else f"{100 * c.holdout_error:+10.2f}%"
            print(f"{c.name:<{w}}  {c.measured_speedup:8.3f}  {c.predicted_speedup:9.3f}  "
                  f"{100 * c.error:+6.2f}%  {he}  {100 * c.inrun_error:+9.2f}%  "
                  f"{', '.join(c.kinds)}")
        print(f"structured P1 (own laws, in-sample): median |error| "
              f"{100 * ss['median_abs_error']:.2f} %, max {100 * ss['max_abs_error']:.2f} %")
        if ss["holdout_n_configs"]:
            print(f"structured P1 (laws from the other captures, {ss['holdout_n_configs']} "
                  f"configurations): median |error| {100 * ss['holdout_median_abs_error']:.2f}"
                  f" %, max {100 * ss['holdout_max_abs_error']:.2f} %")
        print(f"structured P1, verify-path costs + overhead from the other captures (own "
              f"laws): median |error| {100 * ss['verify_path_median_abs_error']:.2f} %, max "
              f"{100 * ss['verify_path_max_abs_error']:.2f} %")
        if ss["verify_path_holdout_n_configs"]:
            print(f"  the same with laws from the other captures: median |error| "
                  f"{100 * ss['verify_path_holdout_median_abs_error']:.2f} %, max "
                  f"{100 * ss['verify_path_holdout_max_abs_error']:.2f} %")
    if not result.configs:
        for n in notes:
            print(f"note: {n}", file=sys.stderr)  # notes on stderr: the result is stdout
        print(f"report: {paths['markdown']}")
        return 0
    print(f"{s['n_configs']} configurations from {tdir}")
    w = max(len(c.name) for c in result.configs)
    print(f"{'config':<{w}}  measured [95 % CI]        predicted   error  inside  "
          f"p1_best   error  extended   error")
    for c in result.configs:
        lo, hi = c.measured_ci95
        pred = "        —       —      —" if c.forecast is None else (
            f"{c.predicted_speedup:9.3f} {100 * c.error:+6.2f}%  "
            f"{'yes' if c.inside_ci else 'no':>5}")
        print(f"{c.name:<{w}}  {c.measured_speedup:8.3f} [{lo:.3f}, {hi:.3f}]  {pred}  "
              f"{c.diagnostics['p1_best']:7.3f} {100 * c.diagnostic_error('p1_best'):+6.2f}%"
              f"  {c.diagnostics['extended']:7.3f} "
              f"{100 * c.diagnostic_error('extended'):+6.2f}%")
    if s["n_predicted"]:
        print(f"headline (predictive, {s['n_predicted']} configurations): median |error| "
              f"{100 * s['median_abs_error']:.2f} %, max {100 * s['max_abs_error']:.2f} %, "
              f"inside the measured 95 % CI: {s['inside_ci']}/{s['n_predicted']}")
    else:
        print("no headline prediction: no composition profiles (polyspec profile --cascade)")
    for key in ("p1_best", "holdout_laws", "slowdown_costs", "inrun", "extended"):
        e = s["diagnostics"].get(key)
        if e and e["n_configs"]:
            print(f"diagnostic {key + ':':<16}median |error| {100 * e['median_abs_error']:.2f} %,"
                  f" max {100 * e['max_abs_error']:.2f} %")
    print(f"dominant residual (p1_best): {s['dominant_residual']}")
    for n in notes:
        print(f"note: {n}", file=sys.stderr)  # notes on stderr: the result is stdout
    print(f"report: {paths['markdown']}")
    if batched is not None:
        from validation.batch.report import batch_text

        print()
        print(batch_text(batched[0]))
        print(f"batched report: {batched[1]['markdown']}")
    if async_res is not None:
        from validation.analysis.async_validate import async_text

        print()
        print(async_text(async_res))
    return 0


def _progress_lines(clock=None, out=None):
    """Progress on stderr without a terminal: the first configuration (its time holds the
    one-off work: reading and fitting every capture), then, from the second on, the time left
    at the rate of the configurations since the first (the one-off work is not repeated, so
    it is not extrapolated), then a line at each quarter."""
    import sys
    import time

    clock = clock or time.perf_counter
    start, shown, first = clock(), set(), []

    def progress(done, total):
        now = clock()
        spent = now - start
        if done == 1:
            first.append(now)
            print(f"validate: 1/{total} configurations in {spent:.0f} s (reading and fitting "
                  "the captures included); the time left follows the next one",
                  file=out or sys.stderr, flush=True)
            return
        quarter = 4 * done // total
        if done == 2 or (quarter not in shown and quarter > 0):
            shown.add(quarter)
            rate = (now - first[0]) / (done - 1) if first else spent / done
            print(f"validate: {done}/{total} configurations in {spent:.0f} s; about "
                  f"{rate * (total - done):.0f} s left", file=out or sys.stderr, flush=True)
    return progress


def _validate_async(args, async_caps, captures, fams):
    """AS1 predictions of the async captures: laws and costs from the synchronous captures of
    ``TRACES_DIR`` and ``--laws-from``."""
    from pathlib import Path

    from validation.analysis.async_validate import validate_async
    from validation.traces import read_traces

    extra = read_traces(Path(args.laws_from)) if args.laws_from else []
    return validate_async(async_caps, list(captures) + extra, fams, cost_caps=captures)


def _print_async(args, res, notes) -> int:
    from validation.analysis.async_validate import async_text
    from validation.files import dump_json

    if args.json:
        print(dump_json({"async": [r.to_dict() for r in res], "notes": list(notes)}))
        return 0
    print(async_text(res))
    for n in notes:
        print(f"note: {n}", file=sys.stderr)  # notes on stderr: the result is stdout
    return 0


def _has_single(tdir) -> bool:
    from validation.traces import is_batched_file

    return any(not is_batched_file(f) for f in sorted(tdir.glob("*.jsonl")))


def _validate_batched(args, tdir, fams, out):
    """``(BatchValidation, report paths)`` of the batched traces of ``tdir`` (None if none)."""
    from pathlib import Path

    from validation.analysis.batch_validate import load_profile, validate_batches
    from validation.batch.dataset import read_batch_traces
    from validation.batch.report import write_batch_report
    from validation.traces import read_traces

    if not tdir.is_dir():
        return None
    caps = read_batch_traces(tdir, allow_truncated=args.allow_truncated)
    if not caps:
        if args.batch_profile:
            from polyspec_theory.errors import PolyspecInputError

            raise PolyspecInputError("--batch-profile", f"{tdir} holds no batched traces: "
                                     "--batch-profile applies to batched traces")
        return None
    default = tdir / "profile.json"
    if args.batch_profile:
        profile = load_profile(args.batch_profile)
    else:
        profile = load_profile(default) if default.is_file() else None
    extra = read_traces(Path(args.laws_from)) if args.laws_from else []
    res = validate_batches(caps, families=fams, profile=profile, law_captures=extra)
    paths = write_batch_report(res, out, title=f"Batched validation: {tdir}")
    return res, paths


def _print_batched(args, batched) -> int:
    from validation.batch.report import batch_text
    from validation.files import dump_json

    res, paths = batched
    if args.json:
        print(dump_json(dict(res.to_json(), report=paths)))
        return 0
    print(batch_text(res))
    for n in res.notes:
        print(f"note: {n}", file=sys.stderr)  # notes on stderr: the result is stdout
    print(f"report: {paths['markdown']}")
    return 0
