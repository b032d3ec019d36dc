"""simulators/asynchronous.py: the discrete-event run of the asynchronous pipeline against AS1
(two levels, exact) and the AS3 bound pair (three levels).

False-failure rate: the two CI checks use z = 4.42 (two-sided 1e-5 each) at fixed seeds;
the bound checks allow the same z on the estimate's standard error."""

from __future__ import annotations

import pytest

from polyspec_theory import Cascade, PolyspecInputError, predict_async
from simulators.asynchronous import simulate_async

Z = 4.42


def _two(theta, queue=None, law=None, c=0.31):
    cfg = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}, "overhead": 0.03},
                      {"name": "d", "cost": c}],
           "acceptance": [law or {"positional": [0.9, 0.7]}], "thresholds": [theta],
           "mode": "async"}
    if queue is not None:
        cfg["queue"] = [queue]
    return Cascade.from_config(cfg)


@pytest.mark.parametrize("theta,queue", [(0, None), (2, 5)])
def test_two_levels_match_as1(theta, queue):
    cas = _two(theta, queue)
    res = simulate_async(cas, 6000, seed=3, chains=32)
    exact = predict_async(cas).speedup
    assert res.window == "regeneration"
    assert abs(res.speedup.value - exact) <= Z * res.speedup.se, (res.speedup, exact)
    assert res.speedup.se < 0.01 * exact  # the check has power


def test_three_levels_inside_bounds():
    cas = Cascade.from_config({
        "models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "b", "cost": 0.25}, {"name": "c", "cost": 0.04}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.75}], "thresholds": [0, 2],
        "mode": "async"})
    lo, hi = predict_async(cas).bounds
    res = simulate_async(cas, 6000, seed=1, chains=16)
    assert lo <= res.speedup.value + Z * res.speedup.se
    assert res.speedup.value - Z * res.speedup.se <= hi
    assert res.mean_checked[1] >= 2.0  # the middle checks at least its threshold, 2 drafts


def test_same_seed_same_numbers():
    cas = _two(1)
    a = simulate_async(cas, 400, seed=5, chains=4)
    b = simulate_async(cas, 400, seed=5, chains=4)
    c = simulate_async(cas, 400, seed=6, chains=4)
    assert a.to_dict() == b.to_dict()
    assert c.speedup.value != a.speedup.value


def test_one_level_reduction_is_exact():
    res = simulate_async(_two(0, 0), 400, seed=0, chains=4)
    assert res.speedup.value == pytest.approx(1.0 / 1.03, rel=1e-12)


@pytest.mark.parametrize("kw,field", [
    ({"events": 10}, "events"), ({"chains": 1}, "chains"), ({"seed": -1}, "seed")])
def test_bad_arguments(kw, field):
    args = {"events": 400, "seed": 0, "chains": 4, **kw}
    with pytest.raises(PolyspecInputError) as e:
        simulate_async(_two(1), args.pop("events"), **args)
    assert e.value.field == field


def test_free_drafter_needs_a_queue():
    with pytest.raises(PolyspecInputError) as e:
        simulate_async(_two(2, None, c=0.0), 400, chains=4)
    assert e.value.field == "models[-1].cost"
