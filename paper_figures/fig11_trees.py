"""Figure 11 — token trees against the node budget (docs/theory.md Part III-D T1, T3, T4): the
expected accepted length and the speedup of the chain, the best fixed-width tree and the
optimal tree (Sequoia's DP), theory with simulator points (measured points come with the tree
decoder).

Setting: two models, sibling-rank acceptance ``p = (0.55, 0.2, 0.1, 0.05)`` at every depth;
target ``T(m) = 1 + 0.004 (m - 1)`` (extra verified positions are cheap, as on an accelerator),
drafter ``T = 0.03`` per forward (one forward per depth). For a budget of ``N`` drafted nodes:

* (a) the largest ``E[A] = E[L] - 1`` within the budget: the chain of ``N`` tokens, the best
  fixed-width tree (:func:`~polyspec_theory.structures.trees.beam_tree`, width ``w`` and depth
  ``<= N / w``), the optimal tree (:func:`~polyspec_theory.structures.trees.max_expected_emitted`);
* (b) the largest speedup within the budget: the best chain (:func:`optimal_gamma` up to
  ``N``), :func:`~polyspec_theory.structures.trees.best_width_tree`,
  :func:`~polyspec_theory.structures.trees.optimal_tree`.

Points: :func:`simulators.structures.simulate_structured` on the plotted structures at a few
budgets (95 % CIs).

Measured points on the zoo (when present): if the traces folder (default
``data/traces/trees``, written by ``experiments/trees/capture_trees.sh``) holds plans
``*_plan.json`` (:mod:`validation.analysis.tree_plan`), one more column per plan (pair,
temperature):
lines = the theory from the plan's pilot capture (sibling-rank law by depth and AR-calibrated
cost curves fitted on the pilot only), points = the captures of the planned trees (mean
accepted length per round and measured speedup, ± 1.96 standard errors over rounds / prompts).
The figure's footnote says which: measured points and their folder, or theory and simulator
only; with measured points it also sizes the gap between theory and measured speedup in each
zoo speedup panel (:func:`speedup_gap`: ``S = E[L] / c``, so theory / measured = E[L] ratio x
round-cost ratio, geometric means over the captured trees) and names the factor carrying
most of it (:func:`gap_caption`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyspec_theory.closed_forms.dualistic import optimal_gamma
from polyspec_theory.core.config import Cascade
from polyspec_theory.structures.trees import SiblingLaw, Tree, chain_tree, expected_emitted_tree
from simulators.structures import simulate_structured
from validation.analysis.tree_plan import TREE_FAMILIES, family_structures_by_budget
from validation.paths import shown_path

from . import style

__all__ = ["compute", "draw", "main", "structures", "structures_by_budget", "zoo_panels"]

NAME = "fig11_trees"
TITLE = "Token trees against the node budget: chain, best fixed-width tree, optimal tree"
SOURCES = ("polyspec_theory.structures.trees", "simulators.structures")

LAW = {"sibling": [0.55, 0.2, 0.1, 0.05]}
TARGET = {"base": 1.0, "per_token": 0.004}
DRAFT = 0.03


def structures(n: int) -> dict:
    """For budget ``n``: ``{(panel, family): (tree, theory value)}``
    (:func:`validation.analysis.tree_plan.family_structures`; the best chain's speedup by the
    dualistic optimum, :func:`~polyspec_theory.closed_forms.dualistic.optimal_gamma`)."""
    return structures_by_budget([n])[0]


def structures_by_budget(budgets) -> list[dict]:
    """:func:`structures` of each budget, bit for bit, with the trees of every budget from one
    set of DP tables (:func:`validation.analysis.tree_plan.family_structures_by_budget`)."""
    outs = family_structures_by_budget(SiblingLaw(LAW["sibling"]), TARGET, DRAFT, budgets)
    for n, out in zip(budgets, outs, strict=True):
        g = optimal_gamma({"alpha": LAW["sibling"][0]}, TARGET, DRAFT, max_gamma=n)
        out[("speedup", "chain")] = (chain_tree(g.gamma), g.speedup)
    return outs


def _cascade(tree) -> Cascade:
    return Cascade.from_config({
        "name": "fig11", "models": [{"name": "target", "cost": TARGET},
                                    {"name": "draft", "cost": DRAFT}],
        "acceptance": [LAW], "thresholds": [1], "trees": [{"parents": list(tree.parents)}]})


def compute(quick: bool = False, traces_dir=None) -> dict:
    """Theory curves for budgets 1..N_max and simulator points at a few budgets; plus the
    measured zoo panels from ``traces_dir`` (default ``data/traces/trees``) when it holds
    plans (module docstring)."""
    nmax = 16 if quick else 48
    budgets = np.arange(1, nmax + 1)
    curves = {(p, f): np.empty(budgets.size) for p in ("el", "speedup") for f in TREE_FAMILIES}
    # budget -> structures(budget): the simulated budgets are on the curves' grid
    at = dict(zip(budgets.tolist(), structures_by_budget(budgets.tolist()), strict=True))
    for j, n in enumerate(budgets):
        for key, (_, v) in at[int(n)].items():
            curves[key][j] = v
    mc_budgets = (12,) if quick else (4, 16, 48)
    rounds, chains = (60, 64) if quick else (400, 256)
    points = []
    cache = {}
    for n in mc_budgets:
        for (panel, fam), (tree, theory) in (at[n] if n in at else structures(n)).items():
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
    tdir = _trees_dir(traces_dir)
    zoo = zoo_panels(tdir) if tdir is not None else []
    shown = None if tdir is None else shown_path(tdir)  # no machine path in the figure
    if zoo:
        n_pts = sum(len(z["points"]) for z in zoo)
        last = chr(ord("b") + 2 * len(zoo))
        caption = (f"Zoo panels (c)–({last}): lines = theory from each pair's pilot capture "
                   f"(fitted sibling-rank law and costs),\npoints = measured captures of the "
                   f"planned trees ({n_pts} points, traces in {shown}).")
        caption += gap_caption(zoo)
    else:
        caption = ("Theory and simulator only: no measured tree captures"
                   + (f" in {shown}" if tdir is not None else "") + ".")
    return {"budgets": budgets, "law": LAW, "target": TARGET, "draft": DRAFT,
            **{f"{p}_{f}": curves[(p, f)] for p, f in curves}, "points": points,
            "rounds": rounds, "chains": chains, "zoo": zoo, "caption": caption,
            "traces_dir": shown}


def _trees_dir(traces_dir):
    if traces_dir is not None:
        return Path(traces_dir)
    try:
        from validation.paths import traces_dir as default

        d = default("trees")
    except Exception:  # no data folder in this checkout: theory only
        return None
    return d if d.is_dir() else None


def zoo_panels(directory) -> list[dict]:
    """One panel pair per plan in ``directory``: theory curves from the plan's pilot fits
    (:func:`validation.analysis.tree_plan.family_structures_by_budget`) and the measured
    points of the planned trees that were captured (missing traces are skipped)."""
    import json

    from validation.analysis.tree_plan import family_structures_by_budget, plan_law_costs
    from validation.traces.records import read_trace

    out = []
    for pf in sorted(Path(directory).glob("*_plan.json")):
        plan = json.loads(pf.read_text())
        law, tc, dc = plan_law_costs(plan)
        nmax = max(plan["budgets"])
        b = np.arange(1, nmax + 1)
        curves = {f"{p}_{f}": np.empty(b.size) for p in ("el", "speedup") for f in TREE_FAMILIES}
        for j, fams in enumerate(family_structures_by_budget(law, tc, dc, b.tolist())):
            for (p, f), (_, v) in fams.items():
                curves[f"{p}_{f}"][j] = v
        pts, seen = [], {}
        for e in plan["entries"]:
            path = Path(directory) / f"{e['name']}.jsonl"
            if not path.is_file():
                continue
            if e["name"] not in seen:
                seen[e["name"]] = read_trace(path)
            cap = seen[e["name"]]
            a = cap.rounds[0].A.astype(float)
            extra = {}
            if e["panel"] == "el":
                v = float(a.mean())
                se = float(a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else float("nan")
            else:
                v = cap.measured_speedup
                se = v * cap.time_per_token_se() / cap.time_per_token
                # the two factors of the speedup S = E[L] / (cost of a round in target
                # forwards), measured and in theory (pilot law), for the gap decomposition
                extra = {"measured_el": float(a.mean()) + 1.0,
                         "theory_el": expected_emitted_tree(Tree(e["parents"]), law)}
            pts.append({**e, "measured": v, "se": se, "trace": path.name, **extra})
        out.append({"plan": pf.name, "models": plan["models"],
                    "temperature": plan["temperature"], "law": plan["law"],
                    "budgets": b, **curves, "points": pts, "gap": speedup_gap(pts)})
    return out


def gap_caption(zoo) -> str:
    """The caption lines that size the theory-measurement gap of each speedup panel and
    name the factor that carries most of it (:func:`speedup_gap`); empty without points."""
    parts, logs = [], {"el": 0.0, "cost": 0.0}
    for j, z in enumerate(zoo, start=1):
        g = z["gap"]
        if g is None:
            continue
        parts.append(f"({chr(ord('b') + 2 * j)}) {g['speedup']:.2f}× = E[L] {g['el']:.2f}× "
                     f"· round cost {g['cost']:.2f}×")
        for k in logs:
            logs[k] += abs(float(np.log(g[k])))
    if not parts:
        return ""
    what = ("the cost of a round: a measured round costs more target forwards than the "
            "pilot's cost fit predicts" if logs["cost"] >= logs["el"] else
            "the acceptance: the captured trees accept fewer tokens than the pilot's law "
            "predicts")
    return ("\nTheory / measured speedup (geometric mean over the captured trees) = "
            "E[L] ratio × round-cost ratio:\n" + "; ".join(parts)
            + f".\nMost of the gap is {what}.")


def speedup_gap(points) -> dict | None:
    """Where the gap between theory and measured speedup sits, over the captured trees of
    the speedup panel: since ``S = E[L] / c`` (``c``: cost of a round in target forwards),
    ``S_theory / S_measured = (E[L]_theory / E[L]_measured) x (c_measured / c_theory)``.
    Returns the geometric means over the trees of the three ratios (so the product holds
    exactly): ``speedup``, ``el`` (acceptance), ``cost`` (round cost); None without
    points."""
    q = [p for p in points if p["panel"] == "speedup" and np.isfinite(p["measured"])
         and p["measured"] > 0]
    if not q:
        return None
    s = np.array([p["theory"] / p["measured"] for p in q])
    el = np.array([p["theory_el"] / p["measured_el"] for p in q])
    geo = lambda x: float(np.exp(np.mean(np.log(x))))  # noqa: E731
    return {"n": len(q), "speedup": geo(s), "el": geo(el), "cost": geo(s / el)}


LABELS = {"chain": "chain", "width": "best fixed-width tree", "optimal": "optimal tree (DP)"}


def _draw_column(ax, axs, b, data, pts_of):
    for k, fam in enumerate(TREE_FAMILIES):
        col, ls = style.color(k), style.LINESTYLES[k]
        ax.plot(b, data[f"el_{fam}"], color=col, linestyle=ls, label=LABELS[fam])
        axs.plot(b, data[f"speedup_{fam}"], color=col, linestyle=ls, label=LABELS[fam])
        for panel, axis in (("el", ax), ("speedup", axs)):
            pts = pts_of(panel, fam)
            if pts:
                x = np.array([p[0] for p in pts], dtype=float) + (k - 1) * 0.35
                y = np.array([p[1] for p in pts])
                err = np.array([[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]])
                axis.errorbar(x, y, yerr=err, fmt=style.MARKERS[k], color=col, markersize=2.5,
                              capsize=1.5, linewidth=0.8)


SPANS_COLUMNS_WITH_MEASUREMENTS = True  # theory column + one column per measured zoo setting


def draw(data: dict, out_dir) -> list[Path]:
    b = data["budgets"]
    zoo = data.get("zoo") or []
    ncol = 1 + len(zoo)
    fig, axes = style.figure(2, ncol, height=4.0, width=style.COLUMN_WIDTH if ncol == 1
                             else 2 * style.COLUMN_WIDTH + 0.25, sharex="col", squeeze=False)
    ax, axs = axes[0, 0], axes[1, 0]

    def sim_pts(panel, fam):
        return [(p["budget"], p["mc"], p["low"], p["high"]) for p in data["points"]
                if p["panel"] == panel and p["family"] == fam]

    _draw_column(ax, axs, b, data, sim_pts)
    ax.set_ylabel("E[A] = E[L] − 1\n(accepted per round)")
    style.panel_label(ax, "(a)")
    axs.set_ylabel("speedup (two models)")
    axs.set_xlabel("node budget N (drafted tokens verified per round)")
    p = data["law"]["sibling"]
    axs.text(0.98, 0.05, "p = (" + ", ".join(f"{x:g}" for x in p) + ")\nT₁(m) = "
             f"{data['target']['base']:g} + {data['target']['per_token']:g}(m−1), "
             f"T₂ = {data['draft']:g}", transform=axs.transAxes, ha="right", va="bottom",
             fontsize=5.5)
    style.panel_label(axs, "(b)")
    for j, z in enumerate(zoo, start=1):
        za, zs = axes[0, j], axes[1, j]

        def zoo_pts(panel, fam, z=z):
            return [(q["budget"], q["measured"], q["measured"] - 1.96 * q["se"],
                     q["measured"] + 1.96 * q["se"]) for q in z["points"]
                    if q["panel"] == panel and q["family"] == fam
                    and np.isfinite(q["measured"])]

        _draw_column(za, zs, z["budgets"], z, zoo_pts)
        name = " ← ".join(z["models"]) + f", T = {z['temperature']:g}"
        zs.set_xlabel("node budget N")
        style.panel_label(za, f"({chr(ord('a') + 2 * j)})  zoo: {name}")
        style.panel_label(zs, f"({chr(ord('b') + 2 * j)})")
    handles, labels = ax.get_legend_handles_labels()
    what = ("lines: theory (a, b), pilot fit (zoo); points: simulator 95 % CI (a, b), "
            "measured ±1.96 se (zoo)" if zoo else "lines: theory; points: simulator (95 % CI)")
    fig.legend(handles, labels, loc="outside lower center", ncols=3, title=what,
               fontsize=6, title_fontsize=6)
    fig.suptitle(data.get("caption", ""), fontsize=5.5)
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv, traces=True,
                             traces_default="data/traces/trees when it holds plans")


if __name__ == "__main__":
    raise SystemExit(main())
