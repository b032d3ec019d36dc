"""P1 with trees and schedules (docs/theory.md Part III-D T5, A4): the engine equals P1 on every
plain chain, every structure reduces to the chain it generalizes (path tree, fixed-length HF
schedule at any level, confidence cut-off at eta = 0), two-model structures equal their
closed forms, and configs round-trip and reject bad input naming the field."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.core.config import DEFAULT_CASCADE, Cascade
from polyspec_theory.schemes import predict
from polyspec_theory.structures.pairs import has_structures
from polyspec_theory.structures.schedule import ConfidenceLaw
from polyspec_theory.structures.schedule_models import confidence_two_model, hf_two_model
from polyspec_theory.structures.structured import (
    explain_structured,
    predict_structured,
    structured_report,
)
from polyspec_theory.structures.tree_search import tree_speedup
from polyspec_theory.structures.trees import SiblingLaw, Tree

LAW_SPECS = st.one_of(
    st.builds(lambda a: {"alpha": a}, st.floats(0.05, 0.97)),
    st.builds(lambda xs: {"positional": xs}, st.lists(st.floats(0.05, 0.97), min_size=1,
                                                      max_size=3)),
    st.builds(lambda a, b: {"beta": [a, b]}, st.floats(0.5, 8.0), st.floats(0.5, 3.0)),
    st.builds(lambda m, s: {"gaussian": [m, s]}, st.floats(0.0, 4.0), st.floats(0.5, 2.0)),
    st.builds(lambda p1, p2: {"sibling": [p1, p2 * (1 - p1)]}, st.floats(0.05, 0.95),
              st.floats(0.0, 1.0)),
)
COSTS = st.one_of(st.floats(0.001, 1.0),
                  st.builds(lambda b, k: {"base": b, "per_token": k}, st.floats(0.001, 1.0),
                            st.floats(0.0, 0.05)),
                  st.builds(lambda t: {"table": t}, st.lists(st.floats(0.01, 1.0), min_size=1,
                                                             max_size=4)))


@st.composite
def chain_configs(draw, n_min=2, n_max=4):
    n = draw(st.integers(n_min, n_max))
    models = [{"name": "m0", "cost": draw(st.builds(lambda b, k: {"base": b, "per_token": k},
                                                    st.floats(0.5, 2.0), st.floats(0.0, 0.1)))}]
    models += [{"name": f"m{i}", "cost": draw(COSTS)} for i in range(1, n)]
    return {"models": models,
            "acceptance": [draw(LAW_SPECS) for _ in range(n - 1)],
            "thresholds": [draw(st.integers(1, 6)) for _ in range(n - 1)],
            "policy": draw(st.sampled_from(["accumulate", "truncate"]))}


def _assert_same(pa, pb, rtol=1e-10):
    assert pa.speedup == pytest.approx(pb.speedup, rel=rtol)
    for a, b in zip(pa.levels, pb.levels, strict=True):
        assert (a.phi is None) == (b.phi is None)
        if a.phi is not None:
            assert a.phi == pytest.approx(b.phi, rel=rtol)
        for name in ("mean_emitted", "round_cost", "tau", "forwards_per_token", "forward_cost",
                     "time_per_token", "time_share"):
            assert getattr(a, name) == pytest.approx(getattr(b, name), rel=rtol, abs=1e-14), name
        if a.block_pmf is not None:
            x, y = np.trim_zeros(a.block_pmf, "b"), np.trim_zeros(b.block_pmf, "b")
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-13)
            np.testing.assert_allclose(np.trim_zeros(a.emitted_pmf, "b"),
                                       np.trim_zeros(b.emitted_pmf, "b"), rtol=1e-9, atol=1e-13)


@settings(max_examples=60, deadline=None)
@given(chain_configs())
def test_engine_equals_p1_on_plain_chains(cfg):
    c = Cascade.from_config(cfg)
    _assert_same(predict_structured(c).prediction, predict(c))


@settings(max_examples=40, deadline=None)
@given(chain_configs(), st.data())
def test_each_structure_reduces_to_its_chain(cfg, data):
    c = Cascade.from_config(cfg)
    ref = predict(c)
    m = c.n - 1
    # a path tree at the bottom pair = its chain
    path = copy.deepcopy(cfg)
    path["trees"] = [None] * (m - 1) + [{"parents": [-1, *range(cfg["thresholds"][-1])]}]
    _assert_same(predict(Cascade.from_config(path)), ref)
    # an HF schedule with min = max = theta at any pair = the fixed threshold
    i = data.draw(st.integers(0, m - 1))
    hf = copy.deepcopy(cfg)
    th = cfg["thresholds"][i]
    hf["schedules"] = [None] * m
    hf["schedules"][i] = {"kind": "hf", "start": th, "min": th, "max": th}
    hf["thresholds"][i] = 99  # ignored
    _assert_same(predict(Cascade.from_config(hf)), ref)


@settings(max_examples=25, deadline=None)
@given(chain_configs(), st.floats(1.0, 6.0), st.floats(0.5, 3.0), st.floats(-1.0, 1.0),
       st.floats(0.0, 2.0))
def test_confidence_cutoff_at_zero_is_the_chain(cfg, a, b, b0, b1):
    law = ConfidenceLaw([a, b], [b0, b1])
    conf = copy.deepcopy(cfg)
    conf["acceptance"][-1] = law.to_config()
    conf["schedules"] = [None] * (len(cfg["models"]) - 2) + [{"kind": "confidence",
                                                               "eta": 0.0}]
    chain = copy.deepcopy(cfg)
    chain["acceptance"][-1] = {"alpha": law.alpha}
    _assert_same(predict(Cascade.from_config(conf)), predict(Cascade.from_config(chain)),
                 rtol=1e-9)


TWO = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                  {"name": "d", "cost": 0.05}],
       "acceptance": [{"alpha": 0.75}], "thresholds": [4]}


def test_two_model_structures_equal_their_closed_forms():
    t = TWO["models"][0]["cost"]
    tree = {**TWO, "acceptance": [{"sibling": [0.6, 0.2, 0.1]}],
            "trees": [{"parents": [-1, 0, 0, 0, 1, 1, 2, 4]}]}
    s = predict(Cascade.from_config(tree)).speedup
    assert s == pytest.approx(tree_speedup(Tree(tree["trees"][0]["parents"]),
                                           SiblingLaw([0.6, 0.2, 0.1]), t, 0.05), rel=1e-13)
    sch = {"kind": "hf", "start": 5, "min": 1, "max": 12}
    hf = {**TWO, "schedules": [sch]}
    sp = predict_structured(Cascade.from_config(hf))
    ref = hf_two_model({"alpha": 0.75}, sch, t, 0.05)
    assert sp.speedup == pytest.approx(ref.speedup, rel=1e-12)
    np.testing.assert_allclose(sp.pairs[0]["length_distribution"], ref.stationary, atol=1e-13)
    assert sp.pairs[0]["mean_length"] == pytest.approx(ref.mean_length, rel=1e-12)
    law = {"confidence": {"beta": [3.0, 1.2], "logistic": [0.3, 1.1]}}
    conf = {**TWO, "acceptance": [law], "schedules": [{"kind": "confidence", "eta": 0.6,
                                                       "max": 8}]}
    s = predict(Cascade.from_config(conf)).speedup
    assert s == pytest.approx(confidence_two_model(law, 0.6, 8, t, 0.05), rel=1e-12)


def test_finite_horizon_converges_to_the_stationary_speedup():
    hf = {**TWO, "schedules": [{"kind": "hf", "start": 12, "min": 1, "max": 12}]}
    sp = predict_structured(Cascade.from_config(hf))
    short = sp.finite_horizon(0, 5)["speedup"]
    long = sp.finite_horizon(1500, 400)["speedup"]  # |lambda_2| = 0.984 here
    assert abs(short - sp.speedup) > 1e-3  # starting at the top length: a transient
    assert long == pytest.approx(sp.speedup, rel=1e-12)


def test_hf_at_an_upper_level_changes_the_block_law():
    cfg = copy.deepcopy(DEFAULT_CASCADE)
    cfg["schedules"] = [{"kind": "hf", "start": 8, "min": 2, "max": 12}, None, None]
    sp = predict_structured(Cascade.from_config(cfg))
    occ = np.array(sp.pairs[0]["length_distribution"])
    assert occ.sum() == pytest.approx(1.0) and (occ > 0).sum() > 5
    assert sp.prediction.levels[1].phi != predict(Cascade.from_config(DEFAULT_CASCADE)).levels[
        1].phi


# --- config --------------------------------------------------------------------------------------


def test_config_round_trip_with_trees_and_schedules():
    cfg = copy.deepcopy(DEFAULT_CASCADE)
    cfg["acceptance"][2] = {"sibling": [[0.7, 0.2], [0.6, 0.1]]}
    cfg["trees"] = [None, None, {"parents": [-1, 0, 0, 1, 1, 2]}]
    cfg["schedules"] = [{"kind": "hf", "start": 5, "min": 1, "max": 16}, None, None]
    c = Cascade.from_config(cfg)
    assert has_structures(c) and isinstance(c.trees[2], Tree)
    out = c.to_config()
    assert out["trees"] == cfg["trees"] and out["schedules"] == cfg["schedules"]
    again = Cascade.from_config(json.loads(json.dumps(out)))
    assert again == c
    assert c.with_thresholds((9, 4, 2)).trees == c.trees
    plain = Cascade.from_config({**DEFAULT_CASCADE, "trees": [None, None, None]})
    assert not has_structures(plain) and plain.to_config()["trees"] == [None, None, None]
    rep = structured_report(c)
    assert rep["pairs"][0]["kind"] == "hf" and rep["pairs"][2]["kind"] == "tree"
    text = explain_structured(c, predict_structured(c))
    assert "HF schedule" in text and "tree of 5 nodes" in text


BAD = [
    ({"trees": [None, {"parents": [-1, 0, 1, 5]}, None]}, "trees[1].parents[3]"),
    ({"trees": [None, None, {"parents": [-1, 0, 1, 5]}]}, "trees[2].parents[3]"),
    ({"trees": [None, None]}, "trees"),
    ({"trees": {"parents": [-1, 0]}}, "trees"),
    ({"trees": [{"parents": [-1, 0]}, None, None]}, "trees[0]"),
    ({"trees": [None, None, {"parents": [-1, 0, 0]}]}, "acceptance[2]"),
    ({"trees": [None, None, {"parents": [-1, 0]}],
      "schedules": [None, None, {"kind": "hf", "start": 2, "max": 4}]}, "schedules[2]"),
    ({"trees": [None, None, {"parent": [-1, 0]}]}, "trees[2].parent"),
    ({"schedules": [{"kind": "confidence", "eta": 0.5}, None, None]}, "schedules[0]"),
    ({"schedules": [None, None, {"kind": "confidence", "eta": 0.5}]}, "acceptance[2]"),
    ({"schedules": [None, None, {"kind": "hf", "start": 0, "max": 4}]}, "schedules[2].start"),
    ({"schedules": [{"kind": "hf", "start": 2, "max": 64}, {"kind": "hf", "start": 2,
                                                             "max": 64}, None]}, "schedules"),
]


@pytest.mark.parametrize("patch, where", BAD)
def test_config_errors_name_the_field(patch, where):
    cfg = {**copy.deepcopy(DEFAULT_CASCADE), **patch}
    with pytest.raises(PolyspecInputError) as e:
        Cascade.from_config(cfg)
    assert e.value.field == where, e.value


def test_bad_tree_law_in_config_names_the_field():
    cfg = copy.deepcopy(DEFAULT_CASCADE)
    cfg["acceptance"][2] = {"sibling": [0.8, 0.3]}
    with pytest.raises(PolyspecInputError) as e:
        Cascade.from_config(cfg)
    assert e.value.field == "acceptance[2].sibling"
