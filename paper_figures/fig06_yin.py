"""Figure 6 — Yin et al. (NeurIPS'24) on their 7-state, T = 50 Markov setting (our chain; the
paper's matrices are unpublished): (a) the linear quality/rejection Pareto front of
over-acceptance (Y5), (b) the batch improvement against the number of drafts M (Y3).

Data: :func:`polyspec_theory.yin_demo_chain` (seeded, deterministic),
:func:`polyspec_theory.pareto_front` (the front ``b_λ = b_SD + λ(1 − b_SD)``),
:func:`polyspec_theory.pareto_point` at random over-acceptances ``b ≥ b_SD`` (fixed seed;
they land on the same line), :func:`polyspec_theory.batch_saturation` (exact enumeration:
batch improvement, its M → ∞ limit and the Y1 sum) in both batch modes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from polyspec_theory.yin.theorems import (
    BATCH_MODES,
    batch_saturation,
    pareto_front,
    pareto_point,
    sd_acceptance,
    yin_demo_chain,
)

from . import style

NAME = "fig06_yin"
TITLE = "Yin et al.: Pareto front (Y5) and batch improvement (Y3)"
SOURCES = ("polyspec_theory.yin.theorems", "polyspec_theory.yin.markov")

CHAIN_SEED = 0
POINT_SEED = 20240917
M_MAX = 16
MODE_LABELS = {"sequences": "M draft sequences per round",
               "per_position": "M drafts per position"}


def compute(quick: bool = False) -> dict:
    """Pareto fronts of three single-step pairs of the demo chain (position 1, the states
    with the smallest, median and largest TV) and the Y3 saturation tables, M = 1..M_max."""
    pair = yin_demo_chain(CHAIN_SEED)
    t0, d0 = pair.target[0], pair.draft[0]  # kernels at position 1: (K, K)
    tv = np.array([pareto_front(t0[s], d0[s], num=2).tv for s in range(pair.K)])
    order = np.argsort(tv, kind="stable")
    states = [int(order[0]), int(order[len(order) // 2]), int(order[-1])]
    rng = np.random.default_rng(POINT_SEED)
    n_pts = 8 if quick else 25
    fronts = []
    for s in states:
        f = pareto_front(t0[s], d0[s], num=11 if quick else 41)
        b_sd = sd_acceptance(t0[s], d0[s])
        pts = []
        for _ in range(n_pts):
            b = b_sd + rng.uniform(size=b_sd.shape) ** 2 * (1.0 - b_sd)
            pts.append(pareto_point(t0[s], d0[s], b))
        fronts.append({
            "state": s,
            "tv": f.tv,
            "lam": f.lam,
            "rejection": f.rejection,
            "loss": f.loss,
            "random_points": np.array(pts),  # (n, 2): (P(reject), Loss*)
        })
    ms = tuple(range(1, (6 if quick else M_MAX) + 1))
    batch = {}
    for mode in BATCH_MODES:
        s = batch_saturation(*pair, Ms=ms, mode=mode)
        batch[mode] = {
            "M": s.M,
            "rejections": s.rejections,
            "improvement": s.improvement,
            "sd_rejections": s.sd_rejections,
            "limit_improvement": s.limit_improvement,
            "limit_rejections": s.limit_rejections,
            "lower_bound": s.lower_bound,
        }
    return {"K": pair.K, "T": pair.T, "chain_seed": CHAIN_SEED, "fronts": fronts,
            "batch": batch}


def draw(data: dict, out_dir) -> list[Path]:
    fig, (ax, axb) = style.figure(2, 1, height=4.6)
    for j, f in enumerate(data["fronts"]):
        col = style.color(j)
        ax.plot(f["loss"], f["rejection"], color=col,
                label=f"previous state {f['state'] + 1}: TV = {f['tv']:.3f}")
        pts = f["random_points"]
        ax.plot(pts[:, 1], pts[:, 0], linestyle="none", marker="o", markersize=2.5,
                markerfacecolor="none", markeredgecolor=col, markeredgewidth=0.6)
        ax.plot([0.0], [f["tv"]], marker="s", color=col, linestyle="none", markersize=3.5)
    ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none",
            markeredgecolor="0.3", markersize=3, label="random over-acceptance b ≥ b_SD")
    ax.plot([], [], linestyle="none", marker="s", color="0.3", markersize=3,
            label="SD (unbiased)")
    ax.set_xlabel("loss Loss*_TV(b) = TV(output, target)")
    ax.set_ylabel("P(reject)")
    ax.set_xlim(left=0.0)
    ax.set_ylim(bottom=0.0)
    ax.legend(loc="upper right")
    style.panel_label(ax, "(a)  Y5: P(reject) + Loss* = TV")

    for j, mode in enumerate(BATCH_MODES):
        b = data["batch"][mode]
        col = style.color(j + 3)
        axb.plot(b["M"], b["improvement"], color=col, marker="o", markersize=2.5,
                 label=MODE_LABELS.get(mode, mode))
        axb.axhline(b["limit_improvement"], color=col, linestyle="--", linewidth=0.8)
    y1 = data["batch"][BATCH_MODES[0]]["sd_rejections"]
    axb.axhline(y1, color="0.3", linestyle=":", linewidth=0.9)
    axb.text(data["batch"][BATCH_MODES[0]]["M"][-1], y1, "Y1 sum: E[N_rej] of SD",
             ha="right", va="bottom", fontsize=6.5, color="0.3")
    axb.plot([], [], color="0.4", linestyle="--", linewidth=0.8, label="M → ∞ limit (exact)")
    axb.set_xlabel("number of drafts M")
    axb.set_ylabel("batch improvement\n(rejections saved per sequence)")
    axb.set_ylim(0.0, y1 * 1.12)
    axb.xaxis.set_major_locator(MaxNLocator(integer=True))
    axb.legend(loc="center right")
    style.panel_label(axb, f"(b)  Y3: K = {data['K']} states, T = {data['T']}")
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
