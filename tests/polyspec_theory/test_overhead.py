"""Per-round overhead o_i (docs/theory.md Part III-B, O1): exact in P1, the threshold grid, the
planner and the length simulator; config fields (models[i].overhead, {"tau": x}, time_unit).

Independent checks: (a) overheads enter tau_1 as sum_{i<n} F_i o_i with F_i the forwards per
token of the cascade WITHOUT overheads (F does not depend on costs); (b) for two models the
closed form (theta T_2(1) + T_1(theta + 1) + o) / E[L | theta] with E[L] from the law alone;
(c) the Monte Carlo simulator. False-failure budget of the Monte-Carlo test: two 4-standard-
error checks at a fixed seed, two-sided normal tail 6.3e-5 each (<= 1.3e-4 in all).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.bounds.approximation import identity_from_prediction
from polyspec_theory.core.config import Model, acceptance_from_config, law_from_config
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.planning.grid import predict_many
from polyspec_theory.planning.planner import plan
from polyspec_theory.planning.pool import Pool


@st.composite
def laws(draw):
    kind = draw(st.sampled_from(["alpha", "positional", "beta"]))
    if kind == "alpha":
        return {"alpha": draw(st.floats(0.0, 0.98))}
    if kind == "positional":
        return {"positional": draw(st.lists(st.floats(0.05, 0.98), min_size=1, max_size=4))}
    return {"beta": [draw(st.floats(0.3, 8.0)), draw(st.floats(0.3, 8.0))]}


@st.composite
def cascades(draw, max_n=4):
    n = draw(st.integers(2, max_n))
    models = []
    for i in range(n):
        base = 1.0 if i == 0 else draw(st.floats(0.0, 0.6))
        if draw(st.booleans()):
            cost = {"base": base, "per_token": draw(st.floats(0.0, 0.1))}
        else:
            steps = draw(st.lists(st.floats(0.0, 0.2), min_size=0, max_size=4))
            cost = {"table": list(np.cumsum([max(base, 1e-3 if i == 0 else 0.0)] + steps))}
        m = {"name": f"m{i}", "cost": cost}
        if i < n - 1:
            m["overhead"] = draw(st.floats(0.0, 0.5))
        models.append(m)
    return {
        "models": models,
        "acceptance": [draw(laws()) for _ in range(n - 1)],
        "thresholds": [draw(st.integers(1, 6)) for _ in range(n - 1)],
        "policy": draw(st.sampled_from(["accumulate", "truncate"])),
    }


def _without_overhead(cfg):
    return {**cfg, "models": [{k: v for k, v in m.items() if k != "overhead"}
                              for m in cfg["models"]]}


@settings(max_examples=150, deadline=None)
@given(cascades())
def test_overhead_adds_forwards_times_overhead(cfg):
    with_o = predict(Cascade.from_config(cfg))
    without = predict(Cascade.from_config(_without_overhead(cfg)))
    extra = sum(lv.forwards_per_token * m.get("overhead", 0.0)
                for lv, m in zip(without.levels, cfg["models"], strict=True))
    assert with_o.time_per_token == pytest.approx(without.time_per_token + extra, rel=1e-11)
    # the baseline T_1(1) is untouched: speedup = T_1(1) / tau_1
    assert with_o.autoregressive_time_per_token == without.autoregressive_time_per_token
    assert with_o.speedup == pytest.approx(with_o.autoregressive_time_per_token
                                           / with_o.time_per_token, rel=1e-12)
    assert sum(lv.time_share for lv in with_o.levels) == pytest.approx(1.0, rel=1e-11)
    # P4's accounting identity counts a verification round as forward + overhead
    assert identity_from_prediction(with_o) == pytest.approx(with_o.time_per_token, rel=1e-10)
    # for two models the paper's formula (T_i read as forward + overhead) is still exact
    if len(cfg["models"]) == 2 and cfg["policy"] == "accumulate":
        from polyspec_theory.bounds.approximation import paper_approximation

        assert paper_approximation(Cascade.from_config(cfg)).relative_error == pytest.approx(
            0.0, abs=1e-10)
    # the grid of thresholds agrees with predict
    c = Cascade.from_config(cfg)
    g = predict_many(c, np.array([c.thresholds]))
    assert g.time_per_token[0] == pytest.approx(with_o.time_per_token, rel=1e-11)


@settings(max_examples=100, deadline=None)
@given(laws(), st.integers(1, 12), st.floats(0.0, 0.5), st.floats(0.0, 0.3),
       st.floats(0.0, 0.05), st.floats(0.0, 2.0))
def test_two_model_closed_form(law, theta, c2, k1, o, _):
    cfg = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": k1}, "overhead": o},
                      {"name": "d", "cost": c2}],
           "acceptance": [law], "thresholds": [theta]}
    mean_l = 1.0 + law_from_config(law).mean(theta)
    tau = (theta * c2 + 1.0 + k1 * theta + o) / mean_l
    assert predict(Cascade.from_config(cfg)).time_per_token == pytest.approx(tau, rel=1e-11)


def test_speedup_decreases_with_overhead():
    base = {"models": [{"name": "t", "cost": 1.0, "overhead": 0.0}, {"name": "d", "cost": 0.05}],
            "acceptance": [{"alpha": 0.8}], "thresholds": [4]}
    sp = []
    for o in (0.0, 0.1, 0.2, 0.4):
        base["models"][0]["overhead"] = o
        sp.append(predict(Cascade.from_config(base)).speedup)
    assert all(a > b for a, b in itertools.pairwise(sp))


def test_overhead_changes_the_best_threshold():
    # larger per-round overhead favours longer drafts (fewer rounds per token)
    def best(o):
        cfg = {"models": [{"name": "t", "cost": 1.0, "overhead": o}, {"name": "d", "cost": 0.1}],
               "acceptance": [{"alpha": 0.8}], "thresholds": [1]}
        c = Cascade.from_config(cfg)
        g = predict_many(c, np.arange(1, 17)[:, None])
        return int(np.argmax(g.speedup)) + 1

    assert best(2.0) > best(0.0)


def test_planner_with_overheads_is_the_brute_force_optimum():
    pool_cfg = {
        "models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}, "overhead": 0.3},
                   {"name": "m", "cost": 0.2, "overhead": 0.08},
                   {"name": "s", "cost": 0.03, "overhead": 0.01}],
        "acceptance": {"t|m": {"alpha": 0.85}, "t|s": {"alpha": 0.6}, "m|s": {"alpha": 0.7}},
        "max_threshold": 5,
    }
    pool = Pool.from_config(pool_cfg)
    res = plan(pool, 3, prune=True)
    best = (0.0, None)
    for chain in (("t", "m"), ("t", "s"), ("t", "m", "s")):
        for th in itertools.product(range(1, 6), repeat=len(chain) - 1):
            sp = predict(pool.cascade(chain, th)).speedup
            if sp > best[0]:
                best = (sp, (chain, th))
    assert res.speedup == pytest.approx(best[0], rel=1e-10)
    assert (res.chain, res.thresholds) == best[1]
    # the pool round-trips with its overheads; a bottom model's overhead is never incurred
    assert Pool.from_config(pool.to_config()).to_config() == pool.to_config()
    two = predict(pool.cascade(("t", "s"), (3,)))
    no_s = Pool.from_config({**pool_cfg, "models": pool_cfg["models"][:2]
                             + [{"name": "s", "cost": 0.03}]})
    assert predict(no_s.cascade(("t", "s"), (3,))).speedup == pytest.approx(two.speedup)


def test_simulator_matches_p1_with_overheads():
    from simulators.length import simulate_lengths

    cfgs = [
        {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.05}, "overhead": 0.4},
                    {"name": "d", "cost": 0.05}],
         "acceptance": [{"positional": [0.9, 0.7]}], "thresholds": [5]},
        {"models": [{"name": "t", "cost": 1.0, "overhead": 0.2},
                    {"name": "m", "cost": {"table": [0.2, 0.25, 0.3]}, "overhead": 0.1},
                    {"name": "d", "cost": 0.01}],
         "acceptance": [{"beta": [4.0, 1.0]}, {"alpha": 0.7}], "thresholds": [4, 2],
         "policy": "truncate"},
    ]
    for seed, cfg in enumerate(cfgs):
        c = Cascade.from_config(cfg)
        r = simulate_lengths(c, 200_000, seed=seed + 11, chains=256)
        z = abs(r.speedup.value - predict(c).speedup) / r.speedup.se
        assert z < 4.0, (cfg, z)


def test_config_fields_and_errors():
    cfg = {"models": [{"name": "t", "cost": 2.0, "overhead": 0.5}, {"name": "d", "cost": 0.1}],
           "acceptance": [{"tau": 2.5}], "thresholds": [4], "time_unit": "ms"}
    c = Cascade.from_config(cfg)
    assert c.models[0].overhead == 0.5 and c.time_unit == "ms"
    # {"tau": x} is the iid law whose capped mean at the pair's threshold is x - 1
    assert c.laws[0].mean_emitted(4) == pytest.approx(2.5, rel=1e-12)
    assert isinstance(c.laws[0], IIDGeometric)
    out = c.to_config()
    assert out["models"][0]["overhead"] == 0.5 and out["time_unit"] == "ms"
    assert Cascade.from_config(out).to_config() == out
    assert c.with_thresholds([5]).time_unit == "ms"
    bad = [
        ({**cfg, "models": [cfg["models"][0], {"name": "d", "cost": 0.1, "overhead": 0.1}]},
         "models[1].overhead"),
        ({**cfg, "models": [{"name": "t", "cost": 2.0, "overhead": -1}, cfg["models"][1]]},
         "models[0].overhead"),
        ({**cfg, "acceptance": [{"tau": 5.5}]}, "acceptance[0].tau"),
        ({**cfg, "acceptance": [{"tau": 0.5}]}, "acceptance[0].tau"),
        ({**cfg, "acceptance": [{"tau": 2.0, "alpha": 0.5}]}, "acceptance[0].alpha"),
        ({**cfg, "acceptance": [{"fit": "x.json"}]}, "acceptance[0].fit"),
        ({**cfg, "time_unit": ""}, "time_unit"),
        ({**cfg, "thresholds": ["a"]}, "thresholds[0]"),
    ]
    for c_bad, field in bad:
        with pytest.raises(PolyspecInputError) as e:
            Cascade.from_config(c_bad)
        assert e.value.field == field, (c_bad, str(e.value))
    with pytest.raises(PolyspecInputError, match="overhead"):
        Model("x", CostCurve.constant(1.0), -0.1)


def test_tau_with_its_own_threshold_in_a_pool():
    law = acceptance_from_config({"tau": 2.47, "threshold": 7})
    assert law.mean_emitted(7) == pytest.approx(2.47, rel=1e-12)
    with pytest.raises(PolyspecInputError, match="threshold"):
        acceptance_from_config({"tau": 2.47}, None, "acceptance.t|d")
    pool = Pool.from_config({"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.1}],
                             "acceptance": {"t|d": {"tau": 2.47, "threshold": 7}},
                             "time_unit": "ms"})
    assert pool.time_unit == "ms" and pool.cascade(("t", "d"), (3,)).time_unit == "ms"


@settings(max_examples=40, deadline=None)
@given(cascades(max_n=3), st.integers(1, 4))
def test_serving_batch_theory_carries_the_overhead(cfg, batch):
    """B2 with per-round overheads: once per batched verification round, so b = 1 is P1 and
    for any b the overheads add sum_i F_i^b o_i (F^b: batched forwards per token, which do
    not depend on costs)."""
    from polyspec_theory.serving.batch import optimize_batch_thresholds, predict_batch

    c = Cascade.from_config(cfg)
    c0 = Cascade.from_config(_without_overhead(cfg))
    if batch == 1:
        assert predict_batch(c, 1).time_per_token == pytest.approx(
            predict(c).time_per_token, rel=1e-11)
    pb, pb0 = predict_batch(c, batch), predict_batch(c0, batch)
    extra = sum(lv.forwards_per_token * m.get("overhead", 0.0)
                for lv, m in zip(pb0.levels, cfg["models"], strict=True))
    assert pb.time_per_token == pytest.approx(pb0.time_per_token + extra, rel=1e-11)
    assert sum(lv.time_share for lv in pb.levels) == pytest.approx(1.0, rel=1e-11)
    opt = optimize_batch_thresholds(c, batch, 4)
    assert opt.speedup == pytest.approx(predict_batch(c.with_thresholds(opt.thresholds),
                                                      batch).speedup, rel=1e-10)


def test_structured_cascades_carry_the_overhead():
    """Trees and schedules (polyspec_theory.structures.structured): the overhead is paid once per
    verification round, so it adds (verification rounds of M_i per token) x o_i, and a plain
    chain through the structured engine equals P1 with overheads."""
    from polyspec_theory.structures.structured import predict_structured

    two = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}, "overhead": 0.3},
                      {"name": "d", "cost": 0.05}],
           "acceptance": [{"alpha": 0.75}], "thresholds": [4]}
    variants = [
        two,
        {**two, "acceptance": [{"sibling": [0.6, 0.2, 0.1]}],
         "trees": [{"parents": [-1, 0, 0, 0, 1, 1, 2, 4]}]},
        {**two, "schedules": [{"kind": "hf", "start": 5, "min": 1, "max": 12}]},
        {**two, "acceptance": [{"confidence": {"beta": [3.0, 1.2], "logistic": [0.3, 1.1]}}],
         "schedules": [{"kind": "confidence", "eta": 0.6, "max": 8}]},
    ]
    for cfg in variants:
        c, c0 = Cascade.from_config(cfg), Cascade.from_config(_without_overhead(cfg))
        p, p0 = predict_structured(c).prediction, predict_structured(c0).prediction
        rounds = p0.levels[0].forwards_per_token
        assert p.time_per_token == pytest.approx(p0.time_per_token + 0.3 * rounds, rel=1e-11)
        assert predict(c).time_per_token == pytest.approx(p.time_per_token, rel=1e-12)
        assert p.levels[0].overhead == 0.3
        assert p.levels[0].forward_cost == pytest.approx(p0.levels[0].forward_cost, rel=1e-11)
    plain = Cascade.from_config(two)
    assert predict_structured(plain).prediction.time_per_token == pytest.approx(
        predict(plain).time_per_token, rel=1e-11)
