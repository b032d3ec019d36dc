"""`polyspec fit`, `polyspec calibrate`, `polyspec profile` and the configs they feed
(`{"fit": FILE}` acceptance, calibrated pools for `polyspec plan`): exit codes, one-line
errors naming the field, strict JSON."""

from __future__ import annotations

import json

import pytest

from polyspec.cli import main
from tests._samples import SAMPLES
from tests._samples import sample as _sample


def sample(name) -> str:
    return str(_sample(name))


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _strict(text):
    def bad(x):
        raise AssertionError(f"non-strict JSON constant {x}")

    return json.loads(text, parse_constant=bad)


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir()
                                        if p.name != "README.md"))
def test_fit_every_sample_exits_0_or_2_with_one_line(capsys, name):
    rc, out, err = _run(capsys, "fit", sample(name), "--json")
    if rc == 0:
        d = _strict(out)
        for key in ("format", "rounds", "drafted_per_round", "mean_accepted",
                    "mean_acceptance_length", "cap", "laws", "best", "warnings"):
            assert key in d
        assert d["mean_acceptance_length"] == pytest.approx(1 + d["mean_accepted"])
        rc2, text, _ = _run(capsys, "fit", sample(name))
        assert rc2 == 0 and "mean acceptance length" in text
    else:
        assert rc == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("polyspec fit: error: ")


def test_fit_out_feeds_a_config_and_a_pool(tmp_path, capsys):
    fit = tmp_path / "fits" / "llama.json"
    rc, _, _ = _run(capsys, "fit", sample("llamacpp_server_pr24536.txt"), "--out", fit)
    assert rc == 0
    report = json.loads(fit.read_text())
    cfg = {"models": [{"name": "target", "cost": 1.0, "overhead": 0.1},
                      {"name": "draft", "cost": 0.05}],
           "acceptance": [{"fit": "fits/llama.json"}], "thresholds": [3], "time_unit": "ms"}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    rc, out, _ = _run(capsys, "predict", path, "--json")
    assert rc == 0
    d = _strict(out)
    assert d["config"]["acceptance"] == [report["best"]]
    assert d["time_base"] == "ms"
    # a named family from the same fit
    cfg["acceptance"] = [{"fit": "fits/llama.json", "law": "positional"}]
    path.write_text(json.dumps(cfg))
    rc, out, _ = _run(capsys, "predict", path, "--json")
    assert rc == 0 and "positional" in _strict(out)["config"]["acceptance"][0]
    # and a pool for plan
    pool = {"models": cfg["models"], "acceptance": {"target|draft": {"fit": "fits/llama.json"}},
            "max_threshold": 6}
    pp = tmp_path / "pool.json"
    pp.write_text(json.dumps(pool))
    rc, out, _ = _run(capsys, "plan", pp, "--json")
    assert rc == 0 and _strict(out)["chain"] == ["target", "draft"]


@pytest.mark.parametrize("acc,field", [
    ({"fit": "missing.json"}, "acceptance[0].fit"),
    ({"fit": "fits/llama.json", "law": "nope"}, "acceptance[0].fit.law"),
    ({"fit": "cfg.json"}, "acceptance[0].fit"),
    ({"fit": "fits/llama.json", "extra": 1}, "acceptance[0].extra"),
])
def test_fit_file_errors_name_the_field(tmp_path, capsys, acc, field):
    (tmp_path / "fits").mkdir()
    _run(capsys, "fit", sample("llamacpp_server_pr24536.txt"), "--out",
         tmp_path / "fits" / "llama.json")
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.05}],
           "acceptance": [acc], "thresholds": [3]}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    rc, _, err = _run(capsys, "predict", tmp_path / "cfg.json")
    assert rc == 2 and f"error: {field}" in err and err.count("\n") == 1


def test_fit_no_law_when_drafts_vary(tmp_path, capsys):
    rc, out, _ = _run(capsys, "fit", sample("llamacpp_speculative_pr2926_cpu.txt"), "--out",
                      tmp_path / "cpu.json", "--json")
    d = _strict(out)
    assert rc == 0 and d["best"] is None and d["laws"] == []
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.05}],
           "acceptance": [{"fit": "cpu.json"}], "thresholds": [3]}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    rc, _, err = _run(capsys, "predict", tmp_path / "cfg.json")
    assert rc == 2 and "acceptance[0].fit: has no fitted law" in err


def test_fit_cli_options(capsys):
    rc, out, _ = _run(capsys, "fit", sample("vllm_v1_specdecode_py_pr24344.txt"), "--snapshot",
                      "1", "--json")
    assert rc == 0 and _strict(out)["rounds"] == 2189
    rc, _, err = _run(capsys, "fit", sample("vllm_v1_specdecode_py_pr24344.txt"), "--snapshot",
                      "9")
    assert rc == 2 and "--snapshot" in err
    rc, _, err = _run(capsys, "fit", sample("vllm_v1_log_issue19254.txt"), "--thresholds", "5")
    assert rc == 2 and "--thresholds" in err
    rc, _, err = _run(capsys, "fit", sample("vllm_v1_log_issue19254.txt"), "--format",
                      "sglang-log")
    assert rc == 2 and err.count("\n") == 1


def _calibrate_json(capsys, *argv):
    rc, out, err = _run(capsys, "calibrate", *argv, "--json")
    assert rc == 0, err
    return _strict(out)


@pytest.mark.parametrize("method,tol,best", [("EAGLE 1", 0.03, 3), ("Eagle 3", 0.05, 4)])
def test_calibrate_eagle_sweep(capsys, method, tol, best):
    d = _calibrate_json(capsys, sample("vllm_eagle_sweep_issue20780.txt"), "--method", method,
                        "--fit-on", "2,7")
    assert d["fit_runs"] == ["K=2", "K=7"]
    assert d["holdout_errors"]["measured_acceptance"]["max_abs"] < tol
    assert d["holdout_errors"]["predicted_acceptance"]["max_abs"] < tol
    assert d["best_among_runs"]["thresholds"] == [best]
    assert d["best_among_runs"]["choice_vs_measured_best"] <= 0.02
    assert d["best_threshold"]["thresholds"] == [best]
    assert {p["name"] for p in d["parameters"]} == {"target.overhead", "drafter.base"}
    assert d["leave_one_out"] is None and d["time_unit"] == "ms"
    # all six Ks: leave-one-out is available and the residual scale is reported
    d6 = _calibrate_json(capsys, sample("vllm_eagle_sweep_issue20780.txt"), "--method", method)
    assert len(d6["leave_one_out"]) == 6 and d6["dof"] == 4
    assert d6["leave_one_out_max_abs"] < 0.1


def test_calibrate_holdout_errors_are_the_held_out_runs_only(capsys):
    d = _calibrate_json(capsys, sample("vllm_eagle_sweep_issue20780.txt"), "--method",
                        "EAGLE 1", "--fit-on", "2,3,4")
    held = [r for r in d["runs"] if r["holdout"]]
    assert [r["name"] for r in held] == d["holdout_runs"] == ["K=5", "K=6", "K=7"]
    by_run = d["holdout_errors"]["measured_acceptance"]["by_run"]
    assert by_run == {r["name"]: r["predicted"] / r["measured"] - 1 for r in held}
    assert d["holdout_errors"]["measured_acceptance"]["max_abs"] == max(map(abs,
                                                                            by_run.values()))
    # the fit runs (three runs, two parameters: not reproduced exactly) are not in it
    assert any(r["relative_error"] != 0 for r in d["runs"] if not r["holdout"])


def test_calibrate_runs_file_with_fit_files_and_plan(tmp_path, capsys):
    _run(capsys, "fit", sample("llamacpp_server_pr24536.txt"), "--out", tmp_path / "acc.json")
    runs = {
        "name": "toy", "time_unit": "ms",
        "models": [{"name": "target", "cost": 9.0, "overhead": "fit"},
                   {"name": "eagle", "cost": "fit"}],
        "runs": [{"name": f"K={k}", "thresholds": [k], "acceptance": [{"fit": "acc.json"}],
                  "time_per_token": t} for k, t in ((1, 5.99), (2, 4.82), (3, 4.32))],
        "max_threshold": 8,
    }
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    pool = tmp_path / "pool.json"
    cfgp = tmp_path / "best.json"
    d = _calibrate_json(capsys, tmp_path / "runs.json", "--write-pool", pool, "--write-config",
                        cfgp)
    assert d["acceptance_source"].startswith("pair 0: the law given")
    rc, out, _ = _run(capsys, "plan", pool, "--json")
    p = _strict(out)
    assert rc == 0 and p["thresholds"] == d["best_threshold"]["thresholds"]
    assert p["speedup"] == pytest.approx(d["best_threshold"]["speedup"], rel=1e-9)
    rc, out, _ = _run(capsys, "predict", cfgp, "--json")
    pr = _strict(out)
    assert pr["time_per_token"] == pytest.approx(d["best_threshold"]["time_per_token"],
                                                 rel=1e-9)
    assert pr["time_base"] == "ms"
    rc, text, _ = _run(capsys, "plan", pool)
    assert "Time base: ms" in text
    # --fit-on by run name
    d2 = _calibrate_json(capsys, tmp_path / "runs.json", "--fit-on", "K=1,K=3")
    assert d2["holdout_runs"] == ["K=2"]


@pytest.mark.parametrize("argv,needle", [
    (["--method", "medusa"], "--method"),
    ([], "--method"),
    (["--method", "EAGLE 1", "--fit-on", "9"], "--fit-on"),
    (["--method", "EAGLE 1", "--fit-on", "2"], "cannot determine"),
    (["--method", "EAGLE 1", "--within", "3"], "--within"),
])
def test_calibrate_errors(capsys, argv, needle):
    rc, out, err = _run(capsys, "calibrate", sample("vllm_eagle_sweep_issue20780.txt"), *argv)
    assert rc == 2 and out == "" and needle in err and err.count("\n") == 1


def test_calibrate_on_an_engine_log_is_a_clear_error(capsys):
    rc, _, err = _run(capsys, "calibrate", sample("vllm_v1_log_issue19254.txt"))
    assert rc == 2 and err.count("\n") == 1


def test_profile_zoo_models(tmp_path, capsys):
    out = tmp_path / "costs.json"
    rc, text, err = _run(capsys, "profile", "small", "ngram", "--max-m", "3", "--repeats", "2",
                         "--context", "8", "--warmup", "1", "--threads", "1", "--out", out,
                         "--json")
    assert rc == 0, err
    d = _strict(text)
    assert d == _strict(out.read_text())
    assert [m["name"] for m in d["models"]] == ["small", "ngram"]
    for m in d["models"]:
        tab = m["cost"]["table"]
        assert len(tab) == 3 and all(x > 0 for x in tab)
    # the tables are config syntax
    from polyspec_theory import Cascade, predict

    cfg = {"models": [{"name": m["name"], "cost": m["cost"]} for m in d["models"]],
           "acceptance": [{"alpha": 0.6}], "thresholds": [2], "time_unit": d["time_unit"]}
    assert predict(Cascade.from_config(cfg)).speedup > 0


@pytest.mark.parametrize("argv,needle", [
    (["nonexistent-model"], "models"),
    (["small", "--max-m", "0"], "--max-m"),
    (["small", "--device", "cuda:0"], "--device"),
    (["small", "--device", "foo"], "--device"),
])
def test_profile_errors(capsys, argv, needle):
    import torch

    if "cuda:0" in argv and torch.cuda.is_available():
        argv = ["small", "--context", "100000000"]
        needle = "--context"
    rc, out, err = _run(capsys, "profile", *argv)
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_committed_runs_file_is_the_sweep(capsys):
    """configs/calibration-eagle1.json (the runs-file format of the README) is the EAGLE-1
    column of the shared sweep: same fit, same choice."""
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    a = _calibrate_json(capsys, root / "configs" / "calibration-eagle1.json")
    b = _calibrate_json(capsys, sample("vllm_eagle_sweep_issue20780.txt"), "--method",
                        "EAGLE 1", "--fit-on", "2,7")
    assert [p["estimate"] for p in a["parameters"]] == pytest.approx(
        [p["estimate"] for p in b["parameters"]], rel=1e-12)
    assert a["best_threshold"]["thresholds"] == b["best_threshold"]["thresholds"] == [3]
    assert a["engine_best"] == 3


def test_python_api_verbs():
    import polyspec as ps

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    assert ps.fit(sample("vllm_v0_log_issue9539.txt"))["rounds"] == 13311 // 3
    cal = ps.calibrate(root / "configs" / "calibration-eagle1.json")
    assert cal.labels == ("llama-3.1-8b.overhead", "eagle1.base")
    same = ps.calibrate(sample("vllm_eagle_sweep_issue20780.txt"), method="EAGLE 1",
                        fit_on=[2, 7])
    assert list(same.estimates) == pytest.approx(list(cal.estimates), rel=1e-12)


def test_fit_help_lists_every_parser_format():
    from polyspec.cli import build_parser
    from validation import formats

    sub = build_parser()._subparsers._group_actions[0].choices["fit"]
    text = "".join(sub.format_help().split())  # argparse wraps at hyphens
    for name, fmt in formats.registry().items():
        if fmt.report is not None:  # not the sweep tables (calibrate) nor our traces (validate)
            assert name in text, name
    rc = __import__("polyspec.cli", fromlist=["main"]).main(
        ["fit", sample("vllm_v0_log_issue9539.txt"), "--format", "nope"])
    assert rc == 2


# --- issue 27: files that are not what they seem -------------------------------------------
def test_fit_out_never_overwrites_its_input_or_writes_a_directory(tmp_path, capsys):
    log = tmp_path / "engine.log"
    log.write_bytes(_sample("vllm_v1_log_issue19254.txt").read_bytes())
    before = log.read_bytes()
    rc, _, err = _run(capsys, "fit", log, "--out", log)
    assert rc == 2 and "--out" in err and "input file" in err and len(err.splitlines()) == 1
    assert log.read_bytes() == before
    link = tmp_path / "link.json"
    link.symlink_to(log)
    rc, _, err = _run(capsys, "fit", log, "--out", link)
    assert rc == 2 and "input file" in err and log.read_bytes() == before
    for out, needle in ((tmp_path, "is a directory"), ("/proc/polyspec-nope/x.json",
                                                      "cannot write"),
                        ("/dev/null", "not a regular file")):
        rc, _, err = _run(capsys, "fit", log, "--out", out)
        assert rc == 2 and needle in err and len(err.splitlines()) == 1, err
    rc, _, err = _run(capsys, "fit", log, "--out", tmp_path / "new" / "fit.json")
    assert rc == 0 and json.loads((tmp_path / "new" / "fit.json").read_text())["rounds"] > 0


def test_fit_refuses_devices_fifos_and_loops_and_reads_a_bom(tmp_path, capsys):
    import os

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    for path, needle in (("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                         (a, "symbolic link loop"), (tmp_path / "none.txt", "not found")):
        rc, _, err = _run(capsys, "fit", path)
        assert rc == 2 and needle in err and len(err.splitlines()) == 1, err
    empty = tmp_path / "empty.log"
    empty.write_text("\n")
    rc, _, err = _run(capsys, "fit", empty)
    assert rc == 2 and "is empty" in err and str(empty) in err
    bom = tmp_path / "bom.log"
    bom.write_bytes(b"\xef\xbb\xbf" + _sample("vllm_v1_log_issue19254.txt").read_bytes())
    rc, out, err = _run(capsys, "fit", bom, "--json")
    plain = _run(capsys, "fit", _sample("vllm_v1_log_issue19254.txt"), "--json")[1]
    assert rc == 0 and _strict(out)["rounds"] == _strict(plain)["rounds"] == 625


def test_validate_refuses_a_fifo_named_jsonl(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "a.jsonl")
    rc, _, err = _run(capsys, "validate", tmp_path)
    assert rc == 2 and "not a regular file" in err and len(err.splitlines()) == 1


def test_calibrate_refuses_a_fit_that_misses_its_own_runs(tmp_path, capsys):
    text = _sample("vllm_eagle_sweep_issue20780.txt").read_text()
    # one TPOT in seconds inside a table in ms: no cost model reproduces the runs
    bad = tmp_path / "sweep.txt"
    bad.write_text(text.replace("K=5 | 7.07 | 4.71 |", "K=5 | 7.07 | 4710 |"))
    rc, _, err = _run(capsys, "calibrate", bad, "--method", "EAGLE 1")
    assert rc == 2 and "misses its own fit run" in err and len(err.splitlines()) == 1, err
    rc, _, err = _run(capsys, "calibrate", _sample("vllm_eagle_sweep_issue20780.txt"),
                      "--method", "EAGLE 1")
    assert rc == 0, err


def test_calibrate_fit_on_needs_run_names(tmp_path, capsys):
    runs = {"models": [{"name": "target", "cost": {"base": 7.07}, "overhead": "fit"},
                       {"name": "drafter", "cost": "fit"}],
            "runs": [{"thresholds": [k], "acceptance": [{"tau": 2.0 + 0.1 * k}],
                      "time_per_token": 4.0 + 0.2 * k} for k in (2, 3, 4)]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs))
    rc, _, err = _run(capsys, "calibrate", path, "--fit-on", "K=2")
    assert rc == 2 and "runs[0].name" in err and "None" not in err, err
