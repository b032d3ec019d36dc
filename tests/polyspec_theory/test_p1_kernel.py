"""The P1 kernel (polyspec_theory.core.p1, docs/theory.md §6): the per-cap law table, the mixture
over blocks, the vectorised renewal fill and the level fold, each against an independent
computation (exact enumeration of the rounds, explicit sums over the table)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import (
    BetaMixed,
    Cascade,
    HiddenRegimes,
    IIDGeometric,
    PolyspecInputError,
    Positional,
    RegimeLaw,
    block_laws,
    fill_blocks,
    fold_levels,
    predict,
    renewal_masses,
)

REGIME = RegimeLaw(HiddenRegimes([0.7, 0.3], [[0.97, 0.03], [0.02, 0.98]], [0.3, 0.95]), 64)

laws = st.one_of(
    st.floats(0.05, 0.97).map(IIDGeometric),
    st.lists(st.floats(0.05, 0.97), min_size=1, max_size=4).map(Positional),
    st.tuples(st.floats(0.5, 8.0), st.floats(0.5, 8.0)).map(lambda ab: BetaMixed(*ab)),
    st.just(REGIME),
)
length_pmfs = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4).map(
    lambda w: np.concatenate([[0.0], (np.asarray(w) + 1e-3) / (np.sum(w) + 1e-3 * len(w))]))


def _enumerate_fill(l_pmf, theta):
    """``(E[N], {g: P(G = g)})`` by walking every sequence of rounds (exact)."""
    phi, g, stack = 0.0, {}, [(0, 0, 1.0)]
    while stack:
        s, k, p = stack.pop()
        if s >= theta:
            phi += k * p
            g[s] = g.get(s, 0.0) + p
            continue
        stack.extend((s + ln, k + 1, p * q) for ln, q in enumerate(l_pmf) if q > 0)
    return phi, g


@settings(derandomize=True, deadline=None, max_examples=40)
@given(law=laws, gmax=st.integers(0, 12))
def test_cap_pmf_table_rows_are_the_capped_laws(law, gmax):
    k = law.cap_pmf_table(gmax)
    assert k.shape == (gmax + 1, gmax + 1)
    assert np.allclose(k.sum(axis=1), 1.0, atol=1e-12)
    assert k[0, 0] == pytest.approx(1.0)
    assert np.all(np.triu(k, 1) == 0.0)  # A <= cap
    for g in range(1, gmax + 1):
        assert np.allclose(k[g, : g + 1], law.pmf_vector(g), atol=1e-12)
    assert np.allclose(law.capped_mean_emitted(gmax), 1.0 + k @ np.arange(gmax + 1), atol=1e-12)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(law=laws, w=st.lists(st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6),
                            min_size=1, max_size=3))
def test_pmf_over_blocks_is_the_table_mixture(law, w):
    w = np.asarray(w) + 1e-6
    w /= w.sum(axis=1, keepdims=True)
    table = law.cap_pmf_table(w.shape[1] - 1)
    direct = np.array([[sum(row[g] * table[g, a] for g in range(row.size))
                        for a in range(row.size)] for row in w])
    assert np.allclose(law.pmf_over_blocks(w), direct, atol=1e-13)
    assert np.allclose(law.pmf_over_blocks(w[0]), direct[0], atol=1e-13)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(p=length_pmfs, thetas=st.lists(st.integers(1, 7), min_size=1, max_size=4))
def test_fill_blocks_equals_enumeration(p, thetas):
    phi, w = fill_blocks(p, thetas)
    assert w.shape[0] == len(thetas)
    for j, t in enumerate(thetas):
        phi_b, g_b = _enumerate_fill(p, t)
        assert phi[j] == pytest.approx(phi_b, rel=1e-12)
        expect = np.zeros(w.shape[1])
        for g, q in g_b.items():
            expect[g] = q
        assert np.allclose(w[j], expect, atol=1e-13)
    phi_t, w_t = fill_blocks(p, thetas, "truncate")
    assert np.array_equal(phi_t, phi)
    assert np.array_equal(w_t.argmax(axis=1), np.asarray(thetas))
    assert np.allclose(w_t.sum(axis=1), 1.0)


@settings(derandomize=True, deadline=None, max_examples=25)
@given(ps=st.lists(length_pmfs, min_size=1, max_size=3), tmax=st.integers(1, 9))
def test_renewal_masses_per_row_equal_one_law(ps, tmax):
    width = max(p.size for p in ps)
    rows = np.array([np.pad(p, (0, width - p.size)) for p in ps])
    f = renewal_masses(rows, tmax)
    for r, p in enumerate(ps):
        assert np.allclose(f[r], renewal_masses(p, tmax), rtol=1e-14, atol=0)
        # f(s) = P(some partial sum hits s)
        for s in range(1, tmax):
            hit = _enumerate_fill(p, s)[1].get(s, 0.0)
            assert f[r, s] == pytest.approx(hit, rel=1e-12, abs=1e-15)
    th = np.array([min(tmax, 1 + r) for r in range(len(ps))])
    w = block_laws(rows, f, th)
    for r in range(len(ps)):
        one = block_laws(rows[r], f[r], [th[r]])[0]  # width th[r] + lmax
        assert np.array_equal(w[r, : one.size], one) and not w[r, one.size :].any()


CFG = {
    "models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.02}, "overhead": 0.05},
               {"name": "b", "cost": {"table": [0.2, 0.21, 0.25]}, "overhead": 0.01},
               {"name": "c", "cost": 0.01}],
    "acceptance": [{"alpha": 0.8}, {"beta": [4, 1]}], "thresholds": [5, 3],
}


@pytest.mark.parametrize("policy", ["accumulate", "truncate"])
def test_fold_levels_equals_the_recursion_by_enumeration(policy):
    cas = Cascade.from_config({**CFG, "policy": policy})
    folded = fold_levels(cas)
    assert len(folded) == 2
    l_pmf, rc = np.array([0.0, 1.0]), cas.costs[-1].t1
    for i in (1, 0):
        theta = cas.thresholds[i]
        phi, g = _enumerate_fill(l_pmf, theta)
        if policy == "truncate":
            g = {theta: 1.0}
        fc = sum(q * float(cas.costs[i](gg + 1)) for gg, q in g.items())
        rc = phi * rc + fc + cas.models[i].overhead
        gmax = max(g)
        lp = np.zeros(gmax + 2)
        for gg, q in g.items():
            lp[1 : gg + 2] += q * cas.laws[i].pmf_vector(gg)
        lv = folded[i]
        assert lv.phi == pytest.approx(phi, rel=1e-12) and lv.rounds == lv.phi
        assert lv.forward_cost == pytest.approx(fc, rel=1e-12)
        assert lv.overhead == cas.models[i].overhead
        assert lv.round_cost == pytest.approx(rc, rel=1e-12)
        assert np.allclose(lv.emitted_pmf, lp, atol=1e-13)
        l_pmf = lv.emitted_pmf
    pr = predict(cas)
    assert pr.time_per_token == pytest.approx(
        folded[0].round_cost / np.dot(np.arange(l_pmf.size), l_pmf), rel=1e-14)


def test_fold_levels_hooks_replace_rounds_and_forward_cost():
    cas = Cascade.from_config(CFG)
    plain = fold_levels(cas)
    hooked = fold_levels(cas, rounds=lambda lp, t, phi: 2.0 * phi,
                         forward_cost=lambda g, i: 1.0)
    assert hooked[1].round_cost == pytest.approx(
        2.0 * plain[1].phi * cas.costs[-1].t1 + 1.0 + cas.models[1].overhead)
    assert hooked[0].round_cost == pytest.approx(
        2.0 * plain[0].phi * hooked[1].round_cost + 1.0 + cas.models[0].overhead)


@pytest.mark.parametrize("call, field", [
    (lambda: renewal_masses([0.5, 0.5], 3), "l_pmf"),
    (lambda: renewal_masses([0.0, 1.0], 0), "tmax"),
    (lambda: block_laws([0.0, 1.0], [1.0], [3]), "f"),
    (lambda: fill_blocks([0.0, 1.0], [0]), "thetas"),
    (lambda: IIDGeometric(0.5).pmf_over_blocks([0.5, float("nan")]), "block_pmf"),
    (lambda: REGIME.pmf_over_blocks([[-0.1, 1.1]]), "block_pmf"),
    (lambda: IIDGeometric(0.5).cap_pmf_table(-1), "gmax"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(PolyspecInputError, match=field):
        call()
