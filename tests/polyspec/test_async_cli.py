"""`"mode": "async"` through predict, simulate --mode async and plan (docs/theory.md
Part VI-AS): the numbers are the theory's, bad input is one line naming the field."""

import json

import pytest

from polyspec.cli import main
from polyspec_theory import Cascade, predict, predict_async

CFG = {"name": "a2", "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.02}},
                                {"name": "draft", "cost": 0.27}],
       "acceptance": [{"alpha": 0.8}], "thresholds": [3], "mode": "async"}


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _write(tmp_path, cfg, name="c.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def test_predict_json_is_as1_with_the_sync_twin(capsys, tmp_path):
    rc, out, _ = _run(capsys, "predict", _write(tmp_path, CFG), "--json")
    assert rc == 0
    d = json.loads(out)
    cas = Cascade.from_config(CFG)
    assert d["speedup"] == pytest.approx(predict_async(cas).speedup, rel=1e-12)
    assert d["exact"] is True and d["mode"] == "async"
    sync = predict(Cascade.from_config({k: v for k, v in CFG.items() if k != "mode"}))
    assert d["sync"]["speedup"] == pytest.approx(sync.speedup, rel=1e-12)
    lo, hi = d["async_over_sync_bounds"]
    assert lo <= d["speedup"] / d["sync"]["speedup"] <= hi
    assert d["faster_mode"] == ("async" if d["speedup"] > sync.speedup else "sync")


def test_predict_text(capsys, tmp_path):
    rc, out, _ = _run(capsys, "predict", _write(tmp_path, CFG))
    assert rc == 0 and "asynchronous pipeline" in out and "AS4" in out


def test_simulate_mode_async_json(capsys, tmp_path):
    cfg = {k: v for k, v in CFG.items() if k != "mode"}  # --mode async overrides the config
    rc, out, _ = _run(capsys, "simulate", _write(tmp_path, cfg), "--mode", "async",
                      "--events", 3000, "--chains", 16, "--json")
    assert rc == 0
    d = json.loads(out)
    exact = d["prediction"]["speedup"]
    assert d["mode"] == "async" and d["prediction"]["exact"]
    assert abs(d["speedup"] - exact) <= 4.42 * d["speedup_se"]  # false failure <= 1e-5


@pytest.mark.parametrize("patch,field", [
    ({"trees": [{"parents": [-1, 0, 0]}]}, "trees"),
    ({"queue": [2]}, "queue[0]"),
    ({"thresholds": [0], "mode": "sync"}, "thresholds[0]"),
])
def test_bad_async_configs_one_line(capsys, tmp_path, patch, field):
    rc, out, err = _run(capsys, "predict", _write(tmp_path, {**CFG, **patch}))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and field in err


def test_batch_is_refused_in_async_mode(capsys, tmp_path):
    rc, _, err = _run(capsys, "predict", _write(tmp_path, CFG), "--batch", "1,2")
    assert rc == 2 and "--batch" in err
