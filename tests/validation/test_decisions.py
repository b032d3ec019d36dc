"""Issue 26: the forecast bias decomposition, the count correction, forecast intervals'
leave-one-out coverage, scoring pre-registered forecasts, the A/A noise floor and the
planner's uncertainty per candidate."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyspec_theory import CostCurve, IIDGeometric, Model, predict
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.planning.pool import Pool
from validation.traces.synthetic import (
    SyntheticSpec,
    simulate_capture,
    synthetic_profile,
    write_trace,
)

T = CostCurve.affine(6e-3, 5e-4)
MID = CostCurve.affine(1.5e-3, 1e-4)
NG = CostCurve.constant(2e-5)
COSTS = {"t": T, "mid": MID, "ng": NG}
LAWS = {("t", "mid"): IIDGeometric(0.8), ("mid", "ng"): IIDGeometric(0.6),
        ("t", "ng"): IIDGeometric(0.5)}
CONFIGS = [(("t", "mid"), (3,)), (("t", "mid"), (5,)), (("t", "mid", "ng"), (4, 2)),
           (("t", "ng"), (2,)), (("mid", "ng"), (3,)), (("t", "mid", "ng"), (6, 3))]


def _caps(overhead=1e-4, prompts=12):
    out = []
    for k, (models, th) in enumerate(CONFIGS):
        name = "-".join(models) + "_" + "-".join(map(str, th))
        out.append(simulate_capture(SyntheticSpec(
            name, list(models), [COSTS[m] for m in models],
            [LAWS[(models[i], models[i + 1])] for i in range(len(models) - 1)], list(th),
            prompts=prompts, tokens_per_prompt=200, prompt_len=32,
            overhead_per_forward=overhead, seed=200 + k)))
    return out


@pytest.fixture(scope="module")
def caps():
    return [c for c, _ in _caps()]


def _profile(cap, costs=COSTS):
    return synthetic_profile(list(cap.models), [costs[m] for m in cap.models],
                             list(cap.thresholds), context=32 + 100, ar_context=32 + 64)


# --- the decomposition ----------------------------------------------------------------------
def test_bias_terms_sum_to_the_log_error_and_find_a_mispriced_model(caps):
    from validation.analysis.bias import TERMS, decompose_forecast
    from validation.analysis.forecast import forecast_capture

    target = caps[-1]
    prof = _profile(target)
    fc = forecast_capture(target, caps, prof)
    d = decompose_forecast(fc, target, prof)
    assert set(d["terms"]) == set(TERMS)
    assert d["log_error"] == pytest.approx(math.log(fc.speedup / target.measured_speedup))
    # exact identity: the per-level times of the forecast add up to its time per token
    assert abs(d["residual"]) < 1e-12
    assert d["terms"]["ar"] == pytest.approx(math.log(prof.ar_s / target.ar_time_per_token))
    # overhead term by hand: measured vs fitted overhead at the measured forwards and times
    tok = target.tokens
    f = np.asarray(target.forward_count) / tok
    t = np.asarray(target.forward_s) / np.asarray(target.forward_count)
    tau3 = float(f @ t) + fc.overhead_per_token
    assert d["terms"]["overhead"] == pytest.approx(
        -math.log(tau3 / (float(f @ t) + target.overhead_s / tok)), rel=1e-9)
    # a profile that prices the middle model 3x too high: the forward-time term carries the
    # error (negative: the forecast is too low) and dominates
    bad = _profile(target, dict(COSTS, mid=CostCurve.affine(4.5e-3, 3e-4)))
    d2 = decompose_forecast(forecast_capture(target, caps, bad), target, bad)
    assert d2["dominant"] == "forward_time" and d2["terms"]["forward_time"] < -0.05
    assert abs(d2["terms"]["ar"] - d["terms"]["ar"]) < 1e-12
    assert abs(d2["residual"]) < 1e-12


def test_count_factors_are_the_median_own_law_ratio_of_same_depth_captures(caps):
    from validation.analysis.forecast import count_factors, count_ratios

    r = {c.name: count_ratios(c) for c in caps}
    # iid synthetic rounds: P1 with the capture's own laws counts its forwards (sampling
    # error of 12 prompts x 200 tokens)
    for c in caps:
        assert abs(r[c.name][0] - 1) < 0.05, c.name
    three = [c for c in caps if c.n == 3]
    kf = count_factors(3, 0.0, caps)
    assert kf[0] == 1.0
    np.testing.assert_allclose(kf[1:], np.median([r[c.name] for c in three], axis=0)[1:])
    # the excluded capture's own ratios are not used
    kf_ex = count_factors(3, 0.0, caps, exclude=three[0].name)
    np.testing.assert_allclose(kf_ex[1:], r[three[1].name][1:])
    # no capture of that depth or sampling mode: no correction
    np.testing.assert_array_equal(count_factors(4, 0.0, caps), np.ones(4))
    np.testing.assert_array_equal(count_factors(3, 1.0, caps), np.ones(3))
    with pytest.raises(PolyspecInputError, match="count_factor"):
        from validation.analysis.forecast import forecast_capture

        forecast_capture(caps[-1], caps, _profile(caps[-1]), count_factor=[1.0, -1.0, 1.0])


# --- interval coverage ----------------------------------------------------------------------
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=30))
def test_loo_coverage_matches_a_direct_count(errs):
    from validation.analysis.score import loo_coverage

    e = np.abs(np.asarray(errs))
    inside = 0
    for i in range(e.size):
        others = np.sort(np.delete(e, i))
        k = math.ceil(0.95 * (others.size + 1))
        inside += e[i] <= others[min(k, others.size) - 1]
    got = loo_coverage(errs)
    assert got["n"] == e.size and got["inside"] == inside
    assert got["coverage"] == pytest.approx(inside / e.size)


def test_loo_coverage_of_exchangeable_errors_is_95_percent():
    """Conformal guarantee: with 20 exchangeable errors the leave-one-out interval (the max of
    the 19 others) holds each with probability exactly 19/20. 400 sets at a fixed seed: the
    mean coverage has sd 0.0024, the band +-0.01 is 4 sd (false-failure rate 6e-5)."""
    from validation.analysis.score import loo_coverage

    rng = np.random.default_rng(7)
    cov = [loo_coverage(rng.normal(size=20))["coverage"] for _ in range(400)]
    assert 0.94 <= float(np.mean(cov)) <= 0.96
    assert math.isnan(loo_coverage([0.1])["coverage"])


# --- scoring pre-registered forecasts --------------------------------------------------------
def test_score_finds_captures_by_name_and_scores_them(tmp_path, capsys):
    from polyspec.cli import main
    from validation.analysis.forecast import measured_ci95
    from validation.analysis.score import score_forecasts

    cap, recs = _caps(prompts=6)[0]
    (tmp_path / "captures").mkdir()
    write_trace(tmp_path / "captures" / f"{cap.name}.jsonl", cap, recs)
    from validation.traces.records import read_trace

    c = read_trace(tmp_path / "captures" / f"{cap.name}.jsonl")
    m = c.measured_speedup
    # the same capture under a second name (one forecast per capture)
    (tmp_path / "captures" / f"{cap.name}-again.jsonl").write_bytes(
        (tmp_path / "captures" / f"{cap.name}.jsonl").read_bytes())
    lines = [{"name": cap.name, "kind": "chain", "levels": 2, "batch": 1,
              "speedup": 1.1 * m, "interval95": [m, 1.2 * m]},
             {"name": f"{cap.name}-again", "kind": "chain", "levels": 2, "batch": 1,
              "speedup": 0.9 * m, "interval95": [0.8 * m, 0.95 * m]},
             {"name": "not-yet", "kind": "tree", "levels": 2, "batch": 1, "speedup": 1.0,
              "interval95": [0.9, 1.1]}]
    f = tmp_path / "forecasts.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    s = score_forecasts(f)
    assert s["captured"] == 2
    a, b, c3 = s["configs"]
    assert a["error"] == pytest.approx(0.1) and a["inside"] is True
    assert b["error"] == pytest.approx(-0.1) and b["inside"] is False
    assert a["measured_ci95"] == pytest.approx(list(measured_ci95(c)))
    assert c3["measured"] is None and c3["inside"] is None
    assert s["median_abs_error"] == pytest.approx(0.1)
    assert s["max_abs_error"] == pytest.approx(0.1)
    assert s["inside_fraction"] == 0.5 and s["inside"] == 1
    # relative half-widths 0.1 / 1.1 and 0.075 / 0.9: the median of two is their mean
    assert s["median_half_width"] == pytest.approx((0.1 / 1.1 + 0.075 / 0.9) / 2)
    rc = main(["forecast", "--score", str(f), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["inside_fraction"] == 0.5
    # the calibration these errors give: |errors| 0.1, 0.1 -> the 2nd of 2 (conformal k =
    # min(ceil(0.95 * 3), 2)); no aa/ beside the file: floor 0; guarantee 2/3
    cal = out["calibration"]
    assert cal["quantile"] == pytest.approx(0.1) and cal["floor"] == 0.0
    assert cal["floor_from"] is None
    assert cal["in_sample_coverage"] == 1.0 and cal["guarantee"] == pytest.approx(2 / 3)
    main(["forecast", "--score", str(f)])
    text = capsys.readouterr().out
    assert "inside 50% (1/2), median interval half-width " \
        f"{100 * (0.1 / 1.1 + 0.075 / 0.9) / 2:.2f} %" in text
    # no aa/ captures: no floor is printed as if measured
    assert "half-width 10.00 % (no A/A floor: no aa/ captures beside the forecasts), " \
        "inside 100%" in text and "A/A floor 0.00" not in text
    # --interval-from takes that calibration: errors and floor of the scored round
    from validation.analysis.score import interval_errors

    errs, floor, of = interval_errors(str(f), {"x": 0.5}, "o")
    assert sorted(errs.values()) == pytest.approx([-0.1, 0.1]) and floor == 0.0
    assert str(f) in of
    assert interval_errors(None, {"x": 0.5}, "o") == ({"x": 0.5}, 0.0, "o")
    assert {"name", "kind", "levels", "batch", "trace", "forecast", "interval95", "measured",
            "measured_ci95", "inside"} <= set(out["configs"][0])
    # malformed files: one line naming the file, the line and the field
    for bad, msg in ((lines[0] | {"interval95": [2, 1]}, "interval95"),
                     ({"name": "x"}, "no field 'kind'"),
                     (lines[0] | {"kind": "web"}, "kind 'web'"),
                     (lines[0] | {"speedup": -1}, "speedup"),
                     # issue 33: a second forecast of one capture, names that would be glob
                     # patterns or paths, booleans as numbers, a speedup outside its interval
                     (lines[2], "a second forecast of capture"),
                     (lines[0] | {"name": "*"}, "name must be"),
                     (lines[0] | {"name": "[0-9]*"}, "name must be"),
                     (lines[0] | {"name": "/etc/passwd"}, "name must be"),
                     (lines[0] | {"name": 7}, "name must be"),
                     (lines[1] | {"speedup": True}, "speedup must be"),
                     (lines[1] | {"interval95": [True, 2]}, "interval95"),
                     (lines[1] | {"batch": True}, "batch must be"),
                     (lines[1] | {"speedup": 2 * m}, "outside its own interval95")):
        f.write_text(json.dumps(lines[2]) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(PolyspecInputError, match=f"forecasts.jsonl:2: .*{msg}"):
            score_forecasts(f)
    f.write_text("{not json\n")
    rc = main(["forecast", "--score", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "forecasts.jsonl:1: not JSON" in err and len(err.splitlines()) == 1


# --- the A/A noise floor --------------------------------------------------------------------
def _fake(name, models, speedup, th=(2,)):
    return SimpleNamespace(name=name, models=tuple(models), thresholds=th, temperature=0.0,
                           top_k=0, cascade={}, measured_speedup=speedup)


def test_noise_floor_is_the_pooled_within_configuration_sd():
    from validation.analysis.plan_uncertainty import noise_floor

    a = [1.19, 1.21, 1.26]
    b = [1.16, 1.18]
    caps = ([_fake(f"a{i}", ("t", "s"), x) for i, x in enumerate(a)]
            + [_fake(f"b{i}", ("t", "n"), x) for i, x in enumerate(b)]
            + [_fake("alone", ("t", "m"), 2.0)])
    nf = noise_floor(caps)
    va, vb = np.var(np.log(a), ddof=1), np.var(np.log(b), ddof=1)
    assert nf["relative_sd"] == pytest.approx(math.sqrt((2 * va + 1 * vb) / 3))
    assert nf["dof"] == 3 and len(nf["groups"]) == 2
    assert noise_floor([_fake("x", ("t", "s"), 1.0)]) is None


# --- the planner's uncertainty ----------------------------------------------------------------
def test_probability_best_separates_clear_wins_from_ties(caps):
    from validation.analysis.plan_uncertainty import CONFIDENT, candidate_uncertainty

    unit = {m: CostCurve.from_table([float(x) for x in np.asarray(c(np.arange(1, 12)))
                                     / float(T(1))]) for m, c in COSTS.items()}
    pool = Pool((Model("t", unit["t"]), Model("mid", unit["mid"]), Model("ng", unit["ng"])),
                dict(LAWS), 8, "accumulate", "test")
    s = {th: predict(pool.cascade(("t", "mid", "ng"), th)).speedup for th in ((4, 2), (1, 1))}
    far = [(("t", "mid", "ng"), (4, 2), s[(4, 2)]), (("t", "mid", "ng"), (1, 1), s[(1, 1)])]
    assert s[(4, 2)] > 1.09 * s[(1, 1)]  # 9 %: over 2 sd of the 2 % + 2 % + fit noise
    out = candidate_uncertainty(pool, far, caps, spreads={"*": 0.02}, floor=0.02, n_draws=200)
    assert out[0]["probability_best"] >= CONFIDENT and out[0]["decision"] == "confident"
    # a 2 % spread of each model's costs moves the speedups (each draw priced again)
    assert all(c["log_sd"]["costs"] > 1e-3 for c in out), [c["log_sd"] for c in out]
    assert sum(c["probability_best"] for c in out) == pytest.approx(1.0)
    for c in out:
        lo, hi = c["interval95"]
        assert lo < c["speedup"] < hi
    # the same configuration twice: a coin flip, never confident
    tie = [far[0], far[0]]
    out = candidate_uncertainty(pool, tie, caps, spreads={"*": 0.02}, floor=0.02, n_draws=400)
    assert all(c["decision"] == "too close to call" for c in out)
    assert abs(out[0]["probability_best"] - 0.5) < 0.1  # sd 0.025 at 400 draws: 4 sd
    # no cost spread and no floor: only the acceptance refits move the speedups
    out = candidate_uncertainty(pool, far, caps, n_draws=50)
    assert all(c["log_sd"]["costs"] == 0 and c["log_sd"]["noise_floor"] == 0 for c in out)
    # (about 0.004 and 0.01 here; a constant array's sd is rounding noise, not above 1e-3)
    assert all(c["log_sd"]["acceptance"] > 1e-3 for c in out)
    # a wider floor widens the interval
    w = [candidate_uncertainty(pool, far[:1], caps, floor=f, n_draws=200)[0]["interval95"]
         for f in (0.0, 0.1)]
    assert w[1][1] - w[1][0] > w[0][1] - w[0][0]
    with pytest.raises(PolyspecInputError, match="noise_floor"):
        candidate_uncertainty(pool, far, caps, floor=-0.1)


# --- forecasts of trees and batches from the committed captures -------------------------------
def test_tree_forecast_of_a_committed_capture_from_the_others():
    from pathlib import Path

    from validation.analysis.forecast_kinds import forecast_structured, spec_of
    from validation.traces.records import read_traces

    trees = read_traces(Path(__file__).resolve().parents[2] / "data" / "traces" / "trees")
    c = next(x for x in trees if x.name == "fig11_target-ngram_T0_n4_3225fc78")
    f = forecast_structured(spec_of(c), trees)
    assert c.name not in f["acceptance_from"] and c.name not in f["cost_source"]
    # pinned: -9.0 % (a 4-node chain-shaped tree at T = 0; laws, costs and the tree-decoder
    # factors from the other tree captures; +2.5 % without the factors, whose median is set by
    # the larger trees)
    assert f["speedup"] / c.measured_speedup - 1 == pytest.approx(-0.090, abs=0.003)


def test_validate_reads_the_noise_floor_from_the_aa_folder(tmp_path):
    from validation.analysis.plan_uncertainty import noise_floor
    from validation.analysis.traces import Context, ValidateOptions
    from validation.traces.records import read_traces

    def _noise_floor(args, folder):  # what validate reports for --aa / FOLDER/aa
        opts = ValidateOptions(families=(), out=folder / "out", aa=args.aa)
        return Context(folder, opts, {}, [], []).noise_floor()

    args = SimpleNamespace(aa=None)
    assert _noise_floor(args, tmp_path) is None  # no aa/ folder
    (tmp_path / "aa").mkdir()
    assert _noise_floor(args, tmp_path) is None  # empty
    for k in range(3):  # one configuration captured three times (different machine noise)
        cap, recs = simulate_capture(SyntheticSpec(
                f"aa_{k}", ["t", "mid"], [T, MID], [LAWS[("t", "mid")]],
                                     [3], prompts=4, tokens_per_prompt=64, prompt_len=32,
                                     noise=0.05, seed=50 + k))
        write_trace(tmp_path / "aa" / f"aa_{k}.jsonl", cap, recs)
    nf = _noise_floor(args, tmp_path)
    x = np.log([c.measured_speedup for c in read_traces(tmp_path / "aa")])
    assert nf["relative_sd"] == pytest.approx(float(np.std(x, ddof=1)))
    assert nf == noise_floor(read_traces(tmp_path / "aa"))
    with pytest.raises(PolyspecInputError, match="--aa"):
        _noise_floor(SimpleNamespace(aa=str(tmp_path / "nope")), tmp_path)
