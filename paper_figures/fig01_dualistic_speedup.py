"""Figure 1 — dualistic speculative decoding (D2): speedup against the draft length γ for a
grid of iid acceptance rates α and cost ratios c = T_2/T_1, the optimal integer γ marked.

Data: :func:`polyspec_theory.leviathan_speedup` (Leviathan Thm 3.8, constant target cost,
model-cost units) on γ = 1..γ_max, and :func:`polyspec_theory.optimal_gamma` (exact integer
search, with its certificate that no larger γ does better).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from polyspec_theory.closed_forms.dualistic import leviathan_speedup, optimal_gamma

from . import style

NAME = "fig01_dualistic_speedup"
TITLE = "Dualistic speedup vs draft length (D2)"
SOURCES = ("polyspec_theory.closed_forms.dualistic",)

ALPHAS = (0.6, 0.7, 0.8, 0.9)
COST_RATIOS = (0.02, 0.1, 0.3)
GAMMA_MAX = 20


def compute(quick: bool = False) -> dict:
    """Speedup curves ``S(γ; α, c)`` and the exact optimum per (α, c). ``quick`` only shortens
    the plotted γ range (the optima are always searched up to 1024 and certified)."""
    gmax = 12 if quick else GAMMA_MAX
    alphas = np.array(ALPHAS)
    cs = np.array(COST_RATIOS)
    opt = [[optimal_gamma(float(a), 1.0, float(c)) for a in alphas] for c in cs]
    # extend the axis so every optimum is visible
    gmax = max(gmax, max(o.gamma for row in opt for o in row) + 1)
    gammas = np.arange(1, gmax + 1)
    speed = np.array([[[leviathan_speedup(float(a), int(g), float(c)) for g in gammas]
                       for a in alphas] for c in cs])
    return {
        "alphas": alphas,
        "cost_ratios": cs,
        "gammas": gammas,
        "speedup": speed,  # [c, alpha, gamma]
        "opt_gamma": np.array([[o.gamma for o in row] for row in opt]),
        "opt_speedup": np.array([[o.speedup for o in row] for row in opt]),
        "opt_certified": np.array([[o.certified for o in row] for row in opt]),
    }


def draw(data: dict, out_dir) -> list[Path]:
    cs, alphas, gammas = data["cost_ratios"], data["alphas"], data["gammas"]
    fig, axes = style.figure(len(cs), 1, height=1.45 * len(cs) + 0.5, sharex=True)
    axes = np.atleast_1d(axes)
    for ci, (ax, c) in enumerate(zip(axes, cs, strict=True)):
        for ai, a in enumerate(alphas):
            col = style.color(ai)
            ax.plot(gammas, data["speedup"][ci, ai], color=col, marker=".", markersize=2.5,
                    label=f"α = {a:g}")
            g_opt, s_opt = data["opt_gamma"][ci, ai], data["opt_speedup"][ci, ai]
            ax.plot([g_opt], [s_opt], marker="*", markersize=8, color=col,
                    markeredgecolor="black", markeredgewidth=0.4, linestyle="none", zorder=5)
        ax.axhline(1.0, color="0.4", linewidth=0.7, linestyle=":")
        ax.set_ylabel("speedup T₁/τ (×)")
        ax.set_ylim(0.0, 1.12 * float(np.max(data["speedup"][ci])))
        style.panel_label(ax, f"({chr(ord('a') + ci)})  draft cost c = T₂/T₁ = {c:g}")
    axes[0].plot([], [], marker="*", markersize=7, color="0.5", markeredgecolor="black",
                 markeredgewidth=0.4, linestyle="none", label="optimal γ")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=3)
    axes[-1].set_xlabel("draft length γ (tokens per round)")
    axes[-1].set_xlim(0.5, gammas[-1] + 0.5)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
