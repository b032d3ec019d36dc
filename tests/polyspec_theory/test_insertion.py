"""P5: model insertion — exact criterion, the paper's approximate condition, decision confidence.

False-failure budget (fixed seeds; rates for an arbitrary seed): the bootstrap-vs-delta
comparisons use the bootstrap's Monte-Carlo error at 4 SE (6.3e-5 each, 2 checks) plus an
allowance for the delta method's own approximation error (stated in each test); the sd
comparison allows 20% where the sd of a 400-replicate sd is 3.5% (4 SE = 14%) -> total
below 2e-4 per run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from polyspec_theory import (
    BetaMixed,
    Cascade,
    CostCurve,
    IIDGeometric,
    Model,
    PolyspecInputError,
    Positional,
    predict,
)
from polyspec_theory.planning.insertion import (
    decision_confidence,
    insert_model,
    insertion_decision,
    paper_insertion_check,
    paper_insertion_condition,
)

BASE = Cascade.from_config({
    "models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.02}],
    "acceptance": [{"alpha": 0.6}], "thresholds": [4],
})
MID = Model("mid", CostCurve.constant(0.12))


def test_insert_model_structure():
    c3 = Cascade.from_config({
        "models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.2},
                   {"name": "c", "cost": 0.01}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.6}], "thresholds": [5, 3],
    })
    new = insert_model(c3, 1, Model("x", CostCurve.constant(0.05)), IIDGeometric(0.75),
                       IIDGeometric(0.7))
    assert [m.name for m in new.models] == ["a", "b", "x", "c"]
    assert new.laws == (IIDGeometric(0.8), IIDGeometric(0.75), IIDGeometric(0.7))
    assert new.thresholds == (5, 3, 3)  # default: both new pairs get theta_position
    new = insert_model(c3, 0, Model("x", CostCurve.constant(0.5)), IIDGeometric(0.9),
                       IIDGeometric(0.7), (7, 2))
    assert [m.name for m in new.models] == ["a", "x", "b", "c"]
    assert new.thresholds == (7, 2, 3)
    assert new.policy == c3.policy


@pytest.mark.parametrize("a_up, a_low, helps", [(0.85, 0.7, True), (0.8, 0.6, True),
                                                (0.7, 0.55, False), (0.62, 0.6, False)])
def test_exact_decision_is_the_p1_comparison(a_up, a_low, helps):
    d = insertion_decision(BASE, 0, MID, IIDGeometric(a_up), IIDGeometric(a_low), (6, 3))
    p0 = predict(BASE)
    p1 = predict(insert_model(BASE, 0, MID, IIDGeometric(a_up), IIDGeometric(a_low), (6, 3)))
    assert d.tau_without == p0.time_per_token and d.tau_with == p1.time_per_token
    assert d.helps is helps is (p1.time_per_token < p0.time_per_token)
    assert (d.relative_gain > 0) is helps
    assert d.to_dict()["helps"] is helps


def test_paper_condition_by_hand_and_where_it_is_wrong():
    # T'/T_i < L'(1/L_i - 1/L_i'): 0.12 < 2 (1/2 - 1/4) = 0.5
    assert paper_insertion_condition(0.12, 1.0, 2.0, 2.0, 4.0) is True
    assert paper_insertion_condition(0.6, 1.0, 2.0, 2.0, 4.0) is False
    chk = paper_insertion_check(BASE, 0, MID, IIDGeometric(0.7), IIDGeometric(0.55), (6, 3))
    l_i = IIDGeometric(0.6).mean_emitted(4)
    l_i_new = IIDGeometric(0.7).mean_emitted(6)
    l_new = IIDGeometric(0.55).mean_emitted(3)
    assert chk["rhs"] == pytest.approx(l_new * (1 / l_i - 1 / l_i_new))
    assert chk["lhs"] == pytest.approx(0.12)
    # the paper's condition says "insert", the exact criterion says it slows decoding down
    assert chk["helps"] is True
    exact = insertion_decision(BASE, 0, MID, IIDGeometric(0.7), IIDGeometric(0.55), (6, 3))
    assert exact.helps is False and exact.relative_gain < -0.05


def test_optimized_decision_is_the_grid_optimum():
    up, low = IIDGeometric(0.8), IIDGeometric(0.6)
    d = insertion_decision(BASE, 0, MID, up, low, optimize=True, max_threshold=6)
    best0 = max(predict(BASE.with_thresholds((t,))).speedup for t in range(1, 7))
    best1 = max(predict(insert_model(BASE, 0, MID, up, low, (a, b))).speedup
                for a, b in itertools.product(range(1, 7), repeat=2))
    assert d.speedup_without == pytest.approx(best0, rel=1e-12)
    assert d.speedup_with == pytest.approx(best1, rel=1e-12)
    assert d.optimized and d.helps is (best1 > best0)


def test_confidence_without_noise_is_one():
    args = (BASE, 0, MID, IIDGeometric(0.75), IIDGeometric(0.6), (6, 3))
    for method in ("delta", "bootstrap"):
        r = decision_confidence(*args, rounds=0, cost_rel_se=0.0, method=method, n_boot=5)
        assert r.probability == 1.0


def test_confidence_grows_with_rounds():
    args = (BASE, 0, MID, IIDGeometric(0.75), IIDGeometric(0.6), (6, 3))
    probs = [decision_confidence(*args, rounds=r, method="delta").probability
             for r in (30, 300, 3000, 30000)]
    assert all(a < b for a, b in zip(probs, probs[1:], strict=False))
    assert probs[0] < 0.8 and probs[-1] > 0.9999


def test_delta_sd_for_cost_noise_is_analytic():
    """Only the inserted model's cost is noisy: D is linear in that cost's scale, so
    sd(D) = se * (M''s time per token in the cascade with it)."""
    up, low = IIDGeometric(0.75), IIDGeometric(0.6)
    se = 0.1
    r = decision_confidence(BASE, 0, MID, up, low, (6, 3), rounds=0,
                            cost_rel_se=[0, 0, se], method="delta")
    share = predict(insert_model(BASE, 0, MID, up, low, (6, 3))).levels[1].time_per_token
    assert r.delta_sd == pytest.approx(se * share, rel=1e-6)


@pytest.mark.parametrize("a_up, a_low", [(0.75, 0.6), (0.7, 0.55)])
def test_bootstrap_agrees_with_delta(a_up, a_low):
    args = (BASE, 0, MID, IIDGeometric(a_up), IIDGeometric(a_low), (6, 3))
    kw = dict(rounds=300, cost_rel_se=0.05)
    b = decision_confidence(*args, **kw, method="bootstrap", n_boot=400, seed=1)
    d = decision_confidence(*args, **kw, method="delta")
    assert b.helps == d.helps
    # MC error of the bootstrap at 4 SE, plus 0.03 for the delta method's linearisation
    assert abs(b.probability - d.probability) <= 4 * max(b.std_error, 0.01) + 0.03
    assert b.delta_sd == pytest.approx(d.delta_sd, rel=0.2)


def test_delta_method_handles_every_law_family():
    c = Cascade.from_config({
        "models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.02}],
        "acceptance": [{"beta": [3, 1]}], "thresholds": [4],
    })
    r = decision_confidence(c, 0, MID, BetaMixed(5, 1), Positional([0.8, 0.7, 0.6]), (6, 3),
                            rounds=[500, 500, 500], cost_rel_se=0.05, method="delta")
    assert 0.5 <= r.probability <= 1.0 and r.delta_sd > 0
    b = decision_confidence(c, 0, MID, BetaMixed(5, 1), Positional([0.8, 0.7, 0.6]), (6, 3),
                            rounds=[0, 0, 400], method="bootstrap", n_boot=30, seed=3)
    assert b.n_boot == 30 and 0.0 <= b.probability <= 1.0


def test_bad_input():
    up, low = IIDGeometric(0.75), IIDGeometric(0.6)
    with pytest.raises(PolyspecInputError, match="^position"):
        insert_model(BASE, 1, MID, up, low)
    with pytest.raises(PolyspecInputError, match="^model"):
        insert_model(BASE, 0, Model("d", CostCurve.constant(0.1)), up, low)
    with pytest.raises(PolyspecInputError, match="^model"):
        insert_model(BASE, 0, "mid", up, low)
    with pytest.raises(PolyspecInputError, match="^upper_law"):
        insert_model(BASE, 0, MID, 0.7, low)
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        insert_model(BASE, 0, MID, up, low, (3,))
    with pytest.raises(PolyspecInputError, match=r"^thresholds\[1\]"):
        insert_model(BASE, 0, MID, up, low, (3, 0))
    with pytest.raises(PolyspecInputError, match="^cascade"):
        insertion_decision({"models": []}, 0, MID, up, low)
    with pytest.raises(PolyspecInputError, match="^rounds"):
        decision_confidence(BASE, 0, MID, up, low, rounds=[10, 10])
    with pytest.raises(PolyspecInputError, match="^rounds"):
        decision_confidence(BASE, 0, MID, up, low, rounds=-5)
    with pytest.raises(PolyspecInputError, match="^cost_rel_se"):
        decision_confidence(BASE, 0, MID, up, low, rounds=10, cost_rel_se=[0.1])
    with pytest.raises(PolyspecInputError, match="^method"):
        decision_confidence(BASE, 0, MID, up, low, rounds=10, method="jackknife")
    with pytest.raises(PolyspecInputError, match="^t_i"):
        paper_insertion_condition(0.1, 0.0, 2.0, 2.0, 3.0)
    with pytest.raises(PolyspecInputError, match="^l_new"):
        paper_insertion_condition(0.1, 1.0, float("nan"), 2.0, 3.0)
    assert np.isfinite(decision_confidence(BASE, 0, MID, up, low, rounds=50,
                                           method="delta").probability)


# --- P5 by hypothesis: the exact decision is P1 with and without the model, built by hand ---

def _law_strategy():
    from hypothesis import strategies as st

    iid = st.floats(0.05, 0.95).map(IIDGeometric)
    pos = st.lists(st.floats(0.05, 0.95), min_size=1, max_size=3).map(Positional)
    beta = st.tuples(st.floats(0.5, 8.0), st.floats(0.5, 4.0)).map(lambda ab: BetaMixed(*ab))
    return st.one_of(iid, pos, beta)


def _cost_strategy(scale):
    from hypothesis import strategies as st

    const = st.floats(0.0, 1.0).map(lambda x: CostCurve.constant(scale * x))
    affine = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 0.1)).map(
        lambda bk: CostCurve.affine(scale * bk[0], scale * bk[1]))
    return st.one_of(const, affine)


def _insertion_case():
    from hypothesis import strategies as st

    @st.composite
    def case(draw):
        n = draw(st.integers(2, 4))
        costs = [CostCurve.affine(1.0, draw(st.floats(0.0, 0.1)))]
        costs += [draw(_cost_strategy(0.5 ** i)) for i in range(1, n)]
        models = [Model(f"m{i}", c) for i, c in enumerate(costs)]
        laws = [draw(_law_strategy()) for _ in range(n - 1)]
        th = [draw(st.integers(1, 6)) for _ in range(n - 1)]
        policy = draw(st.sampled_from(["accumulate", "truncate"]))
        pos = draw(st.integers(0, n - 2))
        new = Model("new", draw(_cost_strategy(0.5 ** (pos + 1))))
        up, low = draw(_law_strategy()), draw(_law_strategy())
        t_new = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
        return models, laws, th, policy, pos, new, up, low, t_new

    return case()


def _by_hand(models, laws, th, policy, pos, new, up, low, t_new):
    """The cascade with ``new`` between models[pos] and models[pos + 1], written out."""
    m2 = list(models[: pos + 1]) + [new] + list(models[pos + 1:])
    l2 = list(laws[:pos]) + [up, low] + list(laws[pos + 1:])
    t2 = list(th[:pos]) + list(t_new) + list(th[pos + 1:])
    return Cascade(tuple(m2), tuple(l2), tuple(t2), policy, "by-hand")


@settings(derandomize=True, deadline=None, max_examples=60)
@given(case=_insertion_case())
def test_p5_exact_decision_equals_p1_with_and_without_the_model(case):
    models, laws, th, policy, pos, new, up, low, t_new = case
    base = Cascade(tuple(models), tuple(laws), tuple(th), policy, "base")
    with_ = _by_hand(*case)
    tau0, tau1 = predict(base).time_per_token, predict(with_).time_per_token
    d = insertion_decision(base, pos, new, up, low, t_new)
    assert d.tau_without == pytest.approx(tau0, rel=1e-12)
    assert d.tau_with == pytest.approx(tau1, rel=1e-12)
    assert d.relative_gain == pytest.approx(tau0 / tau1 - 1.0, rel=1e-9, abs=1e-12)
    if abs(tau0 / tau1 - 1.0) > 1e-9:
        assert d.helps is (tau1 < tau0)
    assert d.cascade_with.thresholds == with_.thresholds
    assert [m.name for m in d.cascade_with.models] == [m.name for m in with_.models]
    assert d.cascade_with.laws == with_.laws and d.cascade_with.policy == policy


@settings(derandomize=True, deadline=None, max_examples=12)
@given(case=_insertion_case())
def test_p5_optimized_decision_is_the_brute_force_optimum(case):
    models, laws, th, policy, pos, new, up, low, t_new = case
    base = Cascade(tuple(models), tuple(laws), tuple(th), policy, "base")
    top = 3
    best0 = min(predict(base.with_thresholds(t)).time_per_token
                for t in itertools.product(range(1, top + 1), repeat=len(th)))
    # _by_hand replaces th[pos] by the pair t[pos:pos + 2]: pass t without that pair
    best1 = min(predict(_by_hand(models, laws, t[:pos] + (0,) + t[pos + 2:], policy, pos, new,
                                 up, low, t[pos:pos + 2])).time_per_token
                for t in itertools.product(range(1, top + 1), repeat=len(th) + 1))
    d = insertion_decision(base, pos, new, up, low, t_new, optimize=True, max_threshold=top)
    assert d.tau_without == pytest.approx(best0, rel=1e-12)
    assert d.tau_with == pytest.approx(best1, rel=1e-12)
    if abs(best0 / best1 - 1.0) > 1e-9:
        assert d.helps is (best1 < best0)
