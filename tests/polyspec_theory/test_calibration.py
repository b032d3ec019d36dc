"""Calibration of cost parameters (polyspec_theory.planning.calibration; docs/theory.md Part III-B,
O2).

- the linear design ``known + x . beta`` equals P1 (predict) on random cascades, for any
  subset of unknown parameters (independent: predict sums the costs level by level);
- noise-free runs recover the true parameters; proportional columns are reported;
- the 95 % interval covers the truth at the nominal rate (Monte Carlo at a fixed seed: with
  400 replications of a linear Gaussian model the count of covering intervals is
  Binomial(400, 0.95) when the interval is exact, and at least that when it is scaled up by
  chi2/dof; the test fails only below the binomial 1e-5 quantile, false-failure rate <= 1e-5
  per check, two checks);
- acceptance fitted to taus reproduces them; the threshold choice is the brute-force optimum;
- on the shared EAGLE sweep (vLLM, K = 2..7, batch 1), calibrating on K = 2 and K = 7 predicts
  K = 3..6 within 3 % (EAGLE-1) and 5 % (EAGLE-3) and picks the measured best K.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.core.laws import Positional
from polyspec_theory.planning.calibration import calibrate, choose_threshold
from polyspec_theory.planning.calibration_problem import (
    acceptance_from_taus,
    cost_coefficients,
    problem_from_config,
)
from tests._samples import sample


@st.composite
def truth(draw):
    n = draw(st.integers(2, 4))
    models = []
    for i in range(n):
        m = {"name": f"m{i}", "base": 1.0 if i == 0 else draw(st.floats(0.0, 0.5)),
             "per_token": draw(st.floats(0.0, 0.1)) if i < n - 1 else 0.0,
             "overhead": draw(st.floats(0.0, 0.4)) if i < n - 1 else 0.0}
        models.append(m)
    law_kinds = [draw(st.sampled_from([{"alpha": draw(st.floats(0.1, 0.95))},
                                       {"positional": [draw(st.floats(0.2, 0.95)),
                                                       draw(st.floats(0.2, 0.95))]},
                                       {"beta": [draw(st.floats(0.5, 6)),
                                                 draw(st.floats(0.5, 6))]}]))
                 for _ in range(n - 1)]
    return models, law_kinds


def _cascade(models, laws, thresholds):
    return Cascade.from_config({
        "models": [{"name": m["name"], "cost": {"base": m["base"], "per_token": m["per_token"]},
                    **({"overhead": m["overhead"]} if m["overhead"] else {})} for m in models],
        "acceptance": laws, "thresholds": list(thresholds)})


def _unknown_cfg(models, unknown):
    out = []
    for i, m in enumerate(models):
        cost = {"base": "fit" if (i, "base") in unknown else m["base"],
                "per_token": "fit" if (i, "per_token") in unknown else m["per_token"]}
        e = {"name": m["name"], "cost": cost}
        if i < len(models) - 1:
            e["overhead"] = "fit" if (i, "overhead") in unknown else m["overhead"]
        out.append(e)
    return out


@settings(max_examples=80, deadline=None)
@given(truth(), st.data())
def test_design_is_p1(tr, data):
    models, laws = tr
    n = len(models)
    params = [(i, p) for i in range(n) for p in ("base", "per_token", "overhead")
              if (i, p) != (0, "base") and not (i == n - 1 and p != "base")]
    unknown = data.draw(st.lists(st.sampled_from(params), min_size=1, unique=True))
    th = [data.draw(st.integers(1, 6)) for _ in range(n - 1)]
    prob = problem_from_config({"models": _unknown_cfg(models, unknown),
                                "runs": [{"thresholds": th, "acceptance": laws,
                                          "time_per_token": 1.0}]})
    known, x = cost_coefficients(prob.costs, prob.runs[0].laws, th)
    beta = np.array([models[i][p] for i, p in prob.costs.unknown])
    tau = predict(_cascade(models, laws, th)).time_per_token
    assert known + float(x @ beta) == pytest.approx(tau, rel=1e-11)


@settings(max_examples=40, deadline=None)
@given(truth(), st.data())
def test_noise_free_runs_recover_the_parameters(tr, data):
    models, laws = tr
    n = len(models)
    # drafter costs and the target's overhead unknown (identifiable when thresholds vary;
    # an intermediate model's overhead is the same column as its T(1): every forward of it
    # is a verification round)
    unknown = [(i, "base") for i in range(1, n)] + [(0, "overhead")]
    grids = [sorted(data.draw(st.lists(st.integers(1, 8), min_size=3, max_size=5,
                                       unique=True))) for _ in range(n - 1)]
    runs = []
    rng = np.random.default_rng(0)
    for j in range(2 * len(unknown) + 2):
        th = [int(g[rng.integers(len(g))]) for g in grids]
        th[j % (n - 1)] = grids[j % (n - 1)][j % len(grids[j % (n - 1)])]
        runs.append({"name": f"r{j}", "thresholds": th, "acceptance": laws,
                     "time_per_token": predict(_cascade(models, laws, th)).time_per_token})
    cfg = {"models": _unknown_cfg(models, unknown), "runs": runs}
    try:
        cal = calibrate(problem_from_config(cfg))
    except PolyspecInputError as e:  # an unlucky design: must say which are confounded
        assert "cannot be told apart" in str(e) or "cannot determine" in str(e)
        RECOVER_STATS["confounded"] += 1
        return
    RECOVER_STATS["recovered"] += 1
    truth_beta = [models[i][p] for i, p in cal.problem.costs.unknown]
    assert np.allclose(cal.estimates, truth_beta, rtol=1e-7, atol=1e-9)
    for r in cal.runs:
        assert r.relative_error == pytest.approx(0.0, abs=1e-9)
    for x in cal.loo:
        if x["relative_error"] is not None:
            assert abs(x["relative_error"]) < 1e-7


RECOVER_STATS = {"recovered": 0, "confounded": 0}


def test_most_random_designs_were_identifiable():
    # runs after the property test above (pytest keeps file order): the recovery branch ran
    assert RECOVER_STATS["recovered"] >= 3 * RECOVER_STATS["confounded"], RECOVER_STATS


def test_intermediate_overhead_and_cost_are_confounded():
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "m", "cost": "fit", "overhead": "fit"},
                      {"name": "d", "cost": 0.01}],
           "runs": [{"name": f"r{k}", "thresholds": [k, 2], "acceptance": [{"alpha": 0.8},
                                                                          {"alpha": 0.7}],
                     "time_per_token": 0.5 + 0.01 * k} for k in (1, 2, 3, 4)]}
    with pytest.raises(PolyspecInputError, match="m.base and m.overhead|m.overhead and m.base"):
        calibrate(problem_from_config(cfg))


def test_two_model_drafter_cost_and_verify_growth_are_confounded():
    cfg = {"models": [{"name": "target", "cost": {"base": 7.0, "per_token": "fit"},
                       "overhead": "fit"}, {"name": "draft", "cost": "fit"}],
           "runs": [{"name": f"K={k}", "thresholds": [k], "acceptance": [{"alpha": 0.7}],
                     "time_per_token": 4.0 + 0.1 * k} for k in (2, 3, 4, 5)]}
    with pytest.raises(PolyspecInputError) as e:
        calibrate(problem_from_config(cfg))
    msg = str(e.value)
    assert "target.per_token" in msg and "draft.base" in msg and "\n" not in msg


def _coverage(n_runs, reps=400, seed=1):
    """Replications of a 2-model calibration with Gaussian noise of known sd: how often the
    95 % intervals of (overhead, drafter cost) cover the truth."""
    rng = np.random.default_rng(seed)
    o_true, d_true, sd = 0.6, 0.7, 0.03
    ks = list(range(2, 2 + n_runs))
    cover = np.zeros(2, dtype=int)
    for _ in range(reps):
        runs = []
        for k in ks:
            c = _cascade([{"name": "t", "base": 7.0, "per_token": 0.0, "overhead": o_true},
                          {"name": "d", "base": d_true, "per_token": 0.0, "overhead": 0.0}],
                         [{"positional": [0.8, 0.6]}], [k])
            y = predict(c).time_per_token + rng.normal(0, sd)
            runs.append({"name": f"K={k}", "thresholds": [k],
                         "acceptance": [{"positional": [0.8, 0.6]}],
                         "time_per_token": y, "time_per_token_sd": sd})
        cal = calibrate(problem_from_config({
            "models": [{"name": "t", "cost": 7.0, "overhead": "fit"},
                       {"name": "d", "cost": "fit"}], "runs": runs}))
        z = stats.norm.isf(0.025)
        cover += np.abs(cal.estimates - [o_true, d_true]) <= z * cal.sd
    return cover, reps


def test_interval_coverage_exact_when_unscaled():
    cover, reps = _coverage(2)  # dof = 0: the interval is exactly the normal one
    lo = stats.binom.ppf(1e-5, reps, 0.95)
    hi = stats.binom.isf(1e-5, reps, 0.95)
    assert ((cover >= lo) & (cover <= hi)).all(), cover


def test_interval_coverage_at_least_nominal_when_scaled():
    cover, reps = _coverage(5)  # chi2/dof scaling can only widen the interval
    assert (cover >= stats.binom.ppf(1e-5, reps, 0.95)).all(), cover


@pytest.mark.parametrize("hazards, ths", [
    ([0.5, 0.9453125, 0.203125, 0.375], [1, 6, 7, 8]),  # CI failure of the old fit (1.4e-5)
    ([0.51175877, 0.77851883, 0.94855059, 0.25907728], [7, 8, 9, 10]),  # alpha_1,2 unidentified
    ([0.3, 1.0], [2, 9]),  # tail hazard 1: tau grows linearly
    ([0.0, 0.7, 0.4], [1, 3, 5]),  # nothing ever accepted
])
def test_acceptance_from_taus_hard_cases(hazards, ths):
    law = Positional(hazards)
    pts = [(g, law.mean_emitted(g)) for g in ths]
    fit = acceptance_from_taus(pts)
    assert max(abs(fit.mean_emitted(g) - t) for g, t in pts) < 1e-6
    # a threshold with a known survival pins the first hazard exactly: tau(1) = 1 + alpha_1
    if ths[0] == 1:
        assert fit.alphas[0] == pytest.approx(hazards[0], abs=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=5), st.data())
def test_acceptance_from_taus_reproduces_them(hazards, data):
    r = len(hazards)
    law = Positional(hazards)
    ths = sorted(data.draw(st.lists(st.integers(1, 12), min_size=r, max_size=r, unique=True)))
    pts = [(g, law.mean_emitted(g)) for g in ths]
    fit = acceptance_from_taus(pts)
    # exact up to the profile search's resolution (thresholds 7,8,9,10 with r = 4 leave
    # alpha_1, alpha_2 unidentified: any law with the same means passes)
    for g, t in pts:
        assert fit.mean_emitted(g) == pytest.approx(t, abs=1e-6)
    one = acceptance_from_taus([(4, 2.5)])
    assert one.family == "iid" and one.mean_emitted(4) == pytest.approx(2.5, rel=1e-12)
    with pytest.raises(PolyspecInputError, match="exceeds"):
        acceptance_from_taus([(2, 3.5)])


def _eagle(method, fit_on=(2, 7)):
    from validation.formats.vllm_sweep import load_sweep, sweep_runs

    p = sample("vllm_eagle_sweep_issue20780.txt")
    return problem_from_config(sweep_runs(load_sweep(p), method, list(fit_on)))


@pytest.mark.parametrize("method,tol", [("EAGLE 1", 0.03), ("EAGLE 3", 0.05)])
def test_eagle_sweep_done_criteria(method, tol):
    prob = _eagle(method)
    cal = calibrate(prob)
    held = [r for r in cal.runs if r.holdout]
    assert [r.name for r in held] == ["K=3", "K=4", "K=5", "K=6"]
    errs = [abs(r.relative_error) for r in held]
    assert max(errs) < tol, errs
    # with the acceptance at K = 3..6 itself predicted from K = 2 and 7
    errs2 = [abs(r.relative_error) for r in cal.runs_predicted_acceptance if r.holdout]
    assert len(errs2) == 4 and max(errs2) < tol, errs2
    # choice among the measured Ks (their own acceptance) and over K = 1..16 (predicted
    # acceptance): the measured best, or within 2 % of it
    measured = {r.thresholds: r.time_per_token for r in prob.runs}
    best_meas = min(measured.values())
    by = {r.thresholds: r.laws for r in prob.runs}
    g = choose_threshold(cal, candidates=sorted(by), laws_for=by.__getitem__)
    m = choose_threshold(cal)
    for ch in (g, m):
        assert measured[ch.thresholds] <= 1.02 * best_meas
    assert g.thresholds == (prob.engine_best,)
    assert 0.0 <= g.probability_best <= 1.0
    # same seed, same numbers
    assert choose_threshold(cal).probability_best == m.probability_best
    # fitted parameters are physical: a positive per-round overhead and drafter cost
    assert (cal.estimates > 0).all() and (cal.sd > 0).all()


def test_threshold_choice_is_the_brute_force_optimum():
    prob = _eagle("EAGLE 1", fit_on=(2, 4, 7))
    cal = calibrate(prob)
    ch = choose_threshold(cal)
    taus = {k: predict(cal.cascade((k,))).time_per_token for k in range(1, 17)}
    assert ch.thresholds == (min(taus, key=taus.get),)
    assert ch.time_per_token == pytest.approx(min(taus.values()), rel=1e-11)
    assert cal.dof == 1 and len(cal.loo) == 3


@pytest.mark.parametrize("patch,field", [
    ({"runs": []}, "runs"),
    ({"models": [{"name": "t", "cost": "fit"}, {"name": "d", "cost": "fit"}]},
     "models[0].cost.base"),
    ({"models": [{"name": "t", "cost": 7.0}, {"name": "d", "cost": 0.5}]}, "models"),
    ({"models": [{"name": "t", "cost": 7.0, "overhead": "fit"},
                 {"name": "d", "cost": "fit", "overhead": "fit"}]}, "models[1].overhead"),
    ({"resolution": {"tau": -1}}, "resolution.tau"),
    ({"bogus": 1}, "bogus"),
])
def test_problem_errors_name_the_field(patch, field):
    cfg = {"models": [{"name": "t", "cost": 7.0, "overhead": "fit"},
                      {"name": "d", "cost": "fit"}],
           "runs": [{"name": "a", "thresholds": [2], "acceptance": [{"tau": 2.0}],
                     "time_per_token": 4.4},
                    {"name": "b", "thresholds": [5], "acceptance": [{"tau": 2.4}],
                     "time_per_token": 4.8}]}
    cfg.update(patch)
    with pytest.raises(PolyspecInputError) as e:
        problem_from_config(cfg)
    assert e.value.field == field


def test_run_errors():
    base = {"models": [{"name": "t", "cost": 7.0, "overhead": "fit"},
                       {"name": "d", "cost": "fit"}]}
    for run, field in [
        ({"thresholds": [2], "acceptance": [{"tau": 2.0}]}, "runs[0].time_per_token"),
        ({"thresholds": [2, 3], "acceptance": [{"tau": 2.0}], "time_per_token": 1},
         "runs[0].thresholds"),
        ({"thresholds": [2], "acceptance": [{"tau": 9.0}], "time_per_token": 1},
         "runs[0].acceptance[0].tau"),
        ({"thresholds": [2], "acceptance": [{"tau": 2.0}], "time_per_token": 1,
          "tokens_per_s": 3}, "runs[0].tokens_per_s"),
    ]:
        with pytest.raises(PolyspecInputError) as e:
            problem_from_config({**base, "runs": [run]})
        assert e.value.field == field
    prob = problem_from_config({**base, "runs": [
        {"thresholds": [2], "acceptance": [{"tau": 2.0}], "time_per_token": 4.0,
         "holdout": True}]})
    with pytest.raises(PolyspecInputError, match="holdout"):
        calibrate(prob)
    one = problem_from_config({**base, "runs": [
        {"thresholds": [2], "acceptance": [{"tau": 2.0}], "time_per_token": 4.0}]})
    with pytest.raises(PolyspecInputError, match="cannot determine"):
        calibrate(one)


def test_tokens_per_s_in_the_time_unit():
    base = {"time_unit": "ms", "models": [{"name": "t", "cost": 10.0, "overhead": "fit"},
                                          {"name": "d", "cost": 1.0}]}
    a = problem_from_config({**base, "runs": [{"thresholds": [3], "acceptance": [{"tau": 2.5}],
                                               "tokens_per_s": 160.0}]})
    assert a.runs[0].time_per_token == pytest.approx(6.25)  # 1/160 s = 6.25 ms
    cal = calibrate(a)
    # a round emits 2.5 tokens in 6.25 ms * 2.5 = 3 drafts * 1 + 10 + o
    assert cal.estimates[0] == pytest.approx(6.25 * 2.5 - 13.0, rel=1e-9)
    assert not cal.warnings[1:]  # only the no-uncertainty note (dof = 0, no resolution)


def test_negative_least_squares_solution_is_bounded_at_zero():
    runs = [{"name": f"K={k}", "thresholds": [k], "acceptance": [{"alpha": 0.78}],
             "time_per_token": t} for k, t in ((1, 6.0), (2, 5.0), (3, 4.9))]
    cal = calibrate(problem_from_config({
        "models": [{"name": "t", "cost": 9.0, "overhead": "fit"}, {"name": "d", "cost": "fit"}],
        "runs": runs}))
    assert cal.estimates[0] == 0.0 and cal.estimates[1] > 0
    assert any("t.overhead" in w and "fixed at 0" in w for w in cal.warnings)
    # predictions and the written models agree (both use the bounded estimates)
    ch = choose_threshold(cal)
    assert ch.time_per_token == pytest.approx(predict(cal.cascade(ch.thresholds)).time_per_token,
                                              rel=1e-12)


def test_public_functions_reject_bad_input():
    prob = _eagle("EAGLE 1")
    cal = calibrate(prob)
    for call, field in [
        (lambda: cost_coefficients("x", [], [2]), "costs"),
        (lambda: cost_coefficients(prob.costs, [], [2]), "laws"),
        (lambda: cost_coefficients(prob.costs, [{"alpha": 2.0}], [2]), "laws[0].alpha"),
        (lambda: cost_coefficients(prob.costs, [{"alpha": 0.5}], "2"), "thresholds"),
        (lambda: acceptance_from_taus("x"), "tau"),
        (lambda: acceptance_from_taus([(2,)]), "tau[0]"),
        (lambda: acceptance_from_taus([(0, 1.5)]), "tau[0].threshold"),
        (lambda: choose_threshold("x"), "calibration"),
        (lambda: choose_threshold(cal, candidates=[(2, 3)]), "candidates[0]"),
        (lambda: choose_threshold(cal, draws=0), "draws"),
    ]:
        with pytest.raises(PolyspecInputError) as e:
            call()
        assert e.value.field == field


@settings(deadline=None, max_examples=100, derandomize=True)
@given(dof=st.integers(-1, 10_000), level=st.one_of(
    st.floats(1e-9, 1 - 1e-9), st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0])))
def test_t_quantile_is_scipy_stats(dof, level):
    """The calibration's t quantile (``scipy.special`` only) is ``stats.t.isf`` (``stats.norm``
    at ``dof <= 0``) at ``(1 - level) / 2``, the same float (``==``), edges included."""
    from polyspec_theory.planning.calibration import t_quantile

    q = (1 - level) / 2
    want = float(stats.norm.isf(q) if dof <= 0 else stats.t.isf(q, dof))
    assert t_quantile(dof, level) == want
