"""Figure 9 — Monte-Carlo convergence: the length-level simulator's speedup estimate
converges to the exact P1 value at the 1/√n rate (n = emitted tokens).

Setting: the 4-level example cascade (``configs/default.json``). For each token budget n on
a log grid, ``REPLICATES`` independent runs of :func:`simulators.length.simulate_lengths`
(seeds ``SEED + r``) give estimates with delta-method standard errors; the exact value is
``predict(cascade).speedup`` (P1). Plotted: each run's relative error |Ŝ − S|/S, their
root-mean-square over runs, the mean reported standard error, and the line C/√n with C the
mean of ``se·√n/S`` over the runs at the largest n (the CLT constant, not a fit to the
errors).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyspec_theory.core.config import DEFAULT_CASCADE, Cascade
from polyspec_theory.schemes import predict
from simulators.length import LengthModel, simulate_lengths

from . import style

NAME = "fig09_mc_convergence"
TITLE = "Monte-Carlo convergence of the simulated speedup to P1"
SOURCES = ("polyspec_theory.core.p1", "simulators.length")

CASCADE = DEFAULT_CASCADE
TOKENS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
REPLICATES = 8
CHAINS = 64
SEED = 909


def compute(quick: bool = False) -> dict:
    """Estimates, standard errors and CIs for every (n, replicate) (quick: n = 1e3, 1e4 and
    3 replicates)."""
    cascade = Cascade.from_config(CASCADE)
    exact = predict(cascade).speedup
    tokens = np.array(TOKENS[:3:2] if quick else TOKENS)
    reps = 3 if quick else REPLICATES
    est = np.empty((tokens.size, reps))
    se = np.empty_like(est)
    low = np.empty_like(est)
    high = np.empty_like(est)
    emitted = np.empty(est.shape, dtype=np.int64)
    for i, n in enumerate(tokens):
        for r in range(reps):
            res = simulate_lengths(LengthModel.from_cascade(cascade, histograms=False), int(n),
                                   seed=SEED + 1000 * i + r, chains=CHAINS)
            e = res.speedup
            est[i, r], se[i, r], low[i, r], high[i, r] = e.value, e.se, e.low, e.high
            emitted[i, r] = res.tokens
    rel_err = np.abs(est - exact) / exact
    const = float(np.mean(se[-1] * np.sqrt(emitted[-1]) / exact))
    return {
        "cascade": cascade.to_config(),
        "exact": exact,
        "tokens": tokens,  # asked for
        "emitted": emitted,  # actually emitted (chains finish their top-level round)
        "estimate": est,
        "se": se,
        "ci_low": low,
        "ci_high": high,
        "rel_error": rel_err,
        "rms_rel_error": np.sqrt(np.mean(rel_err**2, axis=1)),
        "mean_rel_se": np.mean(se, axis=1) / exact,
        "clt_constant": const,
        "coverage": float(np.mean((low <= exact) & (exact <= high))),
        "chains": CHAINS,
        "seed": SEED,
    }


def draw(data: dict, out_dir) -> list[Path]:
    fig, ax = style.figure(1, 1, height=2.7)
    n = data["emitted"].mean(axis=1)
    reps = data["rel_error"].shape[1]
    x_all = data["emitted"].ravel()
    ax.plot(x_all, np.maximum(data["rel_error"].ravel(), 1e-7), linestyle="none", marker="o",
            markersize=2.2, color=style.color(5), alpha=0.8,
            label=f"|error| of each run ({reps} seeds per n)")
    ax.plot(n, data["rms_rel_error"], color=style.color(0), marker="s", markersize=3.5,
            label="RMS error over runs")
    ax.plot(n, data["mean_rel_se"], color=style.color(1), linestyle="--",
            label="mean reported standard error")
    grid = np.geomspace(n[0], n[-1], 50)
    ax.plot(grid, data["clt_constant"] / np.sqrt(grid), color="black", linestyle=":",
            linewidth=1.1, label=f"C/√n, C = {data['clt_constant']:.2f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if np.log10(x_all.max() / x_all.min()) < 1.5:  # under two decades: 1-2-5 ticks, no minor
        from matplotlib.ticker import LogLocator, NullFormatter

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("tokens simulated n")
    ax.set_ylabel("relative error |Ŝ − S| / S")
    ax.legend(loc="lower left")
    ax.text(0.98, 0.97, f"exact (P1): S = {data['exact']:.4f}×\n95% CIs cover S in "
            f"{100 * data['coverage']:.0f}% of runs",
            transform=ax.transAxes, ha="right", va="top", fontsize=6.5)
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
