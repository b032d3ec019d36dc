"""Figure 3 — the forward count φ = E[N] of a block fill: exact renewal DP (P1) against the P2
bounds and the paper's E[L] substitution, as the target's threshold θ grows.

Setting: a 4-level cascade (target ← mid ← small ← n-gram, the example of
``configs/default.json``); φ is the number of rounds of the system below the target
(``S_2``: mid verifying blocks of ``S_3``) needed to fill one target block of ≥ θ tokens.
Data: ``predict(cascade).levels[1].phi`` (exact, P1),
:func:`polyspec_theory.bounds.tails.phi_bounds`
applied to the exact law of ``L_2`` (P2: ``max(1, θ/μ) ≤ φ ≤ (θ − 1 + E[L²]/μ)/μ``), and
the paper's substitution ``θ / E[L_2]`` with the *pairwise* mean emitted length of
(mid, small) verifying a fixed block of ``θ_2`` tokens (``law.mean_emitted(θ_2)``), which
ignores both the overshoot and the randomness of ``S_2``'s blocks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from polyspec_theory.bounds.tails import phi_bounds
from polyspec_theory.core.config import DEFAULT_CASCADE, Cascade
from polyspec_theory.schemes import predict

from . import style

NAME = "fig03_phi_bounds"
TITLE = "Forward count φ: exact vs P2 bounds vs the paper's substitution"
SOURCES = ("polyspec_theory.core.p1", "polyspec_theory.bounds.tails")

CASCADE = DEFAULT_CASCADE
THETA_MAX = 40


def compute(quick: bool = False) -> dict:
    """φ(θ) exact, its P2 bounds, and the paper's substitution for θ = 1..θ_max."""
    cascade = Cascade.from_config(CASCADE)
    thetas = np.arange(1, (12 if quick else THETA_MAX) + 1)
    rest = cascade.thresholds[1:]
    exact, lower, upper, wald = [], [], [], []
    l_pmf = None
    for th in thetas:
        pred = predict(cascade.with_thresholds((int(th), *rest)))
        lv = pred.levels[1]
        l_pmf = lv.emitted_pmf  # law of L_2: does not depend on theta_1
        b = phi_bounds(l_pmf, int(th))
        exact.append(lv.phi)
        lower.append(b.lower)
        upper.append(b.upper)
        wald.append(b.wald_lower)
    pair_mean = cascade.laws[1].mean_emitted(cascade.thresholds[1])
    return {
        "cascade": cascade.to_config(),
        "thetas": thetas,
        "phi_exact": np.array(exact),
        "phi_lower": np.array(lower),
        "phi_upper": np.array(upper),
        "phi_wald": np.array(wald),
        "mu_exact": float(np.dot(np.arange(l_pmf.size), l_pmf)),
        "mean_emitted_pairwise": float(pair_mean),
        "phi_paper": thetas / pair_mean,
    }


def draw(data: dict, out_dir) -> list[Path]:
    th = data["thetas"]
    ex = data["phi_exact"]
    fig, (ax, axr) = style.figure(2, 1, height=3.9, sharex=True,
                                  gridspec_kw={"height_ratios": [1.5, 1.0]})
    c_ex, c_b, c_p = style.color(0), style.color(2), style.color(1)
    ax.fill_between(th, data["phi_lower"], data["phi_upper"], color=c_b, alpha=0.22,
                    linewidth=0, label="P2 bounds")
    ax.plot(th, data["phi_lower"], color=c_b, linewidth=0.8)
    ax.plot(th, data["phi_upper"], color=c_b, linewidth=0.8)
    ax.plot(th, data["phi_paper"], color=c_p, linestyle="--",
            label=f"paper: θ₁ / E[L₂], pairwise E[L₂] = {data['mean_emitted_pairwise']:.2f}")
    ax.plot(th, ex, color=c_ex, marker="o", markersize=2.2, label="exact (renewal DP, P1)")
    ax.set_ylabel("φ = E[N] (rounds of S₂ per block)")
    ax.legend(loc="upper left")
    style.panel_label(ax, "(a)")
    ax.text(0.98, 0.04, f"exact μ = E[L₂] = {data['mu_exact']:.2f} tokens",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=6.5)

    axr.axhline(1.0, color=c_ex, linewidth=1.0)
    axr.fill_between(th, data["phi_lower"] / ex, data["phi_upper"] / ex, color=c_b, alpha=0.22,
                     linewidth=0)
    axr.plot(th, data["phi_lower"] / ex, color=c_b, linewidth=0.8)
    axr.plot(th, data["phi_upper"] / ex, color=c_b, linewidth=0.8)
    axr.plot(th, data["phi_paper"] / ex, color=c_p, linestyle="--")
    axr.set_ylabel("ratio to exact φ")
    axr.set_xlabel("target threshold θ₁ (tokens per block)")
    axr.xaxis.set_major_locator(MaxNLocator(integer=True))
    axr.set_xlim(th[0] - 0.5, th[-1] + 0.5)
    style.panel_label(axr, "(b)")
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
