"""The async pipeline's contention profile (``profile --cascade --mode async``,
validation/capture/async_profile.py), its forecast (``forecast --mode async``,
validation/analysis/async_forecast.py) and ``forecast --score`` on async captures.

Functional only: tiny models, tiny sizes, nothing here is a timing."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation.analysis.async_forecast import forecast_async_config, profile_of_capture
from validation.analysis.async_validate import drafter_forward_s, validate_async
from validation.analysis.fits import fit_costs
from validation.analysis.forecast import measured_ci95
from validation.capture import machine
from validation.capture.async_profile import (
    AsyncProfile,
    profile_async,
    read_async_profile,
    verify_sizes,
)
from validation.traces.records import read_trace, read_traces
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

from ..cli_checks import run_checked
from .tiny_zoo import tiny_family

torch.set_num_threads(1)
TWO_CORES = len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CORES, reason="the pipeline needs two cores")
ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "data" / "traces" / "cpu"
IDLE = ROOT / "data" / "traces" / "cpu-async" / "idle"
TH0 = IDLE / "target-draft-t_async_th0_q48_T0.jsonl"
TH4 = IDLE / "target-draft-t_async_th4_q48_T0.jsonl"


def test_verify_sizes():
    assert verify_sizes(0) == [1]
    assert verify_sizes(6) == [1, 2, 3, 4, 5, 6, 7]
    assert verify_sizes(48) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 49]
    assert verify_sizes(99) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 100]


@pytest.fixture(scope="module")
def tiny_profile():
    if not TWO_CORES:
        pytest.skip("the pipeline needs two cores")
    fam = tiny_family(2, vocab=16, noise=0.03, block_size=128)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 16, 8).tolist() for _ in range(3)]
    return profile_async(fam, 0, 6, prompts, 16, timing=(2, 0))


@needs_two
def test_profile_measures_every_cell_solo_and_together(tiny_profile):
    p = tiny_profile
    raw, s = p.raw, p.settings
    assert p.models == ["m0", "m1"] and (p.threshold, p.queue, p.window) == (0, 6, 6)
    # contexts: midpoints of 8 .. 8 + 16, descending; sizes 1 .. W + 1
    assert s["contexts"] == [22, 18, 14, 10] and s["verify_sizes"] == list(range(1, 8))
    assert raw["cells"] == [[c, m] for c in (22, 18, 14, 10) for m in range(1, 8)]
    assert all(len(x) == 2 for x in raw["target_solo_s"] + raw["target_together_s"])
    assert len(raw["target_overhead_s"]) == 2 * 28
    # the drafter drafts one position per forward from 8 to 8 + 16 + 6, one pass per repeat
    assert len(raw["drafter_solo_s"]) == len(raw["drafter_together_s"]) == 2 * 22
    assert raw["ar_tokens"] == 3 * 16 and s["cores"][0] != s["cores"][1]
    # the derived numbers, recomputed from the raw measurements
    solo = np.array([np.mean(x) for x in raw["target_solo_s"]])
    tog = np.array([np.mean(x) for x in raw["target_together_s"]])
    assert p.contention[0] == pytest.approx(tog.sum() / solo.sum() - 1, rel=1e-12)
    assert p.contention[1] == pytest.approx(np.mean(raw["drafter_together_s"])
                                            / np.mean(raw["drafter_solo_s"]) - 1, rel=1e-12)
    table = solo.reshape(4, 7).mean(axis=0)
    assert p.target_table == pytest.approx(table, rel=1e-12) and len(p.target_table) == 7
    assert p.draft_s == pytest.approx(np.mean(raw["drafter_solo_s"]), rel=1e-12)
    assert p.overhead_s == pytest.approx(np.median(raw["target_overhead_s"]), rel=1e-12)
    assert p.ar_s == pytest.approx(raw["ar_wall_s"] / 48)


@needs_two
def test_profile_json_round_trip_and_refusals(tiny_profile, tmp_path):
    d = json.loads(json.dumps(tiny_profile.to_dict()))
    back = AsyncProfile.from_dict(d)
    assert back.to_dict() == d
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    assert read_async_profile(f).contention == tiny_profile.contention
    for key, val, msg in [("format", "x", "not an async profile"),
                          ("target_table", [1.0], "need T(1..W + 1)"),
                          ("draft_s", 0.0, "draft_s"), ("ar_s", float("nan"), "ar_s"),
                          ("contention", [0.1], "contention"),
                          ("contention", [-1.0, 0.0], "contention"),
                          ("models", ["a", "b", "c"], "models"),
                          ("overhead_s", -1e-3, "overhead_s")]:
        with pytest.raises(PolyspecInputError, match=re.escape(msg)):
            AsyncProfile.from_dict({**d, key: val})
    with pytest.raises(PolyspecInputError, match="malformed"):
        AsyncProfile.from_dict({k: v for k, v in d.items() if k != "window"})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PolyspecInputError, match="not JSON"):
        read_async_profile(tmp_path / "bad.json")


def test_profile_async_refuses_bad_input():
    fam = tiny_family(2, vocab=16, block_size=32)
    with pytest.raises(PolyspecInputError, match="exceeds the context 32"):
        profile_async(fam, 0, 8, [[1] * 8], 20)
    with pytest.raises(PolyspecInputError, match="one length"):
        profile_async(fam, 0, 4, [[1] * 8, [1] * 7], 4)
    with pytest.raises(PolyspecInputError) as e:
        profile_async(fam, 0, 4, [[1] * 8], 4, timing=(0, 1))
    assert e.value.field == "repeats"
    with pytest.raises(PolyspecInputError) as e:
        profile_async(fam[:1], 0, 4, [[1] * 8], 4)
    assert e.value.field == "models"


# --- the command ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, width) in enumerate([("target", 16), ("small", 8)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(1, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


@pytest.fixture
def load(monkeypatch):
    monkeypatch.delenv(machine.MAX_LOAD_ENV, raising=False)
    state = {"v": (0.1, 0.1, 0.1)}
    monkeypatch.setattr(machine, "load_average", lambda: state["v"])
    return state


def _with_options(argv, extra):
    """``argv`` with each (option, value) pair of ``extra`` replacing the option's value, or
    added when the option is not given."""
    argv = list(argv)
    for i in range(0, len(extra), 2):
        if extra[i] in argv:
            argv[argv.index(extra[i]) + 1] = extra[i + 1]
        else:
            argv += extra[i:i + 2]
    return argv


def _profile_argv(zoo_dir, *extra):
    return ["profile", "--cascade", "--mode", "async", "target", "small", "--thresholds", "0",
            "--queue", "2", "--prompts", "2", "--prompt-len", "8", "--tokens", "4",
            "--repeats", "1", "--warmup", "0", "--zoo-dir", zoo_dir, *extra]


@needs_two
def test_profile_command_writes_the_json_with_the_load(zoo_dir, tmp_path, capsys, load):
    out = tmp_path / "prof.json"
    rc, _, _, printed = run_checked(capsys, _profile_argv(zoo_dir, "--out", out, "--json"))
    assert rc == 0
    d = json.loads(out.read_text())
    assert d == printed
    p = AsyncProfile.from_dict(d)
    assert (p.models, p.threshold, p.queue, p.window) == (["target", "small"], 0, 2, 2)
    s = d["settings"]
    assert s["load_check"] == {"max_load": 0.5, "allow_load": False, "load_1min": 0.1}
    assert s["machine"]["load_average"] == [0.1, 0.1, 0.1] and "machine_end" in s
    assert s["source"] == "profile" and s["seed"] == 1
    load["v"] = (0.9, 0.5, 0.5)  # above 0.5: refused, unless --allow-load
    rc, _, err, _ = run_checked(capsys, _profile_argv(zoo_dir, "--json"))
    assert rc == 2 and "--allow-load: the 1-minute load average is 0.90" in err
    out2 = tmp_path / "prof2.json"
    assert main([str(a) for a in _profile_argv(zoo_dir, "--allow-load", "--out", out2)]) == 0
    text = capsys.readouterr().out
    assert "1 + κ_1" in text and "1 + κ_2" in text and f"written to {out2}" in text
    assert json.loads(out2.read_text())["settings"]["load_check"]["allow_load"] is True


@pytest.mark.parametrize("extra, field", [
    (["--thresholds", "1,2"], "--thresholds"), (["--queue", "0"], "--queue"),
    (["--traces", "data/traces/cpu"], "--traces"), (["--device", "cuda"], "--device"),
    (["--cores", "0,0"], "--cores"), (["--temperature", "1"], "--temperature"),
    (["--tokens", "0"], "--tokens"), (["--max-m", "4"], "--max-m"),
    (["--dtype", "float16"], "--dtype")])
def test_profile_command_refusals(zoo_dir, capsys, extra, field, load):
    argv = _with_options(_profile_argv(zoo_dir), extra)
    rc, _, err, _ = run_checked(capsys, argv)
    assert rc == 2 and f"error: {field}:" in err


def test_profile_never_writes_over_the_weights(zoo_dir, capsys):
    w = str(zoo_dir / "target.safetensors")
    rc, _, err, _ = run_checked(capsys, ["profile", "--mode", "async", w,
                                         str(zoo_dir / "small.safetensors"), "--out", w])
    assert rc == 2 and "error: --out:" in err


def test_queue_and_cores_need_mode_async(zoo_dir, capsys):
    rc, _, err, _ = run_checked(capsys, ["profile", "target", "--queue", "4", "--zoo-dir",
                                         zoo_dir])
    assert rc == 2 and "error: --queue: only applies with --mode async" in err
    rc, _, err, _ = run_checked(capsys, ["profile", "--mode", "async", "target", "small",
                                         "mid", "--zoo-dir", zoo_dir])
    assert rc == 2 and "error: models:" in err


# --- the forecast and its score -----------------------------------------------------------------
@pytest.fixture(scope="module")
def idle():
    return {p.name: read_trace(p) for p in (TH0, TH4)}


@pytest.fixture(scope="module")
def cpu():
    return read_traces(CPU)


def test_in_sample_profile_of_a_capture(idle):
    """kappa_1 of the in-sample profile: the pipeline's verify time / the same verifies at
    the capture's single-core cost - 1; kappa_2: the pipeline's one-position drafter
    forwards / the single-core T(1) - 1 (below 0 here: the drafter alone in its own process
    keeps its weights in its core's cache, the cost curves time it after the target ran)."""
    for cap in idle.values():
        p = profile_of_capture(cap)
        r = cap.rounds[0]
        assert p.window == 48 and len(p.target_table) == 49
        fit = fit_costs(cap, calibrate=False)["target"]
        pairs, counts = np.unique(np.stack([r.m, r.ctx]), axis=1, return_counts=True)
        solo = sum(k * float(fit.at(int(m), float(c))) for (m, c), k in zip(pairs.T, counts,
                                                                           strict=True))
        assert p.contention[0] == pytest.approx(np.sum(r.verify_s) / solo - 1, rel=1e-9)
        assert 0.05 < p.contention[0] < 1.0  # two processes: the target's verifies slower
        c = float(fit_costs(cap, calibrate=False)["draft-t"].at(1, 64 + (128 + 48) / 2))
        assert p.draft_s == pytest.approx(c, rel=1e-12)
        assert p.contention[1] == pytest.approx(np.mean(drafter_forward_s(cap)) / c - 1,
                                                rel=1e-9)
        assert p.ar_s == cap.ar_time_per_token
        over = np.median(np.asarray(r.round_s) - r.verify_s - r.draft_s)
        assert p.overhead_s == pytest.approx(max(over, 0.0))
        assert "in-sample" in p.settings["source"]


def _write(tmp_path, prof, name="p.json"):
    f = tmp_path / name
    f.write_text(json.dumps(prof.to_dict()))
    return f


def _forecast_argv(prof_file, th, *extra):
    return ["forecast", "--mode", "async", "--models", "target,draft-t", "--thresholds",
            str(th), "--queue", "48", "--temperature", "0", "--traces", CPU, "--profile",
            prof_file, "--json", *extra]


def test_forecast_line_and_its_inputs(idle, cpu, tmp_path, capsys):
    prof = profile_of_capture(idle[TH0.name])
    f = _write(tmp_path, prof)
    rc, _, _, out = run_checked(capsys, _forecast_argv(f, 0, "--name", "x_th0"))
    assert rc == 0
    for k in ("name", "kind", "levels", "batch", "speedup", "interval95", "interval_from",
              "models", "thresholds", "queue", "contention", "acceptance_model",
              "acceptance_from", "time_per_token", "ar_time_per_token"):
        assert k in out
    assert (out["name"], out["kind"], out["levels"], out["batch"]) == ("x_th0", "async", 2, 1)
    lo, hi = out["interval95"]
    assert lo < out["speedup"] < hi
    assert out["contention"] == list(prof.contention)
    # R3 rejects independent rounds of target <- draft-t at T = 0 on the cpu captures
    assert out["acceptance_model"] == "run law" and out["independence"]["independent"] is False
    assert out["speedup"] == pytest.approx(prof.ar_s / out["time_per_token"])
    # the contention term slows the pipeline
    assert out["speedup_without_contention"] > out["speedup"]
    # the same from the function, and the per-round law when asked
    fc = forecast_async_config(["target", "draft-t"], 0, 48, cpu, prof)
    assert fc["speedup"] == out["speedup"]
    pr = forecast_async_config(["target", "draft-t"], 0, 48, cpu, prof, acceptance="per-round")
    assert pr["acceptance_model"] == "per-round" and pr["speedup"] != fc["speedup"]


def test_per_round_forecast_is_validates_law_with_the_profiles_costs(idle, cpu):
    """The per-round forecast with kappa = 0 and o_1 = 0 and the target's T(1) as the
    autoregressive time is validate's predictive AS1 on the same costs: same law."""
    from polyspec_theory import CostCurve, predict_async
    from validation.analysis.async_validate import async_cascade, pair_law

    cap = idle[TH0.name]
    prof = profile_of_capture(cap)
    prof.contention, prof.overhead_s, prof.ar_s = (0.0, 0.0), 0.0, prof.target_table[0]
    fc = forecast_async_config(["target", "draft-t"], 0, 48, cpu, prof, acceptance="per-round")
    from polyspec_theory.core.laws import FAMILIES

    law, _ = pair_law([c for c in cpu if c.mode == "sync"], cap.pair_key(0), FAMILIES)
    ref = predict_async(async_cascade(cap, law, CostCurve.from_table(prof.target_table),
                                      CostCurve.constant(prof.draft_s)))
    assert fc["speedup"] == pytest.approx(ref.speedup, rel=1e-12)


@pytest.mark.parametrize("extra, field", [
    (["--thresholds", "1,2"], "--thresholds"), (["--queue", "0"], "--queue"),
    (["--temperature", "1"], "--temperature"), (["--models", "target,mid,draft-t"], "--models"),
    (["--schedule", "hf:4:1:8"], "--schedule"), (["--traces", "nope"], "--traces"),
    (["--thresholds", "2"], "--profile"), (["--models", "target,small"], "--profile")])
def test_forecast_refusals(idle, tmp_path, capsys, extra, field):
    f = _write(tmp_path, profile_of_capture(idle[TH0.name]))
    argv = _with_options([str(a) for a in _forecast_argv(f, 0)], extra)
    rc, _, err, _ = run_checked(capsys, argv)
    assert rc == 2 and f"error: {field}:" in err


def test_forecast_profile_must_be_an_async_one(tmp_path, capsys):
    comp = next((CPU / "profiles").glob("*.json"))
    rc, _, err, _ = run_checked(capsys, _forecast_argv(comp, 0))
    assert rc == 2 and "error: --profile:" in err and "not an async profile" in err
    rc, _, err, _ = run_checked(capsys, _forecast_argv(tmp_path / "none.json", 0))
    assert rc == 2 and "no such file" in err
    rc, _, err, _ = run_checked(capsys, ["forecast", "--traces", CPU, "--models",
                                         "target,draft-t", "--thresholds", "5", "--queue", "4",
                                         "--profile", comp])
    assert rc == 2 and "error: --queue: only applies with --mode async" in err


def test_score_on_the_idle_async_captures_in_sample(idle, cpu, tmp_path, capsys):
    """Diagnostic: forecasts from in-sample profiles (each capture's own forwards), scored
    against the committed idle captures; the measured speedup and its CI are validate's."""
    lines = []
    for path in (TH0, TH4):
        cap = idle[path.name]
        shutil.copy(path, tmp_path / path.name)
        f = _write(tmp_path, profile_of_capture(cap), f"{cap.name}.profile.json")
        th = cap.thresholds[0]
        rc, _, _, out = run_checked(capsys, _forecast_argv(f, th, "--name", cap.name))
        assert rc == 0
        lines.append(json.dumps(out))
    fc = tmp_path / "forecasts.jsonl"
    fc.write_text("\n".join(lines) + "\n")
    rc, _, _, sc = run_checked(capsys, ["forecast", "--score", fc, "--json"])
    assert rc == 0 and sc["captured"] == 2
    val = {r.name: r for r in validate_async(list(idle.values()), cpu)}
    for row in sc["configs"]:
        cap = idle[row["name"] + ".jsonl"]
        assert row["kind"] == "async"
        assert row["measured"] == cap.measured_speedup == val[row["name"]].measured_speedup
        assert row["measured_ci95"] == list(measured_ci95(cap))
        assert row["error"] == pytest.approx(row["forecast"] / row["measured"] - 1)
        # in-sample: the pipeline's own forward costs; laws from the sync captures
        assert abs(row["error"]) < 0.10, row
    # a kind that is not the capture's is refused
    bad = tmp_path / "bad" / "forecasts.jsonl"
    bad.parent.mkdir()
    shutil.copy(TH0, bad.parent / TH0.name)
    row = json.loads(lines[0])
    bad.write_text(json.dumps({**row, "kind": "chain"}) + "\n")
    rc, _, err, _ = run_checked(capsys, ["forecast", "--score", bad])
    assert rc == 2 and "is an async capture" in err
