"""``polyspec profile --batch`` (batched cost tables usable as batch_table costs and by
``validate --batch-profile``) and ``polyspec simulate --batch`` (the lockstep Monte Carlo
next to B2)."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from polyspec_theory import Cascade
from polyspec_theory.serving.batch import predict_batch
from validation.analysis.batch_validate import load_profile

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_profile_batch_tables(tmp_path, capsys):
    out = tmp_path / "prof.json"
    rc, text, err = _run(capsys, "profile", "small", "ngram", "--batch", "1,2", "--max-m", "2",
                         "--repeats", "1", "--context", "8", "--warmup", "0", "--threads", "1",
                         "--out", out, "--json")
    assert rc == 0, err
    d = json.loads(text)
    assert d["batches"] == [1, 2] and d["time_unit"] == "ms"
    for m in d["models"]:
        rows = m["cost"]["batch_table"]
        assert sorted(rows) == ["1", "2"] and all(len(r) == 2 and min(r) > 0
                                                  for r in rows.values())
    # config syntax for predict --batch, and what validate --batch-profile reads (in seconds)
    cfg = {"models": [{"name": m["name"], "cost": m["cost"]} for m in d["models"]],
           "acceptance": [{"alpha": 0.6}], "thresholds": [2], "time_unit": "ms"}
    assert predict_batch(Cascade.from_config(cfg), 2).speedup > 0
    prof = load_profile(out)
    row = d["models"][0]["cost"]["batch_table"]["2"]
    assert prof["small"].at_batch(2)(1) == pytest.approx(row[0] * 1e-3)
    rc, _, err = _run(capsys, "profile", "small", "--batch", "2,4")
    assert rc == 2 and "--batch" in err and "1" in err
    rc, _, err = _run(capsys, "profile", "small", "--batch", "1,two")
    assert rc == 2 and "--batch" in err


def test_simulate_batch(capsys):
    cfg = ROOT / "configs" / "default.json"
    rc, text, err = _run(capsys, "simulate", cfg, "--batch", "4", "--tokens", "40000",
                         "--chains", "16", "--seed", "3", "--json")
    assert rc == 0, err
    d = json.loads(text)
    pr = predict_batch(Cascade.from_config(json.loads(cfg.read_text())), 4)
    assert d["batch"] == 4 and d["prediction"]["speedup"] == pytest.approx(pr.speedup)
    sp = d["speedup"]
    # one shape for chains, trees and batches: speedup a number, se and ci95 beside it
    assert isinstance(sp, float) and d["ci95"][0] < sp < d["ci95"][1]
    assert d["estimates"]["speedup"] == {"value": sp, "se": d["se"], "ci95": d["ci95"]}
    assert abs(sp - pr.speedup) < 4.5 * d["se"]
    assert [lv["b2"]["phi_batch"] for lv in d["levels"]] == [lv.phi_batch for lv in pr.levels]
    rc, text2, _ = _run(capsys, "simulate", cfg, "--batch", "4", "--tokens", "40000",
                        "--chains", "16", "--seed", "3", "--json")
    assert json.loads(text2)["speedup"] == sp  # same seed, same numbers
    rc, text, _ = _run(capsys, "simulate", cfg, "--batch", "2", "--tokens", "20000",
                       "--chains", "8")
    assert rc == 0 and "B2 exact" in text and "E[max N]" in text
    rc, _, err = _run(capsys, "simulate", cfg, "--batch", "0", "--tokens", "100")
    assert rc == 2 and "--batch" in err
