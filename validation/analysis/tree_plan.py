"""The structures behind figure 11's measured points: from a pilot tree capture of one pair,
fit the sibling-rank law (:func:`validation.analysis.structured.sibling_law_by_depth`) and the
AR-calibrated cost curves, then, for each node budget ``N``, the trees the figure compares
(docs/theory.md Part III-D T4):

* panel ``el`` (largest ``E[A]`` within ``N`` nodes): the chain of ``N`` tokens, the
  fixed-width tree with the largest ``E[L]`` (:func:`~polyspec_theory.structures.trees.beam_tree`
  over
  widths), the ``E[L]``-optimal tree
  (:func:`~polyspec_theory.structures.trees.max_expected_emitted`);
* panel ``speedup`` (fastest within ``N`` nodes, T3 time with the fitted costs): the best
  chain (path of ``g <= N`` nodes), :func:`~polyspec_theory.structures.trees.best_width_tree`,
  :func:`~polyspec_theory.structures.trees.optimal_tree`.

``python -m validation.analysis.tree_plan PILOT.jsonl --budgets 4,8,16,32 --prefix TAG --out
PLAN.json`` writes the plan (law, costs, one entry per (panel, family, budget) with its tree,
theory value and the trace name it is captured under) and prints one line ``NAME PARENTS``
per distinct tree, for ``experiments/trees/capture_trees.sh``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from polyspec_theory.core.costs import cost_from_config
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.structures.tree_search import (
    best_width_trees,
    max_expected_emitted_trees,
    optimal_trees,
    tree_speedup,
    widest_emitted_trees,
)
from polyspec_theory.structures.trees import SiblingLaw, chain_tree, expected_emitted_tree

__all__ = ["TREE_FAMILIES", "PANELS", "family_structures", "family_structures_by_budget",
           "plan_from_capture", "tree_name", "main"]

TREE_FAMILIES = ("chain", "width", "optimal")
PANELS = ("el", "speedup")


def tree_name(prefix: str, parents) -> str:
    """``<prefix>_n<N>_<digest>``: the trace name of a tree."""
    dig = hashlib.sha256(",".join(map(str, parents)).encode()).hexdigest()[:8]
    return f"{prefix}_n{len(parents) - 1}_{dig}"


def family_structures(law, target_cost, draft_cost, n: int) -> dict:
    """``{(panel, family): (tree, theory value)}`` for budget ``n`` (module docstring); the
    ``el`` value is ``E[A] = E[L] - 1``, the ``speedup`` value T3's speedup."""
    n = as_int(n, "budget", low=1)
    return family_structures_by_budget(law, target_cost, draft_cost, [n])[0]


def family_structures_by_budget(law, target_cost, draft_cost, budgets) -> list[dict]:
    """:func:`family_structures` of each budget of ``budgets``, bit for bit, with the optimal
    trees of every budget from one set of DP tables
    (:func:`~polyspec_theory.structures.tree_search.max_expected_emitted_trees`,
    :func:`~polyspec_theory.structures.tree_search.optimal_trees`) and each beam tree and
    chain scored once (:func:`~polyspec_theory.structures.tree_search.widest_emitted_trees`,
    :func:`~polyspec_theory.structures.tree_search.best_width_trees`)."""
    if isinstance(budgets, (str, bytes, dict)) or not hasattr(budgets, "__len__"):
        raise PolyspecInputError("budgets", "must be a list of node budgets")
    ns = [as_int(b, f"budgets[{i}]", low=1) for i, b in enumerate(budgets)]
    if not ns:
        raise PolyspecInputError("budgets", "give at least one node budget")
    if not law.rank_probs(1, 1)[0, 0] > 0:  # nothing is ever accepted: one node is best
        one = chain_tree(1)
        s1 = tree_speedup(one, law, target_cost, draft_cost)
        return [{(p, f): (one, 0.0 if p == "el" else s1) for p in PANELS for f in TREE_FAMILIES}
                for _ in ns]
    widest = widest_emitted_trees(law, ns)
    el_opt = max_expected_emitted_trees(law, ns)
    widths = best_width_trees(law, ns, target_cost, draft_cost)
    sp_opt = optimal_trees(law, ns, target_cost, draft_cost)
    chains = {}  # g -> (chain of g nodes, its speedup)
    res = []
    for n, wide, oe, wsp, osp in zip(ns, widest, el_opt, widths, sp_opt, strict=True):
        out = {}
        ch = chain_tree(n)
        out[("el", "chain")] = (ch, expected_emitted_tree(ch, law) - 1.0)
        out[("el", "width")] = (wide[0], wide[1] - 1.0)
        out[("el", "optimal")] = (oe.tree, oe.mean_emitted - 1.0)
        best = None
        for g in range(1, n + 1):
            if g not in chains:
                t = chain_tree(g)
                chains[g] = (t, tree_speedup(t, law, target_cost, draft_cost))
            t, s = chains[g]
            if best is None or s > best[1] * (1 + 1e-12):
                best = (t, s)
        out[("speedup", "chain")] = best
        out[("speedup", "width")] = (wsp[0], wsp[1])
        out[("speedup", "optimal")] = (osp.tree, osp.speedup)
        res.append(out)
    return res


def plan_from_capture(capture, budgets, prefix: str) -> dict:
    """The plan (module docstring) from a two-model tree capture."""
    from validation.analysis.fits import fit_costs
    from validation.analysis.structured import sibling_law_by_depth

    if capture.n != 2 or capture.pair_kind(0) != "tree":
        raise PolyspecInputError("pilot", f"{capture.name}: need a two-model tree capture")
    budgets = [as_int(b, "budgets", low=1, high=4096) for b in budgets]
    if not budgets:
        raise PolyspecInputError("budgets", "give at least one node budget")
    law = sibling_law_by_depth(capture.structure(0))
    costs = fit_costs(capture)
    tc = costs[capture.models[0]].curve()
    dc = costs[capture.models[1]].curve()
    entries = []
    for n, fams in zip(budgets, family_structures_by_budget(law, tc, dc, budgets), strict=True):
        for (panel, fam), (tree, value) in fams.items():
            entries.append({"panel": panel, "family": fam, "budget": n,
                            "parents": list(tree.parents), "nodes": tree.n_nodes,
                            "depth": tree.max_depth, "theory": float(value),
                            "name": tree_name(prefix, tree.parents)})
    return {"pilot": capture.name, "models": list(capture.models),
            "temperature": capture.temperature, "tree_sampling": capture.tree_sampling,
            "law": law.to_config(), "target_cost": tc.to_config(), "draft_cost": dc.to_config(),
            "budgets": budgets, "entries": entries}


def plan_law_costs(plan: dict):
    """``(law, target cost, draft cost)`` of a plan (the pilot's fits)."""
    return (SiblingLaw(plan["law"]["sibling"]), cost_from_config(plan["target_cost"], "target"),
            cost_from_config(plan["draft_cost"], "draft"))


def main(argv=None) -> int:
    from validation.traces.records import read_trace

    p = argparse.ArgumentParser(prog="python -m validation.analysis.tree_plan", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pilot", help="a two-model tree capture (trace file)")
    p.add_argument("--budgets", default="4,8,16,32", help="comma-separated node budgets")
    p.add_argument("--prefix", required=True, help="trace-name prefix of the planned trees")
    p.add_argument("--out", required=True, help="plan JSON file")
    args = p.parse_args(argv)
    try:
        budgets = [int(x) for x in args.budgets.split(",") if x.strip()]
    except ValueError:
        print(f"--budgets: expected comma-separated integers, got {args.budgets!r}",
              file=sys.stderr)
        return 2
    try:
        plan = plan_from_capture(read_trace(args.pilot), budgets, args.prefix)
    except PolyspecInputError as e:
        print(str(e), file=sys.stderr)
        return 2
    from validation.files import atomic_write_text, dump_json

    atomic_write_text(args.out, dump_json(plan) + "\n")
    seen = set()
    for e in plan["entries"]:
        if e["name"] not in seen:
            seen.add(e["name"])
            print(e["name"], ",".join(map(str, e["parents"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
