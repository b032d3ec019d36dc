"""``polyspec validate TRACES_DIR``: predicted (P1 with fitted laws and costs) vs measured
speedup on captured traces, with the residual explained; writes Markdown + PNG + JSON."""

from __future__ import annotations

HELP = ("Fit laws and cost curves to captured traces, predict every configuration with P1 "
        "and compare with the measured speedup (report: Markdown, PNG plots, JSON).")


def add_arguments(p):
    p.add_argument("traces_dir", metavar="TRACES_DIR",
                   help="directory of trace files (one captured configuration per file)")
    p.add_argument("--out", default=None,
                   help="report directory (default: out/validate/<name of TRACES_DIR>)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: configs (name, measured_speedup, "
                        "predicted_speedup, error), median_abs_error, max_abs_error")
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


def run(args) -> int:
    from pathlib import Path

    from polyspec_theory._input import PolyspecInputError, as_int
    from polyspec_theory.laws import LAW_FAMILIES
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
    captures = read_traces(tdir, allow_truncated=args.allow_truncated)
    notes = [n for c in captures for n in c.notes]
    result = validate(captures, fams, laws="pooled" if args.pool_laws else "config",
                      insertions=not args.no_insertions,
                      confidence=args.confidence, n_boot=n_boot)
    out = Path(args.out) if args.out else Path("out") / "validate" / (tdir.resolve().name or "x")
    paths = write_report(result, captures, out, title=f"Validation: {tdir}", notes=notes,
                         plots=not args.no_plots)
    if args.json:
        obj = result.to_json()
        obj["report"] = paths
        obj["notes"] = list(notes)
        from validation.report import _finite

        print(dump_json(_finite(obj)))
        return 0
    s = result.summary()
    print(f"{s['n_configs']} configurations from {tdir}")
    w = max(len(c.name) for c in result.configs)
    print(f"{'config':<{w}}  measured  predicted   error  extended   error  best law")
    for c in result.configs:
        print(f"{c.name:<{w}}  {c.measured_speedup:8.3f}  {c.predicted_speedup:9.3f}  "
              f"{100 * c.error:+6.2f}%  {c.extended_speedup:8.3f}  {100 * c.extended_error:+6.2f}%"
              f"  {c.best_family}")
    print(f"plain P1 (best law): median |error| {100 * s['median_abs_error']:.2f} %, "
          f"max {100 * s['max_abs_error']:.2f} %")
    e = s["extended"]
    print(f"extended model:      median |error| {100 * e['median_abs_error']:.2f} %, "
          f"max {100 * e['max_abs_error']:.2f} %")
    for key, label in (("inrun_costs", "in-run costs (iid)"), ("predictive", "predictive"),
                       ("predictive_iid", "predictive (iid)")):
        e = s[key]
        print(f"{label + ':':<21}median |error| {100 * e['median_abs_error']:.2f} %, "
              f"max {100 * e['max_abs_error']:.2f} %")
    print(f"dominant residual: {s['dominant_residual']}")
    for n in notes:
        print(f"note: {n}")
    print(f"report: {paths['markdown']}")
    return 0
