"""Figure 7 — predicted vs measured speedup on real traces (CPU; GPU too when
``data/traces/gpu/`` holds traces), with the classic iid formula for contrast.

Data: every captured configuration of the committed traces
(:func:`validation.traces.records.read_traces`) run through the validation pipeline
:func:`validation.analysis.validate` with its defaults (laws fitted per pair by censored MLE,
on the configuration's own rounds or pooled, as ``validate`` does; cost curves fitted per
capture, measured speedup = autoregressive target time
per token / cascade time per token, with its delta-method standard error over prompts).
Predictions: the **headline predictive forecast** (``ConfigResult.predicted_speedup``:
acceptance from the other captures, costs from the cascade's composition profile in
``<traces>/profiles/``; where a capture has no profile, the ``slowdown_costs`` diagnostic —
baseline costs × in-cascade slowdown learned on the other captures — is shown instead and the
row says so), the in-sample **P1 with the AIC-best law per pair** (diagnostic ``p1_best``), and
the **classic iid formula**: the fitted iid α per pair in the paper's Lemma 3.1 with pairwise
``E[L]``, fixed blocks and unit forward costs ``T_i(1)``
(:func:`polyspec_theory.bounds.approximation.paper_approximation` with ``costs="unit"`` on the
cascade built by :func:`validation.analysis.fits.capture_cascade`) — for two models exactly
Leviathan's ``E[L]/(γc + 1)``. Panel (b) adds P1 with the fitted iid law, which separates
the error of the iid *law* from that of the classic *formula* (fixed blocks, unit costs);
these three use the same cost curves (``fit_costs``). On a shared CPU the forward costs
inside the cascade, not the acceptance model, dominate the in-sample residual.
Time base: measured seconds on both sides.

Drawing: panel (a) stops at the data (:func:`_clip_top`); a prediction past 1.5x the largest
measured or main predicted value is drawn at the top edge with its value. The legend of panel
(b) gives the median |error| of the headline forecast over the rows that have one (what
``polyspec validate`` reports); rows with the ``slowdown_costs`` diagnostic are drawn hollow.
The x labels tag each model by its initial and the digits of its name (key under the axis).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyspec_theory.bounds.approximation import paper_approximation
from validation.analysis.fits import capture_cascade, fit_costs, fit_pairs
from validation.analysis.validate import validate
from validation.paths import shown_path

from . import style, trace_sources

NAME = "fig07_predicted_vs_measured"
TITLE = "Predicted vs measured speedup on real traces"
SOURCES = ("data/traces/cpu", "data/traces/gpu", "validation.analysis",
           "polyspec_theory.bounds.approximation")

BAND = 0.10  # shaded +-10 % band around predicted = measured
DEVICE_MARKERS = {"cpu": "o", "gpu": "D"}


_SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _abbrev(model: str) -> str:
    """A model's tag in the x labels: its initial, then the digits of its name as
    subscripts (``ngram3`` -> ``n₃``, ``draft-t`` -> ``d``)."""
    return model[0] + "".join(c for c in model if c.isdigit()).translate(_SUB)


def model_key(rows) -> dict[str, str]:
    """``{tag: model name}`` for the model tags of the x labels (:func:`_abbrev`)."""
    key: dict[str, set] = {}
    for r in rows:
        for m in r["models"]:
            key.setdefault(_abbrev(m), set()).add(m)
    return {k: " / ".join(sorted(v)) for k, v in sorted(key.items())}


def headline_error(rows) -> tuple[np.ndarray, float]:
    """``(mask, median |error|)`` of the headline forecast: the rows with one (a composition
    profile; the others carry the ``slowdown_costs`` diagnostic) and the median of
    ``|predicted / measured - 1|`` over them, as ``polyspec validate`` reports it (NaN when no
    row has one)."""
    mask = np.array([r["predictive_kind"] == "headline" for r in rows], dtype=bool)
    err = np.array([r["p1_predictive"] / r["measured"] - 1.0 for r in rows], dtype=float)
    return mask, (float(np.median(np.abs(err[mask]))) if mask.any() else float("nan"))


def _clip_top(values, core) -> float:
    """Upper axis limit of panel (a): the largest value not past 1.5x the largest measured
    or main prediction (``core``), with 8 % headroom; values above are drawn at the edge and
    labelled with their value."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    inside = v[v <= 1.5 * core]
    return 1.08 * float(inside.max() if inside.size else core)


def _short(models, thresholds, temperature) -> str:
    lv = "".join(_abbrev(m) for m in models)
    t = "" if temperature == 0 else f" T={temperature:g}"
    return f"{lv} {','.join(str(x) for x in thresholds)}{t}"


def _device_rows(device: str, directory, quick: bool = False,
                 progress=None) -> tuple[list[dict], list[str]]:
    from validation.capture.composition_profile import load_profiles

    captures, notes = trace_sources.load(directory)
    if quick and len(captures) > 6:
        captures = captures[::3]  # every third configuration (file order)
    res = validate(captures, insertions=False, holdout=False,
                   profiles=load_profiles(Path(directory) / "profiles", captures),
                   progress=progress)
    # the laws validate() predicts with: fitted on each configuration's own rounds ("config")
    # or pooled per pair over configurations ("pooled")
    mode = res.law_scope
    rows = []
    for cap, cr in zip(captures, res.configs, strict=True):
        costs = fit_costs(cap)
        # the classic formula takes the iid law only: fit that family alone (each family's
        # fit is its own, so the iid fit equals the one among all of validate's families)
        fits = fit_pairs([cap], ("iid",)) if mode == "config" else res.pairs
        iid = capture_cascade(cap, fits, costs, "iid")
        laws = iid.laws
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
            "p1_best": cr.diagnostics["p1_best"],
            "p1_iid": cr.diagnostics["p1_iid"],
            # validate's fully predictive variant (costs x in-cascade factors and overhead
            # learned leave-one-configuration-out); NaN where the pipeline has none
            "p1_predictive": (cr.predicted_speedup if cr.forecast is not None
                              else cr.diagnostics["slowdown_costs"]),
            "predictive_kind": "headline" if cr.forecast is not None else "slowdown_costs",
            "best_law": cr.best_family,
            "classic_iid": classic,
            "iid_alphas": [law.alpha for law in laws],
            "laws_fitted_on": mode,
        })
    return rows, list(notes)


def compute(quick: bool = False, traces_dir=None, gpu_traces_dir=None, progress=None) -> dict:
    """One row per captured configuration and device. ``quick`` skips the GPU traces and
    validates every third CPU configuration only (when there are more than six).
    ``progress(done, total)``: after each configuration validated (the bar of ``polyspec
    figures``: this figure takes most of its time)."""
    cpu = Path(traces_dir) if traces_dir is not None else trace_sources.default_traces_dir("cpu")
    rows, notes = _device_rows("cpu", cpu, quick, progress)
    gpu = (Path(gpu_traces_dir) if gpu_traces_dir is not None
           else trace_sources.default_traces_dir("gpu"))
    used = {"cpu": shown_path(cpu)}
    if not quick and trace_sources.has_traces(gpu):
        r, n = _device_rows("gpu", gpu, progress=progress)
        rows += r
        notes += n
        used["gpu"] = shown_path(gpu)
    rows.sort(key=lambda r: (r["device"], len(r["models"]), r["temperature"], r["name"]))
    meas = np.array([r["measured"] for r in rows])
    err_best = np.array([r["p1_best"] for r in rows]) / meas - 1.0
    err_classic = np.array([r["classic_iid"] for r in rows]) / meas - 1.0
    err_iid = np.array([r["p1_iid"] for r in rows]) / meas - 1.0
    err_pred = np.array([r["p1_predictive"] for r in rows]) / meas - 1.0
    headline, headline_median = headline_error(rows)
    return {
        "traces": used,
        "rows": rows,
        "error_p1_best": err_best,
        "error_classic_iid": err_classic,
        "error_p1_iid": err_iid,
        "median_abs_error_p1_best": float(np.median(np.abs(err_best))),
        "median_abs_error_classic_iid": float(np.median(np.abs(err_classic))),
        "median_abs_error_p1_iid": float(np.median(np.abs(err_iid))),
        "error_p1_predictive": err_pred,
        "median_abs_error_p1_predictive": (float(np.nanmedian(np.abs(err_pred)))
                                           if np.isfinite(err_pred).any() else np.nan),
        # the headline forecast only (what ``polyspec validate`` reports): the rows whose
        # capture has a composition profile; the others show the slowdown_costs diagnostic
        "headline": headline,
        "n_headline": int(headline.sum()),
        "median_abs_error_headline": headline_median,
        "model_key": model_key(rows),
        "notes": notes,
    }


def draw(data: dict, out_dir) -> list[Path]:
    fig, (ax, axe) = style.figure(2, 1, height=5.4, gridspec_kw={"height_ratios": [1.4, 1.0]})
    _scatter_panel(ax, data)
    _error_panel(axe, data)
    return style.save(fig, out_dir, NAME)


def _scatter_panel(ax, data: dict) -> None:
    """(a): predicted against measured speedup per configuration and model."""
    rows = data["rows"]
    meas = np.array([r["measured"] for r in rows])
    se = np.array([r["measured_se"] for r in rows], dtype=np.float64)
    series = [  # key, label, colour, filled, marker size
        ("p1_predictive", "P1 + in-cascade costs", style.color(2), True, 3.5),
        ("p1_best", "P1, best law, cost curves", style.color(0), True, 3.5),
        ("classic_iid", "classic iid formula", style.color(1), False, 3.5),
    ]
    series = [x for x in series if np.isfinite([r[x[0]] for r in rows]).any()]
    vals = np.concatenate([meas] + [np.array([r[k] for r in rows]) for k, *_ in series])
    vals = vals[np.isfinite(vals)]
    core = np.concatenate([meas] + [np.array([r[k] for r in rows]) for k, *_ in series
                                    if k != "classic_iid"])
    core = core[np.isfinite(core)]
    lo, hi = 0.9 * vals.min(), _clip_top(vals, float(core.max()))
    xs = np.array([lo, hi])
    ax.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.9", linewidth=0,
                    label=f"±{100 * BAND:.0f} %")
    ax.plot(xs, xs, color="black", linewidth=0.8)
    devices = sorted({r["device"] for r in rows})
    for dev in devices:
        m = np.array([r["device"] == dev for r in rows])
        mk = DEVICE_MARKERS.get(dev, "o")
        tag = f" ({dev.upper()})" if len(devices) > 1 else ""
        xerr = np.where(np.isfinite(se[m]), 1.96 * se[m], 0.0)
        for key, label, col, filled, ms in series:
            y = np.array([r[key] for r in rows])[m]
            face = col if filled else "white"
            if key == "p1_best":  # measured 95 % CI once, on the main prediction
                ax.errorbar(meas[m], y, xerr=xerr, fmt="none", ecolor="0.55",
                            elinewidth=0.6, capsize=1.2, zorder=2)
            if key == "p1_predictive":  # hollow where no profile: slowdown_costs instead
                hd = np.asarray(data["headline"], dtype=bool)[m]
                n_h = int(hd.sum())
                ax.plot(meas[m][hd], y[hd], linestyle="none", marker=mk, markersize=ms,
                        markerfacecolor=col, markeredgecolor=col, markeredgewidth=0.9,
                        label=f"{label}{tag}, {n_h} profiled", zorder=3)
                if (~hd).any():
                    ax.plot(meas[m][~hd], y[~hd], linestyle="none", marker=mk,
                            markersize=ms, markerfacecolor="white", markeredgecolor=col,
                            markeredgewidth=0.9, zorder=3,
                            label=f"same, slowdown costs ({int((~hd).sum())} unprofiled)")
                continue
            clip = y > hi
            ax.plot(meas[m][~clip], y[~clip], linestyle="none", marker=mk, markersize=ms,
                    markerfacecolor=face, markeredgecolor=col, markeredgewidth=0.9,
                    label=label + tag, zorder=3)
            for xv, yv in zip(meas[m][clip], y[clip], strict=True):  # past the top: at the edge
                ax.plot([xv], [hi], linestyle="none", marker="^", markersize=ms,
                        markerfacecolor=face, markeredgecolor=col, clip_on=False, zorder=3)
                ax.annotate(f"{yv:.1f}× (off scale)", (xv, hi), xytext=(4, -2),
                            textcoords="offset points", ha="left", va="top", fontsize=5.5,
                            color=col)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speedup (wall-clock, ×; bars: 95 % CI)")
    ax.set_ylabel("predicted speedup (×)")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (labels[i].startswith("±"), i))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="lower right",
              fontsize=5.5)  # below the diagonal: no model predicts far under measured
    style.panel_label(ax, f"(a)  {len(rows)} captured configurations")



def _error_panel(axe, data: dict) -> None:
    """(b): the relative error of each model per configuration."""
    rows = data["rows"]
    x = np.arange(len(rows))
    axe.axhline(0.0, color="black", linewidth=0.8)
    axe.axhspan(-100 * BAND, 100 * BAND, color="0.9", linewidth=0)
    err_series = [
        ("error_p1_predictive", "median_abs_error_headline",
         f"P1 + in-cascade costs ({data['n_headline']} profiled)", style.color(2),
         "o", True),
        ("error_p1_best", "median_abs_error_p1_best", "P1, best law", style.color(0), "o",
         True),
        ("error_p1_iid", "median_abs_error_p1_iid", "P1, iid law", "0.45", "x", True),
        ("error_classic_iid", "median_abs_error_classic_iid", "classic iid formula",
         style.color(1), "o", False),
    ]
    for key, med, label, col, mk, filled in err_series:
        if not np.isfinite(data[key]).any():
            continue
        axe.plot(x, 100 * data[key], linestyle="none", marker=mk, markersize=3.2,
                 markerfacecolor=col if filled else "white", markeredgecolor=col,
                 markeredgewidth=0.8, label=f"{label}: {100 * data[med]:.1f} %")
    axe.set_xticks(x, [r["label"] + (" (GPU)" if r["device"] == "gpu" else "") for r in rows],
                   rotation=90, fontsize=5.5 if len(rows) <= 30 else 4.5)
    axe.set_xlim(-0.6, len(rows) - 0.4)
    axe.set_ylabel("(pred − meas)/meas (%)")
    key = [f"{k} = {v}" for k, v in data["model_key"].items()]
    half = (len(key) + 2) // 3
    axe.set_xlabel("configuration: models, verifier first, then thresholds\n"
                   + ", ".join(key[:half]) + ",\n" + ", ".join(key[half:2 * half]) + ",\n"
                   + ", ".join(key[2 * half:])
                   + "; T=1: sampled at temperature 1 (else greedy)", fontsize=6)
    axe.grid(False, axis="x")
    ys = np.concatenate([100 * np.asarray(data[k], dtype=float) for k, *_ in err_series])
    ys = ys[np.isfinite(ys)]
    y0, y1 = min(ys.min(), -100 * BAND), max(ys.max(), 100 * BAND)
    axe.set_ylim(y0 - 0.05 * (y1 - y0), y1 + 0.25 * (y1 - y0))  # headroom for the legend
    axe.legend(loc="upper left", title="median |error|", fontsize=5.5)
    style.panel_label(axe, "(b)  relative error per configuration")


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv, traces=True)


if __name__ == "__main__":
    raise SystemExit(main())
