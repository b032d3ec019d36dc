"""One rule for writes (issue 33): no command writes over a file it read -- its inputs, the fit
files a config or pool names, the trace files of a folder it read, model weights. Each case
is refused with one line naming the option, and the file is left as it was."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from polyspec.cli import main
from tests._samples import sample

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "validation" / "fixtures" / "traces"
PIPESPEC = ROOT / "tests" / "fixtures" / "gpu-traces" / "pipespec-humaneval"


def _refused(capsys, argv, option, victim: Path):
    before = victim.read_bytes()
    rc = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert err.count("\n") == 1 and f"error: {option}" in err and "would be overwritten" in err
    assert victim.read_bytes() == before


@pytest.fixture()
def traces(tmp_path):
    d = tmp_path / "traces"
    shutil.copytree(TRACES, d)
    return d


@pytest.mark.parametrize("option", ["--write-pool", "--write-config"])
def test_plan_traces_never_over_a_trace_of_the_folder(capsys, traces, option):
    victim = traces / "target-mid_th4_T0.jsonl"
    _refused(capsys, ["plan", "--traces", traces, option, victim], option, victim)
    # through a symbolic link too (same file)
    link = traces.parent / "link.jsonl"
    os.symlink(victim, link)
    _refused(capsys, ["plan", "--traces", traces, option, link], option, victim)


def test_profile_cascade_never_over_a_trace(capsys, traces):
    victim = traces / "target-ngram_th3_T0.jsonl"
    _refused(capsys, ["profile", "--cascade", "target", "ngram", "--thresholds", "3",
                      "--traces", traces, "--out", victim], "--out", victim)


def test_profile_never_over_the_weights(capsys, tmp_path):
    w = tmp_path / "m.safetensors"
    w.write_bytes(b"not really weights, refused before they are loaded")
    _refused(capsys, ["profile", w, "--out", w], "--out", w)


def _fit_file(tmp_path, capsys) -> Path:
    fit = tmp_path / "fit.json"
    assert main(["fit", str(sample("llamacpp_server_pr24536.txt")), "--out", str(fit)]) == 0
    capsys.readouterr()
    return fit


@pytest.mark.parametrize("option", ["--write-config", "--write-pool"])
def test_calibrate_never_over_a_fit_file_its_runs_name(capsys, tmp_path, option):
    fit = _fit_file(tmp_path, capsys)
    runs = {"name": "r", "time_unit": "ms",
            "models": [{"name": "t", "overhead": "fit"}, {"name": "d", "cost": "fit"}],
            "runs": [{"name": f"K={k}", "thresholds": [k], "acceptance": [{"fit": "fit.json"}],
                      "time_per_token": tpt} for k, tpt in ((2, 4.4), (3, 4.3), (4, 4.5))],
            "autoregressive": {"time_per_token": 7.0}, "max_threshold": 8}
    rp = tmp_path / "runs.json"
    rp.write_text(json.dumps(runs))
    _refused(capsys, ["calibrate", rp, option, fit], option, fit)


def test_plan_never_over_a_fit_file_its_pool_names(capsys, tmp_path):
    fit = _fit_file(tmp_path, capsys)
    pool = {"models": [{"name": "t", "cost": 1.0, "overhead": 0.1}, {"name": "d", "cost": 0.05}],
            "acceptance": {"t|d": {"fit": "fit.json"}}, "max_threshold": 6}
    pp = tmp_path / "pool.json"
    pp.write_text(json.dumps(pool))
    _refused(capsys, ["plan", pp, "--write-config", fit], "--write-config", fit)
    _refused(capsys, ["plan", pp, "--write-pool", pp], "--write-pool", pp)


def test_a_new_path_is_still_written(capsys, tmp_path):
    _fit_file(tmp_path, capsys)
    pool = {"models": [{"name": "t", "cost": 1.0, "overhead": 0.1}, {"name": "d", "cost": 0.05}],
            "acceptance": {"t|d": {"fit": "fit.json"}}, "max_threshold": 6}
    pp = tmp_path / "pool.json"
    pp.write_text(json.dumps(pool))
    out = tmp_path / "best.json"
    assert main(["plan", str(pp), "--write-config", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["thresholds"]
    # a second command does not inherit the first one's reads
    assert main(["fit", str(sample("llamacpp_server_pr24536.txt")), "--out", str(pp)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("option,value", [("--write-pool", "x.json"),
                                          ("--write-config", "x.json"),
                                          ("--temperature", "0.5"), ("--batch", "1,2"),
                                          ("--max-threshold", "4")])
def test_plan_on_a_gpu_folder_refuses_what_it_would_ignore(capsys, tmp_path, option, value):
    v = str(tmp_path / value) if value == "x.json" else value
    rc = main(["plan", "--traces", str(PIPESPEC), option, v])
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and f"error: {option}" in err
    assert not (tmp_path / "x.json").exists()


def _one_line(capsys, argv, needle):
    rc = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and needle in err, err
    return err


def test_output_folders_that_are_files_are_refused_before_any_work(capsys, tmp_path):
    f = tmp_path / "afile"
    f.write_text("keep me")
    _one_line(capsys, ["validate", TRACES, "--out", f], "error: --out: ")
    _one_line(capsys, ["figures", "--out", f, "--only", "1"], "error: --out: ")
    for mode in ("sync", "async"):
        _one_line(capsys, ["capture", "--models", "target,small", "--thresholds", "2",
                           "--mode", mode, "--out", f], "error: --out: ")
    assert f.read_text() == "keep me"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):  # root may write anywhere
            _one_line(capsys, ["capture", "--models", "target,small", "--thresholds", "2",
                               "--out", ro / "x"], "error: --out: cannot write")
    finally:
        ro.chmod(0o700)


def test_capture_device_must_be_a_device(capsys, tmp_path):
    _one_line(capsys, ["capture", "--models", "target,small", "--thresholds", "2", "--device",
                       "foo", "--out", tmp_path / "o"], "error: --device: 'foo' is not a device")


@pytest.mark.parametrize("option,value", [("--out", "x.json"), ("--snapshot", "1"),
                                          ("--eta", "0.5"), ("--thresholds", "3")])
def test_fit_on_a_gpu_trace_refuses_what_it_would_ignore(capsys, tmp_path, option, value):
    v = str(tmp_path / value) if value == "x.json" else value
    _one_line(capsys, ["fit", PIPESPEC / "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_8.json",
                       option, v], f"error: {option}")
    assert not (tmp_path / "x.json").exists()


def test_validate_out_on_a_gpu_folder_is_refused(capsys, tmp_path):
    _one_line(capsys, ["validate", PIPESPEC, "--out", tmp_path / "o"], "error: --out")
