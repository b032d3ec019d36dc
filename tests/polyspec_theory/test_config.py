"""Cascade configuration files: parsing, round trip, and errors that name the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import PolyspecInputError
from polyspec_theory.core.config import DEFAULT_CASCADE, MAX_THRESHOLD, Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

ISSUE_EXAMPLE = {
    "models": [
        {"name": "target", "cost": 1.0},
        {"name": "draft", "cost": {"base": 0.02, "per_token": 0.0}},
    ],
    "acceptance": [{"alpha": 0.75}],
    "thresholds": [7],
}


def test_issue_example_parses():
    c = Cascade.from_config(ISSUE_EXAMPLE)
    assert c.n == 2 and c.thresholds == (7,) and c.policy == "accumulate"
    assert c.laws == (IIDGeometric(0.75),)
    assert c.models[0] == Model("target", CostCurve.constant(1.0))
    assert c.costs[1](5) == 0.02


@pytest.mark.parametrize("path", [CONFIGS / "default.json", CONFIGS / "dualistic.json"],
                         ids=lambda p: p.name)
def test_shipped_configs_parse_and_round_trip(path):
    cfg = json.loads(path.read_text())
    c = Cascade.from_config(cfg)
    assert c.n == len(cfg["models"]) and c.name == cfg.get("name", "cascade")
    again = Cascade.from_config(json.loads(json.dumps(c.to_config())))
    assert again == c


positive = st.floats(1e-3, 10.0)
nonneg = st.floats(0.0, 10.0)
costs = st.one_of(
    nonneg,
    st.builds(lambda b, k: {"base": b, "per_token": k}, nonneg, nonneg),
    st.lists(nonneg, min_size=1, max_size=5).map(lambda t: {"table": t}),
)
laws = st.one_of(
    st.floats(0.0, 1.0).map(lambda a: {"alpha": a}),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4).map(lambda p: {"positional": p}),
    st.tuples(positive, positive).map(lambda ab: {"beta": list(ab)}),
)


@st.composite
def configs(draw):
    n = draw(st.integers(2, 5))
    models = [{"name": "target", "cost": draw(positive)}]
    models += [{"name": f"m{i}", "cost": draw(costs)} for i in range(1, n)]
    cfg = {
        "models": models,
        "acceptance": [draw(laws) for _ in range(n - 1)],
        "thresholds": [draw(st.integers(1, 64)) for _ in range(n - 1)],
    }
    if draw(st.booleans()):
        cfg["policy"] = draw(st.sampled_from(["accumulate", "truncate"]))
    if draw(st.booleans()):
        cfg["name"] = draw(st.text(min_size=1, max_size=10))
    return cfg


@settings(derandomize=True, deadline=None, max_examples=100)
@given(cfg=configs())
def test_round_trip(cfg):
    c = Cascade.from_config(cfg)
    out = c.to_config()
    again = Cascade.from_config(json.loads(json.dumps(out)))
    assert again == c
    assert again.to_config() == out
    assert c.policy == cfg.get("policy", "accumulate")
    for i, law in enumerate(c.laws):
        assert law.to_config() == cfg["acceptance"][i] or isinstance(law, (BetaMixed, Positional))


def _with(path, value):
    """ISSUE_EXAMPLE with the item at ``path`` (keys/indices) replaced or, for DELETE, removed."""
    cfg = copy.deepcopy(ISSUE_EXAMPLE)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return cfg


DELETE = object()
NAN = float("nan")

BAD = [
    # missing or misspelled fields
    (_with(("models",), DELETE), "models"),
    (_with(("acceptance",), DELETE), "acceptance"),
    (_with(("thresholds",), DELETE), "thresholds"),
    ({**ISSUE_EXAMPLE, "threshold": [7]}, "threshold"),
    ({**ISSUE_EXAMPLE, "polcy": "truncate"}, "polcy"),
    (_with(("models", 1, "cost"), DELETE), "models[1].cost"),
    (_with(("models", 1, "name"), DELETE), "models[1].name"),
    (_with(("models", 1, "cots"), 0.1), "models[1].cots"),
    (_with(("models", 1, "cost"), {"base": 0.02, "per_tokens": 0.0}),
     "models[1].cost.per_tokens"),
    (_with(("acceptance", 0), {"alpah": 0.7}), "acceptance[0].alpah"),
    (_with(("acceptance", 0), {"bета": [1, 2]}), "acceptance[0].bета"),
    # wrong counts and shapes
    (_with(("thresholds",), [7, 3]), "thresholds"),
    (_with(("thresholds",), []), "thresholds"),
    (_with(("thresholds",), 7), "thresholds"),
    (_with(("acceptance",), [{"alpha": 0.7}, {"alpha": 0.6}]), "acceptance"),
    (_with(("acceptance",), {"alpha": 0.7}), "acceptance"),
    (_with(("models",), [{"name": "target", "cost": 1.0}]), "models"),
    (_with(("models",), "target,draft"), "models"),
    (_with(("acceptance", 0), {"beta": [1.0]}), "acceptance[0].beta"),
    # NaN and out-of-range values
    (_with(("acceptance", 0, "alpha"), NAN), "acceptance[0].alpha"),
    (_with(("acceptance", 0, "alpha"), 1.2), "acceptance[0].alpha"),
    (_with(("acceptance", 0, "alpha"), -0.1), "acceptance[0].alpha"),
    (_with(("acceptance", 0), {"positional": [0.9, 1.1]}), "acceptance[0].positional"),
    (_with(("acceptance", 0), {"beta": [1.0, -1.0]}), "acceptance[0].beta[1]"),
    (_with(("models", 0, "cost"), NAN), "models[0].cost"),
    (_with(("models", 1, "cost"), -0.02), "models[1].cost"),
    (_with(("models", 1, "cost"), {"base": -0.02}), "models[1].cost.base"),
    (_with(("models", 1, "cost"), {"table": [0.1, NAN]}), "models[1].cost.table"),
    (_with(("models", 0, "cost"), 0.0), "models[0].cost"),
    (_with(("models", 0, "cost"), {"table": [0.0, 1.0]}), "models[0].cost"),
    (_with(("thresholds", 0), 0), "thresholds[0]"),
    (_with(("thresholds", 0), -3), "thresholds[0]"),
    (_with(("thresholds", 0), 2.5), "thresholds[0]"),
    (_with(("thresholds", 0), NAN), "thresholds[0]"),
    (_with(("thresholds", 0), MAX_THRESHOLD + 1), "thresholds[0]"),
    # other fields
    (_with(("models", 1, "name"), ""), "models[1].name"),
    (_with(("models", 1, "name"), "target"), "models"),
    ({**ISSUE_EXAMPLE, "policy": "greedy"}, "policy"),
    ({**ISSUE_EXAMPLE, "name": 3}, "name"),
    ([ISSUE_EXAMPLE], "config"),
]


@pytest.mark.parametrize(("cfg", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_config_names_the_field(cfg, field):
    with pytest.raises(PolyspecInputError) as err:
        Cascade.from_config(cfg)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")
    assert "\n" not in str(err.value)  # the CLI prints it on one line


def test_free_drafter_is_allowed():
    c = Cascade.from_config(_with(("models", 1, "cost"), 0.0))
    assert c.costs[1].t1 == 0.0
    c = Cascade.from_config(_with(("models", 1, "cost"), {"table": [0.0, 0.0]}))
    assert c.costs[1](3) == 0.0


def test_cascade_constructor_checks():
    models = (Model("t", CostCurve.constant(1.0)), Model("d", CostCurve.constant(0.1)))
    c = Cascade(models, (IIDGeometric(0.5),), (3,))
    assert c.with_thresholds([5]).thresholds == (5,)
    with pytest.raises(PolyspecInputError) as err:
        c.with_thresholds([0])
    assert err.value.field == "thresholds[0]"
    with pytest.raises(PolyspecInputError) as err:
        Cascade(models, ({"alpha": 0.5},), (3,))
    assert err.value.field == "acceptance[0]"
    with pytest.raises(PolyspecInputError) as err:
        Cascade(models, (IIDGeometric(0.5),), (3,), policy="fifo")
    assert err.value.field == "policy"


def test_default_cascade_constant_is_configs_default_json():
    cfg = json.loads((CONFIGS / "default.json").read_text())
    cfg.pop("description")
    assert cfg == DEFAULT_CASCADE
    assert Cascade.from_config(DEFAULT_CASCADE).n == 4
