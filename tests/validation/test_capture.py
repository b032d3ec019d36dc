"""``polyspec capture`` end to end on tiny random zoo models: trace content, greedy
losslessness recorded in the summaries, interruption + ``--resume``, CLI errors."""

from __future__ import annotations

import json

import pytest
import torch

from polyspec.cli import main
from validation.capture.setup import CaptureSpec, make_prompts
from validation.capture.single import capture
from validation.traces.records import read_records, read_trace
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, layers, width) in enumerate([("target", 2, 32), ("mid", 1, 32),
                                               ("small", 1, 16)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(layers, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


KW = dict(n_prompts=3, prompt_len=16, max_new_tokens=24, warmup=1, cost_contexts=(8, 40),
          cost_repeats=2)


def test_capture_greedy_4_levels(zoo_dir, tmp_path):
    path = capture(CaptureSpec(["target", "mid", "small", "ngram"], [5, 3, 2], zoo_dir=zoo_dir,
                               **KW), out=tmp_path, progress=False)
    t = read_trace(path)
    assert t.complete and t.n == 4 and t.thresholds == (5, 3, 2)
    assert t.header["cascade"]["acceptance"] is None
    assert t.header["threads"] == 1 and t.header["device"] == "cpu"
    assert [m["name"] for m in t.header["models"]] == ["target", "mid", "small", "ngram"]
    assert t.n_prompts == 3
    assert all(s["matches_target_ar"] for s in t.summaries)  # lossless on real prompts
    assert all(s["n_generated"] >= 24 for s in t.summaries)
    raw = read_records(path)
    ar = raw.of_type("ar")
    assert {r["model"] for r in ar} == {"target", "mid", "small", "ngram"}
    assert all(len(r["step_s"]) == 24 for r in ar if r["model"] == "target")
    for lv in (1, 2, 3):
        r = t.rounds[lv - 1]
        assert r.level == lv and len(r) > 0 and (r.G >= [5, 3, 2][lv - 1]).all()
    assert (t.rounds[2].G == 2).all()
    for s in t.summaries:
        k = s["prompt"]
        assert sum(t.rounds[0].L[t.rounds[0].prompt == k]) == s["n_generated"]
    cost = [r for r in raw.of_type("cost") if r["model"] == "target"]
    assert sorted({r["ctx"] for r in cost}) == [8, 40]
    assert sorted({r["phase"] for r in cost}) == ["end", "start"]
    assert sorted({r["m"] for r in cost if r["ctx"] == 8}) == list(range(1, 17))
    assert all(r["median_s"] > 0 and len(r["times_s"]) == 2 for r in cost)
    assert t.measured_speedup > 0
    assert 0 <= t.overhead_fraction < 1


def test_capture_sampling_and_resume(zoo_dir, tmp_path):
    kw = dict(KW, n_prompts=4)
    spec = CaptureSpec(["target", "small"], [3], temperature=1.0, top_k=20, zoo_dir=zoo_dir,
                       seed=3, **kw)
    full = capture(spec, out=tmp_path / "a", progress=False)
    ta = read_trace(full)
    assert all(s["matches_target_ar"] is None for s in ta.summaries)
    # simulate a capture killed during prompt 2: keep lines up to a round of prompt 2,
    # plus half a line
    lines = full.read_text().splitlines(keepends=True)
    cut = max(i for i, ln in enumerate(lines) if '"type":"round","prompt":2' in ln)
    part = tmp_path / "b" / full.name
    part.parent.mkdir()
    part.write_text("".join(lines[:cut]) + lines[cut][:20])
    with pytest.raises(Exception, match="truncated last line"):
        read_trace(part)
    with pytest.raises(Exception, match="exists"):
        capture(spec, out=part.parent, progress=False)
    with pytest.raises(Exception, match="different settings"):
        capture(spec._replace(thresholds=[4]), out=part.parent, name=full.stem, resume=True,
                progress=False)
    capture(spec, out=part.parent, resume=True, progress=False)
    assert read_records(part).n_discarded > 0
    tb = read_trace(part)
    assert tb.complete and tb.n_prompts == 4
    # same seeds per prompt -> the resumed capture decodes the same tokens
    for key in ("A", "G", "prompt"):
        assert getattr(tb.rounds[0], key).tolist() == getattr(ta.rounds[0], key).tolist()


def test_make_prompts_deterministic():
    a, oa = make_prompts(5, 32, seed=1)
    b, ob = make_prompts(5, 32, seed=1)
    assert a == b and oa == ob and all(len(p) == 32 for p in a)
    assert make_prompts(5, 32, seed=2)[1] != oa


def test_cli_capture_and_errors(zoo_dir, tmp_path, capsys):
    rc = main(["capture", "--models", "target,ngram", "--thresholds", "2", "--out",
               str(tmp_path), "--prompts", "1", "--prompt-len", "8", "--tokens", "8",
               "--cost-contexts", "8", "--cost-repeats", "1", "--zoo-dir", str(zoo_dir),
               "--no-progress", "--warmup", "0"])
    assert rc == 0 and "measured speedup" in capsys.readouterr().out
    line = json.loads((tmp_path / "target-ngram_th2_T0.jsonl").read_text().splitlines()[0])
    assert line["cascade"]["models"] == [{"name": "target"}, {"name": "ngram"}]
    bad = [
        (["--models", "target", "--thresholds", "2"], "models"),
        (["--models", "target,ngram", "--thresholds", ""], "thresholds"),
        (["--models", "target,ngram", "--thresholds", "2,2"], "thresholds"),
        (["--models", "target,ngram", "--thresholds", "x"], "thresholds"),
        (["--models", "target,nonexistent", "--thresholds", "2"], "models"),
        (["--models", "target,ngram", "--thresholds", "2", "--temperature", "-1"],
         "temperature"),
    ]
    for extra, field in bad:
        rc = main(["capture", *extra, "--out", str(tmp_path / "x"), "--zoo-dir",
                   str(zoo_dir), "--no-progress"])
        assert rc == 2
        assert f"error: {field}" in capsys.readouterr().err
