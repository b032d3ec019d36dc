"""AS7 (docs/theory.md Part VI-AS): the exact rate of an asynchronous pipeline of any depth
against AS1 (two levels), an independent event-by-event Markov chain written from AS7's rules
(three and four levels, small lattices), AS3's bounds, and its refusals."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import Cascade, PolyspecInputError, async_bounds, predict_async
from polyspec_theory.pipelines.async_exact import ChainTooLarge, async_lattice, exact_async


def _cas(costs, alphas, thresholds, queue=None, overhead=None):
    models = [{"name": f"m{j}", "cost": c} for j, c in enumerate(costs)]
    for j, o in enumerate(overhead or []):
        models[j]["overhead"] = o
    cfg = {"models": models, "acceptance": [{"alpha": a} for a in alphas],
           "thresholds": list(thresholds), "mode": "async"}
    if queue is not None:
        cfg["queue"] = list(queue)
    return Cascade.from_config(cfg)


ISSUE = _cas([1.0, 0.3, 0.05], [0.8, 0.7], [2, 3])


# ---------------------------------------------------------------------------------------
# An independent computation: AS7's rules event by event, one state per event (no embedding,
# no merged outcomes), states as tuples, exact integer ticks from the decimals, a dense solve.
def _ticks(cas, window):
    """Integer ticks of every verify (per level, per m) and of the draft step."""
    vals = []
    for j in range(cas.n - 1):
        c = cas.models[j].cost
        base, slope = Fraction(repr(c.base)), Fraction(repr(c.per_token))
        over = Fraction(repr(cas.models[j].overhead))
        vals.append([base + slope * m + over for m in range(window[j] + 1)])
    draft = Fraction(repr(cas.models[-1].cost.t1))
    den = math.lcm(*(v.denominator for row in vals for v in row), draft.denominator)
    g = math.gcd(*(int(v * den) for row in vals for v in row), int(draft * den))
    unit = Fraction(g, den)
    return [[int(v / unit) for v in row] for row in vals], int(draft / unit), unit


def _event_chain(cas, max_states=8_000):
    """Time per token of ``cas`` by AS7's rules, per-event chain (independent of
    polyspec_theory.pipelines.async_exact)."""
    n = cas.n
    queue = [None] * (n - 1) if cas.queues is None else list(cas.queues)
    window = [99 if q is None else min(99, q) for q in queue]
    wait = list(cas.thresholds)
    vt, c, unit = _ticks(cas, window)
    surv = [np.asarray(cas.laws[j].survival(window[j] + 2)) for j in range(n - 1)]

    def settle(st, rem, stale, mm, kept, lead):
        st, rem, stale, mm, kept, lead = map(list, (st, rem, stale, mm, kept, lead))
        for j in range(n - 2, -1, -1):  # syncs, bottom-up
            if st[j] == "blocked" and st[j + 1] == "free":
                if kept[j] and lead[j + 1] >= mm[j] + 1:
                    lead[j + 1] -= mm[j] + 1
                else:
                    for i in range(j + 1, n):
                        lead[i] = 0
                    for i in range(j + 2, n):
                        if st[i] == "busy":
                            stale[i] = True
                        elif st[i] == "blocked":
                            st[i], kept[i] = "free", False
                st[j], kept[j] = "free", False
        for j in range(n):  # starts, top-down
            room = j == 0 or queue[j - 1] is None or lead[j] < queue[j - 1]
            if st[j] != "free" or not room:
                continue
            if j == n - 1:
                st[j], rem[j], stale[j] = "busy", c, False
            elif lead[j + 1] >= wait[j]:
                mm[j] = min(lead[j + 1], window[j])
                st[j], rem[j], stale[j] = "busy", vt[j][mm[j]], False
        for j in range(n):
            if st[j] != "busy":
                rem[j], stale[j] = 0, False
            if st[j] == "free":
                mm[j] = 0
            if st[j] == "busy" and stale[j]:
                mm[j] = 0
        return tuple(st), tuple(rem), tuple(stale), tuple(mm), tuple(kept), tuple(lead)

    def successors(state):
        st, rem, stale, mm, kept, lead = state
        busy = [j for j in range(n) if st[j] == "busy"]
        dt = min(rem[j] for j in busy)
        k = min(j for j in busy if rem[j] == dt)  # ties: the highest level first
        rem2 = [rem[j] - dt if st[j] == "busy" else 0 for j in range(n)]
        st2 = list(st)
        st2[k] = "free"
        if stale[k] or k == n - 1:
            lead2 = list(lead)
            if not stale[k]:
                lead2[k] += 1
            stale2 = list(stale)
            stale2[k] = False
            return [(1.0, settle(st2, rem2, stale2, mm, kept, lead2), dt, 0)]
        out = []
        m, s = mm[k], surv[k]
        for r in range(m + 2):
            p = s[r] - s[r + 1] if r <= m else s[m + 1]
            if p <= 0:
                continue
            emitted = min(r, m) + 1
            st3, kept3, lead3 = list(st2), list(kept), list(lead)
            st3[k], kept3[k] = "blocked", r >= m + 1
            if k > 0:
                lead3[k] += emitted
            out.append((p, settle(st3, rem2, stale, mm, kept3, lead3), dt,
                         emitted if k == 0 else 0))
        return out

    z = (0,) * n
    s0 = settle(("free",) * n, z, (False,) * n, z, (False,) * n, z)
    index, order, rows = {s0: 0}, [s0], []
    while len(rows) < len(order):
        succ = successors(order[len(rows)])
        for _, s, _, _ in succ:
            if s not in index:
                index[s] = len(order)
                order.append(s)
        rows.append(succ)
        assert len(order) <= max_states
    N = len(order)
    rows_i, cols_i, vals = [], [], []
    dt = np.zeros(N)
    tok = np.zeros(N)
    for i, succ in enumerate(rows):
        for p, s, d, t in succ:
            rows_i.append(i)
            cols_i.append(index[s])
            vals.append(p)
            dt[i] += p * d
            tok[i] += p * t
    P = sp.csr_matrix((vals, (rows_i, cols_i)), shape=(N, N))
    # the closed class: the strongly connected component no transition leaves
    _, lab = csgraph.connected_components(P, directed=True, connection="strong")
    coo = P.tocoo()
    leaving = set(lab[coo.row[lab[coo.row] != lab[coo.col]]].tolist())
    closed = [c for c in set(lab.tolist()) if c not in leaving]
    assert len(closed) == 1
    cls = np.flatnonzero(lab == closed[0])
    A = (P[cls][:, cls].T - sp.identity(cls.size)).tolil()
    A[cls.size - 1, :] = np.ones(cls.size)
    b = np.zeros(cls.size)
    b[-1] = 1.0
    pi = spla.spsolve(A.tocsc(), b)
    return float(unit) * float(pi @ dt[cls]) / float(pi @ tok[cls])


# ---------------------------------------------------------------------------------------


def test_issue_case_pinned():
    """The issue's 3-level case: the per-event chain (a second computation) and AS7 agree;
    inside AS3's bounds; 2 358 states."""
    ex = exact_async(ISSUE)
    assert ex.time_per_token == pytest.approx(_event_chain(ISSUE, 20_000), rel=1e-9)
    assert ex.speedup == pytest.approx(2.184650322, abs=5e-9)
    assert ex.states == 2358 and ex.tick == Fraction(1, 20)
    lo, hi = async_bounds(ISSUE)
    assert lo < ex.speedup < hi


grid = st.sampled_from([0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5])


@st.composite
def small_cascades(draw, levels=(3,)):
    n = draw(st.sampled_from(levels))
    costs = sorted(draw(st.lists(grid, min_size=n - 1, max_size=n - 1, unique=True)),
                   reverse=True)
    alphas = draw(st.lists(st.floats(0.05, 0.95), min_size=n - 1, max_size=n - 1))
    th = draw(st.lists(st.integers(0, 3), min_size=n - 1, max_size=n - 1))
    queue = None
    if draw(st.booleans()):
        queue = [t + draw(st.integers(0, 3)) for t in th]
    return _cas([1.0] + costs, alphas, th, queue)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(small_cascades(levels=(3, 4)))
def test_equals_the_per_event_chain(cas):
    """AS7 equals the independent per-event chain (3 and 4 levels, queues or not)."""
    try:
        ex = exact_async(cas, max_states=800)
    except PolyspecInputError as e:
        assert e.field == "models"  # too large for this test: the refusal names the field
        return
    assert ex.time_per_token == pytest.approx(_event_chain(cas), rel=1e-9)
    lo, hi = async_bounds(cas)
    assert lo * (1 - 1e-12) <= ex.speedup <= hi * (1 + 1e-12)


two_level = st.builds(
    lambda base, slope, c, law, th, q, over: Cascade.from_config({
        "models": [{"name": "t", "cost": {"base": base, "per_token": slope}, "overhead": over},
                   {"name": "d", "cost": c}],
        "acceptance": [law], "thresholds": [th], "mode": "async",
        **({} if q is None else {"queue": [th + q]})}),
    st.sampled_from([0.5, 1.0, 1.5, 2.0]), st.sampled_from([0.0, 0.01, 0.02, 0.05]),
    st.sampled_from([0.05, 0.07, 0.1, 0.13, 0.2, 0.31, 0.5]),
    st.one_of(st.floats(0.0, 0.95).map(lambda a: {"alpha": a}),
              st.lists(st.floats(0.05, 0.99), min_size=1, max_size=4).map(
                  lambda a: {"positional": a})),
    st.integers(0, 6), st.one_of(st.none(), st.integers(0, 4)),
    st.sampled_from([0.0, 0.03, 0.05]))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(two_level)
def test_two_levels_equal_as1(cas):
    """n = 2: AS7's chain is AS1's; value and per-model accounting to 1e-9. (A drafter that
    outruns its verifier's 99-draft window has an unbounded chain: AS1 lumps it, AS7 refuses.)"""
    try:
        ex = exact_async(cas)
    except ChainTooLarge as e:
        assert "without bound" in str(e)
        return
    as1 = predict_async(cas)
    assert ex.speedup == pytest.approx(as1.speedup, rel=1e-9)
    for a, b in zip(ex.levels, as1.levels, strict=True):
        for f in ("busy_fraction", "mean_checked", "mean_emitted", "verifies_per_token",
                  "forwards_per_token", "wasted_fraction"):
            x, y = getattr(a, f), getattr(b, f)
            if y is None:
                assert x is None or f == "wasted_fraction"
            else:
                assert x == pytest.approx(y, rel=1e-9, abs=1e-12), f


def test_accounting_three_levels():
    """Per-model accounting in the issue's case: shares in [0, 1], the bottom busy all the
    time (unbounded queue), forwards per token = verifies per token for verifiers, and the
    target's verifies per token = 1 / tokens per verify."""
    ex = exact_async(ISSUE)
    top, mid, bottom = ex.levels
    assert bottom.busy_fraction == pytest.approx(1.0)
    for lv in ex.levels:
        assert 0.0 <= lv.busy_fraction <= 1.0
    assert top.verifies_per_token == pytest.approx(1.0 / top.mean_emitted, rel=1e-12)
    assert mid.forwards_per_token == mid.verifies_per_token
    assert top.mean_checked >= 2.0 and mid.mean_checked >= 3.0  # at least the thresholds
    # the bottom makes c^-1 drafts per unit time: forwards per token = tau / c
    assert bottom.forwards_per_token == pytest.approx(ex.time_per_token / 0.05, rel=1e-9)


def test_lattice_is_the_decimals_written():
    tick, vt, c = async_lattice(_cas([1.0, 0.3, 0.07], [0.8, 0.7], [2, 3]))
    assert tick == Fraction(1, 100) and vt[0][:2] == [100, 100] and vt[1][0] == 30 and c == 7
    cas = Cascade.from_config({
        "models": [{"name": "a", "cost": {"table": [1.0, 1.1, 1.25]}, "overhead": 0.05},
                   {"name": "b", "cost": 0.2}],
        "acceptance": [{"alpha": 0.5}], "thresholds": [1], "mode": "async"})
    tick, vt, c = async_lattice(cas)  # the table extended by its last slope, exactly
    assert tick == Fraction(1, 20) and vt[0][:5] == [21, 23, 26, 29, 32] and c == 4


def test_refusals_name_the_field():
    with pytest.raises(PolyspecInputError) as e:
        exact_async(ISSUE, max_states=100)
    assert e.value.field == "models" and "100 states" in str(e.value)
    long = Cascade.from_config({
        "models": [{"name": "t", "cost": {"table": [1.0, 1e30, 1.2]}}, {"name": "d",
                                                                      "cost": 0.27}],
        "acceptance": [{"alpha": 0.8}], "thresholds": [0], "mode": "async"})
    with pytest.raises(PolyspecInputError) as e:
        exact_async(long)
    assert e.value.field == "models"
    runaway = Cascade.from_config({  # 110 drafts per verify of the 99-draft window
        "models": [{"name": "t", "cost": 1.0},
                   {"name": "m", "cost": {"base": 0.5, "per_token": 0.05}, "overhead": 0.05},
                   {"name": "d", "cost": 0.05}],
        "acceptance": [{"alpha": 0.9}, {"positional": [0.05, 0.5]}], "thresholds": [0, 1],
        "mode": "async"})
    with pytest.raises(ChainTooLarge) as e:
        exact_async(runaway)
    assert e.value.field == "models" and "without bound" in str(e.value)
    free = _cas([1.0, 0.3, 0.0], [0.8, 0.7], [2, 3])
    with pytest.raises(PolyspecInputError) as e:
        exact_async(free)
    assert e.value.field == "models[-1].cost"
    with pytest.raises(PolyspecInputError) as e:
        exact_async("not a cascade")
    assert e.value.field == "cascade"
