"""``forecast --costs-from``: a tree / schedule forecast takes its verify-path cost tables from
captures of the machine it is for (validation.analysis.forecast_kinds.machine_costs), and
falls back, with a note, where that folder has no capture of the models at the temperature.
Data: the committed round-2 idle captures (AMD EPYC) and data/traces/cpu (Intel Xeon)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyspec.cli import main
from validation.analysis.forecast_kinds import machine_costs, spec_config
from validation.capture.setup import CaptureSpec
from validation.traces.records import read_traces

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "data" / "traces" / "cpu" / "preregistered-2-idle" / "captures"


@pytest.fixture(scope="module")
def idle():
    return read_traces(HERE)


def test_machine_captures_used_when_they_hold_the_models(idle):
    spec = spec_config(CaptureSpec(["target", "ngram"], [3], 0.0), "x")
    pool, note = machine_costs(spec, idle)
    assert note is None and pool is not None and len(pool) == len(idle)


@pytest.mark.parametrize("models,temp", [(["target", "small"], 1.0), (["target", "mid"], 0.0)])
def test_fallback_with_a_note_when_they_do_not(idle, models, temp):
    spec = spec_config(CaptureSpec(models, [3], temp), "x")
    pool, note = machine_costs(spec, idle)
    assert pool is None and "--costs-from holds no capture" in note


def test_a_tree_needs_tree_captures_of_its_models(idle):
    no_trees = [c for c in idle if c.trees is None]
    spec = spec_config(CaptureSpec(["target", "ngram"], [1], 0.0, tree=[-1, 0, 1, 1]), "x")
    assert machine_costs(spec, idle)[1] is None
    pool, note = machine_costs(spec, no_trees)
    assert pool is None and "with this structure" in note


def test_forecast_takes_the_cost_tables_from_that_folder_only(capsys, idle):
    assert main(["forecast", "--traces", str(ROOT / "data/traces/cpu"), "--models",
                 "target,ngram", "--thresholds", "3", "--temperature", "1", "--schedule",
                 "hf:3:1:8", "--costs-from", str(HERE), "--name", "x", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    used = out["cost_source"].split(" of ", 1)[1].split(", ")
    names = {c.name for c in idle}
    assert used and set(used) <= names
    assert all(c.temperature == 1.0 for c in idle if c.name in used)


@pytest.mark.parametrize("extra", [[], ["--batch", "4"]])
def test_refused_where_costs_come_from_a_profile(capsys, extra):
    rc = main(["forecast", "--traces", str(ROOT / "data/traces/cpu"), "--models",
               "target,ngram", "--thresholds", "3", "--profile", "p.json", "--costs-from",
               str(HERE), *extra])
    err = capsys.readouterr().err
    assert rc != 0 and "--costs-from" in err and "Traceback" not in err


def test_interval_from_replaces_the_leave_one_out_errors(capsys):
    """With --interval-from the interval is round 2's (its 12 errors, its A/A floor) and no
    note says it came from leave-one-out errors (they are not computed)."""
    r2 = ROOT / "data/traces/cpu/preregistered-2-idle/reforecast.jsonl"
    assert main(["forecast", "--traces", str(ROOT / "data/traces/cpu"), "--models",
                 "target,ngram", "--thresholds", "3", "--temperature", "1", "--schedule",
                 "hf:3:1:8", "--costs-from", str(HERE), "--interval-from", str(r2),
                 "--name", "x", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not any("leave-one-out" in n for n in out.get("notes", []))
    errs = [json.loads(line) for line in r2.read_text().splitlines() if line.strip()]
    assert len(errs) == 12
    lo, hi = out["interval95"]
    q = (hi - lo) / (2 * out["speedup"])
    assert 0.05 < q < 0.2  # round 2's largest error (13.2 %), not a leave-one-out quantile


@pytest.mark.parametrize("option", ["--costs-from", "--laws-from", "--traces"])
def test_an_unreadable_folder_is_refused_naming_its_option(capsys, tmp_path, option):
    args = {"--traces": str(ROOT / "data/traces/cpu"), "--laws-from": str(ROOT / "data/traces/cpu"),
            "--costs-from": str(HERE)}
    args[option] = str(tmp_path / "missing")
    rc = main(["forecast", "--models", "target,ngram", "--thresholds", "3", "--temperature", "1",
               "--schedule", "hf:3:1:8", "--name", "x",
               *[x for k, v in args.items() for x in (k, v)]])
    err = capsys.readouterr().err
    assert rc != 0 and f"error: {option}: " in err and "no such directory" in err
