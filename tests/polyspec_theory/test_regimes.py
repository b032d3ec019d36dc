"""Hidden-regime acceptance (regimes.py): the round likelihood against a token-by-token forward
algorithm, the exact gradient, parameter recovery, the horizon law against simulation, P1
and the planner with a law per block length, config round trip, input validation."""

import itertools
import math

import numpy as np
import pytest

from polyspec_theory.core import regimes
from polyspec_theory.core.config import Cascade, Model, law_from_config
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.core.regimes import (
    HiddenRegimes,
    RegimeLaw,
    _estep,
    _grad,
    _pack,
    _RoundData,
    _unpack,
    fit_regimes,
)
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.planning.planner import plan, plan_thresholds
from polyspec_theory.planning.pool import Pool
from polyspec_theory.schemes import predict

STICKY = HiddenRegimes([0.7, 0.3], [[0.97, 0.03], [0.02, 0.98]], [0.3, 0.95])
THREE = HiddenRegimes([0.5, 0.3, 0.2], [[0.9, 0.08, 0.02], [0.1, 0.85, 0.05], [0.01, 0.04, 0.95]],
                      [0.1, 0.6, 0.97])


def _token_loglik(m: HiddenRegimes, a, g, groups) -> float:
    """Forward algorithm over token positions: A accepted ones, then a rejection (0) or, for a
    full block, the unobserved bonus position."""
    total = 0.0
    for lab in np.unique(groups):
        sel = groups == lab
        obs = []
        for aa, gg in zip(a[sel], g[sel], strict=True):
            obs += [1] * int(aa) + [0 if aa < gg else -1]
        al = m.init.copy()
        for t, x in enumerate(obs):
            if t:
                al = al @ m.trans
            al = al * (m.accept if x == 1 else 1 - m.accept if x == 0 else 1.0)
            s = al.sum()
            total += math.log(s)
            al = al / s
    return total


def _varied_rounds(seed):
    """Valid rounds with several block lengths: decodes at thresholds 1..6, concatenated."""
    out_a, out_g, out_grp = [], [], []
    for th in range(1, 7):
        a, grp = THREE.sample_rounds(th, 40, 3, seed=seed + th)
        out_a.append(a)
        out_g.append(np.full(a.size, th))
        out_grp.append(grp + 10 * th)
    return np.concatenate(out_a), np.concatenate(out_g), np.concatenate(out_grp)


@pytest.mark.parametrize("model", [STICKY, THREE])
def test_round_likelihood_equals_token_forward_algorithm(model):
    a, g, grp = _varied_rounds(3)
    assert model.loglik(a, g, grp) == pytest.approx(_token_loglik(model, a, g, grp),
                                                    rel=1e-12)
    one = HiddenRegimes([1.0], [[1.0]], [0.63])  # K = 1 is the iid geometric law
    assert one.loglik(a, g, grp) == pytest.approx(IIDGeometric(0.63).loglik(a, g), rel=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_gradient_equals_finite_differences(k):
    a, g, grp = _varied_rounds(5)
    data = _RoundData.build(a, g, grp)
    rng = np.random.default_rng(k)
    x = _pack(STICKY if k == 2 else THREE) + 0.2 * rng.standard_normal(k * k + k - 1)
    m = _unpack(x, k)
    ll, counts = _estep(m, data)
    grad = _grad(m, counts)
    h = 1e-6
    num = [(_estep(_unpack(x + h * e, k), data, False)[0]
            - _estep(_unpack(x - h * e, k), data, False)[0]) / (2 * h) for e in np.eye(x.size)]
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-5)
    # expected counts add up: every observed position is in some regime
    n_obs = int(a.sum() + np.sum(a < g))
    assert counts["ones"].sum() + counts["zeros"].sum() == pytest.approx(n_obs, rel=1e-10)
    assert counts["init"].sum() == pytest.approx(np.unique(grp).size, rel=1e-12)


def test_fit_recovers_parameters():
    a, grp = STICKY.sample_rounds(4, 128, 150, seed=11)
    fit = fit_regimes(a, np.full(a.size, 4), grp, k=2)
    m = fit.model
    # 150 decodes x ~57 rounds. Standard deviations of the estimates from 30 parametric-
    # bootstrap refits of this design: accept 0.0052 / 0.0025, staying probabilities 0.0019 /
    # 0.0018, init 0.043. Tolerances are 5 SD (false-failure rate < 1e-5 for the five
    # together, normal approximation).
    assert np.all(np.abs(m.accept - STICKY.accept) <= [0.026, 0.0125])
    assert np.all(np.abs(np.diag(m.trans) - np.diag(STICKY.trans)) <= [0.0095, 0.009])
    assert m.init[0] == pytest.approx(0.7, abs=0.21)
    assert fit.loglik >= STICKY.loglik(a, np.full(a.size, 4), grp) - 1e-6  # it is the MLE
    assert fit.aic < fit_regimes(a, np.full(a.size, 4), grp, k=1).aic  # regimes detected
    # the fit is deterministic (computed again, not the kept one), and RegimeLaw.fit wraps
    # it with the sequence likelihood
    regimes._FITS.clear()
    again = RegimeLaw.fit(a, np.full(a.size, 4), grp, k=2, horizon=128)
    assert again.law.model.to_config() == m.to_config() and again.loglik == fit.loglik
    assert again.law.horizon == 128 and again.n_params == 5 and again.n == a.size


def test_a_fit_is_kept_per_inputs(monkeypatch):
    """fit_regimes keeps a fit under its inputs: the same rounds (any sequence type), groups,
    k and max_iter give a copy of it without a second optimisation; other groups or another
    k are fitted; the kept fit is the one computed afresh."""
    a, grp = STICKY.sample_rounds(4, 128, 12, seed=5)
    g = np.full(a.size, 4)
    regimes._FITS.clear()
    first = fit_regimes(a, g, grp, k=2)
    calls = []
    compute = regimes._fit_regimes
    monkeypatch.setattr(regimes, "_fit_regimes", lambda *x: calls.append(x) or compute(*x))
    again = fit_regimes(a.tolist(), g, list(grp), k=2)
    assert calls == [] and again is not first and again.model is not first.model
    assert again.model.to_config() == first.model.to_config() and again.loglik == first.loglik
    other = fit_regimes(a, g, np.zeros_like(grp), k=2)  # one sequence
    three = fit_regimes(a, g, grp, k=3)
    assert len(calls) == 2 and other.n_sequences == 1 and three.model.k == 3
    regimes._FITS.clear()
    fresh = fit_regimes(a, g, grp, k=2)
    assert len(calls) == 3
    assert fresh.model.to_config() == first.model.to_config() and fresh.loglik == first.loglik


def test_round_kernels_partition_the_outcomes():
    for m in (STICKY, THREE):
        for g in (1, 4, 9):
            b = m.round_kernels(g)
            np.testing.assert_allclose(b.sum(axis=0).sum(axis=1), 1.0, rtol=1e-12)
    one = HiddenRegimes([1.0], [[1.0]], [0.4]).round_kernels(5)[:, 0, 0]
    np.testing.assert_allclose(one, IIDGeometric(0.4).pmf_vector(5), rtol=1e-12)


def test_one_regime_fit_is_the_iid_mle():
    law = IIDGeometric(0.6)
    g = np.tile([1, 3, 5, 8], 200)
    a = law.rvs(g, seed=0)
    fit = fit_regimes(a, g, k=1)
    ref = IIDGeometric.fit(a, g)
    assert fit.model.accept[0] == pytest.approx(ref.law.alpha, rel=1e-9)
    assert fit.loglik == pytest.approx(ref.loglik, rel=1e-12)


@pytest.mark.parametrize("theta", [1, 3, 12])
def test_horizon_law_matches_simulation(theta):
    """Expected rounds per decode and tokens per round vs 3000 simulated decodes. The
    simulated means have standard errors from the per-decode spread; |z| < 4.5 for both
    (false-failure rate < 1e-5 per statistic)."""
    horizon, n = 64, 3000
    rounds, tokens = STICKY.horizon_speedup_terms(theta, horizon)
    a, grp = STICKY.sample_rounds(theta, horizon, n, seed=theta)
    per_rounds = np.bincount(grp, minlength=n)
    per_tokens = np.bincount(grp, weights=a + 1.0, minlength=n)
    z_r = (per_rounds.mean() - rounds) / (per_rounds.std(ddof=1) / math.sqrt(n))
    z_t = (per_tokens.mean() - tokens) / (per_tokens.std(ddof=1) / math.sqrt(n))
    assert abs(z_r) < 4.5 and abs(z_t) < 4.5
    assert np.all(per_tokens >= horizon) and np.all(per_tokens <= horizon + theta)
    # the horizon law is the expected histogram of A over rounds
    law = RegimeLaw(STICKY, horizon)
    q = law.pmf_vector(theta)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    assert law.mean_emitted(theta) == pytest.approx(tokens / rounds, rel=1e-12)
    emp = np.bincount(a, minlength=theta + 1) / a.size
    # rounds of one decode are dependent: allow 4.5 binomial SE plus 0.01
    assert np.all(np.abs(emp - q) <= 4.5 * np.sqrt(q * (1 - q) / a.size) + 0.01)


def test_two_model_p1_is_exact_under_the_token_model():
    """P1 with the horizon law = expected tokens / expected time of the decode (module
    docstring), for both block policies (a two-model block always has theta tokens)."""
    target, draft = CostCurve.affine(1.0, 0.08), CostCurve.constant(0.05)
    for theta, policy in itertools.product([1, 2, 5, 9], ["accumulate", "truncate"]):
        law = RegimeLaw(STICKY, 100)
        casc = Cascade((Model("t", target), Model("d", draft)), (law,), (theta,), policy)
        rounds, tokens = STICKY.horizon_speedup_terms(theta, 100)
        time = rounds * (target(theta + 1) + theta * draft(1))
        assert predict(casc).speedup == pytest.approx(tokens / time * target(1), rel=1e-12)


def _regime_pool(theta_max, policy):
    costs = {"t": CostCurve.affine(1.0, 0.06), "m": CostCurve.affine(0.3, 0.02),
             "s": CostCurve.constant(0.04)}
    pairs = {("t", "m"): RegimeLaw(STICKY, 64), ("t", "s"): RegimeLaw(THREE, 64),
             ("m", "s"): IIDGeometric(0.7)}
    return Pool(tuple(Model(n, c) for n, c in costs.items()), pairs, theta_max, policy)


@pytest.mark.parametrize("policy", ["accumulate", "truncate"])
def test_planner_equals_brute_force_with_laws_per_block_length(policy):
    pool = _regime_pool(5, policy)
    best = {}
    for chain in [("t", "m"), ("t", "s"), ("t", "m", "s")]:
        for th in itertools.product(range(1, 6), repeat=len(chain) - 1):
            sp = predict(pool.cascade(chain, th)).speedup
            if sp > best.get(chain, (-1.0, None))[0]:
                best[chain] = (sp, th)
    top = max(best, key=lambda c: best[c][0])
    res = plan(pool, top=2)
    assert res.chain == top and res.thresholds == best[top][1]
    assert res.speedup == pytest.approx(best[top][0], rel=1e-12)
    for alt in res.alternatives:
        assert alt.speedup == pytest.approx(best[alt.chain][0], rel=1e-12)
    for chain in best:
        got = plan_thresholds(pool, chain)
        assert got.speedup == pytest.approx(best[chain][0], rel=1e-12)
    unpruned = plan(pool, top=2, prune=False)
    assert (unpruned.chain, unpruned.thresholds) == (res.chain, res.thresholds)


def test_law_config_round_trip_and_cascade_config():
    law = RegimeLaw(THREE, 96)
    cfg = law.to_config()
    back = law_from_config(cfg)
    assert isinstance(back, RegimeLaw) and back == law
    np.testing.assert_allclose(back.cap_pmf_table(20), law.cap_pmf_table(20), rtol=0, atol=0)
    casc = Cascade.from_config({"models": [{"name": "t", "cost": 1.0},
                                           {"name": "d", "cost": 0.1}],
                                "acceptance": [cfg], "thresholds": [4]})
    assert casc.laws[0] == law
    assert Cascade.from_config(casc.to_config()).laws[0] == law
    # per-cap methods of the base class are exact at every cap
    for cap in (1, 4, 11):
        p = law.pmf_vector(cap)
        assert law.mean(cap) == pytest.approx(float(np.dot(np.arange(cap + 1), p)), rel=1e-12)
        assert law.sf(0, cap) == pytest.approx(1 - p[0], rel=1e-12)
        sample = law.rvs(cap, size=20_000, seed=cap)
        assert sample.max() <= cap
        # 20k draws: mean within 5 standard errors (false-failure rate < 1e-6)
        assert abs(sample.mean() - law.mean(cap)) < 5 * law.std(cap) / math.sqrt(sample.size)
    mixed = law.rvs(np.array([1, 5, 5, 9]), seed=0)
    assert mixed.shape == (4,) and np.all(mixed <= [1, 5, 5, 9])


@pytest.mark.parametrize("spec, field", [
    ({"init": [1.0], "trans": [[1.0]], "accept": [0.5]}, "acceptance.regime.horizon"),
    ({"init": [0.5, 0.5], "trans": [[1.0, 0.0], [0.5, 0.4]], "accept": [0.1, 0.9],
      "horizon": 10}, "acceptance.regime.trans[1]"),
    ({"init": [0.5, 0.6], "trans": [[1.0, 0.0], [0.0, 1.0]], "accept": [0.1, 0.9],
      "horizon": 10}, "acceptance.regime.init"),
    ({"init": [1.0], "trans": [[1.0]], "accept": [1.5], "horizon": 10},
     "acceptance.regime.accept"),
    ({"init": [1.0], "trans": [[1.0]], "accept": [0.5], "horizon": 0},
     "acceptance.regime.horizon"),
    ({"init": [0.5, 0.5], "trans": [[1.0]], "accept": [0.1, 0.9], "horizon": 10},
     "acceptance.regime.trans"),
])
def test_bad_regime_config_names_the_field(spec, field):
    with pytest.raises(PolyspecInputError) as e:
        law_from_config({"regime": spec})
    assert str(e.value).startswith(field), str(e.value)


def test_bad_fit_arguments():
    with pytest.raises(PolyspecInputError, match="^groups"):
        fit_regimes([0, 1], [2, 2], [0])
    with pytest.raises(PolyspecInputError, match="^k"):
        fit_regimes([0, 1], [2, 2], k=9)
    with pytest.raises(PolyspecInputError, match="^accept"):
        fit_regimes([3], [2])
    with pytest.raises(PolyspecInputError, match="^horizon"):
        STICKY.horizon_counts(4, 0)
    with pytest.raises(PolyspecInputError, match="^regime"):
        RegimeLaw("not a model", 10)
