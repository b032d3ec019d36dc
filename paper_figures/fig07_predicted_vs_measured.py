"""Figure 7 — predicted vs measured speedup on real traces (CPU; GPU too when
``validation/traces/gpu/`` holds traces), with the classic iid formula for contrast.

Data: every captured configuration of the committed traces
(:func:`validation.trace_captures.load_captures`) run through the validation pipeline
:func:`validation.compare.validate` with its defaults (laws fitted per pair by censored MLE,
on the configuration's own rounds or pooled, as ``validate`` does; cost curves fitted per
capture, measured speedup = autoregressive target time
per token / cascade time per token, with its delta-method standard error over prompts).
Predictions: **P1 with the AIC-best law per pair** (``ConfigResult.predicted_speedup``), and
the **classic iid formula**: the fitted iid α per pair in the paper's Lemma 3.1 with pairwise
``E[L]``, fixed blocks and unit forward costs ``T_i(1)``
(:func:`polyspec_theory.approximation.paper_approximation` with ``costs="unit"`` on the
cascade built by :func:`validation.fitting.build_cascade`) — for two models this is exactly
Leviathan's ``E[L]/(γc + 1)``. Panel (b) adds P1 with the fitted iid law, which separates
the error of the iid *law* from that of the classic *formula* (fixed blocks, unit costs).
Time base: measured seconds on both sides.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from polyspec_theory.approximation import paper_approximation
from validation.compare import fit_costs, fit_pairs, validate
from validation.fitting import build_cascade

from . import _traces, style

NAME = "fig07_predicted_vs_measured"
TITLE = "Predicted vs measured speedup on real traces"
SOURCES = ("validation/traces/cpu", "validation/traces/gpu", "validation.compare",
           "polyspec_theory.approximation")

BAND = 0.10  # shaded +-10 % band around predicted = measured
DEVICE_MARKERS = {"cpu": "o", "gpu": "D"}


def _short(models, thresholds, temperature) -> str:
    lv = "".join(m[0] for m in models)
    t = "" if temperature == 0 else f" T={temperature:g}"
    return f"{lv} {','.join(str(x) for x in thresholds)}{t}"


def _device_rows(device: str, directory) -> tuple[list[dict], list[str]]:
    captures, notes = _traces.load(directory)
    res = validate(captures, insertions=False, holdout=False)
    # the laws validate() predicts with: fitted on each configuration's own rounds ("config")
    # or pooled per pair over configurations ("pooled")
    mode = res.law_scope
    rows = []
    for cap, cr in zip(captures, res.configs, strict=True):
        costs = fit_costs(cap)
        fits = fit_pairs([cap], res.families) if mode == "config" else res.pairs
        laws = [fits[cap.pair_key(i)].law("iid") for i in range(cap.n - 1)]
        iid = build_cascade(cap.models, [costs[m] for m in cap.models], laws, cap.thresholds,
                            policy=cap.policy, name=cap.name)
        classic = paper_approximation(iid, costs="unit").speedup
        rows.append({
            "device": device,
            "name": cap.name,
            "label": _short(cap.models, cap.thresholds, cap.temperature),
            "models": list(cap.models),
            "thresholds": list(cap.thresholds),
            "temperature": float(cap.temperature),
            "measured": cr.measured_speedup,
            "measured_se": cr.measured_speedup_se,
            "p1_best": cr.predicted_speedup,
            "p1_iid": cr.predicted["iid"],
            "best_law": cr.best_family,
            "classic_iid": classic,
            "iid_alphas": [law.alpha for law in laws],
            "laws_fitted_on": mode,
        })
    return rows, list(notes)


def compute(quick: bool = False, traces_dir=None, gpu_traces_dir=None) -> dict:
    """One row per captured configuration and device. ``quick`` skips the GPU traces."""
    cpu = Path(traces_dir) if traces_dir is not None else _traces.default_traces_dir("cpu")
    rows, notes = _device_rows("cpu", cpu)
    gpu = (Path(gpu_traces_dir) if gpu_traces_dir is not None
           else _traces.default_traces_dir("gpu"))
    used = {"cpu": str(cpu)}
    if not quick and _traces.has_traces(gpu):
        r, n = _device_rows("gpu", gpu)
        rows += r
        notes += n
        used["gpu"] = str(gpu)
    rows.sort(key=lambda r: (r["device"], len(r["models"]), r["temperature"], r["name"]))
    meas = np.array([r["measured"] for r in rows])
    err_best = np.array([r["p1_best"] for r in rows]) / meas - 1.0
    err_classic = np.array([r["classic_iid"] for r in rows]) / meas - 1.0
    err_iid = np.array([r["p1_iid"] for r in rows]) / meas - 1.0
    return {
        "traces": used,
        "rows": rows,
        "error_p1_best": err_best,
        "error_classic_iid": err_classic,
        "error_p1_iid": err_iid,
        "median_abs_error_p1_best": float(np.median(np.abs(err_best))),
        "median_abs_error_classic_iid": float(np.median(np.abs(err_classic))),
        "median_abs_error_p1_iid": float(np.median(np.abs(err_iid))),
        "notes": notes,
    }


def draw(data: dict, out_dir) -> list[Path]:
    rows = data["rows"]
    fig, (ax, axe) = style.figure(2, 1, height=5.0, gridspec_kw={"height_ratios": [1.4, 1.0]})
    meas = np.array([r["measured"] for r in rows])
    se = np.array([r["measured_se"] for r in rows], dtype=np.float64)
    best = np.array([r["p1_best"] for r in rows])
    classic = np.array([r["classic_iid"] for r in rows])
    lo = 0.9 * min(meas.min(), best.min(), classic.min())
    hi = 1.1 * max(meas.max(), best.max(), classic.max())
    xs = np.array([lo, hi])
    ax.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.9", linewidth=0,
                    label=f"±{100 * BAND:.0f} %")
    ax.plot(xs, xs, color="black", linewidth=0.8)
    c_best, c_cls = style.color(0), style.color(1)
    for dev in sorted({r["device"] for r in rows}):
        m = np.array([r["device"] == dev for r in rows])
        mk = DEVICE_MARKERS.get(dev, "o")
        xerr = np.where(np.isfinite(se[m]), 1.96 * se[m], 0.0)
        ax.errorbar(meas[m], best[m], xerr=xerr, fmt=mk, color=c_best, markersize=3.5,
                    elinewidth=0.7, capsize=1.5,
                    label=f"P1, best-fit law ({dev.upper()})")
        ax.plot(meas[m], classic[m], linestyle="none", marker=mk, markersize=3.5,
                markerfacecolor="white", markeredgecolor=c_cls, markeredgewidth=0.9,
                label=f"classic iid formula ({dev.upper()})")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speedup (wall-clock, ×)")
    ax.set_ylabel("predicted speedup (×)")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].startswith("P1"),
                                                      labels[i].startswith("±"), i))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left")
    style.panel_label(ax, "(a)  every captured configuration")

    x = np.arange(len(rows))
    axe.axhline(0.0, color="black", linewidth=0.8)
    axe.axhspan(-100 * BAND, 100 * BAND, color="0.9", linewidth=0)
    axe.plot(x, 100 * data["error_p1_best"], linestyle="none", marker="o", color=c_best,
             markersize=3.5,
             label=f"P1 best law: median |err| {100 * data['median_abs_error_p1_best']:.1f} %")
    axe.plot(x, 100 * data["error_classic_iid"], linestyle="none", marker="o",
             markerfacecolor="white", markeredgecolor=c_cls, markersize=3.5,
             label=f"classic iid: median |err| "
                   f"{100 * data['median_abs_error_classic_iid']:.1f} %")
    axe.plot(x, 100 * data["error_p1_iid"], linestyle="none", marker="x", color="0.45",
             markersize=3.5, markeredgewidth=0.8,
             label=f"P1 with iid law: median |err| {100 * data['median_abs_error_p1_iid']:.1f} %")
    axe.set_xticks(x, [r["label"] + (" (GPU)" if r["device"] == "gpu" else "") for r in rows],
                   rotation=90, fontsize=5.5)
    axe.set_xlim(-0.6, len(rows) - 0.4)
    axe.set_ylabel("(pred − meas)/meas (%)")
    axe.set_xlabel("configuration (model initials, thresholds)")
    axe.grid(False, axis="x")
    axe.legend(loc="best")
    style.panel_label(axe, "(b)  relative error per configuration")
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=TITLE)
    p.add_argument("--out", default="out/figures", help="output directory")
    p.add_argument("--quick", action="store_true", help="reduced-size data (for tests)")
    p.add_argument("--traces", default=None, help="CPU trace directory (default: committed)")
    p.add_argument("--gpu-traces", default=None, help="GPU trace directory (default: committed)")
    args = p.parse_args(argv)
    data = compute(quick=args.quick, traces_dir=args.traces, gpu_traces_dir=args.gpu_traces)
    for path in draw(data, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
