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
        "data/traces/cpu (35 configurations) takes about 21 seconds on one CPU core; progress "
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
                        "it exists); idle_floor: the floor of A/A captures (this folder, or "
                        "TRACES_DIR/aa and TRACES_DIR/*/aa) that all started idle")
    p.add_argument("--include-loaded", action="store_true",
                   help="keep captures made under load (1-minute load > 0.5 at the start, "
                        "header load_check) in the headline (default: labelled and left out)")


def _print_folder(rep: dict, as_json: bool) -> int:
    from ..output import dump_json

    if as_json:
        print(dump_json(rep))
        return 0
    for c in rep["configs"]:
        print(f"  {c['name']}: predicted {c['predicted_speedup']:.3f}, measured "
              f"{c['measured_speedup']:.3f} ({100 * c['error']:+.2f} %)")
    for m, how in rep.get("held_out", {}).items():
        print(f"  {m}: {how}" if how.startswith("in-sample") else
              f"  {m}: costs held out by {how}")
    print(f"median |error| {100 * rep['median_abs_error']:.2f} %, max "
          f"{100 * rep['max_abs_error']:.2f} % [{rep['headline']}]")
    for n in rep.get("notes", []):
        print(f"note: {n}")
    return 0


def _options(args):
    """The :class:`validation.analysis.traces.ValidateOptions` of the command line."""
    from pathlib import Path

    from polyspec_theory.core.laws import LAW_FAMILIES
    from polyspec_theory.errors import PolyspecInputError, as_int
    from validation.analysis.traces import ValidateOptions

    fams = [f.strip() for f in args.laws.split(",") if f.strip()]
    for f in fams:
        if f not in LAW_FAMILIES:
            raise PolyspecInputError("--laws", f"unknown law family {f!r}; choose from "
                                     f"{', '.join(LAW_FAMILIES)}")
    if not fams:
        raise PolyspecInputError("--laws", "give at least one law family")
    tdir = Path(args.traces_dir)
    return ValidateOptions(
        families=tuple(fams),
        out=Path(args.out) if args.out else Path("out") / "validate" / (tdir.resolve().name
                                                                         or "x"),
        laws="pooled" if args.pool_laws else "config", insertions=not args.no_insertions,
        confidence=args.confidence, n_boot=as_int(args.n_boot, "--n-boot", low=1,
                                                  high=100_000),
        profiles=args.profiles, batch_profile=args.batch_profile, laws_from=args.laws_from,
        allow_truncated=args.allow_truncated, plots=not args.no_plots, aa=args.aa,
        include_loaded=args.include_loaded,
        progress=None if args.no_progress else _progress)


def run(args) -> int:
    from polyspec_theory.errors import PolyspecInputError
    from validation.analysis.folders import validate_folder
    from validation.analysis.traces import combined_json, combined_text, validate_traces
    from validation.formats import detect_dir

    from ..output import check_output_dir, dump_json

    if args.out:
        check_output_dir(args.out, "--out")  # before the (slow) validation
        if detect_dir(args.traces_dir) is not None:
            raise PolyspecInputError("--out", "a GPU trace folder's validation is printed "
                                     "(use --json > FILE); no report folder is written")
    rep = validate_folder(args.traces_dir, costs_from=args.costs_from)
    if rep is not None:  # PipeSpec / Spec-Bench GPU trace folder
        return _print_folder(rep, args.json)
    parts = validate_traces(args.traces_dir, _options(args))
    if args.json:
        print(dump_json(combined_json(parts)))
        return 0
    text, notes = combined_text(parts)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)  # notes on stderr: the result is stdout
    print(text)
    return 0


def _progress(total: int):
    """The progress shown while ``total`` configurations are analysed: a bar on a terminal,
    lines on stderr otherwise (:func:`_progress_lines`), none below :data:`PROGRESS_MIN`."""
    if total < PROGRESS_MIN:
        return None
    if not sys.stderr.isatty():
        return _progress_lines()
    from tqdm import tqdm

    bar = tqdm(total=total, unit="config", file=sys.stderr, desc="validate")

    def progress(done, total):
        bar.n = done
        bar.refresh()
        if done == total:
            bar.close()
    return progress


def _progress_lines(clock=None, out=None):
    """Progress on stderr without a terminal: the first configuration (its time holds the
    one-off work: reading and fitting every capture), then, from the second on, the time left
    at the rate of the configurations since the first (the one-off work is not repeated, so
    it is not extrapolated), then a line at each quarter."""
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
