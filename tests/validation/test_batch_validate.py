"""Batched validation on traces of context-free levels with a fake clock (known iid laws, known
T(b, m), no orchestration time): measured numbers equal their definitions on the raw records,
B2 predicts them, the crossover is found within one grid step, and the predictive variant
really uses nothing of the capture it predicts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from polyspec.cli import main
from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import BatchTableCost
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.serving.batch import predict_batch
from tests.validation.batch_fakes import fake_profile, write_fake_traces
from validation.analysis import batch_validate as bv
from validation.analysis.fits import fit_pairs
from validation.traces.batch import read_batch_traces
from validation.traces.records import read_records

FAMS = ("iid", "positional")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake_batch")
    write_fake_traces(d)
    return d


@pytest.fixture(scope="module")
def caps(traces):
    return read_batch_traces(traces)


@pytest.fixture(scope="module")
def result(caps):
    return bv.validate_batches(caps, families=FAMS, profile=fake_profile())


def test_measured_numbers_are_their_definitions(traces, caps):
    for c in caps:
        raw = read_records(traces / f"{c.name}.jsonl")
        summ = raw.of_type("bsummary")
        ar = raw.of_type("bar")
        tok = sum(sum(s["n_generated"]) for s in summ)
        wall = sum(s["wall_s"] for s in summ)
        step = sum(r["wall_s"] for r in ar) / sum(r["n_steps"] for r in ar)
        b = c.batch
        assert c.tokens == tok and c.wall_s == pytest.approx(wall)
        assert c.measured_speedup == pytest.approx(step / (b * wall / tok), rel=1e-12)
        assert c.tokens_per_second == pytest.approx(tok / wall)
        assert c.ar_tokens_per_second == pytest.approx(b / step)
        # fake clock: time only inside forwards, and the AR step is T_1(b, 1) exactly
        assert c.overhead_s == pytest.approx(0.0, abs=1e-6)
        assert c.ar_overhead_per_step == pytest.approx(0.0, abs=1e-9)
        fw = c.forwards.select(0, "ar")
        assert np.allclose(fw.wall_s, fw.wall_s[0])
        assert c.greedy_lossless is None and c.stops == {"tokens": c.n_decodes}
        assert c.forwards.n == sum(c.forward_count) + c.ar_steps
        for i, st in enumerate(c.structure()):
            br = c.batch_rounds[i]
            assert st["mean_K"] == pytest.approx(br.K.mean())
            kept = len(c.rounds[i].G)  # rounds that were not lockstep padding
            assert kept == b * br.n if i == 0 else kept <= b * br.n
            assert (c.waited[i] >= 0).all()


def test_predictions_match_measured(result):
    assert len(result.configs) == 8
    for c in result.configs:
        se = c.measured["speedup_se"]
        for v in bv.VARIANTS:
            var = c.variants[v]
            assert var.unavailable is None, (c.name, v, var.unavailable)
            # laws fitted on ~10^3 rounds and exact costs: a few standard errors + 2 %
            assert abs(var.speedup - c.measured["speedup"]) < 4 * se + 0.02 * var.speedup, \
                (c.name, v, var.speedup, c.measured["speedup"], se)
            assert var.throughput_error == pytest.approx(var.error, abs=1e-9)
        for row in c.structure:
            p = row["predicted"]
            assert row["mean_K"] == pytest.approx(p["mean_K"], rel=0.04)
            assert row["mean_max_G"] == pytest.approx(p["mean_max_G"], rel=0.04)
            assert row["idle_share"] == pytest.approx(p["idle_share"], abs=0.03)
    s = result.summary()
    assert s["in_sample"]["median_abs_error"] < 0.02
    assert s["predictive"]["max_abs_error"] < 0.05


def test_crossover_within_one_grid_step(result):
    assert len(result.crossovers) == 2
    by = {x.batches and x.label.count("<-"): x for x in result.crossovers}
    two, three = by[1], by[2]
    assert two.batches == three.batches == (1, 2, 4, 8)
    assert three.measured_crossover == 8  # the 3-level cascade loses at b = 8
    for x in (two, three):
        k_meas = next((i for i, s in enumerate(x.measured_speedup) if s <= 1), 4)
        for v in bv.VARIANTS:
            d = x.predicted[v]
            assert d["measured_grid_step"] == k_meas
            assert d["within_one_step"], (x.label, v, d)
            c = d["crossover"]
            if c is not None:  # a crossing of the predicted speedup
                assert c <= max(x.batches)
    assert three.predicted["in_sample"]["crossover"] is not None
    # the 3-level pair (m1, m2) is captured nowhere else: in-group laws, labelled
    assert three.predicted["predictive"]["laws"].startswith("in-group")
    assert two.predicted["predictive"]["laws"] == "outside this cascade's captures"


def test_crossover_rows_reproduce_the_per_batch_prediction(caps):
    # the batch_table rows (orchestration folded in) give predict_batch exactly the per-b
    # cascade's speedup, with the same laws
    g = sorted([c for c in caps if c.n == 3], key=lambda c: c.batch)
    fits = fit_pairs(g, FAMS)
    laws, _ = bv.capture_laws(g[0], fits)
    costs = {}
    for c in g:
        cs = bv._in_sample_costs(c, extras=True)
        costs[c.batch] = dataclasses.replace(cs, a=0.01 * c.batch, o=0.003 * c.batch)
    models = [Model(g[0].models[k], BatchTableCost({str(b): costs[b].row(k, 3) for b in costs}))
              for k in range(3)]
    table = Cascade(tuple(models), tuple(laws), g[0].thresholds, g[0].policy)
    for c in g:
        cs = costs[c.batch]
        per_b = predict_batch(cs.cascade(c, laws), c.batch)
        s = (cs.t_ar + cs.a) / per_b.time_per_token
        assert predict_batch(table, c.batch).speedup == pytest.approx(s, rel=1e-12)


def _scaled(c, f):
    """The capture with every time multiplied by ``f`` and every block fully rejected."""
    fw = dataclasses.replace(c.forwards, wall_s=c.forwards.wall_s * f)
    summ = tuple(dict(s, wall_s=s["wall_s"] * f, forward_s=[x * f for x in s["forward_s"]],
                      overhead_s=s["overhead_s"] * f) for s in c.summaries)
    ar = tuple(dict(r, wall_s=r["wall_s"] * f, forward_s=r["forward_s"] * f) for r in c.ar)
    costs = tuple(dict(r, times_s=[x * f for x in r["times_s"]]) for r in c.costs)
    rounds = tuple(dataclasses.replace(r, A=np.zeros_like(r.A), L=np.ones_like(r.L))
                   for r in c.rounds)
    return dataclasses.replace(c, forwards=fw, summaries=summ, ar=ar, costs=costs,
                               rounds=rounds)


def test_predictive_uses_nothing_of_the_predicted_capture(caps, result):
    target = next(c for c in caps if c.n == 2 and c.batch == 4)
    changed = [(_scaled(c, 7.0) if c is target else c) for c in caps]
    res2 = bv.validate_batches(changed, families=FAMS, profile=fake_profile())
    old = next(c for c in result.configs if c.name == target.name)
    new = next(c for c in res2.configs if c.name == target.name)
    assert new.variants["predictive"].speedup == pytest.approx(
        old.variants["predictive"].speedup, rel=1e-12)
    assert new.variants["predictive"].time_per_token == pytest.approx(
        old.variants["predictive"].time_per_token, rel=1e-12)
    # the in-sample diagnostic does see them: its costs scale, its laws change
    assert new.variants["in_sample"].sources["t_ar"] == pytest.approx(
        7.0 * old.variants["in_sample"].sources["t_ar"], rel=1e-9)
    assert new.variants["in_sample"].speedup < 0.8 * old.variants["in_sample"].speedup
    # another capture at the same b DOES use the target's cost samples and laws
    other = next(c for c in result.configs if len(c.models) == 3 and c.batch == 4)
    other2 = next(c for c in res2.configs if c.name == other.name)
    assert other2.variants["predictive"].speedup != pytest.approx(
        other.variants["predictive"].speedup, rel=1e-6)


def test_in_cascade_factors_are_learned_on_the_other_batch_sizes(caps, result):
    # a profile that under-states m2 by 25 % at every b: the factor learned on the other
    # batch sizes of the same cascade is exactly 1.25, so the predictive variant is what it
    # is with the exact profile; the raw microbenchmark variant is not
    exact = fake_profile()["m2"]
    slow = {"m2": exact.scaled(1 / 1.25)}
    res = bv.validate_batches(caps, families=FAMS, profile=slow)
    for c, ref in zip(res.configs, result.configs, strict=True):
        if "m2" not in c.models:
            continue
        p = c.variants["predictive"]
        assert p.sources["in_run_factors"]["m2"] == pytest.approx(1.25, rel=1e-9)
        assert p.sources["in_run_factors_from"] == "same cascade at the other batch sizes"
        assert p.speedup == pytest.approx(ref.variants["predictive"].speedup, rel=1e-9)
        raw = c.variants["predictive_microbenchmark"]
        assert raw.sources["in_run_factors"]["m2"] == 1.0
        assert raw.time_per_token < p.time_per_token


def test_predictive_needs_a_cost_source(caps):
    res = bv.validate_batches(caps, families=FAMS)  # no profile: m2 has no other source
    for c in res.configs:
        if c.models[-1] == "m2":
            assert "m2" in c.variants["predictive"].unavailable
        else:
            assert c.variants["predictive"].unavailable is None
            src = c.variants["predictive"].sources["costs"]
            assert all(v.startswith("bcost samples of fake3_b") for v in src.values())
    x = next(x for x in res.crossovers if x.label.count("<-") == 2)
    assert "unavailable" in x.predicted["predictive"]


def test_input_errors(caps, tmp_path):
    with pytest.raises(PolyspecInputError, match="^traces"):
        bv.validate_batches([])
    with pytest.raises(PolyspecInputError, match="^traces"):
        bv.validate_batches([caps[0], caps[0].renamed("copy")])
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"time_unit": "ms", "models": [{"name": "m2", "cost": 1.0}]}))
    with pytest.raises(PolyspecInputError, match=r"^profile\.models\[0\]\.cost"):
        bv.load_profile(p)
    p.write_text(json.dumps({"time_unit": "h", "models": []}))
    with pytest.raises(PolyspecInputError, match=r"^profile\.time_unit"):
        bv.load_profile(p)
    p.write_text(json.dumps({"time_unit": "ms", "models": [
        {"name": "m2", "cost": {"batch_table": {"2": [1.0]}}}]}))
    with pytest.raises(PolyspecInputError, match="batch_table"):
        bv.load_profile(p)
    p.write_text(json.dumps({"time_unit": "ms", "models": [
        {"name": "m2", "cost": {"batch_table": {"1": [1.0, 2.0], "4": [3.0]}}}]}))
    prof = bv.load_profile(p)
    assert prof["m2"].at_batch(4)(1) == pytest.approx(3e-3)


def test_validate_cli_on_batched_traces(traces, tmp_path, capsys):
    prof = tmp_path / "prof.json"
    rows = fake_profile()["m2"].rows
    prof.write_text(json.dumps({"time_unit": "s", "models": [
        {"name": "m2", "cost": {"batch_table": {str(b): list(r) for b, r in rows.items()}}}]}))
    rc = main(["validate", str(traces), "--out", str(tmp_path / "rep"), "--json",
               "--batch-profile", str(prof), "--laws", "iid,positional"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    obj = json.loads(out)
    assert obj["summary"]["n_captures"] == 8
    assert obj["summary"]["predictive"]["n"] == 8
    assert (tmp_path / "rep" / "batch.md").exists()
    rc = main(["validate", str(traces), "--out", str(tmp_path / "rep2"), "--laws", "iid"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "measured crossover 8" in out and "in_sample (diagnostic)" in out
    rc = main(["validate", str(traces), "--batch-profile", str(tmp_path / "missing.json")])
    _, err = capsys.readouterr()
    assert rc == 2 and "profile" in err
