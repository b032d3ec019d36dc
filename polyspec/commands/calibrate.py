"""``polyspec calibrate RUNS``: measured runs of a pair or cascade -> least-squares fit of the
unknown cost parameters (drafter cost per forward, per-round overhead, verify-cost growth),
with uncertainty, leave-one-out errors, predictions for unmeasured thresholds and the best
threshold (:mod:`polyspec_theory.planning.calibration`)."""

from __future__ import annotations

from ..output import dump_json

HELP = ("Fit the unknown cost parameters (drafter cost, per-round overhead, verify-cost growth) "
        "to measured runs (a runs file, or a sweep table of acceptance length and time per "
        "token per K), predict unmeasured thresholds and choose the best one.")


def add_arguments(p):
    p.add_argument("runs", help="runs file (JSON/YAML, see the README's engine section) or a "
                                "sweep table (text: mean acceptance length and time per "
                                "token per K)")
    p.add_argument("--method", default=None,
                   help="the method (column) of a sweep table, e.g. 'EAGLE 1'")
    p.add_argument("--fit-on", default=None, metavar="A,B,...",
                   help="fit on these runs only (names; for a sweep table the Ks, e.g. 2,7); "
                        "the others are held out: predicted, then compared")
    p.add_argument("--max-threshold", type=int, default=None,
                   help="largest threshold searched for the best one (default: the runs "
                        "file's max_threshold, or 16)")
    p.add_argument("--within", type=float, default=0.02,
                   help="report the probability that the chosen threshold is within this "
                        "fraction of the best (default 0.02)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the parameter draws behind the choice's probability")
    p.add_argument("--write-config", metavar="PATH", default=None,
                   help="write the calibrated cascade at the best threshold (for predict, "
                        "simulate)")
    p.add_argument("--write-pool", metavar="PATH", default=None,
                   help="write a pool with the calibrated costs (for polyspec plan)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


# a fit that misses one of its own runs by more than this fraction is not a model of them
FIT_RUN_TOLERANCE = 0.5


def check_reproduces_fit_runs(cal) -> None:
    """The calibration must reproduce the runs it was fitted to (within
    :data:`FIT_RUN_TOLERANCE`): a miss beyond it means inconsistent inputs (a wrong time
    unit, a corrupt value, runs of different setups), not a calibration to report."""
    from polyspec_theory.errors import PolyspecInputError

    for r in cal.runs:
        if r.holdout or r.measured is None or r.relative_error is None:
            continue
        if not abs(r.relative_error) <= FIT_RUN_TOLERANCE:
            raise PolyspecInputError(
                "runs", f"the fitted model misses its own fit run {r.name} by "
                f"{100 * r.relative_error:+.3g} % (predicted {r.predicted:.4g}, measured "
                f"{r.measured:.4g}): the runs are inconsistent (a wrong time unit, a corrupt "
                "value, or runs of different setups?)")


def _errors(preds) -> dict:
    held = [r for r in preds if r.holdout and r.measured is not None]
    errs = {r.name: r.relative_error for r in held}
    return {"by_run": errs,
            "max_abs": max((abs(e) for e in errs.values()), default=None)}


def calibration_report(cal, choice, grid_choice, args_within) -> dict:
    """The JSON object printed by ``calibrate --json``."""
    import numpy as np

    from polyspec_theory.planning.calibration import t_quantile

    pr = cal.problem
    sd = cal.sd
    q = t_quantile(cal.dof if cal.chi2 is None else 0)
    params = []
    for j, lab in enumerate(cal.labels):
        e = float(cal.estimates[j])
        s = None if sd is None else float(sd[j])
        params.append({"name": lab, "estimate": e, "sd": s,
                       "ci95": None if s is None else [e - q * s, e + q * s]})
    measured = [r for r in pr.runs if r.time_per_token is not None]
    out = {
        "name": pr.name,
        "time_unit": pr.time_unit,
        "time_base": pr.time_unit or "the runs' time unit",
        "model": "tau_1 = sum_i F_i (E[T_i(G_i+1)] + o_i) + F_n T_n(1) (P1 with per-round "
                 "overhead), linear in the cost parameters; least squares on the fit runs",
        "parameters": params,
        "dof": cal.dof,
        "chi2": cal.chi2,
        "uncertainty": cal.uncertainty,
        "autoregressive_time_per_token": pr.t_ar,
        "fit_runs": [r.name for r in pr.fit_runs],
        "holdout_runs": [r.name for r in pr.runs if r.holdout],
        "runs": [r.to_dict() for r in cal.runs],
        "runs_predicted_acceptance": [r.to_dict() for r in cal.runs_predicted_acceptance],
        "holdout_errors": {"measured_acceptance": _errors(cal.runs),
                           "predicted_acceptance": _errors(cal.runs_predicted_acceptance)},
        "leave_one_out": list(cal.loo) if cal.loo else None,
        "acceptance_model": [law.to_config() for law in cal.acceptance_model],
        "acceptance_source": cal.acceptance_source,
        "best_threshold": choice.to_dict(),
        "engine_best": pr.engine_best,
        "warnings": list(cal.warnings),
    }
    if grid_choice is not None and measured:
        y = {r.thresholds: r.time_per_token for r in measured}
        best_meas = min(y, key=y.get)
        ch = grid_choice.thresholds
        out["best_among_runs"] = {
            **grid_choice.to_dict(),
            "measured_best": list(best_meas),
            "measured_time_per_token_of_choice": y.get(ch),
            "measured_best_time_per_token": y[best_meas],
            "choice_vs_measured_best": (None if ch not in y else y[ch] / y[best_meas] - 1.0),
            "acceptance": "each run's own (measured) acceptance",
        }
    if cal.loo:
        errs = [abs(x["relative_error"]) for x in cal.loo if x["relative_error"] is not None]
        out["leave_one_out_max_abs"] = max(errs) if errs else None
        out["leave_one_out_median_abs"] = float(np.median(errs)) if errs else None
    return out


def _pct(x) -> str:
    return "  n/a" if x is None else f"{100 * x:+.2f}%"


def explain_calibration(rep: dict, within: float) -> str:
    u = rep["time_unit"] or "units"
    lines = [f"Calibration {rep['name']!r}: fit on {', '.join(rep['fit_runs'])}"
             + (f"; held out {', '.join(rep['holdout_runs'])}" if rep["holdout_runs"] else ""),
             "  model: " + rep["model"]]
    lines.append("  fitted parameters (95 % interval):")
    for p in rep["parameters"]:
        ci = "" if p["ci95"] is None else f"  [{p['ci95'][0]:.4g}, {p['ci95'][1]:.4g}]"
        lines.append(f"    {p['name']:<22} {p['estimate']:.4g} {u}{ci}")
    lines.append(f"  uncertainty: {rep['uncertainty']}")
    lines.append(f"  time per token ({u}), predicted with each run's measured acceptance / with "
                 "the acceptance predicted from the fit runs:")
    acc = {r["name"]: r for r in rep["runs_predicted_acceptance"]}
    for r in rep["runs"]:
        a = acc.get(r["name"])
        meas = "" if r["measured"] is None else f"measured {r['measured']:.4g}"
        extra = "" if a is None else f"   | {a['predicted']:.4g} ({_pct(a['relative_error'])})"
        tag = "held out" if r["holdout"] else "fit"
        lines.append(f"    {r['name']:<10} {tag:<8} {meas:<16} predicted {r['predicted']:.4g} "
                     f"({_pct(r['relative_error'])}){extra}")
    he = rep["holdout_errors"]
    if he["measured_acceptance"]["max_abs"] is not None:
        worst = 100 * he["measured_acceptance"]["max_abs"]
        lines.append(f"  held-out runs: largest error {worst:.2f} % with their measured acceptance"
                     + ("" if he["predicted_acceptance"]["max_abs"] is None else
                        f", {100 * he['predicted_acceptance']['max_abs']:.2f} % with predicted "
                        "acceptance"))
    if rep.get("leave_one_out"):
        lines.append(f"  leave-one-out: largest error {100 * rep['leave_one_out_max_abs']:.2f} %,"
                     f" median {100 * rep['leave_one_out_median_abs']:.2f} %")
    else:
        lines.append("  leave-one-out: not available (needs more fit runs than unknowns)")
    lines.append(f"  acceptance for unmeasured thresholds: {rep['acceptance_source']}")
    b = rep["best_threshold"]
    p_best = "" if b["probability_best"] is None else (
        f"; best in {100 * b['probability_best']:.1f} % of parameter draws, within "
        f"{100 * within:g} % of the best in "
        f"{100 * b[f'probability_within_{100 * within:g}_percent']:.1f} %")
    lines.append(f"  best threshold: {b['thresholds']} -> {b['time_per_token']:.4g} {u} per token, "
                 f"speedup {b['speedup']:.3f}x over autoregressive "
                 f"({rep['autoregressive_time_per_token']:.4g} {u}){p_best}")
    if b["runner_up"] is not None:
        sd = "" if b["gap_sd"] is None else f" ± {100 * b['gap_sd']:.2f} %"
        lines.append(f"    runner-up {b['runner_up']}: {100 * b['gap']:.2f} %{sd} slower")
    g = rep.get("best_among_runs")
    if g is not None:
        cmp = ("" if g["choice_vs_measured_best"] is None else
               f"; its measured time is {100 * g['choice_vs_measured_best']:.2f} % above the "
               "measured best")
        lines.append(f"  among the measured runs (their own acceptance): predicted best "
                     f"{g['thresholds']}, measured best {g['measured_best']}{cmp}")
    if rep.get("engine_best") is not None:
        lines.append(f"  the engine's authors found best: {rep['engine_best']}")
    for w in rep["warnings"]:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def run(args) -> int:

    from polyspec.api import load_calibration_runs
    from polyspec_theory.errors import PolyspecInputError, as_int, as_real
    from polyspec_theory.planning.calibration import calibrate, choose_threshold
    from polyspec_theory.planning.calibration_problem import problem_from_config

    from ..output import write_output

    fit_on = None if args.fit_on is None else [x.strip() for x in args.fit_on.split(",")
                                                if x.strip()]
    if fit_on is not None and not fit_on:
        raise PolyspecInputError("--fit-on", "give at least one run")
    cfg = load_calibration_runs(args.runs, method=args.method, fit_on=fit_on)
    if args.max_threshold is not None:
        cfg = {**cfg, "max_threshold": as_int(args.max_threshold, "--max-threshold", low=1,
                                              high=256)}
    within = as_real(args.within, "--within", low=0.0, high=1.0)
    seed = as_int(args.seed, "--seed", low=0, high=2**31 - 1)
    problem = problem_from_config(cfg)
    cal = calibrate(problem)
    check_reproduces_fit_runs(cal)
    choice = choose_threshold(cal, within=within, seed=seed)
    grid = None
    measured = [r for r in problem.runs if r.time_per_token is not None]
    ths = sorted({r.thresholds for r in measured})
    if len(ths) == len(measured) and len(ths) > 1:
        by_th = {r.thresholds: r.laws for r in measured}
        grid = choose_threshold(cal, candidates=ths, laws_for=by_th.__getitem__, within=within,
                                seed=seed)
    rep = calibration_report(cal, choice, grid, within)
    if args.write_config:
        casc = cal.cascade(choice.thresholds)
        c = casc.to_config()
        c["description"] = (f"calibrated by polyspec calibrate from {args.runs}: predicted "
                            f"{choice.time_per_token:.4g} {problem.time_unit or ''} per token")
        write_output(args.write_config, dump_json(c) + "\n", "--write-config",
                     inputs=[args.runs])
    if args.write_pool:
        models = cal.models()
        names = [m.name for m in models]
        pool = {
            "name": problem.name,
            "models": [{"name": m.name, "cost": m.cost.to_config(),
                        **({"overhead": m.overhead} if m.overhead else {})} for m in models],
            "acceptance": {f"{names[i]}|{names[i + 1]}": law.to_config()
                           for i, law in enumerate(cal.acceptance_model)},
            "max_threshold": problem.max_threshold,
        }
        if problem.time_unit:
            pool["time_unit"] = problem.time_unit
        if problem.policy != "accumulate":
            pool["policy"] = problem.policy
        write_output(args.write_pool, dump_json(pool) + "\n", "--write-pool",
                     inputs=[args.runs])
    if args.json:
        print(dump_json(rep))
    else:
        print(explain_calibration(rep, within))
    return 0
