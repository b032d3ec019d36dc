"""Cascade planner (issue 8): exact optimum vs brute force over every chain and threshold,
pruning never changes the answer, the pruning inequality itself, input validation, the
paper's greedy rule, and the length-level simulator confirming the planned speedup."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.config import Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, GaussianBaseline, IIDGeometric, Positional
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.planning.insertion import paper_insertion_check
from polyspec_theory.planning.planner import (
    Plan,
    PlannedCascade,
    greedy_paper_rule,
    plan,
    plan_thresholds,
)
from polyspec_theory.planning.pool import MAX_POOL_MODELS, Pool
from polyspec_theory.planning.search import _convex_minorant, _Cuts, _Tables
from polyspec_theory.schemes import predict
from tests._optional import optional_import

POOL_FILE = Path(__file__).resolve().parents[2] / "configs" / "pool.json"


# --------------------------------------------------------------------------------------------
# random pools and the brute force
# --------------------------------------------------------------------------------------------
def random_pool(seed: int, k: int, theta: int, policy: str, p_missing: float = 0.25) -> Pool:
    """A pool of ``k`` models with random costs (constant / affine / table) and random laws
    of every family on a random subset of the pairs (at least one target pair)."""
    rng = np.random.default_rng(seed)
    models = [Model("t", CostCurve(base=1.0, per_token=float(rng.uniform(0, 0.05))))]
    for i in range(1, k):
        kind = i % 3
        if kind == 0:
            c = CostCurve(base=float(rng.uniform(0, 0.6)))
        elif kind == 1:
            c = CostCurve(base=float(rng.uniform(0, 0.6)), per_token=float(rng.uniform(0, 0.05)))
        else:
            c = CostCurve(table=[float(x) for x in rng.uniform(0, 0.6, size=rng.integers(1, 5))])
        models.append(Model(f"d{i}", c))
    names = [m.name for m in models]
    pairs = {}
    for v in names:
        for d in names[1:]:
            if v == d or rng.random() < p_missing:
                continue
            f = int(rng.integers(4))
            if f == 0:
                law = IIDGeometric(float(rng.uniform(0, 1)))
            elif f == 1:
                law = Positional([float(x) for x in rng.uniform(0, 1, size=rng.integers(1, 4))])
            elif f == 2:
                law = BetaMixed(float(rng.uniform(0.2, 10)), float(rng.uniform(0.2, 5)))
            else:
                law = GaussianBaseline(float(rng.uniform(-1, 5)), float(rng.uniform(0.2, 3)))
            pairs[(v, d)] = law
    if not any(v == "t" for v, _ in pairs):
        pairs[("t", "d1")] = IIDGeometric(0.7)
    return Pool(tuple(models), pairs, theta, policy)


def brute_force(pool: Pool) -> dict:
    """``{chain: (best speedup, thresholds)}`` by P1 (``predict``) on every configuration."""
    names = pool.names
    out = {}
    for n in range(2, len(names) + 1):
        for rest in itertools.permutations(names[1:], n - 1):
            chain = (names[0], *rest)
            if any((a, b) not in pool.pairs for a, b in zip(chain[:-1], chain[1:], strict=False)):
                continue
            best = None
            for thr in itertools.product(range(1, pool.max_threshold + 1), repeat=n - 1):
                s = predict(pool.cascade(chain, thr)).speedup
                if best is None or s > best[0]:
                    best = (s, thr)
            out[chain] = best
    return out


def _check_against(result: Plan, bf: dict, pool: Pool, top: int):
    ranked = sorted(bf.values(), key=lambda x: -x[0])
    got = [result.best, *result.alternatives]
    assert len(got) == min(top + 1, len(bf))
    # the value of every reported rank equals the brute-force value of that rank
    for g, (val, _) in zip(got, ranked, strict=False):
        assert g.speedup == pytest.approx(val, rel=1e-9, abs=1e-12)
    # each reported configuration is what brute force says about that chain
    for g in got:
        assert g.speedup == pytest.approx(bf[g.chain][0], rel=1e-9, abs=1e-12)
        assert predict(pool.cascade(g.chain, g.thresholds)).speedup == pytest.approx(
            g.speedup, rel=1e-12)
    assert len({g.chain for g in got}) == len(got)
    two = max((v for c, v in bf.items() if len(c) == 2), key=lambda x: x[0])
    assert result.best_two_model.speedup == pytest.approx(two[0], rel=1e-9, abs=1e-12)
    assert len(result.best_two_model.chain) == 2


@settings(derandomize=True, deadline=None, max_examples=40)
@given(seed=st.integers(0, 10**6), k=st.integers(2, 4), theta=st.integers(1, 4),
       policy=st.sampled_from(["accumulate", "truncate"]), top=st.integers(0, 3))
def test_equals_brute_force_on_random_small_pools(seed, k, theta, policy, top):
    pool = random_pool(seed, k, theta, policy)
    _check_against(plan(pool, top, greedy=False), brute_force(pool), pool, top)


@pytest.mark.parametrize("seed, policy", [(7, "accumulate"), (8, "truncate")])
def test_equals_brute_force_on_five_fully_connected_models(seed, policy):
    """Every order of four drafters (64 chains, 2,712 configurations) with pruning active
    through four levels."""
    pool = random_pool(seed, 5, 3, policy, p_missing=0.0)
    _check_against(plan(pool, 3, greedy=False), brute_force(pool), pool, 3)


@settings(derandomize=True, deadline=None, max_examples=20)
@given(seed=st.integers(0, 10**6), k=st.integers(3, 5), theta=st.integers(1, 5),
       policy=st.sampled_from(["accumulate", "truncate"]), top=st.integers(0, 4))
def test_pruning_never_changes_the_result(seed, k, theta, policy, top):
    pool = random_pool(seed, k, theta, policy, p_missing=0.15)
    a = plan(pool, top, greedy=False)
    b = plan(pool, top, prune=False, greedy=False)
    va = [x.speedup for x in (a.best, *a.alternatives)]
    vb = [x.speedup for x in (b.best, *b.alternatives)]
    np.testing.assert_allclose(va, vb, rtol=1e-12)
    assert b.stats.configs_scored == b.stats.configs_total
    assert a.stats.configs_scored <= a.stats.configs_total
    assert a.best_two_model.speedup == pytest.approx(b.best_two_model.speedup, rel=1e-12)
    # same chains, except where two values tie to rounding
    for x, y in zip((a.best, *a.alternatives), (b.best, *b.alternatives), strict=True):
        if x.chain != y.chain:
            assert x.speedup == pytest.approx(y.speedup, rel=1e-9)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 5), theta_max=st.integers(1, 12),
       policy=st.sampled_from(["accumulate", "truncate"]))
def test_pruning_inequality_holds_at_every_level(seed, n, theta_max, policy):
    """The bound behind the pruning: tau_u >= h_uv(tau_v) for every level of every cascade,
    i.e. tau_v <= inv_uv(tau_u) (module docstring of planner)."""
    pool = random_pool(seed, n, theta_max, policy, p_missing=0.0)
    tables = _Tables(pool)
    rng = np.random.default_rng(seed)
    chain = ["t", *[f"d{i}" for i in rng.permutation(np.arange(1, n))]]
    thr = [int(x) for x in rng.integers(1, theta_max + 1, size=n - 1)]
    pred = predict(pool.cascade(chain, thr))
    idx = [pool.names.index(c) for c in chain]
    for i in range(n - 1):
        tau_u, tau_v = pred.levels[i].tau, pred.levels[i + 1].tau
        assert tau_v <= tables.inverse(idx[i], idx[i + 1], tau_u) * (1 + 1e-12) + 1e-15
    # composed over completions: with c = the exact tau_1, every sub-cascade state of the
    # chain (suffix j..n, models used = the suffix) is admitted by cut(v, U)
    cuts = _Cuts(tables)
    cuts.set_target_tau(pred.time_per_token)
    for j in range(1, n):
        used = sum(1 << m for m in idx[j:])
        assert pred.levels[j].tau <= cuts.cut(idx[j], used) * (1 + 1e-12) + 1e-15


def test_convex_minorant():
    rng = np.random.default_rng(3)
    for _ in range(50):
        y = rng.uniform(0, 1, size=rng.integers(1, 30))
        c = _convex_minorant(y)
        assert np.all(c <= y + 1e-15)
        if y.size >= 3:
            assert np.all(np.diff(c, 2) >= -1e-12)
    y = np.array([1.0, 1.5, 2.0, 2.5])  # affine: unchanged
    np.testing.assert_allclose(_convex_minorant(y), y)


# --------------------------------------------------------------------------------------------
# the example pool, thresholds of one chain, the paper's rule
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def example():
    pool = Pool.from_config(json.loads(POOL_FILE.read_text()))
    return pool, plan(pool, top=5)


def test_example_pool_plan(example):
    pool, res = example
    assert len(pool.names) == 8
    n_possible = 7 * 7 + 7  # verifier (any but itself) x drafter (not the target)
    assert 0 < len(pool.pairs) < n_possible - 7  # some pairs missing
    assert res.best.chain[0] == pool.target and len(res.best.chain) >= 2
    assert res.speedup == pytest.approx(
        predict(pool.cascade(res.chain, res.thresholds)).speedup, rel=1e-12)
    vals = [res.best.speedup] + [a.speedup for a in res.alternatives]
    assert vals == sorted(vals, reverse=True) and len(vals) == 6
    assert res.best.speedup >= res.best_two_model.speedup >= 1.0
    assert res.best.speedup >= res.greedy.chosen.speedup
    d = res.to_dict()
    assert {"chain", "thresholds", "speedup", "alternatives", "best_two_model",
            "greedy_paper_rule"} <= set(d)
    assert d["baseline"] == {"chain": [pool.target], "speedup": 1.0}
    s = res.stats
    assert s.configs_scored + s.configs_pruned == s.configs_total
    assert s.chains_total == 116  # counted from the pool's pairs (fixed file)


def test_example_pool_beats_the_papers_greedy_rule(example):
    """On the example pool the paper's rule inserts a model that the exact comparison says
    hurts; the planner's optimum is strictly better."""
    pool, res = example
    g = res.greedy
    assert g.start == res.best_two_model
    assert g.steps, "the paper's condition passes for some insertion on this pool"
    cur = g.start
    for s in g.steps:
        i = cur.chain.index(s.verifier)
        chk = paper_insertion_check(pool.cascade(cur.chain, cur.thresholds), i,
                                    pool.model(s.inserted), pool.pairs[(s.verifier, s.inserted)],
                                    pool.pairs[(s.inserted, s.drafter)])
        assert chk["helps"] and chk["lhs"] == pytest.approx(s.lhs) and chk["rhs"] == s.rhs
        nxt = (*cur.chain[: i + 1], s.inserted, *cur.chain[i + 1 :])
        cur = plan_thresholds(pool, nxt)
        assert cur.speedup == pytest.approx(s.speedup_after, rel=1e-12)
    assert cur == g.chosen
    assert g.chosen.speedup < g.start.speedup < res.best.speedup
    assert greedy_paper_rule(pool) == g  # computes its own start: the best two-model config


@pytest.mark.parametrize("chain", [("target", "m3b", "ngram"), ("target", "m7b", "m1b", "ngram")])
def test_plan_thresholds_equals_exhaustive_search(example, chain):
    pool, _ = example
    small = Pool(pool.models, pool.pairs, 7, pool.policy)
    got = plan_thresholds(small, chain)
    best = max(
        (predict(small.cascade(chain, t)).speedup, t)
        for t in itertools.product(range(1, 8), repeat=len(chain) - 1)
    )
    assert got.speedup == pytest.approx(best[0], rel=1e-12)
    assert got.chain == chain


def test_plan_is_deterministic_and_accepts_a_mapping():
    cfg = json.loads(POOL_FILE.read_text())
    cfg["max_threshold"] = 6
    a = plan(cfg, top=3, greedy=False).to_dict()
    b = plan(Pool.from_config(cfg), top=3, greedy=False).to_dict()
    assert a == b


def test_only_autoregressive_beats_a_bad_pool():
    """Drafters too slow to help: the best cascade is reported with speedup < 1."""
    pool = Pool.from_config({
        "models": [{"name": "t", "cost": 1.0}, {"name": "slow", "cost": 0.9}],
        "acceptance": {"t|slow": {"alpha": 0.1}}, "max_threshold": 4})
    res = plan(pool)
    assert res.speedup < 1.0 and res.to_dict()["beats_autoregressive"] is False
    assert res.chain == ("t", "slow") and res.thresholds == (1,)


def test_deep_chain_can_win():
    """Cheap, well-aligned drafters: the exact optimum uses more than two models and beats
    the best two-model configuration."""
    models = [Model("t", CostCurve(base=1.0))] + [
        Model(f"m{i}", CostCurve(base=0.3**i)) for i in range(1, 4)]
    pairs = {(models[i].name, models[j].name): IIDGeometric(0.93 - 0.08 * abs(i - j))
             for i in range(4) for j in range(1, 4) if i != j}
    res = plan(Pool(tuple(models), pairs, 8), top=2)
    assert len(res.chain) >= 3
    assert res.speedup > res.best_two_model.speedup * 1.01


# --------------------------------------------------------------------------------------------
# validation of the pool
# --------------------------------------------------------------------------------------------
BASE = {
    "models": [{"name": "target", "cost": 1.0}, {"name": "a", "cost": 0.2},
               {"name": "b", "cost": {"base": 0.05, "per_token": 0.001}}],
    "acceptance": {"target|a": {"alpha": 0.8}, "a|b": {"beta": [3.0, 1.2]},
                   "target|b": {"positional": [0.6, 0.5]}},
    "max_threshold": 4,
}


def _with(**changes):
    cfg = json.loads(json.dumps(BASE))
    for k, v in changes.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    return cfg


@pytest.mark.parametrize("cfg, field", [
    (_with(acceptance={"target|zz": {"alpha": 0.5}}), "acceptance.target|zz"),
    (_with(acceptance={"zz|a": {"alpha": 0.5}}), "acceptance.zz|a"),
    (_with(acceptance={"target-a": {"alpha": 0.5}}), "acceptance.target-a"),
    (_with(acceptance={"target|a|b": {"alpha": 0.5}}), "acceptance.target|a|b"),
    (_with(acceptance={"target| a": {"alpha": 0.5}}), "acceptance.target| a"),
    (_with(acceptance={"target|a": {"alpha": 1.5}}), "acceptance.target|a.alpha"),
    (_with(acceptance={"target|a": {"beta": [1.0]}}), "acceptance.target|a.beta"),
    (_with(acceptance={"target|a": {"alpha": 0.5}, "a|a": {"alpha": 0.5}}), "acceptance.a|a"),
    (_with(acceptance={"target|a": {"alpha": 0.5}, "a|target": {"alpha": 0.5}}),
     "acceptance.a|target"),
    (_with(acceptance={"a|b": {"alpha": 0.5}}), "acceptance"),
    (_with(acceptance={}), "acceptance"),
    (_with(acceptance=[{"alpha": 0.5}]), "acceptance"),
    (_with(max_threshold=0), "max_threshold"),
    (_with(max_threshold=2.5), "max_threshold"),
    (_with(max_threshold=100_000), "max_threshold"),
    (_with(policy="greedy"), "policy"),
    (_with(models=[{"name": "target", "cost": 1.0}, {"name": "target", "cost": 0.2}]),
     "models[1].name"),
    (_with(models=[{"name": "target", "cost": 1.0}]), "models"),
    (_with(models=[{"name": "target", "cost": 1.0}, {"name": "a|b", "cost": 0.2}]),
     "models[1].name"),
    (_with(models=[{"name": "target", "cost": 1.0}, {"name": "", "cost": 0.2}]),
     "models[1].name"),
    (_with(models=[{"name": "target", "cost": 0.0}, {"name": "a", "cost": 0.2}]),
     "models[0].cost"),
    (_with(models=[{"name": "target", "cost": 1.0}, {"name": "a", "cost": -0.2}]),
     "models[1].cost"),
    (_with(models=[{"name": "target", "cost": 1.0}, {"name": "a"}]), "models[1].cost"),
    (_with(models={"target": 1.0}), "models"),
    (_with(models=None), "models"),
    (_with(acceptance=None), "acceptance"),
    (_with(extra=1), "extra"),
])
def test_bad_pool_is_rejected_naming_the_field(cfg, field):
    with pytest.raises(PolyspecInputError) as e:
        Pool.from_config(cfg)
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith(field)


def test_too_many_models():
    cfg = _with(models=[{"name": "target", "cost": 1.0}] + [
        {"name": f"m{i}", "cost": 0.1} for i in range(MAX_POOL_MODELS)])
    with pytest.raises(PolyspecInputError) as e:
        Pool.from_config(cfg)
    assert e.value.field == "models"


def test_bad_arguments():
    pool = Pool.from_config(BASE)
    with pytest.raises(PolyspecInputError) as e:
        plan(pool, top=-1)
    assert e.value.field == "top"
    with pytest.raises(PolyspecInputError) as e:
        plan("pool.json")
    assert e.value.field == "pool"
    for chain in [("a", "target"), ("target",), ("target", "zz"), ("target", "a", "a"),
                  "target", ("target", "b", "a")]:
        with pytest.raises(PolyspecInputError) as e:
            plan_thresholds(pool, chain)
        assert e.value.field == "chain", chain
    with pytest.raises(PolyspecInputError) as e:
        greedy_paper_rule(pool, start=("target", "a"))
    assert e.value.field == "start"


def test_pool_round_trip():
    pool = Pool.from_config(BASE)
    again = Pool.from_config(pool.to_config())
    assert again.names == pool.names and again.max_threshold == 4
    assert {k: v.to_config() for k, v in again.pairs.items()} == {
        k: v.to_config() for k, v in pool.pairs.items()}
    assert plan(again, greedy=False).to_dict() == plan(pool, greedy=False).to_dict()
    assert Pool.from_config(_with(max_threshold=None)).max_threshold == 16


def test_planned_cascade_to_dict():
    p = PlannedCascade(("t", "a"), (3,), 1.5)
    assert p.to_dict() == {"chain": ["t", "a"], "thresholds": [3], "speedup": 1.5}
    assert math.isfinite(p.speedup)


# --------------------------------------------------------------------------------------------
# the length-level simulator confirms the planned cascade
# --------------------------------------------------------------------------------------------
def test_simulator_confirms_the_planned_speedup(example):
    """P1's speedup of the planned cascade lies within the simulator's CI, and the simulated
    planned cascade beats the simulated choice of the paper's greedy rule.

    False-failure rate: z = 3.29 (two-sided 1e-3) for the first comparison; the second holds
    unless both estimates err by > 7 standard errors (the gap is ~17 %, se ~0.4 %)."""
    optional_import("jax")
    from simulators.length import simulate_lengths

    pool, res = example
    sim = simulate_lengths(pool.cascade(res.chain, res.thresholds), 200_000, seed=11,
                           chains=512)
    z = 3.2905
    assert abs(sim.speedup.value - res.speedup) <= z * sim.speedup.se, (sim.speedup,
                                                                          res.speedup)
    g = res.greedy.chosen
    sim_g = simulate_lengths(pool.cascade(g.chain, g.thresholds), 100_000, seed=12,
                             chains=512)
    assert sim.speedup.low > sim_g.speedup.high


# --------------------------------------------------------------------------------------------
# asynchronous pipelines (docs/theory.md AS1, AS7): plan_async
# --------------------------------------------------------------------------------------------
ASYNC_POOL = {"name": "p3", "models": [{"name": "target", "cost": 1.0},
                                       {"name": "mid", "cost": 0.3},
                                       {"name": "small", "cost": 0.1}],
              "acceptance": {"target|mid": {"alpha": 0.8}, "mid|small": {"alpha": 0.7},
                             "target|small": {"alpha": 0.6}},
              "max_threshold": 4}


def _async_value(chain, thresholds):
    from polyspec_theory import Cascade, predict_async

    names = [m["name"] for m in ASYNC_POOL["models"]]
    return predict_async(Cascade.from_config({
        "models": [ASYNC_POOL["models"][names.index(nm)] for nm in chain],
        "acceptance": [ASYNC_POOL["acceptance"][f"{v}|{d}"]
                       for v, d in zip(chain[:-1], chain[1:], strict=True)],
        "thresholds": list(thresholds), "mode": "async"})).speedup


def test_plan_async_two_models_is_the_best_threshold():
    """Two models: the best of AS1 over every threshold 0..max_threshold."""
    from polyspec_theory.planning.async_plan import plan_async

    got = plan_async(ASYNC_POOL, ("target", "small"))
    vals = [_async_value(("target", "small"), (t,)) for t in range(5)]
    assert got.speedup == pytest.approx(max(vals), rel=1e-12)
    assert got.thresholds == (int(np.argmax(vals)),) and got.search == "all"
    assert got.evaluated == 5


def test_plan_async_three_models_exhaustive_optimum():
    """Three models: every threshold pair in 0..3 is solved (AS7, predict's route) and the
    best is returned, with its exact value."""
    from polyspec_theory.planning.async_plan import ASYNC_PLAN_THRESHOLD, plan_async

    chain = ("target", "mid", "small")
    got = plan_async(ASYNC_POOL, chain)
    grid = itertools.product(range(ASYNC_PLAN_THRESHOLD + 1), repeat=2)
    vals = {th: _async_value(chain, th) for th in grid}
    best = max(vals, key=vals.get)
    assert got.thresholds == best and got.speedup == pytest.approx(vals[best], rel=1e-12)
    assert got.search == "all" and got.evaluated == len(vals) == 16
    assert got.to_dict()["exact"] is True


def test_plan_async_too_large_is_none():
    from polyspec_theory.planning.async_plan import plan_async

    assert plan_async(ASYNC_POOL, ("target", "mid", "small"), max_states=10) is None
    with pytest.raises(PolyspecInputError) as e:
        plan_async(ASYNC_POOL, ("target", "mid", "small"), max_states=0)
    assert e.value.field == "max_states"
