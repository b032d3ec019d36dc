"""Forecasts of PipeSpec cascades from the other runs, on the trimmed fixture copies."""

import shutil

import numpy as np
import pytest

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.pipespec_forecast import (
    draft_step,
    forecast_chain,
    forecast_dir,
    leave_one_out,
    reject_cost,
    verify_costs,
)
from validation.formats.pipespec import read_pipespec_dir

from . import FIX, B, M, S


def test_leave_one_out_covers_the_sweep_only(runs):
    loo = leave_one_out(runs, seeds=2)
    assert sorted(c["lookahead"] for c in loo) == [2, 4, 8, 16, 20]
    for c in loo:
        assert c["models"] == [S, M]
        assert c["error"] == pytest.approx(c["predicted_speedup"] / c["measured_speedup"] - 1)
        assert abs(c["error"]) < 0.25  # 3 prompts only: a sanity bound, not the target


def test_costs_come_from_the_logged_calls(runs):
    small = [r for r in runs if r.strategy == "chain" and r.models[0].name == S]
    want = np.concatenate([s.model_times[0] for r in small for s in r.samples]).mean()
    assert draft_step(runs, S, "float16") == pytest.approx(want)
    point, lo, hi, note = verify_costs(runs, M, "float16")
    assert "carried from float32" in note
    # the carried cost at one token is the fp16 step (ratio of the steps, by construction)
    step16 = draft_step(runs, M, "float16")
    assert np.interp(1.0, point[0], point[1]) == pytest.approx(step16, rel=1e-12)
    assert np.interp(1.0, hi[0], hi[1]) > step16
    # fp16 carried cost sits between the fp16 single step and the fp32 verify cost
    for m in (2, 8, 20):
        lo_v = np.interp(m, lo[0], lo[1])
        hi_v = np.interp(m, hi[0], hi[1])
        p_v = np.interp(m, point[0], point[1])
        assert lo_v <= p_v <= hi_v


def test_reject_cost_is_rejecting_minus_full_calls(runs):
    r = next(x for x in runs if x.strategy == "chain" and x.names == (S, M)
             and x.lookahead == 8)
    rej, full = [], []
    for s in r.samples:
        for j, (a, t) in enumerate(zip(s.accepted[0], s.model_times[1], strict=True)):
            if j > 0 and s.accepted[0][j - 1] == 8 and a == 1:
                continue  # may have fed one token
            (rej if a < 8 else full).append(t)
    want = max(0.0, np.mean(rej) - np.mean(full))
    only = [r] + [x for x in runs if x.is_baseline]
    assert reject_cost(only, M, "float32") == pytest.approx(want, rel=1e-12)


def test_three_model_forecast_interval_and_sources(runs):
    f = forecast_chain(runs, (S, M, B), 8, {M: "float16"}, model_error=0.02, seeds=2)
    lo, hi = f["interval95"]
    assert lo < f["speedup"] < hi
    assert f["precisions"] == {S: "float16", M: "float16", B: "4bit"}
    assert len(f["acceptance_source"]) == 3
    assert "revealed by 1 two-model" in f["acceptance_source"][2]  # the 8B -> 70B run


def test_a_costlier_drafter_lowers_the_forecast(runs, tmp_path):
    import json

    d = tmp_path / "p"
    shutil.copytree(FIX, d)
    base = forecast_chain(read_pipespec_dir(d), (S, M), 6, {M: "float32"}, seeds=2)["speedup"]
    for p in d.glob("chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-*.json"):
        obj = json.loads(p.read_text())
        for r in obj["results"]:
            r["metrics"]["model_times"][0] = [2 * t for t in r["metrics"]["model_times"][0]]
            r["metrics"]["total_time"] += sum(r["metrics"]["model_times"][0]) / 2
        p.write_text(json.dumps(obj))
    slow = forecast_chain(read_pipespec_dir(d), (S, M), 6, {M: "float32"}, seeds=2)["speedup"]
    assert slow < base


def test_the_async_runs_do_not_enter_a_chain_forecast(tmp_path):
    """The chain forecast's token counts come from the synchronous runs (the chain's, the
    greedy baseline's): async runs that generated one token more (an async chain may, by up
    to one verify call) leave it unchanged, number for number."""
    import json

    d = tmp_path / "p"
    shutil.copytree(FIX, d)
    base = forecast_chain(read_pipespec_dir(d), (S, M), 6, {M: "float32"}, seeds=2)
    changed = 0
    for p in d.glob("async-chain_*.json"):
        obj = json.loads(p.read_text())
        for r in obj["results"]:
            last = r["metrics"]["accepted_tokens"][-1]
            r["metrics"]["tokens_generated"] = 2 + int(sum(last))  # one past 1 + sum
            changed += 1
        p.write_text(json.dumps(obj))
    runs = read_pipespec_dir(d)
    assert changed > 0 and {s.tokens_generated for r in runs if r.strategy == "async-chain"
                            for s in r.samples} != {s.tokens_generated for r in runs
                                                    if r.strategy == "chain" for s in r.samples}
    assert forecast_chain(runs, (S, M), 6, {M: "float32"}, seeds=2) == base


def test_a_measured_configuration_is_refused_naming_the_file():
    with pytest.raises(PolyspecInputError, match=r"chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-"
                                                 r"Instruct_8\.json"):
        forecast_dir(FIX, (S, M), 8, {M: "float32"})


def test_bad_forecast_inputs(runs):
    for k in (0, 101, True, 2.5):
        with pytest.raises(PolyspecInputError, match="lookahead"):
            forecast_chain(runs, (S, M), k)
    with pytest.raises(PolyspecInputError, match="models"):
        forecast_chain(runs, (S, "nope"), 4)
    with pytest.raises(PolyspecInputError, match="dtype"):
        forecast_chain(runs, (S, M), 4, {"other": "float16"})


def test_70b_verify_is_a_step_from_its_1_token_calls_to_its_full_k_token_calls(runs):
    # independent classification: after a fully accepted round (8 tokens), a call that
    # accepts 1 fed 1 token when it is in the fast cluster (below the midpoint of the
    # fastest such call and the mean rejecting 8-token call); full = accepted 8 tokens
    ones, rej, full = [], [], []
    for r in runs:
        if r.strategy == "chain" and len(r.models) == 2 and r.target.name == B:
            amb = []
            for s in r.samples:
                a, t = s.accepted[0], s.model_times[1]
                for j in range(len(a)):
                    unsure = j > 0 and a[j - 1] == 8 and a[j] == 1
                    (amb if unsure else full if a[j] == 8 else rej).append(t[j])
            thr = (min(amb) + np.mean(rej)) / 2
            ones += [x for x in amb if x < thr]
    point, lo, hi, note = verify_costs(runs, B, "4bit")
    assert point[0] == (1.0, 2.0, 8.0) and point[2] == "flat"
    assert point[1] == pytest.approx((np.mean(ones), np.mean(full), np.mean(full)))
    assert np.mean(ones) < 0.5 * np.mean(full)  # the step the timed calls show
    # the interval's cheap end is the line from T(1); the dear end the step, linear beyond
    assert lo[0] == (1.0, 8.0) and hi[0] == point[0] and hi[2] == "linear"
    assert "1-token verify calls" in note


def test_lookahead_one_is_forecast_from_the_measured_step_costs(runs):
    from validation.analysis.pipespec_forecast import draft_costs, one_token_verify

    f = forecast_chain(runs, (S, M), 1, {M: "float32"}, seeds=2)
    t1 = one_token_verify(runs, M, "float32")[0]
    d, _, reset, _ = draft_costs(runs, S, "float16", (M, "float32"))
    # a round: at most one drafter step (plus its reset) and a 1-token verify; >= the verify
    per = f["predicted_time_per_token_s"]
    assert t1 < per < t1 + d + reset + 0.01  # + per-round and per-prompt overhead
    assert 0.3 < f["speedup"] < 1.0
    assert any("T(1) = mean of" in c for c in f["cost_source"])


def test_draft_costs_split_reset_steps_by_hand():
    from validation.analysis.pipespec_forecast import draft_costs
    from validation.formats.pipespec import ModelSpec, PipeSample, PipeSpecRun

    # K=3, accepted [3, 1, 2]: round 1 (first) 2 steps, round 2 (after a full round) 3
    # steps, round 3 (after a rejection) 2 steps, the first after the reset
    a, b = ModelSpec("a", "x/a", "float16", None, ()), ModelSpec("b", "x/b", "float16", None, ())
    s = PipeSample(0, 100.0, 7, model_times=(np.array([1, 1, 1, 1, 1, 5, 1.0]),
                                              np.array([2.0, 2.0, 2.0])),
                   accepted=(np.array([3, 1, 2]),))
    run = PipeSpecRun("r.json", "chain", (a, b), 3, "", (s,))
    step, sd, extra, note = draft_costs([run], "a", "float16")
    assert (step, sd, extra) == (1.0, 0.0, 4.0)
    assert "first step after a rejection" in note
