"""Batched P1 (predict_many / predict_grid / optimize_thresholds) equals predict. Exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.planning.grid import optimize_thresholds, predict_grid, predict_many

CFG = {
    "models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.03}},
               {"name": "b", "cost": {"base": 0.25, "per_token": 0.01}},
               {"name": "c", "cost": {"table": [0.06, 0.064, 0.07]}},
               {"name": "d", "cost": 0.005}],
    "acceptance": [{"alpha": 0.85}, {"beta": [6.0, 1.5]}, {"positional": [0.8, 0.7, 0.6]}],
    "thresholds": [8, 4, 2],
}


@pytest.mark.parametrize("policy", ["accumulate", "truncate"])
def test_grid_equals_predict(policy):
    casc = Cascade.from_config(dict(CFG, policy=policy))
    grids = [[1, 3, 8, 16], [2, 5], [1, 2, 7]]
    res = predict_grid(casc, grids)
    assert res["speedup"].shape == (4, 2, 3)
    for idx in itertools.product(range(4), range(2), range(3)):
        th = tuple(grids[k][j] for k, j in enumerate(idx))
        p = predict(casc.with_thresholds(th))
        assert res["speedup"][idx] == pytest.approx(p.speedup, rel=1e-12)
        assert res["time_per_token"][idx] == pytest.approx(p.time_per_token, rel=1e-12)
        assert res["mean_emitted"][idx] == pytest.approx(p.levels[0].mean_emitted, rel=1e-12)


def test_many_with_repeats_and_two_models():
    casc = Cascade.from_config({"models": [{"name": "a", "cost": 1.0},
                                           {"name": "b", "cost": 0.05}],
                                "acceptance": [{"beta": [3, 1]}], "thresholds": [4]})
    th = np.array([5, 1, 5, 30, 2])
    bp = predict_many(casc, th)
    for j, t in enumerate(th):
        assert bp.speedup[j] == pytest.approx(predict(casc.with_thresholds((int(t),))).speedup,
                                              rel=1e-12)
    assert bp.thresholds.shape == (5, 1)


def test_optimize_thresholds_is_the_argmax():
    casc = Cascade.from_config(CFG)
    best, s = optimize_thresholds(casc, max_threshold=6)
    brute = max((predict(casc.with_thresholds(t)).speedup, t)
                for t in itertools.product(range(1, 7), repeat=3))
    assert s == pytest.approx(brute[0], rel=1e-12)
    assert predict(casc.with_thresholds(best)).speedup == pytest.approx(s, rel=1e-12)


def test_bad_input():
    casc = Cascade.from_config(CFG)
    with pytest.raises(PolyspecInputError, match="^cascade"):
        predict_many(CFG, [[1, 1, 1]])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, [[1, 1]])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, np.zeros((0, 3)))
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, [[1, 1, 1.5]])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, [[1, 1, 5000]])
    with pytest.raises(PolyspecInputError, match="^grids"):
        predict_grid(casc, [[1, 2], [1]])
    with pytest.raises(PolyspecInputError, match=r"^grids\[1\]"):
        predict_grid(casc, [[1, 2], [0], [1]])
    with pytest.raises(PolyspecInputError, match="^max_threshold"):
        optimize_thresholds(casc, 0)
