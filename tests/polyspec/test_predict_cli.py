"""`polyspec predict`: JSON keys, readable output, one-line errors naming the field."""

import json

import pytest

from polyspec.cli import main
from polyspec_theory import dualistic_speedup

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_keys_and_two_model_reduction(capsys):
    rc, out, _ = _run(capsys, "predict", str(ROOT / "configs/dualistic.json"), "--json")
    assert rc == 0
    d = json.loads(out)
    for key in ("speedup", "time_per_token", "levels", "approximation"):
        assert key in d
    for lv in d["levels"]:
        for key in ("phi", "mean_block", "mean_emitted", "forwards_per_token", "time_share"):
            assert key in lv
    assert d["speedup"] == pytest.approx(dualistic_speedup(0.75, 7, 1.0, 0.02), rel=1e-12)
    assert sum(lv["time_share"] for lv in d["levels"]) == pytest.approx(1.0, rel=1e-12)
    # the paper's approximation is exact for two models
    assert d["approximation"]["speedup"] == pytest.approx(d["speedup"], rel=1e-12)


def test_readable_output_four_levels(capsys):
    rc, out, _ = _run(capsys, "predict", str(ROOT / "configs/default.json"))
    assert rc == 0
    assert "Predicted speedup" in out and "ngram" in out and "Lemma 3.1" in out


def test_yaml_config(tmp_path, capsys):
    y = tmp_path / "c.yaml"
    y.write_text(
        "models:\n  - {name: t, cost: 1.0}\n  - {name: d, cost: 0.0}\n"
        "acceptance:\n  - {alpha: 0.8}\nthresholds: [5]\n"
    )
    rc, out, _ = _run(capsys, "predict", str(y), "--json")
    assert rc == 0
    assert json.loads(out)["speedup"] == pytest.approx(3.69, abs=0.005)  # Leviathan Table 1


@pytest.mark.parametrize(
    "cfg, field",
    [
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": float("nan")}], "thresholds": [3]}, "acceptance[0].alpha"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": 1.2}], "thresholds": [3]}, "acceptance[0].alpha"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": -0.1}],
          "acceptance": [{"alpha": 0.5}], "thresholds": [3]}, "models[1].cost"),
        ({"models": [{"name": "t", "cost": 0}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": 0.5}], "thresholds": [3]}, "models[0].cost"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": 0.5}], "thresholds": [3, 4]}, "thresholds"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": 0.5}], "thresholds": [0]}, "thresholds[0]"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],
          "acceptance": [{"alpha": 0.5}], "treshold": [3]}, "treshold"),
        ({"models": [{"name": "t", "cost": 1}, {"name": "d", "cots": 0.1}],
          "acceptance": [{"alpha": 0.5}], "thresholds": [3]}, "models[1].cots"),
    ],
)
def test_bad_config_one_line_error(tmp_path, capsys, cfg, field):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(cfg).replace("NaN", "NaN"))
    rc, out, err = _run(capsys, "predict", str(p))
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and field in err


def test_missing_and_malformed_files(tmp_path, capsys):
    rc, _, err = _run(capsys, "predict", str(tmp_path / "nope.json"))
    assert rc == 2 and "not found" in err
    p = tmp_path / "broken.json"
    p.write_text('{"models": [')
    rc, _, err = _run(capsys, "predict", str(p))
    assert rc == 2 and "invalid JSON" in err and err.count("\n") == 1


def test_duplicate_json_key_is_an_error(tmp_path, capsys):
    p = tmp_path / "dup.json"
    p.write_text('{"models": [{"name": "t", "cost": 1}, {"name": "d", "cost": 0.1}],'
                 '"acceptance": [{"alpha": 0.5}], "thresholds": [3], "thresholds": [4]}')
    rc, _, err = _run(capsys, "predict", str(p))
    assert rc == 2 and "thresholds" in err and "duplicate" in err


def test_duplicate_yaml_key_is_an_error(tmp_path, capsys):
    p = tmp_path / "dup.yaml"
    p.write_text("models:\n  - {name: t, cost: 1.0}\n  - {name: d, cost: 0.0}\n"
                 "acceptance:\n  - {alpha: 0.8}\nthresholds: [5]\nthresholds: [6]\n")
    rc, _, err = _run(capsys, "predict", str(p))
    assert rc == 2 and "thresholds" in err and "duplicate" in err
