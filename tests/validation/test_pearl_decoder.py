"""The parallel draft-verify decoder (two pinned processes, lockstep steps; docs/theory.md
PL0) on tiny models: lossless on every sequence of a batch, each step's records obey PL0's
transitions, every drafted block is the drafter's own greedy continuation of the target's
text, the benchmark's counts (run list, tokens) by hand, bad input refused; and on
context-hash models whose checks are iid Bernoulli(alpha), the decoder's counted tokens and
MAT against PL3's exact expectations (z = 4.5, two comparisons: false-failure probability
<= 1.4e-5; fixed prompts, so the verdict is the same on every run)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes.pearl import pearl_horizon
from validation.schemes.chain import autoregressive
from validation.schemes.pearl import PearlDecoder, PearlStep, counted_tokens, run_lists

from .pearl_fakes import HashLevel
from .tiny_zoo import tiny_family

torch.set_num_threads(1)
needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                               reason="the decoder runs two processes on two cores")
Z = 4.5


def _prompts(n, vocab=16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(rng.integers(1, 12))).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def family():
    return tiny_family(2, vocab=16, noise=0.03, block_size=160)


@pytest.fixture(scope="module", params=[(1, 1), (3, 3), (4, 2)])
def runs(request, family):
    """(gamma, batch): a batch of prompts of different lengths, 24 steps, blocks recorded."""
    gamma, b = request.param
    with PearlDecoder(family, gamma=gamma) as dec:
        res = dec.generate(_prompts(b, seed=gamma), 24, record_blocks=True)
    return gamma, res


@needs_two
def test_lossless_on_every_sequence(family, runs):
    gamma, r = runs
    for j, (p, tok) in enumerate(zip(r.prompts, r.tokens, strict=True)):
        assert len(tok) >= 24
        ar = autoregressive(family[0], p, len(tok))
        assert tok == ar.tokens, f"sequence {j}: output differs from the target's greedy text"
    assert len(r.pids) == 2 and r.pids[0] != r.pids[1] and r.cores[0] != r.cores[1]


@needs_two
def test_steps_follow_pl0(runs):
    """Every sequence starts in pre-verify; it is in post-verify at a step iff the step
    before accepted all its checks; verified = checks if all accepted, else accepted + 1;
    the target's forward scores gamma positions iff some sequence is in post-verify; the
    pending drafts at the end are gamma - 1 iff it ended in post-verify."""
    gamma, r = runs
    b = r.batch
    prev = [False] * b
    for s in r.steps:
        assert list(s.post) == prev
        assert s.m == (gamma if any(s.post) else 1)
        nxt = []
        for j in range(b):
            checks = gamma if s.post[j] else 1
            assert 0 <= s.accepted[j] <= checks
            full = s.accepted[j] == checks
            assert s.verified[j] == (checks if full else s.accepted[j] + 1)
            nxt.append(full)
        prev = nxt
    for j in range(b):
        assert sum(s.verified[j] for s in r.steps) == len(r.tokens[j])
        assert len(r.pending[j]) == (gamma - 1 if prev[j] else 0)
    assert r.draft_forwards == gamma * len(r.steps)


@needs_two
def test_blocks_are_the_drafters_greedy_continuation(family, runs):
    """The block of step s is the drafter's own greedy continuation of the target's text at
    the step's start (verified text + pending drafts): the drafter was rolled back right."""
    gamma, r = runs
    for j in range(r.batch):
        verified = 0
        pend: list[int] = []
        for s, blk in zip(r.steps, r.blocks, strict=True):
            prefix = r.prompts[j] + r.tokens[j][:verified] + pend
            want = autoregressive(family[1], prefix, gamma).tokens
            assert blk[j] == want, f"sequence {j}, step {s.step}"
            full = s.accepted[j] == (gamma if s.post[j] else 1)
            verified += s.verified[j]
            pend = blk[j][1:] if full else []


def test_run_list_and_counted_tokens_by_hand():
    """gamma 3: pre accept (1 accepted), post all (3), post rejection after 1 (2 verified),
    pre rejection (1), pre accept (1): runs [1+3+1+1, 0+1, 1], tokens 1 + 8 + 2 (ends in
    post-verify with 2 pending)."""
    def st(i, post, acc, ver):
        return PearlStep(i, (post,), (acc,), (ver,), 3, 0.0, 0.0, 0.0, 0.0)

    steps = [st(0, False, 1, 1), st(1, True, 3, 3), st(2, True, 1, 2), st(3, False, 0, 1),
             st(4, False, 1, 1)]
    assert run_lists(steps, 3, 1) == [[6, 1, 1]]
    assert counted_tokens(steps, 3, 1) == [1 + 8 + 2]
    assert counted_tokens(steps[:4], 3, 1) == [1 + 7]


def test_refusals(family):
    with pytest.raises(PolyspecInputError, match="models"):
        PearlDecoder(tiny_family(3, vocab=16), gamma=2)
    with pytest.raises(PolyspecInputError, match="temperature"):
        PearlDecoder(family, gamma=2, temperature=1.0)
    with pytest.raises(PolyspecInputError, match="gamma"):
        PearlDecoder(family, gamma=0)
    dec = PearlDecoder(family, gamma=4)
    with pytest.raises(PolyspecInputError, match="steps"):
        dec._check_prompts([[1, 2]], 40)  # 2 + 4 x 42 > 160
    with pytest.raises(PolyspecInputError, match=r"prompts\[1\]"):
        dec._check_prompts([[1], [99]], 3)
    with pytest.raises(PolyspecInputError, match="prompts"):
        dec._check_prompts([], 3)


@needs_two
def test_hash_models_match_pl3():
    """alpha 0.75, gamma 3, 40 steps, 6 batches of 8: mean tokens counted as the benchmark
    counts them and mean per-sequence MAT against PL3 (the step costs do not matter here)."""
    alpha, gamma, steps, b = 0.75, 3, 40, 8
    models = [HashLevel("t", vocab=1000), HashLevel("d", vocab=1000, alpha=alpha)]
    counted, mats = [], []
    with PearlDecoder(models, gamma=gamma) as dec:
        for k in range(6):
            rng = np.random.default_rng(100 + k)
            prompts = [rng.integers(0, 1000, 5).tolist() for _ in range(b)]
            r = dec.generate(prompts, steps)
            counted += r.counted()
            mats += [float(np.mean(x)) for x in r.runs()]
            for p, tok in zip(prompts, r.tokens, strict=True):  # lossless here too
                want = list(p)
                for _ in tok:
                    want.append(models[0].token(want))
                assert tok == want[len(p):]
    h = pearl_horizon(IIDGeometric(alpha), gamma, np.ones(b + 1), steps)
    for x, exact in ((counted, h.counted), (mats, h.mat)):
        x = np.asarray(x, dtype=float)
        se = x.std(ddof=1) / np.sqrt(x.size)
        assert abs(x.mean() - exact) <= Z * se, (x.mean(), se, exact)


# --- its traces and how a capture is predicted ---------------------------------------------

def _checker(gamma, b, steps):
    from types import SimpleNamespace

    from validation.schemes.pearl import pearl_header

    return SimpleNamespace(names=("t", "d"), thresholds=(gamma,),
                           pearl=pearl_header(gamma, b, steps))


def _records(r, run=0):
    from validation.schemes.pearl import trace_records

    return trace_records(r, run)


@needs_two
def test_trace_records_pass_the_checks(runs):
    import copy

    from validation.schemes.pearl import check_pearl_records, check_record

    gamma, r = runs
    ck = _checker(gamma, r.batch, len(r.steps))
    recs = _records(r, 0) + _records(r, 1)
    for rec in copy.deepcopy(recs):
        check_record(ck, rec)
    assert check_pearl_records(recs, ck.pearl) is None
    assert recs[-1]["n_generated"] == [len(t) for t in r.tokens]


@needs_two
def test_tampered_traces_are_refused(runs):
    import copy

    from validation.schemes.pearl import check_pearl_records, check_record
    from validation.traces.schema import FieldError

    gamma, r = runs
    ck = _checker(gamma, r.batch, len(r.steps))
    recs = _records(r)
    i = next(k for k, s in enumerate(r.steps) if s.accepted[0] < (gamma if s.post[0] else 1))
    bad = copy.deepcopy(recs[i])
    bad["verified"][0] += 1  # a rejection verifies accepted + 1
    with pytest.raises(FieldError, match=r"verified\[0\]"):
        check_record(ck, bad)
    bad = copy.deepcopy(recs[0])
    bad["m"] = gamma + 1
    with pytest.raises(FieldError, match="^m"):
        check_record(ck, bad)
    flipped = copy.deepcopy(recs)
    flipped[i + 1]["post"][0] = 1 - flipped[i + 1]["post"][0]
    assert check_pearl_records(flipped, ck.pearl)[0] == i + 1
    short = copy.deepcopy(recs)
    short[-1]["n_generated"][0] -= 1
    err = check_pearl_records(short, ck.pearl)
    assert err[0] == len(recs) - 1 and "generated" in err[1]
    assert check_pearl_records(recs[:3] + recs[-1:], ck.pearl)[1].startswith("prun: run 0 has 3")


def test_header_checks():
    from validation.schemes.pearl import check_header, pearl_header
    from validation.traces.schema import FieldError

    ck = _checker(3, 2, 10)
    good = {"cascade": {"mode": "pearl"}, "pearl": pearl_header(3, 2, 10)}
    check_header(good, ck)
    with pytest.raises(FieldError, match="cascade.mode"):
        check_header({**good, "cascade": {"mode": "async"}}, ck)
    with pytest.raises(FieldError, match="pearl.gamma"):
        check_header({**good, "pearl": pearl_header(4, 2, 10)}, ck)
    with pytest.raises(FieldError, match="pearl.forward"):
        check_header({**good, "pearl": {**pearl_header(3, 2, 10), "forward": "x"}}, ck)


@needs_two
def test_predict_capture_on_hash_models():
    """alpha 0.6, gamma 2, batch 4, 30 steps, 8 decodes: PL3 with the law known in advance and
    the step costs measured on the other decodes (a prediction: nothing of a decode goes into
    its own forecast) against what each decode measured; pooled, tokens per step within 4.5
    standard errors; the same with everything fitted in sample is labelled a diagnostic."""
    from validation.schemes.pearl import pearl_header, predict_capture

    alpha, gamma, b, steps = 0.6, 2, 4, 30
    models = [HashLevel("t", vocab=500), HashLevel("d", vocab=500, alpha=alpha)]
    decodes = []
    with PearlDecoder(models, gamma=gamma) as dec:
        for k in range(8):
            rng = np.random.default_rng(200 + k)
            decodes.append(_records(dec.generate([rng.integers(0, 500, 4).tolist()
                                                  for _ in range(b)], steps), k))
    head = pearl_header(gamma, b, steps)
    pred, meas = [], []
    for k, recs in enumerate(decodes):
        others = [r for j, d in enumerate(decodes) if j != k for r in d]
        costs = predict_capture(head, others)["step_costs"]
        out = predict_capture(head, recs, law=IIDGeometric(alpha), step_costs=costs)
        assert out["kind"] == "prediction" and out["fitted_in_sample"] == []
        pred.append(out["predicted"]["tokens_per_step"])
        meas.append(out["measured"]["tokens_per_step"])
    diff = np.asarray(meas) - np.asarray(pred)
    assert abs(diff.mean()) <= Z * diff.std(ddof=1) / np.sqrt(diff.size)
    diag = predict_capture(head, decodes[0])
    assert diag["kind"] == "diagnostic" and diag["fitted_in_sample"] == ["law", "step costs"]
    assert 0.3 < diag["measured"]["alpha_checks"] < 0.9


@needs_two
def test_polyspec_capture_runs_it(tmp_path, capsys):
    """``polyspec capture --mode pearl`` runs this decoder through the scheme's own driver
    (no command edited): the zoo's target and drafter, 2 prompts in one batch of 2, 6 steps;
    the trace reads back through the trace reader with its header's gamma, batch and steps,
    and options the decoder does not take are refused in one line naming them."""
    from polyspec.cli import main
    from validation.traces.records import read_records

    out = tmp_path / "out"
    out.mkdir()
    argv = ["capture", "--models", "target,draft-t", "--mode", "pearl", "--thresholds", "2",
            "--batch", "2", "--prompts", "2", "--tokens", "6", "--out", str(out),
            "--allow-load", "--no-progress"]
    assert main(argv) == 0
    (path,) = out.glob("*.jsonl")
    assert "parallel draft-verify steps" in capsys.readouterr().out
    tr = read_records(path)
    assert tr.complete and tr.header["pearl"] == {"gamma": 2, "batch": 2, "steps": 6,
                                                  "forward": "padded"}
    assert [r["type"] for r in tr.records].count("pstep") == 6
    for bad, field in ((["--models", "target,mid,draft-t", "--thresholds", "2,2"], "models"),
                       (["--queue", "3"], "--queue"), (["--temperature", "0.5"],
                                                       "temperature")):
        args = list(argv)
        for k in range(0, len(bad), 2):
            i = args.index(bad[k]) if bad[k] in args else None
            if i is None:
                args += bad[k:k + 2]
            else:
                args[i + 1] = bad[k + 1]
        assert main(args + ["--force"]) == 2
        assert capsys.readouterr().err.strip().startswith(f"polyspec capture: error: {field}")


def test_a_written_trace_reads_back_through_the_trace_reader(family, tmp_path):
    """capture_pearl writes header + pstep/prun records + end; validation.traces reads it with
    this scheme's checks (the scheme decided from the header's mode); an edited step is
    refused naming its line; an existing file is never overwritten."""
    import json

    from validation.schemes.pearl import capture_pearl
    from validation.traces.records import read_records
    from validation.traces.schema import TraceError

    path = tmp_path / "pearl.jsonl"
    capture_pearl(family, _prompts(5, seed=9), gamma=3, batch=2, steps=12, out=path)
    tr = read_records(path)
    assert tr.complete and tr.header["pearl"] == {"gamma": 3, "batch": 2, "steps": 12,
                                                  "forward": "padded"}
    assert [r["type"] for r in tr.records].count("prun") == 2  # the 5th prompt is dropped
    lines = path.read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if '"pstep"' in x and '"step": 3' in x)
    rec = json.loads(lines[k])
    rec["verified"][0] += 5
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:k] + [json.dumps(rec)] + lines[k + 1:]) + "\n")
    with pytest.raises(TraceError, match=rf"line {k + 1}: pstep\.verified\[0\]"):
        read_records(bad)
    with pytest.raises(PolyspecInputError, match="^out: .*(exists|overwritten)"):
        capture_pearl(family, _prompts(2), gamma=3, batch=2, steps=2, out=path)
