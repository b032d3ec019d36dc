"""A real capture (``polyspec capture`` on the committed zoo, tiny settings) killed
with SIGKILL at several moments — while writing its header, in the middle of the start-of-
capture cost curves, between prompts' records, in the middle of the end-of-capture cost
curves — and resumed each time with ``--resume``: the final trace has exactly the records
of an uninterrupted run (cost cells per model and phase, rounds per prompt and level, the
same greedy rounds, one AR run per prompt and model), none lost, none twice. Each killed run
is a process of its own, forked from one that imported torch and the capture once
(:mod:`tests.validation.killpoint`)."""

from __future__ import annotations

import collections
import signal

import pytest

from tests.validation.killpoint import killed_capture
from validation.paths import zoo_dir
from validation.traces.records import read_records, read_trace

MODELS, THRESHOLDS = "target,mid,small", "3,2"
ARGS = ["--models", MODELS, "--thresholds", THRESHOLDS, "--prompts", "2", "--prompt-len",
        "16", "--tokens", "8", "--cost-contexts", "8", "--cost-repeats", "1", "--warmup", "0",
        "--no-progress", "--name", "k"]
CELLS = 16  # m = 1..16 at one context, per model and phase


def _argv(out, *extra):
    return [*ARGS, "--out", str(out), "--zoo-dir", str(zoo_dir()), *extra]


def _killed(out, *extra, kill_at, partial=False):
    """The capture into ``out``, killed as it is about to write its record ``kill_at``."""
    log = out.parent / f"kill{kill_at}.log"
    rc = killed_capture(_argv(out, *extra), kill_at, partial, log)
    assert rc == -signal.SIGKILL, (rc, log.read_text()[-2000:])


def _summary(path):
    """What a finished capture holds, timing aside."""
    tr = read_records(path)
    count = collections.Counter()
    cells = collections.defaultdict(list)
    rounds = collections.defaultdict(list)
    for r in tr.records:
        if r["type"] == "cost":
            cells[(r["model"], r["phase"])].append((r["ctx"], r["m"]))
        elif r["type"] == "round":
            rounds[(r["prompt"], r["level"])].append((r["ctx"], r["G"], r["A"], r["m"]))
        key = (r["type"], r.get("model"), r.get("phase"), r.get("prompt"))
        count[key] += 1
    return tr, count, cells, rounds


@pytest.mark.skipif(not (zoo_dir() / "target.safetensors").exists(), reason="no zoo weights")
def test_capture_killed_at_several_moments_resumes_without_loss_or_duplication(tmp_path):
    # the uninterrupted reference and the last resume (not killed): the same command in this
    # process (only the killed runs need a process of their own)
    from polyspec.cli import main

    assert main(["capture", *_argv(tmp_path / "ref")]) == 0
    ref_path = tmp_path / "ref" / "k.jsonl"
    _, ref_count, ref_cells, ref_rounds = _summary(ref_path)
    assert set(ref_cells) == {(m, ph) for m in ("target", "mid", "small")
                              for ph in ("start", "end")}
    assert all(sorted(v) == [(8, m) for m in range(1, CELLS + 1)] for v in ref_cells.values())
    # where each record of the uninterrupted run sits: writes are numbered from 1 (header)
    kinds = [(r["type"], r.get("phase"), r.get("prompt"))
             for r in read_records(ref_path).records]
    n_prompt0 = sum(1 for t, _, p in kinds if p == 0)
    n_prompt1 = sum(1 for t, _, p in kinds if p == 1)
    out = tmp_path / "run"
    path = out / "k.jsonl"

    # 1. killed while writing the header (half a line, no newline): resume starts afresh
    _killed(out, kill_at=1, partial=True)
    assert path.exists() and b"\n" not in path.read_bytes()
    # 2. killed half-way through writing the start-phase cells of the second model
    _killed(out, "--resume", kill_at=1 + CELLS + 9, partial=True)
    raw = read_records(path, allow_truncated=True)
    start = collections.Counter(r["model"] for r in raw.of_type("cost"))
    assert raw.truncated_tail and start == {"target": CELLS, "mid": 8}
    # 3. resumed, killed in the middle of prompt 1 (prompt 0 finished): after the missing
    # 8 + 16 start cells, prompt 0's records and two records of prompt 1
    _killed(out, "--resume", kill_at=1 + 8 + CELLS + n_prompt0 + 3)
    raw = read_records(path, allow_truncated=True)
    assert [r["prompt"] for r in raw.of_type("summary")] == [0]
    assert sum(1 for r in raw.records if r.get("prompt") == 1) == 2
    assert collections.Counter(r["model"] for r in raw.of_type("cost")) == {
        m: CELLS for m in ("target", "mid", "small")}
    # 4. resumed, killed half-way through the end-phase cells of the second model
    _killed(out, "--resume", kill_at=1 + n_prompt1 + CELLS + 6, partial=True)
    raw = read_records(path, allow_truncated=True)
    end = collections.Counter(r["model"] for r in raw.of_type("cost") if r["phase"] == "end")
    assert [r["prompt"] for r in raw.of_type("summary")] == [0, 1] and not raw.complete
    assert end == {"target": CELLS, "mid": 5} and raw.truncated_tail
    # 5. resumed to the end
    assert main(["capture", *_argv(out, "--resume")]) == 0

    tr, count, cells, rounds = _summary(path)
    assert tr.complete and tr.n_discarded == 2  # prompt 1's two records of attempt 3
    assert count == ref_count  # every record type per model, phase and prompt, once
    assert {k: sorted(v) for k, v in cells.items()} == {k: sorted(v)
                                                        for k, v in ref_cells.items()}
    assert rounds == ref_rounds  # greedy: the same rounds, in the same order
    cap = read_trace(path)
    assert cap.n_prompts == 2 and all(s["matches_target_ar"] for s in cap.summaries)
    resumes = [r for r in read_records(path).records if r["type"] == "resume"]
    assert resumes == []  # resume records are consumed by the reader
    assert sum(1 for line in path.read_text().splitlines() if '"type":"resume"' in line) == 3


def test_batched_capture_cut_in_either_cost_phase_resumes_every_cell_once(tmp_path):
    """The batched capture (``capture --batch``) resumes the same way: a trace cut half-way
    through the start-phase or the end-phase cost cells (a kill, half a line written) gets
    exactly the missing cells, once each."""
    import torch

    from validation.capture.batch import capture_batch
    from validation.capture.setup import CaptureSpec
    from validation.zoo.model import GPT, GPTConfig
    from validation.zoo.weights import save_model

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for i, name in enumerate(("target", "small")):
        torch.manual_seed(i)
        m = GPT(GPTConfig(1, 2, 16))
        save_model(m, zoo / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    spec = CaptureSpec(["target", "small"], [2], n_prompts=2, prompt_len=8, max_new_tokens=6,
                       warmup=0, cost_contexts=(8,), cost_repeats=1, zoo_dir=zoo,
                       batches=(2,))
    kw = dict(progress=False, name="b")
    full = capture_batch(spec, out=tmp_path / "full", **kw)
    lines = full.read_bytes().split(b"\n")[:-1]

    def cells(path):
        c = collections.Counter()
        for r in read_records(path).records:
            if r["type"] == "bcost":
                c[(r["model"], r["phase"], r["ctx"], r["m"])] += 1
        return c

    want = cells(full)
    assert set(want.values()) == {1} and len(want) == 2 * 2 * CELLS
    for phase, k in (("start", 1 + CELLS + 5), ("end", None)):
        if k is None:  # 5 end cells of the second model are in
            ends = [i for i, x in enumerate(lines) if b'"phase":"end"' in x]
            k = ends[CELLS + 5]
        part = tmp_path / phase / "b.jsonl"
        part.parent.mkdir()
        part.write_bytes(b"\n".join(lines[:k]) + b"\n" + lines[k][: len(lines[k]) // 2])
        capture_batch(spec, out=part.parent, resume=True, **kw)
        assert cells(part) == want, phase
        assert read_records(part).complete
