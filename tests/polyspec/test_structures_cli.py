"""`polyspec predict` / `polyspec simulate` on configs with token trees and schedules:
the JSON carries the exact theory and the simulator's estimate agrees within 4.5 standard
errors (false-failure rate 6.8e-6 per comparison); bad trees exit 2 naming the node."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from polyspec_theory.core.config import Cascade
from polyspec_theory.structures.structured import predict_structured

Z = 4.5
TWO = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                  {"name": "d", "cost": 0.05}],
       "acceptance": [{"alpha": 0.75}], "thresholds": [4]}
TREE = {**TWO, "acceptance": [{"sibling": [[0.6, 0.2, 0.1], [0.5, 0.2]]}],
        "trees": [{"parents": [-1, 0, 0, 0, 1, 1, 2, 4, 4]}]}
HF = {**TWO, "schedules": [{"kind": "hf", "start": 5, "min": 1, "max": 12}]}


def test_cli_predict_and_simulate_trees_and_schedules(capsys, tmp_path):
    for name, cfg in (("tree", TREE), ("hf", HF)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        assert main(["predict", str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        exact = predict_structured(Cascade.from_config(cfg)).speedup
        assert out["speedup"] == pytest.approx(exact) and out["pairs"][0]["kind"] == name
        assert main(["predict", str(path)]) == 0
        assert "exact P1 with trees/schedules" in capsys.readouterr().out
        # 256 chains: the shapes of the TREE and HF runs of tests/simulators/test_structures.py,
        # whose compilations the suite's cache holds (tests/conftest.py)
        assert main(["simulate", str(path), "--tokens", "30000", "--chains", "256", "--json",
                     "--cpu-devices", "1"]) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["prediction"]["speedup"] == pytest.approx(exact)
        assert abs(sim["speedup"] - sim["prediction"]["finite_horizon_speedup"]) <= Z * sim["se"]
    bad = dict(TREE, trees=[{"parents": [-1, 0, 2]}])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main(["predict", str(path)]) == 2
    assert "trees[0].parents[2]" in capsys.readouterr().err
