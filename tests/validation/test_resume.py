"""Interrupted traces: whatever line a capture was killed at, reading and resuming keep every
complete record (in particular the last one) and drop only a cut last line; ``--resume``
continues at the first prompt without a summary and discards exactly that prompt's partial
records.

The sweep cuts a synthetic trace at every record boundary, with and without half of the next
line (a write interrupted mid-line); the end-to-end test resumes a real capture of tiny zoo
models cut right after a summary. No randomness beyond fixed seeds: no false-failure rate.
"""

from __future__ import annotations

import json

import pytest
import torch

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from validation.capture.setup import CaptureSpec, resume_point
from validation.capture.single import capture
from validation.traces.records import TraceWriter, read_records
from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trace_lines(tmp_path_factory):
    cap, recs = simulate_capture(SyntheticSpec(
        "cut", ["t", "d"], [CostCurve.affine(1e-3, 1e-4), CostCurve.constant(1e-4)],
        [IIDGeometric(0.6)], [3], tokens_per_prompt=10, prompts=3, baseline_contexts=(32,),
        baseline_max_m=2, baseline_reps=1, ar_tokens=3, seed=4))
    path = write_trace(tmp_path_factory.mktemp("full") / "cut.jsonl", cap, recs)
    lines = path.read_bytes().split(b"\n")[:-1]
    assert sum(json.loads(x)["type"] == "summary" for x in lines) == 3
    return [x + b"\n" for x in lines]


def _expected_resume(kept):
    summaries = sum(r["type"] == "summary" for r in kept)
    start_costs = any(r["type"] == "cost" and r.get("phase") == "start" for r in kept)
    return summaries, start_costs


@pytest.mark.parametrize("partial", [False, True], ids=["at-boundary", "half-line-after"])
def test_cut_at_every_record_boundary(trace_lines, tmp_path, partial):
    path = tmp_path / "t.jsonl"
    for k in range(1, len(trace_lines)):  # keep the first k complete lines (header first)
        body = b"".join(trace_lines[:k])
        tail = trace_lines[k][: len(trace_lines[k]) // 2] if partial else b""
        path.write_bytes(body + tail)
        want = [json.loads(x) for x in trace_lines[1:k]]
        tr = read_records(path, allow_truncated=True)
        assert tr.records == want, k  # every complete record, the last one included
        assert tr.truncated_tail is partial and tr.n_discarded == 0
        assert not tr.complete
        start, have_costs = resume_point(tr)
        assert (start, have_costs) == _expected_resume(want), k
        # reopening for append cuts only the partial line
        TraceWriter(path, append=True).close()
        assert path.read_bytes() == body, k
        # the resume record discards exactly the records of the unfinished prompt
        with TraceWriter(path, append=True) as w:
            w.write({"type": "resume", "next_prompt": start})
        again = read_records(path)
        kept = [r for r in want if "prompt" not in r or r["prompt"] < start]
        assert again.records == kept, k
        assert again.n_discarded == len(want) - len(kept), k


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    from validation.zoo.model import GPT, GPTConfig
    from validation.zoo.weights import save_model

    d = tmp_path_factory.mktemp("zoo")
    for i, (name, layers, width) in enumerate([("target", 1, 16), ("small", 1, 16)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(layers, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


def test_resume_after_a_summary_keeps_it_and_redoes_nothing(zoo_dir, tmp_path):
    spec = CaptureSpec(["target", "small"], [2], n_prompts=3, prompt_len=8, max_new_tokens=10,
                       warmup=0, cost_contexts=(8,), cost_repeats=1, temperature=1.0, seed=5,
                       zoo_dir=zoo_dir)
    full = capture(spec, out=tmp_path / "a", progress=False)
    lines = full.read_bytes().split(b"\n")[:-1]
    lines = [x + b"\n" for x in lines]
    types = [json.loads(x)["type"] for x in lines]
    last_summary = [i for i, t in enumerate(types) if t == "summary"][1]  # prompt 1's
    part = tmp_path / "b" / full.name
    part.parent.mkdir()
    cut = b"".join(lines[: last_summary + 1])
    part.write_bytes(cut + lines[last_summary + 1][:15])  # killed while writing the next
    capture(spec, out=part.parent, resume=True, progress=False)
    tr = read_records(part)
    assert tr.complete and tr.n_discarded == 0  # prompts 0 and 1 were not redone
    assert part.read_bytes().startswith(cut)  # every complete record kept byte for byte
    res = [json.loads(x) for x in part.read_bytes().split(b"\n")[:-1]
           if json.loads(x)["type"] == "resume"]
    assert [r["next_prompt"] for r in res] == [2]
    summaries = tr.of_type("summary")
    assert [s["prompt"] for s in summaries] == [0, 1, 2]
    original = [json.loads(x) for x in lines if json.loads(x)["type"] == "summary"]
    assert summaries[:2] == original[:2]
    # prompt 2 is decoded with its own seed: the same tokens as in the uninterrupted run
    rounds = [(r["prompt"], r["G"], r["A"]) for r in tr.of_type("round")]
    assert rounds == [(r["prompt"], r["G"], r["A"]) for r in
                      (json.loads(x) for x in lines) if r["type"] == "round"]
