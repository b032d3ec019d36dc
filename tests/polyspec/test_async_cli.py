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


DEEP = {"name": "a3", "models": [{"name": "big", "cost": 1.0}, {"name": "mid", "cost": 0.3},
                                 {"name": "small", "cost": 0.05}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [2, 3], "mode": "async"}


def test_predict_three_levels_is_exact(capsys, tmp_path):
    """Issue 41's case: AS7's exact value, labelled exact, no Monte Carlo interval; costs
    whose lattice is too fine fall back to the simulator, labelled Monte Carlo."""
    from polyspec_theory.pipelines.async_exact import exact_async

    rc, out, _ = _run(capsys, "predict", _write(tmp_path, DEEP), "--json")
    d = json.loads(out)
    assert rc == 0 and d["exact"] is True and "speedup_ci95" not in d
    assert d["speedup"] == pytest.approx(exact_async(Cascade.from_config(DEEP)).speedup,
                                         rel=1e-12)
    assert d["speedup"] == pytest.approx(2.184650, abs=5e-7)
    assert d["method"] == "exact (AS7, 3-level Markov chain)"
    assert [lv["name"] for lv in d["levels"]] == ["big", "mid", "small"]
    rc, out, _ = _run(capsys, "predict", _write(tmp_path, DEEP))
    assert rc == 0 and "exact (AS7" in out and "Monte Carlo" not in out
    fine = json.loads(json.dumps(DEEP))
    fine["models"][2]["cost"] = 0.05000000000000001
    rc, out, _ = _run(capsys, "predict", _write(tmp_path, fine, "f.json"), "--json")
    d = json.loads(out)
    assert rc == 0 and d["exact"] is False and "Monte Carlo" in d["method"]
    lo, hi = d["speedup_ci95"]
    assert lo < d["speedup"] < hi


def test_plan_modes_three_models_exact(capsys, tmp_path):
    """plan: the async row of a three-model chain is AS7's best thresholds in 0..3, exact."""
    from polyspec_theory.planning.async_plan import plan_async

    pool = {"name": "p3", "models": [{"name": "target", "cost": 1.0},
                                     {"name": "mid", "cost": 0.3},
                                     {"name": "small", "cost": 0.1}],
            "acceptance": {"target|mid": {"alpha": 0.8}, "mid|small": {"alpha": 0.7},
                           "target|small": {"alpha": 0.6}},
            "max_threshold": 4}
    rc, out, _ = _run(capsys, "plan", _write(tmp_path, pool, "pool.json"), "--json")
    assert rc == 0
    rows = {tuple(r["chain"]): r for r in json.loads(out)["modes"]["chains"]}
    row = rows[("target", "mid", "small")]
    want = plan_async(pool, ("target", "mid", "small"))
    assert row["async"]["exact"] is True and row["async"]["search"] == "all"
    assert row["async"]["speedup"] == pytest.approx(want.speedup, rel=1e-12)
    assert row["async"]["thresholds"] == list(want.thresholds)
    assert row["faster_mode"] == ("async" if want.speedup > row["sync"]["speedup"] else "sync")
