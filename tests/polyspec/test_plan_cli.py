"""``polyspec plan``: JSON keys and values, text output, config/pool files written, pools
built from traces (``--traces``), one-line errors with exit status 2."""

import json
from pathlib import Path

import pytest

from polyspec.cli import main
from polyspec_theory.core.config import Cascade
from polyspec_theory.planning.planner import plan
from polyspec_theory.planning.pool import Pool
from polyspec_theory.schemes import predict

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "configs" / "pool.json"
TRACES = ROOT / "tests" / "validation" / "fixtures" / "traces"


def _run(capsys, *argv):
    rc = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _small_pool_file(tmp_path, **changes) -> Path:
    cfg = json.loads(POOL.read_text())
    cfg["max_threshold"] = 8
    cfg.update(changes)
    p = tmp_path / "pool.json"
    p.write_text(json.dumps(cfg))
    return p


def test_json_keys_and_values(capsys, tmp_path):
    path = _small_pool_file(tmp_path)
    rc, out, err = _run(capsys, path, "--json", "--top", 3)
    assert rc == 0 and err == ""
    obj = json.loads(out)
    assert {"chain", "thresholds", "speedup", "alternatives", "best_two_model",
            "greedy_paper_rule", "baseline", "search", "pool"} <= set(obj)
    pool = Pool.from_config(json.loads(path.read_text()))
    ref = plan(pool, top=3)
    assert obj["chain"] == list(ref.chain) and obj["thresholds"] == list(ref.thresholds)
    assert obj["speedup"] == pytest.approx(ref.speedup, rel=1e-12)
    assert obj["chain"][0] == "target"
    assert len(obj["thresholds"]) == len(obj["chain"]) - 1
    assert all(1 <= t <= 8 for t in obj["thresholds"])
    assert len(obj["alternatives"]) == 3
    for a in obj["alternatives"]:
        assert set(a) == {"chain", "thresholds", "speedup"}
        assert a["speedup"] <= obj["speedup"]
        assert a["speedup"] == pytest.approx(
            predict(pool.cascade(a["chain"], a["thresholds"])).speedup, rel=1e-12)
    assert len(obj["best_two_model"]["chain"]) == 2
    g = obj["greedy_paper_rule"]
    assert {"chain", "thresholds", "speedup", "start", "steps"} <= set(g)
    assert g["start"] == obj["best_two_model"]
    assert obj["baseline"]["speedup"] == 1.0
    assert obj["pool"]["source"] == "file" and obj["pool"]["models"][0] == "target"
    s = obj["search"]
    assert s["configs_scored"] + s["configs_pruned"] == s["configs_total"]


def test_text_output(capsys):
    rc, out, err = _run(capsys, POOL, "--top", 2)
    assert rc == 0 and err == ""
    assert "Best cascade: target <-" in out
    assert "best two-model" in out and "Paper's greedy insertion rule" in out
    assert out.count("x (") >= 2  # alternatives with their gap
    assert "Search:" in out


def test_write_config_and_pool(capsys, tmp_path):
    path = _small_pool_file(tmp_path, max_threshold=16)
    cfg_out, pool_out = tmp_path / "best.json", tmp_path / "pool_out.json"
    rc, out, _ = _run(capsys, path, "--max-threshold", 6, "--json", "--top", 0,
                      "--write-config", cfg_out, "--write-pool", pool_out)
    assert rc == 0
    obj = json.loads(out)
    assert obj["max_threshold"] == 6 and obj["alternatives"] == []
    cascade = Cascade.from_config(json.loads(cfg_out.read_text()))
    assert [m.name for m in cascade.models] == obj["chain"]
    assert list(cascade.thresholds) == obj["thresholds"]
    assert predict(cascade).speedup == pytest.approx(obj["speedup"], rel=1e-12)
    again = Pool.from_config(json.loads(pool_out.read_text()))
    assert again.max_threshold == 6 and len(again.pairs) == 23


def test_plan_from_traces(capsys, tmp_path):
    """The committed synthetic traces (known laws and costs: target, mid, small, ngram)."""
    pool_out = tmp_path / "pool.json"
    rc, out, err = _run(capsys, "--traces", TRACES, "--json", "--top", 2, "--max-threshold", 8,
                        "--write-pool", pool_out)
    assert rc == 0, err
    obj = json.loads(out)
    info = obj["pool"]
    assert info["source"] == "traces" and len(info["captures"]) == 5
    assert info["models"] == ["target", "mid", "small", "ngram"]  # by decreasing fitted T(1)
    assert set(info["pairs"]) == {"target|mid", "target|small", "target|ngram", "mid|small",
                                  "mid|ngram", "small|ngram"}
    assert all(p["rounds"] > 0 for p in info["pairs"].values())
    pool = Pool.from_config(json.loads(pool_out.read_text()))
    assert pool.max_threshold == 8
    assert pool.models[0].cost.t1 == pytest.approx(1.0, rel=1e-9)  # target-forward units
    # fitted cost ratios near the generating ones (6e-3 / 1.6e-3 / 4.5e-4 / 3e-5 s)
    ratio = {m.name: m.cost.t1 for m in pool.models}
    assert ratio["mid"] == pytest.approx(1.6e-3 / 6e-3, rel=0.15)
    assert ratio["small"] == pytest.approx(4.5e-4 / 6e-3, rel=0.15)
    assert obj["speedup"] == pytest.approx(
        predict(pool.cascade(obj["chain"], obj["thresholds"])).speedup, rel=1e-12)
    assert obj["speedup"] >= obj["best_two_model"]["speedup"]
    # issue 26: every top candidate carries an interval, probability_best and a decision
    unc = obj["uncertainty"]
    cands = unc["candidates"]
    assert [c["chain"] for c in cands] == [obj["chain"]] + [a["chain"]
                                                            for a in obj["alternatives"]]
    assert sum(c["probability_best"] for c in cands) == pytest.approx(1.0)
    for c in cands:
        lo, hi = c["interval95"]
        assert lo <= c["speedup"] <= hi
        assert c["decision"] == ("confident" if c["probability_best"] >= 0.9
                                 else "too close to call")
    assert unc["noise_floor"] is None and "A/A" in unc["notes"][0]
    rc, out, err = _run(capsys, "--traces", TRACES, "--top", 1, "--max-threshold", 6,
                        "--draws", 50)
    assert rc == 0, err
    assert "Decision: " in out and "best with probability" in out


def test_pool_file_says_it_carries_no_uncertainty(capsys, tmp_path):
    rc, out, _ = _run(capsys, _small_pool_file(tmp_path), "--json", "--top", 1)
    unc = json.loads(out)["uncertainty"]
    assert rc == 0 and unc["candidates"] is None and "fixed numbers" in unc["note"]
    rc, out, _ = _run(capsys, _small_pool_file(tmp_path), "--top", 1)
    assert rc == 0 and "Uncertainty: none stated" in out


def test_traces_options(capsys):
    rc, _, err = _run(capsys, "--traces", TRACES, "--temperature", 0.7)
    assert rc == 2 and "--temperature" in err and "T=0" in err
    rc, _, err = _run(capsys, "--traces", TRACES, "--law", "nope")
    assert rc == 2 and "--law" in err
    rc, out, _ = _run(capsys, "--traces", TRACES, "--law", "iid", "--max-threshold", 4, "--json")
    assert rc == 0
    assert all("alpha" in p["law"] for p in json.loads(out)["pool"]["pairs"].values())


def test_traces_regime_laws_and_horizon(capsys, tmp_path):
    """``--law regime``: every pair gets a hidden-regime law for decodes of ``--horizon``
    tokens; the written pool reads back and P1 on it gives the printed speedup."""
    pool_out = tmp_path / "pool.json"
    rc, out, err = _run(capsys, "--traces", TRACES, "--law", "regime", "--horizon", 64,
                        "--max-threshold", 4, "--top", 0, "--json", "--write-pool", pool_out)
    assert rc == 0, err
    obj = json.loads(out)
    assert obj["pool"]["horizon"] == 64
    for p in obj["pool"]["pairs"].values():
        assert list(p["law"]) == ["regime"] and p["law"]["regime"]["horizon"] == 64
        assert {"regime2", "regime3", "iid"} <= set(p["aic"])
    pool = Pool.from_config(json.loads(pool_out.read_text()))
    assert obj["speedup"] == pytest.approx(
        predict(pool.cascade(obj["chain"], obj["thresholds"])).speedup, rel=1e-12)
    rc, _, err = _run(capsys, "--traces", TRACES, "--horizon", 0)
    assert rc == 2 and err.startswith("polyspec plan: error: --horizon:")


@pytest.mark.parametrize("argv, needle", [
    ((), "pool: give a pool file or --traces"),
    ((POOL, "--traces", TRACES), "pool: give a pool file or --traces"),
    ((POOL, "--top", -1), "--top"),
    ((POOL, "--max-threshold", 0), "max_threshold"),
    ((POOL, "--law", "iid"), "--law: only applies with --traces"),
    ((POOL, "--horizon", 64), "--horizon: only applies with --traces"),
    (("missing.json",), "config: file not found"),
    (("--traces", "no/such/dir"), "no/such/dir: no such directory"),
])
def test_bad_arguments_give_one_line_errors(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("change, field", [
    ({"acceptance": {"target|nobody": {"alpha": 0.5}}}, "acceptance.target|nobody"),
    ({"acceptance": {"target m3b": {"alpha": 0.5}}}, "acceptance.target m3b"),
    ({"max_threshold": 0}, "max_threshold"),
    ({"policy": "fast"}, "policy"),
])
def test_bad_pool_file(capsys, tmp_path, change, field):
    rc, out, err = _run(capsys, _small_pool_file(tmp_path, **change))
    assert rc == 2 and out == ""
    assert err.startswith(f"polyspec plan: error: {field}:"), err
