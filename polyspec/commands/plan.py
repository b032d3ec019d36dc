"""``polyspec plan POOL`` / ``polyspec plan --traces DIR``: the exact best cascade from a pool
of models (chain, order and thresholds; :mod:`polyspec_theory.planning.planner`)."""

from __future__ import annotations

HELP = ("Choose the best cascade from a pool of models: which models, in which order, with "
        "which thresholds (exact optimum of P1), with alternatives, the best two-model "
        "configuration and the paper's greedy insertion rule for comparison.")


def add_arguments(p):
    p.add_argument("pool", nargs="?", default=None,
                   help="pool file (JSON or YAML): models (target first, with costs), "
                        "acceptance keyed \"verifier|drafter\", max_threshold")
    p.add_argument("--traces", metavar="DIR", default=None,
                   help="build the pool from the captured traces in DIR (fitted laws per "
                        "pair, fitted cost curves) instead of a pool file")
    p.add_argument("--top", type=int, default=5,
                   help="number of alternative chains to report (default 5)")
    p.add_argument("--max-threshold", type=int, default=None,
                   help="largest threshold searched (default: the pool's max_threshold, or "
                        "16 with --traces)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: chain, thresholds, speedup, alternatives, "
                        "best_two_model, greedy_paper_rule, baseline, search, pool")
    p.add_argument("--write-config", metavar="PATH", default=None,
                   help="also write the best cascade as a cascade config (for predict, "
                        "simulate, capture)")
    p.add_argument("--write-pool", metavar="PATH", default=None,
                   help="also write the pool that was planned (useful with --traces)")
    p.add_argument("--law", default="best",
                   help="with --traces: law per pair (best = AIC-best among the iid families "
                        "but the Gaussian and hidden-regime models with 2-3 regimes; regime = "
                        "AIC-best hidden-regime model; or iid, positional, beta, gaussian)")
    p.add_argument("--horizon", type=int, default=None,
                   help="with --traces: tokens per decode for hidden-regime laws (default: "
                        "the captures' tokens per prompt)")
    p.add_argument("--temperature", type=float, default=None,
                   help="with --traces: use only captures at this temperature (needed when "
                        "the directory mixes sampling settings)")
    p.add_argument("--allow-truncated", action="store_true",
                   help="with --traces: skip a truncated last line instead of failing")
    p.add_argument("--batch", metavar="B1,B2,...", default=None,
                   help="serving batch sizes (e.g. 1,4,16,64): the best cascade at each batch "
                        "under the synchronised batch theory (docs/theory.md Part III-C)")
    p.add_argument("--no-prune", action="store_true",
                   help="score every configuration (same answer, much slower; for checking)")
    p.add_argument("--aa", metavar="DIR", default=None,
                   help="with --traces: A/A captures giving the noise floor (default DIR/aa "
                        "when it exists)")
    p.add_argument("--draws", type=int, default=400,
                   help="with --traces: draws for the candidates' intervals and "
                        "probability_best (default 400, seed 0)")
    from .gpu import add_plan_arguments

    add_plan_arguments(p)


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------
def _chain(chain) -> str:
    return " <- ".join(chain)


def plan_report(result, pool, info: dict | None = None) -> dict:
    """The JSON object printed by ``plan --json``."""
    out = result.to_dict()
    out["pool"] = {
        "name": pool.name,
        "models": list(pool.names),
        "n_pairs": len(pool.pairs),
        "time_unit": pool.time_unit,
        **({"source": "file"} if info is None else info),
    }
    return out


def explain_plan(result, pool, info: dict | None = None) -> str:
    """Plain-text account of a plan."""
    best = result.best
    lines = []
    src = "" if info is None else f" (built from {len(info['captures'])} capture(s))"
    lines.append(
        f"Pool {pool.name!r}{src}: {len(pool.names)} models, {len(pool.pairs)} pairs, "
        f"thresholds 1..{result.max_threshold}, block policy {result.policy}"
    )
    lines.append(
        f"Best cascade: {_chain(best.chain)}  thresholds {list(best.thresholds)}  "
        f"predicted speedup {best.speedup:.4f}x (P1, exact optimum)"
    )
    two = result.best_two_model
    gain = best.speedup / two.speedup - 1.0
    lines.append(
        f"  best two-model: {_chain(two.chain)} {list(two.thresholds)} {two.speedup:.4f}x "
        f"(the best cascade is {100 * gain:+.1f} %); autoregressive target: "
        f"{result.baseline_speedup:.1f}x"
    )
    if best.speedup <= result.baseline_speedup:
        lines.append("  Warning: no cascade from this pool beats autoregressive decoding.")
    if result.alternatives:
        lines.append("Alternatives (next-best chains, each with its own optimal thresholds):")
        for k, a in enumerate(result.alternatives, start=2):
            lines.append(f"  {k}. {_chain(a.chain)}  {list(a.thresholds)}  {a.speedup:.4f}x "
                         f"({100 * (a.speedup / best.speedup - 1):+.2f} %)")
    g = result.greedy
    lines.append(
        f"Paper's greedy insertion rule (P5 approximate T'/T_i < L'(1/L_i - 1/L_i')), from "
        f"{_chain(g.start.chain)} {g.start.speedup:.4f}x:"
    )
    for s in g.steps:
        verdict = "helps" if s.speedup_after > s.speedup_before else "HURTS"
        lines.append(
            f"  + {s.inserted} between {s.verifier} and {s.drafter}: {s.lhs:.4g} < {s.rhs:.4g};"
            f" exact {s.speedup_before:.4f}x -> {s.speedup_after:.4f}x ({verdict})"
        )
    if not g.steps:
        lines.append("  no insertion passes the condition")
    gap = g.chosen.speedup / best.speedup - 1.0
    lines.append(
        f"  ends with {_chain(g.chosen.chain)} {list(g.chosen.thresholds)}: "
        f"{g.chosen.speedup:.4f}x ({100 * gap:+.1f} % vs the optimum)"
    )
    st = result.stats
    lines.append(
        f"Search: {st.chains_total:,} chains, {st.configs_total:,} configurations; "
        f"{st.configs_scored:,} scored exactly ({st.chains_scored:,} chains), the rest "
        f"pruned by a bound that provably cannot reach the kept ones"
        + ("" if st.pruning else " (pruning off)") + "."
    )
    unit = pool.time_unit or "the pool's cost units"
    lines.append(f"Time base: {unit}; speedup = T_1(1) / tau_1 (P1; the baseline T_1(1) has "
                 "no per-round overhead).")
    return "\n".join(lines)


def _explain_uncertainty(unc) -> str:
    if unc["candidates"] is None:
        return f"Uncertainty: none stated ({unc['note']})."
    lines = ["How sure (acceptance-fit, cost and measurement noise; "
             + ("noise floor {:.1%} from A/A captures".format(unc["noise_floor"]["relative_sd"])
                if unc["noise_floor"] else "no A/A noise floor") + "):"]
    for c in unc["candidates"]:
        lo, hi = c["interval95"]
        lines.append(f"  {_chain(c['chain'])} {c['thresholds']}: {c['speedup']:.3f}x, 95 % "
                     f"[{lo:.3f}, {hi:.3f}], best with probability {c['probability_best']:.2f}")
    top = unc["candidates"][0]
    lines.append(f"Decision: {top['decision']} — the planned cascade is the best with "
                 f"probability "
                 f"{top['probability_best']:.2f} (confident needs 0.90).")
    return "\n".join(lines)


def run(args) -> int:
    from polyspec_theory.errors import refuse_options

    if args.gpu is not None:  # a named GPU before it runs (validation.hardware)
        from .gpu import run_plan

        return run_plan(args)
    refuse_options((("--engine", args.engine), ("--pool", args.gpu_pool),
                    ("--figure", args.figure)), "only applies with --gpu")
    return _run(args)


def _run(args) -> int:
    from pathlib import Path

    from polyspec.configs import read_config
    from polyspec_theory.errors import PolyspecInputError, as_int, refuse_options
    from polyspec_theory.planning.planner import plan
    from polyspec_theory.planning.pool import DEFAULT_MAX_THRESHOLD, Pool

    from ..output import check_output, dump_json, write_output

    if (args.pool is None) == (args.traces is None):
        raise PolyspecInputError("pool", "give a pool file or --traces DIR (exactly one)")
    for opt, out in (("--write-pool", args.write_pool), ("--write-config", args.write_config)):
        if out:  # before any work; the fit files a pool names are checked again on writing
            check_output(out, opt, inputs=[args.pool, args.traces])
    if args.traces is not None:
        from validation.formats import detect_dir

        if getattr(detect_dir(args.traces), "name", None) == "pipespec":  # GPU runs
            refuse_options((("--write-pool", args.write_pool),
                            ("--write-config", args.write_config),
                            ("--temperature", args.temperature),
                            ("--batch", args.batch),
                            ("--max-threshold", args.max_threshold),
                            ("--law", args.law != "best"),
                            ("--horizon", args.horizon),
                            ("--allow-truncated", args.allow_truncated),
                            ("--aa", args.aa)),
                           "does not apply to a PipeSpec GPU trace folder (plan --traces on it "
                           "ranks the measured chains by their forecast; nothing is written)")
            return _plan_gpu(args.traces, args.json)
    top = as_int(args.top, "--top", low=0, high=1000)
    info = None
    if args.traces is not None:
        from validation.analysis.pool import pool_from_captures
        from validation.traces.records import read_traces

        captures = read_traces(Path(args.traces), allow_truncated=args.allow_truncated)
        from validation.capture.composition_profile import load_profiles

        profiles = load_profiles(Path(args.traces) / "profiles", captures)
        notes = [n for c in captures for n in c.notes]
        mt = DEFAULT_MAX_THRESHOLD if args.max_threshold is None else args.max_threshold
        pool, info = pool_from_captures(captures, law=args.law, max_threshold=mt,
                                        temperature=args.temperature,
                                        name=Path(args.traces).resolve().name or "traces",
                                        horizon=args.horizon, profiles=profiles)
        info["notes"] = list(notes)
    else:
        refuse_options((("--law", args.law != "best"), ("--temperature", args.temperature),
                        ("--horizon", args.horizon),
                        ("--allow-truncated", args.allow_truncated)),
                       "only applies with --traces")
        from polyspec.api import resolve_fit_files

        cfg = resolve_fit_files(read_config(args.pool), Path(args.pool).parent)
        if args.max_threshold is not None:
            cfg = dict(cfg, max_threshold=args.max_threshold)
        pool = Pool.from_config(cfg)
    if args.batch is not None:
        from . import serving_batch

        return serving_batch.run_plan(args, pool)
    result = plan(pool, top, prune=not args.no_prune)
    if args.write_pool:
        write_output(args.write_pool, dump_json(pool.to_config()) + "\n", "--write-pool",
                     inputs=[args.pool])
    if args.write_config:
        cfg = pool.cascade(result.best.chain, result.best.thresholds).to_config()
        cfg["description"] = (f"planned by polyspec plan from pool {pool.name!r}: predicted "
                              f"speedup {result.best.speedup:.4f}x (P1)")
        write_output(args.write_config, dump_json(cfg) + "\n", "--write-config",
                     inputs=[args.pool])
    from validation.analysis import plan_uncertainty as pu

    if args.traces is not None:
        aa = Path(args.aa) if args.aa else Path(args.traces) / "aa"
        aa_caps = read_traces(aa) if aa.is_dir() and any(aa.glob("*.jsonl")) else []
        unc = pu.plan_decisions(result, pool, captures, profiles, aa_caps,
                                temperature=info["temperature"], top=top + 1,
                                draws=pu.Draws(args.draws))
    else:
        unc = {"candidates": None, "note": pu.POOL_FILE_NOTE}
    from polyspec_theory.planning.modes import modes_text, plan_modes

    best_unc = (unc.get("candidates") or [None])[0]
    modes = plan_modes(pool, result,
                       None if best_unc is None else best_unc.get("interval95"))
    if args.json:
        print(dump_json({**plan_report(result, pool, info), "uncertainty": unc,
                         "modes": modes}))
    else:
        print(explain_plan(result, pool, info))
        print(_explain_uncertainty(unc))
        top = (unc.get("candidates") or [None])[0]
        print(modes_text(modes, None if top is None else top["probability_best"]))
        for n in (info or {}).get("notes", []):
            print(f"note: {n}")
    return 0


def _plan_gpu(traces, as_json: bool) -> int:
    """``plan --traces`` on a PipeSpec folder: every measured chain ranked by its forecast,
    the best one recommended only when its interval says so (:func:`.advice.decide`), and
    whether a third model pays."""
    from polyspec_theory.planning.advice import decide
    from validation.analysis.pipespec_forecast import plan_dir

    from ..output import dump_json

    out = plan_dir(traces)
    chains = out["chains"]
    def name(r):  # the configuration: models, lookahead and precisions (as forecast names it)
        prec = ", ".join(r["precisions"][m] for m in reversed(r["models"]))
        return f"{' <- '.join(reversed(r['models']))} lookahead {r['lookahead']} ({prec})"

    if chains and out["model_error_rel_sd"] is None:
        out["decision"] = {"decision": "too close to call", "text": (
            "not decided: no chain of this folder can be forecast from the others, so the "
            "forecasts' own error is unmeasured (their intervals hold the cost spread only)")}
    elif len(chains) > 1:
        best, rival = chains[0], chains[1]
        out["decision"] = decide(name(best), name(rival), speedup=best["speedup"],
                                 interval=best["interval95"], rival_speedup=rival["speedup"],
                                 rival_interval=rival["interval95"])
    elif chains:
        out["decision"] = {"decision": "confident",
                           "text": f"run {name(chains[0])} (the only chain measured)"}
    if as_json:
        print(dump_json(out))
        return 0
    print(f"{len(chains)} synchronous chains forecast from {traces} (speedup over the "
          f"target's greedy run, 95 % interval), best first:")
    for r in chains:
        iv = r["interval95"]
        print(f"  {name(r)}: {r['speedup']:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]")
    for v in out["third_model"]:
        verdict = "pays" if v["third_model_pays"] else "does not pay"
        print(f"third model for {v['target']}: {verdict} ({v['why']})")
    if chains:
        print(f"Best: {out['decision']['text']}")
    for m in out["missing_baselines"]:
        print(f"note: chains into {m} not forecast: no greedy baseline of {m}")
    return 0
