"""Bad input of the fourth audit (issue 39 item 2), built from the shared samples and traces
(tests/fixtures), cut or altered as each case needs: each is refused in one line naming the
field or file, or served correctly with a warning where it is legal but odd."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli_checks import run_checked

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "fixtures" / "gpu-traces"
PS, SB = GPU / "pipespec-humaneval", GPU / "specbench-vicuna7b"
S, M = "Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct"


def _ps_folder(tmp_path, **extra):
    d = tmp_path / "ps"
    d.mkdir()
    for f in PS.glob("*.json"):
        shutil.copy(f, d / f.name)
    for name, text in extra.items():
        (d / name).write_text(text)
    return d


@pytest.mark.parametrize("name,text,msg", [
    (f"chain_{S}-{M}_4.json", None, "a list holding PipeSpec run(s)"),  # wrapped in [...]
    ("notes.json", json.dumps({"what": "my notes"}), "not a PipeSpec run"),
])
def test_a_pipespec_folder_holds_runs_only(capsys, tmp_path, name, text, msg):
    if text is None:
        text = "[" + (PS / name).read_text() + "]"
    d = _ps_folder(tmp_path, **{name: text})
    for argv in (["validate", d], ["forecast", "--traces", d, "--models", "8B,1B",
                                   "--thresholds", 5, "--dtype", "8B=float32"]):
        rc, _, err, _ = run_checked(capsys, argv)
        assert rc == 2 and name in err and msg in err, err


# --- Spec-Bench ------------------------------------------------------------------------------
BASE = "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"
SPS = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"
EAGLE = "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl"


def _sb_folder(tmp_path, names, model_id=None):
    """A Spec-Bench folder of ``names``; ``model_id``: {name: new model_id} on every line."""
    d = tmp_path / "sb"
    d.mkdir()
    for name in names:
        lines = (SB / name).read_text().splitlines()
        if model_id and name in model_id:
            lines = [json.dumps({**json.loads(x), "model_id": model_id[name]}) for x in lines]
        (d / name).write_text("\n".join(lines) + "\n")
    return d


def test_a_specbench_folder_of_the_baseline_alone(capsys, tmp_path):
    rc, _, err, _ = run_checked(capsys, ["validate", _sb_folder(tmp_path, [BASE])])
    assert rc == 2 and "holds only the baseline" in err


@pytest.mark.parametrize("name,model_id,what", [
    (BASE, "vicuna-13b-v1.3-vanilla-float16-temp-0.0", "target model"),  # another model
    (BASE, "vicuna-7b-v1.3-vanilla-float32-temp-0.0", "precision"),  # another precision
    (SPS, "llama-2-7b-chat-sps-68m-float16-temp-0.0", "target model"),  # another target
    (EAGLE, "vicuna-7b-v1.3-eagle-float16-temperature-1.0", "temperature"),
])
def test_specbench_model_id_is_compared(capsys, tmp_path, name, model_id, what):
    d = _sb_folder(tmp_path, [BASE, SPS, EAGLE], {name: model_id})
    rc, _, err, _ = run_checked(capsys, ["validate", d])
    assert rc == 2 and "model_id" in err and what in err, err
    # the same folder without the odd file is served
    (d / name).unlink()
    if name != BASE:
        rc, _, err, data = run_checked(capsys, ["validate", d, "--json"])
        assert rc == 0


# --- engine logs -----------------------------------------------------------------------------
ENG = ROOT / "tests" / "fixtures" / "engine-samples"


def _fit(capsys, tmp_path, text, *extra):
    p = tmp_path / "log.txt"
    p.write_text(text)
    return run_checked(capsys, ["fit", p, "--json", *extra])


def _sg(token, al, running=1):
    return (f"[2025-10-22 10:27:57 TP0] Decode batch. #running-req: {running}, #token: {token}, "
            f"token usage: 0.00, accept len: {al}, accept rate: 0.50, cuda graph: True, "
            "gen throughput (token/s): 170.00, #queue-req: 0, ")


def test_sglang_grepped_lines_of_two_requests(capsys, tmp_path):
    """Decode lines of two requests, grep'd (no Prefill batch. line between them): SGLang logs
    every 40 decode steps, so each interval of one running request is 40 rounds. Request 1:
    4 intervals at accept len 2.50; request 2 (its prompt 320 tokens longer) 3 at 2.75. The
    interval where request 2 starts reads as 80 rounds from the token count (220 tokens at
    2.75): not one logging interval, skipped; the others give 40 rounds each."""
    a = [_sg(128 + 100 * i, "2.50") for i in range(4)]
    b = [_sg(428 + 220 + 110 * i, "2.75") for i in range(3)]
    rc, _, err, data = _fit(capsys, tmp_path, "\n".join(a + b) + "\n", "--thresholds", 3)
    assert rc == 0, err
    rounds = [s["rounds"] for s in data["snapshots"]]
    assert set(rounds) == {40} and len(rounds) == 5  # 3 of request 1, 2 of request 2
    assert data["mean_acceptance_length"] == pytest.approx((3 * 2.5 + 2 * 2.75) / 5)
    assert any("not one logging interval of 40" in w for w in data["warnings"])


def test_sglang_cached_prefix_interval_is_not_counted(capsys, tmp_path):
    text = (ENG / "sglang_log_issue11948.txt").read_text().replace(
        "#cached-token: 0", "#cached-token: 100")
    rc, _, err, data = _fit(capsys, tmp_path, text, "--thresholds", 3)
    assert rc == 0 and all(s["label"] != "interval 1" for s in data["snapshots"])
    assert any("100 cached tokens" in w for w in data["warnings"])


@pytest.mark.parametrize("change,field,msg", [
    (("#running-req: 1,", "#running-req: 2,"), "#running-req", "more than one running request"),
    (("accept len: 1.95", "accept len: 0"), "accept len", "not a mean acceptance length"),
])
def test_sglang_refusals_name_the_cause(capsys, tmp_path, change, field, msg):
    text = (ENG / "sglang_log_issue11948.txt").read_text().replace(*change)
    rc, _, err, _ = _fit(capsys, tmp_path, text)  # without --thresholds: the cause, not it
    assert rc == 2 and f"error: {field}:" in err and msg in err, err


def _v0(acc, drafted, emitted, k=3):
    return (f"INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: "
            f"{acc / drafted:.3f}, System efficiency: {emitted / (drafted // k * (k + 1)):.3f}, "
            f"Number of speculative tokens: {k}, Number of accepted tokens: {acc}, Number of "
            f"draft tokens: {drafted}, Number of emitted tokens: {emitted}.")


def test_vllm_v0_two_engines_interleaved_are_refused(capsys, tmp_path):
    """Engine A's and engine B's cumulative counters alternate: differencing consecutive lines
    mixes them (1.60 read for 1.75); the lines cannot be assigned to an engine: refused."""
    a = [(8547, 13311, 10616), (9000, 14100, 11200), (9500, 15000, 11900)]
    b = [(600, 1200, 900), (1300, 2400, 1850), (2000, 3600, 2800)]
    lines = [_v0(*x) for pair in zip(a, b, strict=True) for x in pair]
    rc, _, err, _ = _fit(capsys, tmp_path, "\n".join(lines) + "\n")
    assert rc == 2 and "Speculative metrics" in err and "interleaved" in err, err
    # one engine's lines alone are served, and a restart whose counters stay below the old
    rc, _, err, data = _fit(capsys, tmp_path, "\n".join(_v0(*x) for x in a + b[:2]) + "\n")
    assert rc == 0 and any("restart" in w for w in data["warnings"])


def test_vllm_v1_draft_lengths_3_and_5_pooled_with_a_warning(capsys, tmp_path):
    lines = [ln for ln in (ENG / "vllm_v1_log_issue19254.txt").read_text().splitlines()
             if "SpecDecoding metrics:" in ln][:4]
    five = ("INFO 06-06 14:21:34 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: "
            "30.0%, Mean acceptance length: 2.50, Accepted: 150 tokens, Drafted: 500 tokens, "
            "Per-position acceptance rate: 0.600, 0.400, 0.250, 0.150, 0.100")
    rc, _, err, data = _fit(capsys, tmp_path, "\n".join(lines + [five]) + "\n")
    assert rc == 0
    assert any("draft length differs between intervals (3, 5" in w for w in data["warnings"])


def test_sweep_table_in_seconds_is_read_in_seconds(capsys, tmp_path):
    """The EAGLE sweep with its TPOT table headed `TPOT s` and every time divided by 1000:
    the calibration is the same one in seconds (every fitted cost 1000 times smaller, every
    relative error the same)."""
    text = (ENG / "vllm_eagle_sweep_issue20780.txt").read_text()
    head, body = text.split("---\n", 1)
    out, in_table = [], False
    for line in body.splitlines():
        if "TPOT ms" in line:
            line, in_table = line.replace("TPOT ms", "TPOT s"), True
        elif in_table and line.startswith("K="):
            cells = line.split("|")
            cells[1:4] = [f" {float(c) / 1000:.5f} " for c in cells[1:4]]
            line = "|".join(cells)
        out.append(line)
    ms, s = tmp_path / "ms.txt", tmp_path / "s.txt"
    ms.write_text(text)
    s.write_text(head + "---\n" + "\n".join(out) + "\n")
    runs = []
    for p in (ms, s):
        rc, _, err, data = run_checked(capsys, ["calibrate", p, "--method", "EAGLE 1",
                                                "--fit-on", "2,7", "--json"])
        assert rc == 0, err
        runs.append(data)
    a, b = runs
    assert a["time_unit"] == "ms" and b["time_unit"] == "s"
    for pa, pb in zip(a["parameters"], b["parameters"], strict=True):
        assert pb["estimate"] == pytest.approx(pa["estimate"] / 1000, rel=1e-6)


def test_a_long_log_is_pooled_once_and_its_lines_take_the_checked_path():
    """The work per line of a long log (issue 39: a 50 MB log took over 120 s): the pooled
    snapshot is computed once, and a per-line histogram built on the checked path equals the
    validated constructor's (counts of every cell, same order)."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from polyspec_theory.core.counts import AcceptanceCounts
    from validation import formats

    text = "\n".join(ln for ln in (ENG / "vllm_v1_log_issue19254.txt").read_text().splitlines()
                     if "SpecDecoding metrics:" in ln)
    out = formats.parse(text).data
    assert out.pooled is out.pooled

    @settings(max_examples=50, deadline=None, derandomize=True, database=None)
    @given(h=st.lists(st.integers(0, 50), min_size=2, max_size=8))
    def same(h):
        if not any(h):
            return
        a = AcceptanceCounts.from_histogram(h, len(h) - 1, "x")
        b = AcceptanceCounts.from_checked_histogram(np.array(h), len(h) - 1, "x")
        for f in ("accepted", "caps", "counts"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
        assert a.n_rounds == b.n_rounds

    same()
