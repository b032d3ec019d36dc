"""``polyspec fit FILE``: a serving engine's speculative-decoding output -> acceptance data ->
fitted laws (:mod:`validation.formats`)."""

from __future__ import annotations

from polyspec_theory.errors import options_named

from ..output import dump_json
from .common import add_thresholds_argument, thresholds_of

HELP = ("Read a serving engine's speculative-decoding output (vLLM, SGLang, llama.cpp, "
        "TensorRT-LLM logs, metrics or per-request JSON), count rounds and accepted tokens, "
        "and fit the acceptance laws.")


def add_arguments(p):
    # the format names come from the registry (validation.formats; the parser of a command
    # is built only when that command runs); an unknown name is rejected with the list
    from validation import formats

    names = [n for n, f in formats.registry().items() if f.report is not None]
    p.add_argument("file", help="the engine output (log, metrics dump, JSON, our traces)")
    p.add_argument("--format", default=None, metavar="F",
                   help=f"override the detected format ({', '.join(names)})")
    add_thresholds_argument(p, "the draft length θ (drafts per round; vLLM's "
                               "num_speculative_tokens) where the output does not state it")
    p.add_argument("--snapshot", type=int, default=None, metavar="N",
                   help="fit only snapshot N (1-based interval / request / run) instead of "
                        "all of them pooled")
    p.add_argument("--out", default=None, metavar="FILE.json",
                   help="also write the JSON report (a config can then use "
                        "{\"fit\": \"FILE.json\"} as a pair's acceptance)")
    p.add_argument("--eta", type=float, default=None,
                   help="drafts of varying length are modelled as a confidence cut-off; its "
                        "representative law is written at this cut-off (the engine's p_min; "
                        "default 0.5, a label: only P(draft) and P(draft and accept) at the "
                        "engine's own cut-off are identified)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _fmt_law(entry) -> str:
    (k, v), = entry["params"].items()
    if isinstance(v, list):
        v = "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
    else:
        v = f"{v:.4g}"
    out = f"{entry['law']:<11} {k}={v}"
    if entry.get("loglik") is not None:
        out += f"   loglik {entry['loglik']:.2f}  AIC {entry['aic']:.2f}"
        if entry.get("gof_p_value") is not None:
            out += f"  G-test p {entry['gof_p_value']:.3g}"
    else:
        out += "   (method of moments: no likelihood from totals)"
    return out


TEXT_SNAPSHOTS = 20  # snapshots listed one per line in the text output


def explain_fit(rep: dict, path: str) -> str:
    lines = [f"{path}: {rep['format_description']} [{rep['format']}]"]
    if rep.get("source"):
        lines.append(f"  {rep['source'][:160]}")
    snaps = rep["snapshots"]
    cap = rep["cap"]
    gam = (f"θ = {cap}" if cap is not None else
           f"θ = {', '.join(map(str, rep['caps']))} by snapshot" if rep["caps"] else
           "draft length varying by round")
    what = {"per-interval": "interval", "cumulative": "interval (cumulative counters "
            "differenced)", "per-request": "request", "per-run": "run",
            "single": "snapshot"}[rep["counters"]]
    n_snaps = rep.get("snapshots_total", len(snaps))
    if n_snaps != 1:
        what = what.replace("interval", "intervals", 1) if what.startswith("interval") else (
            what + "s")
    lines.append(f"  {n_snaps} {what}; pooled: {rep['rounds']} rounds ({gam}), "
                 f"{rep['accepted']} accepted drafts"
                 + (f", {rep['drafted']} drafted ({rep['drafted_per_round']:.3f} per round)"
                    if rep["drafted"] is not None else ""))
    eng = rep["engine_mean_acceptance_length"]
    lines.append(f"  mean acceptance length {rep['mean_acceptance_length']:.4f} (1 + accepted / "
                 "rounds, bonus token included)" + (f"; the engine printed {eng}" if eng else ""))
    if len(snaps) > 1:
        shown = snaps if n_snaps <= 2 * TEXT_SNAPSHOTS else snaps[:TEXT_SNAPSHOTS]
        for s in shown:
            e = s["engine"]
            printed = ", ".join(f"{k} {v}" for k, v in e.items())
            lines.append(f"    {s['label']}: {s['rounds']} rounds, mean acceptance length "
                         f"{s['mean_acceptance_length']:.4f}" + (f" (engine: {printed})"
                                                                 if printed else ""))
        if len(shown) < n_snaps:
            lines.append(f"    ... {n_snaps - len(shown)} more (--json lists the first "
                         f"{len(snaps)})")
    n_checks = rep.get("checks_total", len(rep["checks"]))
    if n_checks:
        agree = rep.get("checks_agree", sum(c["agree"] for c in rep["checks"]))
        lines.append(f"  engine figures recomputed: {agree}/{n_checks} agree at the printed "
                     "precision")
    if rep["histogram"] is not None:
        lines.append(f"  histogram of accepted drafts (0..{cap}): {rep['histogram']}  "
                     f"[{rep['histogram_source']}]")
    if rep["laws"]:
        lines.append(f"  laws ({rep['fit_method']}):")
        for entry in rep["laws"]:
            lines.append("    " + _fmt_law(entry))
        import json

        lines.append(f"  best (config syntax): {json.dumps(rep['best'])}")
    else:
        lines.append("  no chain law fitted (see warnings)")
    v = rep.get("variable_length")
    if v is not None:
        import json

        lines.append(f"  drafts of varying length modelled as a {v['model']}, at most "
                     f"{v['cap']} tokens: P(draft a position) q = {v['q']:.4f}, P(draft and "
                     f"accept) r = {v['r']:.4f} ({v['method']}); drafter forwards per round "
                     f"{v['drafter_forwards_per_round']:.3f}")
        lines.append(f"    identified: {v['identified']}")
        if v["representative"] is not None:
            r = v["representative"]
            lines.append(f"    representative (config syntax): acceptance "
                         f"{json.dumps(r['acceptance'])}, schedule {json.dumps(r['schedule'])}")
        for note in v["notes"]:
            lines.append(f"    note: {note}")
    if rep["concurrency"] is not None:
        lines.append(f"  concurrent requests: up to {rep['concurrency']:g}")
    for w in rep["warnings"]:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def explain_rounds(rep: dict, path: str) -> str:
    """The plain text of a fit of rounds logged one by one (PipeSpec, Spec-Bench)."""
    lines = [f"{path}: {rep['format_description']} [{rep['format']}]",
             f"  {rep.get('source', '')}",
             f"  pooled: {rep['rounds']} rounds, mean acceptance length "
             f"{rep['mean_acceptance_length']:.4f} (bonus token included)"]
    for p in rep.get("pairs", []):
        lines.append(f"    {p['drafter']} -> {p['verifier']}: {p['rounds']} verify calls, mean "
                     f"acceptance length {p['mean_acceptance_length']:.4f}")
    lines += [f"  warning: {w}" for w in rep["warnings"]]
    return "\n".join(lines)


def run(args) -> int:
    from polyspec_theory.errors import PolyspecInputError
    from validation import formats

    from ..output import write_output

    thresholds = thresholds_of(args)
    if thresholds is not None and len(thresholds) != 1:
        raise PolyspecInputError("--thresholds", "one draft length (one pair) for an engine's "
                                 f"output, got {len(thresholds)}")
    with options_named({"--gamma": "--thresholds", "gamma": "--thresholds"}):
        rep = formats.fit_report(args.file, args.format, gamma=thresholds and thresholds[0],
                                 eta=args.eta, snapshot=args.snapshot)
    if args.out and "best" not in rep:  # {"fit": FILE} reads a report's best law
        raise PolyspecInputError("--out", f"does not apply to a {rep['format_description']} "
                                 "(its fit is printed; use --json > FILE)")
    if args.out:
        write_output(args.out, dump_json(rep) + "\n", "--out", inputs=[args.file])
    if args.json:
        print(dump_json(rep))
    else:
        print((explain_fit if "snapshots" in rep else explain_rounds)(rep, args.file))
    return 0
