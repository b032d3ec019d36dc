"""Serving-batch cost curves T(b, m) (B0): batch_table rows interpolated linearly in b, each
row extended like a table; roofline o + max(w + k b, c b m); config parsing and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError
from polyspec_theory.core.costs import BatchTableCost, CostCurve, RooflineCost, cost_from_config
from polyspec_theory.planning.pool import Pool

PROPS = settings(derandomize=True, deadline=None, max_examples=80)
rows = st.lists(st.floats(0.0, 10.0), min_size=1, max_size=6)


@PROPS
@given(o=st.floats(0.0, 1.0), w=st.floats(0.0, 5.0), c=st.floats(1e-3, 1.0),
       k=st.floats(0.0, 0.1), b=st.integers(1, 4096), m=st.integers(1, 20000))
def test_roofline_at_batch_is_exact_everywhere(o, w, c, k, b, m):
    r = RooflineCost(overhead=o, weight_time=w, compute_time=c, kv_time=k)
    want = o + max(w + k * b, c * b * m)
    assert r.at_batch(b)(m) == pytest.approx(want, rel=1e-12)
    assert r.exact(b, m) == pytest.approx(want, rel=1e-15)
    assert r(m) == pytest.approx(o + max(w + k, c * m), rel=1e-12)  # single stream = b 1
    assert r.knee(b) == pytest.approx((w + k * b) / (c * b), rel=1e-12)


def test_roofline_compute_free_is_constant_and_knee_guard():
    r = cost_from_config({"roofline": {"weight_time": 2.0, "compute_time": 0.0}})
    assert r.kind == "roofline" and r(1) == 2.0 and r(1000) == 2.0
    assert r.at_batch(64)(7) == 2.0
    with pytest.raises(PolyspecInputError, match=r"^cost.roofline.compute_time:"):
        cost_from_config({"roofline": {"weight_time": 1.0, "compute_time": 1e-9}})


@PROPS
@given(r1=rows, r8=rows, r32=rows, b=st.integers(1, 32), m=st.integers(1, 30))
def test_batch_table_interpolation(r1, r8, r32, b, m):
    c = BatchTableCost({"1": r1, "8": r8, "32": r32})
    ext = {1: CostCurve.from_table(r1), 8: CostCurve.from_table(r8),
           32: CostCurve.from_table(r32)}
    assert c(m) == ext[1](m)  # the single-stream curve is row 1, extended as a table
    if b in ext:
        want = ext[b](m)
    else:
        lo, hi = (1, 8) if b < 8 else (8, 32)
        w = (b - lo) / (hi - lo)
        want = (1 - w) * ext[lo](m) + w * ext[hi](m)
    assert c.at_batch(b)(m) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert c.at_batch(b)(m) >= 0.0


def test_batch_table_config_errors_name_the_field():
    f = "models[0].cost"
    cases = [
        ({"batch_table": {"1": [1.0], "8": [1.0, 2.0, -1.0]}},
         r'^models\[0\]\.cost\.batch_table\["8"\]\[2\]: must be >= 0.0, got -1.0'),
        ({"batch_table": {"1": [1.0], "8": [1.0, "x"]}},
         r'^models\[0\]\.cost\.batch_table\["8"\]\[1\]: must be a number'),
        ({"batch_table": {"8": [1.0]}}, r'^models\[0\]\.cost\.batch_table: must list batch '
                                        r'size "1"'),
        ({"batch_table": {"1": [1.0], "two": [1.0]}},
         r'^models\[0\]\.cost\.batch_table\["two"\]: key must be a batch size'),
        ({"batch_table": {"1": [1.0], "0": [1.0]}},
         r'^models\[0\]\.cost\.batch_table\["0"\]: must be >= 1'),
        ({"batch_table": {"1": []}}, r'^models\[0\]\.cost\.batch_table\["1"\]: must list'),
        ({"batch_table": {"1": 3.0}}, r'^models\[0\]\.cost\.batch_table\["1"\]: must be a list'),
        ({"batch_table": []}, r"^models\[0\]\.cost\.batch_table: must be a non-empty object"),
        ({"batch_table": {"1": [1.0]}, "table": [1.0]},
         r"^models\[0\]\.cost\.table: unknown field"),
        ({"roofline": {"weight_time": 1.0}},
         r"^models\[0\]\.cost\.roofline\.compute_time: missing required field"),
        ({"roofline": {"weight_time": 1.0, "compute_time": 0.1, "overhaed": 0.1}},
         r"^models\[0\]\.cost\.roofline\.overhaed: unknown field \(did you mean 'overhead'"),
        ({"roofline": {"weight_time": -1.0, "compute_time": 0.1}},
         r"^models\[0\]\.cost\.roofline\.weight_time: must be >= 0.0"),
        ({"roofline": [1, 2]}, r"^models\[0\]\.cost\.roofline: must be an object"),
    ]
    for spec, pat in cases:
        with pytest.raises(PolyspecInputError, match=pat):
            cost_from_config(spec, f)
    c = cost_from_config({"batch_table": {"1": [1.0], "4": [2.0]}}, f)
    with pytest.raises(PolyspecInputError, match=r'^models\[0\]\.cost\.batch_table: batch 5 '):
        c.at_batch(5)
    with pytest.raises(PolyspecInputError, match="^batch:"):
        c.at_batch(0)


def test_round_trip_scaled_and_configs():
    specs = [{"batch_table": {"1": [1.0, 1.1], "16": [1.5, 2.5]}},
             {"roofline": {"overhead": 0.1, "weight_time": 1.0, "compute_time": 0.01,
                           "kv_time": 0.002}}]
    for spec in specs:
        c = cost_from_config(spec)
        assert cost_from_config(c.to_config()) == c
        s = c.scaled(2.0)
        assert type(s) is type(c)
        assert s.at_batch(16)(5) == pytest.approx(2 * c.at_batch(16)(5))
    cas = Cascade.from_config({"models": [{"name": "t", "cost": specs[1]},
                                          {"name": "d", "cost": specs[0]}],
                               "acceptance": [{"alpha": 0.7}], "thresholds": [3]})
    assert Cascade.from_config(cas.to_config()).to_config() == cas.to_config()
    pool = Pool.from_config({"models": [{"name": "t", "cost": specs[1]},
                                        {"name": "d", "cost": specs[0]}],
                             "acceptance": {"t|d": {"alpha": 0.7}}})
    assert isinstance(pool.models[0].cost, RooflineCost)
    np.testing.assert_allclose(pool.models[1].cost(np.arange(1, 4)), [1.0, 1.1, 1.2])
