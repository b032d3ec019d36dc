"""Issue 33: every option a command takes changes what it computes or is refused in that
combination; work without a bound and degenerate costs are one-line errors, not hangs or
internal errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
PIPESPEC = ROOT / "tests" / "fixtures" / "gpu-traces" / "pipespec-humaneval"
TRACES = ROOT / "tests" / "validation" / "fixtures" / "traces"
S, M = "Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct"
CFG = {"name": "a2", "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.02}},
                                {"name": "draft", "cost": 0.27}],
       "acceptance": [{"alpha": 0.8}], "thresholds": [3], "mode": "async"}


def _refused(capsys, argv, option):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and f"error: {option}" in err, err
    return err


def _cfg(tmp_path, cfg=CFG):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("extra", [["--chains", "1048576"],
                                   ["--events", "100000000", "--chains", "2"],
                                   ["--max-events", "1000"]])
def test_simulate_async_work_is_bounded(capsys, tmp_path, extra):
    err = _refused(capsys, ["simulate", _cfg(tmp_path), "--mode", "async", *extra],
                   "--max-events")
    assert "actions to simulate, more than the limit" in err


def test_simulate_async_max_events_lets_a_small_run_through(capsys, tmp_path):
    # 16 chains x 3000 events = 48,000 actions: refused under 40,000, run under 48,000
    _refused(capsys, ["simulate", _cfg(tmp_path), "--mode", "async", "--events", 3000,
                      "--chains", 16, "--max-events", 40000], "--max-events")
    assert main(["simulate", str(_cfg(tmp_path)), "--mode", "async", "--events", "3000",
                 "--chains", "16", "--max-events", "48000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "async"


def test_async_predict_with_a_free_verify_is_refused(capsys, tmp_path):
    cfg = dict(CFG, models=[{"name": "target", "cost": {"table": [1, 0, 0, 0, 0]}},
                            {"name": "draft", "cost": 0.27}])
    err = _refused(capsys, ["predict", _cfg(tmp_path, cfg)], "models[0].cost")
    assert "a verify of 2 tokens costs 0" in err


GPU = ["forecast", "--traces", PIPESPEC, "--models", f"{M},{S}", "--thresholds", "3"]


@pytest.mark.parametrize("option,value", [("--tree", "-1,0,0"), ("--batch", "2"),
                                          ("--schedule", "fixed:3"), ("--temperature", "0.7"),
                                          ("--profile", "p.json"), ("--score", "f.jsonl"),
                                          ("--interval-from", "f.jsonl")])
def test_forecast_lookahead_refuses_what_it_would_ignore(capsys, option, value):
    arg = [f"{option}={value}"] if value.startswith("-") else [option, value]
    _refused(capsys, [*GPU, *arg], option)


def test_forecast_lookahead_dtype_must_name_a_model(capsys):
    err = _refused(capsys, [*GPU, "--dtype", "Nope=float16"], "--dtype")
    assert "Nope" in err


@pytest.mark.parametrize("option,value,named", [
    ("--mode", "sync", "--mode"), ("--dtype", f"{S}=float16", "--dtype"),
    # our own async pipeline is forecast on captures (issue 40): from its contention profile
    ("--mode", "async", "--profile")])
def test_forecast_without_lookahead_refuses_gpu_options(capsys, option, value, named):
    _refused(capsys, ["forecast", "--traces", TRACES, "--models", "target,small",
                      "--thresholds", "3", option, value], named)


def test_calibrate_fit_on_with_a_run_that_is_not_an_object(capsys, tmp_path):
    runs = {"name": "r", "time_unit": "ms",
            "models": [{"name": "t", "overhead": "fit"}, {"name": "d", "cost": "fit"}],
            "runs": [{"name": "K=2", "thresholds": [2], "acceptance": [{"tau": 2.1}],
                      "time_per_token": 4.4}, 5],
            "autoregressive": {"time_per_token": 7.0}, "max_threshold": 8}
    p = tmp_path / "runs.json"
    p.write_text(json.dumps(runs))
    err = _refused(capsys, ["calibrate", p, "--fit-on", "K=2"], "runs[1]")
    assert "must be an object, got int" in err


@pytest.mark.parametrize("field", ["acceptance_histogram", "num_spec_steps"])
def test_a_1e308_count_in_per_request_json_is_one_line(capsys, tmp_path, field):
    src = (ROOT / "tests" / "fixtures" / "engine-samples"
           / "vllm_per_request_metrics_llamaswap1032.json")
    o = json.loads(src.read_text())
    sd = o["metrics"]["speculative_decoding"]
    if field == "acceptance_histogram":
        sd[field][0] = 1e308
    else:
        sd[field] = 1e308
    p = tmp_path / "pr.json"
    p.write_text(json.dumps(o))
    err = _refused(capsys, ["fit", p], "speculative_decoding.")
    assert "1e+308 is not a plausible count" in err and len(err) < 300
