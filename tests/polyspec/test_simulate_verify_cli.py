"""`polyspec simulate` and `polyspec verify --quick` (the CI-sized verification)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyspec.cli import main

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_IDS = {"D1", "D2", "P1", "P2", "P3", "P4", "P5", "P6", "P7",
                "Y1", "Y2", "Y3", "Y4", "Y5", "F1", "F2", "B1", "B2",
                "T1", "T2", "T3", "T4", "T5", "A1", "A2", "A4", "R1", "AS1", "AS2", "AS7",
                "PL1", "PL2", "PL3"}


def test_simulate_json(capsys, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.05}],
        "acceptance": [{"alpha": 0.7}], "thresholds": [4]}))
    assert main(["simulate", str(cfg), "--tokens", "20000", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["ci95"]
    assert lo <= out["speedup"] <= hi
    assert lo <= out["prediction"]["speedup"] <= hi  # 95 % CI, fixed seed
    assert [lv["name"] for lv in out["levels"]] == ["t", "d"]
    assert out["levels"][1]["phi"]["value"] == 4.0
    assert main(["simulate", str(cfg), "--tokens", "5000"]) == 0
    assert "speedup  MC" in capsys.readouterr().out


def test_simulate_bad_input(capsys, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.05}],
        "acceptance": [{"alpha": 0.7}], "thresholds": [4]}))
    assert main(["simulate", str(cfg), "--tokens", "0"]) == 2
    assert "tokens" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "missing.json")]) == 2
    capsys.readouterr()
    assert main(["simulate", str(cfg), "--cpu-devices", "0"]) == 2
    assert "cpu_devices" in capsys.readouterr().err


# `verify --quick` in groups of the registry (``--only``), one test each; the groups partition
# the registry (checked below), so together they are the whole run and every row is the full
# run's (each check seeds from the group's key, not from the order).
# P1-P4 stay together: they share the default cascade's simulation (VerifyContext cache).
VERIFY_GROUPS = {
    "D": {"D1", "D2"}, "P1,P2,P3,P4": {"P1", "P2", "P3", "P4"}, "P1o": {"P1"},
    "P5": {"P5"}, "P6": {"P6"}, "P7": {"P7"}, "Y": {"Y1", "Y2", "Y3", "Y4", "Y5"},
    "F": {"F1", "F2"}, "B": {"B1", "B2"}, "T": {"T1", "T2", "T3", "T4", "T5"},
    "A": {"A1", "A2", "A4"}, "R": {"R1"}, "AS": {"AS1", "AS2", "AS7"},
    "PL": {"PL1", "PL2", "PL3"},
}

# Every group's `verify --quick --json --only GROUP` in one fresh process (the order of the
# registry; one exit status and JSON list per group). A fresh process like the doc block of
# docs/validation.md that runs the whole of `polyspec verify --quick` (same devices, same
# kernels): tests/conftest.py puts this module and that block on one xdist worker, so that
# the second of the two (in the suite's order the block) loads the simulators the first
# compiled from the run's compilation cache instead of compiling them again.
_GROUP_RUNS = """
import contextlib, io, json, sys
from polyspec.cli import main
out = {}
for group in sys.argv[1:]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["verify", "--quick", "--json", "--only", group])
    out[group] = [rc, buf.getvalue()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def group_runs(tmp_path_factory):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, "-c", _GROUP_RUNS, *VERIFY_GROUPS],
                          cwd=tmp_path_factory.mktemp("verify"), env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_verify_groups_are_the_whole_registry():
    from simulators.verify import REGISTRY

    keys = [k for g in VERIFY_GROUPS for k in g.split(",")]
    assert sorted(keys) == sorted(k for k, _ in REGISTRY)  # each group once, none left out
    assert set().union(*VERIFY_GROUPS.values()) == EXPECTED_IDS


@pytest.mark.parametrize("group", list(VERIFY_GROUPS))
def test_verify_quick_passes(group_runs, group):
    rc, out = group_runs[group]
    rows = json.loads(out)
    assert {r["id"] for r in rows} == VERIFY_GROUPS[group]
    assert all(isinstance(r["passed"], bool) for r in rows)
    failed = [r for r in rows if not r["passed"]]
    assert not failed, failed
    assert rc == 0


def test_verify_only_bad_input(capsys):
    for bad, msg in (("P9", "unknown group 'P9'"), (",", "names no group")):
        assert main(["verify", "--quick", "--only", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"error: --only: {msg}" in err
