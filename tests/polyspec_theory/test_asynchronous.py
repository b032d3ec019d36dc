"""AS0–AS4 (docs/theory.md Part VI-AS): the asynchronous pipeline's exact two-level rate, its
reductions, bound pair and async/sync ratio bounds."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import (
    MAX_VERIFY_TOKENS,
    READY_WINDOW,
    Cascade,
    PolyspecInputError,
    async_bounds,
    async_rules,
    lookahead_threshold,
    predict,
    predict_async,
    sync_ratio_bounds,
)


def _cfg(t_base, t_slope, c, law, theta, queue=None, overhead=0.0):
    cfg = {"models": [{"name": "target", "cost": {"base": t_base, "per_token": t_slope},
                       "overhead": overhead},
                      {"name": "draft", "cost": c}],
           "acceptance": [law], "thresholds": [theta], "mode": "async"}
    if queue is not None:
        cfg["queue"] = [queue]
    return Cascade.from_config(cfg)


laws = st.one_of(
    st.floats(0.0, 0.98).map(lambda a: {"alpha": a}),
    st.lists(st.floats(0.05, 0.99), min_size=1, max_size=4).map(lambda a: {"positional": a}),
    st.tuples(st.floats(0.5, 8.0), st.floats(0.5, 4.0)).map(lambda ab: {"beta": list(ab)}),
)
cascades = st.builds(
    _cfg, st.floats(0.5, 3.0), st.floats(0.0, 0.2), st.floats(0.02, 1.5), laws,
    st.integers(0, 8), st.none(), st.floats(0.0, 0.3))


@settings(max_examples=60, deadline=None)
@given(cascades)
def test_exact_inside_bound_pair(cas):
    """AS3 bounds contain the AS1 value."""
    p = predict_async(cas)
    lo, hi = async_bounds(cas)
    assert p.exact
    assert lo <= p.speedup * (1 + 1e-12) and p.speedup <= hi * (1 + 1e-12)
    assert abs(p.ready_pmf.sum() - 1.0) < 1e-12


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 0.2), st.floats(0.02, 1.5), laws,
       st.integers(1, 8), st.floats(0.0, 0.3))
def test_ratio_to_sync_inside_as4(t_base, slope, c, law, theta, over):
    """AS4: async / sync lies in the two-sided bound; the sync side is P1 (independent).
    AS4 covers the drafters that make at most theta + 1 drafts per verify (every verify then
    checks theta drafts); outside it there is no bound (None)."""
    cas = _cfg(t_base, slope, c, law, theta, None, over)
    t = t_base + slope * theta + over
    bounds = sync_ratio_bounds(cas)
    if abs(t / c - round(t / c)) < 1e-6:
        return  # a tie: covered by the tie tests (tests/simulators/test_async_reference.py)
    if math.ceil(t / c) > theta + 1:
        assert bounds is None
        return
    lo, hi = bounds
    assert predict_async(cas).levels[0].mean_checked == pytest.approx(theta)
    r = predict_async(cas).speedup / predict(cas).speedup
    assert lo * (1 - 1e-12) <= r <= hi * (1 + 1e-12)
    assert hi > 1.0


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 0.2), st.floats(0.02, 1.5), laws,
       st.integers(1, 8), st.floats(0.0, 0.3))
def test_synchronous_limit_queue_equals_threshold(t_base, slope, c, law, theta, over):
    """AS2.3: queue = threshold reproduces P1 exactly."""
    cas = _cfg(t_base, slope, c, law, theta, theta, over)
    assert predict_async(cas).speedup == pytest.approx(predict(cas).speedup, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 0.2), st.floats(0.0, 1.5), laws,
       st.floats(0.0, 0.3))
def test_one_level_is_autoregressive(t_base, slope, c, law, over):
    """AS2.1: threshold 0 and queue 0: T_1(1) + o_1 per token."""
    p = predict_async(_cfg(t_base, slope, c, law, 0, 0, over))
    assert p.time_per_token == pytest.approx(t_base + over, rel=1e-12)
    assert p.levels[0].mean_checked == 0.0


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(0.0, 0.2), laws, st.integers(1, 8), st.floats(0.0, 0.3))
def test_free_drafter(t_base, slope, law, theta, over):
    """AS2.2: a drafter of cost 0 with queue = threshold gives P1 with a free drafter."""
    cas = _cfg(t_base, slope, 0.0, law, theta, theta, over)
    s = cas.laws[0].survival(theta)
    want = t_base * float(np.sum(s)) / (t_base + slope * theta + over)
    assert predict_async(cas).speedup == pytest.approx(want, rel=1e-12)
    assert predict(cas).speedup == pytest.approx(want, rel=1e-12)


def _deterministic_rate(T, c, r_run, wait, window):
    """Independent event-by-event run of the two-level protocol when every verify accepts
    exactly ``r_run`` drafts before a rejection (exact rational arithmetic): the run is
    eventually periodic in the drafts ready at a sync; tokens per unit time over one period."""
    now = Fraction(0)
    ready = 0  # drafts past the verifier's prefix, drafter at a step boundary
    out = 0
    seen = {}
    while ready not in seen:
        seen[ready] = (now, out)
        while ready < wait:
            now += c
            ready += 1
        m = min(ready, window)
        steps = math.ceil(Fraction(T(m + 1)) / c)  # drafts finished by the sync
        now = now + steps * c
        ready += steps
        out += min(r_run, m) + 1
        if r_run >= m + 1:  # all accepted, and the drafter's next draft is the bonus
            ready -= m + 1
        else:
            ready = 0
    t0, o0 = seen[ready]
    return Fraction(out - o0) / (now - t0)


@pytest.mark.parametrize("r_run,wait,base,slope,c", [
    (2, 0, Fraction(257, 10), Fraction(1, 10), Fraction(118, 10)),
    (5, 0, Fraction(3), Fraction(1, 4), Fraction(7, 10)),
    (3, 3, Fraction(3), Fraction(1, 4), Fraction(7, 10)),
    (1, 2, Fraction(2), Fraction(0), Fraction(9, 10)),
    (50, 0, Fraction(5), Fraction(1, 3), Fraction(1)),
])
def test_deterministic_acceptance_matches_event_run(r_run, wait, base, slope, c):
    """AS1 against an independent exact event run: positional hazards 1, …, 1, 0."""
    law = {"positional": [1.0] * r_run + [0.0]}
    cas = _cfg(float(base), float(slope), float(c), law, wait)
    rule = async_rules(cas)[0]

    def T(m):
        return base + slope * (m - 1)

    rate = _deterministic_rate(T, c, r_run, rule.wait, rule.window)
    p = predict_async(cas)
    assert p.time_per_token == pytest.approx(float(1 / rate), rel=1e-9)


def test_pipespec_rules():
    """AS0 (decoding.py): verify once lookahead - 1 drafts are ready, check every ready
    draft up to the verify cap (max_verify_tokens = 100: 99 drafts), or the queue."""
    r0 = async_rules(_cfg(1.0, 0.0, 0.1, {"alpha": 0.5}, 0))[0]
    r3 = async_rules(_cfg(1.0, 0.0, 0.1, {"alpha": 0.5}, 3))[0]
    r3q = async_rules(_cfg(1.0, 0.0, 0.1, {"alpha": 0.5}, 3, 7))[0]
    assert (r0.wait, r0.window, r0.queue) == (0, 99, None)
    assert (r3.wait, r3.window, r3.queue) == (3, 99, None)
    assert (r3q.wait, r3q.window, r3q.queue) == (3, 7, 7)
    assert MAX_VERIFY_TOKENS == 100 and READY_WINDOW == 99
    assert [lookahead_threshold(k) for k in (0, 1, 2, 5, 100)] == [0, 0, 1, 4, 99]
    for bad in (-1, 101, 2.5, True, "3"):
        with pytest.raises(PolyspecInputError) as e:
            lookahead_threshold(bad)
        assert e.value.field == "lookahead"


def test_more_levels_exact_where_as7_is_small_else_bounds():
    """n >= 3: AS7's exact value (inside AS3's bounds) where its chain is small; costs whose
    lattice is too fine for it (17 significant digits) give the bounds alone, not exact."""
    from polyspec_theory.pipelines.async_exact import exact_async

    cfg = {"models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.2},
                      {"name": "c", "cost": 0.05}],
           "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [0, 2],
           "mode": "async"}
    cas = Cascade.from_config(cfg)
    p = predict_async(cas)
    assert p.exact and p.speedup == exact_async(cas).speedup
    lo, hi = p.bounds
    assert lo < p.speedup < hi and len(p.levels) == 3
    cfg["models"][2]["cost"] = 0.01234567891234567
    p = predict_async(Cascade.from_config(cfg))
    assert p.speedup is None and not p.exact and p.levels == ()
    lo, hi = p.bounds
    assert 0 < lo < hi


@pytest.mark.parametrize("patch,field", [
    ({"trees": [{"parents": [-1, 0, 0]}]}, "trees"),
    ({"queue": [1]}, "queue[0]"),
    ({"queue": [2, 3]}, "queue"),
    ({"queue": [-1]}, "queue[0]"),
    ({"mode": "pipelined"}, "mode"),
    ({"mode": "sync", "queue": [4]}, "queue"),
    ({"thresholds": [-1]}, "thresholds[0]"),
])
def test_bad_async_config(patch, field):
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.1}],
           "acceptance": [{"alpha": 0.8}], "thresholds": [2], "mode": "async", **patch}
    with pytest.raises(PolyspecInputError) as e:
        Cascade.from_config(cfg)
    assert e.value.field == field


def test_sync_mode_still_refuses_threshold_zero():
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.1}],
           "acceptance": [{"alpha": 0.8}], "thresholds": [0]}
    with pytest.raises(PolyspecInputError) as e:
        Cascade.from_config(cfg)
    assert e.value.field == "thresholds[0]"


def test_config_round_trip():
    cas = _cfg(1.0, 0.05, 0.1, {"alpha": 0.7}, 3, 5)
    back = Cascade.from_config(cas.to_config())
    assert back.mode == "async" and back.queues == (5,)
    assert predict_async(back).speedup == predict_async(cas).speedup


def test_a_verify_that_frees_the_drafter_needs_a_queue_bound():
    """T_1(2) = 1e30 against a drafter step of 0.27: at D = 1 the drafter is free (its queue
    grows without bound), so the unbounded-queue chain has unboundedly many states: a clear
    refusal naming ``queue`` (was an OverflowError), and with a queue the chain is solved."""
    from polyspec_theory import Cascade, predict_async
    from polyspec_theory.errors import PolyspecInputError

    cfg = {"models": [{"name": "t", "cost": {"table": [1.0, 1e30, 1.2, 1.3]}},
                      {"name": "d", "cost": 0.27}],
           "acceptance": [{"alpha": 0.8}], "thresholds": [3], "mode": "async"}
    with pytest.raises(PolyspecInputError) as e:
        predict_async(Cascade.from_config(cfg))
    assert e.value.field == "queue" and "unboundedly many" in str(e.value)
    bounded = predict_async(Cascade.from_config({**cfg, "queue": [8]}))
    lo, hi = bounded.bounds
    assert 0 < bounded.speedup and lo <= bounded.speedup <= hi
