"""Figure 12 — real GPU decoders (issue 23): (a) predicted vs measured speedup of every held-out
forecast (PipeSpec 1B -> 8B sweep left one lookahead out, Spec-Bench left one category out);
(b) the 1B -> 8B lookahead sweep: measured points, their leave-one-out forecasts, and the
forecasts of the unseen lookaheads with their 95 % band; (c) Spec-Bench per category,
measured (95 % bootstrap CI) and predicted. The title names what the panels show (the
pre-registered forecasts of configurations no panel shows are in data/gpu/preregistered.json).

Data: ``data/gpu/targets.json``, written by ``experiments/gpu/targets.py`` from the GPU traces
(sources: BradMcDanel/pipespec commit 9a64774, yukiki-jc/Spec-Bench commit 3b73a28);
:mod:`validation.formats.pipespec`, :mod:`validation.analysis.pipespec_forecast`,
:mod:`validation.analysis.specbench`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from . import style

NAME = "fig12_gpu_traces"
TITLE = "Predicted vs measured speedup on real GPU traces (PipeSpec, Spec-Bench)"
SOURCES = ("validation.analysis.pipespec_forecast", "validation.analysis.specbench")
SPANS_COLUMNS_WITH_MEASUREMENTS = True  # three panels of measured GPU runs: page width
RESULTS = Path(__file__).resolve().parents[1] / "data" / "gpu" / "targets.json"


def _size(model: str) -> str:
    """The parameter count in a model name (``Llama-3.1-8B-Instruct`` -> ``8B``), or the
    name itself when it has none."""
    m = re.search(r"(\d+(?:\.\d+)?[BM])\b", model)
    return m.group(1) if m else model


def _chain(models) -> str:
    """``drafter -> ... -> target`` by parameter count, in the order the file lists them."""
    return "→".join(_size(m) for m in models)


def compute(quick: bool = False, results=None) -> dict:
    """The committed held-out results (``quick`` changes nothing: they are precomputed)."""
    from .registry import FigureUnavailable

    path = Path(results) if results else RESULTS
    if not path.is_file():
        raise FigureUnavailable("figure 12 needs data/gpu/targets.json (run "
                                "experiments/gpu/targets.py); not in this checkout")
    d = json.loads(path.read_text())
    sweep = sorted(d["pipespec_sweep_loo"]["configs"], key=lambda c: c["lookahead"])
    fc = d["pipespec_sweep_forecasts"]["forecasts"]
    sb = d["specbench_loco"]["configs"]
    return {
        "sweep": [(c["lookahead"], c["predicted_speedup"], c["measured_speedup"])
                  for c in sweep],
        "forecasts": [(r["lookahead"], r["speedup"], *r["interval95"]) for r in fc],
        "specbench": [(c["method"], c["category"], c["predicted_speedup"],
                       c["measured_speedup"], *c["measured_ci95"]) for c in sb],
        # drafter first (the file lists the cascade smallest to largest)
        "sweep_models": list(sweep[0]["models"]) if sweep else [],
        "specbench_held_out": sorted({c["held_out"] for c in sb}),
    }


def draw(data: dict, out_dir) -> list[Path]:
    fig, axes = style.figure(1, 3, height=2.6, width=2 * style.COLUMN_WIDTH + 0.25)
    ax, axs, axc = axes
    methods = sorted({m for m, *_ in data["specbench"]})
    allv = []
    for j, m in enumerate(methods):
        pts = [(p, q) for mm, _, p, q, *_ in data["specbench"] if mm == m]
        x, y = zip(*[(q, p) for p, q in pts], strict=True)
        ax.scatter(x, y, s=8, color=style.color(j + 1), label=f"Spec-Bench {m}")
        allv += list(x) + list(y)
    x = [q for _, _, q in data["sweep"]]
    y = [p for _, p, _ in data["sweep"]]
    ax.scatter(x, y, s=14, marker="s", color=style.color(0),
               label=f"PipeSpec {_chain(data['sweep_models'])}")
    allv += x + y
    lo, hi = min(allv) * 0.95, max(allv) * 1.05
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8)
    ax.set_xlabel("measured speedup")
    ax.set_ylabel("predicted speedup (held out)")
    held = " / ".join(data["specbench_held_out"])
    ax.legend(fontsize=5, loc="upper left", title_fontsize=5,
              title=f"forecast with the held-out\n{held} (Spec-Bench) or\n"
                    "lookahead (PipeSpec) left out")
    style.panel_label(ax, "(a)")

    f = np.array(data["forecasts"], dtype=float)
    axs.fill_between(f[:, 0], f[:, 2], f[:, 3], color=style.color(2), alpha=0.25,
                     label="forecast 95 % (unseen K)")
    axs.plot(f[:, 0], f[:, 1], "o", ms=3, color=style.color(2), label="forecast (unseen K)")
    s = np.array(data["sweep"], dtype=float)
    axs.plot(s[:, 0], s[:, 2], "s", ms=4, color=style.color(0), label="measured")
    axs.plot(s[:, 0], s[:, 1], "x", ms=5, color=style.color(1), label="leave-one-out forecast")
    axs.set_xlabel("lookahead K")
    target = _size(data["sweep_models"][-1]) if data["sweep_models"] else "target"
    axs.set_ylabel(f"speedup over greedy {target} (fp16)")
    axs.legend(fontsize=5, loc="lower center")
    style.panel_label(axs, "(b)")

    cats = sorted({c for _, c, *_ in data["specbench"]})
    width = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        rows = {c: (p, q, a, b) for mm, c, p, q, a, b in data["specbench"] if mm == m}
        xs = np.arange(len(cats)) + (j - (len(methods) - 1) / 2) * width
        q = np.array([rows[c][1] for c in cats])
        err = np.array([[rows[c][1] - rows[c][2] for c in cats],
                        [rows[c][3] - rows[c][1] for c in cats]])
        axc.bar(xs, q, width, color=style.color(j + 1), alpha=0.5, label=f"{m} measured")
        axc.errorbar(xs, q, yerr=err, fmt="none", ecolor="0.3", elinewidth=0.6)
        axc.plot(xs, [rows[c][0] for c in cats], "_", ms=6, color="k",
                 label=f"predicted, {held} left out" if j == 0 else None)
    axc.set_xticks(np.arange(len(cats)))
    axc.set_xticklabels([c.replace("_", " ") for c in cats], rotation=90, fontsize=5)
    axc.set_ylabel("speedup over vanilla")
    top = max(r[5] for r in data["specbench"])
    axc.set_ylim(0, 1.3 * top)  # headroom: the legend sits above the bars
    axc.legend(fontsize=5, loc="upper right")
    style.panel_label(axc, "(c)")
    chain = _chain(data["sweep_models"])
    fig.suptitle(f"held-out forecasts on GPU traces measured by others: PipeSpec {chain} "
                 f"lookahead sweep (a, b), Spec-Bench by {held} (a, c)", fontsize=6)
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
