"""Batched captures on tiny random zoo models (``polyspec capture --batch/--batches``): trace
content, the same prompts at every batch size, greedy losslessness per sequence recorded,
interruption + resume, batched and single-stream traces side by side, bad records."""

from __future__ import annotations

import json

import pytest
import torch

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation.capture.batch import capture_batch, capture_batches
from validation.capture.setup import CaptureSpec
from validation.capture.single import capture
from validation.traces.batch import read_batch_trace, read_batch_traces
from validation.traces.records import read_records, read_trace, read_traces
from validation.traces.schema import TraceError
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

torch.set_num_threads(1)

KW = dict(n_prompts=4, prompt_len=16, max_new_tokens=20, warmup=1, cost_contexts=(8, 40),
          cost_repeats=1)


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, layers, width) in enumerate([("target", 2, 32), ("mid", 1, 32),
                                               ("small", 1, 16)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(layers, 2, width))
        with torch.no_grad():
            for p in m.parameters():  # sharper laws: acceptance neither 0 nor 1
                p.mul_(3.0)
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


@pytest.fixture(scope="module")
def sweep(zoo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("batch")
    paths = capture_batches(CaptureSpec(["target", "small", "ngram"], [3, 2], zoo_dir=zoo_dir,
                                        batches=(1, 2, 4), **KW), out=out, progress=False)
    return out, paths


def test_sweep_traces(sweep):
    out, paths = sweep
    assert [p.name for p in paths] == [f"target-small-ngram_th3-2_T0_b{b}.jsonl"
                                       for b in (1, 2, 4)]
    caps = read_batch_traces(out)
    assert [c.batch for c in caps] == [1, 2, 4]
    assert len({c.header["prompts"]["sha256"] for c in caps}) == 1  # same prompts at every b
    for c, b in zip(caps, (1, 2, 4), strict=True):
        assert c.complete and c.n == 3 and c.thresholds == (3, 2)
        h = c.header
        assert h["batch"]["size"] == b and h["batch"]["policy"] == "lockstep"
        assert h["batch"]["waiting"] == "discard" and h["batch"]["kv"] == "per-sequence"
        assert h["batch"]["decodes"] == 4 // b and c.n_decodes == 4 // b
        assert c.greedy_lossless is True  # every sequence = the target's greedy output
        assert c.stops == {"tokens": c.n_decodes}
        raw = read_records(c.path)
        for s in raw.of_type("bsummary"):
            assert max(s["n_generated"]) >= 20 and len(s["n_generated"]) == b
            assert s["prompts"] == [s["decode"] * b + j for j in range(b)]
            fw = [r for r in raw.of_type("bforwards")
                  if r["decode"] == s["decode"] and r["run"] == "cascade"]
            assert len(fw) == 1
            counts = [fw[0]["model"].count(k) for k in range(3)]
            assert counts == s["forward_count"]
            assert sum(fw[0]["wall_s"]) == pytest.approx(sum(s["forward_s"]), abs=1e-5)
            assert s["wall_s"] >= sum(s["forward_s"]) - 1e-6
        for r in raw.of_type("bar"):
            assert r["n_steps"] == 20 and r["batch"] == b and r["model"] == "target"
        cost = raw.of_type("bcost")
        assert {r["model"] for r in cost} == {"target", "small", "ngram"}
        assert {r["phase"] for r in cost} == {"start", "end"}
        assert {r["batch"] for r in cost} == {b}
        assert sorted({r["m"] for r in cost}) == list(range(1, 17))
        assert sorted({r["ctx"] for r in cost}) == [8, 40]
        for lv, st in enumerate(c.structure(), start=1):
            assert st["mean_G"] >= (3, 2)[lv - 1]
        assert c.measured_speedup > 0 and c.ar_tokens_per_second > 0
    # the kept rounds of a prompt are the same whichever batch it was decoded in (greedy),
    # up to where its decode stopped (when the batch's first sequence had its tokens)
    by_b = {c.batch: c for c in caps}
    for lv in range(2):
        r1, r4 = by_b[1].rounds[lv], by_b[4].rounds[lv]
        for p in range(4):
            g1, g4 = list(r1.G[r1.prompt == p]), list(r4.G[r4.prompt == p])
            a1, a4 = list(r1.A[r1.prompt == p]), list(r4.A[r4.prompt == p])
            k = min(len(g1), len(g4))
            assert k > 0 and g4[:k] == g1[:k] and a4[:k] == a1[:k]


def test_resume_and_interrupted(zoo_dir, tmp_path):
    kw = dict(KW, n_prompts=6)
    spec = CaptureSpec(["target", "small"], [2], temperature=1.0, top_k=20, zoo_dir=zoo_dir,
                       seed=3, batches=(2,), **kw)
    full = capture_batch(spec, out=tmp_path / "a", progress=False)
    a = read_batch_trace(full)
    assert a.greedy_lossless is None and a.n_decodes == 3
    lines = full.read_text().splitlines(keepends=True)
    cut = max(i for i, ln in enumerate(lines) if '"type":"bround","decode":1' in ln)
    part = tmp_path / "b" / full.name
    part.parent.mkdir()
    part.write_text("".join(lines[:cut]) + lines[cut][:25])
    with pytest.raises(TraceError, match="truncated last line"):
        read_batch_trace(part)
    b1 = read_batch_trace(part, allow_truncated=True)
    assert b1.n_decodes == 1 and not b1.complete
    with pytest.raises(PolyspecInputError, match="^out"):
        capture_batch(spec, out=tmp_path / "b", progress=False)
    with pytest.raises(PolyspecInputError, match="^resume"):
        capture_batch(spec._replace(seed=4), out=tmp_path / "b", resume=True,
                      progress=False)
    capture_batch(spec, out=tmp_path / "b", resume=True, progress=False)
    b = read_batch_trace(part)
    assert b.complete and b.n_decodes == 3
    assert any("interrupted attempt" in n for n in b.notes)
    # per-decode seeds: the resumed decodes draw exactly what the uninterrupted run drew
    for i in range(1):
        assert list(b.rounds[i].A) == list(a.rounds[i].A)
        assert list(b.rounds[i].prompt) == list(a.rounds[i].prompt)
    assert [s["n_generated"] for s in b.summaries] == [s["n_generated"] for s in a.summaries]


def test_batched_and_single_stream_traces_side_by_side(zoo_dir, sweep, tmp_path):
    out, paths = sweep
    single = capture(CaptureSpec(["target", "small"], [3], zoo_dir=zoo_dir,
                                 **dict(KW, n_prompts=2)), out=out, progress=False)
    caps = read_traces(out)  # single-stream readers skip the batched traces
    assert [c.name for c in caps] == [single.stem]
    assert len(read_batch_traces(out)) == 3  # and the batched reader skips the other
    with pytest.raises(TraceError, match="batched trace"):
        read_trace(paths[0])
    with pytest.raises(TraceError, match="not a batched trace"):
        read_batch_trace(single)
    only = tmp_path / "only"
    only.mkdir()
    (only / paths[0].name).write_text(paths[0].read_text())
    with pytest.raises(TraceError, match="no single-stream traces"):
        read_traces(only)


def _edit(path, tmp_path, kind, change):
    lines = path.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if f'"type":"{kind}"' in ln)
    rec = json.loads(lines[i])
    change(rec)
    lines[i] = json.dumps(rec, separators=(",", ":"))
    p = tmp_path / path.name
    p.write_text("\n".join(lines) + "\n")
    return p, i + 1


@pytest.mark.parametrize("kind,change,msg", [
    ("bround", lambda r: r.update(A=r["G"] + 1), "inconsistent round"),
    ("bround", lambda r: r.update(seq=7), "seq 7 out of range"),
    ("bround", lambda r: r.update(level=5), "level 5 out of range"),
    ("bbatch", lambda r: r.update(K=0), "inconsistent batched round"),
    ("bforwards", lambda r: r.update(m=r["m"][:-1]), "one entry per forward"),
    ("bforwards", lambda r: r.update(model=[9] * len(r["model"])), "model indices"),
    ("bsummary", lambda r: r.update(n_generated=[1]), "n_generated needs"),
    ("bar", lambda r: r.update(n_steps=3), "step_s needs"),
    ("bcost", lambda r: r.update(type="cost"), "does not belong in a batched trace"),
    ("bsummary", lambda r: r.pop("wall_s"), "misses field"),
])
def test_bad_records_name_the_line(sweep, tmp_path, kind, change, msg):
    _, paths = sweep
    p, line = _edit(paths[1], tmp_path, kind, change)
    with pytest.raises(TraceError, match=f"line {line}: .*{msg}"):
        read_records(p)


def test_capture_cli(zoo_dir, tmp_path, capsys):
    base = ["capture", "--models", "target,small", "--thresholds", "2", "--out",
            str(tmp_path), "--zoo-dir", str(zoo_dir), "--tokens", "12", "--prompt-len", "16",
            "--warmup", "0", "--cost-contexts", "8", "--cost-repeats", "1", "--no-progress"]
    rc = main(base + ["--batches", "1,2", "--prompts", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.count("greedy lossless") == 2 and "b = 2" in out
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == [
        "target-small_th2_T0_b1.jsonl", "target-small_th2_T0_b2.jsonl"]
    rc = main(base + ["--batch", "4", "--prompts", "6"])
    _, err = capsys.readouterr()
    assert rc == 2 and "n_prompts" in err
    rc = main(base + ["--batches", "1,x"])
    _, err = capsys.readouterr()
    assert rc == 2 and "--batches" in err
    rc = main(base + ["--batch", "2", "--prompts", "2", "--name", "mine"])
    assert rc == 0 and (tmp_path / "mine_b2.jsonl").exists()
    capsys.readouterr()
