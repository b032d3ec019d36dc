"""The ``pearl`` scheme through the registry: a ``"mode": "pearl"`` config is decided once,
refused where its rules are broken (errors name the field), and served by ``polyspec
predict`` and ``polyspec simulate`` (the exact value inside the Monte-Carlo interval) with no
command naming it."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from polyspec_theory import Cascade, PolyspecInputError
from polyspec_theory.schemes import modes, registry
from polyspec_theory.schemes.pearl import predict_pearl_cascade

PEARL = {"name": "pearl-pair", "mode": "pearl",
         "models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}, "overhead": 0.01},
                    {"name": "d", "cost": 0.25}],
         "acceptance": [{"alpha": 0.8}], "thresholds": [4]}
ROOF = {**PEARL, "models": [
    {"name": "t", "cost": {"roofline": {"weight_time": 1.0, "compute_time": 0.001,
                                        "kv_time": 0.03}}},
    {"name": "d", "cost": {"roofline": {"weight_time": 0.3, "compute_time": 0.0001}}}]}


def _write(tmp_path, cfg):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_decided_once_and_registered():
    assert "pearl" in registry() and "pearl" in modes()
    c = Cascade.from_config(PEARL)
    assert c.scheme == "pearl" and c.batch is None
    assert Cascade.from_config({**ROOF, "batch": 8}).batch == 8
    assert Cascade.from_config({**PEARL, "mode": "sync"}).scheme == "chain"


@pytest.mark.parametrize("change,field", [
    ({"models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.3},
                 {"name": "c", "cost": 0.1}],
      "acceptance": [{"alpha": 0.8}, {"alpha": 0.8}], "thresholds": [2, 2]}, "models"),
    ({"acceptance": [{"beta": [2.0, 1.0]}]}, r"acceptance\[0\]"),
    ({"thresholds": [0]}, r"thresholds\[0\]"),
    ({"queue": [4]}, "queue"),
    ({"round": "pipespec"}, "round"),
    ({"batch": 4}, r"models\[0\]\.cost"),  # a plain target cost says nothing about b
    ({"trees": [{"parents": [-1, 0]}]}, "trees"),
])
def test_refusals_name_the_field(change, field):
    with pytest.raises(PolyspecInputError, match=rf"^{field}"):
        Cascade.from_config({**PEARL, **change})


def test_batch_table_too_small_is_refused():
    cfg = {**PEARL, "batch": 8, "models": [
        {"name": "t", "cost": {"batch_table": {"1": [1.0], "16": [1.5]}}},
        {"name": "d", "cost": 0.25}]}
    with pytest.raises(PolyspecInputError, match=r"models\[0\]\.cost\.batch_table: batch 32"):
        Cascade.from_config(cfg)


def test_predict_cli(capsys, tmp_path):
    path = _write(tmp_path, PEARL)
    assert main(["predict", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = predict_pearl_cascade(Cascade.from_config(PEARL))
    assert out["scheme"] == "pearl" and out["speedup"] == pytest.approx(want.speedup, 1e-12)
    assert out["benchmark"]["steps"] == 100 and out["start_up_gamma"] == 4
    assert out["sync_speedup"] < out["speedup"]
    assert main(["predict", path]) == 0
    text = capsys.readouterr().out
    assert "parallel draft-verify (PEARL), gamma 4" in text and f"{want.speedup:.3f}x" in text
    roof = _write(tmp_path, ROOF)
    assert main(["predict", roof, "--batch", "1,8,32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["batch"] for p in out["batches"]] == [1, 8, 32]
    for p in out["batches"]:
        c = Cascade.from_config({**ROOF, "batch": p["batch"]})
        assert p["speedup"] == pytest.approx(predict_pearl_cascade(c, p["batch"]).speedup,
                                             rel=1e-12)


def test_every_law_family_it_serves_is_predicted_and_explained(capsys, tmp_path):
    laws = [{"alpha": 0.7}, {"positional": [0.6, 0.9]},
            {"run_hazard": [0.4, 0.2, 0.1], "tail": 0.05}]
    for law in laws:
        path = _write(tmp_path, {**ROOF, "acceptance": [law], "batch": 4})
        assert main(["predict", path]) == 0
        out = capsys.readouterr().out
        want = predict_pearl_cascade(Cascade.from_config({**ROOF, "acceptance": [law]}), 4)
        assert f"{want.speedup:.3f}x" in out
    assert "run law: hazard 0.4, 0.2, 0.1, tail 0.05" in out


def test_simulate_cli_agrees_with_predict(capsys, tmp_path):
    path = _write(tmp_path, {**ROOF, "batch": 4})
    assert main(["simulate", path, "--tokens", "200000", "--chains", "128", "--seed", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["ci95"]
    assert lo <= out["prediction"]["speedup"] <= hi  # 95 % CI, fixed seed
    assert out["scheme"] == "pearl" and out["batch"] == 4
    # the first run's shapes (chains 128, at least a chunk of 256 steps): no compilation
    assert main(["simulate", path, "--tokens", "140000", "--chains", "128"]) == 0
    assert "PL exact" in capsys.readouterr().out
    assert main(["simulate", path, "--tokens", "10000000000", "--chains", "16"]) == 2
    assert "--max-events" in capsys.readouterr().err
