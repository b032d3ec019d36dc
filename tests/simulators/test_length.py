"""Length-level simulator: agreement with P1 on random cascades, exact single events,
reproducibility, input checks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, GaussianBaseline, IIDGeometric, Positional
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import predict
from simulators.length import (
    LengthModel,
    init_state,
    make_kernel,
    simulate_lengths,
    transition,
)

WIDTH = 32  # one table width for every random config: compilations are shared


def _random_law(rng):
    kind = rng.integers(4)
    if kind == 0:
        return IIDGeometric(float(rng.uniform(0.3, 0.95)))
    if kind == 1:
        return Positional(rng.uniform(0.3, 0.95, size=rng.integers(1, 4)).tolist())
    if kind == 2:
        return BetaMixed(float(rng.uniform(0.5, 8)), float(rng.uniform(0.5, 3)))
    return GaussianBaseline(float(rng.uniform(0.0, 4.0)), float(rng.uniform(0.5, 2.5)))


def _random_cost(rng, scale):
    kind = rng.integers(3)
    if kind == 0:
        return CostCurve.constant(scale)
    if kind == 1:
        return CostCurve.affine(scale, scale * rng.uniform(0, 0.1))
    return CostCurve.from_table(np.sort(scale * (1 + rng.uniform(0, 0.3, size=4))).tolist())


def random_configs(count=20, seed=2024):
    """Deterministic random cascades: n = 2..5 in turn, every law family, both policies,
    constant/affine/table costs."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(count):
        n = 2 + j % 4
        models = tuple(Model(f"m{i}", _random_cost(rng, 0.3**i)) for i in range(n))
        laws = tuple(_random_law(rng) for _ in range(n - 1))
        if j % 7 == 0:  # some all-iid cascades (closed-form sampler)
            laws = tuple(IIDGeometric(float(rng.uniform(0.4, 0.9))) for _ in range(n - 1))
        th = tuple(int(x) for x in rng.integers(1, 7, size=n - 1))
        policy = "truncate" if j % 3 == 2 else "accumulate"
        out.append(Cascade(models, laws, th, policy, f"random{j}"))
    return out


CONFIGS = random_configs()
# Bonferroni: one speedup and n-1 phi comparisons per config; the family-wise false-failure
# rate of this test (all configs together) is <= 1e-3.
N_COMPARISONS = sum(c.n for c in CONFIGS)
Z = float(stats.norm.isf(1e-3 / N_COMPARISONS / 2))


@pytest.mark.parametrize("idx", range(len(CONFIGS)))
def test_agrees_with_p1_on_random_configs(idx):
    cas = CONFIGS[idx]
    model = LengthModel.from_cascade(cas, histograms=idx % 2 == 0, width=WIDTH)
    res = simulate_lengths(model, 60_000, seed=idx, chains=256, chunk_len=256)
    pred = predict(cas)
    s = res.speedup
    assert abs(s.value - pred.speedup) <= Z * s.se, (cas, s, pred.speedup)
    for ls, lp in zip(res.levels[1:], pred.levels[1:], strict=True):
        assert abs(ls.phi.value - lp.phi) <= Z * ls.phi.se + 1e-12, (ls.name, ls.phi, lp.phi)
    assert res.policy == cas.policy
    assert res.to_dict()["policy"] == cas.policy


def test_histograms_match_counters_and_p1_laws():
    cas = CONFIGS[4]  # n = 2 accumulate... any config with histograms
    model = LengthModel.from_cascade(cas, histograms=True, width=WIDTH)
    res = simulate_lengths(model, 60_000, seed=7, chains=256, chunk_len=256)
    pred = predict(cas)
    for i, (ls, lp) in enumerate(zip(res.levels[:-1], pred.levels[:-1], strict=True)):
        assert ls.block_hist.sum() == res.rounds[i] == ls.emitted_hist.sum()
        mean_g = np.dot(np.arange(ls.block_hist.size), ls.block_hist) / ls.block_hist.sum()
        assert mean_g == pytest.approx(ls.mean_block.value, rel=1e-12)
        # block law: chi-square against P1's exact block pmf (blocks are iid)
        exp = lp.block_pmf * ls.block_hist.sum()
        obs = ls.block_hist[: exp.size]
        keep = exp > 5
        if keep.sum() >= 2:
            chi = stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum())
            assert chi.pvalue > 1e-4  # false-failure rate 1e-4 per level


# one compiled program per structure (eager, every jnp op of an event compiles by itself)
_transition = jax.jit(transition, static_argnums=1)


def test_single_event_by_hand():
    """Dualistic theta = 3, alpha = 0.5: u = 0.3 accepts floor(log .3/log .5) = 1 token."""
    cas = Cascade((Model("t", CostCurve.affine(1.0, 0.1)), Model("d", CostCurve.constant(0.2))),
                  (IIDGeometric(0.5),), (3,))
    model = LengthModel.from_cascade(cas)
    st = init_state(1)
    st2, info = _transition(model.params, model.static, np.int64(100), np.float64(0.3), st)
    assert int(info.block) == 3 and int(info.accepted) == 1
    assert int(st2.tokens) == 2
    assert sum(float(t) for t in st2.model_time) == pytest.approx(3 * 0.2 + 1.0 + 0.1 * 3)
    # the table sampler (positional law with the same hazards) gives the same answer
    cas2 = Cascade(cas.models, (Positional([0.5]),), (3,))
    m2 = LengthModel.from_cascade(cas2)
    _, info2 = _transition(m2.params, m2.static, np.int64(100), np.float64(0.3), st)
    assert int(info2.accepted) == 1
    # a frozen chain does not move
    st3, info3 = _transition(model.params, model.static, np.int64(1), np.float64(0.3),
                             init_state(1, True))
    assert not bool(info3.active) and int(st3.tokens) == 0


def test_three_level_event_sequence():
    """Bottom rounds fill the parent's block; the parent verifies once it reaches theta."""
    cas = Cascade(tuple(Model(f"m{i}", CostCurve.constant(1.0)) for i in range(3)),
                  (IIDGeometric(0.5), IIDGeometric(0.5)), (3, 2))
    model = LengthModel.from_cascade(cas)
    st = init_state(2)
    # u = 0.9: A = 0 (L = 1) at the bottom; twice -> acc[0] = 2 < 3; third -> 3 -> verify
    for _ in range(3):
        assert int(st.level) == 1
        st, info = _transition(model.params, model.static, np.int64(10), np.float64(0.9), st)
        assert int(info.accepted) == 0
    assert int(st.level) == 0 and int(st.acc[0]) == 3
    st, info = _transition(model.params, model.static, np.int64(10), np.float64(0.01), st)
    assert int(info.block) == 3 and int(info.accepted) == 3  # alpha^3 = .125 > .01
    assert int(st.tokens) == 4 and int(st.level) == 1


def test_blackjax_kernel_runs():

    cas = CONFIGS[1]
    kernel = make_kernel(LengthModel.from_cascade(cas), tokens_per_chain=50)
    st = kernel.init()
    keys = jax.random.split(jax.random.key(3), 400)
    step = jax.jit(kernel.step)
    for k in keys:
        st, info = step(k, st)
    assert bool(st.done) and int(st.tokens) >= 50


def test_same_seed_identical_different_seed_differs():
    cas = CONFIGS[4]  # histograms on, as in test_agrees_with_p1_on_random_configs[4]: shared
    model = LengthModel.from_cascade(cas, histograms=True, width=WIDTH)
    a = simulate_lengths(model, 20_000, seed=11, chains=256, chunk_len=256)
    b = simulate_lengths(model, 20_000, seed=11, chains=256, chunk_len=256)
    c = simulate_lengths(model, 20_000, seed=12, chains=256, chunk_len=256)
    assert a.to_dict() == b.to_dict()
    np.testing.assert_array_equal(a.chain_time, b.chain_time)
    assert a.speedup.value != c.speedup.value
    assert not np.array_equal(a.chain_time, c.chain_time)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tokens": 0}, "tokens"),
    ({"tokens": 10, "seed": -1}, "seed"),
    ({"tokens": 10, "chains": 1}, "chains"),
    ({"tokens": 10, "chunk_len": 0}, "chunk_len"),
])
def test_bad_input(kwargs, field):
    with pytest.raises(PolyspecInputError) as e:
        simulate_lengths(CONFIGS[0], **kwargs)
    assert e.value.field == field
    assert str(e.value).startswith(field)


def test_not_a_cascade():
    with pytest.raises(PolyspecInputError) as e:
        LengthModel.from_cascade({"models": []})
    assert e.value.field == "cascade"


def test_max_events_guard():
    with pytest.raises(PolyspecInputError) as e:
        # the shapes of test_agrees_with_p1_on_random_configs[0] (one compiled chunk): no
        # chain can emit 10**7 / 256 tokens in 256 events (at most WIDTH + 1 tokens each)
        simulate_lengths(LengthModel.from_cascade(CONFIGS[0], histograms=True, width=WIDTH),
                         10**7, chains=256, chunk_len=256, max_events=256)
    assert e.value.field == "max_events"
    assert math.isfinite(Z)


@pytest.mark.parametrize("idx", [1, 2, 3, 6, 10, 13])
def test_run_chunk_equals_event_by_event_transition(idx):
    """The fused chunk (packed counters, per-level compare counts, counter-derived affine
    model times) replays exactly the events of :func:`transition` fed the same uniforms."""

    from simulators.length import chunk_bits, run_chunk
    from simulators.runtime import chain_mesh, host_chains, shard_chains, uniform_from_bits

    cas = CONFIGS[idx]
    # the model, shapes and chain sharding of test_agrees_with_p1_on_random_configs[idx]
    # (as simulate_lengths places them): its compiled chunk, no compilation of its own
    model = LengthModel.from_cascade(cas, histograms=idx % 2 == 0, width=WIDTH)
    chains, chunk_len, target = 256, 256, np.int64(40)
    key = jax.random.key(7)
    st0 = shard_chains(host_chains(init_state(model.static.m), chains), chain_mesh())
    fused, _ = run_chunk(model.params, model.static, chunk_len, chains, target, key,
                         np.int64(0), st0)
    u = uniform_from_bits(chunk_bits(key, jnp.int64(0), chunk_len, chains))
    step = jax.jit(jax.vmap(lambda uu, s: transition(model.params, model.static, target, uu,
                                                     s)[0]))
    st = st0
    for t in range(chunk_len):
        st = step(u[t], st)
    for name in ("level", "tokens", "done"):
        np.testing.assert_array_equal(np.asarray(getattr(fused, name)),
                                      np.asarray(getattr(st, name)), err_msg=name)
    for name in ("acc", "rounds", "block_sum", "emitted_sum"):
        for a, b in zip(getattr(fused, name), getattr(st, name), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    for a, b in zip(fused.model_time, st.model_time, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def test_event_bits_are_uniform_uncorrelated_and_padding_invariant():
    """The counter-based bits (SplitMix64 from a threefry seed per chunk): the top byte is
    uniform (chi-square), consecutive events of a chain, adjacent chains and two chunks are
    uncorrelated (|r| sqrt(N) below the 1 - 1e-4 two-sided normal quantile). Four checks at
    level 1e-4 each: false-failure rate <= 4e-4 (fixed key, so runs repeat)."""

    from simulators.length import chunk_bits
    from simulators.runtime import uniform_from_bits

    key = jax.random.key(2024)
    b = np.asarray(chunk_bits(key, jnp.int64(0), 512, 1024))
    counts = np.bincount((b >> 24).ravel(), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    u = np.asarray(uniform_from_bits(jnp.asarray(b)))
    u1 = np.asarray(uniform_from_bits(chunk_bits(key, jnp.int64(1), 512, 1024)))
    z = float(stats.norm.isf(1e-4 / 2))
    for x, y in ((u[1:], u[:-1]), (u[:, 1:], u[:, :-1]), (u, u1)):
        r = np.corrcoef(x.ravel(), y.ravel())[0, 1]
        assert abs(r) * math.sqrt(x.size) < z
    # padding columns do not change the real chains' bits
    np.testing.assert_array_equal(np.asarray(chunk_bits(key, jnp.int64(3), 16, 63, 64))[:, :63],
                                  np.asarray(chunk_bits(key, jnp.int64(3), 16, 63)))
