"""`polyspec fit / validate / forecast --thresholds / plan --traces` on the GPU trace fixtures:
auto-detection, exit codes, one-line errors, strict JSON."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from polyspec.cli import main

# one xdist worker runs this module, so the module-scoped plan (plan_json) is computed once
pytestmark = pytest.mark.xdist_group("gpu_traces_cli")

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gpu-traces")
PS = os.path.join(FIX, "pipespec-humaneval")
SB = os.path.join(FIX, "specbench-vicuna7b")
S, M, B = "Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct", "Meta-Llama-3.1-70B-Instruct"


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _strict(text):
    def bad(x):
        raise AssertionError(f"non-strict JSON constant {x}")

    return json.loads(text, parse_constant=bad)


def test_fit_cascade_file_has_target_pair_on_top_and_pairs(capsys):
    f = os.path.join(PS, f"chain_{M}-{B}_8.json")
    rc, out, _ = _run(capsys, "fit", f, "--json")
    assert rc == 0
    d = _strict(out)
    assert d["pairs"][-1]["verifier"] == B and d["pairs"][-1]["drafter"] == M
    assert d["mean_acceptance_length"] == d["pairs"][-1]["mean_acceptance_length"]
    raw = json.load(open(f))
    acc = [a for r in raw["results"] for a in r["metrics"]["accepted_tokens"][-1]]
    assert d["mean_acceptance_length"] == sum(acc) / len(acc)


def test_fit_baseline_exits_2_with_one_line(capsys):
    for f in (os.path.join(PS, f"greedy_{M}.json"),
              os.path.join(SB, "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl")):
        rc, out, err = _run(capsys, "fit", f)
        assert rc == 2 and "baseline" in err and len(err.strip().splitlines()) == 1


def test_fit_specbench_pooled(capsys):
    rc, out, _ = _run(capsys, "fit", os.path.join(SB, "vicuna-7b-v1.3-eagle-float16-"
                                                      "temperature-0.0.jsonl"), "--json")
    assert rc == 0 and _strict(out)["format"] == "specbench-answers"


def test_validate_specbench_folder(capsys):
    rc, out, _ = _run(capsys, "validate", SB, "--json")
    assert rc == 0
    d = _strict(out)
    assert d["headline"] == "costs-held-out"
    assert {"name", "method", "category", "predicted_speedup", "measured_speedup", "error",
            "measured_ci95"} <= set(d["configs"][0])


def test_forecast_lookahead_and_refusal(capsys):
    rc, out, _ = _run(capsys, "forecast", "--traces", PS, "--models", f"{M},{S}",
                      "--thresholds", "5", "--dtype", f"{M}=float32", "--json")
    assert rc == 0
    d = _strict(out)
    assert d["interval95"][0] < d["speedup"] < d["interval95"][1]
    rc, _, err = _run(capsys, "forecast", "--traces", PS, "--models", f"{M},{S}",
                      "--thresholds", "7", "--dtype", f"{M}=float32")
    assert rc == 2 and f"chain_{S}-{M}_8.json" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run(capsys, "forecast", "--traces", PS, "--models", f"{M},{S}",
                      "--thresholds", "5", "--dtype", "oops")
    assert rc == 2 and "--dtype" in err


@pytest.fixture(scope="module")
def plan_json():
    """``(exit code, stdout)`` of ``polyspec plan --traces PS --json``, run once for the
    tests that read it (each run replays every chain: seconds)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan", "--traces", PS, "--json"])
    return rc, buf.getvalue()


def test_plan_traces_says_whether_a_third_model_pays(plan_json):
    rc, out = plan_json
    assert rc == 0
    d = _strict(out)
    v = {x["target"]: x for x in d["third_model"]}[B]
    assert v["best_three_model"]["models"] == [S, M, B]
    b2, b3 = v["best_two_model"], v["best_three_model"]
    assert v["third_model_pays"] == (b3["interval95"][0] > b2["interval95"][1])
    speeds = [c["speedup"] for c in d["chains"]]
    assert speeds == sorted(speeds, reverse=True)
    # no lookahead beyond what the 70B was seen verifying (8)
    assert all(c["lookahead"] <= 8 for c in d["chains"] if c["target"] == B)


def test_plan_traces_recommends_only_what_its_interval_supports(capsys, plan_json):
    rc, out = plan_json
    assert rc == 0
    d = _strict(out)
    best, rival = d["chains"][0], d["chains"][1]
    # the rule of polyspec/commands/advice.py, recomputed: confident iff the best chain's 95 %
    # interval lies wholly above the runner-up's
    want = ("confident" if best["interval95"][0] > rival["interval95"][1]
            else "too close to call")
    assert d["decision"]["decision"] == want
    rc, text, _ = _run(capsys, "plan", "--traces", PS)
    lines = text.strip().splitlines()
    assert rc == 0 and lines[0].startswith(f"{len(d['chains'])} synchronous chains forecast")
    assert lines[-1] == f"Best: {d['decision']['text']}"
    assert (" <- ".join(reversed(best["models"])) + f" lookahead {best['lookahead']}"
            in lines[-1])


def _three_model_file(tmp_path):
    """A three-model chain built from a two-model fixture run: level 0 gets its own verify
    calls (all accepting 1 token), the target level keeps the measured ones."""
    raw = json.load(open(os.path.join(PS, f"chain_{S}-{M}_8.json")))
    raw["metadata"]["model_configs"].insert(0, {"path": "x/Tiny", "devices": ["cuda:0"],
                                                "dtype": "float16", "quantize": None})
    for r in raw["results"]:
        m = r["metrics"]
        n = len(m["accepted_tokens"][0])
        m["accepted_tokens"].insert(0, [1] * n)
        m["model_times"] = [[1e-3] * n, [t / 2 for t in m["model_times"][1]],
                            [t / 2 for t in m["model_times"][1]]]
    p = tmp_path / "chain_three_8.json"
    p.write_text(json.dumps(raw))
    return p


def test_fit_three_model_file_top_level_is_the_target_pair(capsys, tmp_path):
    rc, out, _ = _run(capsys, "fit", _three_model_file(tmp_path), "--json")
    assert rc == 0
    d = _strict(out)
    assert [p["drafter"] for p in d["pairs"]] == ["Tiny", S]
    assert d["pairs"][0]["mean_acceptance_length"] == 1.0
    assert d["mean_acceptance_length"] == d["pairs"][1]["mean_acceptance_length"] > 1.0


def test_validate_specbench_costs_from(capsys, tmp_path):
    # another folder of the same methods (here: the same runs 1.5 times slower)
    other = tmp_path / "other"
    other.mkdir()
    for name in os.listdir(SB):
        rows = [json.loads(x) for x in open(os.path.join(SB, name)).read().splitlines()]
        for r in rows:
            r["choices"][0]["wall_time"] = [1.5 * t for t in r["choices"][0]["wall_time"]]
        (other / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rc, out, _ = _run(capsys, "validate", SB, "--costs-from", other, "--json")
    assert rc == 0
    d = _strict(out)
    assert d["headline"] == "costs-held-out (costs-from)"
    assert all(v.startswith("costs-from") for v in d["held_out"].values())
    rc, out, err = _run(capsys, "validate", SB, "--costs-from", other)
    assert rc == 0 and "costs held out by costs-from" in out
    for bad in (PS, os.path.join(FIX, "nope")):
        rc, out, err = _run(capsys, "validate", SB, "--costs-from", bad)
        assert rc == 2 and "--costs-from" in err and len(err.strip().splitlines()) == 1
    rc, out, err = _run(capsys, "validate", PS, "--costs-from", SB)
    assert rc == 2 and "--costs-from" in err and len(err.strip().splitlines()) == 1
