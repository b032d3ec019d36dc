"""The Monte-Carlo ratio estimator and its standard error, checked two-sided.

Every Monte-Carlo claim of the project rests on ``simulators/runtime.py: ratio_estimate``
(``sum(num)/sum(den)`` over independent chains with a delta-method standard error). A CI that
is too narrow makes correct code fail; one that is too wide lets wrong code pass. So the
standard error is checked against an exact value, not only for coverage from below:

* by hand on a few numbers (exact rationals, no Monte Carlo);
* against the exact asymptotic standard deviation of the estimator for cascades whose
  top-level rounds all cost the same time ``C`` (two models with constant costs, or drafters
  that cost 0): a chain that stops at the first top-level round with ``>= t`` tokens runs
  ``N = min{k : S_k >= t}`` rounds (``S_k`` the renewal of ``L_1``), so its time is ``C N``
  and its tokens ``S_N``. The estimator's residual is ``S_N - mu N`` with mean 0 and
  variance ``sigma^2 E[N]`` exactly (Wald's first and second identities), hence
  ``sd(speedup estimate) = (T_1/C) sigma / sqrt(K E[N])`` over ``K`` chains, with
  ``E[N]`` from ``polyspec_theory/bounds/tails.py: forward_count_moments`` and ``sigma^2 = Var
  L_1``;
* by coverage bounded above AND below over many seeds at a 50 % nominal level (at 95 % a
  too-wide interval cannot be noticed with a few dozen seeds);
* for the token-level simulator (context-dependent acceptance: no closed form), by the spread
  of the estimates over independent seeds against the reported standard errors (chi-square).

False-failure budget (fixed seeds, so every run gives the same verdict; rates below are for
an arbitrary seed): width checks at z = 4.42 (two-sided 1e-5) on the standard error's own
sampling error, 4 checks -> 4e-5; coverage: 3.3e-4 + 1.0e-4; token spread: chi-square
interval 1 - 1e-4. Total < 6e-4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from polyspec_theory.bounds.tails import forward_count_moments, length_moments
from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric, Positional
from polyspec_theory.schemes import predict
from simulators.runtime import Z95, mean_estimate, ratio_estimate

Z_WIDTH = float(stats.norm.isf(1e-5 / 2))  # 4.42


def _exact_delta_se(num, den):
    """The delta-method standard error written out with exact rationals:
    ``sqrt(sum((x - R y)^2) / (K (K - 1))) / mean(y)``, ``R = sum x / sum y``."""
    x = [Fraction(v) for v in num]
    y = [Fraction(v) for v in den]
    k = len(x)
    r = sum(x) / sum(y)
    ss = sum((a - r * b) ** 2 for a, b in zip(x, y, strict=True))
    var = ss / (k * (k - 1)) / (sum(y) / k) ** 2
    return r, math.sqrt(var)


def test_ratio_estimate_by_hand():
    num, den = [3.0, 1.0, 4.0, 1.0, 5.0], [2.0, 1.0, 3.0, 1.0, 2.0]
    r, se = _exact_delta_se(num, den)
    est = ratio_estimate(num, den)
    assert est.value == pytest.approx(float(r), rel=1e-15) == 14 / 9
    assert est.se == pytest.approx(se, rel=1e-13)
    assert est.low == pytest.approx(float(r) - Z95 * se, rel=1e-13)
    assert est.high == pytest.approx(float(r) + Z95 * se, rel=1e-13)
    # a scale multiplies the value and the standard error (its absolute value)
    s = ratio_estimate(num, den, scale=-2.5)
    assert s.value == pytest.approx(-2.5 * float(r), rel=1e-15)
    assert s.se == pytest.approx(2.5 * se, rel=1e-13)
    assert s.low == pytest.approx(-2.5 * float(r) - Z95 * 2.5 * se, rel=1e-13)
    assert s.high == pytest.approx(-2.5 * float(r) + Z95 * 2.5 * se, rel=1e-13)
    # a sample mean: se = sd / sqrt(n) (ddof = 1)
    x = [2.0, 4.0, 4.0, 5.0, 9.0]
    m = mean_estimate(x)
    assert m.value == 4.8
    assert m.se == pytest.approx(float(np.std(x, ddof=1)) / math.sqrt(5), rel=1e-13)
    # degenerate inputs
    assert math.isinf(ratio_estimate([1.0], [2.0]).se)
    assert math.isnan(ratio_estimate([1.0, 2.0], [0.0, 0.0]).value)


def _exact_speedup_sd(l_pmf, tokens_per_chain, round_cost, t1, chains):
    """Exact asymptotic sd of the speedup estimate (module docstring)."""
    en = forward_count_moments(l_pmf, tokens_per_chain)["mean"]
    var_l = length_moments(l_pmf)["var"]
    return (t1 / round_cost) * math.sqrt(var_l / (chains * en))


def _se_band(resid, chains):
    """Relative sampling sd of a delta-method se from its residuals (kurtosis-based):
    ``sd(se)/se ~ sqrt((kappa - 1) / K) / 2``."""
    r = np.asarray(resid, dtype=np.float64)
    kappa = float(np.mean(r**4) / np.mean(r**2) ** 2)
    return math.sqrt(max(kappa - 1.0, 0.5) / chains) / 2.0


TWO_MODEL = Cascade((Model("t", CostCurve.constant(1.0)), Model("d", CostCurve.constant(0.1))),
                    (IIDGeometric(0.7),), (4,), name="two-constant")
# three levels, drafters free: every top-level round costs T_1 = 1 whatever its block
THREE_FREE = Cascade((Model("t", CostCurve.constant(1.0)), Model("m", CostCurve.constant(0.0)),
                      Model("s", CostCurve.constant(0.0))),
                     (Positional([0.8, 0.6]), IIDGeometric(0.5)), (3, 2), name="three-free")


def _round_cost(cas):
    """The constant cost of one top-level round of these cascades."""
    if cas.n == 2:
        return cas.thresholds[0] * cas.costs[1].t1 + cas.costs[0](cas.thresholds[0] + 1)
    return cas.costs[0].t1


@pytest.mark.parametrize("cas", [TWO_MODEL, THREE_FREE], ids=lambda c: c.name)
def test_length_simulator_se_equals_the_exact_sd(cas):
    from simulators.length import simulate_lengths

    chains, per_chain = 512, 200
    res = simulate_lengths(cas, chains * per_chain, seed=21, chains=chains)
    l_pmf = predict(cas).levels[0].emitted_pmf  # law of L_1 (for n = 2: capped geometric)
    mu = length_moments(l_pmf)["mu"]
    exact = _exact_speedup_sd(l_pmf, per_chain, _round_cost(cas), cas.costs[0].t1, chains)
    # the chains' time really is C N (the premise of the exact formula)
    np.testing.assert_allclose(res.chain_time, _round_cost(cas) * res.chain_forwards[:, 0],
                               rtol=1e-12)
    band = _se_band(res.chain_tokens - mu * res.chain_forwards[:, 0], chains)
    assert abs(res.speedup.se / exact - 1.0) <= Z_WIDTH * band, (res.speedup.se, exact, band)
    # the reported 95 % intervals are value +- 1.96 se
    for est in (res.speedup, res.time_per_token):
        assert est.high - est.low == pytest.approx(2 * Z95 * est.se, rel=1e-12)
    # time per token: the same residual, sd = (C/mu^2) sigma / sqrt(K E[N])
    tau_exact = exact * (_round_cost(cas) / cas.costs[0].t1) ** 2 / mu**2
    assert abs(res.time_per_token.se / tau_exact - 1.0) <= Z_WIDTH * band


def test_serving_simulator_se_equals_the_exact_sd():
    """Batch 1 with constant costs is the plain two-model cascade: same exact sd."""
    from simulators.serving import simulate_serving

    chains, per_chain = 512, 200
    res = simulate_serving(TWO_MODEL, 1, chains * per_chain, seed=22, chains=chains)
    l_pmf = predict(TWO_MODEL).levels[0].emitted_pmf
    mu = length_moments(l_pmf)["mu"]
    c = _round_cost(TWO_MODEL)
    exact = _exact_speedup_sd(l_pmf, per_chain, c, 1.0, chains)
    fwd = res.chain_time / c
    np.testing.assert_allclose(fwd, np.round(fwd), rtol=0, atol=1e-9)
    band = _se_band(res.chain_tokens - mu * fwd, chains)
    assert abs(res.speedup.se / exact - 1.0) <= Z_WIDTH * band, (res.speedup.se, exact, band)


def test_ci_coverage_is_bounded_above_and_below():
    """Over 120 seeds the estimate lies within 0.674 se (a 50 % interval) of P1's exact
    speedup a Binomial(120, 0.5) number of times: accepted range [41, 79] (false-failure
    probability 3.3e-4 under a correct se). A se 1.5x too wide covers ~69 % and fails with
    probability 0.73, 1.5x too narrow ~35 % and fails with probability 0.42 (the exact-width
    tests above catch both surely). The 95 % intervals cover at least 104 times
    (Binomial(120, 0.95) <= 103 has probability 1.0e-4)."""
    from simulators.length import LengthModel, simulate_lengths

    cas = Cascade((Model("t", CostCurve.affine(1.0, 0.05)), Model("m", CostCurve.constant(0.2)),
                   Model("s", CostCurve.constant(0.02))),
                  (IIDGeometric(0.75), Positional([0.8, 0.6])), (4, 2))
    model = LengthModel.from_cascade(cas, histograms=False, width=32)
    truth = predict(cas).speedup
    z50 = float(stats.norm.isf(0.25))
    seeds = 120
    c50 = c95 = 0
    for s in range(seeds):
        r = simulate_lengths(model, 64 * 60, seed=300 + s, chains=64, chunk_len=64)
        c50 += abs(r.speedup.value - truth) <= z50 * r.speedup.se
        c95 += r.speedup.low <= truth <= r.speedup.high
    lo, hi = stats.binom.ppf(2.5e-4, seeds, 0.5), stats.binom.isf(2.5e-4, seeds, 0.5)
    assert (lo, hi) == (41, 79)
    assert lo <= c50 <= hi, c50
    assert stats.binom.cdf(103, seeds, 0.95) < 1.1e-4
    assert c95 >= 104, c95


def test_token_simulator_se_matches_the_spread_over_seeds():
    """Token level (acceptance depends on the context: no closed form). Over 16 independent
    seeds, sum((v_s - mean v)^2) / mean(se_s^2) is chi-square(15) under a correct se; accepted
    range = its central interval of probability 1 - 1e-4 (a 2x wrong se leaves it with
    probability > 0.99)."""
    from simulators.token import TokenModel, make_lms, simulate_tokens

    lms = make_lms(3, vocab=5, order=1, perturbation=0.8, seed=13)
    model = TokenModel.build(lms, [4, 2])
    vals, ses = [], []
    for s in range(16):
        r = simulate_tokens(model, 64 * 50, seed=500 + s, chains=64, chunk_len=64)
        vals.append(r.speedup.value)
        ses.append(r.speedup.se)
    vals, ses = np.array(vals), np.array(ses)
    q = float(np.sum((vals - vals.mean()) ** 2) / np.mean(ses**2))
    lo, hi = stats.chi2.ppf(0.5e-4, 15), stats.chi2.isf(0.5e-4, 15)
    assert lo <= q <= hi, (q, lo, hi)
