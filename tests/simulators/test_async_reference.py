"""A third computation of the two-level asynchronous pipeline (docs/theory.md AS0): a plain
event-by-event run in pure Python, written from AS0's rules alone, with exact rational event
times (every cost read as the decimal it was written as) and one Bernoulli draw per checked
position. It arbitrates between AS1 (polyspec_theory/pipelines/asynchronous.py) and the JAX
simulator (simulators/asynchronous.py), checks AS1's per-model accounting (drafter forwards
per token, drafts rolled back, busy shares) and the AS3 longest target cycle.

Rules (AS0): the drafter drafts one token per step of length ``c`` while it is fewer than
``queue`` drafts ahead; a free verifier starts once ``wait`` drafts are ready and checks
``m = min(ready, window)`` in ``T(m + 1)``; it then syncs at the drafter's next step boundary
(at once if the drafter is idle), a step ending at the verify's very instant included (the tie
rule); the drafter keeps its stream less ``m + 1`` iff ``R >= m + 1`` and it has a draft at
``m + 1``, otherwise it rolls back (lead 0). A rollback is a regeneration point: the rates are
ratio estimates over regeneration cycles with a delta-method standard error.

False-failure rate: every comparison uses z = 4.42 (two-sided 1e-5) at a fixed seed; 16
comparisons: <= 1.6e-4 in all.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from polyspec_theory import Cascade, async_bounds, predict_async

Z = 4.42


def _exact(x) -> Fraction:
    return Fraction(repr(float(x)))  # the decimal the user wrote: 0.2 is 1/5


def _reference(cas: Cascade, cycles: int, seed: int) -> dict:
    """Run ``cas`` (two levels, async) for ``cycles`` regeneration cycles; per-cycle sums."""
    rule_wait = cas.thresholds[0]
    queue = None if cas.queues is None else cas.queues[0]
    window = 99 if queue is None else min(99, queue)  # AS0: every ready draft, up to 99
    tgt = cas.models[0]
    surv = np.asarray(cas.laws[0].survival(window + 2), dtype=np.float64)
    cond = [surv[k + 1] / surv[k] if surv[k] > 0 else 0.0 for k in range(window + 1)]
    vt = {m: _exact(float(tgt.cost(m))) + _exact(tgt.overhead) for m in range(1, window + 2)}
    c = _exact(cas.models[1].cost.t1)
    den = math.lcm(*(v.denominator for v in [*vt.values(), c]))
    T = {m: int(v * den) for m, v in vt.items()}
    C = int(c * den)
    rng = np.random.default_rng(seed)

    now = lead = out = 0
    d_busy, d_end = False, 0
    v_state, v_end, v_m, v_r = "free", 0, 0, 0
    last_sync = 0
    acc = dict(tokens=0, time=0, drafted=0, discarded=0, v_busy=0, d_busy=0)
    rows = []
    longest = 0
    while len(rows) < cycles + 1:
        if v_state == "blocked" and not d_busy:  # sync at the drafter's boundary
            longest = max(longest, now - last_sync)
            last_sync = now
            if v_r >= v_m + 1 and lead >= v_m + 1:
                lead -= v_m + 1
            else:  # rollback: the drafts not accepted are discarded
                acc["discarded"] += lead - min(v_r, v_m)
                lead = 0
                rows.append((now, out, dict(acc)))
            v_state = "free"
        if v_state == "free" and lead >= rule_wait:
            v_m = min(lead, window)
            v_end, v_state = now + T[v_m + 1], "verifying"
            acc["v_busy"] += T[v_m + 1]
        if not d_busy and (queue is None or lead < queue):
            d_busy, d_end = True, now + C
            acc["drafted"] += 1
            acc["d_busy"] += C
        if v_state == "verifying" and (not d_busy or v_end <= d_end):  # tie: verify first
            now = v_end
            r = 0
            while r < v_m + 1 and rng.random() < cond[r]:
                r += 1
            out += min(r, v_m) + 1
            v_r, v_state = r, "blocked"
        else:
            now, d_busy, lead = d_end, False, lead + 1
    times = np.array([float(Fraction(r[0], den)) for r in rows])
    toks = np.array([r[1] for r in rows], dtype=float)
    per = {"time": np.diff(times), "tokens": np.diff(toks)}
    for key in ("drafted", "discarded"):
        per[key] = np.diff([r[2][key] for r in rows]).astype(float)
    for key in ("v_busy", "d_busy"):
        per[key] = np.diff([r[2][key] for r in rows]).astype(float) / den
    per["longest_cycle"] = float(Fraction(longest, den))
    per["c"] = float(c)
    return per


def _ratio(num, den):
    """Regenerative ratio estimate sum(num)/sum(den) and its delta-method standard error."""
    r = num.sum() / den.sum()
    resid = num - r * den
    return r, math.sqrt(np.var(resid, ddof=1) * len(num)) / den.sum()


def _cas(c, theta, law, cost=1.0, queue=None, overhead=0.0):
    cfg = {"models": [{"name": "target", "cost": cost, "overhead": overhead},
                      {"name": "draft", "cost": c}],
           "acceptance": [law], "thresholds": [theta], "mode": "async"}
    if queue is not None:
        cfg["queue"] = [queue]
    return Cascade.from_config(cfg)


ISSUE_CASE = _cas(0.2, 0, {"alpha": 0.8})  # issue 31: AS1 2.2832, the old simulator 2.1361
TIE_CASE = _cas(0.1, 4, {"alpha": 0.8})  # a verify of T = 1 ends on the 10th drafter step


def _other_side(c, theta, law):
    """AS1 with the drafter 1e-6 faster: every verify ending on a boundary now waits for one
    more step (the other side of the tie)."""
    return predict_async(_cas(c * (1 - 1e-6), theta, law)).speedup


@pytest.mark.parametrize("cas,args,old_sim", [
    (ISSUE_CASE, (0.2, 0, {"alpha": 0.8}), 2.1361),
    (TIE_CASE, (0.1, 4, {"alpha": 0.8}), None)])
def test_reference_run_sides_with_as1(cas, args, old_sim):
    """The event-by-event run agrees with AS1, rejects the other side of the tie and (issue
    31) what the simulator gave before the tie rule."""
    ref = _reference(cas, 12_000, seed=7)
    rate, se = _ratio(ref["tokens"], ref["time"])
    exact = predict_async(cas).speedup
    assert abs(rate - exact) <= Z * se, (rate, se, exact)
    assert abs(rate - _other_side(*args)) > Z * se  # the check tells the two sides apart
    if old_sim is not None:
        assert abs(rate - old_sim) > Z * se


@pytest.mark.parametrize("cas", [ISSUE_CASE, TIE_CASE])
def test_simulator_uses_the_tie_rule(cas):
    from simulators.asynchronous import simulate_async

    res = simulate_async(cas, 8000, seed=2, chains=32)
    exact = predict_async(cas).speedup
    assert res.window == "regeneration"
    assert abs(res.speedup.value - exact) <= Z * res.speedup.se, (res.speedup, exact)


@pytest.mark.parametrize("c,cycle", [(0.1, 1.4), (0.1 * (1 - 1e-6), 15 * 0.1 * (1 - 1e-6)),
                                     (0.1 * (1 + 1e-6), 14 * 0.1 * (1 + 1e-6))])
def test_both_sides_of_the_discontinuity(c, cycle):
    """Exactly 4 drafts accepted per verify, threshold 4: from each rollback the verifier
    waits 4 steps, checks 4 drafts (T = 1), emits 5 tokens and rolls back at the drafter's
    boundary: 4 + 10 steps on the tie (the 10th ends with the verify), 4 + 11 just past it.
    AS1 exactly, the simulator within its window's edge effect (one cycle per chain end)."""
    from simulators.asynchronous import simulate_async

    cas = _cas(c, 4, {"positional": [1.0, 1.0, 1.0, 1.0, 0.0]})
    assert predict_async(cas).speedup == pytest.approx(5.0 / max(cycle, 0.4 * c / 0.1 + 1.0),
                                                       rel=1e-12)
    res = simulate_async(cas, 4000, seed=0, chains=4)
    per_chain = res.tokens / res.chains
    assert res.speedup.value == pytest.approx(5.0 / cycle, rel=4 * 5.0 / per_chain)


@pytest.mark.parametrize("cas", [
    ISSUE_CASE,
    _cas(0.13, 3, {"positional": [0.9, 0.7, 0.6]}, cost={"base": 1.0, "per_token": 0.03},
         overhead=0.05),
    _cas(0.31, 2, {"alpha": 0.7}, cost={"base": 1.0, "per_token": 0.02}, queue=5),
])
def test_as1_accounting_matches_reference(cas):
    """AS1's per-model accounting: drafter forwards per token, share of drafts rolled back,
    busy shares of both models (the queue-bounded case idles the drafter)."""
    p = predict_async(cas)
    ref = _reference(cas, 8000, seed=11)
    target, draft = p.levels
    checks = [
        (ref["drafted"], ref["tokens"], draft.forwards_per_token),
        (ref["discarded"], ref["drafted"], draft.wasted_fraction),
        (ref["v_busy"], ref["time"], target.busy_fraction),
    ]
    for num, den, theory in checks:
        r, se = _ratio(num, den)
        assert abs(r - theory) <= Z * se + 1e-12, (r, se, theory)
    r, _ = _ratio(ref["d_busy"], ref["time"])
    if cas.queues is None:  # unbounded: the drafter never idles
        assert r == pytest.approx(1.0, abs=1e-12) and draft.busy_fraction == pytest.approx(1.0)
    else:
        assert draft.busy_fraction < 0.999
        _, se = _ratio(ref["d_busy"], ref["time"])
        assert abs(r - draft.busy_fraction) <= Z * se


@pytest.mark.parametrize("c,theta,slope", [(0.1, 4, 0.0), (0.3, 2, 0.0), (0.07, 1, 0.0),
                                          (0.13, 2, 0.05)])
def test_as3_longest_target_cycle(c, theta, slope):
    """AS3's lower bound uses X_1 = (wait + 1) c + max_m T(m + 1), the longest sync-to-sync
    cycle of the target (a rollback, ``wait`` steps, the verify, the step in flight): the
    reference run never exceeds it, and with a constant T every rollback comes within one
    drafter step of it."""
    cas = _cas(c, theta, {"alpha": 0.6}, cost={"base": 1.0, "per_token": slope})
    lo, _ = async_bounds(cas)
    surv = cas.laws[0].survival(theta + 1)
    x1 = float(np.sum(surv[: theta + 1])) * cas.models[0].cost.t1 / lo  # lo = T e(θ) / X_1
    assert x1 == pytest.approx((theta + 1) * c + float(cas.models[0].cost(100)))
    ref = _reference(cas, 3000, seed=5)
    assert ref["longest_cycle"] <= x1 * (1 + 1e-12)
    if slope == 0.0:
        assert ref["longest_cycle"] >= x1 - c - 1e-12


def test_drafter_of_negligible_cost():
    """c = 1e-300, unbounded queue: AS1 gives the free-drafter limit (from a rollback the
    verify checks 0 drafts; kept with probability 0.8 the next one checks the full 99-draft
    window), with the drafter busy all the time; the simulator refuses it in one line rather
    than simulate 1e300 drafter forwards per verify (it used to report 0 tokens)."""
    from polyspec_theory import PolyspecInputError
    from simulators.asynchronous import simulate_async

    cas = _cas(1e-300, 0, {"alpha": 0.8})
    e99 = sum(0.8**k for k in range(100))
    p_back = 1 - 0.8**100  # the full window is rolled back unless all 99 + the bonus agree
    # two states, 0 and "window full": pi(0) = p_back / (0.8 + p_back)
    pi0 = p_back / (0.8 + p_back)
    expected = (pi0 * 1.0 + (1 - pi0) * e99) / 1.0
    p = predict_async(cas)
    assert p.speedup == pytest.approx(expected, rel=1e-9)
    draft = p.levels[1]
    assert draft.busy_fraction == pytest.approx(1.0)
    assert draft.forwards_per_token == pytest.approx(1e300 / expected, rel=1e-9)
    with pytest.raises(PolyspecInputError) as e:
        simulate_async(cas, 400, chains=4)
    assert e.value.field == "models[-1].cost"


def _reference_deep(cas: Cascade, events: int, seed: int) -> tuple[float, float]:
    """AS7's rules (docs/theory.md) for any number of levels, event by event, exact integer
    event times on the lattice of the decimals written, one Bernoulli draw per checked
    position. Returns the speedup and its standard error: ratio over the cycles between the
    target's rollbacks, batch means over 100 cycles (cycles of three or more levels are not
    independent: the phases below carry over)."""
    n = cas.n
    queue = [None] * (n - 1) if cas.queues is None else list(cas.queues)
    window = [99 if q is None else min(99, q) for q in queue]
    alpha = [cas.laws[j].alpha for j in range(n - 1)]
    vals = [[_exact(float(cas.models[j].cost(m))) + _exact(cas.models[j].overhead)
             for m in range(1, window[j] + 2)] for j in range(n - 1)]
    c = _exact(cas.models[-1].cost.t1)
    den = math.lcm(*(v.denominator for row in vals for v in row), c.denominator)
    T = [[int(v * den) for v in row] for row in vals]  # T[j][m]: verify of m drafts
    C = int(c * den)
    rng = np.random.default_rng(seed)
    state = ["free"] * n
    end = [0] * n
    stale = [False] * n
    m_now = [0] * n
    kept = [False] * n
    lead = [0] * n
    now = out = 0
    marks = []

    def settle():
        for j in range(n - 2, -1, -1):  # syncs, bottom-up
            if state[j] == "blocked" and state[j + 1] == "free":
                if kept[j] and lead[j + 1] >= m_now[j] + 1:
                    lead[j + 1] -= m_now[j] + 1
                else:  # rollback: streams below reset, forwards below finish and are dropped
                    for i in range(j + 1, n):
                        lead[i] = 0
                    for i in range(j + 2, n):
                        if state[i] == "busy":
                            stale[i] = True
                        elif state[i] == "blocked":
                            state[i] = "free"
                    if j == 0:
                        marks.append((now, out))
                state[j] = "free"
        for j in range(n):  # starts, top-down
            if state[j] != "free" or (j > 0 and queue[j - 1] is not None
                                      and lead[j] >= queue[j - 1]):
                continue
            if j == n - 1:
                state[j], end[j], stale[j] = "busy", now + C, False
            elif lead[j + 1] >= cas.thresholds[j]:
                m_now[j] = min(lead[j + 1], window[j])
                state[j], end[j], stale[j] = "busy", now + T[j][m_now[j]], False

    settle()
    for _ in range(events):
        busy = [j for j in range(n) if state[j] == "busy"]
        now = min(end[j] for j in busy)
        k = min(j for j in busy if end[j] == now)  # ties: the highest level first
        if stale[k]:
            stale[k], state[k] = False, "free"
        elif k == n - 1:
            lead[k] += 1
            state[k] = "free"
        else:
            r = 0
            while r < m_now[k] + 1 and rng.random() < alpha[k]:
                r += 1
            emitted = min(r, m_now[k]) + 1
            if k == 0:
                out += emitted
            else:
                lead[k] += emitted
            kept[k], state[k] = r >= m_now[k] + 1, "blocked"
        settle()
    t = np.array([float(Fraction(x, den)) for x, _ in marks])
    o = np.array([float(x) for _, x in marks])
    nb = (len(marks) - 1) // 100
    bt = np.diff(t[:: 100][: nb + 1])
    bo = np.diff(o[:: 100][: nb + 1])
    rate, se = _ratio(bo, bt)
    t1 = cas.models[0].cost.t1
    return rate * t1, se * t1


def test_three_level_reference_sides_with_as7():
    """Issue 41's 3-level case (1 / 0.3 / 0.05, α 0.8 / 0.7, thresholds 2 / 3): the
    exact-rational event run agrees with AS7 (2.184650) and rejects the 2.0769 an outside event
    simulation reported (z = 4.42 each: <= 2e-5 false failure)."""
    from polyspec_theory.pipelines.async_exact import exact_async

    cas = Cascade.from_config({
        "models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.3},
                   {"name": "c", "cost": 0.05}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [2, 3],
        "mode": "async"})
    speed, se = _reference_deep(cas, 250_000, seed=3)
    exact = exact_async(cas).speedup
    assert abs(speed - exact) <= Z * se, (speed, se, exact)
    assert abs(speed - 2.0769) > Z * se
