"""`polyspec simulate` and `polyspec verify --quick` (the CI-sized verification)."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from tests.doc_blocks import RUNNABLE, run_block_once

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


# `polyspec verify --quick` runs once per test run, as docs/validation.md prints it: the doc
# block's run (tests/doc_blocks.py runs a block once per process; tests/conftest.py puts this
# module and that block on one xdist worker) gives the rows checked here, one test per result.
VERIFY_BLOCK = next(b for b in RUNNABLE if b.commands == ["polyspec verify --quick"])


def _table_rows(text: str) -> tuple[list[tuple[str, str]], str]:
    """(id, result) of every row of `verify`'s table (simulators.verify.format_table), and
    the summary line after it."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["id", "statement"])
    assert set(lines[head + 1]) == {"-"}
    end = lines.index("", head)
    rows = [(line.split()[0], line.split()[-1]) for line in lines[head + 2:end]]
    return rows, lines[end + 1]


@pytest.fixture(scope="module")
def verify_rows(tmp_path_factory):
    return _table_rows(run_block_once(VERIFY_BLOCK, tmp_path_factory.mktemp("verify")))


def test_verify_quick_rows_are_the_whole_registry(verify_rows):
    rows, summary = verify_rows
    assert {i for i, _ in rows} == EXPECTED_IDS
    assert summary.startswith(f"{len(rows)}/{len(rows)} passed.")


@pytest.mark.parametrize("theorem", sorted(EXPECTED_IDS))
def test_verify_quick_passes(verify_rows, theorem):
    results = [r for i, r in verify_rows[0] if i == theorem]
    assert results and set(results) <= {"pass", "FAIL"}
    assert results.count("FAIL") == 0, f"{theorem}: {results.count('FAIL')} rows failed"


def test_verify_only_bad_input(capsys):
    for bad, msg in (("P9", "unknown group 'P9'"), (",", "names no group")):
        assert main(["verify", "--quick", "--only", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"error: --only: {msg}" in err
