"""The asynchronous two-process pipeline (validation/schemes/async_.py) on tiny random models:
lossless on every prompt with both processes really running on their own cores, rollback
correctness (every drafted block is the drafter's own greedy continuation of the verified
text), a planted rollback bug caught, bad input refused, and its traces (capture --mode
async) read back with the mode recorded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation.capture.async_ import capture_async
from validation.capture.setup import CaptureSpec
from validation.schemes.async_ import (
    AsyncDecoder,
    check_async_args,
    first_divergence,
    pick_cores,
)
from validation.schemes.chain import autoregressive
from validation.traces.records import read_records, read_trace
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

from .tiny_zoo import tiny_family

torch.set_num_threads(1)
TWO_CORES = len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CORES, reason="the pipeline needs two cores")
MAX_NEW = 48
CPU_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "cpu"


def _prompts(n, vocab=16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(rng.integers(1, 12))).tolist() for _ in range(n)]


@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_first_divergence_matches_a_scan(a, b):
    j = 0
    while j < min(len(a), len(b)) and a[j] == b[j]:
        j += 1
    assert first_divergence(a, b) == j == first_divergence(b, a)


@pytest.fixture(scope="module")
def family():
    return tiny_family(2, vocab=16, noise=0.03, block_size=128)


@pytest.fixture(scope="module", params=[(0, 12), (3, 10)])
def runs(request, family):
    """Every prompt decoded by the pipeline at threshold 0 (queue 12) and at threshold 3
    (queue 10: every ready draft up to 10 is checked, AS0), blocks recorded."""
    if not TWO_CORES:
        pytest.skip("the pipeline needs two cores")
    th, q = request.param
    with AsyncDecoder(family, threshold=th, queue=q) as dec:
        res = [dec.generate(p, MAX_NEW, i, record_blocks=True)
               for i, p in enumerate(_prompts(6))]
    return th, res


@needs_two
def test_lossless_on_every_prompt_with_two_pinned_processes(family, runs):
    k, res = runs
    for i, (p, r) in enumerate(zip(_prompts(6), res, strict=True)):
        ar = autoregressive(family[0], p, r.n_generated)
        assert r.tokens == ar.tokens, f"prompt {i}: pipeline output differs from the target"
        assert r.n_generated >= MAX_NEW
        assert r.forward_count[1] > 0 and r.forward_count[0] == len(r.rounds)
        assert len(set(r.pids)) == 2 and os.getpid() not in r.pids
        assert r.cores == pick_cores(2) and len(set(r.cores)) == 2
        ctx = len(p)
        for rd in r.rounds:
            assert rd.ctx == ctx and rd.m == rd.G + 1 and rd.L == rd.A + 1
            assert (3 <= rd.G <= 10) if k else (0 <= rd.G <= 12)
            ctx += rd.L
        assert ctx == len(p) + r.n_generated
        assert len(r.draft_m) == r.forward_count[1] == len(r.draft_fwd_s)
        assert r.wall_s > 0 and all(t > 0 for t in r.draft_fwd_s)
    # over all prompts the drafter ran ahead, got rejected and rolled back
    assert sum(r.rollbacks for r in res) > 0 and sum(r.discarded for r in res) > 0
    assert any(rd.A < rd.G for r in res for rd in r.rounds)
    assert any(rd.A == rd.G > 0 for r in res for rd in r.rounds)


@needs_two
def test_rollback_every_block_is_the_drafters_continuation(family, runs):
    """After each sync the drafter's text (and cache) is the verified text: every block the
    target verifies is the drafter's greedy continuation of the verified prefix."""
    _, res = runs
    n_checked = 0
    for p, r in zip(_prompts(6), res, strict=True):
        text = p + r.tokens
        for rd, block in zip(r.rounds, r.blocks, strict=True):
            if rd.G:
                want = autoregressive(family[1], text[:rd.ctx], rd.G).tokens
                assert block == want, f"block at ctx {rd.ctx} is not the drafter's own"
                assert text[rd.ctx:rd.ctx + rd.A] == block[:rd.A]
                n_checked += 1
    assert n_checked > 10


@needs_two
def test_a_planted_rollback_bug_is_caught(family, tmp_path, monkeypatch):
    """The drafter 'forgets' to adopt the verified tokens after a rejection: the target's
    rollback invariant check stops the decode with a clear error (not silent output)."""
    import validation.schemes.async_ as mod

    src = open(mod.__file__).read()
    line = "                    dtok[j:vlen] = ver[j:]\n"
    assert src.count(line) == 1
    planted_src = src.replace(line, "                    pass\n")
    (tmp_path / "planted_async_decoder.py").write_text(planted_src)
    monkeypatch.syspath_prepend(str(tmp_path))
    import planted_async_decoder as planted

    try:
        with planted.AsyncDecoder(family, queue=12) as dec:
            with pytest.raises(planted.RollbackError, match="rollback bug"):
                for i, p in enumerate(_prompts(6)):
                    dec.generate(p, MAX_NEW, i)
    finally:
        sys.modules.pop("planted_async_decoder", None)


def test_bad_input_is_refused(family):
    with pytest.raises(PolyspecInputError, match="two levels"):
        check_async_args(tiny_family(3), 0, 8)
    assert check_async_args(family, 0, None) == (0, None, 99)
    assert check_async_args(family, 0, 12) == (0, 12, 12)
    assert check_async_args(family, 4, None) == (4, None, 99)  # AS0: every ready draft
    assert check_async_args(family, 4, 6) == (4, 6, 6)
    with pytest.raises(PolyspecInputError, match="threshold"):
        check_async_args(family, -1, 8)
    with pytest.raises(PolyspecInputError, match="queue"):
        check_async_args(family, 10, 8)  # would wait for drafts the drafter never makes
    with pytest.raises(PolyspecInputError, match="queue"):
        check_async_args(family, 0, 0)
    with pytest.raises(PolyspecInputError, match="greedy"):
        check_async_args(family, 0, 8, temperature=0.7)
    with pytest.raises(PolyspecInputError, match="temperature"):
        check_async_args(family, 0, 8, temperature=float("nan"))
    with pytest.raises(PolyspecInputError, match="vocabulary"):
        check_async_args([family[0], tiny_family(1, vocab=8)[0]], 0, 8)
    with pytest.raises(PolyspecInputError, match="3 levels need 3 cores|distinct"):
        pick_cores(3, None if len(os.sched_getaffinity(0)) < 3 else [0, 0, 1])
    with pytest.raises(PolyspecInputError, match="distinct"):
        pick_cores(2, [0, 0])
    with pytest.raises(PolyspecInputError, match="not available"):
        pick_cores(2, [0, 100000])
    if TWO_CORES:  # checked before any process starts
        dec = AsyncDecoder(family, queue=12)
        with pytest.raises(PolyspecInputError, match="context"):
            dec.generate([1, 2], 120)
        with pytest.raises(PolyspecInputError, match="context"):  # window 99 at threshold 0
            AsyncDecoder(family).generate([1, 2], 40)
        with pytest.raises(PolyspecInputError, match="token ids"):
            dec.generate([1, 99], 4)
        with pytest.raises(PolyspecInputError, match="prompt"):
            dec.generate([], 4)
        with pytest.raises(RuntimeError, match="not started"):
            dec.generate([1, 2], 4)


# ------------------------------------------------------------------------- capture + traces
@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, layers, width) in enumerate([("target", 2, 32), ("small", 1, 16)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(layers, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


KW = dict(n_prompts=3, prompt_len=16, max_new_tokens=24, warmup=1, cost_contexts=(8,),
          cost_repeats=1)


@pytest.fixture(scope="module")
def async_trace(zoo_dir, tmp_path_factory):
    if not TWO_CORES:
        pytest.skip("the pipeline needs two cores")
    out = tmp_path_factory.mktemp("traces")
    spec = CaptureSpec(["target", "small"], [2], mode="async", queue=8, zoo_dir=zoo_dir, **KW)
    return capture_async(spec, out=out, progress=False)


@needs_two
def test_capture_async_trace_round_trip(async_trace):
    t = read_trace(async_trace)
    assert t.mode == "async" and t.header["mode"] == "async"
    assert t.thresholds == (2,) and t.header["async"]["queue"] == 8
    assert t.header["async"]["window"] == 8 and t.header["cascade"]["queue"] == [8]
    assert t.header["async"]["cores"] == pick_cores(2)
    assert t.complete and t.n_prompts == 3
    assert all(s["matches_target_ar"] for s in t.summaries)
    g = t.rounds[0].G
    assert (t.rounds[0].m == g + 1).all() and (g >= 2).all() and (g <= 8).all()
    raw = read_records(async_trace)
    # the machine at the start and the end (docs/measuring.md); no check from Python
    assert "cpu_mhz" in t.header["machine"] and t.header["load_check"] is None
    assert "load_average" in raw.of_type("end")[0]["machine"]
    d = raw.of_type("dforwards")
    assert [r["prompt"] for r in d] == [0, 1, 2]
    for r, s in zip(d, t.summaries, strict=True):
        assert len(r["m"]) == s["forward_count"][1] == len(r["wall_s"])
    assert t.measured_speedup > 0


def _rewrite(path, tmp_path, fix):
    lines = [json.loads(x) for x in open(path)]
    fix(lines)
    out = tmp_path / "bad.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


@needs_two
@pytest.mark.parametrize("fix, match", [
    (lambda L: [r.update(G=9, m=10) for r in L if r["type"] == "round"][:1],
     "round.G: an async verify checks"),
    (lambda L: [r.update(m=r["G"] + 2) for r in L if r["type"] == "round"][:1],
     "round.m: an async verify scores"),
    (lambda L: L[0]["async"].update(threshold=5), "async.threshold"),
    (lambda L: L[0]["async"].update(queue=9), "async.queue"),
    (lambda L: L[0]["async"].update(window=3), "async.window"),
    (lambda L: L[0].update(mode="pipelined"), "mode: must be 'sync' or 'async'"),
    (lambda L: L[0].pop("async"), "async: must be an object"),
    (lambda L: [r.update(model="target") for r in L if r["type"] == "dforwards"][:1],
     "not the drafter"),
    (lambda L: [r.update(wall_s=r["wall_s"][:-1]) for r in L if r["type"] == "dforwards"][:1],
     "dforwards.wall_s"),
    (lambda L: [r["forward_count"].__setitem__(0, r["forward_count"][0] + 1)
                for r in L if r["type"] == "summary"][:1], "summary.forward_count"),
])
def test_bad_async_traces_name_the_field(async_trace, tmp_path, fix, match):
    with pytest.raises(PolyspecInputError, match=match):
        read_records(_rewrite(async_trace, tmp_path, fix))


@needs_two
def test_old_traces_read_as_sync_and_dforwards_only_in_async(async_trace, tmp_path):
    def to_sync(L):
        for k in ("mode", "async"):
            L[0].pop(k)
        L[0]["cascade"].pop("mode")
        L[0]["cascade"].pop("queue")
        L[0]["cascade"]["thresholds"] = [1]
        L[1:] = [r for r in L if r["type"] == "dforwards"]
    with pytest.raises(PolyspecInputError, match="dforwards records belong in async"):
        read_records(_rewrite(async_trace, tmp_path, to_sync))
    old = read_trace(next(iter(sorted(CPU_TRACES.glob("target-small_th2_T0.jsonl")))))
    assert "mode" not in old.header and old.mode == "sync"


def test_cli_refuses_what_async_does_not_cover(tmp_path, capsys):
    base = ["capture", "--mode", "async", "--models", "target,small", "--out", str(tmp_path)]
    for extra, msg in [(["--tree=-1,0,0"], "tree"), (["--schedule", "hf:2:1:4"],
                                                        "schedule"),
                       (["--thresholds", "4,2"], "one threshold"),
                       (["--batch", "2"], "one sequence"),
                       (["--top-k", "5"], "greedy")]:
        assert main(base + extra) == 2
        assert msg in capsys.readouterr().err
    assert main(base[:3] + ["--models", "target,small,ngram", "--out", str(tmp_path)]) == 2
    assert "two levels" in capsys.readouterr().err
    assert main(["capture", "--models", "target,small", "--out", str(tmp_path),
                 "--queue", "2", "--thresholds", "2"]) == 2
    assert "--mode async" in capsys.readouterr().err
    assert main(["capture", "--models", "target,small", "--out", str(tmp_path)]) == 2
    assert "--thresholds" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- validate (AS1)
@pytest.fixture(scope="module")
def mixed_dir(async_trace, zoo_dir):
    """The async capture next to a synchronous capture of the same two models."""
    from validation.capture.setup import CaptureSpec
    from validation.capture.single import capture

    spec_kw = {k: v for k, v in KW.items() if k != "progress"}
    capture(CaptureSpec(["target", "small"], [2], zoo_dir=str(zoo_dir), **spec_kw),
            out=async_trace.parent, progress=False)
    return async_trace.parent


@needs_two
def test_validate_predicts_async_captures_from_the_other_captures(mixed_dir, tmp_path, capsys):
    from validation.analysis.async_validate import sync_cost_curves, validate_async
    from validation.analysis.fits import fit_costs
    from validation.traces.records import read_traces

    assert main(["validate", str(mixed_dir), "--json", "--no-plots", "--no-insertions",
                 "--out", str(tmp_path / "rep")]) == 0
    obj = json.loads(capsys.readouterr().out)
    [a] = obj["async"]
    assert [c["name"] for c in obj["configs"]] == ["target-small_th2_T0"]  # sync path apart
    assert a["name"] == "target-small_async_th2_q8_T0" and a["cores"] == 2 and a["lossless"]
    assert a["law_from"] == ["target-small_th2_T0"] == a["costs_from"]
    assert a["predicted_speedup"] > 0 and a["diagnostics"]["in_sample"] > 0
    assert a["diagnostics"]["own_costs"] > 0
    lo, hi = a["bounds"]
    assert lo <= a["predicted_speedup"] <= hi
    caps = read_traces(mixed_dir)
    acap = next(c for c in caps if c.mode == "async")
    scap = next(c for c in caps if c.mode == "sync")
    # costs: the sync capture's calibrated curves at the async capture's mean context, in
    # units of its target T(1)
    t, c, names = sync_cost_curves(acap, [scap])
    fits = fit_costs(scap)
    ctx = 16 + 24 / 2
    t1 = fits["target"].curve(ctx).t1
    assert t.t1 == pytest.approx(1.0) and names == ("target-small_th2_T0",)
    assert t(5) == pytest.approx(fits["target"].curve(ctx)(5) / t1)
    assert c.t1 == pytest.approx(fits["small"].curve(ctx).t1 / t1)
    # the headline never uses the predicted capture's rounds: rewriting its acceptances
    # moves the in-sample diagnostic, not the prediction
    import dataclasses

    r = acap.rounds[0]
    zero = dataclasses.replace(r, A=np.zeros_like(r.A), L=np.ones_like(r.L))
    blind = dataclasses.replace(acap, rounds=(zero,))
    [x] = validate_async([acap], [scap])
    [y] = validate_async([blind], [scap])
    assert x.predicted_speedup == pytest.approx(a["predicted_speedup"])
    assert y.predicted_speedup == x.predicted_speedup
    assert y.in_sample_speedup < x.in_sample_speedup
    # without a synchronous capture of both models: no headline, the diagnostic only
    [z] = validate_async([acap], [])
    assert z.predicted_speedup is None and z.error is None and z.in_sample_speedup > 0
    # costs: captures taken alongside come first (here the same one either way)
    [w] = validate_async([acap], [scap], cost_caps=[scap])
    assert w.predicted_speedup == x.predicted_speedup and w.costs_from == (scap.name,)
