"""Rows of ``polyspec verify`` that must reject wrong theory, not only accept right theory.

The P3 tail row must fail for a Hoeffding bound that is valid but looser than Hoeffding's
(``ell^2`` for ``(ell - 1)^2``, or the factor 2 dropped); the P4 identity row must compare
Lemma 3.1 evaluated on the Monte Carlo's forward counts with P1's expected forward times
against the simulated total time (not a sum with itself), so a wrong ``beta`` or a wrong
expected forward time fails it.

The P2 rows must fail when the Wald lower or the Lorden upper bound is wrong (the exact
``phi`` must lie inside the bounds, not only the Monte-Carlo interval overlap them).

False-failure rate: the rows' own (``ROW_ALPHA`` = 2.5e-5 each, 6 rows here) at fixed seeds.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polyspec_theory.bounds.approximation as approximation
import polyspec_theory.bounds.tails as bounds
from simulators.verify import VerifyContext, check_p2, check_p3, check_p4


@pytest.fixture(scope="module")
def ctx():
    return VerifyContext(quick=True, seed=0)


def _loose_ell_squared(l_pmf, theta, k, *, lattice=False):
    m = bounds.length_moments(l_pmf)
    t = theta - 1 if lattice else theta
    kk = np.asarray(k, dtype=np.float64)
    return float(np.exp(-2.0 * kk * (m["mu"] - t / kk) ** 2 / m["ell"] ** 2))


def _loose_no_factor_two(l_pmf, theta, k, *, lattice=False):
    m = bounds.length_moments(l_pmf)
    t = theta - 1 if lattice else theta
    kk = np.asarray(k, dtype=np.float64)
    return float(np.exp(-kk * (m["mu"] - t / kk) ** 2 / (m["ell"] - 1) ** 2))


def test_p2_rows_pass(ctx):
    rows = check_p2(ctx)
    assert [r.id for r in rows] == ["P2", "P2"]
    assert all(r.passed for r in rows), [r.to_dict() for r in rows]


_PHI_BOUNDS = bounds.phi_bounds


def _no_lorden_term(l_pmf, theta):
    """Wrong P2 upper bound: theta / mu (the E[L^2] / mu term of Lorden's bound dropped)."""
    b = _PHI_BOUNDS(l_pmf, theta)
    return dataclasses.replace(b, lorden_upper=b.wald_lower, upper=b.lower)


def _wald_too_high(l_pmf, theta):
    """Wrong P2 lower bound: above the Lorden upper bound (so above every phi)."""
    b = _PHI_BOUNDS(l_pmf, theta)
    return dataclasses.replace(b, wald_lower=1.02 * b.upper, lower=1.02 * b.upper)


@pytest.mark.parametrize("wrong", [_no_lorden_term, _wald_too_high])
def test_p2_rows_reject_wrong_wald_or_lorden_bounds(ctx, monkeypatch, wrong):
    monkeypatch.setattr(bounds, "phi_bounds", wrong)
    rows = check_p2(ctx)
    assert not any(r.passed for r in rows), [r.to_dict() for r in rows]


def test_p3_rows_pass(ctx):
    rows = check_p3(ctx)
    assert [r.id for r in rows] == ["P3", "P3"]
    assert all(r.passed for r in rows), [r.to_dict() for r in rows]


@pytest.mark.parametrize("loose", [_loose_ell_squared, _loose_no_factor_two])
def test_p3_row_rejects_a_loosened_hoeffding_bound(ctx, monkeypatch, loose):
    monkeypatch.setattr(bounds, "hoeffding_tail", loose)
    tail_row = check_p3(ctx)[0]
    assert not tail_row.passed, tail_row.to_dict()


def test_p4_identity_row_passes_and_is_not_a_tautology(ctx, monkeypatch):
    row = check_p4(ctx)[0]
    assert row.passed, row.to_dict()
    assert row.theory_value == 1.0 and row.mc_value != 1.0  # an estimate, not an identity
    real = approximation.identity_from_counts

    def wrong_beta(n_tokens, counts, costs, beta=None):
        return real(n_tokens, counts, costs, beta=beta - 1)

    monkeypatch.setattr(approximation, "identity_from_counts", wrong_beta)
    assert not check_p4(ctx)[0].passed
