"""``polyspec predict CONFIG --batch ...`` and ``polyspec plan POOL --batch ...``."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from polyspec_theory import Cascade
from polyspec_theory.serving.batch import optimize_batch_thresholds, predict_batch

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_predict_batch_json(capsys):
    cfg = ROOT / "configs" / "serving-70b.json"
    assert main(["predict", str(cfg), "--batch", "1,16,128", "--json",
                 "--max-threshold", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    cas = Cascade.from_config(json.loads(cfg.read_text()))
    assert [r["batch"] for r in out["batches"]] == [1, 16, 128]
    for r in out["batches"]:
        assert {"batch", "speedup", "tokens_per_time", "thresholds_optimal",
                "speedup_optimal"} <= set(r)
        pr = predict_batch(cas, r["batch"])
        assert r["speedup"] == pytest.approx(pr.speedup, rel=1e-12)
        assert r["tokens_per_time"] == pytest.approx(pr.tokens_per_time, rel=1e-12)
        opt = optimize_batch_thresholds(cas, r["batch"], 8)
        assert r["thresholds_optimal"] == list(opt.thresholds)
        assert r["speedup_optimal"] == pytest.approx(opt.speedup, rel=1e-12)
    cb = out["crossover"]["batch"]
    ev = out["crossover"]["evaluated"]
    assert ev[str(cb - 1)] > 1.0 >= ev[str(cb)]
    assert out["large_batch_limit"]["speedup"] < 1.0


def test_predict_batch_text_and_errors(capsys):
    cfg = ROOT / "configs" / "default.json"
    assert main(["predict", str(cfg), "--batch", "1,4"]) == 0
    text = capsys.readouterr().out
    assert "Crossover (B6)" in text and "do not depend on b" in text
    for bad in ("0", "1,x", "2,2", ""):
        assert main(["predict", str(cfg), "--batch", bad]) == 2
        assert "--batch" in capsys.readouterr().err
    assert main(["predict", str(cfg), "--batch", "2", "--max-threshold", "0"]) == 2
    assert "--max-threshold" in capsys.readouterr().err


def test_plan_batch_cli(capsys, tmp_path):
    pool = ROOT / "configs" / "serving-pool.json"
    assert main(["plan", str(pool), "--batch", "1,128", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["batches"]
    assert [r["batch"] for r in rows] == [1, 128]
    assert all(r["certified"] for r in rows)
    assert len(rows[0]["chain"]) >= len(rows[1]["chain"])  # deep cascades lose under load
    assert main(["plan", str(pool), "--batch", "1,4"]) == 0
    assert "certified optimal" in capsys.readouterr().out
    assert main(["plan", str(pool), "--batch", "4", "--write-config",
                 str(tmp_path / "x.json")]) == 2
    assert "--write-config" in capsys.readouterr().err
