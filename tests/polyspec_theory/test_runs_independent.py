"""R1-R3 (docs/theory.md Part III-E) against computations written here from the statement,
not from the code:

* R1: the round outcomes enumerated position by position (a probability tree over the
  agreements a round looks at) and the chain's law propagated round after round from age 0
  until it no longer moves: the long-run seconds per token is the ratio of the expected
  cost and tokens of a round under that limit law (renewal-reward), exact to 1e-9 for any
  hazard, threshold, cost table and both round kinds;
* R2: the Kaplan-Meier hazard and its tail pooled over the ages past the well-observed ones,
  by hand;
* R3: the likelihood-ratio test of a constant hazard is the textbook G-test of homogeneity
  of the per-age (events, survivals) table: scipy's ``chi2_contingency`` with
  ``lambda_="log-likelihood"`` gives its statistic, degrees of freedom and p-value.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2, chi2_contingency

from polyspec_theory.core.runs import RunLaw, fit_run_law, geometric_lr_test, sync_two_level


# --- R1 ------------------------------------------------------------------------------------
def _round(law, theta, age, cont, d, v1, vk, o, recheck):
    """[(probability, tokens, seconds, next state)] of one round from ``(age, cont)``
    (R1's statement: a fresh round checks theta drafts from ``age``; a continuing round first
    re-predicts the bonus position at ``age``)."""
    cap = len(law.hazard)
    q = law.q
    out = []

    def check(p0, start, cost):
        # theta drafts from age `start`: j agreements then a disagreement, or all theta
        surv = p0
        for j in range(theta):
            out.append((surv * q(start + j), j + 1, cost, (0, False)))
            surv *= 1 - q(start + j)
        end = start + theta  # the bonus position's age
        if recheck:
            out.append((surv, theta + 1, cost, (min(end, cap), True)))
        else:  # never checked: the run goes on through it with probability 1 - q(end)
            out.append((surv * (1 - q(end)), theta + 1, cost, (min(end + 1, cap), False)))
            out.append((surv * q(end), theta + 1, cost, (0, False)))

    if cont:
        qb = q(age)
        # the bonus disagrees: a 1-token verify, 1 token; the position after it is unchecked
        c1 = (theta + 1) * d + v1 + o
        out.append((qb * (1 - q(0)), 1, c1, (min(1, cap), False)))
        out.append((qb * q(0), 1, c1, (0, False)))
        check(1 - qb, age + 1, (theta + 1) * d + vk + o)
    else:
        check(1.0, age, theta * d + vk + o)
    return out


def _tau_by_propagation(law, theta, d, vcost, o, recheck):
    """The law of the state propagated from age 0 (lazily: half stays, half moves, so that
    a periodic chain settles too; same limit law) until it moves by < 1e-15."""
    v1, vk = vcost(1), vcost(theta + 1)
    tree = {}

    def outcomes(s):
        if s not in tree:
            tree[s] = _round(law, theta, *s, d, v1, vk, o, recheck)
            # every state's outcomes add up to probability 1 (the tree is complete)
            assert sum(pr for pr, *_ in tree[s]) == pytest.approx(1.0, abs=1e-12)
        return tree[s]

    dist = {(0, False): 1.0}
    for _ in range(200_000):
        new = defaultdict(float)
        for s, p in dist.items():
            new[s] += 0.5 * p
            for pr, _, _, nxt in outcomes(s):
                new[nxt] += 0.5 * p * pr
        diff = sum(abs(new.get(s, 0.0) - dist.get(s, 0.0)) for s in set(new) | set(dist))
        dist = dict(new)
        if diff < 1e-15:
            break
    else:
        raise AssertionError("the chain did not settle")
    cost = sum(p * sum(pr * c for pr, _, c, _ in outcomes(s)) for s, p in dist.items())
    tok = sum(p * sum(pr * t for pr, t, _, _ in outcomes(s)) for s, p in dist.items())
    return cost / tok


hazards = st.lists(st.floats(0.0, 1.0), min_size=0, max_size=5)


@settings(max_examples=60, deadline=None)
@given(hz=hazards, tail=st.floats(0.05, 1.0), theta=st.integers(1, 6),
       d=st.floats(0.0, 0.5), t1=st.floats(0.2, 2.0), step=st.floats(0.0, 1.5),
       slope=st.floats(0.0, 0.2), o=st.floats(0.0, 0.5), recheck=st.booleans())
def test_r1_equals_the_chain_propagated_round_by_round(hz, tail, theta, d, t1, step, slope, o,
                                                       recheck):
    law = RunLaw(tuple(hz), tail)

    def vcost(m):  # any table: a step between m = 1 and m >= 2, then a slope
        return t1 if m == 1 else t1 + step + slope * (m - 2)

    got = sync_two_level(law, theta, d, vcost, o, recheck_bonus=recheck)["time_per_token"]
    want = _tau_by_propagation(law, theta, d, vcost, o, recheck)
    assert got == pytest.approx(want, rel=1e-9)


def test_r1_a_bonus_that_disagrees_costs_a_one_token_verify():
    """Runs of exactly 3 agreements (hazard 0, 0, 0, then 1) at theta = 3: every fresh round
    accepts its 3 drafts, the bonus (age 3) always disagrees. PipeSpec's rounds alternate:
    fresh (3 steps, T(4), 4 tokens), continuing (4 steps, T(1), 1 token); the position after
    that token is unchecked and agrees (q(0) = 0), so the next fresh round starts at age 1
    and meets the disagreement at age 3 on its third draft (3 steps, T(4), 3 tokens). Then
    it starts afresh at age 0. Cycle: 10 steps + 2 T(4) + T(1) for 8 tokens."""
    law = RunLaw((0.0, 0.0, 0.0), 1.0)
    d, t1, t4 = 0.1, 1.0, 1.6

    def vcost(m):
        return t1 if m == 1 else t4

    r = sync_two_level(law, 3, d, vcost, recheck_bonus=True)
    assert r["time_per_token"] == pytest.approx((10 * d + 2 * t4 + t1) / 8, rel=1e-12)
    # P1's round (the bonus never checked): every round from age 0 accepts 3 drafts + the
    # bonus, which disagrees unobserved, so every round restarts at age 0
    r = sync_two_level(law, 3, d, vcost, recheck_bonus=False)
    assert r["time_per_token"] == pytest.approx((3 * d + t4) / 4, rel=1e-12)


# --- R2 ------------------------------------------------------------------------------------
def test_r2_tail_pools_the_ages_past_the_well_observed_ones_by_hand():
    # (entry, agreements, censored) of seven rounds; min_at_risk 3
    e = [0, 0, 0, 0, 0, 0, 2]
    g = [0, 1, 2, 3, 4, 6, 5]
    c = [False, False, False, True, False, False, False]
    # at risk by age: 0: 6, 1: 5, 2: 5, 3: 3, 4: 3, 5: 2, 6: 2, 7: 1
    # events by age:  0: 1, 1: 1, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1, 7: 1
    law = fit_run_law(e, g, c, min_at_risk=3)
    assert law.hazard == pytest.approx((1 / 6, 1 / 5, 1 / 5, 0.0, 1 / 3))
    # ages 5.. have < 3 at risk each: their pooled hazard (2 events / 5 at risk), not the
    # hazard pooled over every age (6 / 27)
    assert law.tail == pytest.approx(2 / 5)


def test_r2_tail_recovers_a_tail_unlike_the_early_hazards():
    """Runs that die young or live long: hazard 0.5 at ages 0-2, then 0.05. From 2 000 fresh
    rounds that no cap censors, ages past about 66 have fewer than 10 rounds at risk: the
    fitted tail (their pooled hazard) is the tail's 0.05 within 4 binomial standard errors
    of its exposures; the early hazards would pull a hazard pooled over every age to about
    0.24."""
    true = RunLaw((0.5, 0.5, 0.5), 0.05)
    rng = np.random.default_rng(3)
    g = []
    for _ in range(2000):
        j = 0
        while rng.random() >= true.q(j):
            j += 1
        g.append(j)
    law = fit_run_law([0] * len(g), g, [False] * len(g))
    g = np.array(g)
    exposure = int(np.maximum(g + 1 - len(law.hazard), 0).sum())
    assert len(law.hazard) > 40 and exposure > 50
    assert abs(law.tail - 0.05) <= 4 * math.sqrt(0.05 * 0.95 / exposure), (law.tail, exposure)
    for a in range(3):
        assert abs(law.q(a) - 0.5) < 0.05


# --- R3 ------------------------------------------------------------------------------------
def _table(e, g, c, max_age):
    """Per age (capped at max_age): [events, survivals] by R2's exposure rule."""
    ev, risk = defaultdict(int), defaultdict(int)
    for x, y, z in zip(e, g, c, strict=True):
        for a in range(x, x + y + (0 if z else 1)):
            risk[min(a, max_age)] += 1
        if not z:
            ev[min(x + y, max_age)] += 1
    ages = sorted(risk)
    return np.array([[ev[a] for a in ages], [risk[a] - ev[a] for a in ages]])


rounds = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8), st.booleans()),
                  min_size=2, max_size=40)


@settings(max_examples=100, deadline=None)
@given(rs=rounds, max_age=st.sampled_from([3, 5, 40]))
def test_r3_lr_statistic_df_and_p_are_the_textbook_g_test(rs, max_age):
    rs = [(x, y, z and y > 0) for x, y, z in rs]
    e, g, c = (list(t) for t in zip(*rs, strict=True))
    tab = _table(e, g, c, max_age)
    if tab.shape[1] < 2 or tab[0].sum() == 0 or tab[1].sum() == 0:
        return  # no contrast to test
    stat, p, dof, _ = chi2_contingency(tab, correction=False, lambda_="log-likelihood")
    r = geometric_lr_test(e, g, c, max_age=max_age)
    assert r["df"] == dof == tab.shape[1] - 1
    assert r["statistic"] == pytest.approx(stat, rel=1e-9, abs=1e-9)
    assert r["p_value"] == pytest.approx(p, rel=1e-6, abs=1e-12)
    assert r["hazard"] == pytest.approx(tab[0].sum() / tab.sum())


def test_r3_hand_case():
    # ages 0, 1, 2: events 3, 1, 4 of 10, 8, 5 at risk
    e = [0] * 10
    g = [0, 0, 0, 1, 2, 2, 2, 2, 3, 3]
    c = [False] * 8 + [True, True]
    # at risk: age 0: 10 (3 events), age 1: 7 (1 event), age 2: 6 (4 events)
    q = np.array([3 / 10, 1 / 7, 4 / 6])
    n = np.array([10, 7, 6])
    k = np.array([3, 1, 4])
    q0 = k.sum() / n.sum()
    stat = 2 * sum(k * np.log(q / q0) + (n - k) * np.log((1 - q) / (1 - q0)))
    r = geometric_lr_test(e, g, c)
    assert r["statistic"] == pytest.approx(stat, rel=1e-12)
    assert r["df"] == 2
    assert r["p_value"] == pytest.approx(chi2.sf(stat, 2), rel=1e-12)
