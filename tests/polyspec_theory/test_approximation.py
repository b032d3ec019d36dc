"""P4: Lemma 3.1 as an exact identity on simulated forward counts and as an approximation.

False-failure budget: the identity checks are exact (no tolerance beyond rounding). The
forward-count rates are checked with 4-standard-error intervals (two-sided 6.3e-5 each),
4 checks -> <= 2.5e-4 per run with a fixed seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.bounds.approximation import (
    approximation_error,
    error_curve,
    identity_from_counts,
    identity_from_prediction,
    lemma31_time,
    paper_approximation,
)

Z = 4.0


def _cost(spec, m):
    if isinstance(spec, dict):
        return spec["base"] + spec.get("per_token", 0.0) * (m - 1)
    return float(spec)


def simulate_counts(cfg, n_top, rng):
    """Scalar simulation of ``n_top`` rounds of S_1 (iid laws only) recording every forward:
    per-model forward counts and time, tokens emitted, and per top round: its emitted length,
    forward counts per model and time."""
    models, th = cfg["models"], cfg["thresholds"]
    alphas = [a["alpha"] for a in cfg["acceptance"]]
    truncate = cfg.get("policy", "accumulate") == "truncate"
    n = len(models)
    fwd = np.zeros(n, dtype=np.int64)
    time = np.zeros(n)

    def run(i):
        if i == n - 1:
            fwd[i] += 1
            time[i] += _cost(models[i]["cost"], 1)
            return 1
        acc = 0
        while acc < th[i]:
            acc += run(i + 1)
        block = min(acc, th[i]) if truncate else acc
        a = 0
        while a < block and rng.random() < alphas[i]:
            a += 1
        fwd[i] += 1
        time[i] += _cost(models[i]["cost"], block + 1)
        return a + 1

    tokens = 0
    per_round = []
    for _ in range(n_top):
        before, t_before = fwd.copy(), time.sum()
        ln = run(0)
        tokens += ln
        per_round.append(np.concatenate([[ln], fwd - before, [time.sum() - t_before]]))
    return tokens, fwd, time, np.array(per_round)


CFG3 = {"models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.03}},
                   {"name": "b", "cost": {"base": 0.2, "per_token": 0.01}},
                   {"name": "c", "cost": 0.02}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.65}], "thresholds": [5, 3]}
CFG4 = {"models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "b", "cost": {"base": 0.3, "per_token": 0.01}},
                   {"name": "c", "cost": {"base": 0.05, "per_token": 0.002}},
                   {"name": "d", "cost": 0.004}],
        "acceptance": [{"alpha": 0.85}, {"alpha": 0.7}, {"alpha": 0.6}],
        "thresholds": [6, 3, 2]}


@pytest.mark.parametrize("cfg", [CFG3, CFG4, dict(CFG4, policy="truncate")])
def test_identity_exact_on_simulated_counts(cfg):
    tokens, fwd, time, _ = simulate_counts(cfg, 400, np.random.default_rng(11))
    total = float(time.sum())
    mean_cost = time / fwd
    beta = cfg["thresholds"][-1]  # E[G_{n-1}] = theta_{n-1}: the bottom block is fixed
    assert fwd[-1] == beta * fwd[-2]
    got = identity_from_counts(tokens, fwd[:-1], mean_cost, beta=beta)
    assert got == pytest.approx(total, rel=1e-12)
    assert identity_from_counts(tokens, fwd, mean_cost) == pytest.approx(total, rel=1e-12)
    # with the beta of the prediction (mean block of M_{n-1})
    pred = predict(Cascade.from_config(cfg))
    assert pred.levels[-2].mean_block == beta


def test_simulated_forward_rates_match_p1():
    tokens, fwd, time, per_round = simulate_counts(CFG4, 4000, np.random.default_rng(5))
    pred = predict(Cascade.from_config(CFG4))
    ln = per_round[:, 0].astype(float)
    for i in range(3):  # F_i / N for the top three models (M_4 is beta * F_3 exactly)
        f = per_round[:, 1 + i].astype(float)
        r = f.sum() / ln.sum()
        se = math.sqrt(np.var(f - r * ln) / f.size) / ln.mean()
        assert abs(r - pred.levels[i].forwards_per_token) <= Z * se
    t = per_round[:, -1]
    r = t.sum() / ln.sum()
    assert r == pytest.approx(time.sum() / tokens, rel=1e-12)
    se = math.sqrt(np.var(t - r * ln) / t.size) / ln.mean()
    assert abs(r - pred.time_per_token) <= Z * se


@settings(derandomize=True, deadline=None, max_examples=40)
@given(a1=st.floats(0.05, 0.99), a2=st.floats(0.05, 0.99), t1=st.integers(1, 9),
       t2=st.integers(1, 6), k=st.floats(0.0, 0.1), policy=st.sampled_from(["accumulate",
                                                                            "truncate"]))
def test_identity_from_prediction_is_p1(a1, a2, t1, t2, k, policy):
    cfg = {"models": [{"name": "a", "cost": {"base": 1.0, "per_token": k}},
                      {"name": "b", "cost": {"base": 0.2, "per_token": k / 3}},
                      {"name": "c", "cost": 0.02}],
           "acceptance": [{"alpha": a1}, {"beta": [4 * a2, 4 * (1 - a2)]}],
           "thresholds": [t1, t2], "policy": policy}
    pred = predict(Cascade.from_config(cfg))
    assert identity_from_prediction(pred) == pytest.approx(pred.time_per_token, rel=1e-12)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(a=st.floats(0.0, 1.0), g=st.integers(1, 30), k=st.floats(0.0, 0.2),
       c=st.floats(0.0, 0.5))
def test_approximation_exact_for_two_models(a, g, k, c):
    cfg = {"models": [{"name": "a", "cost": {"base": 1.0, "per_token": k}},
                      {"name": "b", "cost": c}],
           "acceptance": [{"alpha": a}], "thresholds": [g]}
    casc = Cascade.from_config(cfg)
    assert abs(approximation_error(casc)) < 1e-12
    unit = paper_approximation(casc, costs="unit")
    if k == 0.0:
        assert abs(unit.relative_error) < 1e-12
    else:  # T_1(1) ignores the verify cost of the extra positions: optimistic
        assert unit.relative_error <= 1e-15
        if k > 1e-6:
            assert unit.relative_error < 0


def test_approximation_formula_by_hand():
    casc = Cascade.from_config(CFG3)
    a1, a2 = 0.8, 0.65
    l1 = sum(a1**k for k in range(6))
    l2 = sum(a2**k for k in range(4))
    t1, t2, t3 = 1.0 + 0.03 * 5, 0.2 + 0.01 * 3, 0.02
    expect = t1 / l1 + t2 / l2 + 3 * t3 / l2
    pa = paper_approximation(casc)
    assert pa.time_per_token == pytest.approx(expect, rel=1e-14)
    assert pa.exact_time_per_token == predict(casc).time_per_token
    assert pa.relative_error == pytest.approx(expect / pa.exact_time_per_token - 1)
    unit = paper_approximation(casc, costs="unit")
    assert unit.time_per_token == pytest.approx(1.0 / l1 + 0.2 / l2 + 3 * 0.02 / l2)
    d = pa.to_dict()
    assert d["relative_error"] == pa.relative_error and "formula" in d


def test_error_curve():
    casc = Cascade.from_config(CFG4)
    th = [1, 2, 4, 8, 16]
    cur = error_curve(casc, 0, thresholds=th)
    for j, t in enumerate(th):
        c = casc.with_thresholds((t,) + casc.thresholds[1:])
        assert cur["relative_error"][j] == pytest.approx(approximation_error(c), rel=1e-12)
        assert cur["exact_speedup"][j] == pytest.approx(predict(c).speedup, rel=1e-12)
    cur_a = error_curve(casc, 1, alphas=[0.3, 0.6, 0.9])
    assert cur_a["x"].tolist() == [0.3, 0.6, 0.9]
    # the paper's formula ignores phi-multiplication down the chain: in this 4-level cascade
    # it is optimistic (under-estimates time) at the default thresholds
    assert approximation_error(casc) < -0.05


def test_bad_input():
    with pytest.raises(PolyspecInputError, match="^costs"):
        lemma31_time(10, [2.0, 3.0], [1.0, 0.1], 2)
    with pytest.raises(PolyspecInputError, match="^lengths"):
        lemma31_time(10, [2.0, 0.0], [1.0, 0.1, 0.01], 2)
    with pytest.raises(PolyspecInputError, match="^lengths"):
        lemma31_time(10, [2.0, float("nan")], [1.0, 0.1, 0.01], 2)
    with pytest.raises(PolyspecInputError, match="^beta"):
        lemma31_time(10, [2.0, 3.0], [1.0, 0.1, 0.01], -1)
    with pytest.raises(PolyspecInputError, match="^forward_counts"):
        identity_from_counts(10, [3, 2, 1, 1], [1.0, 0.1, 0.01])
    with pytest.raises(PolyspecInputError, match="^beta"):
        identity_from_counts(10, [3, 2], [1.0, 0.1, 0.01])
    with pytest.raises(PolyspecInputError, match="^forward_counts"):
        identity_from_counts(10, [3, 0], [1.0, 0.1, 0.01], beta=2)
    casc = Cascade.from_config(CFG3)
    with pytest.raises(PolyspecInputError, match="^costs"):
        paper_approximation(casc, costs="nope")
    with pytest.raises(PolyspecInputError, match="^cascade"):
        paper_approximation(CFG3)
    with pytest.raises(PolyspecInputError, match="^level"):
        error_curve(casc, 2, thresholds=[1, 2])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        error_curve(casc, 0)
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        error_curve(casc, 0, thresholds=[0, 2])
