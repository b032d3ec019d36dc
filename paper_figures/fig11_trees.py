"""Figure 11 — token trees against the node budget (docs/theory.md Part III-D T1, T3, T4): the
expected accepted length and the speedup of the chain, the best fixed-width tree and the
optimal tree (Sequoia's DP), theory with simulator points (measured points come with the tree
decoder).

Setting: two models, sibling-rank acceptance ``p = (0.55, 0.2, 0.1, 0.05)`` at every depth;
target ``T(m) = 1 + 0.004 (m - 1)`` (extra verified positions are cheap, as on an accelerator),
drafter ``T = 0.03`` per forward (one forward per depth). For a budget of ``N`` drafted nodes:

* (a) the largest ``E[A] = E[L] - 1`` within the budget: the chain of ``N`` tokens, the best
  fixed-width tree (:func:`~polyspec_theory.trees.beam_tree`, width ``w`` and depth
  ``<= N / w``), the optimal tree (:func:`~polyspec_theory.trees.max_expected_emitted`);
* (b) the largest speedup within the budget: the best chain (:func:`optimal_gamma` up to
  ``N``), :func:`~polyspec_theory.trees.best_width_tree`,
  :func:`~polyspec_theory.trees.optimal_tree`.

Points: :func:`simulators.structures.simulate_structured` on the plotted structures at a few
budgets (95 % CIs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyspec_theory.config import Cascade
from polyspec_theory.dualistic import optimal_gamma
from polyspec_theory.trees import (
    SiblingLaw,
    beam_tree,
    best_width_tree,
    chain_tree,
    expected_emitted_tree,
    max_expected_emitted,
    optimal_tree,
)
from simulators.structures import simulate_structured

from . import style

NAME = "fig11_trees"
TITLE = "Token trees against the node budget: chain, best fixed-width tree, optimal tree"
SOURCES = ("polyspec_theory.trees", "simulators.structures")

LAW = {"sibling": [0.55, 0.2, 0.1, 0.05]}
TARGET = {"base": 1.0, "per_token": 0.004}
DRAFT = 0.03
FAMILIES = ("chain", "width", "optimal")


def _widest_el(law, n):
    """The fixed-width tree with the largest E[L] within ``n`` nodes."""
    best = None
    for w in range(1, n + 1):
        t = beam_tree(law, w, n // w)
        el = expected_emitted_tree(t, law)
        if best is None or el > best[1] * (1 + 1e-12):
            best = (t, el)
    return best


def structures(n: int) -> dict:
    """For budget ``n``: ``{(panel, family): (tree, theory value)}``."""
    law = SiblingLaw(LAW["sibling"])
    out = {}
    ch = chain_tree(n)
    out[("el", "chain")] = (ch, expected_emitted_tree(ch, law) - 1.0)
    t, el = _widest_el(law, n)
    out[("el", "width")] = (t, el - 1.0)
    o = max_expected_emitted(law, n)
    out[("el", "optimal")] = (o.tree, o.mean_emitted - 1.0)
    g = optimal_gamma({"alpha": LAW["sibling"][0]}, TARGET, DRAFT, max_gamma=n)
    out[("speedup", "chain")] = (chain_tree(g.gamma), g.speedup)
    t, s, _ = best_width_tree(law, n, TARGET, DRAFT)
    out[("speedup", "width")] = (t, s)
    o = optimal_tree(law, n, TARGET, DRAFT)
    out[("speedup", "optimal")] = (o.tree, o.speedup)
    return out


def _cascade(tree) -> Cascade:
    return Cascade.from_config({
        "name": "fig11", "models": [{"name": "target", "cost": TARGET},
                                    {"name": "draft", "cost": DRAFT}],
        "acceptance": [LAW], "thresholds": [1], "trees": [{"parents": list(tree.parents)}]})


def compute(quick: bool = False) -> dict:
    """Theory curves for budgets 1..N_max and simulator points at a few budgets."""
    nmax = 16 if quick else 48
    budgets = np.arange(1, nmax + 1)
    curves = {(p, f): np.empty(budgets.size) for p in ("el", "speedup") for f in FAMILIES}
    for j, n in enumerate(budgets):
        for key, (_, v) in structures(int(n)).items():
            curves[key][j] = v
    mc_budgets = (12,) if quick else (4, 16, 48)
    rounds, chains = (60, 64) if quick else (400, 256)
    points = []
    cache = {}
    for n in mc_budgets:
        for (panel, fam), (tree, theory) in structures(n).items():
            if tree.parents not in cache:
                cache[tree.parents] = simulate_structured(
                    _cascade(tree), rounds, seed=1100 + len(cache), chains=chains)
            r = cache[tree.parents]
            if panel == "el":
                e = r.levels[0].mean_emitted
                v, lo, hi = e.value - 1.0, e.low - 1.0, e.high - 1.0
            else:
                v, lo, hi = r.speedup.value, r.speedup.low, r.speedup.high
            points.append({"panel": panel, "family": fam, "budget": n, "parents":
                           list(tree.parents), "theory": float(theory), "mc": float(v),
                           "low": float(lo), "high": float(hi), "se": float((hi - lo) / 3.92)})
    return {"budgets": budgets, "law": LAW, "target": TARGET, "draft": DRAFT,
            **{f"{p}_{f}": curves[(p, f)] for p, f in curves}, "points": points,
            "rounds": rounds, "chains": chains}


LABELS = {"chain": "chain", "width": "best fixed-width tree", "optimal": "optimal tree (DP)"}


def draw(data: dict, out_dir) -> list[Path]:
    b = data["budgets"]
    fig, (ax, axs) = style.figure(2, 1, height=4.0, sharex=True)
    for k, fam in enumerate(FAMILIES):
        col, ls = style.color(k), style.LINESTYLES[k]
        ax.plot(b, data[f"el_{fam}"], color=col, linestyle=ls, label=LABELS[fam])
        axs.plot(b, data[f"speedup_{fam}"], color=col, linestyle=ls, label=LABELS[fam])
        for panel, axis in (("el", ax), ("speedup", axs)):
            pts = [p for p in data["points"] if p["panel"] == panel and p["family"] == fam]
            if pts:
                x = np.array([p["budget"] for p in pts], dtype=float) + (k - 1) * 0.35
                y = np.array([p["mc"] for p in pts])
                err = np.array([[p["mc"] - p["low"] for p in pts],
                                [p["high"] - p["mc"] for p in pts]])
                axis.errorbar(x, y, yerr=err, fmt=style.MARKERS[k], color=col, markersize=2.5,
                              capsize=1.5, linewidth=0.8)
    ax.set_ylabel("E[A] = E[L] − 1\n(accepted per round)")
    ax.legend(loc="upper left", title="lines: theory; points: simulator (95 % CI)")
    style.panel_label(ax, "(a)")
    axs.set_ylabel("speedup (two models)")
    axs.set_xlabel("node budget N (drafted tokens verified per round)")
    p = data["law"]["sibling"]
    axs.text(0.98, 0.05, "p = (" + ", ".join(f"{x:g}" for x in p) + "), T₁(m) = 1 + "
             f"{data['target']['per_token']:g}(m−1), T₂ = {data['draft']:g}",
             transform=axs.transAxes, ha="right", va="bottom", fontsize=6)
    style.panel_label(axs, "(b)")
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":
    raise SystemExit(main())
