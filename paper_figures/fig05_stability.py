"""Figure 5 — stability (P6) and heterogeneity (P7) of the acceptance length.

(a) ``CV(A) = sd(A)/E[A]`` of the accepted count under iid acceptance α, for several caps g:
strictly decreasing in α (the formal Thm 3.3). (b) ``CV(L)`` of the emitted length
``L = A + 1`` for the same caps: *not* monotone (0 at both ends). (c) Law of total variance of
``A`` when each round draws ``α ~ Beta(a, b)`` with fixed mean ᾱ, against the concentration
``a + b`` (small = heterogeneous contexts): within-round ``E[Var(A|α)]`` plus between-round
``Var(E[A|α])``, with the iid variance at ᾱ for reference.

Data: :func:`polyspec_theory.bounds.stability.cv_accepted`, :func:`~.cv_emitted` and
:func:`~.beta_variance_decomposition` (exact Beta moments); the iid reference is
``IIDGeometric(ᾱ).var(g)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

from polyspec_theory.bounds.stability import beta_variance_decomposition, cv_accepted, cv_emitted
from polyspec_theory.core.laws import IIDGeometric

from . import style

NAME = "fig05_stability"
TITLE = "Stability of acceptance (P6) and Beta-mixed variance decomposition (P7)"
SOURCES = ("polyspec_theory.bounds.stability",)

CAPS = (1, 2, 4, 8, 16)
MEAN_ALPHA = 0.8
DECOMP_CAP = 8


def compute(quick: bool = False) -> dict:
    """CV curves on an α grid for each cap, and the P7 decomposition on a log grid of
    concentrations ``a + b`` at mean ``ᾱ``."""
    alphas = np.linspace(0.02, 0.98, 25 if quick else 97)
    cv_a = np.array([[cv_accepted(float(a), g) for a in alphas] for g in CAPS])
    cv_l = np.array([[cv_emitted(float(a), g) for a in alphas] for g in CAPS])
    kappa = np.geomspace(0.3, 300.0, 12 if quick else 60)
    dec = [beta_variance_decomposition(MEAN_ALPHA * k, (1 - MEAN_ALPHA) * k, DECOMP_CAP)
           for k in kappa]
    return {
        "alphas": alphas,
        "caps": np.array(CAPS),
        "cv_accepted": cv_a,  # [cap, alpha]
        "cv_emitted": cv_l,
        "mean_alpha": MEAN_ALPHA,
        "decomp_cap": DECOMP_CAP,
        "concentration": kappa,
        "within": np.array([d["within"] for d in dec]),
        "between": np.array([d["between"] for d in dec]),
        "total": np.array([d["total"] for d in dec]),
        "iid_var": IIDGeometric(MEAN_ALPHA).var(DECOMP_CAP),
    }


def draw(data: dict, out_dir) -> list[Path]:
    fig, (ax_a, ax_l, ax_v) = style.figure(3, 1, height=5.6)
    al = data["alphas"]
    for j, g in enumerate(data["caps"]):
        col = style.color(j)
        ax_a.plot(al, data["cv_accepted"][j], color=col, label=f"g = {g}")
        ax_l.plot(al, data["cv_emitted"][j], color=col, label=f"g = {g}")
    ax_a.set_yscale("log")
    ax_a.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
    ax_a.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax_a.yaxis.set_minor_formatter(NullFormatter())
    ax_a.set_ylabel("CV(A) = sd(A) / E[A]")
    ax_a.set_xlabel("per-token acceptance rate α")
    ax_a.legend(loc="lower left", ncol=2, title="cap (block length)")
    style.panel_label(ax_a, "(a)  accepted count A: decreasing in α (P6)")
    ax_l.set_ylabel("CV(L) = sd(L) / E[L]")
    ax_l.set_xlabel("per-token acceptance rate α")
    ax_l.set_ylim(bottom=0.0)
    style.panel_label(ax_l, "(b)  emitted length L = A + 1: not monotone")
    for ax in (ax_a, ax_l):
        ax.set_xlim(0.0, 1.0)

    k = data["concentration"]
    c_w, c_b = style.color(0), style.color(1)
    ax_v.fill_between(k, 0.0, data["within"], color=c_w, alpha=0.35, linewidth=0,
                      label="within: E[Var(A | α)]")
    ax_v.fill_between(k, data["within"], data["total"], color=c_b, alpha=0.35, linewidth=0,
                      label="between: Var(E[A | α])")
    ax_v.plot(k, data["total"], color="black", linewidth=1.0, label="total Var(A)")
    ax_v.axhline(data["iid_var"], color=style.color(2), linestyle="--",
                 label="iid Var(A) at α = ᾱ")
    ax_v.set_xscale("log")
    ax_v.set_xlim(k[0], k[-1])
    ax_v.set_ylim(bottom=0.0, top=1.6 * float(np.max(data["total"])))
    ax_v.set_xlabel("Beta concentration a + b (small: heterogeneous)")
    ax_v.set_ylabel("Var(A) (tokens²)")
    ax_v.legend(loc="upper center", ncol=2, columnspacing=0.8, handlelength=1.4)
    style.panel_label(ax_v, f"(c)  α ~ Beta, mean ᾱ = {data['mean_alpha']:g}, "
                            f"cap g = {data['decomp_cap']} (P7)")
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
