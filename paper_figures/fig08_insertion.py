"""Figure 8 — model insertion (P5, paper Thm 3.2): where does inserting ``M'`` between the
target ``M_1`` and the drafter ``M_2`` help, over (T'/T_1, L')?

Setting: target (affine cost 1 + 0.03 (m − 1)) ← drafter (cost 0.02), iid α = 0.6,
θ = 4. ``M'`` has constant cost ``T'``; the pair (target, M') is iid α = 0.85 with θ_up = 8,
the pair (M', drafter) is iid α' with θ_low = 4, and α' is swept so that
``L' = E[L']`` (fixed-block mean emitted length of (M', drafter)) covers the y axis.
Data: :func:`polyspec_theory.planning.insertion.insertion_decision` (exact, P1's τ_1 with vs
without;
colour = relative gain ``τ_without/τ_with − 1``, solid contour = 0) and
:func:`polyspec_theory.planning.insertion.paper_insertion_check` (the paper's condition
``T'/T_i < L'(1/L_i − 1/L_i')``, dashed boundary, hatched where the two disagree).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.planning.insertion import insertion_decision, paper_insertion_check

from . import style

NAME = "fig08_insertion"
TITLE = "Insertion criterion: exact (P1) vs the paper's approximate condition (P5)"
SOURCES = ("polyspec_theory.planning.insertion",)

BASE = {
    "name": "target+draft",
    "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.03}},
               {"name": "draft", "cost": 0.02}],
    "acceptance": [{"alpha": 0.6}],
    "thresholds": [4],
}
UPPER_ALPHA = 0.85  # pair (target, M')
THRESHOLDS = (8, 4)  # (theta_up, theta_low) of the two new pairs
COST_RATIO_MAX = 0.8
LOWER_ALPHAS = (0.05, 0.99)  # sweep of the pair (M', draft)


def compute(quick: bool = False) -> dict:
    """Exact relative gain and both decisions on a grid of ``T'/T_1`` x ``α'``."""
    base = Cascade.from_config(BASE)
    t1 = base.costs[0].t1
    ratios = np.linspace(0.0, COST_RATIO_MAX, 13 if quick else 61)
    lower_alphas = np.linspace(*LOWER_ALPHAS, 10 if quick else 46)
    upper = IIDGeometric(UPPER_ALPHA)
    gain = np.empty((lower_alphas.size, ratios.size))
    exact = np.empty(gain.shape, dtype=bool)
    paper = np.empty(gain.shape, dtype=bool)
    l_new = np.empty(lower_alphas.size)
    paper_rhs = np.empty(lower_alphas.size)
    for i, a in enumerate(lower_alphas):
        lower = IIDGeometric(float(a))
        for j, r in enumerate(ratios):
            model = Model("inserted", CostCurve.constant(float(r) * t1))
            d = insertion_decision(base, 0, model, upper, lower, thresholds=THRESHOLDS)
            chk = paper_insertion_check(base, 0, model, upper, lower, thresholds=THRESHOLDS)
            gain[i, j] = d.relative_gain
            exact[i, j] = d.helps
            paper[i, j] = chk["helps"]
        l_new[i] = chk["l_new"]
        paper_rhs[i] = chk["rhs"]
    return {
        "base": base.to_config(),
        "upper_alpha": UPPER_ALPHA,
        "thresholds": THRESHOLDS,
        "cost_ratios": ratios,  # T'/T_1
        "lower_alphas": lower_alphas,
        "l_new": l_new,  # L' per lower alpha
        "paper_rhs": paper_rhs,  # L'(1/L_i - 1/L_i'): the paper's boundary in T'/T_1
        "relative_gain": gain,  # [lower alpha, ratio]
        "exact_helps": exact,
        "paper_helps": paper,
        "l_i": chk["l_i"],
        "l_i_new": chk["l_i_new"],
    }


def draw(data: dict, out_dir) -> list[Path]:
    x = data["cost_ratios"]
    y = data["l_new"]
    gain = data["relative_gain"]
    fig, ax = style.figure(1, 1, height=3.1)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=min(-1e-9, float(gain.min())),
                        vmax=max(1e-9, float(gain.max())))
    mesh = ax.pcolormesh(x, y, gain, cmap="RdBu", norm=norm, shading="nearest",
                         rasterized=True)
    cb = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.06)
    cb.set_label("exact relative gain τ_without/τ_with − 1")
    cb.ax.tick_params(labelsize=6.5)
    ax.contour(x, y, gain, levels=[0.0], colors="black", linewidths=1.2)
    disagree = (data["exact_helps"] != data["paper_helps"]).astype(float)
    if disagree.any():
        with matplotlib.rc_context({"hatch.linewidth": 0.5, "hatch.color": "0.25"}):
            ax.contourf(x, y, disagree, levels=[0.5, 1.5], colors="none", hatches=["///"])
    ax.plot(data["paper_rhs"], y, color="black", linestyle="--",
            linewidth=1.2)
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(y[0], y[-1])
    ax.plot([], [], color="black", linewidth=1.2, label="exact boundary (P1)")
    ax.plot([], [], color="black", linestyle="--", linewidth=1.2,
            label="paper: T'/T₁ = L'(1/L₁ − 1/L₁')")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor="none", hatch="///", edgecolor="0.25", linewidth=0.5))
    labels.append("decisions disagree")
    fig.legend(handles, labels, loc="outside upper center", ncol=2)
    ax.set_xlabel("cost of inserted model T'/T₁ (target forwards)")
    ax.set_ylabel("L' = E[L] of (M', drafter) (tokens)")
    ax.grid(False)
    ax.text(0.03, 0.97, "blue: insertion helps\nred: it hurts",
            transform=ax.transAxes, fontsize=6.5, va="top",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5})
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
