"""Yin setting Monte Carlo against the exact values of polyspec_theory.yin.theorems (small
chains)."""

from __future__ import annotations

import numpy as np
import pytest

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.yin import theorems as yin
from polyspec_theory.yin.markov import random_pair
from simulators.yin_mc import simulate_markov, simulate_step, transition_chi2

PAIR = random_pair(8, 4, seed=5, kind="mixture", eps=0.6)
N = 20_000
Z = 4.4  # 6 comparisons, two-sided 1e-5 each: false-failure rate < 1e-4
P_MIN = 1e-4


def test_y1_sd_rejections_and_unbiased():
    r = simulate_markov(PAIR, N, seed=1)
    y1 = yin.sd_expected_rejections(*PAIR, method="tv")
    assert abs(r.mean_rejections.value - y1) <= Z * r.mean_rejections.se
    assert transition_chi2(r.transitions, PAIR.target)[2] >= P_MIN


def test_y3_batch():
    """Both modes; they share one compiled run (the mode is traced: compiles, not numbers)."""
    from simulators import yin_mc

    sizes = []
    for mode in ("sequences", "per_position"):
        r = simulate_markov(PAIR, N, seed=2, M=3, mode=mode)
        sizes.append(yin_mc._run._cache_size())
        exact = yin.batch_expected_rejections(*PAIR, 3, mode)
        assert abs(r.mean_rejections.value - exact) <= Z * r.mean_rejections.se
        assert transition_chi2(r.transitions, PAIR.target)[2] >= P_MIN
    assert sizes[1] == sizes[0]


def test_y2_general_rule():
    b = 0.5 * yin.sd_acceptance(PAIR.target, PAIR.draft)
    y2 = yin.y2_chain(*PAIR, b)
    r = simulate_markov(PAIR, N, seed=3, accept=b, resampling=y2.resampling)
    assert abs(r.mean_rejections.value - y2.rejection) <= Z * r.mean_rejections.se
    assert r.mean_rejections.value > yin.sd_expected_rejections(*PAIR)
    assert transition_chi2(r.transitions, PAIR.target)[2] >= P_MIN


def test_biased_rule_is_detected():
    """Over-acceptance with the SD residual is biased: the chi-square must reject."""
    bsd = yin.sd_acceptance(PAIR.target, PAIR.draft)
    b = bsd + 0.7 * (1 - bsd)
    res = yin.sd_residual(PAIR.target, PAIR.draft)
    r = simulate_markov(PAIR, N, seed=4, accept=b, resampling=res)
    assert transition_chi2(r.transitions, PAIR.target)[2] < P_MIN


def test_single_step_output_law():
    t, d = PAIR.target[0, 0], PAIR.draft[0, 0]
    bsd = yin.sd_acceptance(t, d)
    b = bsd + 0.5 * (1 - bsd)
    p = yin.optimal_resampling(t, d, b)
    counts, rej = simulate_step(t, d, b, p, 200_000, seed=5)
    law = yin.output_law(d, b, p)
    from scipy import stats

    keep = law > 0
    assert stats.chisquare(counts[keep], 200_000 * law[keep]).pvalue >= P_MIN
    pr = yin.rejection_probability(d, b)
    assert abs(rej / 200_000 - pr) <= Z * np.sqrt(pr * (1 - pr) / 200_000)


def test_bad_input():
    with pytest.raises(PolyspecInputError) as e:
        simulate_markov(PAIR, 10, mode="nope")
    assert e.value.field == "mode"
    with pytest.raises(PolyspecInputError) as e:
        simulate_markov(PAIR, 10, accept=np.ones_like(PAIR.target))
    assert e.value.field == "accept"
