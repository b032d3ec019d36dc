"""Law and cost-curve fitting: the weighted-cell likelihood equals the per-round one, fits on
counts equal fits on the expanded rounds, fits recover known parameters, cost fits recover a
known T(m, c)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.costs import fit_cost_curve
from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.core.laws import (
    LAW_FAMILIES,
    BetaMixed,
    GaussianBaseline,
    IIDGeometric,
    Positional,
    best_fit,
    fit_laws,
)
from polyspec_theory.errors import PolyspecInputError


def fit_law(family, data, caps=None):
    return LAW_FAMILIES[family].fit(data, caps)

Z = 4.5  # two-sided normal quantile: false-failure rate 6.8e-6 per interval check


def _sample(law, caps, seed, size=5000):
    caps = np.full(size, caps) if np.ndim(caps) == 0 else np.asarray(caps)
    return law.rvs(caps, seed=seed), caps


@pytest.mark.parametrize("family", list(LAW_FAMILIES))
def test_weighted_cells_equal_per_round_likelihood(family):
    rng = np.random.default_rng(3)
    caps = rng.integers(1, 8, size=600)
    a, g = _sample(BetaMixed(3.0, 1.5), caps, 4)
    d = AcceptanceCounts.from_samples(a, g)
    got = fit_law(family, d)
    # the weighted-cell log-likelihood equals the per-round sum, computed independently
    # from the law's pmf at each round's own cap (censored at the cap)
    per_round = sum(math.log(got.law.pmf(int(ai), int(gi))) for ai, gi in zip(a, g, strict=True))
    assert got.n == 600
    assert got.loglik == pytest.approx(per_round, rel=1e-10, abs=1e-9)
    # a fit on the expanded, shuffled rounds is the same fit
    perm = rng.permutation(a.size)
    again = fit_law(family, a[perm], g[perm])
    assert again.loglik == pytest.approx(got.loglik, rel=1e-9, abs=1e-9)
    assert again.gof.df == got.gof.df


@settings(derandomize=True, deadline=None, max_examples=30)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 6), st.integers(1, 5)),
                min_size=1, max_size=12))
def test_counts_canonical_form_and_expansion(cells):
    cells = [(min(a, g), g, w) for g, a, w in cells]
    a = [c[0] for c in cells]
    g = [c[1] for c in cells]
    w = [c[2] for c in cells]
    d = AcceptanceCounts(a, g, w)
    sa, sg = d.to_samples()
    assert d.n_rounds == sum(w) == sa.size
    # same multiset of rounds
    assert sorted(zip(sa.tolist(), sg.tolist(), strict=True)) == sorted(
        (ai, gi) for ai, gi, wi in cells for _ in range(wi))
    iid = fit_law("iid", d).law.alpha
    assert iid == pytest.approx(IIDGeometric.fit(sa, sg).law.alpha, rel=1e-12)
    km = d.survival()
    assert km[0] == 1.0 and np.all(np.diff(km[np.isfinite(km)]) <= 1e-15)


def test_iid_recovers_alpha_within_its_standard_error():
    a, g = _sample(IIDGeometric(0.72), 6, 11)
    d = AcceptanceCounts.from_samples(a, g)
    fit = fit_law("iid", d)
    trials = float(np.dot(d.counts, d.accepted) + d.counts[d.accepted < d.caps].sum())
    se = math.sqrt(0.72 * 0.28 / trials)  # Bernoulli trials of the censored geometric
    assert abs(fit.law.alpha - 0.72) < Z * se


def test_positional_recovers_hazards():
    true = Positional([0.9, 0.7, 0.5, 0.4])
    a, g = _sample(true, 4, 12)
    d = AcceptanceCounts.from_samples(a, g)
    fit = fit_law("positional", d).law
    km = d.survival()
    for k, h in enumerate(true.alphas, 1):
        trials = d.counts[(d.accepted >= k - 1) & (d.caps >= k)].sum()
        assert abs(fit.alphas[k - 1] - h) < Z * math.sqrt(h * (1 - h) / trials)
        assert km[k] == pytest.approx(np.prod(fit.alphas[:k]), rel=1e-12)


def test_beta_recovers_parameters_within_fisher_interval():
    true = BetaMixed(4.0, 1.5)
    rng = np.random.default_rng(5)
    caps = rng.integers(4, 12, size=20000)
    a, g = _sample(true, caps, 13)
    d = AcceptanceCounts.from_samples(a, g)
    fit = fit_law("beta", d).law
    # observed Fisher information of the log-parameters by central differences
    x0 = np.log([fit.a, fit.b])

    def ll(x):
        return BetaMixed(math.exp(x[0]), math.exp(x[1])).loglik(d)

    h = 1e-3
    H = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            ei, ej = np.eye(2)[i] * h, np.eye(2)[j] * h
            H[i, j] = (ll(x0 + ei + ej) - ll(x0 + ei - ej) - ll(x0 - ei + ej)
                       + ll(x0 - ei - ej)) / (4 * h * h)
    se = np.sqrt(np.diag(np.linalg.inv(-H)))
    assert np.all(np.abs(x0 - np.log([4.0, 1.5])) < Z * se)
    # heterogeneous data: beta beats iid by AIC, and the Gaussian is never the pick
    fits = fit_laws(d)
    assert best_fit(fits).law.family in ("beta", "positional")
    assert {f.law.family for f in fits} == set(LAW_FAMILIES)
    assert best_fit(fits).aic <= min(f.aic for f in fits if f.law.family == "iid")


def test_gaussian_fit_is_ranked_below_the_true_family():
    a, g = _sample(IIDGeometric(0.6), 5, 21)
    fits = fit_laws(a, g)
    fam = [f.law.family for f in fits]
    assert fam.index("iid") < fam.index("gaussian")
    gfit = next(f for f in fits if f.law.family == "gaussian")
    assert isinstance(gfit.law, GaussianBaseline)
    assert gfit.gof.p_value < 1e-6  # fixed seed; the discretized normal misfits 5000 rounds


def test_histogram_constructors_and_errors():
    d = AcceptanceCounts.from_survival_counts(10, [6, 3], cap=3)
    np.testing.assert_array_equal(d.histogram(3), [4, 3, 3, 0])
    with pytest.raises(PolyspecInputError, match="histogram: has rounds with 3 accepted"):
        AcceptanceCounts.from_histogram([1, 1, 0, 2], 2)
    with pytest.raises(PolyspecInputError, match="counts: no rounds observed"):
        AcceptanceCounts([0, 1], [2, 2], [0, 0])
    with pytest.raises(PolyspecInputError, match="accepted: accepted count 3 exceeds its cap"):
        AcceptanceCounts.from_samples([3], [2])
    with pytest.raises(PolyspecInputError, match="caps: required"):
        fit_law("iid", [1, 2])
    with pytest.raises(PolyspecInputError, match="families: unknown law family 'normal'"):
        fit_laws([1], [2], families=["normal"])
    merged = d.merge(AcceptanceCounts.from_histogram([0, 0, 0, 5], 3))
    np.testing.assert_array_equal(merged.histogram(3), [4, 3, 3, 5])


def test_iid_from_mean_inverts_the_capped_mean():
    for alpha in (0.0, 0.1, 0.55, 0.93, 1.0):
        got = IIDGeometric.from_mean(IIDGeometric(alpha).mean(5), 5).alpha
        assert got == pytest.approx(alpha, abs=1e-10)
    with pytest.raises(PolyspecInputError, match="mean_accepted: must be in"):
        IIDGeometric.from_mean(6.0, 5)


def test_cost_fit_recovers_affine_and_context_slope():
    rng = np.random.default_rng(7)
    m = np.tile(np.repeat(np.arange(1, 17), 9), 3)
    c = np.repeat([64.0, 256.0, 512.0], 16 * 9)
    true = 2e-3 + 1.5e-4 * (m - 1) + 1e-6 * c
    # multiplicative heavy-tailed timing noise: median of the factor is exactly 1
    noise = np.exp(rng.laplace(0.0, 0.03, size=m.size))
    fit = fit_cost_curve(m, true * noise, c, name="mid", reference_context=256.0)
    assert fit.base == pytest.approx(2e-3 + 256e-6, rel=0.02)
    assert fit.per_token == pytest.approx(1.5e-4, rel=0.05)
    assert abs(fit.context_slope - 1e-6) < Z * fit.context_slope_se
    assert fit.context_slope_se < 2e-7
    assert fit.at(1, context=64.0) == pytest.approx(2e-3 + 64e-6, rel=0.03)
    assert fit.context_effect(64, 512) == pytest.approx(448e-6 / (2e-3 + 256e-6), rel=0.25)
    aff = fit.curve(context=512.0, kind="affine")
    assert aff(5) == pytest.approx(fit.base + 256 * fit.context_slope + 4 * fit.per_token,
                                   rel=1e-12)


def test_cost_fit_exact_on_noiseless_single_context():
    m = np.array([1, 1, 2, 3, 3, 3, 5])
    t = 1e-3 + 2e-4 * (m - 1)
    fit = fit_cost_curve(m, t)
    assert fit.context_slope == 0.0
    assert (fit.base, fit.per_token) == pytest.approx((1e-3, 2e-4), rel=1e-10)
    curve = fit.curve()  # table over m = 1..5 (m = 4 filled from the affine fit)
    np.testing.assert_allclose(curve(np.arange(1, 9)), 1e-3 + 2e-4 * np.arange(8), rtol=1e-10)
    with pytest.raises(PolyspecInputError, match="seconds: must have one time per m"):
        fit_cost_curve([1, 2], [1.0])
    with pytest.raises(PolyspecInputError, match="kind: must be 'auto', 'table' or 'affine'"):
        fit.curve(kind="spline")


def test_affine_or_table_by_lack_of_fit():
    rng = np.random.default_rng(8)
    m = np.repeat(np.arange(1, 17), 12)
    noise = np.exp(rng.normal(0.0, 0.05, size=m.size))
    affine = fit_cost_curve(m, (1e-3 + 1e-4 * (m - 1)) * noise)
    # a step at m = 9 (e.g. a kernel switch) is not affine
    step = fit_cost_curve(m, (1e-3 + 1e-4 * (m - 1) + 5e-4 * (m >= 9)) * noise)
    # fixed seed; p-values of an F test: affine p >= 0.01 with probability 0.99 under H0
    assert affine.lack_of_fit_p >= 0.01 and affine.preferred_kind == "affine"
    assert step.lack_of_fit_p < 1e-6 and step.preferred_kind == "table"
    assert step.curve()(12) == pytest.approx(step.curve(kind="table")(12))
    assert affine.curve()(12) == pytest.approx(affine.base + 11 * affine.per_token)


def test_cost_fit_takes_the_median_of_each_cell_under_heavy_tailed_noise():
    """Each (m, context) cell holds 9 timings: 6 at the true time and 3 slow outliers (x3,
    x5, x20: a preempted forward). The median of every cell is the true time exactly (the
    mean is 34/9 = 3.8x it), so the fit is exact: table, affine summary, context slope."""
    ms = np.arange(1, 9)
    ctx = np.array([64.0, 256.0])
    factors = np.array([1, 1, 3, 1, 5, 1, 1, 20, 1], dtype=np.float64)  # median 1, mean 3.8
    m = np.repeat(np.tile(ms, ctx.size), factors.size)
    c = np.repeat(np.repeat(ctx, ms.size), factors.size)
    true = 1e-3 + 1e-4 * (m - 1) + 2e-6 * c
    t = true * np.tile(factors, ms.size * ctx.size)
    fit = fit_cost_curve(m, t, c, reference_context=128.0)
    assert fit.base == pytest.approx(1e-3 + 2e-6 * 128, rel=1e-10)
    assert fit.per_token == pytest.approx(1e-4, rel=1e-9)
    assert fit.context_slope == pytest.approx(2e-6, rel=1e-9)
    np.testing.assert_allclose(fit.table, 1e-3 + 1e-4 * (ms - 1) + 2e-6 * 128, rtol=1e-10)
    for mv, cv, med, n in fit.cells:
        assert n == 9
        assert med == pytest.approx(1e-3 + 1e-4 * (mv - 1) + 2e-6 * cv, rel=1e-12)
    assert fit.at(3, context=64.0) == pytest.approx(1e-3 + 2e-4 + 2e-6 * 64, rel=1e-9)
