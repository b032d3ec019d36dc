"""Figure 10 — speculative and polybasic decoding under load (docs/theory.md Part III-C): the
exact speedup against autoregressive decoding at the same batch size, and the optimal
thresholds, as the serving batch grows; with batched traces of the zoo (a folder of
``polyspec capture --batches`` traces, default ``data/traces/cpu-batch``, with an optional
``profile.json`` from ``polyspec profile --batch``), a third panel puts the measured speedup
per batch size next to its prediction (:mod:`validation.analysis.batch_validate`: the
predictive variant where every batch size has one, else the in-sample diagnostic) and the
measured and predicted crossovers. Without such traces the figure is theory only.

Setting: the 70B target and drafters of ``configs/serving-pool.json`` (roofline costs of
4 x H100: ``T(b, m) = o + max(w + k b, c b m)``). Curves: the two-model cascade
``target <- m8b`` at its optimal ``gamma`` (B1, B6) and at the fixed ``gamma = 5`` of
``configs/serving-70b.json``; the three-level cascade ``target <- m8b <- ngram`` at its
optimal thresholds under the lockstep synchronisation (B2, B6), and the same without
synchronisation (P1 with the batch costs, an upper bound by B4). The crossover batches
(B6: first ``b`` with optimal speedup <= 1) are marked.
Data: :func:`polyspec_theory.serving.batch.optimize_batch_thresholds`,
:func:`~polyspec_theory.serving.batch.predict_batch`,
:func:`~polyspec_theory.serving.batch.crossover_batch`,
:func:`polyspec_theory.planning.grid.optimize_thresholds`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from polyspec_theory.planning.grid import optimize_thresholds
from polyspec_theory.planning.pool import Pool
from polyspec_theory.serving.batch import (
    batch_cascade,
    crossover_batch,
    optimize_batch_thresholds,
    predict_batch,
)

from . import style

NAME = "fig10_serving_batch"
TITLE = "Speedup and optimal thresholds against the serving batch size (B1-B6)"
SOURCES = ("polyspec_theory.serving.batch", "polyspec_theory.planning.grid")

POOL_FILE = Path(__file__).resolve().parents[1] / "configs" / "serving-pool.json"
TWO = ("target", "m8b")
THREE = ("target", "m8b", "ngram")
FIXED_GAMMA = 5


def _pool() -> Pool:
    return Pool.from_config(json.loads(POOL_FILE.read_text()))


def default_traces_dir() -> Path | None:
    """``<data>/traces/cpu-batch`` (None if the data folder is missing)."""
    from polyspec_theory.errors import PolyspecInputError
    from validation.paths import traces_dir

    try:
        return traces_dir("cpu-batch")
    except PolyspecInputError:
        return None


def measured(traces_dir) -> dict | None:
    """Per captured cascade: batch sizes, measured speedup and its standard error, and the
    predicted speedup (per measured b and as a curve over every b up to the largest) with
    the crossovers, from :func:`validation.analysis.batch_validate.validate_batches` (None if
    the folder holds no batched traces)."""
    if traces_dir is None or not Path(traces_dir).is_dir():
        return None
    from validation.analysis.batch_validate import load_profile, validate_batches
    from validation.traces.batch import read_batch_traces

    caps = read_batch_traces(traces_dir)
    if not caps:
        return None
    prof_path = Path(traces_dir) / "profile.json"
    profile = load_profile(prof_path) if prof_path.is_file() else None
    res = validate_batches(caps, profile=profile)
    out = []
    for x in res.crossovers:
        variant = "predictive" if "unavailable" not in x.predicted["predictive"] else "in_sample"
        p = x.predicted[variant]
        out.append({"label": x.label, "batches": list(x.batches),
                    "speedup": list(x.measured_speedup), "se": list(x.measured_se),
                    "crossover": x.measured_crossover, "variant": variant,
                    "predicted": p["speedup"], "curve_batches": p["curve_batches"],
                    "curve_speedup": p["curve_speedup"], "predicted_crossover": p["crossover"],
                    "within_one_step": p["within_one_step"]})
    from validation.paths import shown_path

    return {"dir": shown_path(traces_dir), "cascades": out, "summary": res.summary()}


def compute(quick: bool = False, traces_dir=None) -> dict:
    """Curves over the batch grid (powers of sqrt 2 up to 512; powers of 2 up to 256 when
    ``quick``) and the crossover batches; measured points from ``traces_dir`` (default
    :func:`default_traces_dir`) when it holds batched traces."""
    pool = _pool()
    mt = 8 if quick else 16
    if quick:
        batches = 2 ** np.arange(0, 9)
    else:
        batches = np.unique(np.round(2 ** (np.arange(0, 19) / 2)).astype(np.int64))
    two = pool.cascade(TWO, (FIXED_GAMMA,))
    three = pool.cascade(THREE, (4, 2))
    rows = {k: [] for k in ("two_opt", "two_fixed", "three_opt", "three_unsync", "two_gamma",
                            "three_theta1", "three_theta2")}
    for b in batches:
        b = int(b)
        o2 = optimize_batch_thresholds(two, b, mt)
        o3 = optimize_batch_thresholds(three, b, mt)
        _, s3u = optimize_thresholds(batch_cascade(three, b), mt)
        rows["two_opt"].append(o2.speedup)
        rows["two_gamma"].append(o2.thresholds[0])
        rows["two_fixed"].append(predict_batch(two, b).speedup)
        rows["three_opt"].append(o3.speedup)
        rows["three_theta1"].append(o3.thresholds[0])
        rows["three_theta2"].append(o3.thresholds[1])
        rows["three_unsync"].append(s3u)
    out = {k: np.array(v) for k, v in rows.items()}
    out.update({
        "pool": pool.to_config(),
        "batches": batches,
        "max_threshold": mt,
        "fixed_gamma": FIXED_GAMMA,
        "crossover_two": crossover_batch(two, max_batch=4096, max_threshold=mt).batch,
        "crossover_three": crossover_batch(three, max_batch=4096, max_threshold=mt).batch,
        "crossover_two_fixed": crossover_batch(two, max_batch=4096, optimal=False).batch,
    })
    meas = measured(default_traces_dir() if traces_dir is None else traces_dir)
    if meas is not None:
        out["measured"] = meas
    return out


def draw(data: dict, out_dir) -> list[Path]:
    b = data["batches"]
    meas = data.get("measured")
    if meas is None:
        fig, (ax, axt) = style.figure(2, 1, height=4.2, sharex=True,
                                      gridspec_kw={"height_ratios": [1.5, 1.0]})
    else:
        fig, axes = style.figure(3, 1, height=6.4,
                                 gridspec_kw={"height_ratios": [1.5, 1.0, 1.4]})
        ax, axt, axm = axes
        axt.sharex(ax)
    c2, c3, cf = style.color(0), style.color(1), style.color(2)
    ax.axhline(1.0, color="0.3", linewidth=0.8, linestyle=":")
    ax.plot(b, data["two_opt"], color=c2, marker="o", markersize=2.2,
            label="target ← m8b, optimal γ (B1, B6)")
    ax.plot(b, data["two_fixed"], color=cf, linestyle="--",
            label=f"target ← m8b, γ = {data['fixed_gamma']}")
    ax.plot(b, data["three_opt"], color=c3, marker="s", markersize=2.2,
            label="target ← m8b ← ngram, optimal θ (B2)")
    ax.plot(b, data["three_unsync"], color=c3, linestyle=":", linewidth=1.0,
            label="same, not in lockstep (P1 with T(b, ·))")
    for key, col in (("crossover_two", c2), ("crossover_three", c3),
                     ("crossover_two_fixed", cf)):
        x = data[key]
        if x is not None and b[0] <= x <= b[-1] * 2:
            ax.axvline(x, color=col, linewidth=0.7, alpha=0.6)
            ax.text(x, 0.98, f" b* = {x}", color=col, fontsize=6, rotation=90, va="top",
                    ha="right", transform=ax.get_xaxis_transform())
    ax.set_xscale("log", base=2)
    ax.set_ylabel("speedup vs autoregressive\nat the same batch")
    ax.set_ylim(-0.25, None)  # room below the curves (and the line at 1) for the legend
    ax.legend(loc="lower left", title="b*: crossover batch (first b with speedup ≤ 1)")
    style.panel_label(ax, "(a)")
    axt.step(b, data["two_gamma"], where="mid", color=c2, label="γ (target ← m8b)")
    axt.step(b, data["three_theta1"], where="mid", color=c3, label="θ₁ (3-level)")
    axt.step(b, data["three_theta2"], where="mid", color=c3, linestyle="--",
             label="θ₂ (3-level)")
    axt.set_ylabel("optimal threshold")
    axt.set_xlabel("serving batch size b (sequences in lockstep)")
    axt.legend(loc="upper right")
    style.panel_label(axt, "(b)")
    if meas is not None:
        _draw_measured(axm, meas)
    return style.save(fig, out_dir, NAME)


def _draw_measured(ax, meas: dict) -> None:
    """Panel (c): measured speedup per batch size (95 % bars) and its prediction, one legend
    entry per cascade (point = measured, line = predicted); the vertical lines are the
    crossovers (first b with speedup <= 1), solid where measured, dashed where predicted."""
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D

    ax.axhline(1.0, color="0.3", linewidth=0.8, linestyle=":")
    handles, labels, styles = [], [], set()
    for k, c in enumerate(meas["cascades"]):
        col = style.color(3 + k)
        bs = np.asarray(c["batches"], dtype=float)
        se = np.nan_to_num(np.asarray(c["se"], dtype=float))
        pts = ax.errorbar(bs, c["speedup"], yerr=1.96 * se, color=col, marker="o",
                          markersize=3, linestyle="none", capsize=2)
        (line,) = ax.plot(c["curve_batches"], c["curve_speedup"], color=col, linewidth=1.0)
        handles.append((pts, line))
        labels.append(f"{c['label']} ({c['variant'].replace('_', '-')})")
        for x, ls in ((c["crossover"], "-"), (c["predicted_crossover"], "--")):
            if x is not None:
                # up to the data only: the legend sits in the headroom above
                ax.axvline(x, ymax=0.6, color=col, linewidth=0.7, alpha=0.6, linestyle=ls)
                styles.add(ls)
    for ls, what in (("-", "measured"), ("--", "predicted")):
        if ls in styles:
            handles.append(Line2D([], [], color="0.4", linewidth=0.7, linestyle=ls))
            labels.append(f"{what} crossover (first b with speedup ≤ 1)")
    ys = [v for c in meas["cascades"] for v in list(c["speedup"]) + list(c["curve_speedup"])]
    ys += [s + 1.96 * e for c in meas["cascades"] for s, e in zip(c["speedup"], c["se"],
                                                                   strict=True) if e == e]
    lo, hi = min(min(ys), 1.0), max(ys)
    ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.75 * (hi - lo))
    ax.set_xscale("log", base=2)
    ax.set_ylabel("measured (batched traces):\nspeedup at the same b")
    ax.set_xlabel("batch size b (lockstep batched decoder)")
    ax.legend(handles, labels, loc="upper center", fontsize=5, title_fontsize=5,
              title="points: measured (95 % CI); lines: predicted (B2)",
              handler_map={tuple: HandlerTuple(ndivide=None)})
    style.panel_label(ax, "(c)")


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv, traces=True)


if __name__ == "__main__":
    raise SystemExit(main())
