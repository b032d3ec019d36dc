"""Write the validation report: Markdown + PNG plots + JSON (``polyspec validate --out``).

Files: ``report.md``, ``validation.json`` (the full :meth:`ValidationResult.to_json` plus
per-configuration details), ``scatter.png`` (predicted vs measured speedup, plain and
extended), ``errors_by_law.png``, one ``acceptance_<pair>.png`` per pair (observed
accepted-count histogram with every fitted law overlaid, the Gaussian baseline included) and
one ``cost_<model>.png`` per model (baseline timings and fitted ``T(m)``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.fits import fit_costs
from validation.analysis.validate import P5, ValidationResult, validate
from validation.files import atomic_write_text, dump_json

__all__ = ["write_report", "expected_histogram", "markdown"]

TARGET_MEDIAN = 0.03
TARGET_MAX = 0.08


def expected_histogram(law, counts) -> np.ndarray:
    """Expected number of rounds with ``A = k`` (k = 0..max cap) under ``law`` given the
    observed caps of ``counts`` (the fitted law's prediction for the observed histogram)."""
    gmax = int(counts.caps.max())
    out = np.zeros(gmax + 1)
    for g in np.unique(counts.caps):
        n_g = counts.counts[counts.caps == g].sum()
        out[: g + 1] += n_g * law.pmf_vector(int(g))
    return out


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_") or "x"


def _pct(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.2f} %"


def _stat_text(st) -> str:
    if not st or not st["n_configs"]:
        return "n/a"
    return (f"median |error| {100 * st['median_abs_error']:.2f} %, max "
            f"{100 * st['max_abs_error']:.2f} % ({st['n_configs']} configurations)")


def markdown(result: ValidationResult, title: str = "Validation report",
             plots: dict | None = None, notes=()) -> str:
    """The Markdown report text: the predictive headline first, then the diagnostics."""
    if not result.configs:
        lines = [f"# {title}", ""] + [f"> {n}" for n in notes] + ([""] if notes else [])
        lines += _structured_markdown(result)
        if plots:
            lines += ["", "## Plots", ""] + [f"![{k}]({v})" for k, v in plots.items()]
        return "\n".join(lines) + "\n"
    lines = _headline(result, title, notes)
    for section in (_per_config, _residuals, _cost_curves, _pair_laws, _insertions):
        lines += section(result)
    if result.structured:
        lines += [""] + _structured_markdown(result)
    if plots:
        lines += ["", "## Plots", ""]
        for label, fn in plots.items():
            lines.append(f"![{label}]({fn})")
    return "\n".join(lines) + "\n"


def _headline(result: ValidationResult, title: str, notes) -> list[str]:
    """The title, the predictive headline, the diagnostics' summary and the notes."""
    from validation.analysis.validate import DIAGNOSTICS

    s = result.summary()
    lines = [f"# {title}", ""]
    n_pred = s["n_predicted"]
    if n_pred:
        ok = (s["median_abs_error"] <= TARGET_MEDIAN and s["max_abs_error"] <= TARGET_MAX)
        lines.append(
            f"**Headline (predictive: nothing of a capture goes into its prediction)** on "
            f"{n_pred} of {s['n_configs']} configurations: median |error| "
            f"**{100 * s['median_abs_error']:.2f} %**, max **{100 * s['max_abs_error']:.2f} %** "
            f"(target ≤ {100 * TARGET_MEDIAN:.0f} % / ≤ {100 * TARGET_MAX:.0f} %: "
            f"{'met' if ok else 'missed'}); the prediction falls inside the measured 95 % "
            f"interval for {s['inside_ci']} of {n_pred}.")
    else:
        lines.append("**No headline prediction**: no configuration has a composition "
                     "profile of its cascade (`polyspec profile --cascade`); only the "
                     "diagnostics below, which use each capture's own data.")
    lines += ["", "Diagnostics (each uses the capture's own rounds or timings; they explain "
              "the residual, they do not predict):", ""]
    for k, st in s["diagnostics"].items():
        what = DIAGNOSTICS.get(k) or f"P1 with the capture's own {k[3:]} law"
        lines.append(f"- `{k}` — {what}: {_stat_text(st)}.")
    lines.append("")
    lines.append(f"Dominant residual source of p1_best (most configurations): "
                 f"**{s['dominant_residual']}**; median |share| of measured time per token: "
                 + ", ".join(f"{k} {100 * v:.2f} %"
                             for k, v in s["median_abs_residual_share"].items()) + ".")
    lines += ["", "Error = (predicted − measured) / measured speedup. Measured speedup = the "
              "capture's autoregressive target time per token / cascade decode time per "
              "token; its 95 % interval is a paired bootstrap over prompts.", ""]
    for n in notes:
        lines.append(f"> {n}")
    if notes:
        lines.append("")
    return lines


def _per_config(result: ValidationResult) -> list[str]:
    s = result.summary()
    lines = []
    lines += ["## Per configuration", ""]
    diag_names = list(s["diagnostics"])
    head = ["config", "models", "θ", "T", "measured (95 % CI)", "predicted", "error",
            "inside CI", "best law"] + [f"err {k}" for k in diag_names] + ["dominant"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for c in result.configs:
        lo, hi = c.measured_ci95
        meas = f"{c.measured_speedup:.3f}" + (
            "" if math.isnan(lo) else f" [{lo:.3f}, {hi:.3f}]")
        pred = "—" if c.forecast is None else f"{c.predicted_speedup:.3f}"
        inside = "—" if c.inside_ci is None else ("yes" if c.inside_ci else "no")
        row = [c.name, "→".join(c.models), ",".join(map(str, c.thresholds)),
               f"{c.temperature:g}", meas, pred,
               "—" if c.forecast is None else _pct(c.error), inside, c.best_family]
        row += [_pct(c.diagnostic_error(k)) for k in diag_names]
        row.append(c.decomposition["dominant"])
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _residuals(result: ValidationResult) -> list[str]:
    lines = []
    lines += ["", "## Residual decomposition (share of measured time per token)", "",
              "τ_meas − τ_pred = Σ (F_meas − F_pred)·t_meas [forward counts: acceptance "
              "model incl. correlation] + Σ F_pred·(t_meas − T_pred) [forward cost: in-cascade "
              "slowdown of the forwards, context drift, timing drift] + overhead/token "
              "[decoder time outside forwards]; "
              "`ar_baseline` = measured AR time per token / T_1(1) − 1.", "",
              "| config | forward counts | of which beyond positional law | forward cost | "
              "of which context drift | overhead | AR baseline | lag-1 corr of A/G (±se) |",
              "|---|---|---|---|---|---|---|---|"]
    for c in result.configs:
        d = c.decomposition
        tm = d["tau_measured"]
        corr = "; ".join(
            f"{x['verifier']}: {x['rho']:+.3f}±{x['se']:.3f}" if not math.isnan(x["rho"])
            else f"{x['verifier']}: n/a" for x in c.correlations)
        lines.append(
            f"| {c.name} | {_pct(d['forward_counts'] / tm)} | "
            f"{_pct(d['forward_counts_beyond_positional_law'] / tm)} | "
            f"{_pct(d['forward_cost'] / tm)} | {_pct(d['forward_cost_context_drift'] / tm)} | "
            f"{_pct(d['overhead'] / tm)} | {_pct(d['relative']['ar_baseline'])} | {corr} |")
    return lines


def _cost_curves(result: ValidationResult) -> list[str]:
    lines = []
    lines += ["", "## Cost curves (per model, over the configurations that use it)", "",
              "T(1) and the slope k of the affine fit are calibrated to the interleaved AR "
              "forward time (scale = calibration factor applied to the cost-curve timings); "
              "context effect = relative change of T(1) between the cost curve's reference "
              "context and the capture's mean context.", "",
              "| model | configs | T(1) ms (median) | k ms/position | context slope µs/token "
              "(± se) | scale min–max | context effect max |",
              "|---|---|---|---|---|---|---|"]
    per_model: dict = {}
    for c in result.configs:
        for name, cf in c.costs.items():
            per_model.setdefault(name, []).append((cf, c.context_effect[name]))
    for name, items in per_model.items():
        t1 = np.median([cf["table"][0] for cf, _ in items])
        k = np.median([cf["per_token"] for cf, _ in items])
        sl = np.median([cf["context_slope"] for cf, _ in items])
        se = np.median([cf["context_slope_se"] for cf, _ in items])
        sc = [cf["scale"] for cf, _ in items]
        eff = max((abs(e) for _, e in items), default=0.0)
        lines.append(f"| {name} | {len(items)} | {1e3 * t1:.4f} | {1e3 * k:.4f} | "
                     f"{1e6 * sl:.3g} ± {1e6 * se:.2g} | {min(sc):.3f}–{max(sc):.3f} | "
                     f"{100 * eff:.2f} % |")
    return lines


def _pair_laws(result: ValidationResult) -> list[str]:
    lines = []
    lines += ["", "## Acceptance laws per pair (pooled over configurations)", "",
              "| verifier → drafter | T | rounds | mean A | law | params | AIC | G-test p |",
              "|---|---|---|---|---|---|---|---|"]
    for p in result.pairs.values():
        v, dr, t, _ = p.key
        for i, f in enumerate(p.fits):
            params = ", ".join(f"{k}={_fmt(x)}" for k, x in f.law.to_config().items())
            pv = f.gof.p_value
            first = (f"{v} → {dr} | {t:g} | {p.counts.n_rounds} | "
                     f"{p.counts.mean_accepted():.3f}") if i == 0 else " |  |  | "
            lines.append(
                f"| {first} | {f.law.family}"
                f"{' (best)' if f.law.family == p.best.law.family else ''} | {params} | "
                f"{f.aic:.1f} | {'n/a' if math.isnan(pv) else f'{pv:.3g}'} |")
    return lines


def _insertions(result: ValidationResult) -> list[str]:
    lines = []
    if result.insertions:
        lines += ["", "## P5: inserting a zoo model into a captured cascade", "",
                  "z = measured speedup difference / its standard error over prompts (|z| < 2: "
                  "the measured decision itself is within noise).", "",
                  "| cascade | insert | at | θ new | predicted (P1) | pred gain | "
                  "with overhead | + in-cascade slowdown | measured | agrees (P1 / overhead / "
                  "+slowdown) | P(decision right) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in result.insertions:
            pr = x["predicted"]
            po = x["predicted_with_overhead"]
            m = x["measured"]
            pe = x.get("predicted_extended")

            def yn(v):
                return "—" if v is None else ("yes" if v else "no")

            agree = "—" if x["agrees"] is None else (
                f"{yn(x['agrees'])} / {yn(x['agrees_with_overhead'])} / "
                f"{yn(x.get('agrees_extended'))}")
            pe_s = "—" if pe is None else (
                f"{'helps' if pe['helps'] else 'hurts'} ({_pct(pe['relative_gain'])})")
            meas = "—" if m is None else (
                f"{'helps' if m['helps'] else 'hurts'} ({m['speedup_without']:.3f}→"
                f"{m['speedup_with']:.3f}, z = {m.get('z', math.nan):+.1f}, {m['with']})")
            lines.append(
                f"| {x['cascade']} | {x['inserted']} | after {x['models'][x['position']]} | "
                f"{','.join(map(str, x['thresholds_new']))} | "
                f"{'helps' if pr['helps'] else 'hurts'} | {_pct(pr['relative_gain'])} | "
                f"{'helps' if po['helps'] else 'hurts'} ({_pct(po['relative_gain'])}) | "
                f"{pe_s} | {meas} | {agree} | {x['confidence']:.3f} |")
    return lines


def _mp(d, fmt="{:.3f}") -> str:
    """``measured / predicted`` of a ``{"measured", "predicted"}`` entry."""
    return f"{fmt.format(d['measured'])} / {fmt.format(d['predicted'])}"


def _structured_markdown(result: ValidationResult) -> list[str]:
    """The section on captures with token trees and adaptive draft lengths."""
    ss = result.structured_summary()
    lines = ["## Token trees and adaptive draft lengths (docs/theory.md Part III-D)", "",
             f"{ss['n_configs']} structured configurations. Structured P1 "
             "(`predict_structured`) with laws fitted on each capture's own rounds (trees: "
             "sibling-rank law by depth from the recorded visits; confidence cut-off: the "
             "joint Beta–logistic law of the drafter's top probability and acceptance; chain "
             "and HF pairs: the AIC-best chain law) and AR-calibrated cost curves: median "
             f"|error| **{_pct(ss['median_abs_error'])}**, max "
             f"**{_pct(ss['max_abs_error'])}** (in-sample: a diagnostic); with every law "
             f"fitted on the OTHER captures only (holdout, {ss['holdout_n_configs']} "
             f"configurations): median {_pct(ss['holdout_median_abs_error'])}, max "
             f"{_pct(ss['holdout_max_abs_error'])}; in-run (predicted forwards per token × "
             f"the capture's measured forward times): median "
             f"{_pct(ss['inrun_median_abs_error'])}, max {_pct(ss['inrun_max_abs_error'])}.",
             "",
             "| config | pairs | T | measured | predicted | error | holdout err | transient "
             "(HF restart) | in-run err | E[L] meas / pred | E[G] meas / pred | per pair |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in result.structured:
        se = c.measured_speedup_se
        meas = f"{c.measured_speedup:.3f}" + ("" if math.isnan(se) else f" ± {se:.3f}")
        tr = ("—" if c.transient_speedup is None
              else f"{c.transient_speedup:.3f} ({_pct(c.transient_error)})")
        bottom = c.pairs[-1]
        extra = []
        for p in c.pairs:
            if p["kind"] == "tree":
                sib = p["law"]["sibling"]
                rows = sib if isinstance(sib[0], list) else [sib]
                extra.append(f"tree N={p['tree']['nodes']} D={p['tree']['depth']}, sibling "
                             "ranks " + " / ".join(_fmt(r) for r in rows) + ", A-law meas "
                             + _fmt(p["accepted_pmf"]["measured"]) + " pred "
                             + _fmt(p["accepted_pmf"]["predicted"]))
            elif p["kind"] == "hf":
                extra.append(f"HF mean length {_mp(p['mean_length'], '{:.2f}')}")
            elif p["kind"] == "confidence":
                extra.append(f"cut-off q {_mp(p['q'])}, r {_mp(p['r'])}, drafter fwd/round "
                             f"{_mp(p['drafter_forwards_per_round'], '{:.2f}')}")
        lines.append(
            f"| {c.name} | {', '.join(c.kinds)} | {c.temperature:g} | {meas} | "
            f"{c.predicted_speedup:.3f} | {_pct(c.error)} | {_pct(c.holdout_error)} | {tr} | "
            f"{_pct(c.inrun_error)} | "
            f"{_mp(bottom['mean_emitted'])} | {_mp(bottom['mean_block'])} | "
            f"{'; '.join(extra) or '—'} |")
    return lines


def _fmt(x) -> str:
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(f"{v:.3g}" for v in x) + "]"
    return f"{x:.4g}"


def _plots(result: ValidationResult, captures, out: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = {}
    if not result.configs:
        return plots
    for draw in (_scatter_plot, _errors_plot, _acceptance_plots, _cost_plots):
        draw(plt, result, captures, out, plots)
    return plots


def _scatter_plot(plt, result, captures, out, plots) -> None:
    # predicted vs measured
    fig, ax = plt.subplots(figsize=(5.5, 5))
    meas = np.array([c.measured_speedup for c in result.configs])
    pred = np.array([c.predicted_speedup for c in result.configs])
    plain = np.array([c.diagnostics["p1_best"] for c in result.configs])
    ext = np.array([c.diagnostics["extended"] for c in result.configs])
    allv = np.concatenate([meas, plain, ext, pred[np.isfinite(pred)]])
    lo, hi = allv.min() * 0.95, allv.max() * 1.05
    xs = np.linspace(lo, hi, 2)
    ax.plot(xs, xs, "k-", lw=1, label="predicted = measured")
    ax.fill_between(xs, xs * (1 - TARGET_MEDIAN), xs * (1 + TARGET_MEDIAN), color="0.85",
                    label=f"±{100 * TARGET_MEDIAN:.0f} %")
    ci = np.array([c.measured_ci95 for c in result.configs])
    has = np.isfinite(pred)
    if has.any():
        ax.errorbar(meas[has], pred[has], xerr=[meas[has] - ci[has, 0], ci[has, 1] - meas[has]],
                    fmt="o", ms=5, elinewidth=0.8, label="predictive (headline)", zorder=4)
    ax.scatter(meas, plain, marker="s", s=12, alpha=0.6, label="diagnostic: p1_best",
               zorder=3)
    ax.scatter(meas, ext, marker="x", label="diagnostic: extended", zorder=3)
    ax.set_xlabel("measured speedup")
    ax.set_ylabel("predicted speedup")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scatter.png", dpi=110)
    plt.close(fig)
    plots["predicted vs measured"] = "scatter.png"


def _errors_plot(plt, result, captures, out, plots) -> None:
    # errors by law
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(result.configs) + 2), 4))
    fams = [f"p1_{f}" for f in result.families] + ["p1_best"]
    width = 0.8 / len(fams)
    x = np.arange(len(result.configs))
    for j, f in enumerate(fams):
        ax.bar(x + j * width, [100 * c.errors()[f] for c in result.configs], width,
               label=f[3:])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x + 0.4 - width / 2)
    ax.set_xticklabels([c.name for c in result.configs], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("(predicted − measured)/measured, %")
    ax.legend(fontsize=7, ncol=len(fams))
    fig.tight_layout()
    fig.savefig(out / "errors_by_law.png", dpi=110)
    plt.close(fig)
    plots["error per configuration and law"] = "errors_by_law.png"


def _acceptance_plots(plt, result, captures, out, plots) -> None:
    # acceptance histograms
    for p in result.pairs.values():
        v, d, t, k = p.key
        obs = np.zeros(int(p.counts.caps.max()) + 1)
        np.add.at(obs, p.counts.accepted, p.counts.counts)
        ks = np.arange(obs.size)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(ks, obs, color="0.75", label=f"observed ({p.counts.n_rounds} rounds)")
        for f in p.fits:
            ax.plot(ks, expected_histogram(f.law, p.counts), marker="o", ms=3,
                    ls="--" if f.law.family == "gaussian" else "-",
                    label=f"{f.law.family} (AIC {f.aic:.0f})")
        ax.set_xlabel("accepted tokens A")
        ax.set_ylabel("rounds")
        ax.set_title(f"{v} verifying {d}, T={t:g}" + (f", top-k {k}" if k else ""), fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        suffix = f"_k{k}" if k else ""
        fn = f"acceptance_{_slug(v)}__{_slug(d)}_T{t:g}{suffix}.png"
        fig.savefig(out / fn, dpi=110)
        plt.close(fig)
        plots[f"acceptance {v}←{d} T={t:g}"] = fn


def _cost_plots(plt, result, captures, out, plots) -> None:
    # cost curves: one per model, from the first capture that has it
    seen = set()
    for cap in captures:
        if seen.issuperset(cap.models):
            continue  # every model of it plotted already (its fits were made in validate)
        fits = fit_costs(cap, calibrate=False)
        calibrated = fit_costs(cap)
        for name, cf in fits.items():
            if name in seen:
                continue
            seen.add(name)
            fig, ax = plt.subplots(figsize=(6, 4))
            b = cap.baselines[name]
            ctxs = np.unique(b.cost_ctx)
            for cx in ctxs:
                sel = b.cost_ctx == cx
                ax.scatter(b.cost_m[sel], 1e3 * b.cost_s[sel], s=6, alpha=0.4,
                           label=f"samples, context {cx:g}")
            ms = np.arange(1, int(cf.ms.max()) + 1)
            ax.plot(ms, 1e3 * cf.curve(kind="table")(ms), "k-", label="median table "
                    f"(reference ctx {cf.reference_context:.0f})")
            ax.plot(ms, 1e3 * cf.curve(kind="affine")(ms), "k:", label="affine fit")
            cal = calibrated[name]
            if cal.scale != 1.0:
                ax.plot(ms, 1e3 * cal.curve()(ms), "r--",
                        label=f"calibrated to the AR baseline (x{cal.scale:.3f}, {cap.name})")
            ax.set_xlabel("positions scored m")
            ax.set_ylabel("T(m), ms")
            ax.set_title(f"{name}: context slope {1e6 * cf.context_slope:.3g} µs/token; "
                         f"affine lack-of-fit p = {cf.lack_of_fit_p:.3g} -> "
                         f"{cf.preferred_kind} used", fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fn = f"cost_{_slug(name)}.png"
            fig.savefig(out / fn, dpi=110)
            plt.close(fig)
            plots[f"cost curve {name}"] = fn


def write_report(result: ValidationResult, captures, out, *, title="Validation report",
                 notes=(), plots: bool = True) -> dict:
    """Write ``report.md``, ``validation.json`` and the PNGs into ``out``; returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pl = _plots(result, captures, out) if plots else {}
    data = result.to_json()
    data["details"] = [c.to_dict() for c in result.configs]
    data["structured_details"] = [c.to_dict() for c in result.structured]
    data["notes"] = list(notes)
    atomic_write_text(out / "validation.json", dump_json(data))
    atomic_write_text(out / "report.md", markdown(result, title, pl, notes))
    return {"markdown": str(out / "report.md"), "json": str(out / "validation.json"),
            "plots": [str(out / p) for p in pl.values()]}


def validate_part(captures, ctx):
    """``polyspec validate``'s part for the single-stream synchronous captures (chains, trees,
    schedules; :mod:`validation.analysis.traces`): the pipeline above with their composition
    profiles, the report written to ``ctx.options.out``."""
    from validation.analysis.traces import Part
    from validation.capture.composition_profile import load_profiles

    opts = ctx.options
    if not captures:
        return None
    if opts.profiles and not Path(opts.profiles).is_dir():
        raise PolyspecInputError("--profiles", f"not a directory: {opts.profiles}")
    profiles = load_profiles(Path(opts.profiles) if opts.profiles else ctx.folder / "profiles",
                             captures)
    from validation.analysis.load import LOAD_LIMIT, LOADED, load_label, noise_floors

    notes = list(ctx.notes)
    labels = {c.name: load_label(c) for c in captures}
    loaded = tuple(n for n, lab in labels.items() if lab == LOADED)
    left_out = () if opts.include_loaded else loaded
    if left_out:
        notes.append(f"{len(left_out)} capture(s) made under load (1-minute load > "
                     f"{LOAD_LIMIT:g} at the start): left out of the headline "
                     f"({', '.join(left_out)}; --include-loaded keeps them)")
    missing = [c.name for c in captures if c.name not in profiles]
    if missing and profiles:
        notes.append(f"no composition profile for {len(missing)} capture(s) "
                     f"({', '.join(missing)}): no headline prediction for them")
    result = validate(captures, opts.families, laws=opts.laws, insertions=opts.insertions,
                      p5=P5(opts.confidence, opts.n_boot), profiles=profiles,
                      progress=opts.progress(len(captures)) if opts.progress else None)
    result = dataclasses.replace(result, left_out=tuple(left_out))
    paths = write_report(result, captures, opts.out, title=f"Validation: {ctx.folder}",
                         notes=notes, plots=opts.plots)
    obj = result.to_json()
    obj["report"] = paths
    obj["notes"] = list(notes)
    obj["noise_floor"] = ctx.noise_floor()
    floors = noise_floors(ctx.folder, opts.aa)
    obj["noise_floors"] = floors
    obj["idle_floor"] = next((f for f in floors if f["load"] == "idle"), None)
    obj["load"] = {"limit": LOAD_LIMIT, "labels": labels,
                   "counts": {k: sum(v == k for v in labels.values())
                              for k in sorted(set(labels.values()))},
                   "left_out_of_headline": list(left_out),
                   "include_loaded": bool(opts.include_loaded)}
    text = _text(result, ctx.folder, paths, labels, obj["idle_floor"], left_out)
    return Part(None, obj, obj, text, tuple(notes), order=0)


def _text(result: ValidationResult, folder, paths, labels=None, idle_floor=None,
          left_out=()) -> str:
    """What ``polyspec validate`` prints for the single-stream captures (``labels``: each
    capture's load label; ``idle_floor``: the idle A/A floor; ``left_out``: the captures
    left out of the headline)."""
    labels = labels or {}
    s = result.summary()
    lines = _structured_lines(result, folder)
    if not result.configs:
        return "\n".join(lines + [f"report: {paths['markdown']}"])
    lines.append(f"{s['n_configs']} configurations from {folder}")
    w = max(len(c.name) for c in result.configs)
    lines.append(f"{'config':<{w}}  measured [95 % CI]        predicted   error  inside  "
                 f"p1_best   error  extended   error")
    for c in result.configs:
        lo, hi = c.measured_ci95
        pred = "        —       —      —" if c.forecast is None else (
            f"{c.predicted_speedup:9.3f} {100 * c.error:+6.2f}%  "
            f"{'yes' if c.inside_ci else 'no':>5}")
        lab = labels.get(c.name)
        lines.append(f"{c.name:<{w}}  {c.measured_speedup:8.3f} [{lo:.3f}, {hi:.3f}]  {pred}  "
                     f"{c.diagnostics['p1_best']:7.3f} "
                     f"{100 * c.diagnostic_error('p1_best'):+6.2f}%  "
                     f"{c.diagnostics['extended']:7.3f} "
                     f"{100 * c.diagnostic_error('extended'):+6.2f}%"
                     + (f"  [{lab}]" if lab == "under load" else ""))
    if s["n_predicted"]:
        lines.append(f"headline (predictive, {s['n_predicted']} configurations): median |error| "
                     f"{100 * s['median_abs_error']:.2f} %, max {100 * s['max_abs_error']:.2f} %"
                     f", inside the measured 95 % CI: {s['inside_ci']}/{s['n_predicted']}")
    else:
        lines.append("no headline prediction: no composition profiles (polyspec profile "
                     "--cascade)")
    counts = {k: sum(v == k for v in labels.values()) for k in sorted(set(labels.values()))}
    if counts:
        lines.append("start load (1-minute, > 0.5: under load): " + ", ".join(
            f"{n} {k}" for k, n in counts.items()))
    if left_out:
        lines.append(f"left out of the headline: {len(left_out)} capture(s) made under load "
                     f"(1-minute load > 0.5 at the start; --include-loaded keeps them)")
    rl = s.get("run_law") or {}
    if rl.get("configs"):
        r1, pr = rl["run_law"], rl["per_round"]
        lines.append(f"run law (R1 fitted by R2, two-level T = 0, {r1['n_configs']} "
                     f"configurations): median |error| {100 * r1['median_abs_error']:.2f} %, max "
                     f"{100 * r1['max_abs_error']:.2f} %; per-round law (headline) on the same: "
                     f"{100 * pr['median_abs_error']:.2f} %, {100 * pr['max_abs_error']:.2f} %")
    if idle_floor is not None:
        lines.append(f"idle A/A noise floor ({idle_floor['folder']}): "
                     f"{100 * idle_floor['relative_sd']:.2f} % (relative sd, "
                     f"{idle_floor['dof']} dof)")
    for key in ("p1_best", "holdout_laws", "slowdown_costs", "inrun", "extended"):
        e = s["diagnostics"].get(key)
        if e and e["n_configs"]:
            lines.append(f"diagnostic {key + ':':<16}median |error| "
                         f"{100 * e['median_abs_error']:.2f} %, max "
                         f"{100 * e['max_abs_error']:.2f} %")
    lines.append(f"dominant residual (p1_best): {s['dominant_residual']}")
    return "\n".join(lines + [f"report: {paths['markdown']}"])


def _structured_lines(result: ValidationResult, folder) -> list[str]:
    if not result.structured:
        return []
    ss = result.summary()["structured"]
    w = max(len(c.name) for c in result.structured)
    out = [f"{ss['n_configs']} configurations with token trees / adaptive draft lengths "
           f"from {folder} (structured P1)",
           f"{'config':<{w}}  measured  predicted   error  holdout err  in-run err  pairs"]
    for c in result.structured:
        he = "          —" if c.holdout_error is None else f"{100 * c.holdout_error:+10.2f}%"
        out.append(f"{c.name:<{w}}  {c.measured_speedup:8.3f}  {c.predicted_speedup:9.3f}  "
                   f"{100 * c.error:+6.2f}%  {he}  {100 * c.inrun_error:+9.2f}%  "
                   f"{', '.join(c.kinds)}")
    out.append(f"structured P1 (own laws, in-sample): median |error| "
               f"{100 * ss['median_abs_error']:.2f} %, max {100 * ss['max_abs_error']:.2f} %")
    if ss["holdout_n_configs"]:
        out.append(f"structured P1 (laws from the other captures, {ss['holdout_n_configs']} "
                   f"configurations): median |error| {100 * ss['holdout_median_abs_error']:.2f}"
                   f" %, max {100 * ss['holdout_max_abs_error']:.2f} %")
    out.append(f"structured P1, verify-path costs + overhead from the other captures (own "
               f"laws): median |error| {100 * ss['verify_path_median_abs_error']:.2f} %, max "
               f"{100 * ss['verify_path_max_abs_error']:.2f} %")
    if ss["verify_path_holdout_n_configs"]:
        out.append(f"  the same with laws from the other captures: median |error| "
                   f"{100 * ss['verify_path_holdout_median_abs_error']:.2f} %, max "
                   f"{100 * ss['verify_path_holdout_max_abs_error']:.2f} %")
    return out
