"""Adaptive draft length (docs/theory.md Part III-D A1–A3): the HF length chain against an
independently built chain solved by eigen-decomposition, the stationary law (GTH) against
numpy, the confidence cut-off against enumeration of per-position outcomes, the joint law's
integrals against quadrature in the confidence domain, and the fit's recovery of known laws."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special, stats

from polyspec_theory import PolyspecInputError
from polyspec_theory.closed_forms.dualistic import dualistic_speedup
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, GaussianBaseline, IIDGeometric, Positional
from polyspec_theory.structures.schedule import (
    ConfidenceLaw,
    ConfidenceSchedule,
    HFSchedule,
    fit_confidence_law,
    schedule_from_config,
    stationary_distribution,
)
from polyspec_theory.structures.schedule_models import (
    confidence_round,
    confidence_two_model,
    hf_two_model,
)

# --- schedules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, where", [
    ({"kind": "hf", "start": 5, "min": 6, "max": 9}, "schedules[0].start"),
    ({"kind": "hf", "start": 5, "min": 3, "max": 2}, "schedules[0].max"),
    ({"kind": "hf", "start": 5, "max": 1000}, "schedules[0].max"),
    ({"kind": "hf", "start": 2.5, "max": 8}, "schedules[0].start"),
    ({"kind": "hf", "start": 5}, "schedules[0].max"),
    ({"kind": "hf", "start": 5, "max": 8, "step": 3}, "schedules[0].step"),
    ({"kind": "confidence", "eta": 1.5}, "schedules[0].eta"),
    ({"kind": "confidence", "eta": float("nan")}, "schedules[0].eta"),
    ({"kind": "confidence", "eta": 0.5, "max": 0}, "schedules[0].max"),
    ({"kind": "llama"}, "schedules[0].kind"),
    ([1, 2], "schedules[0]"),
])
def test_schedule_config_errors_name_the_field(spec, where):
    with pytest.raises(PolyspecInputError) as e:
        schedule_from_config(spec, "schedules[0]")
    assert e.value.field == where, e.value


def test_schedule_round_trip():
    for spec in ({"kind": "hf", "start": 5, "min": 1, "max": 16},
                 {"kind": "confidence", "eta": 0.6}, {"kind": "confidence", "eta": 0.6, "max": 8}):
        s = schedule_from_config(spec)
        assert s.to_config() == spec and schedule_from_config(s.to_config()) == s
    h = HFSchedule(5, 1, 6)
    assert [h.next_length(g, True) for g in (1, 5, 6)] == [3, 6, 6]
    assert [h.next_length(g, False) for g in (1, 5, 6)] == [1, 4, 5]
    assert ConfidenceSchedule(0.5).cap(7) == 7 and ConfidenceSchedule(0.5, 3).cap(7) == 3


# --- stationary laws ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(0, 2**32 - 1))
def test_gth_stationary_equals_eigenvector(k, seed):
    rng = np.random.default_rng(seed)
    P = rng.random((k, k)) * (rng.random((k, k)) < 0.6)
    P[np.arange(k), (np.arange(k) + 1) % k] += 0.05  # a cycle: irreducible
    P /= P.sum(axis=1, keepdims=True)
    pi = stationary_distribution(P, int(rng.integers(k)))
    w, v = np.linalg.eig(P.T)
    ref = np.real(v[:, np.argmin(np.abs(w - 1))])
    np.testing.assert_allclose(pi, ref / ref.sum(), rtol=1e-9, atol=1e-12)


def test_stationary_rejects_bad_matrices():
    with pytest.raises(PolyspecInputError, match="stochastic"):
        stationary_distribution([[0.5, 0.4], [0.5, 0.5]], 0)
    with pytest.raises(PolyspecInputError, match="NaN"):
        stationary_distribution([[float("nan"), 1.0], [0.5, 0.5]], 0)
    with pytest.raises(PolyspecInputError, match="start"):
        stationary_distribution([[0.5, 0.5], [0.5, 0.5]], 2)


def test_stationary_with_transient_states_and_two_closed_classes():
    P = np.array([[0.5, 0.5, 0.0], [0.0, 0.2, 0.8], [0.0, 0.6, 0.4]])  # 0 is transient
    pi = stationary_distribution(P, 0)
    assert pi[0] == 0.0 and pi[1:] == pytest.approx([0.6 / 1.4, 0.8 / 1.4])
    P2 = np.array([[0.2, 0.4, 0.4], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(PolyspecInputError, match="2 closed classes"):
        stationary_distribution(P2, 0)
    assert stationary_distribution(P2, 1).tolist() == [0.0, 1.0, 0.0]


# --- A1: HF schedule, two models ---------------------------------------------------------------


LAWS = [IIDGeometric(0.8), Positional([0.9, 0.7, 0.5]), BetaMixed(4.0, 1.2),
        GaussianBaseline(3.0, 1.5)]


def _hf_reference(law, lo, hi, start, tc, dc):
    """Independent construction: transition from P(A = g | g) = S_g, pi by eig."""
    gs = list(range(lo, hi + 1))
    k = len(gs)
    P = np.zeros((k, k))
    for i, g in enumerate(gs):
        full = law.survival(g)[g]
        P[i, min(g + 2, hi) - lo] += full
        P[i, max(g - 1, lo) - lo] += 1 - full
    # long-run frequencies from the start: average of many steps of the chain's law
    mu = np.zeros(k)
    mu[start - lo] = 1.0
    acc = np.zeros(k)
    for _ in range(20000):
        mu = mu @ P
        acc += mu
    pi = acc / acc.sum()
    el = np.array([law.mean_emitted(g) for g in gs])
    cost = np.array([g * dc.t1 + tc(g + 1) for g in gs])
    return tc.t1 * (pi @ el) / (pi @ cost), pi


@pytest.mark.parametrize("law", LAWS, ids=lambda x: x.family)
def test_a1_hf_two_model_equals_independent_chain(law):
    tc, dc = CostCurve.affine(1.0, 0.02), CostCurve.constant(0.05)
    r = hf_two_model(law, {"kind": "hf", "start": 5, "min": 2, "max": 12}, tc, dc)
    ref, pi = _hf_reference(law, 2, 12, 5, tc, dc)
    assert r.speedup == pytest.approx(ref, rel=1e-4)  # Cesaro average: O(1/steps)
    np.testing.assert_allclose(r.stationary, pi, atol=1e-4)
    assert r.mean_length == pytest.approx(pi @ np.arange(2, 13), rel=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 0.99), st.integers(1, 20), st.floats(0.0, 0.3))
def test_a1_fixed_length_schedule_is_the_chain(alpha, g, c):
    r = hf_two_model(IIDGeometric(alpha), HFSchedule(g, g, g), 1.0, c)
    assert r.speedup == pytest.approx(dualistic_speedup(alpha, g, 1.0, c), rel=1e-13)


def test_a1_degenerate_acceptance():
    assert hf_two_model(IIDGeometric(1.0), HFSchedule(3, 1, 9), 1.0, 0.0).mean_length == 9
    assert hf_two_model(IIDGeometric(0.0), HFSchedule(3, 1, 9), 1.0, 0.0).mean_length == 1
    # alpha_1 = 1, alpha_2 = 0: lengths cycle 1 -> 3 -> 2 -> 1 (periodic, still one class)
    r = hf_two_model(Positional([1.0, 0.0]), HFSchedule(1, 1, 9), 1.0, 0.0)
    np.testing.assert_allclose(r.stationary[:3], [1 / 3, 1 / 3, 1 / 3], rtol=1e-12)
    with pytest.raises(PolyspecInputError, match="hf"):
        hf_two_model(IIDGeometric(0.5), ConfidenceSchedule(0.5), 1.0, 0.0)


# --- A2: the joint law and the confidence cut-off ----------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.floats(1.0, 12.0), st.floats(1.0, 6.0), st.floats(-2.0, 2.0), st.floats(-1.0, 3.0),
       st.floats(0.0, 0.95))
def test_a2_joint_law_integrals_equal_quadrature_in_c(a, b, b0, b1, eta):
    law = ConfidenceLaw([a, b], [b0, b1])

    def f(c):
        return stats.beta.pdf(c, a, b) * special.expit(b0 + b1 * special.logit(c))

    ref, _ = integrate.quad(f, eta, 1.0, epsabs=1e-13, epsrel=1e-11, limit=200)
    assert law.joint(eta) == pytest.approx(ref, rel=1e-7, abs=1e-12)
    assert law.draft_probability(eta) == pytest.approx(stats.beta.sf(eta, a, b), rel=1e-12)
    assert law.joint(eta) <= law.draft_probability(eta) + 1e-15


def test_a2_calibrated_drafter_accepts_with_its_confidence():
    law = ConfidenceLaw([3.0, 1.5], [0.0, 1.0])
    assert law.alpha == pytest.approx(3.0 / 4.5, rel=1e-10)
    # E[C 1{C >= eta}] = a/(a+b) P(Beta(a+1, b) >= eta)
    assert law.joint(0.6) == pytest.approx(3 / 4.5 * stats.beta.sf(0.6, 4.0, 1.5), rel=1e-9)
    # singular densities (a, b < 1) are fine in the logit domain
    s = ConfidenceLaw([0.4, 0.3], [0.5, 2.0])
    ref = integrate.quad(lambda c: stats.beta.pdf(c, 0.4, 0.3)
                         * special.expit(0.5 + 2.0 * special.logit(c)), 0.3, 1.0,
                         limit=400, epsabs=1e-12)[0]
    assert s.joint(0.3) == pytest.approx(ref, rel=1e-6)


def _enumerate_round(q, r, cap):
    """Per position: stop (1 - q), drafted & accepted (r), drafted & rejected (q - r)."""
    out = {"EL": 0.0, "EG": 0.0, "fwd": 0.0, "g": np.zeros(cap + 1)}
    for seq in itertools.product((0, 1, 2), repeat=cap):
        w = math.prod((1 - q, r, q - r)[s] for s in seq)
        g = next((j for j, s in enumerate(seq) if s == 0), cap)
        a = next((j for j, s in enumerate(seq) if s != 1), cap)
        out["EL"] += w * (a + 1)
        out["EG"] += w * g
        out["fwd"] += w * (g + (g < cap))
        out["g"][g] += w
    return out


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 8.0), st.floats(0.5, 4.0), st.floats(-1.0, 1.0), st.floats(0.0, 2.0),
       st.floats(0.0, 0.9), st.integers(1, 6))
def test_a2_confidence_round_equals_enumeration(a, b, b0, b1, eta, cap):
    law = ConfidenceLaw([a, b], [b0, b1])
    rd = confidence_round(law, eta, cap)
    ref = _enumerate_round(rd.q, rd.r, cap)
    assert rd.mean_emitted == pytest.approx(ref["EL"], rel=1e-12)
    assert rd.mean_block == pytest.approx(ref["EG"], rel=1e-12, abs=1e-15)
    assert rd.draft_forwards == pytest.approx(ref["fwd"], rel=1e-12)
    np.testing.assert_allclose(rd.block_pmf, ref["g"], rtol=1e-12, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 8.0), st.floats(0.5, 4.0), st.floats(-1.0, 1.0), st.floats(0.0, 2.0),
       st.integers(1, 12), st.floats(0.0, 0.3))
def test_a2_no_cutoff_is_the_fixed_chain(a, b, b0, b1, cap, c):
    law = ConfidenceLaw([a, b], [b0, b1])
    tc = CostCurve.affine(1.0, 0.02)
    assert confidence_two_model(law, 0.0, cap, tc, c) == pytest.approx(
        dualistic_speedup(law.alpha, cap, tc, c), rel=1e-10)


def test_a2_input_checks():
    with pytest.raises(PolyspecInputError) as e:
        ConfidenceLaw([0.0, 1.0], [0.0, 1.0], "acceptance[0].confidence")
    assert e.value.field == "acceptance[0].confidence.beta[0]"
    with pytest.raises(PolyspecInputError) as e:
        ConfidenceLaw([1.0, 1.0], [float("nan"), 1.0], "acceptance[0].confidence")
    assert e.value.field == "acceptance[0].confidence.logistic[0]"
    with pytest.raises(PolyspecInputError, match="ConfidenceLaw"):
        confidence_round(IIDGeometric(0.5), 0.5, 4)
    law = ConfidenceLaw([2.0, 1.0], [0.0, 1.0])
    with pytest.raises(PolyspecInputError, match="eta"):
        law.joint(1.2)


# --- A3: fit ------------------------------------------------------------------------------------


def _sample(law, n, rng, trunc=0.0):
    c = stats.beta.ppf(rng.uniform(stats.beta.cdf(trunc, law.a, law.b), 1.0, n), law.a, law.b)
    acc = (rng.random(n) < law.accept_probability(c)).astype(float)
    return c, acc


def test_a3_fit_recovers_the_law():
    rng = np.random.default_rng(11)
    true = ConfidenceLaw([3.0, 1.2], [-0.4, 1.3])
    c, acc = _sample(true, 40_000, rng)
    acc[rng.random(acc.size) < 0.3] = np.nan  # undecided tokens are ignored by the logistic
    fit = fit_confidence_law(c, acc)
    got = fit.law
    # standard errors at n = 40k are ~0.02-0.03: 6 se
    assert got.a == pytest.approx(3.0, abs=0.15) and got.b == pytest.approx(1.2, abs=0.06)
    assert got.b0 == pytest.approx(-0.4, abs=0.15) and got.b1 == pytest.approx(1.3, abs=0.12)
    assert fit.n_confidence == 40_000 and fit.n_accepted == int((~np.isnan(acc)).sum())
    # the Beta MLE matches scipy's
    a, b, _, _ = stats.beta.fit(c, floc=0, fscale=1)
    assert got.a == pytest.approx(a, rel=1e-4) and got.b == pytest.approx(b, rel=1e-4)


def test_a3_fit_with_truncation():
    rng = np.random.default_rng(12)
    true = ConfidenceLaw([2.0, 1.5], [0.0, 1.0])
    c, acc = _sample(true, 30_000, rng, trunc=0.5)
    naive = fit_confidence_law(c, acc).law
    fit = fit_confidence_law(c, acc, truncation=0.5).law
    assert fit.a == pytest.approx(2.0, abs=0.3) and fit.b == pytest.approx(1.5, abs=0.2)
    assert abs(naive.a / (naive.a + naive.b) - 2.0 / 3.5) > 0.1  # ignoring it is biased


def test_a3_fit_input_checks():
    with pytest.raises(PolyspecInputError, match="both outcomes"):
        fit_confidence_law([0.5, 0.6, 0.7], [1, 1, 1])
    with pytest.raises(PolyspecInputError, match="accepted"):
        fit_confidence_law([0.5, 0.6], [1, 2])
    with pytest.raises(PolyspecInputError, match="confidence"):
        fit_confidence_law([0.5, 1.6], [1, 0])
    with pytest.raises(PolyspecInputError, match="truncation"):
        fit_confidence_law([0.5, 0.6], [1, 0], truncation=0.55)
    with pytest.raises(PolyspecInputError, match="one entry per confidence"):
        fit_confidence_law([0.5, 0.6], [1])
