"""``polyspec profile --gpu``, ``forecast --rows``, ``plan --gpu`` (polyspec/commands/gpu.py):
the output the issue specifies, rows refused by id with the reason while the rest are still
forecast, a row's own measurements never used, every bad input refused on one line. Needs the
optional extra (``polyspec[gpu]``)."""

from __future__ import annotations

import json
import math

import pytest

from tests._optional import optional_import
from tests.cli_checks import run_checked

optional_import("aiconfigurator_core")

from validation.hardware.database import model_costs  # noqa: E402
from validation.hardware.rows import MEASURED  # noqa: E402

from .tables import NANOPEARL, ROOT, SSD  # noqa: E402

KEYS = {"id", "speedup", "interval95", "ar_tok_s", "sd_tok_s", "sources"}


def _rows(path, pick):
    return [r for r in json.loads(path.read_text())["rows"] if pick(r)]


def _strip(r):
    return {k: v for k, v in r.items() if k not in MEASURED}


@pytest.fixture(scope="module")
def some_rows():
    return _rows(NANOPEARL, lambda r: r["dataset"] == "HumanEval" and r["batch"] in (1, 16))


def test_forecast_rows_output(tmp_path, capsys, some_rows):
    p = tmp_path / "rows.json"
    bad = dict(_strip(some_rows[0]), id="no-such-gpu", gpu="TPUv5")
    p.write_text(json.dumps({"rows": [_strip(r) for r in some_rows] + [bad]}))
    rc, out, err, data = run_checked(capsys, ["forecast", "--rows", p, "--acceptance-from",
                                              NANOPEARL, "--json"])
    assert rc == 0
    assert [r["id"] for r in data["rows"]] == [r["id"] for r in some_rows]
    for f in data["rows"]:
        assert set(f) == KEYS
        lo, hi = f["interval95"]
        assert lo < f["speedup"] < hi
        assert f["speedup"] == pytest.approx(f["sd_tok_s"] / f["ar_tok_s"], rel=1e-9)
        assert any("aiconfigurator-core" in s for s in f["sources"])
    assert data["refused"] == [{"id": "no-such-gpu", "reason": data["refused"][0]["reason"]}]
    assert "TPUv5" in data["refused"][0]["reason"]
    assert "refused row no-such-gpu" in err


def test_measured_fields_are_never_read(tmp_path, capsys, some_rows):
    a, b = tmp_path / "bare.json", tmp_path / "full.json"
    a.write_text(json.dumps([_strip(r) for r in some_rows]))
    b.write_text(json.dumps([dict(r, speedup=99.0, sd_tok_s=1.0, tokens_per_step=1.5)
                             for r in some_rows]))
    out = []
    for p in (a, b):
        rc, _o, _e, data = run_checked(capsys, ["forecast", "--rows", p, "--acceptance-from",
                                                NANOPEARL, "--json"])
        out.append(data["rows"])
    assert out[0] == out[1]


def test_a_row_is_never_its_own_acceptance(tmp_path, capsys, some_rows):
    row = some_rows[0]
    own = tmp_path / "own.json"
    own.write_text(json.dumps({"rows": [row]}))  # the only log row of the pair is the row
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_strip(row)]))
    rc, _o, err, data = run_checked(capsys, ["forecast", "--rows", rows, "--acceptance-from",
                                             own, "--json"])
    assert rc == 0 and data["rows"] == []
    assert data["refused"][0]["id"] == row["id"]
    assert "no row of the pair" in data["refused"][0]["reason"]
    rc, _o, err, data = run_checked(capsys, ["forecast", "--rows", rows, "--json"])
    assert "--acceptance-from" in data["refused"][0]["reason"]


def test_other_methods_and_gpus(tmp_path, capsys):
    ssd = [_strip(r) for r in _rows(SSD, lambda r: r["batch"] in (1, 8))]
    eagle = {"id": "eagle-b8", "gpu": "H200", "engine": "SGLang", "method": "eagle",
             "target": "Qwen3-32B", "target_hf": "Qwen/Qwen3-32B",
             "drafter": "AngelSlim/Qwen3-32B_eagle3", "tp_target": None, "tp_drafter": None,
             "batch": 8, "dataset": "GSM8K", "prompt_len": 606, "speculative_num_steps": 5,
             "speculative_eagle_topk": 8, "speculative_num_draft_tokens": 32,
             "draft_shape": "tree", "accept_length": 4.0, "temperature": 0}
    h100 = dict(_strip(_rows(NANOPEARL, lambda r: r["batch"] == 8)[0]), id="pearl-h100",
                gpu="H100")
    p = tmp_path / "rows.json"
    p.write_text(json.dumps(ssd + [eagle, h100]))
    rc, _o, _e, data = run_checked(capsys, ["forecast", "--rows", p, "--acceptance-from",
                                            NANOPEARL, "--json"])
    assert not data["refused"]
    got = {r["id"]: r for r in data["rows"]}
    assert got["ssd-h100-llama70b-ar-b1"]["speedup"] == pytest.approx(1.0)
    assert any("TP not given" in s for s in got["eagle-b8"]["sources"])
    assert any("h100_sxm" in s for s in got["pearl-h100"]["sources"])
    for r in data["rows"]:
        assert r["speedup"] > 0 and math.isfinite(r["sd_tok_s"])


@pytest.mark.parametrize("argv,field", [
    (["forecast", "--acceptance-from", NANOPEARL], "--acceptance-from"),
    (["forecast", "--rows", NANOPEARL, "--lookahead", "3"], "--lookahead"),
    (["forecast", "--rows", NANOPEARL, "--temperature", "0.5"], "--temperature"),
    (["forecast", "--rows", "/no/such/rows.json"], "--rows"),
])
def test_forecast_refusals(capsys, argv, field):
    rc, _o, err, _d = run_checked(capsys, argv)
    assert rc == 2 and f"error: {field}" in err


def test_profile_gpu_writes_costs_a_config_can_use(tmp_path, capsys):
    out = tmp_path / "costs.json"
    rc, _o, _e, _d = run_checked(capsys, ["profile", "--gpu", "h200_sxm", "--engine", "vllm",
                                          "--model", "Qwen/Qwen3-32B", "--tp", "2", "--batch",
                                          "1,8,16,32", "--max-m", "4", "--context", "700",
                                          "--out", out, "--json"])
    assert rc == 0
    rep = json.loads(out.read_text())
    m = rep["models"][0]
    assert set(m["cost"]["batch_table"]) == {"1", "8", "16", "32"}
    c = model_costs("Qwen/Qwen3-32B", "H200", "vllm", 2)
    for b, row in m["cost"]["batch_table"].items():
        assert len(row) == 4
        assert row[0] == pytest.approx(c.decode_reference(int(b), 700), rel=1e-9)
        assert m["prefill_ms"][b] == pytest.approx(c.prefill_reference(int(b), 700), rel=1e-9)
    assert m["provenance"]["system"] == "h200_sxm" and m["provenance"]["tp"] == 2
    # a cascade config takes the written costs as they are
    from polyspec_theory.core.costs import batch_cost_from_config

    cost = batch_cost_from_config(m["cost"], "cost")
    assert cost.at_batch(8)(3) == pytest.approx(m["cost"]["batch_table"]["8"][2])


@pytest.mark.parametrize("argv,field", [
    (["profile", "--gpu", "H200", "--engine", "vllm"], "--model"),
    (["profile", "--gpu", "H200", "--model", "Qwen/Qwen3-32B"], "--engine"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "x/unknown"], "--model"),
    (["profile", "--gpu", "H999", "--engine", "vllm", "--model", "Qwen/Qwen3-32B"], "gpu"),
    (["profile", "--gpu", "H200", "--engine", "tgi", "--model", "Qwen/Qwen3-32B"], "--engine"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "Qwen/Qwen3-32B", "--batch",
      "8"], "--batch"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "Qwen/Qwen3-32B", "--tp",
      "2,2"], "--tp"),
    (["profile", "target", "--engine", "vllm"], "--engine"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "Qwen/Qwen3-32B", "--head",
      "eagle3", "--draft-vocab", "0"], "--draft-vocab"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "/no/such/config.json"],
     "--model: /no/such/config.json: no config.json there"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "Qwen/Qwen3-32B",
      "--device", "cuda"], "--device"),
])
def test_profile_refusals(capsys, argv, field):
    rc, _o, err, _d = run_checked(capsys, argv)
    assert rc == 2 and f"error: {field}" in err, err


def test_plan_gpu(tmp_path, capsys):
    pool = json.loads((ROOT / "examples" / "gpu" / "qwen3-32b-pool.json").read_text())
    pool["acceptance_from"] = str(NANOPEARL)
    pool["batch"] = [1, 16, 256]
    p = tmp_path / "pool.json"
    p.write_text(json.dumps(pool))
    fig = tmp_path / "plan.png"
    rc, _o, _e, data = run_checked(capsys, ["plan", "--gpu", "H200", "--engine", "vllm",
                                            "--pool", p, "--figure", fig, "--json"])
    assert rc == 0 and fig.stat().st_size > 10_000
    assert [r["batch"] for r in data["best"]] == [1, 16, 256]
    names = [c["name"] for c in data["candidates"]]
    assert names[0] == "no speculation" and any(n.startswith("PEARL") for n in names)
    for r in data["best"]:
        top = max(c["speedup"][data["batches"].index(r["batch"])]
                  for c in data["candidates"])
        assert r["speedup"] == top
    assert set(data["stops_paying"]) == {"batch", "interval95", "confident_from"}


@pytest.mark.parametrize("argv,field", [
    (["plan", "--pool", "x.json"], "--pool"),
    (["plan", "--gpu", "H200", "--engine", "vllm"], "--pool"),
    (["plan", "--gpu", "H200", "--pool", "x.json"], "--engine"),
])
def test_plan_refusals(capsys, argv, field):
    rc, _o, err, _d = run_checked(capsys, argv)
    assert rc == 2 and f"error: {field}" in err, err
