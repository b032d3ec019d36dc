"""A1 under R1 (docs/theory.md A1-R): HF's length schedule when greedy agreement runs over
output positions (:func:`hf_two_model_runs`), against A1 (geometric law), R1 (a fixed
length) and an independent simulation over positions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.core.runs import RunLaw, sync_two_level
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.structures.schedule import HFSchedule
from polyspec_theory.structures.schedule_models import hf_two_model, hf_two_model_runs


def _verify(m):
    return 1.0 + 0.13 * (m - 1) + 0.02 * (m - 1) ** 2


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 0.95), st.integers(1, 4), st.integers(0, 5), st.integers(0, 4),
       st.floats(0.0, 0.3))
def test_geometric_law_is_a1_exactly(alpha, lo, span, start_off, draft):
    sch = HFSchedule(lo + min(start_off, span), lo, lo + span)
    tab = [_verify(m) for m in range(1, sch.max + 3)]
    ref = hf_two_model(IIDGeometric(alpha), sch, CostCurve.from_table(tab), draft)
    got = hf_two_model_runs(RunLaw.geometric(alpha), sch, draft, _verify)
    assert 1.0 / got["time_per_token"] == pytest.approx(ref.speedup, rel=1e-10)
    assert got["length_distribution"] == pytest.approx(ref.stationary, abs=1e-10)
    assert got["drafts_per_round"] == pytest.approx(ref.mean_length, rel=1e-10)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=6), st.floats(0.05, 1.0),
       st.integers(1, 7), st.floats(0.0, 0.3), st.floats(0.0, 0.2))
def test_fixed_length_is_r1(hazard, tail, theta, draft, over):
    law = RunLaw(hazard, tail)
    got = hf_two_model_runs(law, HFSchedule(theta, theta, theta), draft, _verify, over)
    ref = sync_two_level(law, theta, draft, _verify, over)
    assert got["time_per_token"] == pytest.approx(ref["time_per_token"], rel=1e-9)
    assert got["tokens_per_round"] == pytest.approx(ref["tokens_per_round"], rel=1e-9)


def _simulate(law, sch, draft, rounds, rng, age=0, g=None):
    """Play the decoder over positions: agreement d(p) drawn from the run law by its age,
    each round checks g drafts from its first position, the bonus position after a full
    round is emitted unchecked; the length moves by HF's rule. Per-round tokens and costs."""
    g = sch.start if g is None else g
    tok = np.empty(rounds)
    cost = np.empty(rounds)
    for k in range(rounds):
        j = 0
        while True:
            d = rng.random() >= law.q(age)
            age = age + 1 if d else 0
            if not d:  # disagreement at this checked position: the correction token
                break
            j += 1
            if j == g:
                break
        full = j == g
        if full:  # the bonus position: drawn now (it is emitted), never checked
            d = rng.random() >= law.q(age)
            age = age + 1 if d else 0
        tok[k] = j + 1
        cost[k] = g * draft + _verify(g + 1)
        g = sch.next_length(g, full)
    return tok, cost


def test_non_geometric_law_matches_a_simulation_over_positions():
    law = RunLaw([0.6, 0.3, 0.15, 0.1, 0.05], 0.04)  # long runs once they start
    sch = HFSchedule(2, 1, 6)
    exact = hf_two_model_runs(law, sch, 0.1, _verify)
    rng = np.random.default_rng(11)
    tok, cost = _simulate(law, sch, 0.1, 400_000, rng)
    tok, cost = tok[1000:], cost[1000:]
    # batch means of the ratio estimator (rounds are dependent through the state)
    nb = 200
    tb = tok[: tok.size // nb * nb].reshape(nb, -1).sum(1)
    cb = cost[: cost.size // nb * nb].reshape(nb, -1).sum(1)
    est = cb.sum() / tb.sum()
    se = math.sqrt(np.var(cb - est * tb, ddof=1) * nb) / tb.sum()
    assert abs(est - exact["time_per_token"]) < 4 * se
    assert abs(tok.mean() - exact["tokens_per_round"]) < 0.01 * exact["tokens_per_round"]
    # a memoryless law with the same first hazard is visibly wrong here
    iid = hf_two_model_runs(RunLaw.geometric(1 - 0.6), sch, 0.1, _verify)
    assert abs(iid["time_per_token"] - exact["time_per_token"]) > 20 * se


def test_horizon_is_the_expectation_over_the_first_rounds_of_each_prompt():
    law = RunLaw([0.6, 0.3, 0.15, 0.1, 0.05], 0.04)
    sch = HFSchedule(2, 1, 6)
    got = hf_two_model_runs(law, sch, 0.1, _verify, 0.02, horizon=40)
    k = got["rounds"]
    # K is the first round count whose expected tokens reach the horizon
    stat = hf_two_model_runs(law, sch, 0.1, _verify, 0.02)
    assert k >= 1 and got["tokens_per_round"] * k >= 40
    assert hf_two_model_runs(law, sch, 0.1, _verify, 0.02,
                             horizon=int(got["tokens_per_round"] * k) + 1)["rounds"] > k
    # independent: many decodes of exactly K rounds from (age 0, start), summed
    rng = np.random.default_rng(5)
    tok, cost = [], []
    for _ in range(20_000):
        t, c = _simulate(law, sch, 0.1, k, rng)
        tok.append(t.sum())
        cost.append(c.sum() + 0.02 * k)
    tok, cost = np.asarray(tok), np.asarray(cost)
    est = cost.sum() / tok.sum()
    se = math.sqrt(np.var(cost - est * tok, ddof=1) * tok.size) / tok.sum()
    assert abs(est - got["time_per_token"]) < 4 * se
    assert abs(tok.mean() / k - got["tokens_per_round"]) < 4 * tok.std() / k / math.sqrt(tok.size)
    # the start (length 2, age 0) is slower than the long run here; a long horizon converges
    assert got["time_per_token"] > stat["time_per_token"] + 4 * se
    far = hf_two_model_runs(law, sch, 0.1, _verify, 0.02, horizon=200_000)
    assert far["time_per_token"] == pytest.approx(stat["time_per_token"], rel=2e-3)


def test_bad_input_names_the_field():
    law = RunLaw([0.5], 0.3)
    with pytest.raises(PolyspecInputError, match="law"):
        hf_two_model_runs(IIDGeometric(0.5), HFSchedule(2, 1, 4), 0.1, _verify)
    with pytest.raises(PolyspecInputError, match="schedule"):
        hf_two_model_runs(law, {"kind": "confidence", "eta": 0.5}, 0.1, _verify)
    with pytest.raises(PolyspecInputError, match="draft_cost"):
        hf_two_model_runs(law, HFSchedule(2, 1, 4), -1.0, _verify)
    with pytest.raises(PolyspecInputError, match="overhead"):
        hf_two_model_runs(law, HFSchedule(2, 1, 4), 0.1, _verify, math.nan)
    with pytest.raises(PolyspecInputError, match="horizon"):
        hf_two_model_runs(law, HFSchedule(2, 1, 4), 0.1, _verify, horizon=0)
    with pytest.raises(PolyspecInputError, match="verify_cost"):
        hf_two_model_runs(law, HFSchedule(2, 1, 4), 0.1, lambda m: -1.0)
