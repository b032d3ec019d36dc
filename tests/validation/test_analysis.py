"""Analysis of captures (validation.analysis) on synthetic captures with known laws and costs
(validation.traces.synthetic runs the block policy round by round), and the level coupling model
(polyspec_theory.planning.coupling) fitted on them."""

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import predict
from validation.analysis.fits import fit_costs, fit_pairs, predict_config
from validation.analysis.residuals import lag1_correlation, overhead_model
from validation.analysis.validate import P5, validate
from validation.traces.synthetic import SyntheticSpec, simulate_capture

Z = 4.5  # two-sided normal quantile: false-failure rate 6.8e-6 per interval check

T = CostCurve.affine(6e-3, 5e-4)
MID = CostCurve.affine(1.5e-3, 1e-4)
SMALL = CostCurve.from_table([4e-4, 4.2e-4, 4.5e-4, 5e-4])
NG = CostCurve.constant(2e-5)


def _two_level(name, verifier, drafter, law, theta, seed, **kw):
    costs = {"t": T, "mid": MID, "small": SMALL, "ng": NG}
    return simulate_capture(SyntheticSpec(
            name, [verifier, drafter], [costs[verifier], costs[drafter]],
                            [law], [theta], seed=seed, **kw))[0]


def test_block_bounds():
    assert block_bounds([4, 3, 2]) == [4 + 3 + 2, 3 + 2, 2]
    assert block_bounds([4, 3, 2], "truncate") == [4, 3, 2]


def test_two_level_positional_prediction_equals_measured_exactly():
    # noiseless costs, no overhead, cap fixed at theta: the positional MLE is the empirical
    # law of A, so P1's forward count per token is the measured one and predicted == measured
    cap = _two_level("c", "t", "mid", BetaMixed(5.0, 2.0), 5, seed=1, prompts=4)
    res = validate([cap], insertions=False, holdout=False)
    c = res.configs[0]
    assert c.errors()["p1_positional"] == pytest.approx(0.0, abs=1e-12)
    assert c.decomposition["forward_counts_beyond_positional_law"] == pytest.approx(0, abs=1e-15)
    assert c.decomposition["overhead"] == pytest.approx(0.0, abs=1e-15)
    # the AR baseline equals T_1(1) exactly without noise or context slope
    assert c.decomposition["relative"]["ar_baseline"] == pytest.approx(0.0, abs=1e-12)


def test_costs_calibrated_to_the_interleaved_ar_baseline():
    # the target runs 30 % slower during the capture than in its cost-curve microbenchmark:
    # calibrating to its AR forward time restores predicted == measured (positional, exact)
    cap = _two_level("c", "t", "mid", BetaMixed(5.0, 2.0), 5, seed=5, prompts=3,
                     load=[1.3, 1.0])
    cf = fit_costs(cap)
    assert cf["t"].scale == pytest.approx(1.3, rel=1e-12)
    assert cf["mid"].scale == pytest.approx(1.0, rel=1e-12)
    assert fit_costs(cap, calibrate=False)["t"].scale == 1.0
    c = validate([cap], insertions=False, holdout=False).configs[0]
    assert c.errors()["p1_positional"] == pytest.approx(0.0, abs=1e-12)
    assert c.diagnostic_error("microbenchmark") < -0.05  # the uncalibrated target looks cheaper
    # in-run costs (best law's counts x measured per-level forward times) are load-immune too
    assert abs(c.diagnostic_error("inrun")) < 0.5 * abs(c.diagnostic_error("microbenchmark"))


def test_three_level_true_model_within_measured_ci():
    laws = [BetaMixed(6.0, 2.0), Positional([0.7, 0.55, 0.5])]
    cap, trace = simulate_capture(SyntheticSpec(
            "c3", ["t", "mid", "ng"], [T, MID, NG], laws, [4, 3],
                                  prompts=30, tokens_per_prompt=200, seed=2))
    records = [r for r in trace if r["type"] == "round"]
    true = predict(Cascade((Model("t", T), Model("mid", MID), Model("ng", NG)), tuple(laws),
                           (4, 3)))
    se = cap.time_per_token_se()
    assert abs(cap.time_per_token - true.time_per_token) < Z * se
    assert se / cap.time_per_token < 0.02  # the interval is informative
    # records use the decoder's format (1-based level of the verifier)
    assert {r["level"] for r in records} == {1, 2}
    assert all(r["L"] == r["A"] + 1 and r["m"] == r["G"] + 1 for r in records)
    assert all(r["G"] == 3 for r in records if r["level"] == 2)
    assert all(4 <= r["G"] <= block_bounds([4, 3])[0] for r in records if r["level"] == 1)
    # fitted pipeline: the AIC-best laws predict the measured speedup within the same interval
    # widened by the fit's own sampling error (the laws are fitted on these rounds; bound 2Z)
    res = validate([cap], insertions=False, holdout=False)
    rel_se = se / cap.time_per_token
    assert abs(res.configs[0].diagnostic_error("p1_best")) < 2 * Z * rel_se


def test_fitting_recovers_known_laws_from_synthetic_rounds():
    laws = [IIDGeometric(0.75), BetaMixed(3.0, 2.0)]
    cap, _ = simulate_capture(SyntheticSpec(
            "c", ["t", "mid", "ng"], [T, MID, NG], laws, [3, 4], prompts=30,
                              tokens_per_prompt=200, seed=3))
    fits = fit_pairs([cap])
    top = fits[cap.pair_key(0)]
    d = top.counts
    trials = float(np.dot(d.counts, d.accepted) + d.counts[d.accepted < d.caps].sum())
    alpha = next(f.law for f in top.fits if f.law.family == "iid").alpha
    assert abs(alpha - 0.75) < Z * math.sqrt(0.75 * 0.25 / trials)
    # random caps (accumulate policy): G >= 3 with several values observed
    assert d.caps.min() >= 3 and np.unique(d.caps).size >= 3
    bottom = fits[cap.pair_key(1)]
    assert bottom.best.law.family in ("beta", "positional")
    # cost fits recover the noiseless curves exactly
    cf = fit_costs(cap)
    np.testing.assert_allclose(cf["t"].table, T(np.arange(1, 17)), rtol=1e-9)
    assert cf["t"].context_slope == pytest.approx(0.0, abs=1e-12)


def test_overhead_is_recovered_leave_one_out_and_explains_the_residual():
    o_f, o_r = 2e-4, 5e-4
    kw = dict(overhead_per_forward=o_f, overhead_per_round=o_r, prompts=3)
    caps = [
        _two_level("a", "t", "mid", BetaMixed(5.0, 2.0), 4, seed=10, **kw),
        _two_level("b", "t", "ng", IIDGeometric(0.5), 3, seed=11, **kw),
        _two_level("c", "mid", "ng", Positional([0.6, 0.5]), 2, seed=12, **kw),
        _two_level("d", "small", "ng", IIDGeometric(0.8), 6, seed=13, **kw),
    ]
    for c in caps:
        rounds = sum(r.n for r in c.rounds)
        assert c.overhead_s == pytest.approx(o_f * sum(c.forward_count) + o_r * rounds,
                                             rel=1e-9)
        ov = overhead_model(caps, exclude=c.name)
        assert c.name not in ov.fitted_on
        assert (ov.per_forward, ov.per_round) == pytest.approx((o_f, o_r), rel=1e-6)
    res = validate(caps, insertions=False, holdout=False)
    for c, r in zip(caps, res.configs, strict=True):
        # plain P1 ignores the overhead: it over-predicts by exactly the overhead share
        share = r.decomposition["overhead"] / r.decomposition["tau_measured"]
        assert r.decomposition["dominant"] == "overhead"
        # extended = positional law (exact counts for a fixed cap) + LOO overhead: exact
        pred = predict_config(c, res.pairs, fit_costs(c), "positional")
        tau = pred.time_per_token + overhead_model(caps, exclude=c.name).per_token(pred)
        assert tau == pytest.approx(c.time_per_token, rel=1e-6)
        assert r.errors()["p1_positional"] == pytest.approx(1 / (1 - share) - 1, rel=1e-6)
        # extended (two models: the best law's counts) x measured per-level forward times +
        # leave-one-out overhead: the overhead is explained, only the law's fit error remains
        assert r.diagnostic_error("extended") == pytest.approx(r.diagnostic_error("inrun"),
                                                               abs=1e-12)
        assert abs(r.diagnostic_error("extended")) < 0.2 * share


def test_in_cascade_slowdown_is_learned_from_the_other_configurations():
    # every model runs 25 % (verifiers) / 60 % (the bottom drafter) slower inside the cascade
    # than in its baselines; the extended model learns the factors leave-one-out
    kw = dict(prompts=3)
    caps = [
        _two_level("a", "t", "mid", BetaMixed(5.0, 2.0), 4, seed=70, cascade_load=[1.25, 1.6],
                   **kw),
        _two_level("b", "t", "ng", IIDGeometric(0.5), 3, seed=71, cascade_load=[1.25, 1.6],
                   **kw),
        _two_level("c", "t", "mid", BetaMixed(5.0, 2.0), 2, seed=72, cascade_load=[1.25, 1.6],
                   **kw),
        _two_level("d", "mid", "ng", Positional([0.6, 0.5]), 2, seed=73,
                   cascade_load=[1.25, 1.6], **kw),
        _two_level("e", "mid", "ng", Positional([0.6, 0.5]), 3, seed=74,
                   cascade_load=[1.25, 1.6], **kw),
    ]
    res = validate(caps, laws="config", insertions=False, holdout=False)
    for r in res.configs:
        f = r.decomposition["slowdown_factors"]
        verifier, drafter = r.models
        assert f[verifier] == pytest.approx(1.25, rel=1e-9)
        assert f[drafter] == pytest.approx(1.6, rel=1e-9)
        assert r.diagnostic_error("p1_best") > 0.08  # plain P1 does not know the slowdown
        # predictive variant: slowdown factors from the other configurations only
        assert (abs(r.diagnostic_error("slowdown_costs_iid"))
                < 0.1 * r.diagnostic_error("p1_best"))
        # extended: this capture's measured per-level forward times
        assert abs(r.diagnostic_error("extended")) < 0.1 * r.diagnostic_error("p1_best")


def test_context_dependent_costs_extended_model():
    slope = [2e-6, 1e-6]
    # baselines timed only at short contexts; the capture runs at 32..~1000
    kw = dict(context_slope=slope, baseline_contexts=(16, 48), tokens_per_prompt=900,
              prompts=2)
    cap = _two_level("a", "t", "mid", BetaMixed(5.0, 2.0), 4, seed=20, **kw)
    cf = fit_costs(cap)
    assert cf["t"].context_slope == pytest.approx(2e-6, rel=1e-9)
    assert cf["mid"].context_slope == pytest.approx(1e-6, rel=1e-9)
    res = validate([cap], insertions=False, holdout=False)
    r = res.configs[0]
    assert r.decomposition["dominant"] in ("forward_cost", "ar_baseline")
    assert r.decomposition["forward_cost_context_drift"] > 0
    # positional law + costs at the capture's mean contexts reproduce the cascade time exactly
    ctxs = [cap.mean_context(i) for i in range(cap.n)]
    pred = predict_config(cap, res.pairs, cf, "positional", contexts=ctxs)
    assert pred.time_per_token == pytest.approx(cap.time_per_token, rel=1e-9)
    assert abs(r.diagnostic_error("extended")) < 0.2 * abs(r.diagnostic_error("p1_best"))


@pytest.mark.parametrize("noise", [0.0, 0.05])  # table (no replicate error) / affine curves
def test_extra_verify_positions_enter_the_extended_costs(noise):
    # the real decoder scores G + 2 positions after a fully accepted block at some levels
    laws = [BetaMixed(6.0, 2.0), IIDGeometric(0.6)]
    cap, _ = simulate_capture(SyntheticSpec("x", ["t", "mid", "ng"], [T, MID, NG], laws, [4, 2],
                              catch_up=True, noise=noise, prompts=3, seed=45))
    extra = [float(np.mean(r.m > r.G + 1)) for r in cap.rounds]
    assert 0 < extra[0] < 1
    costs = fit_costs(cap)
    base = predict_config(cap, fit_pairs([cap]), costs)
    ext = predict_config(cap, fit_pairs([cap]), costs, extra_positions=extra)
    top = costs["t"].curve()
    g = base.levels[0].block_pmf
    more = extra[0] * float(np.dot(g, top(np.arange(g.size) + 2) - top(np.arange(g.size) + 1)))
    assert ext.levels[0].forward_cost == pytest.approx(base.levels[0].forward_cost + more,
                                                       rel=1e-9)


def test_correlated_acceptance_is_detected():
    law = Positional([0.7, 0.6, 0.6, 0.5])
    cor = _two_level("c", "t", "mid", law, 4, seed=30, rho=0.6, prompts=6)
    ind = _two_level("i", "t", "mid", law, 4, seed=31, rho=0.0, prompts=6)
    rho, se, k = lag1_correlation(cor.rounds[0])
    assert k > 500 and rho > Z * se
    rho0, se0, _ = lag1_correlation(ind.rounds[0])
    assert abs(rho0) < Z * se0


def test_decomposition_is_an_exact_identity_with_noise():
    laws = [BetaMixed(6.0, 2.0), IIDGeometric(0.6)]
    cap, _ = simulate_capture(SyntheticSpec(
            "n", ["t", "mid", "ng"], [T, MID, NG], laws, [5, 2], noise=0.1,
                              overhead_per_forward=1e-4, context_slope=[1e-6, 5e-7, 0.0],
                              prompts=3, seed=40))
    r = validate([cap], insertions=False, holdout=False).configs[0]
    d = r.decomposition
    total = d["forward_counts"] + d["forward_cost"] + d["overhead"]
    assert d["tau_measured"] - d["tau_predicted"] == pytest.approx(total, rel=1e-10)
    assert r.measured_speedup == pytest.approx(
        cap.baselines["t"].ar_time_per_token / (cap.wall_s / cap.tokens), rel=1e-14)


def test_insertion_on_captured_cascades():
    law_tm, law_mg, law_tg = BetaMixed(6.0, 2.0), Positional([0.6, 0.5, 0.45]), IIDGeometric(0.4)
    kw = dict(prompts=4, tokens_per_prompt=200)
    c3 = simulate_capture(SyntheticSpec(
            "t-mid-ng", ["t", "mid", "ng"], [T, MID, NG], [law_tm, law_mg],
                          [4, 3], seed=50, **kw))[0]
    c2 = simulate_capture(SyntheticSpec(
            "t-ng", ["t", "ng"], [T, NG], [law_tg], [3], seed=51, **kw))[0]
    res = validate([c3, c2], holdout=False, p5=P5("bootstrap", 30))
    ins = [x for x in res.insertions if x["cascade"] == "t-ng"]
    assert len(ins) == 1
    x = ins[0]
    assert x["inserted"] == "mid" and x["position"] == 0 and x["thresholds_new"] == [4, 3]
    assert x["measured"]["with"] == "t-mid-ng"
    assert x["measured"]["helps"] == (c3.measured_speedup > c2.measured_speedup)
    assert x["agrees"] == (x["measured"]["helps"] == x["predicted"]["helps"])
    assert 0.0 <= x["confidence"] <= 1.0 and x["confidence_method"] == "bootstrap"
    delta = validate([c3, c2], holdout=False).insertions
    assert [d["confidence_method"] for d in delta] == ["delta"]
    assert delta[0]["predicted"] == x["predicted"]


def test_validate_input_errors():
    cap = _two_level("a", "t", "ng", IIDGeometric(0.5), 3, seed=60, prompts=1,
                     tokens_per_prompt=40)
    with pytest.raises(PolyspecInputError, match="traces: no captured configurations"):
        validate([])
    with pytest.raises(PolyspecInputError, match="traces: configuration name 'a' appears twice"):
        validate([cap, cap])
    with pytest.raises(PolyspecInputError, match=r"a.rounds: no acceptance data for pair"):
        predict_config(cap, {}, fit_costs(cap))


# --- acceptance coupled across the levels of a top-level round ------------------------------
def test_group_rounds_follows_the_accumulate_identity():
    from polyspec_theory.planning.coupling import group_rounds

    laws = [BetaMixed(6.0, 2.0), Positional([0.7, 0.5]), IIDGeometric(0.6)]
    cap, _ = simulate_capture(SyntheticSpec(
            "g", ["t", "mid", "small", "ng"], [T, MID, SMALL, NG], laws,
                              [5, 3, 2], prompts=2, tokens_per_prompt=120, seed=80))
    owner = group_rounds(cap.rounds, cap.n)
    for i in range(1, cap.n - 1):
        up, lo = cap.rounds[i - 1], cap.rounds[i]
        assert (owner[i] >= 0).all()
        # each top-level round owns level-i rounds whose lengths sum to its level-(i-1) blocks
        for j in np.unique(owner[i]):
            own_up = owner[i - 1] == j
            assert (lo.A[owner[i] == j] + 1).sum() == up.G[own_up].sum()
    broken = cap.rounds[1].select(np.ones(cap.rounds[1].n, bool))  # a copy
    broken.A[0] += 1 if broken.A[0] < broken.G[0] else -1
    with pytest.raises(PolyspecInputError, match="not an accumulate-policy trace"):
        group_rounds([cap.rounds[0], broken, cap.rounds[2]], cap.n)


def test_coupling_recovers_shared_acceptance_and_predicts_the_time():
    from polyspec_theory.planning.coupling import (
        LevelCoupling,
        coupled_forwards,
        fit_coupling,
        select_coupling,
    )

    easy = [IIDGeometric(0.95), IIDGeometric(0.9)]
    hard = [IIDGeometric(0.35), IIDGeometric(0.3)]
    cap, _ = simulate_capture(SyntheticSpec("r", ["t", "mid", "ng"], [T, MID, NG], easy, [5, 2],
                              regimes=[(0.4, easy), (0.6, hard)], prompts=40,
                              tokens_per_prompt=200, seed=81))
    mix = select_coupling(cap.rounds, cap.n)
    assert mix.k == 2
    # fixed seed; thousands of top-level rounds: EM estimates within 0.05 of the truth
    hi = int(np.argmax(mix.alphas[:, 0]))
    np.testing.assert_allclose([mix.weights[hi], mix.weights[1 - hi]], [0.4, 0.6], atol=0.05)
    np.testing.assert_allclose(mix.alphas[hi], [0.95, 0.9], atol=0.05)
    np.testing.assert_allclose(mix.alphas[1 - hi], [0.35, 0.3], atol=0.05)
    # the exact renewal-reward of the TRUE mixture lies within the measured CI
    casc = Cascade((Model("t", T), Model("mid", MID), Model("ng", NG)), tuple(easy), (5, 2))
    true = LevelCoupling(np.array([0.4, 0.6]), np.array([[0.95, 0.9], [0.35, 0.3]]),
                         0.0, 0.0, 0)
    fw, tau = coupled_forwards(casc, true)
    assert abs(cap.time_per_token - tau) < Z * cap.time_per_token_se()
    # P1 with independent levels misses it by far more than the interval
    iid = predict(Cascade(casc.models, tuple(fit_pairs([cap])[cap.pair_key(i)].law("iid")
                                             for i in range(2)), (5, 2)))
    # (fixed seed: the iid miss is 4 standard errors here, the fitted mixture's is < 1)
    se = cap.time_per_token_se()
    assert abs(cap.time_per_token - iid.time_per_token) > 3 * se
    _, tau_fit = coupled_forwards(casc, mix)
    assert abs(cap.time_per_token - tau_fit) < 0.25 * abs(cap.time_per_token - iid.time_per_token)
    # one class = P1 with the pooled iid MLE of each level
    one = fit_coupling(cap.rounds, cap.n, 1)
    f1, t1 = coupled_forwards(casc, one)
    assert t1 == pytest.approx(iid.time_per_token, rel=1e-6)


def _coupling_em_as_first_written(rounds, n_levels, k, seed=0, n_init=8, iters=300):
    """fit_coupling's EM with numpy's row max and row sums (the reference the column-wise
    version must equal to the last bit): (loglik, weights, alphas) of the best start."""
    from polyspec_theory.planning.coupling import group_rounds

    owner = group_rounds(rounds, n_levels)
    m, n_top = n_levels - 1, len(rounds[0].G)
    succ, fail = np.zeros((n_top, m)), np.zeros((n_top, m))
    for i in range(m):
        np.add.at(succ[:, i], owner[i], rounds[i].A)
        np.add.at(fail[:, i], owner[i], (rounds[i].A < rounds[i].G).astype(float))
    rng = np.random.default_rng(seed)
    best = None
    for t in range(n_init):
        if t == 0:
            q = (succ[:, 0] + 0.5) / (succ[:, 0] + fail[:, 0] + 1.0)
            resp = np.zeros((n_top, k))
            resp[np.arange(n_top), np.minimum((np.argsort(np.argsort(q)) * k) // n_top,
                                              k - 1)] = 1.0
        else:
            resp = rng.dirichlet(np.ones(k), size=n_top)
        ll_old = -np.inf
        for _ in range(iters):
            w = resp.sum(0) + 1e-12
            a = np.clip((resp.T @ succ + 1e-9) / (resp.T @ (succ + fail) + 2e-9), 1e-9,
                        1 - 1e-9)
            logp = succ @ np.log(a).T + fail @ np.log1p(-a).T + np.log(w / w.sum())
            mx = logp.max(1, keepdims=True)
            ll = float(np.sum(mx[:, 0] + np.log(np.exp(logp - mx).sum(1))))
            resp = np.exp(logp - mx)
            resp /= resp.sum(1, keepdims=True)
            if ll - ll_old < 1e-10:
                break
            ll_old = ll
        if best is None or ll > best[0]:
            best = (ll, w / w.sum(), a)
    return best


def test_coupling_em_equals_numpys_row_max_and_sum_to_the_last_bit():
    from polyspec_theory.planning.coupling import fit_coupling

    easy, hard = [IIDGeometric(0.9), IIDGeometric(0.85)], [IIDGeometric(0.4), IIDGeometric(0.3)]
    cap, _ = simulate_capture(SyntheticSpec("r", ["t", "mid", "ng"], [T, MID, NG], easy, [4, 2],
                              regimes=[(0.5, easy), (0.5, hard)], prompts=8,
                              tokens_per_prompt=120, seed=82))
    for bad in ({"k": 0}, {"n_init": 0}, {"iters": 0}):
        (name, value), = bad.items()
        with pytest.raises(PolyspecInputError, match=f"^{name}"):
            fit_coupling(cap.rounds, cap.n, **{"k": 2, **bad})
    # one class runs one start (every start ends on its EM state) unless one iteration only
    for k, iters in ((1, 300), (2, 300), (3, 300), (1, 1), (1, 2)):
        got = fit_coupling(cap.rounds, cap.n, k, iters=iters)
        ll, w, a = _coupling_em_as_first_written(cap.rounds, cap.n, k, iters=iters)
        assert got.loglik == ll and got.weights.tolist() == w.tolist()
        assert got.alphas.tolist() == a.tolist()


def test_count_factors_fill_and_reuse_one_cache_with_the_same_numbers():
    from validation.analysis.forecast import count_factors, count_ratios

    caps, _, _ = _forecast_captures()
    two = [c for c in caps if c.n == 2]
    assert {c.name for c in two} == {"c0", "c1"}
    assert not np.array_equal(count_ratios(two[0]), count_ratios(two[1]))
    cache = {}
    assert count_factors(2, 0.0, caps, ratios=cache).tolist() == \
        count_factors(2, 0.0, caps).tolist()
    assert set(cache) == {"c0", "c1"}
    for c in two:
        assert cache[c.name].tolist() == count_ratios(c).tolist()
    assert count_factors(2, 0.0, caps, exclude="c0", ratios=cache).tolist() == \
        count_factors(2, 0.0, caps, exclude="c0").tolist()


# --- the predictive headline: forecasts from other captures and a composition profile ------
def test_forecast_predicts_a_capture_from_the_others_within_its_interval():
    from validation.analysis.forecast import Config, forecast, measured_ci95
    from validation.traces.synthetic import synthetic_profile

    laws = {("t", "mid"): IIDGeometric(0.8), ("mid", "ng"): IIDGeometric(0.6),
            ("t", "ng"): IIDGeometric(0.5)}
    costs = {"t": T, "mid": MID, "ng": NG}
    configs = [(("t", "mid"), (3,)), (("t", "mid"), (5,)), (("t", "mid", "ng"), (4, 2)),
               (("t", "ng"), (2,)), (("mid", "ng"), (3,)), (("t", "mid", "ng"), (6, 3))]
    kw = dict(prompts=12, tokens_per_prompt=200, prompt_len=32, overhead_per_forward=1e-4)
    caps = []
    for k, (models, th) in enumerate(configs):
        name = "-".join(models) + "_" + "-".join(map(str, th))
        caps.append(simulate_capture(SyntheticSpec(name, list(models), [costs[m] for m in models],
                                     [laws[(models[i], models[i + 1])]
                                      for i in range(len(models) - 1)], list(th),
                                     seed=200 + k, **kw))[0])
    target = caps[-1]  # t <- mid <- ng at (6, 3): that threshold pair was captured nowhere
    prof = synthetic_profile(list(target.models), [costs[m] for m in target.models],
                             list(target.thresholds), context=32 + 100, ar_context=32 + 64)
    fc = forecast(Config(target.models, target.thresholds), caps, prof.cost_curves(), prof.ar_s,
                  exclude=target.name, prompts=[s["prompt"] for s in target.summaries])
    assert target.name not in fc.acceptance_from and len(fc.acceptance_from) == 4
    # the exact speedup of the true model: P1 with the true laws and costs + the overhead
    true = predict(Cascade(tuple(Model(m, costs[m]) for m in target.models),
                           (laws[("t", "mid")], laws[("mid", "ng")]), target.thresholds))
    assert fc.overhead_per_token == pytest.approx(
        1e-4 * sum(lv.forwards_per_token for lv in true.levels), rel=0.05)
    lo, hi = measured_ci95(target)
    assert lo < target.measured_speedup < hi
    # the forecast lies inside the measured interval (the acceptance fits carry their own
    # sampling error: 12 prompts x 200 tokens per capture; fixed seeds)
    assert lo <= fc.speedup <= hi
    assert abs(fc.speedup / target.measured_speedup - 1) < 0.03


def test_forecast_refuses_a_pair_captured_nowhere_else():
    from validation.analysis.forecast import Config, NoHoldoutData, forecast

    cap = _two_level("a", "t", "mid", IIDGeometric(0.7), 3, seed=5, prompts=2)
    with pytest.raises(NoHoldoutData, match="no other capture has the pair t <- mid"):
        forecast(Config(cap.models, cap.thresholds), [cap], [T, MID], 0.006, exclude="a")


def test_error_quantile_is_the_conformal_order_statistic():
    from validation.analysis.forecast import error_quantile

    e = [0.01, -0.05, 0.02, 0.03, -0.04, 0.005, 0.07, -0.02, 0.015]
    # n = 9: ceil(0.95 * 10) = 10 > 9 -> the largest |error|
    assert error_quantile(e) == 0.07
    # ceil(0.5 * 10) = 5 -> the 5th smallest |error| (0.005, 0.01, 0.015, 0.02, 0.02)
    assert error_quantile(e, 0.5) == 0.02
    with pytest.raises(PolyspecInputError, match="errors: need at least one"):
        error_quantile([])


# --- leave-one-out fits on configurations that differ --------------------------------------
# (overhead and in-cascade slowdown differ per configuration, so a fit that includes the
# configuration it predicts gives a different value from the leave-one-out fit)
LOO_SPECS = {  # name: (verifier, drafter, law, theta, (o_fwd, o_round), cascade_load)
    "a": ("t", "mid", BetaMixed(5.0, 2.0), 6, (2e-4, 5e-4), (1.1, 1.5)),
    "b": ("t", "ng", IIDGeometric(0.5), 1, (2.6e-4, 6.5e-4), (1.3, 1.2)),
    "c": ("t", "mid", BetaMixed(5.0, 2.0), 3, (1.6e-4, 4e-4), (1.8, 1.9)),
    "d": ("mid", "ng", Positional([0.6, 0.5]), 2, (2.3e-4, 5.75e-4), (1.4, 1.7)),
    "e": ("mid", "ng", Positional([0.6, 0.5]), 5, (1.8e-4, 4.5e-4), (1.05, 2.0)),
    "f": ("t", "ng", IIDGeometric(0.7), 4, (1.2e-4, 6e-4), (1.6, 1.35)),
}


@pytest.fixture(scope="module")
def loo_captures():
    caps = []
    for k, (name, (v, d, law, th, (o_f, o_r), load)) in enumerate(LOO_SPECS.items()):
        caps.append(_two_level(name, v, d, law, th, seed=90 + k, prompts=3,
                               overhead_per_forward=o_f, overhead_per_round=o_r,
                               cascade_load=list(load)))
    return caps


def _loo_overhead_by_hand(caps, name):
    """Non-negative weighted least squares (weights 1/wall) of the TRUE overhead
    o_f F + o_r R of the other configurations on (F, R), from the fixture's knobs, by
    scipy's bounded-variable least squares (not the nnls the code uses)."""
    from scipy.optimize import lsq_linear

    rows, ys = [], []
    for c in caps:
        if c.name == name:
            continue
        o_f, o_r = LOO_SPECS[c.name][4]
        fwd, rnd = float(sum(c.forward_count)), float(sum(r.n for r in c.rounds))
        rows.append([fwd / c.wall_s, rnd / c.wall_s])
        ys.append((o_f * fwd + o_r * rnd) / c.wall_s)
    sol = lsq_linear(np.array(rows), np.array(ys), bounds=(0.0, np.inf), method="bvls",
                     tol=1e-14)
    return sol.x


def _loo_slowdown_by_hand(name, model, role_):
    """Median of the fixture's cascade_load of (model, role) over the other configurations."""
    vals = []
    for other, (v, d, *_rest, load) in LOO_SPECS.items():
        if other == name:
            continue
        if role_ == "verify" and v == model:
            vals.append(load[0])
        if role_ == "bottom" and d == model:
            vals.append(load[1])
    return float(np.median(vals))


def test_leave_one_out_overhead_and_slowdown_on_differing_configurations(loo_captures):
    from validation.analysis.residuals import role, slowdown_factor, slowdown_ratios

    caps = loo_captures
    for c in caps:  # the fixture's overhead is exactly the knobs
        o_f, o_r = LOO_SPECS[c.name][4]
        assert c.overhead_s == pytest.approx(
            o_f * sum(c.forward_count) + o_r * sum(r.n for r in c.rounds), rel=1e-9)
    res = validate(caps, insertions=False, holdout=False)
    fits = {c.name: fit_pairs([c]) for c in caps}
    ratios = {c.name: slowdown_ratios(c, fits[c.name]) for c in caps}
    for c, r in zip(caps, res.configs, strict=True):
        want = _loo_overhead_by_hand(caps, c.name)
        ov = overhead_model(caps, exclude=c.name, like=c)
        assert c.name not in ov.fitted_on and len(ov.fitted_on) == len(caps) - 1
        assert (ov.per_forward, ov.per_round) == pytest.approx(tuple(want), rel=1e-7,
                                                               abs=1e-12)
        got = r.decomposition["overhead_model"]
        assert (got["per_forward"], got["per_round"]) == pytest.approx(tuple(want), rel=1e-7,
                                                                       abs=1e-12)
        # the in-sample fit is different here: leaving the configuration out matters
        ins = overhead_model(caps)
        assert max(abs(ins.per_forward - want[0]), abs(ins.per_round - want[1])) > 1e-3 * want.max()
        for i, model in enumerate(c.models):
            rl = role(c, i)
            # this configuration's own ratio is its cascade load (noiseless costs)
            assert ratios[c.name][(model, rl)] == pytest.approx(
                LOO_SPECS[c.name][5][0 if rl == "verify" else 1], rel=1e-9)
            loo = _loo_slowdown_by_hand(c.name, model, rl)
            assert slowdown_factor(ratios, model, rl, c.name, c, caps) == pytest.approx(
                loo, rel=1e-9)
            assert r.decomposition["slowdown_factors"][model] == pytest.approx(loo, rel=1e-9)
    # in-sample medians differ from the leave-one-out ones, and medians from means, here
    assert slowdown_factor(ratios, "t", "verify", None, caps[0], caps) == pytest.approx(1.45)
    assert _loo_slowdown_by_hand("a", "t", "verify") == pytest.approx(1.6)  # mean 1.567


# --- issue 27: forecast, conformal quantile and AR baseline against independent arithmetic -----
@functools.cache
def _forecast_captures():
    """Four synthetic captures (seeded, so the same every call; computed once per process and
    shared by the tests that read them, none of which changes them)."""
    laws = {("t", "mid"): IIDGeometric(0.8), ("mid", "ng"): IIDGeometric(0.6)}
    costs = {"t": T, "mid": MID, "ng": NG}
    kw = dict(prompts=6, tokens_per_prompt=150, prompt_len=32, overhead_per_forward=1e-4)
    caps = [simulate_capture(SyntheticSpec(f"c{k}", list(ms), [costs[m] for m in ms],
                             [laws[(ms[i], ms[i + 1])] for i in range(len(ms) - 1)], list(th),
                             seed=300 + k, **kw))[0]
            for k, (ms, th) in enumerate([(("t", "mid"), (3,)), (("mid", "ng"), (2,)),
                                          (("t", "mid", "ng"), (4, 2))])]
    # the same pairs at top_k = 40 with a 50x larger overhead and other laws: never used
    other = simulate_capture(SyntheticSpec("k40", ["t", "mid", "ng"], [T, MID, NG],
                             [IIDGeometric(0.3), IIDGeometric(0.2)], [4, 2], seed=399,
                             top_k=40, **{**kw, "overhead_per_forward": 5e-3}))[0]
    return caps, other, costs


def test_forecast_uses_each_prompts_own_law_and_only_its_top_k():
    from validation.analysis.forecast import Config, forecast

    caps, other, costs = _forecast_captures()
    target = caps[-1]
    curves = [costs[m] for m in target.models]
    prompts = [int(s["prompt"]) for s in target.summaries]
    fc = forecast(Config(target.models, target.thresholds), caps, curves, 0.006,
                  exclude=target.name, prompts=prompts)
    # independent: per prompt, the censored iid MLE sum A / (sum A + #{A < G}) of each pair
    # over the other captures' rounds of that prompt; P1 per prompt; mean of the taus
    taus = []
    for p in prompts:
        alphas = []
        for key in (("t", "mid", 0.0, 0), ("mid", "ng", 0.0, 0)):
            a = np.concatenate([c.rounds[i].A[c.rounds[i].prompt == p] for c in caps[:-1]
                                for i in range(c.n - 1) if c.pair_key(i) == key])
            g = np.concatenate([c.rounds[i].G[c.rounds[i].prompt == p] for c in caps[:-1]
                                for i in range(c.n - 1) if c.pair_key(i) == key])
            alphas.append(a.sum() / (a.sum() + np.sum(a < g)))
        cas = Cascade(tuple(Model(m, costs[m]) for m in target.models),
                      tuple(IIDGeometric(x) for x in alphas), target.thresholds)
        taus.append(predict(cas).time_per_token)
    assert fc.forward_time_per_token == pytest.approx(float(np.mean(taus)), rel=1e-9)
    # the per-prompt laws differ: the pooled law gives another value
    assert np.ptp(taus) > 1e-3 * np.mean(taus)
    # a capture at another top_k changes nothing (laws, overhead, prompts, sources)
    fk = forecast(Config(target.models, target.thresholds), caps + [other], curves, 0.006,
                  exclude=target.name, prompts=prompts)
    assert fk.speedup == fc.speedup and fk.overhead_per_token == fc.overhead_per_token
    assert fk.acceptance_from == fc.acceptance_from and "k40" not in fk.acceptance_from
    fd = forecast(Config(target.models, target.thresholds), caps + [other], curves, 0.006,
                  exclude=target.name)
    assert fd.prompts == fc.prompts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=40, unique=True),
       st.floats(0.05, 1.0))
def test_error_quantile_is_the_split_conformal_order_statistic(errors, level):
    from validation.analysis.forecast import error_quantile

    q = error_quantile(errors, level)
    # independent: the smallest |e| with at least ceil(level (n + 1)) errors (capped at n)
    # at or below it, counted directly
    n = len(errors)
    need = min(math.ceil(level * (n + 1)), n)
    a = [abs(x) for x in errors]
    expect = min(v for v in a if sum(x <= v for x in a) >= need)
    assert q == expect


def test_error_quantile_pinned_order_statistics():
    from validation.analysis.forecast import error_quantile

    e = [0.1 * k for k in range(1, 11)]  # n = 10
    assert error_quantile(e, 0.9) == pytest.approx(1.0)  # ceil(0.9 * 11) = 10: the largest
    assert error_quantile(e, 0.8) == pytest.approx(0.9)  # ceil(8.8) = 9
    assert error_quantile(e, 0.5) == pytest.approx(0.6)  # ceil(5.5) = 6
    assert error_quantile(e[:4], 0.5) == pytest.approx(0.3)  # ceil(2.5) = 3


def test_ar_time_per_token_is_a_ratio_of_sums():
    from validation.traces.dataset import Capture

    cap, trace = simulate_capture(SyntheticSpec(
            "ar", ["t", "mid"], [T, MID], [IIDGeometric(0.7)], [3],
                                  prompts=3, tokens_per_prompt=60, seed=17))
    recs = [dict(r) for r in trace]
    ar = [r for r in recs if r.get("type") == "ar" and r["model"] == "t"]
    # prompts of different lengths and speeds: the mean of per-prompt ratios differs
    for r, (n, w) in zip(ar, [(10, 0.2), (100, 0.5), (40, 0.9)], strict=True):
        r["n_tokens"], r["wall_s"], r["forward_s"] = n, w, 0.9 * w
    again = Capture.from_records(cap.header, recs, path="synthetic")
    assert again.ar_time_per_token == pytest.approx((0.2 + 0.5 + 0.9) / 150, rel=1e-12)
    assert abs(again.ar_time_per_token - np.mean([0.02, 0.005, 0.0225])) > 1e-3


def test_holdout_from_pooled_minus_own_equals_pooling_the_others():
    """validate's leave-one-out laws (pooled counts minus the capture's own, linear in the
    number of captures) are exactly those of pooling the other captures afresh."""
    from polyspec_theory.core.laws import FAMILIES
    from validation.analysis.fits import counts_without, fit_pairs
    from validation.analysis.validate import _holdout_speedup

    caps, other, _ = _forecast_captures()
    caps = caps + [other]
    pooled = fit_pairs(caps)
    for c in caps:
        costs = fit_costs(c)
        others = [x for x in caps if x.name != c.name]
        fresh = fit_pairs(others)
        for i in range(c.n - 1):
            key = c.pair_key(i)
            if key in fresh:
                got = counts_without(pooled[key].counts, c.rounds[i].counts())
                want = fresh[key].counts
                for f in ("accepted", "caps", "counts"):
                    np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
        h = _holdout_speedup(c, pooled, FAMILIES, costs)
        if all(c.pair_key(i) in fresh for i in range(c.n - 1)):
            assert h == predict_config(c, fresh, costs, None).speedup
        else:
            assert h is None
    with pytest.raises(PolyspecInputError, match="more rounds in the part"):
        counts_without(caps[0].rounds[0].counts(), pooled[caps[0].pair_key(0)].counts)


def test_fit_pairs_of_chosen_keys_equal_those_among_all_pairs():
    """fit_pairs(keys=...) (figure 4 fits only the pairs it shows): each chosen pair's
    pooled rounds and fits are those of fitting every pair, the others are left out, and
    pool_pairs pools the same rounds (counted by hand from the captures); a key captured
    nowhere is refused, naming the field."""
    from validation.analysis.fits import pool_pairs

    caps, other, _ = _forecast_captures()
    caps = caps + [other]
    every = fit_pairs(caps)
    pooled = pool_pairs(caps)
    assert list(pooled) == list(every) and len(every) >= 2
    for key, (counts, names) in pooled.items():
        own = [(c.name, c.rounds[i]) for c in caps for i in range(c.n - 1)
               if c.pair_key(i) == key and c.rounds[i].n]
        assert names == tuple(n for n, _ in own) == every[key].configs
        assert counts.n_rounds == sum(r.n for _, r in own) == every[key].counts.n_rounds
    chosen = [k for k in every][1:2]
    some = fit_pairs(caps, keys=chosen)
    assert list(some) == chosen
    for key in chosen:
        assert repr(some[key].to_dict()) == repr(every[key].to_dict())
    assert fit_pairs(caps, keys=()) == {}
    with pytest.raises(PolyspecInputError, match="keys"):
        fit_pairs(caps, keys=[("nobody", "none", 0.0, None)])


def test_fit_laws_once_keeps_fits_by_the_rounds():
    """validate's run cache (fit_laws_once): equal cells give the kept fits (the source does
    not enter a fit), other cells or families fit afresh; every kept fit equals a fresh
    fit_laws of the same rounds, and the holdout speedup is the same with the cache."""
    from polyspec_theory.core.counts import AcceptanceCounts
    from polyspec_theory.core.laws import FAMILIES, fit_laws
    from validation.analysis.fits import fit_laws_once
    from validation.analysis.validate import _holdout_speedup

    d = AcceptanceCounts.from_samples([0, 1, 3, 3, 2, 0, 1], [3, 3, 3, 3, 4, 4, 4], source="x")
    same = AcceptanceCounts.from_histogram([1, 1, 0, 2], 3).merge(
        AcceptanceCounts.from_histogram([1, 1, 1, 0, 0], 4))
    cache: dict = {}
    first = fit_laws_once(d, FAMILIES, cache)
    assert fit_laws_once(same, list(FAMILIES), cache) is first
    assert len(cache) == 1
    assert repr([f.to_dict() for f in first]) == repr([f.to_dict() for f in fit_laws(d)])
    assert fit_laws_once(d, ("iid",), cache) is not first and len(cache) == 2
    other = AcceptanceCounts.from_histogram([1, 1, 0, 3], 3).merge(  # same cells, one more
        AcceptanceCounts.from_histogram([1, 1, 1, 0, 0], 4))
    assert fit_laws_once(other, FAMILIES, cache) is not first and len(cache) == 3
    assert repr([f.to_dict() for f in fit_laws_once(d, FAMILIES, None)]) == \
        repr([f.to_dict() for f in first])

    caps, other_cap, _ = _forecast_captures()
    caps = caps + [other_cap]
    pooled = fit_pairs(caps)
    run: dict = {}
    for c in caps:
        costs = fit_costs(c)
        assert _holdout_speedup(c, pooled, FAMILIES, costs, run) == \
            _holdout_speedup(c, pooled, FAMILIES, costs)


def test_cached_cost_fit_is_the_fit_of_its_arguments():
    """cached_cost_fit (validate's cost fits, kept per process): the kept fit equals a fresh
    fit_cost_curve of the same timings field by field to the last bit, equal arrays give
    the kept object, other timings, contexts or names fit afresh; the kept arrays are
    read-only (shared), a missing context is the fit without one."""
    import dataclasses

    from polyspec_theory.core.costs import fit_cost_curve
    from validation.analysis import fits as fits_module
    from validation.analysis.fits import cached_cost_fit

    rng = np.random.default_rng(7)
    m = np.repeat(np.arange(1, 6), 4)
    s = 0.01 + 0.002 * (m - 1) + rng.uniform(0, 1e-3, m.size)
    ctx = np.tile([10.0, 50.0], m.size // 2)

    def fields(f):
        return repr([(k, np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                     for k, v in dataclasses.asdict(f).items()])

    first = cached_cost_fit(m, s, ctx, "a")
    assert fields(first) == fields(fit_cost_curve(m, s, ctx, name="a"))
    assert cached_cost_fit(m.copy(), s.copy(), ctx.copy(), "a") is first
    s2 = s.copy()
    s2[3] += 1e-4
    for args in ((m, s2, ctx, "a"), (m, s, ctx + 1.0, "a"), (m, s, ctx, "b")):
        other = cached_cost_fit(*args)
        assert other is not first
        assert fields(other) == fields(fit_cost_curve(*args[:3], name=args[3]))
    assert fields(cached_cost_fit(m, s, None, "a")) == fields(fit_cost_curve(m, s, name="a"))
    with pytest.raises(ValueError):
        first.table[0] = 1.0
    # an object array has no content key (its bytes are addresses): fitted, never kept
    kept = len(fits_module._COST_FITS)
    mo = np.array(list(m), dtype=object)
    assert fields(cached_cost_fit(mo, s, ctx, "a")) == fields(first)
    assert len(fits_module._COST_FITS) == kept
