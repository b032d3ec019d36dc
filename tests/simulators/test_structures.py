"""Monte Carlo of trees and schedules (simulators/structures.py) against the exact theory.

Each comparison passes when |MC - theory| <= 4.5 standard errors (two-sided normal
false-failure rate 6.8e-6 per comparison; at most 25 comparisons here: <= 1.7e-4 for the
file); chi-square tests pass at p >= 1e-4. All seeds are fixed, so the outcome is
deterministic for a given build."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy import stats

from polyspec_theory import PolyspecInputError
from polyspec_theory.core.config import DEFAULT_CASCADE, Cascade
from polyspec_theory.structures.structured import predict_structured
from polyspec_theory.structures.trees import ResidualLaw, Tree, accepted_pmf
from simulators.structures import simulate_residual_tree, simulate_structured

Z = 4.5
P_MIN = 1e-4

TWO = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                  {"name": "d", "cost": 0.05}],
       "acceptance": [{"alpha": 0.75}], "thresholds": [4]}
TREE = {**TWO, "acceptance": [{"sibling": [[0.6, 0.2, 0.1], [0.5, 0.2]]}],
        "trees": [{"parents": [-1, 0, 0, 0, 1, 1, 2, 4, 4]}]}
HF = {**TWO, "schedules": [{"kind": "hf", "start": 5, "min": 1, "max": 12}]}
CONF = {**TWO, "acceptance": [{"confidence": {"beta": [3.0, 1.2], "logistic": [0.3, 1.1]}}],
        "schedules": [{"kind": "confidence", "eta": 0.6, "max": 8}]}
THREE = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                    {"name": "m", "cost": {"base": 0.2, "per_token": 0.01}},
                    {"name": "d", "cost": 0.02}],
         "acceptance": [{"beta": [5.0, 1.5]}, {"sibling": [0.6, 0.2, 0.1]}],
         "thresholds": [5, 3],
         "schedules": [{"kind": "hf", "start": 3, "min": 2, "max": 9}, None],
         "trees": [None, {"parents": [-1, 0, 0, 1, 1, 2]}]}
# per-round overheads o_i (O1): counted once per verification round of M_i
TREE_O = {**TREE, "models": [{**TWO["models"][0], "overhead": 0.3}, TWO["models"][1]]}
THREE_O = {**THREE, "models": [{**THREE["models"][0], "overhead": 0.2},
                               {**THREE["models"][1], "overhead": 0.05}, THREE["models"][2]]}
MID_HF = copy.deepcopy(DEFAULT_CASCADE)
MID_HF["schedules"] = [None, {"kind": "hf", "start": 4, "min": 1, "max": 6}, None]


@pytest.mark.parametrize("cfg", [TREE, HF, CONF, THREE, MID_HF, TREE_O, THREE_O],
                         ids=["tree", "hf", "confidence", "3-level hf+tree", "4-level mid hf",
                              "tree+overhead", "3-level hf+tree+overheads"])
def test_simulator_matches_theory(cfg):
    c = Cascade.from_config(cfg)
    sp = predict_structured(c)
    rounds = 150
    r = simulate_structured(c, rounds, seed=3, chains=256)
    target = sp.finite_horizon(r.burn_in, rounds)["speedup"]
    assert abs(target / sp.speedup - 1) < 1e-5  # the burn-in removed the start's transient
    z = (r.speedup.value - target) / r.speedup.se
    assert abs(z) <= Z, (r.speedup, target)
    # per-level accounting: phi and E[L] (stationary values; transient bias << se)
    for lv, lp in zip(r.levels[1:], sp.prediction.levels[1:], strict=True):
        assert abs(lv.phi.value - lp.phi) <= Z * lv.phi.se + 1e-9, lv.name
    top = r.levels[0].mean_emitted
    assert abs(top.value - sp.prediction.levels[0].mean_emitted) <= Z * top.se
    if any(m.get("overhead") for m in cfg["models"]):  # the overhead is visible in the MC
        bare = {**cfg, "models": [{k: v for k, v in m.items() if k != "overhead"}
                                  for m in cfg["models"]]}
        no_o = predict_structured(Cascade.from_config(bare)).speedup
        assert abs(r.speedup.value - no_o) > 10 * r.speedup.se, (r.speedup, no_o)


def test_tree_accepted_length_law_chi2():
    c = Cascade.from_config(TREE)
    # 51200 rounds as 256 chains x 200: the 256 chains of the TREE run above, one compilation
    r = simulate_structured(c, 200, seed=4, chains=256)
    counts = r.hist[0].sum(axis=0)[1:c.trees[0].max_depth + 2]  # by L = A + 1
    exp = counts.sum() * accepted_pmf(c.trees[0], c.laws[0])
    chi = stats.chisquare(counts, exp)
    assert chi.pvalue >= P_MIN
    assert r.hist[0].sum(axis=1)[c.trees[0].n_nodes] == counts.sum()  # G = N always


def test_hf_mean_length_and_full_acceptance():
    c = Cascade.from_config(HF)
    # 51200 measured rounds as 256 chains x 200: the compiled shapes of the HF run above
    r = simulate_structured(c, 200, seed=5, chains=256)
    sp = predict_structured(c)
    mb, fa = r.levels[0].mean_block, r.levels[0].full_acceptance
    assert abs(mb.value - sp.pairs[0]["mean_length"]) <= Z * mb.se
    assert abs(fa.value - sp.pairs[0]["full_acceptance"]) <= Z * fa.se
    occ = r.lengths[0, 1:13] / r.lengths[0].sum()  # visits every length of the chain
    assert (occ > 0).all()


def test_same_seed_same_numbers():
    c = Cascade.from_config(CONF)
    a = simulate_structured(c, 20, seed=9, chains=256)  # the compiled shapes of the
    b = simulate_structured(c, 20, seed=9, chains=256)  # 150-round run above: no recompile
    d = simulate_structured(c, 20, seed=10, chains=256)
    assert a.speedup == b.speedup and np.array_equal(a.hist, b.hist)
    assert a.speedup != d.speedup
    import jax

    k = simulate_structured(c, 20, seed=jax.random.key(9), chains=256)
    assert k.speedup == a.speedup and k.seed is None  # make_key(9) is that key


def test_residual_tree_token_level():
    law = ResidualLaw([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.6, 0.2]],
                      [[0.2, 0.3, 0.4, 0.1], [0.3, 0.4, 0.2, 0.1]], [0.7, 0.3])
    tree = Tree([-1, 0, 0, 0, 1, 1, 2, 4])
    r = simulate_residual_tree(tree, law, 60_000, seed=2)
    # T2: rank of the accepted child at nodes with c children
    p = law.rank_probs(1, 3)[0]
    for c in (1, 2, 3):
        row = r.rank_counts[c, : c + 1]
        exp = row.sum() * np.array([1 - p[:c].sum(), *p[:c]])
        assert stats.chisquare(row, exp).pvalue >= P_MIN, c
    # lossless: every emitted token follows P of its context
    for z in range(2):
        obs = r.token_counts[z]
        e = obs.sum() * law.target[z]
        keep = e > 0
        assert obs[~keep].sum() == 0
        assert stats.chisquare(obs[keep], e[keep]).pvalue >= P_MIN, z
    # T1 with the induced rank law: the accepted length
    exp = r.rounds * accepted_pmf(tree, law)
    assert stats.chisquare(r.accepted_counts, exp).pvalue >= P_MIN


def test_simulator_input_checks():
    c = Cascade.from_config(TREE)
    with pytest.raises(PolyspecInputError, match="rounds"):
        simulate_structured(c, 0)
    with pytest.raises(PolyspecInputError, match="chains"):
        simulate_structured(c, 10, chains=1)
    with pytest.raises(PolyspecInputError, match="cascade"):
        simulate_structured(TREE, 10)
    with pytest.raises(PolyspecInputError, match="law"):
        simulate_residual_tree(c.trees[0], c.laws[0], 10)

