"""Acceptance-length laws (docs/theory.md §1.4): exact identities, sampling, fitting, model
comparison.

False-failure budget of the Monte-Carlo assertions in this file (all seeds fixed, so a run is
deterministic; the rates say how often an arbitrary seed would fail a correct implementation):
- sampling: 27 chi-square tests plus one G-test at level 1e-4 each -> <= 2.8e-3;
- fit recovery: (asymptotic) Wald intervals at z = 4.5, two-sided 6.8e-6 each; 19 fixed
  checks plus 40 hypothesis examples -> <= 4.0e-4;
- model comparison: two likelihood-ratio bounds at 1e-4 (2e-4) and one AIC ranking whose
  failure probability is P(chi2_38 > 76) = 2.4e-4 (see the test);
- G-test p-values roughly uniform under the null: 2 tests x 2 checks at nominal 1e-4 (4e-4).
Total below 4.1e-3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from polyspec_theory import PolyspecInputError
from polyspec_theory.core.config import law_from_config
from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.core.fitting import goodness_of_fit
from polyspec_theory.core.laws import (
    BetaMixed,
    GaussianBaseline,
    IIDGeometric,
    Positional,
    as_sample,
    fit_laws,
)
from tests._optional import optional_import

LEVEL = 1e-4  # per chi-square test
Z = 4.5  # two-sided normal tail 6.8e-6 per interval check
PROPS = settings(derandomize=True, deadline=None, max_examples=150)

# ----------------------------------------------------------------------------------------
# strategies

probabilities = st.floats(0.0, 1.0)
iid_laws = probabilities.map(IIDGeometric)
positional_laws = st.lists(probabilities, min_size=1, max_size=6).map(Positional)
beta_laws = st.builds(
    BetaMixed,
    st.floats(-3.0, 3.0).map(lambda x: 10.0**x),
    st.floats(-3.0, 3.0).map(lambda x: 10.0**x),
)
gaussian_laws = st.builds(
    GaussianBaseline, st.floats(-5.0, 40.0), st.floats(-2.0, 1.5).map(lambda x: 10.0**x)
)
any_law = st.one_of(iid_laws, positional_laws, beta_laws, gaussian_laws)
caps = st.one_of(st.integers(1, 12), st.integers(13, 3000))


# ----------------------------------------------------------------------------------------
# exact identities for every law


@PROPS
@given(law=any_law, cap=caps)
def test_pmf_is_a_distribution(law, cap):
    p = law.pmf_vector(cap)
    assert p.shape == (cap + 1,)
    assert np.all(p >= 0.0) and np.all(np.isfinite(p))
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-12)


@PROPS
@given(law=any_law, cap=caps)
def test_survival_is_a_survival_function(law, cap):
    s = law.survival(cap)
    assert s.shape == (cap + 1,)
    assert s[0] == 1.0
    assert np.all(np.diff(s) <= 0.0) and np.all(s >= 0.0)
    # P(A = k | cap) = S_k - S_{k+1} below the cap, S_cap at the cap
    p = law.pmf_vector(cap)
    np.testing.assert_allclose(p[:-1], s[:-1] - s[1:], rtol=0, atol=1e-13)
    assert p[-1] == s[-1]


@PROPS
@given(law=any_law, cap=caps)
def test_moments_equal_pmf_sums(law, cap):
    p = law.pmf_vector(cap)
    k = np.arange(cap + 1, dtype=np.float64)
    mean = math.fsum(k * p)
    second = math.fsum(k * k * p)
    var_raw = max(second - mean * mean, 0.0)
    assert law.mean(cap) == pytest.approx(mean, rel=1e-11, abs=1e-13)
    assert law.mean_emitted(cap) == pytest.approx(1.0 + mean, rel=1e-11, abs=1e-13)
    # E[A^2] - E[A]^2 cancels when the variance is small; allow for it explicitly
    assert law.var(cap) == pytest.approx(var_raw, rel=1e-9, abs=1e-12 * max(second, 1.0))
    assert law.var(cap) == pytest.approx(math.fsum(p * (k - mean) ** 2), rel=1e-10, abs=1e-14)
    assert law.std(cap) == pytest.approx(math.sqrt(law.var(cap)))
    assert 0.0 <= law.mean(cap) <= cap


@PROPS
@given(law=any_law, cap=st.integers(1, 40), data=st.data())
def test_sf_cdf_pmf_consistent(law, cap, data):
    p = law.pmf_vector(cap)
    ks = np.arange(-2, cap + 3)
    tails = np.array([math.fsum(p[max(k + 1, 0):]) for k in ks])
    np.testing.assert_allclose(law.sf(ks, cap), tails, rtol=0, atol=1e-12)
    np.testing.assert_allclose(law.cdf(ks, cap), 1.0 - tails, rtol=0, atol=1e-12)
    assert law.cdf(cap, cap) == pytest.approx(1.0, abs=1e-15)
    assert law.sf(-1, cap) == 1.0 and law.sf(cap, cap) == 0.0
    # scalar and array pmf agree with the vector; outside the support and non-integers: 0
    k = data.draw(st.integers(0, cap))
    assert law.pmf(k, cap) == p[k]
    np.testing.assert_array_equal(law.pmf(np.arange(cap + 1), cap), p)
    np.testing.assert_array_equal(law.pmf([-1, cap + 1, 0.5], cap), [0.0, 0.0, 0.0])
    x = data.draw(st.floats(-3.0, cap + 3.0))
    assert law.sf(x, cap) == pytest.approx(math.fsum(p[np.arange(cap + 1) > x]), abs=1e-12)
    # emitted length L = A + 1
    e = law.emitted_pmf(cap)
    assert e[0] == 0.0
    np.testing.assert_array_equal(e[1:], p)


@PROPS
@given(law=any_law, cap=st.integers(1, 60), z=st.floats(-1.0, 1.0))
def test_pgf_is_the_pmf_power_series(law, cap, z):
    p = law.pmf_vector(cap)
    ref = math.fsum(p * z ** np.arange(cap + 1))
    assert law.pgf(z, cap) == pytest.approx(ref, rel=1e-12, abs=1e-14)
    assert law.pgf(1.0, cap) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(law.pgf(np.array([z, 0.0]), cap), [ref, p[0]], atol=1e-14)


@PROPS
@given(law=any_law, data=st.data())
def test_log_likelihood_censors_at_the_cap(law, data):
    g = np.array(data.draw(st.lists(st.integers(1, 30), min_size=1, max_size=25)))
    a = np.array([data.draw(st.integers(0, int(c))) for c in g])
    got = law.logpmf_sample(a, g)
    with np.errstate(divide="ignore"):
        # P(A = g | g) = S_g: a round that accepted everything is right-censored
        want = np.array([np.log(law.pmf_vector(int(c))[int(x)]) for x, c in zip(a, g, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert law.loglik(a, g) == pytest.approx(float(np.sum(want)), rel=1e-12, abs=1e-12)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(law=st.one_of(iid_laws, positional_laws, beta_laws))
def test_uncapped_mean_is_the_limit_of_capped_means(law):
    limit = law.mean_emitted_limit()
    assert not math.isnan(limit)
    big = law.mean_emitted(20_000)
    assert big <= limit * (1 + 1e-12) + 1e-12
    if isinstance(law, IIDGeometric) and law.alpha <= 0.99 or (
        isinstance(law, BetaMixed) and law.b >= 3.0
    ):
        assert big == pytest.approx(limit, rel=1e-6)


def test_positional_uncapped_mean_when_the_chain_stops():
    # regression: a zero hazard followed by a hazard of 1 gave 0 * 1/0 = NaN
    assert Positional([0.0, 1.0]).mean_emitted_limit() == 1.0
    assert Positional([0.5, 0.0, 1.0]).mean_emitted_limit() == 1.5
    assert Positional([0.5, 1.0]).mean_emitted_limit() == math.inf
    assert Positional([0.5, 0.5]).mean_emitted_limit() == pytest.approx(2.0)


def test_iid_closed_form_and_extremes():
    law = IIDGeometric(0.75)
    assert law.mean_emitted(7) == pytest.approx((1 - 0.75**8) / 0.25, rel=1e-15)
    assert IIDGeometric(1.0).mean_emitted(9) == 10.0 and IIDGeometric(1.0).var(9) == 0.0
    assert IIDGeometric(0.0).mean_emitted(9) == 1.0 and IIDGeometric(0.0).var(9) == 0.0
    np.testing.assert_array_equal(IIDGeometric(1.0).rvs(5, size=10, seed=0), 5)
    np.testing.assert_array_equal(IIDGeometric(0.0).rvs(5, size=10, seed=0), 0)


def test_beta_survival_is_the_beta_function_ratio():
    from scipy.special import betaln

    law = BetaMixed(2.5, 0.7)
    k = np.arange(0, 31)
    np.testing.assert_allclose(
        law.survival(30), np.exp(betaln(2.5 + k, 0.7) - betaln(2.5, 0.7)), rtol=1e-12
    )
    # E[L] uncapped = E[1/(1 - alpha)] = (a + b - 1)/(b - 1) for b > 1
    assert BetaMixed(3.0, 2.0).mean_emitted_limit() == pytest.approx(4.0)


def test_mle_is_the_law_of_fit():
    rng = np.random.default_rng(3)
    caps = rng.integers(1, 7, 400)
    acc = np.minimum(rng.geometric(0.3, 400) - 1, caps)
    d = AcceptanceCounts.from_samples(acc, caps)
    for fam in (IIDGeometric, Positional, BetaMixed, GaussianBaseline):
        assert fam.mle(d) == fam.fit(d).law
        assert fam.mle(acc, caps) == fam.fit(acc, caps).law
    assert Positional.mle(d, max_positions=2) == Positional.fit(d, max_positions=2).law
    assert Positional.mle(d, max_positions=2) != Positional.mle(d)


def test_gaussian_baseline_is_the_rounded_clipped_normal():
    law = GaussianBaseline(2.3, 1.4)
    p = law.pmf_vector(5)
    edges = np.array([-np.inf, 0.5, 1.5, 2.5, 3.5, 4.5, np.inf])
    np.testing.assert_allclose(p, np.diff(stats.norm.cdf(edges, 2.3, 1.4)), atol=1e-15)
    bad = law.improper_mass(5)
    assert bad["below_zero"] == pytest.approx(stats.norm.cdf(0, 2.3, 1.4))
    assert bad["above_cap"] == pytest.approx(stats.norm.sf(5, 2.3, 1.4))


# ----------------------------------------------------------------------------------------
# sampling agrees with the pmf (chi-square with pooled cells)


def _pool(observed, expected, min_expected=5.0):
    """Merge consecutive cells until every expected count is >= min_expected."""
    obs, exp = [], []
    o_acc = e_acc = 0.0
    for o, e in zip(observed, expected, strict=True):
        o_acc += o
        e_acc += e
        if e_acc >= min_expected:
            obs.append(o_acc)
            exp.append(e_acc)
            o_acc = e_acc = 0.0
    if exp:
        obs[-1] += o_acc
        exp[-1] += e_acc
    else:
        obs, exp = [o_acc], [e_acc]
    return np.array(obs), np.array(exp)


def chi_square_p(law, samples, sample_caps):
    """Pearson chi-square of samples against the law, one group per cap, pooled cells."""
    stat, df = 0.0, 0
    for cap in np.unique(sample_caps):
        sel = samples[sample_caps == cap]
        assert sel.min() >= 0 and sel.max() <= cap
        o, e = _pool(np.bincount(sel, minlength=cap + 1), sel.size * law.pmf_vector(int(cap)))
        stat += float(np.sum((o - e) ** 2 / e))
        df += o.size - 1
    if df == 0:  # a single pooled cell: the law is (nearly) a point mass
        return 1.0
    return float(stats.chi2.sf(stat, df))


SAMPLING_LAWS = [
    IIDGeometric(0.3),
    IIDGeometric(0.85),
    IIDGeometric(1 - 1e-9),
    Positional([0.9, 0.5, 0.95, 0.7]),
    Positional([0.97, 0.2]),
    BetaMixed(0.7, 0.4),
    BetaMixed(6.0, 1.5),
    GaussianBaseline(3.2, 1.7),
    GaussianBaseline(-0.5, 2.0),
]
N_SAMPLES = 20_000
MIXED_CAPS = np.array([1, 2, 3, 5, 8, 13])


@pytest.mark.parametrize("law", SAMPLING_LAWS, ids=repr)
def test_numpy_sampling_agrees_with_pmf(law):
    x = law.rvs(8, size=N_SAMPLES, seed=1234)
    assert x.dtype == np.int64 and x.shape == (N_SAMPLES,)
    assert chi_square_p(law, x, np.full(N_SAMPLES, 8)) > LEVEL
    # same seed -> same numbers
    np.testing.assert_array_equal(x, law.rvs(8, size=N_SAMPLES, seed=1234))


@pytest.mark.parametrize("law", SAMPLING_LAWS, ids=repr)
def test_numpy_sampling_with_mixed_caps(law):
    g = np.random.default_rng(7).choice(MIXED_CAPS, size=N_SAMPLES)
    x = law.rvs(g, seed=99)
    assert x.shape == g.shape and np.all(x <= g)
    assert chi_square_p(law, x, g) > LEVEL


def rvs_jax(law, key, cap: int, shape=()):
    """Sample ``law`` with a JAX PRNG key (inverse CDF, one uniform per round), the way the
    simulators draw acceptance: ``A = #{k <= cap : S_k > u}``."""
    import jax
    import jax.numpy as jnp

    s = jnp.asarray(law.survival(cap)[1:])
    u = jax.random.uniform(key, shape, dtype=s.dtype)
    return jnp.searchsorted(-s, -u, side="left").astype(jnp.int32)


@pytest.mark.parametrize("law", SAMPLING_LAWS, ids=repr)
def test_jax_sampling_agrees_with_pmf(law):
    jax = optional_import("jax")
    with jax.enable_x64(True):
        x = np.asarray(rvs_jax(law, jax.random.PRNGKey(5), 8, (N_SAMPLES,)))
        again = np.asarray(rvs_jax(law, jax.random.PRNGKey(5), 8, (N_SAMPLES,)))
    assert x.shape == (N_SAMPLES,)
    np.testing.assert_array_equal(x, again)
    assert chi_square_p(law, x.astype(np.int64), np.full(N_SAMPLES, 8)) > LEVEL


def test_chi_square_check_has_power():
    # The sampling test is not vacuous: a 0.02 shift in alpha is rejected. Noncentrality
    # n * sum (p - q)^2 / q ~ 120 here, so the power at level 1e-4 is essentially 1.
    x = IIDGeometric(0.70).rvs(8, size=N_SAMPLES, seed=3)
    assert chi_square_p(IIDGeometric(0.72), x, np.full(N_SAMPLES, 8)) < LEVEL


# ----------------------------------------------------------------------------------------
# fitting: maximum likelihood with A = cap right-censored


def _numerical_se(loglik, theta, h=1e-3):
    """Standard errors from the observed information (central-difference Hessian)."""
    theta = np.asarray(theta, dtype=np.float64)
    d = theta.size
    hess = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            ei, ej = np.eye(d)[i] * h, np.eye(d)[j] * h
            hess[i, j] = (
                loglik(theta + ei + ej) - loglik(theta + ei - ej)
                - loglik(theta - ei + ej) + loglik(theta - ei - ej)
            ) / (4 * h * h)
    cov = np.linalg.inv(-hess)
    assert np.all(np.diag(cov) > 0), "observed information is not positive definite"
    return np.sqrt(np.diag(cov))


@settings(derandomize=True, deadline=None, max_examples=40)
@given(alpha=st.floats(0.05, 0.95), cap_set=st.sampled_from([(1,), (4,), (1, 2, 3, 7), (16,)]))
def test_iid_fit_recovers_alpha(alpha, cap_set):
    n = 3000
    seed = int(alpha * 1e9) % 2**31
    g = np.random.default_rng(seed).choice(np.array(cap_set), size=n)
    a = IIDGeometric(alpha).rvs(g, seed=seed + 1)
    fit = IIDGeometric.fit(a, g)
    hat = fit.law.alpha
    # closed-form censored MLE: successes / (successes + observed rejections)
    assert hat == pytest.approx(a.sum() / (a.sum() + np.count_nonzero(a < g)), rel=1e-15)
    # Fisher information per round with cap g: (1 - alpha^g) / (alpha (1 - alpha)^2)
    info = np.sum((1 - alpha**g) / (alpha * (1 - alpha) ** 2))
    assert abs(hat - alpha) <= Z / math.sqrt(info)
    assert fit.n == n and fit.n_params == 1
    assert fit.loglik == pytest.approx(IIDGeometric(hat).loglik(a, g))
    assert fit.aic == pytest.approx(2 - 2 * fit.loglik)
    # it is the maximizer
    for d in (-1e-4, 1e-4):
        if 0 < hat + d < 1:
            assert IIDGeometric(hat + d).loglik(a, g) <= fit.loglik


def test_iid_fit_uses_censoring():
    # With caps 1..3 most rounds are censored; the naive uncensored geometric MLE
    # (sum a / (sum a + n)) is biased far outside the interval, the censored MLE is not.
    alpha, n = 0.8, 5000
    g = np.random.default_rng(11).choice(np.array([1, 2, 3]), size=n)
    a = IIDGeometric(alpha).rvs(g, seed=12)
    se = 1 / math.sqrt(np.sum((1 - alpha**g) / (alpha * (1 - alpha) ** 2)))
    assert abs(IIDGeometric.fit(a, g).law.alpha - alpha) <= Z * se
    naive = a.sum() / (a.sum() + n)
    assert abs(naive - alpha) > 20 * se


def test_fit_degenerate_samples():
    assert IIDGeometric.fit([3, 3, 3], 3).law.alpha == 1.0
    assert IIDGeometric.fit([0, 0], [4, 2]).law.alpha == 0.0
    assert Positional.fit([0, 0, 0], 3).law.alphas == (0.0,)


def test_positional_fit_recovers_hazards():
    true = Positional([0.9, 0.5, 0.95, 0.7])
    g = np.random.default_rng(21).choice(np.arange(1, 7), size=N_SAMPLES)
    a = true.rvs(g, seed=22)
    fit = Positional.fit(a, g)
    hat = np.array(fit.law.alphas)
    assert hat.size == 6 and fit.n_params == 6
    h = true.hazards(6)
    for k in range(1, 7):
        # Kaplan-Meier hazard: binomial proportion among rounds at risk at position k
        at_risk = np.count_nonzero((a >= k - 1) & (g >= k))
        assert hat[k - 1] == np.count_nonzero((a >= k) & (g >= k)) / at_risk
        assert abs(hat[k - 1] - h[k - 1]) <= Z * math.sqrt(h[k - 1] * (1 - h[k - 1]) / at_risk)
    # pooled tail: positions >= 3 share one hazard estimate (true value 0.7 from position 4)
    pooled = Positional.fit(a, g, max_positions=3).law.alphas
    assert len(pooled) == 3 and pooled[:2] == tuple(hat[:2])
    succ = sum(np.count_nonzero((a >= j) & (g >= j)) for j in range(3, 7))
    trials = sum(np.count_nonzero((a >= j - 1) & (g >= j)) for j in range(3, 7))
    assert pooled[2] == pytest.approx(succ / trials)


def _beta_loglik(a, g):
    return lambda th: BetaMixed(math.exp(th[0]), math.exp(th[1])).loglik(a, g)


@pytest.mark.parametrize(
    ("params", "cap_set"),
    [((2.0, 0.8), (4, 8, 16)), ((6.0, 1.5), (8,)), ((0.7, 0.4), (2, 5, 30))],
)
def test_beta_fit_recovers_parameters(params, cap_set):
    true = BetaMixed(*params)
    g = np.random.default_rng(31).choice(np.array(cap_set), size=N_SAMPLES)
    a = true.rvs(g, seed=32)
    fit = BetaMixed.fit(a, g)
    theta = np.log([fit.law.a, fit.law.b])
    ll = _beta_loglik(a, g)
    assert fit.loglik == pytest.approx(ll(theta), abs=1e-9)
    # it is the MLE: a gradient method started at the fit finds nothing better
    polish = optimize.minimize(lambda t: -ll(t), theta, method="BFGS")
    assert fit.loglik >= -polish.fun - 1e-5
    assert fit.loglik >= true.loglik(a, g)
    # Wald intervals on (log a, log b) from the observed information
    se = _numerical_se(ll, theta)
    err = np.abs(theta - np.log(params))
    assert np.all(err <= Z * se), (err, se)


@pytest.mark.parametrize(
    ("params", "cap_set"), [((3.2, 1.7), (8,)), ((-0.5, 2.0), (3, 6, 10)), ((6.0, 0.8), (7,))]
)
def test_gaussian_fit_recovers_parameters(params, cap_set):
    true = GaussianBaseline(*params)
    g = np.random.default_rng(41).choice(np.array(cap_set), size=N_SAMPLES)
    a = true.rvs(g, seed=42)
    fit = GaussianBaseline.fit(a, g)

    def ll(t):
        return GaussianBaseline(t[0], math.exp(t[1])).loglik(a, g)

    theta = np.array([fit.law.mu, math.log(fit.law.sigma)])
    polish = optimize.minimize(lambda t: -ll(t), theta, method="BFGS")
    assert fit.loglik >= -polish.fun - 1e-5
    assert fit.loglik >= true.loglik(a, g)
    se = _numerical_se(ll, theta)
    err = np.abs(theta - np.array([params[0], math.log(params[1])]))
    assert np.all(err <= Z * se), (err, se)


# ----------------------------------------------------------------------------------------
# goodness of fit and model comparison


def test_goodness_of_fit_counts_cells_and_rejects_a_wrong_law():
    law = IIDGeometric(0.6)
    g = np.random.default_rng(51).choice(np.array([2, 4, 8]), size=5000)
    a = law.rvs(g, seed=52)
    gof = goodness_of_fit(law, a, g, n_fitted_params=0)
    # df = sum over caps (pooled cells - 1)
    assert gof.df == gof.n_cells - 3
    assert gof.p_value > LEVEL
    # the G statistic matches an independent computation with the same pooling
    stat = 0.0
    for cap in (2, 4, 8):
        sel = a[g == cap]
        o, e = _pool(np.bincount(sel, minlength=cap + 1), sel.size * law.pmf_vector(cap))
        stat += 2 * float(np.sum(np.where(o > 0, o * np.log(np.where(o > 0, o, 1) / e), 0.0)))
    assert gof.statistic == pytest.approx(stat, rel=1e-12)
    bad = goodness_of_fit(GaussianBaseline(a.mean(), a.std()), a, g, n_fitted_params=0)
    assert bad.p_value < 1e-10


def _lr_bound(df):
    return stats.chi2.isf(LEVEL, df)


def test_compare_laws_iid_sample():
    g = np.random.default_rng(61).choice(np.array([2, 4, 6]), size=N_SAMPLES)
    a = IIDGeometric(0.8).rvs(g, seed=62)
    ranked = fit_laws(a, g)
    by = {r.law.family: r for r in ranked}
    assert set(by) == {"iid", "positional", "beta", "gaussian"}
    assert [r.aic for r in ranked] == sorted(r.aic for r in ranked)
    # positional (6 hazards) and Beta nest iid: their likelihood gain is a chi-square
    # likelihood ratio (df 5; Beta's boundary case is dominated by df 1), bounded at 1e-4
    assert 2 * (by["positional"].loglik - by["iid"].loglik) <= _lr_bound(5)
    assert 2 * (by["beta"].loglik - by["iid"].loglik) <= _lr_bound(1)
    assert by["iid"].loglik >= by["gaussian"].loglik + 100  # Gaussian is far off
    assert by["iid"].aic < by["gaussian"].aic


def test_compare_laws_beta_sample_ranks_beta_first():
    # Strong heterogeneity: alpha ~ Beta(2, 0.8) (mean 0.71, sd 0.25). iid and Gaussian lose
    # by thousands of log-likelihood units. Positional with 40 hazards nests Beta (40 - 2 = 38
    # extra parameters): it wins on AIC only if LR > 76, P(chi2_38 > 76) = 2.4e-4.
    g = np.random.default_rng(71).choice(np.array([10, 20, 40]), size=N_SAMPLES)
    a = BetaMixed(2.0, 0.8).rvs(g, seed=72)
    ranked = fit_laws(a, g)
    assert ranked[0].law.family == "beta"
    by = {r.law.family: r for r in ranked}
    assert by["beta"].loglik - by["iid"].loglik > 500
    assert by["positional"].n_params == 40


def test_compare_laws_positional_sample_ranks_positional_first():
    # Non-monotone hazards cannot be matched by iid, Beta (monotone hazards) or Gaussian;
    # the log-likelihood gap grows like n * KL (> 1000 here), so a false failure is
    # astronomically unlikely.
    g = np.full(N_SAMPLES, 5)
    a = Positional([0.95, 0.4, 0.95, 0.3, 0.9]).rvs(g, seed=81)
    ranked = fit_laws(a, g)
    assert ranked[0].law.family == "positional"
    assert ranked[1].aic - ranked[0].aic > 1000
    assert fit_laws(a, g, families=("iid", "beta"))[0].law.family in ("iid", "beta")


def test_fit_result_dict():
    a, g = [0, 1, 2, 3, 3], [3, 3, 3, 3, 3]
    d = IIDGeometric.fit(a, g).to_dict()
    assert d["law"] == "iid" and d["params"] == {"alpha": 0.75}  # 9 accepted, 3 rejections
    assert d["aic"] == pytest.approx(2 - 2 * d["loglik"])
    assert d["n"] == 5 and d["n_params"] == 1


# ----------------------------------------------------------------------------------------
# configuration and bad input


@pytest.mark.parametrize(
    "law", [IIDGeometric(0.7), Positional([0.9, 0.4]), BetaMixed(2.0, 0.5),
            GaussianBaseline(1.5, 0.7)], ids=repr)
def test_law_config_round_trip(law):
    again = law_from_config(law.to_config())
    assert again == law and hash(again) == hash(law)
    assert law_from_config(law) is law


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: IIDGeometric(float("nan")), "alpha"),
        (lambda: IIDGeometric(1.5), "alpha"),
        (lambda: IIDGeometric(-0.1), "alpha"),
        (lambda: IIDGeometric("0.5"), "alpha"),
        (lambda: IIDGeometric(True), "alpha"),
        (lambda: Positional([]), "positional"),
        (lambda: Positional([0.5, 1.2]), "positional"),
        (lambda: Positional([0.5, float("nan")]), "positional"),
        (lambda: BetaMixed(0.0, 1.0), "beta[0]"),
        (lambda: BetaMixed(1.0, -2.0), "beta[1]"),
        (lambda: GaussianBaseline(float("nan"), 1.0), "gaussian[0]"),
        (lambda: GaussianBaseline(1.0, 0.0), "gaussian[1]"),
        (lambda: IIDGeometric(0.5).pmf_vector(0), "cap"),
        (lambda: IIDGeometric(0.5).mean(-3), "cap"),
        (lambda: IIDGeometric(0.5).var(2.5), "cap"),
        (lambda: IIDGeometric(0.5).rvs(0, size=3, seed=1), "cap"),
        (lambda: IIDGeometric(0.5).rvs(3, size=3), "seed"),
        (lambda: IIDGeometric(0.5).rvs([3, 0], seed=1), "cap"),
        (lambda: IIDGeometric.fit([], []), "accepted"),
        (lambda: BetaMixed.fit([], 3), "accepted"),
        (lambda: IIDGeometric.fit([1, -1], 3), "accepted"),
        (lambda: IIDGeometric.fit([1, 4], 3), "accepted"),
        (lambda: IIDGeometric.fit([1, 2], [3]), "caps"),
        (lambda: IIDGeometric.fit([1, 2], [3, 0]), "caps"),
        (lambda: IIDGeometric.fit([1, float("nan")], 3), "accepted"),
        (lambda: as_sample([1.5], 3), "accepted"),
        (lambda: fit_laws([1, 2], 3, families=("iid", "poisson")), "families"),
        (lambda: law_from_config({"alpah": 0.5}), "acceptance.alpah"),
        (lambda: law_from_config({"alpha": 2.0}), "acceptance.alpha"),
        (lambda: law_from_config({"beta": [1.0]}), "acceptance.beta"),
        (lambda: law_from_config({"beta": [1.0, 0.0]}), "acceptance.beta[1]"),
        (lambda: law_from_config({"alpha": 0.5, "beta": [1, 1]}), "acceptance"),
        (lambda: law_from_config(0.5), "acceptance"),
    ],
)
def test_bad_input_names_the_field(make, field):
    with pytest.raises(PolyspecInputError) as err:
        make()
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


@pytest.mark.parametrize("fitted", [False, True], ids=["known", "fitted"])
def test_goodness_of_fit_p_values_are_roughly_uniform_under_the_null(fitted):
    # 300 samples of 500 rounds from iid alpha = 0.6, caps {3, 6}. If the p-values were exactly
    # uniform, the number below 0.05 would be Binomial(300, 0.05); we accept the central
    # interval of probability 1 - 1e-4 ([3, 32]), and the KS distance to the 1e-4 critical
    # value (0.13); the chi-square approximation of the pooled G statistic and its
    # discreteness make the true null law only roughly uniform, so these rates are nominal.
    law = IIDGeometric(0.6)
    rng = np.random.default_rng(91)
    p = []
    for _ in range(300):
        g = rng.choice(np.array([3, 6]), size=500)
        a = law.rvs(g, seed=rng)
        if fitted:
            p.append(IIDGeometric.fit(a, g).gof.p_value)
        else:
            p.append(goodness_of_fit(law, a, g, n_fitted_params=0).p_value)
    lo, hi = stats.binom.ppf(0.5e-4, 300, 0.05), stats.binom.isf(0.5e-4, 300, 0.05)
    assert lo <= np.count_nonzero(np.array(p) < 0.05) <= hi
    assert stats.kstest(p, "uniform").statistic < stats.kstwo.isf(1e-4, 300)


def test_beta_fit_on_iid_like_data_stays_at_the_iid_limit():
    """Regression: on iid data the Beta likelihood is flat in the concentration; the fit must
    keep the mean acceptance (it once drifted to mean 0.55 for true 0.794) and never be worse
    than the iid fit it contains as a limit."""
    law = IIDGeometric(0.794)
    a = law.rvs(8, size=20_000, seed=11)
    beta = BetaMixed.fit(a, 8)
    iid = IIDGeometric.fit(a, 8)
    assert beta.loglik >= iid.loglik - 1e-6
    # mean alpha within 4.5 binomial-type standard errors of the iid MLE (false-failure ~7e-6)
    trials = a.sum() + np.count_nonzero(a < 8)
    se = np.sqrt(iid.law.alpha * (1 - iid.law.alpha) / trials)
    assert abs(beta.law.mean_alpha - iid.law.alpha) < 4.5 * se


def test_goodness_of_fit_cells_and_df_counted_by_hand():
    """iid alpha = 1/2 on four caps, cells pooled until the expected count is >= 5:
    cap 1, 6 rounds: expected (3, 3) -> one cell; cap 2, 40 rounds: (20, 10, 10) -> three;
    cap 3, 12 rounds: (6, 3, 1.5, 1.5) -> (6) and (3 + 1.5 + 1.5) -> two;
    cap 4, 12 rounds: (6, 3, 1.5, .75, .75) -> (6), (3 + 1.5 + .75) and a short remainder
    (.75) that joins the last cell -> two.
    Eight cells in four caps: df = 8 - 4 - fitted parameters."""

    obs = {1: [4, 2], 2: [18, 12, 10], 3: [7, 2, 1, 2], 4: [5, 4, 2, 0, 1]}
    exp_pooled = {1: [6.0], 2: [20.0, 10.0, 10.0], 3: [6.0, 6.0], 4: [6.0, 6.0]}
    obs_pooled = {1: [6], 2: [18, 12, 10], 3: [7, 5], 4: [5, 7]}
    a = np.concatenate([np.repeat(np.arange(len(v)), v) for v in obs.values()])
    g = np.concatenate([np.full(sum(v), cap) for cap, v in obs.items()])
    law = IIDGeometric(0.5)
    stat = 2 * sum(o * math.log(o / e) for cap in obs
                   for o, e in zip(obs_pooled[cap], exp_pooled[cap], strict=True))
    for k, df in ((0, 4), (None, 3), (2, 2)):
        gof = goodness_of_fit(law, a, g, n_fitted_params=k)
        assert gof.n_cells == 8
        assert gof.df == df
        assert gof.statistic == pytest.approx(stat, rel=1e-12)
        assert gof.p_value == pytest.approx(float(stats.chi2.sf(stat, df)), rel=1e-12)
    assert math.isnan(goodness_of_fit(law, a, g, n_fitted_params=4).p_value)
    # the same from a histogram-form data set
    counts = AcceptanceCounts(a, g, np.ones(a.size, dtype=np.int64))
    assert goodness_of_fit(law, counts).df == 3


@pytest.mark.parametrize("fitted", [False, True], ids=["known", "fitted"])
def test_goodness_of_fit_df_and_p_values_are_calibrated_by_simulation(fitted):
    """1000 data sets of 2000 rounds, iid alpha = 0.6, caps {3, 6} (about 1000 rounds each:
    no pooling, 4 + 7 cells, so df = 9 - fitted parameters). Under the null the G statistic
    is chi-square(df) asymptotically: its mean over the data sets lies within z = 4.42
    (two-sided 1e-5) standard errors sqrt(2 df / 1000) of df (a df off by one is 7 standard
    errors away), and the number of p-values below 0.05 is in the Binomial(1000, 0.05)
    interval of probability 1 - 1e-4. False-failure rate <= 1.1e-4 per case (nominal: the
    chi-square law is asymptotic; at 1000 rounds per cap its mean is off by ~0.1 %)."""
    law = IIDGeometric(0.6)
    rng = np.random.default_rng(2024 + fitted)
    reps = 1000
    gs, ps, dfs = [], [], set()
    for _ in range(reps):
        g = rng.choice(np.array([3, 6]), size=2000)
        a = law.rvs(g, seed=rng)
        gof = (IIDGeometric.fit(a, g).gof if fitted
               else goodness_of_fit(law, a, g, n_fitted_params=0))
        gs.append(gof.statistic)
        ps.append(gof.p_value)
        dfs.add(gof.df)
    df = 9 - int(fitted)
    assert dfs == {df}
    z = float(stats.norm.isf(0.5e-5))
    assert abs(np.mean(gs) - df) <= z * math.sqrt(2 * df / reps), np.mean(gs)
    lo, hi = stats.binom.ppf(0.5e-4, reps, 0.05), stats.binom.isf(0.5e-4, reps, 0.05)
    assert lo <= np.count_nonzero(np.array(ps) < 0.05) <= hi


def _loglik_reference(law, d) -> float:
    """The censored log-likelihood as ``AcceptanceLaw.loglik`` computed it before the
    prepared sample (``_Likelihood``): the reference its floats must equal."""
    lp = law._logpmf_checked(d.accepted, d.caps)
    w = d.counts.astype(np.float64)
    if np.any((w > 0) & ~np.isfinite(lp)):
        return -math.inf
    return float(np.dot(w, np.where(w > 0, lp, 0.0)))


def test_loglik_equals_the_reference_to_the_bit():
    from polyspec_theory.core.regimes import HiddenRegimes, RegimeLaw

    rng = np.random.default_rng(7)
    laws = [IIDGeometric(0.0), IIDGeometric(1.0), IIDGeometric(0.63), Positional([0.9, 0.5, 1.0]),
            Positional([0.0]), BetaMixed(2.5, 0.7), BetaMixed(1e-20, 3.0),
            GaussianBaseline(1.3, 0.8), GaussianBaseline(40.0, 1e-3),
            RegimeLaw(HiddenRegimes([0.7, 0.3], [[0.97, 0.03], [0.02, 0.98]], [0.3, 0.95]),
                      16)]  # a law of its own per-round form (_logpmf_checked)
    for trial in range(30):
        caps = rng.integers(1, 9, size=200)
        a = np.minimum(rng.geometric(rng.uniform(0.1, 0.9), size=200) - 1, caps)
        d = AcceptanceCounts.from_samples(a, caps)
        for law in laws:
            ref = _loglik_reference(law, d)
            got = law.loglik(d)
            assert (got == ref) or (math.isnan(got) and math.isnan(ref)), (trial, law)
    # a cell without rounds (not in the canonical form, built around it) is left out
    d = AcceptanceCounts.from_samples([0, 3], 3)
    object.__setattr__(d, "counts", np.array([0, 5]))
    assert IIDGeometric(1.0).loglik(d) == _loglik_reference(IIDGeometric(1.0), d) == 0.0
    assert IIDGeometric(0.5).loglik(d) == _loglik_reference(IIDGeometric(0.5), d)


def test_beta_and_gaussian_fits_equal_the_reference_optimizer():
    """The fits' optimizer evaluates the prepared likelihood: the same parameters, to the
    bit, as Nelder-Mead on the reference likelihood from the same starts."""
    from polyspec_theory.core.laws import _nelder_mead

    rng = np.random.default_rng(11)
    for trial in range(4):
        caps = rng.integers(2, 8, size=300)
        alpha = rng.beta(3.0, 1.5, size=300)
        a = np.minimum(rng.geometric(1 - alpha) - 1, caps)
        d = AcceptanceCounts.from_samples(a, caps)

        def nll_beta(x, d=d):
            la, lb = np.clip(x, -20, 20)
            ll = _loglik_reference(BetaMixed(math.exp(la), math.exp(lb)), d)
            return -ll if math.isfinite(ll) else 1e300

        alpha0 = min(max(IIDGeometric._mle(d).alpha, 0.02), 0.98)
        starts = [np.log([alpha0 * c, (1 - alpha0) * c]) for c in (2.0, 10.0, 50.0)]
        la, lb = np.clip(_nelder_mead(nll_beta, starts), -20, 20)
        assert BetaMixed.mle(d) == BetaMixed(math.exp(la), math.exp(lb)), trial

        m = d.mean_accepted()
        s = math.sqrt(float(np.dot(d.counts, (d.accepted - m) ** 2)) / d.n_rounds) or 0.5

        def nll_gauss(x, d=d):
            ll = _loglik_reference(
                GaussianBaseline(x[0], math.exp(float(np.clip(x[1], -10, 10)))), d)
            return -ll if math.isfinite(ll) else 1e300

        mu, ls = _nelder_mead(nll_gauss, [np.array([m, math.log(max(s, 0.05))])])
        assert GaussianBaseline.mle(d) == GaussianBaseline(
            mu, math.exp(float(np.clip(ls, -10, 10)))), trial


def test_gaussian_point_masses_equal_the_normal_sf_and_cdf_to_the_bit():
    """The discretised Gaussian's P(A = k), k < cap: sf(k - 1/2) - sf(k + 1/2) at k >= mu,
    cdf(k + 1/2) - cdf(k - 1/2) below (sf(-inf) = 1 at k = 0), clipped at 0, computed here
    with scipy.stats.norm: the law reads the sf from its survival, the same floats."""
    rng = np.random.default_rng(5)
    cases = [(1.3, 0.8, 6), (40.0, 1e-3, 8), (-0.5, 2.0, 3), (0.0, 1e-6, 4), (2.5, 1e4, 12)]
    cases += [(float(rng.normal(3, 4)), float(np.exp(rng.uniform(-8, 8))),
               int(rng.integers(1, 20))) for _ in range(200)]
    for mu, sigma, cap in cases:
        law = GaussianBaseline(mu, sigma)
        k = np.arange(cap, dtype=np.float64)
        lo = np.where(k == 0, -np.inf, k - 0.5)
        with np.errstate(over="ignore", divide="ignore", under="ignore"):
            up = stats.norm.sf(lo, mu, sigma) - stats.norm.sf(k + 0.5, mu, sigma)
            down = stats.norm.cdf(k + 0.5, mu, sigma) - stats.norm.cdf(lo, mu, sigma)
        want = np.append(np.maximum(np.where(k >= mu, up, down), 0.0),
                         stats.norm.sf(cap - 0.5, mu, sigma))
        assert law.pmf_vector(cap).tobytes() == want.tobytes(), (mu, sigma, cap)
