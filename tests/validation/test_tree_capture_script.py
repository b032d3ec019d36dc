"""``experiments/trees/capture_trees.sh`` in its smoke setting (tiny random zoo, one prompt):
pilot capture, plan, one capture per planned tree; figure 11 then draws the measured points
from that folder (and says so), and theory only without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from paper_figures import fig11_trees as fig
from validation.paths import REPO_ROOT
from validation.traces.records import read_trace
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    # a peaked random target and a noisy copy of it as the drafter
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, noise) in enumerate([("target", 0.0), ("small", 0.008)]):
        torch.manual_seed(0)
        m = GPT(GPTConfig(1, 2, 32))
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(5.0)
            torch.manual_seed(100 + i)
            for p in m.parameters():
                p.add_(torch.randn_like(p) * noise)
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


def test_capture_script_smoke_and_figure(zoo_dir, tmp_path):
    out = tmp_path / "trees"
    env = dict(os.environ, SMOKE="1", OUT=str(out), PY=sys.executable, ZOO_DIR=str(zoo_dir),
               PAIRS="target,small", TEMPS="1",
               PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(["bash", str(REPO_ROOT / "experiments/trees/capture_trees.sh")],
                       cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads((out / "fig11_target-small_T1_plan.json").read_text())
    assert plan["budgets"] == [2, 4] and plan["pilot"] == "fig11_target-small_T1_pilot"
    names = {e["name"] for e in plan["entries"]}
    for nm in names:  # every planned tree was captured with its tree
        t = read_trace(out / f"{nm}.jsonl")
        e = next(x for x in plan["entries"] if x["name"] == nm)
        assert list(t.trees[0].parents) == e["parents"] and t.temperature == 1.0
    assert {(e["panel"], e["family"]) for e in plan["entries"]} == {
        (p, f) for p in ("el", "speedup") for f in ("chain", "width", "optimal")}
    data = fig.compute(quick=True, traces_dir=out)
    (z,) = data["zoo"]
    # the caption names the trace folder without the machine path (issue 27)
    assert len(z["points"]) == len(plan["entries"]) and str(out) not in data["caption"]
    assert f"traces in {out.parent.name}/{out.name}" in data["caption"]
    for q in z["points"]:
        t = read_trace(out / q["trace"])
        want = t.rounds[0].A.mean() if q["panel"] == "el" else t.measured_speedup
        assert q["measured"] == pytest.approx(want)
    # the theory lines are the plan's: at each planned budget they equal the entries' values
    for e in plan["entries"]:
        assert z[f"{e['panel']}_{e['family']}"][e["budget"] - 1] == pytest.approx(
            e["theory"], rel=1e-9)
    assert np.all(z["el_chain"] <= z["el_optimal"] * (1 + 1e-12))
    # validate: every planned tree also gets a prediction with laws from the other captures
    from validation.analysis.validate import validate
    from validation.traces.records import read_traces

    res = validate(read_traces(out))
    assert not res.configs and len(res.structured) == len(names) + 1  # + the pilot
    assert all(c.holdout_speedup is not None and np.isfinite(c.holdout_speedup)
               for c in res.structured)
    paths = fig.draw(data, tmp_path / "fig")
    assert all(p.is_file() for p in paths)
    empty = fig.compute(quick=True, traces_dir=tmp_path / "none")
    assert empty["zoo"] == [] and empty["caption"].startswith("Theory and simulator only")


def test_plan_structures_equal_figure_11s_and_degenerate_law():
    from polyspec_theory.structures.trees import SiblingLaw
    from validation.analysis.tree_plan import family_structures

    law = SiblingLaw(fig.LAW["sibling"])
    for n in range(1, 9):
        mine = family_structures(law, fig.TARGET, fig.DRAFT, n)
        ref = fig.structures(n)
        for key, (_, v) in ref.items():
            assert mine[key][1] == pytest.approx(v, rel=1e-12), (n, key)
    zero = family_structures(SiblingLaw([0.0, 0.0]), fig.TARGET, fig.DRAFT, 5)
    assert {t.n_nodes for t, _ in zero.values()} == {1}
    assert zero[("el", "optimal")][1] == 0.0


def test_plan_structures_of_several_budgets_equal_each_budget_alone():
    """family_structures_by_budget (one set of DP tables, each chain and beam tree scored
    once) returns exactly family_structures of each budget, in the order asked: per-depth
    ranks with a width-dependent drafter (the zoo plans' case) and figure 11's law."""
    from polyspec_theory import PolyspecInputError
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.structures.trees import SiblingLaw
    from validation.analysis.tree_plan import family_structures, family_structures_by_budget

    cases = [(SiblingLaw([[0.6, 0.2], [0.45, 0.15, 0.05], [0.7, 0.1]]),
              CostCurve.affine(1.0, 0.01), {"base": 0.05, "per_token": 0.01}),
             (SiblingLaw(fig.LAW["sibling"]), fig.TARGET, fig.DRAFT),
             (SiblingLaw([0.0]), fig.TARGET, fig.DRAFT)]
    budgets = [7, 1, 12, 3, 7, 10]
    for law, tc, dc in cases:
        many = family_structures_by_budget(law, tc, dc, budgets)
        assert len(many) == len(budgets)
        for n, got in zip(budgets, many, strict=True):
            one = family_structures(law, tc, dc, n)
            assert list(got) == list(one)
            for key in one:  # the same tree and the same float, bit for bit
                assert got[key][0] == one[key][0] and got[key][1] == one[key][1], (n, key)
    for bad in ([], "7", [3, 0]):
        with pytest.raises(PolyspecInputError, match="^budgets"):
            family_structures_by_budget(cases[0][0], 1.0, 0.1, bad)
