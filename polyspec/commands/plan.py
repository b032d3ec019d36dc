"""``polyspec plan POOL`` / ``polyspec plan --traces DIR``: the exact best cascade from a pool
of models (chain, order and thresholds; :mod:`polyspec_theory.planner`)."""

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
    p.add_argument("--no-prune", action="store_true",
                   help="score every configuration (same answer, much slower; for checking)")


# --------------------------------------------------------------------------------------------
# pool from captured traces
# --------------------------------------------------------------------------------------------
REGIME_KS = (2, 3)  # hidden-regime models tried per pair (1 regime = the iid geometric law)


def capture_horizon(captures) -> int:
    """Tokens per decode of the captures: the median over captures of the trace header's
    ``prompts.max_new_tokens`` (read from ``capture.source``), or of the fewest tokens any
    prompt generated when the header is not available."""
    import json

    import numpy as np

    vals = []
    for c in captures:
        n = None
        try:
            with open(c.source, encoding="utf-8") as fh:
                n = int(json.loads(fh.readline())["prompts"]["max_new_tokens"])
        except (OSError, ValueError, KeyError, TypeError):
            n = None
        if n is None and c.prompt_tokens:
            n = int(min(c.prompt_tokens))
        if n is None:
            n = max(1, round(c.tokens / max(c.n_prompts, 1)))
        vals.append(n)
    return int(np.median(vals))


def regime_fits(captures, ks=REGIME_KS) -> dict:
    """``{(verifier, drafter): {k: RegimeFit}}``: hidden-regime models
    (:func:`polyspec_theory.regimes.fit_regimes`) per pair, on the rounds of every capture
    using the pair, one sequence per (capture, prompt), rounds in order."""
    import numpy as np

    from polyspec_theory.regimes import fit_regimes

    data: dict[tuple[str, str], list] = {}
    for ci, c in enumerate(captures):
        for i in range(c.n - 1):
            r = c.rounds[i]
            if r.n == 0:
                continue
            d = data.setdefault((c.models[i], c.models[i + 1]), [[], [], []])
            d[0].append(r.A)
            d[1].append(r.G)
            d[2].append(np.asarray(r.prompt, dtype=np.int64) + (ci << 32))
    out = {}
    for key, (a, g, grp) in sorted(data.items()):
        a, g, grp = (np.concatenate(x) for x in (a, g, grp))
        out[key] = {k: fit_regimes(a, g, grp, k=k) for k in ks}
    return out


def pool_from_captures(captures, *, law: str = "best", max_threshold: int = 16,
                       temperature: float | None = None, name: str = "traces",
                       horizon: int | None = None):
    """A :class:`polyspec_theory.planner.Pool` from captured configurations
    (:class:`validation.compare.ConfigCapture`, e.g. from
    :func:`validation.trace_captures.load_captures`).

    - Models: every model of the captures; the target (first model of every capture; all
      captures must share it) first, the others by decreasing fitted ``T(1)``.
    - Acceptance: rounds pooled per pair over captures and fitted by censored MLE
      (:func:`validation.compare.fit_pairs`) and, as sequences per prompt, by hidden-regime
      models with 2 and 3 regimes (:func:`regime_fits`: acceptance that persists across
      rounds, whose law depends on the block length; used through
      :class:`polyspec_theory.regimes.RegimeLaw` for decodes of ``horizon`` tokens, default
      :func:`capture_horizon`). Both likelihoods are of the same observed rounds, so
      ``law="best"`` takes the AIC-best of the non-Gaussian iid families and the regime
      models; ``"regime"`` the AIC-best regime model; a family name that family. Only pairs
      seen in some capture are adjacent in the pool.
    - Costs: per capture, the cost curves fitted from its baseline timings and calibrated
      to its interleaved autoregressive forward times (:func:`validation.compare.fit_costs`),
      divided by that capture's target ``T_1(1)`` (same machine load), then the element-wise
      median over the captures containing the model: a table ``T(1..m_max)`` in units of
      one target forward.
    - One sampling setting: captures at ``temperature`` (required when they differ).
    Returns ``(pool, info)``; ``info`` lists the captures used and rounds per pair.
    """
    import numpy as np

    from polyspec_theory._input import PolyspecInputError, as_int
    from polyspec_theory.config import Model
    from polyspec_theory.costs import CostCurve
    from polyspec_theory.laws import LAW_FAMILIES
    from polyspec_theory.planner import MAX_PLAN_THRESHOLD, Pool
    from validation.compare import fit_costs, fit_pairs

    caps = list(captures)
    if not caps:
        raise PolyspecInputError("traces", "no captured configuration")
    if law not in ("best", "regime") and law not in LAW_FAMILIES:
        raise PolyspecInputError("--law", f"unknown law family {law!r}; choose best, regime "
                                 f"or one of {', '.join(LAW_FAMILIES)}")
    max_threshold = as_int(max_threshold, "--max-threshold", low=1, high=MAX_PLAN_THRESHOLD)
    settings = sorted({(float(c.temperature), int(c.top_k)) for c in caps})
    if temperature is not None:
        caps = [c for c in caps if float(c.temperature) == float(temperature)]
        if not caps:
            raise PolyspecInputError(
                "--temperature", f"no capture at temperature {temperature}; found "
                + ", ".join(f"T={t:g} top_k={k}" for t, k in settings))
        settings = sorted({(float(c.temperature), int(c.top_k)) for c in caps})
    if len(settings) > 1:
        raise PolyspecInputError(
            "--temperature", "the captures mix sampling settings ("
            + ", ".join(f"T={t:g} top_k={k}" for t, k in settings)
            + "); acceptance depends on them: choose one with --temperature")
    targets = sorted({c.models[0] for c in caps})
    if len(targets) > 1:
        raise PolyspecInputError("traces", f"the captures have different targets: "
                                 f"{', '.join(targets)}")
    target = targets[0]
    policies = sorted({c.policy for c in caps})
    if len(policies) > 1:
        raise PolyspecInputError("traces", f"the captures mix block policies: {policies}")
    # costs in target-forward units, median over captures
    tables: dict[str, list[np.ndarray]] = {}
    for c in caps:
        fits = fit_costs(c, calibrate=True)
        t_target = fits[target].at(1)
        if not t_target > 0:
            raise PolyspecInputError(f"traces.{c.name}", "target cost T_1(1) is not positive")
        for nm, cf in fits.items():
            m_max = int(max(cf.ms))
            curve = cf.curve()
            tables.setdefault(nm, []).append(
                np.asarray(curve(np.arange(1, m_max + 1)), dtype=np.float64) / t_target)
    costs = {}
    for nm, tabs in tables.items():
        k = min(t.size for t in tabs)
        costs[nm] = CostCurve.from_table(
            [float(x) for x in np.maximum(np.median([t[:k] for t in tabs], axis=0), 0.0)])
    others = sorted((nm for nm in costs if nm != target), key=lambda nm: (-costs[nm].t1, nm))
    models = [Model(target, costs[target])] + [Model(nm, costs[nm]) for nm in others]
    pair_fits = fit_pairs(caps)
    use_regimes = law in ("best", "regime")
    if use_regimes:
        from polyspec_theory.regimes import MAX_HORIZON, RegimeLaw

        horizon = capture_horizon(caps) if horizon is None else horizon
        horizon = as_int(horizon, "--horizon", low=1, high=MAX_HORIZON)
        reg = regime_fits(caps)
    pairs, rounds = {}, {}
    for (v, d, _t, _k), pf in sorted(pair_fits.items()):
        aic = {f.law.family: f.aic for f in pf.fits if f.law.family != "gaussian"}
        if use_regimes:
            aic.update({f"regime{k}": rf.aic for k, rf in reg[(v, d)].items()})
            cands = [c for c in aic if law == "best" or c.startswith("regime")]
            choice = min(cands, key=aic.__getitem__)
            if choice.startswith("regime"):
                pairs[(v, d)] = RegimeLaw(reg[(v, d)][int(choice[6:])].model, horizon)
            else:
                pairs[(v, d)] = pf.law(choice)
        else:
            pairs[(v, d)] = pf.law(law)
        rounds[f"{v}|{d}"] = {"rounds": pf.counts.n_rounds, "law": pairs[(v, d)].to_config(),
                              "aic": aic, "configs": list(pf.configs)}
    pool = Pool(tuple(models), pairs, max_threshold, policies[0], name)
    info = {
        "source": "traces",
        "captures": [c.name for c in caps],
        "temperature": settings[0][0],
        "top_k": settings[0][1],
        "law": law,
        **({"horizon": horizon} if use_regimes else {}),
        "cost_units": "one target forward (per capture, calibrated curves / target T_1(1); "
                      "median over captures)",
        "pairs": rounds,
    }
    return pool, info


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
    lines.append("Time base: the pool's cost units; speedup = T_1(1) / tau_1 (P1).")
    return "\n".join(lines)


def run(args) -> int:
    from pathlib import Path

    from polyspec_theory._input import PolyspecInputError, as_int
    from polyspec_theory.planner import DEFAULT_MAX_THRESHOLD, Pool, plan
    from validation.files import atomic_write_text, dump_json, read_mapping

    if (args.pool is None) == (args.traces is None):
        raise PolyspecInputError("pool", "give a pool file or --traces DIR (exactly one)")
    top = as_int(args.top, "--top", low=0, high=1000)
    info = None
    if args.traces is not None:
        from validation.trace_captures import load_captures

        captures, notes = load_captures(Path(args.traces), allow_truncated=args.allow_truncated)
        mt = DEFAULT_MAX_THRESHOLD if args.max_threshold is None else args.max_threshold
        pool, info = pool_from_captures(captures, law=args.law, max_threshold=mt,
                                        temperature=args.temperature,
                                        name=Path(args.traces).resolve().name or "traces",
                                        horizon=args.horizon)
        info["notes"] = list(notes)
    else:
        for opt, val in (("--law", args.law != "best"), ("--temperature",
                                                         args.temperature is not None),
                         ("--horizon", args.horizon is not None),
                         ("--allow-truncated", args.allow_truncated)):
            if val:
                raise PolyspecInputError(opt, "only applies with --traces")
        cfg = read_mapping(args.pool)
        if args.max_threshold is not None:
            cfg = dict(cfg, max_threshold=args.max_threshold)
        pool = Pool.from_config(cfg)
    result = plan(pool, top, prune=not args.no_prune)
    if args.write_pool:
        atomic_write_text(args.write_pool, dump_json(pool.to_config()) + "\n")
    if args.write_config:
        cfg = pool.cascade(result.best.chain, result.best.thresholds).to_config()
        cfg["description"] = (f"planned by polyspec plan from pool {pool.name!r}: predicted "
                              f"speedup {result.best.speedup:.4f}x (P1)")
        atomic_write_text(args.write_config, dump_json(cfg) + "\n")
    if args.json:
        print(dump_json(plan_report(result, pool, info)))
    else:
        print(explain_plan(result, pool, info))
        for n in (info or {}).get("notes", []):
            print(f"note: {n}")
    return 0
