"""PL0-PL3 (docs/theory.md Part VI-PL): parallel draft-verify against independent exact
computations -- the protocol run check by check over every outcome, the benchmark's own
counting, the product chain of the ``b`` sequences of a lockstep batch (``_pearl_enum``) --
over many hypothesis-drawn laws, draft lengths, batches and costs; closed forms worked by
hand; P1's uncapped mean for MAT. Deterministic: no Monte Carlo in this file."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError
from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional
from polyspec_theory.core.runs import RunLaw
from polyspec_theory.schemes import pearl as pearl_mod
from polyspec_theory.schemes.pearl import (
    pearl_chain,
    pearl_costs,
    pearl_horizon,
    pearl_horizon_cascade,
    pearl_horizons,
    pearl_step_costs,
    predict_pearl,
    predict_pearl_cascade,
    run_acceptance,
    start_up_gamma,
)

from ._pearl_enum import horizon as enum_horizon
from ._pearl_enum import long_run as enum_long_run

PROPS = settings(derandomize=True, deadline=None, max_examples=60)


@st.composite
def laws(draw, aperiodic=True):
    """iid, positional or run laws; ``aperiodic``: the first draft is rejected with
    probability > 0 (pre-verify has a self-loop, so the chain is aperiodic)."""
    kind = draw(st.sampled_from(["iid", "positional", "run"]))
    first = st.floats(0.0, 0.95) if aperiodic else st.floats(0.0, 1.0)
    if kind == "iid":
        return IIDGeometric(draw(first))
    rest = draw(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=4))
    if kind == "positional":
        return Positional([draw(first)] + rest)
    hz = tuple(1.0 - x for x in [draw(first)] + rest[:-1]) if rest else ()
    tail = draw(st.floats(0.02, 1.0)) if hz else 1.0 - draw(first)
    return RunLaw(hz, max(tail, 0.02) if not hz else tail)


@st.composite
def cost_vectors(draw, gamma, b):
    """A target cost over the tokens of a forward (any non-negative function) and the step
    costs of PL0 built by hand."""
    draft = draw(st.floats(0.0, 0.6))
    over = draw(st.floats(0.0, 0.3))
    table = draw(st.lists(st.floats(0.05, 3.0), min_size=b * gamma + 1,
                          max_size=b * gamma + 1))
    costs = [max(gamma * draft, table[b + (gamma - 1) * k]) + over for k in range(b + 1)]
    return draft, over, table, costs


def _run(law):
    r = run_acceptance(law)
    return r.accept, r.ratio


@PROPS
@given(st.data())
def test_long_run_equals_the_product_chain(data):
    """PL1/PL2: renewal cycles + Binomial(b, post share) = the stationary law of the product
    chain of b sequences, solved directly."""
    law = data.draw(laws())
    gamma = data.draw(st.integers(1, 4))
    b = data.draw(st.integers(1, 3))
    draft, over, table, costs = data.draw(cost_vectors(gamma, b))
    pred = predict_pearl(law, gamma, costs, 1.0)
    ref = enum_long_run(gamma, *_run(law), costs)
    assert pred.time_per_token == pytest.approx(ref["time_per_token"], rel=1e-9)
    assert pred.chain.tokens_per_step == pytest.approx(ref["tokens_per_step"], rel=1e-9)
    # the step costs of PL0 as the code builds them
    built = pearl_step_costs(draft, lambda n: table[n], gamma, b, over)
    np.testing.assert_allclose(built, costs, rtol=0, atol=1e-12)


@PROPS
@given(st.data())
def test_horizon_equals_enumeration(data):
    """PL3: every expectation of a finite run from all-pre-verify -- time, verified and
    counted tokens, MAT as the benchmark records it, P(post-verify) by step -- equals the
    protocol enumerated check by check."""
    law = data.draw(laws(aperiodic=False))
    gamma = data.draw(st.integers(1, 3))
    b = data.draw(st.integers(1, 3))
    steps = data.draw(st.integers(1, 5 if b < 3 else 3))
    _, _, _, costs = data.draw(cost_vectors(gamma, b))
    got = pearl_horizon(law, gamma, costs, steps)
    ref = enum_horizon(gamma, *_run(law), costs, steps)
    assert got.time == pytest.approx(ref["time"], rel=1e-10, abs=1e-12)
    assert got.verified == pytest.approx(ref["verified"], rel=1e-10, abs=1e-12)
    assert got.counted == pytest.approx(ref["counted"], rel=1e-10, abs=1e-12)
    assert got.mat == pytest.approx(ref["mat"], rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(got.post_by_step, ref["post"], rtol=1e-10, atol=1e-12)
    assert got.tokens_per_step == pytest.approx(ref["counted"] / steps, rel=1e-10)


def _horizon_before(law, gamma, step_costs, steps):
    """PL3 as pearl_horizon computed it before issue 41 (one (state, rejections) array per
    expectation, a fresh array per step): the reference the faster loop must equal bit for
    bit (the hardware fit's committed numbers rest on it)."""
    gamma = pearl_mod._gamma(gamma)
    run = run_acceptance(law)
    c = np.asarray(step_costs, dtype=np.float64)
    b = c.size - 1
    top, rows = pearl_mod._horizon_states(run, gamma)
    ns = top + 1
    pr = np.array([float(rej.sum()) for rej, _ in rows])
    rt = np.array([float(rej @ np.arange(1, rej.size + 1, dtype=np.float64))
                   for rej, _ in rows])
    full = np.array([f for _, f in rows], dtype=np.float64)[:, None]
    gain = np.array([1.0] + [float(gamma)] * top)[:, None]
    p0 = np.zeros((ns, steps + 1))
    p1 = np.zeros((ns, steps + 1))
    p0[0, 0] = 1.0
    post = np.zeros(steps + 1)
    for t in range(steps):
        post[t] = float(p0[1:].sum())
        q0, q1 = np.zeros_like(p0), np.zeros_like(p1)
        q0[0, 1:] = (pr[:, None] * p0[:, :-1]).sum(axis=0)
        q1[0, 1:] = (pr[:, None] * p1[:, :-1] + rt[:, None] * p0[:, :-1]).sum(axis=0)
        f0, f1 = full * p0, full * (p1 + gain * p0)
        q0[1:] = f0[:-1]
        q1[1:] = f1[:-1]
        q0[top] += f0[top]
        q1[top] += f1[top]
        p0, p1 = q0, q1
    time = 0.0
    if c.any():
        pmf = pearl_mod._binomial(b, np.clip(post[:steps], 0.0, 1.0))
        for t in range(steps):
            time += float(pmf[t] @ c)
    post[steps] = float(p0[1:].sum())
    verified = float(p1.sum())
    counted = 1.0 + verified + (gamma - 1) * post[steps]
    mat = float((p1.sum(axis=0) / np.arange(1, steps + 2)).sum())
    return {"steps": steps, "batch": b, "time": time, "verified": verified,
            "counted": counted, "tokens_per_step": counted / steps, "mat": mat,
            "post_by_step": post.tolist()}


@PROPS
@given(st.data())
def test_horizon_is_bit_identical_to_the_loop_before(data):
    """PL3's faster loop (issue 41: both expectations, and several laws, in one array) gives
    the very same floats as the loop before, law by law, alone and side by side, on long
    horizons and laws with many states (ns > 2, where the order of the sum over states
    matters)."""
    many = data.draw(st.lists(st.one_of(laws(aperiodic=False), st.builds(
        Positional, st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))),
        min_size=1, max_size=6))
    gamma = data.draw(st.integers(1, 5))
    b = data.draw(st.integers(1, 4))
    steps = data.draw(st.integers(1, 160))
    costs = data.draw(st.lists(st.floats(0.0, 3.0), min_size=b + 1, max_size=b + 1))
    before = [_horizon_before(law, gamma, costs, steps) for law in many]
    assert pearl_horizon(many[0], gamma, costs, steps).to_dict() == before[0]
    assert [h.to_dict() for h in pearl_horizons(many, gamma, costs, steps)] == before


@PROPS
@given(st.data())
def test_mat_is_the_uncapped_mean_and_tokens_per_step_bounds(data):
    """PL1: long-run MAT = E[R] + 1 = P1's uncapped E[L] (laws.mean_emitted_limit, its own
    code); 1 <= tokens per step <= gamma and it does not fall when gamma grows."""
    law = data.draw(st.one_of(
        st.builds(IIDGeometric, st.floats(0.0, 0.99)),
        st.builds(Positional, st.lists(st.floats(0.0, 0.99), min_size=1, max_size=5))))
    gamma = data.draw(st.integers(1, 12))
    ch = pearl_chain(law, gamma)
    assert ch.mat == pytest.approx(law.mean_emitted_limit(), rel=1e-12)
    assert 1.0 - 1e-12 <= ch.tokens_per_step <= gamma + 1e-12
    assert pearl_chain(law, gamma + 1).tokens_per_step >= ch.tokens_per_step - 1e-12
    assert 0.0 <= ch.post_share <= 1.0
    assert 0.0 <= ch.drafts_wasted <= 1.0


@PROPS
@given(alpha=st.floats(0.0, 0.999), gamma=st.integers(1, 16), d=st.floats(0.0, 0.5),
       t1=st.floats(0.1, 2.0), tg=st.floats(0.1, 3.0), o=st.floats(0.0, 0.5))
def test_iid_one_sequence_closed_form(alpha, gamma, d, t1, tg, o):
    """PL1, iid: time per token = (1 - alpha) c_pre + alpha c_post / sum_{i<gamma} alpha^i,
    c_pre = max(gamma d, T_t(1)) + o, c_post = max(gamma d, T_t(gamma)) + o."""
    c_pre, c_post = max(gamma * d, t1) + o, max(gamma * d, tg) + o
    geo = sum(alpha ** i for i in range(gamma))
    tau = (1 - alpha) * c_pre + alpha * c_post / geo
    got = predict_pearl(IIDGeometric(alpha), gamma, [c_pre, c_post], t1)
    assert got.time_per_token == pytest.approx(tau, rel=1e-12)
    assert got.speedup == pytest.approx(t1 / tau, rel=1e-12)
    ch = got.chain
    assert ch.post_share == pytest.approx(alpha / (1 - alpha ** gamma + alpha), rel=1e-12,
                                          abs=1e-15)
    assert ch.tokens_per_step == pytest.approx(
        (1 - alpha ** gamma) / ((1 - alpha) * (1 - alpha ** gamma + alpha)), rel=1e-10)


def test_worked_example_by_hand():
    """alpha 0.5, gamma 2: E[R]+1 = 2, E[ceil(R/2)] = 0.5/(1-0.25) = 2/3, 5/3 steps a run,
    1.2 tokens a step, post share 0.4. One sequence: c_pre = 1.1, c_post = 1.2, E[c] = 1.14,
    time per token 0.95. Batch 2, target 0.5 N: c = 1.1, 1.6, 2.1 over Binomial(2, 0.4) =
    (0.36, 0.48, 0.16): E[c] = 1.5, time per token 1.25."""
    law = IIDGeometric(0.5)
    ch = pearl_chain(law, 2)
    assert (ch.mat, ch.steps_per_run, ch.tokens_per_step, ch.post_share) == pytest.approx(
        (2.0, 5 / 3, 1.2, 0.4), rel=1e-14)
    one = pearl_step_costs(0.3, {1: 1.0, 2: 1.1}.__getitem__, 2, 1, 0.1)
    np.testing.assert_allclose(one, [1.1, 1.2], rtol=1e-15)
    assert predict_pearl(law, 2, one, 1.0).time_per_token == pytest.approx(0.95, rel=1e-14)
    two = pearl_step_costs(0.3, lambda n: 0.5 * n, 2, 2, 0.1)
    np.testing.assert_allclose(two, [1.1, 1.6, 2.1], rtol=1e-15)
    p = predict_pearl(law, 2, two, 1.0)
    np.testing.assert_allclose(p.post_pmf, [0.36, 0.48, 0.16], rtol=1e-14)
    assert p.mean_step == pytest.approx(1.5, rel=1e-14)
    assert p.time_per_token == pytest.approx(1.25, rel=1e-14)
    assert p.throughput == pytest.approx(2 / 1.25, rel=1e-14)


def test_horizon_tends_to_the_long_run():
    """PL3 -> PL1/PL2 as the horizon grows: time per verified token over T steps from
    all-pre-verify differs from the long run by O(1/T) (and by less at 10x the steps)."""
    law = Positional([0.6, 0.9, 0.8])
    costs = pearl_step_costs(0.2, lambda n: 1.0 + 0.1 * n, 3, 4, 0.05)
    tau = predict_pearl(law, 3, costs, 1.0).time_per_token
    errs = []
    for steps in (400, 4000):
        h = pearl_horizon(law, 3, costs, steps)
        errs.append(abs(h.time / h.verified - tau) / tau)
    assert errs[0] < 5e-3 and errs[1] < errs[0] / 5
    assert pearl_horizon(law, 3, costs, 4000).mat == pytest.approx(
        law.mean_emitted_limit(), rel=2e-2)


def test_stable_near_alpha_one():
    """No cancellation as alpha -> 1: the value at 1 - 1e-13 equals the limit at 1
    (gamma tokens a step, every step post-verify) to 1e-9; MAT grows as 1/(1 - alpha)."""
    costs = [1.2, 1.5]
    lim = predict_pearl(IIDGeometric(1.0), 5, costs, 1.0)
    near = predict_pearl(IIDGeometric(1.0 - 1e-13), 5, costs, 1.0)
    assert lim.time_per_token == pytest.approx(1.5 / 5, rel=1e-15)
    assert near.time_per_token == pytest.approx(lim.time_per_token, rel=1e-9)
    assert near.chain.mat == pytest.approx(1e13, rel=1e-3)
    assert math.isinf(lim.chain.mat)
    # a positional law whose last alpha is 1: runs that reach it never end
    p = predict_pearl(Positional([0.5, 1.0]), 3, [1.0, 2.0, 3.0], 1.0)
    assert p.chain.post_share == 1.0 and p.time_per_token == pytest.approx(1.0, rel=1e-15)


def test_periodic_cycles_refused_in_a_batch_only():
    """A law whose runs last a multiple of 2 steps (first draft always accepted, second
    always rejected) keeps a batch in step: PL2 refuses it; one sequence is exact (PL1)
    and equals the horizon's long-run average."""
    law = Positional([1.0, 0.0])
    assert pearl_chain(law, 1).period == 2
    with pytest.raises(PolyspecInputError, match="acceptance.*multiple of 2"):
        predict_pearl(law, 1, [1.0, 2.0, 3.0], 1.0)
    one = predict_pearl(law, 1, [1.0, 3.0], 1.0)
    assert one.time_per_token == pytest.approx((1.0 + 3.0) / 2, rel=1e-15)
    h = pearl_horizon(law, 1, [1.0, 3.0], 1000)
    assert h.time / h.verified == pytest.approx(one.time_per_token, rel=1e-12)


def _pair(target, drafter, law=None, gamma=3, overhead=0.0):
    return Cascade.from_config({
        "models": [{"name": "t", "cost": target, "overhead": overhead},
                   {"name": "d", "cost": drafter}],
        "acceptance": [law or {"alpha": 0.8}], "thresholds": [gamma]})


def test_costs_of_a_cascade():
    """PL0's charges: a roofline target prices N packed tokens as T(N, 1) (its cache read per
    token), the drafter T(b, 1); a plain target T(N) at batch 1; the handshake is the
    target's overhead; a plain target at batch >= 2 is refused, naming the field."""
    roof = {"roofline": {"overhead": 0.1, "weight_time": 1.0, "compute_time": 0.01,
                         "kv_time": 0.02}}
    small = {"roofline": {"weight_time": 0.1, "compute_time": 0.001}}
    c = _pair(roof, small, overhead=0.05)
    draft, target, ar = pearl_costs(c, 8)
    assert draft == pytest.approx(0.1)
    assert ar == pytest.approx(0.1 + 1.0 + 0.02 * 8)
    assert target(8 + 2 * 8) == pytest.approx(0.1 + max(1.0 + 0.02 * 24, 0.01 * 24))
    pred = predict_pearl_cascade(c, 8)
    want = [max(3 * 0.1, 0.1 + max(1.0 + 0.02 * n, 0.01 * n)) + 0.05
            for n in 8 + 2 * np.arange(9)]
    np.testing.assert_allclose(pred.step_costs, want, rtol=1e-12)
    assert pred.speedup == pytest.approx(ar / pred.time_per_token, rel=1e-15)
    plain = _pair({"base": 1.0, "per_token": 0.1}, 0.2)
    p1 = predict_pearl_cascade(plain)
    np.testing.assert_allclose(p1.step_costs, [max(0.6, 1.0), max(0.6, 1.2)], rtol=1e-15)
    with pytest.raises(PolyspecInputError, match=r"models\[0\]\.cost: .*batch"):
        predict_pearl_cascade(plain, 2)
    h = pearl_horizon_cascade(c, 8, steps=10)
    assert h.steps == 10 and h.batch == 8


def test_refusals_name_the_field():
    with pytest.raises(PolyspecInputError, match=r"acceptance\[0\]: .*geometric tail"):
        run_acceptance(BetaMixed(2.0, 1.0))
    with pytest.raises(PolyspecInputError, match="models: .*2 models"):
        predict_pearl_cascade(Cascade.from_config({
            "models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.3},
                       {"name": "c", "cost": 0.1}],
            "acceptance": [{"alpha": 0.8}, {"alpha": 0.8}], "thresholds": [2, 2]}))
    with pytest.raises(PolyspecInputError, match="gamma"):
        pearl_chain(IIDGeometric(0.5), 0)
    with pytest.raises(PolyspecInputError, match="steps"):
        pearl_horizon(IIDGeometric(0.5), 2, [1.0, 1.0], 0)
    with pytest.raises(PolyspecInputError, match="laws"):
        pearl_horizons([], 2, [1.0, 1.0], 10)
    with pytest.raises(PolyspecInputError, match="step_costs"):
        predict_pearl(IIDGeometric(0.5), 2, [1.0], 1.0)
    with pytest.raises(PolyspecInputError, match="step_costs"):
        predict_pearl(IIDGeometric(0.5), 2, [1.0, -1.0], 1.0)


def test_start_up_gamma():
    """nano-PEARL's start-up rule: Python's round of the step ratio (half to even)."""
    assert start_up_gamma(1.0, 0.3) == 3
    assert start_up_gamma(1.0, 0.4) == 2  # 2.5 -> 2
    assert start_up_gamma(1.0, 1 / 3.5) == 4  # 3.5 -> 4
    assert start_up_gamma(7.0, 1.0) == 7
    with pytest.raises(PolyspecInputError, match="draft_step"):
        start_up_gamma(1.0, 2.5)
