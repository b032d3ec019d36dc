"""Figure 2 — three-level cascade (target ← mid ← small): exact speedup surface over the
thresholds (θ_1, θ_2) from P1, with length-level Monte-Carlo points and their 95 % CIs.

Data: :func:`polyspec_theory.planning.grid.predict_grid` (exact P1 on the whole grid, model-cost
units) and :func:`simulators.length.simulate_lengths` (JAX Monte Carlo of the algorithm itself,
independent chains, ratio estimator with a delta-method CI; fixed seeds) at a few grid
points. (a) the surface as a heat map with the optimum marked and the simulated points
circled; (b) slices θ_1 ↦ S for three θ_2 with the simulated points; (c) Monte Carlo minus
P1 with the CIs, which should cover 0 about 95 % of the time. The title states the cascade
(:func:`cascade_line`: each model's cost per forward of m tokens and each pair's law).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from polyspec_theory.core.config import Cascade
from polyspec_theory.planning.grid import predict_grid
from simulators.length import LengthModel, simulate_lengths

from . import style

NAME = "fig02_polybasic_surface"
TITLE = "Three-level speedup surface over (θ1, θ2): P1 and Monte Carlo"
SOURCES = ("polyspec_theory.planning.grid", "simulators.length")

CASCADE = {
    "name": "three-level",
    "models": [
        {"name": "target", "cost": {"base": 1.0, "per_token": 0.03}},
        {"name": "mid", "cost": {"base": 0.25, "per_token": 0.01}},
        {"name": "small", "cost": 0.02},
    ],
    "acceptance": [{"alpha": 0.85}, {"alpha": 0.7}],
    "thresholds": [4, 4],
}
THETA1_MAX, THETA2_MAX = 16, 8
SLICE_THETA2 = (1, 3, 6)
SIM_THETA1 = (2, 4, 8, 14)
SIM_TOKENS = 100_000
SIM_CHAINS = 128
SEED = 2026


def cascade_line(cfg: dict) -> str:
    """The cascade of ``cfg`` in two lines: ``target <- mid <- small; T(m) = 1 + 0.03(m-1),
    ...`` and ``iid acceptance α = 0.85 (target <- mid), ...`` (model-cost units)."""
    def cost(c):
        if isinstance(c, dict) and "base" in c:
            slope = c.get("per_token", 0.0)
            return f"{c['base']:g}" + (f" + {slope:g}(m−1)" if slope else "")
        return f"{c:g}"

    models = cfg["models"]
    chain = " ← ".join(m["name"] for m in models)
    costs = ", ".join(cost(m["cost"]) for m in models)
    laws = ", ".join(
        (f"α = {law['alpha']:g}" if "alpha" in law else str(law))
        + f" ({models[i]['name']} ← {models[i + 1]['name']})"
        for i, law in enumerate(cfg["acceptance"]))
    return f"{chain}: T(m) = {costs}\niid acceptance {laws}"


def compute(quick: bool = False) -> dict:
    """P1 on the full grid; Monte Carlo (``SIM_TOKENS`` tokens, seed ``SEED + k``) at
    ``SIM_THETA1 x SLICE_THETA2`` (quick: 2 x 2 points, 10 000 tokens)."""
    cascade = Cascade.from_config(CASCADE)
    th1 = np.arange(1, THETA1_MAX + 1)
    th2 = np.arange(1, THETA2_MAX + 1)
    grid = predict_grid(cascade, [th1, th2])
    s = grid["speedup"]
    i, j = np.unravel_index(int(np.argmax(s)), s.shape)
    sim_t1 = SIM_THETA1[1::2] if quick else SIM_THETA1
    sim_t2 = SLICE_THETA2[1:] if quick else SLICE_THETA2
    tokens = 10_000 if quick else SIM_TOKENS
    points = []
    for k, (a, b) in enumerate((a, b) for b in sim_t2 for a in sim_t1):
        model = LengthModel.from_cascade(cascade.with_thresholds((a, b)), histograms=False)
        res = simulate_lengths(model, tokens, seed=SEED + k, chains=SIM_CHAINS)
        e = res.speedup
        points.append((a, b, e.value, e.low, e.high, e.se, float(s[a - 1, b - 1])))
    pts = np.array(points, dtype=np.float64)
    return {
        "cascade": cascade.to_config(),
        "theta1": th1,
        "theta2": th2,
        "speedup": s,  # [theta1 - 1, theta2 - 1]
        "optimum": (int(th1[i]), int(th2[j]), float(s[i, j])),
        "slice_theta2": np.array(SLICE_THETA2),
        "sim_tokens": tokens,
        "sim_chains": SIM_CHAINS,
        "sim_seed": SEED,
        # columns: theta1, theta2, MC speedup, CI low, CI high, se, P1 speedup
        "sim": pts,
    }


def draw(data: dict, out_dir) -> list[Path]:
    th1, th2, s = data["theta1"], data["theta2"], data["speedup"]
    sim = data["sim"]
    fig, (ax, axs, axd) = style.figure(3, 1, height=5.9,
                                       gridspec_kw={"height_ratios": [1.35, 1.0, 0.75]})
    mesh = ax.pcolormesh(th1, th2, s.T, shading="nearest", cmap="viridis", rasterized=True)
    cs = ax.contour(th1, th2, s.T, levels=8, colors="white", linewidths=0.5, alpha=0.8)
    ax.clabel(cs, fmt="%.2f", fontsize=5.5)
    cb = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.05)
    cb.set_label("P1 speedup T₁/τ₁ (×)")
    cb.ax.tick_params(labelsize=6.5)
    o1, o2, os_ = data["optimum"]
    ax.plot([o1], [o2], marker="*", markersize=9, color="white", markeredgecolor="black",
            markeredgewidth=0.5, linestyle="none", label=f"optimum ({o1}, {o2}): {os_:.3f}×")
    ax.plot(sim[:, 0], sim[:, 1], marker="o", markersize=5, markerfacecolor="none",
            markeredgecolor="red", markeredgewidth=0.9, linestyle="none",
            label="simulated")
    ax.grid(False)
    ax.set_xlabel("target threshold θ₁ (tokens per block)")
    ax.set_ylabel("mid threshold θ₂ (tokens)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper right", frameon=True, facecolor="white", framealpha=0.85,
              edgecolor="none")
    style.panel_label(ax, "(a)  exact P1 surface")

    for k, b in enumerate(data["slice_theta2"]):
        col = style.color(k)
        axs.plot(th1, s[:, int(b) - 1], color=col, label=f"θ₂ = {int(b)}")
        m = sim[:, 1] == b
        if m.any():
            axs.errorbar(sim[m, 0], sim[m, 2], yerr=[sim[m, 2] - sim[m, 3], sim[m, 4] - sim[m, 2]],
                         fmt="o", color=col, markersize=3.5, markerfacecolor="white",
                         capsize=2, elinewidth=0.8)
    axs.errorbar([], [], yerr=[], fmt="o", color="0.3", markersize=3.5,
                 markerfacecolor="white", capsize=2,
                 label=f"Monte Carlo ± 95% CI\n{data['sim_tokens']:,} tokens each")
    axs.set_xlabel("target threshold θ₁ (tokens per block)")
    axs.set_ylabel("speedup T₁/τ₁ (×)")
    axs.xaxis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = axs.get_ylim()
    axs.set_ylim(lo - 0.45 * (hi - lo), hi)
    axs.legend(loc="lower left", ncol=2, columnspacing=1.0)
    style.panel_label(axs, "(b)  slices: P1 (lines) and simulation")

    x = np.arange(sim.shape[0])
    diff = sim[:, 2] - sim[:, 6]
    cols = [style.color(int(np.flatnonzero(data["slice_theta2"] == b)[0])) for b in sim[:, 1]]
    for xi, d, lo, hi, c in zip(x, diff, sim[:, 3] - sim[:, 6], sim[:, 4] - sim[:, 6], cols,
                                strict=True):
        axd.errorbar([xi], [d], yerr=[[d - lo], [hi - d]], fmt="o", color=c, markersize=3,
                     capsize=2, elinewidth=0.8)
    axd.axhline(0.0, color="black", linewidth=0.8)
    axd.set_xticks(x, [str(int(a)) for a in sim[:, 0]])
    lo, hi = axd.get_ylim()
    axd.set_ylim(lo, hi + 0.25 * (hi - lo))
    for b in np.unique(sim[:, 1]):
        idx = np.flatnonzero(sim[:, 1] == b)
        k = int(np.flatnonzero(data["slice_theta2"] == b)[0])
        axd.text(idx.mean(), 0.97, f"θ₂ = {int(b)}", transform=axd.get_xaxis_transform(),
                 ha="center", va="top", fontsize=6.5, color=style.color(k))
        if idx[0] > 0:
            axd.axvline(idx[0] - 0.5, color="0.6", linewidth=0.5)
    axd.grid(False, axis="x")
    axd.set_xlabel("θ₁ of the simulated point (tokens per block)")
    axd.set_ylabel("MC − P1 (×)")
    style.panel_label(axd, "(c)  simulation minus theory")
    fig.suptitle(cascade_line(data["cascade"]), fontsize=6)
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
