"""The run law fitted on PipeSpec's rounds and the replay of its synchronous chain
(simulators/replay.py), against independent
computations: exact counts at agreement 0 and 1, a Markov-chain expectation for constant
hazards (Monte Carlo with a stated false-failure rate), and hand-computed Kaplan-Meier."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.runs import RunLaw as AgeHazard
from polyspec_theory.errors import PolyspecInputError
from simulators.replay import ChainCosts, simulate_chain
from validation.formats.pipespec import (
    ModelSpec,
    PipeSample,
    PipeSpecRun,
    fit_age_hazard,
    merge_positions,
    revealed_positions,
    round_exposures,
)

FLAT = ((1.0, 2.0), (0.0, 0.0), "flat")


def _costs(n_models, draft=1.0, verify=(0.0, 0.0), overhead=0.0):
    v = ((1.0, 2.0), verify, "flat")
    return ChainCosts(tuple([draft] * (n_models - 1)), tuple([v] * (n_models - 1)), overhead)


def _const(q):
    return AgeHazard(hazard=(), tail=q)


def test_always_agree_two_models_exact_rounds_drafts_and_time():
    # q = 0: every round accepts K; the first drafts K-1, later ones K (bonus re-predicted)
    k, n = 5, 101
    res = simulate_chain([(_const(0.0),)], _costs(2, draft=1.0, verify=(10.0, 10.0),
                                                 overhead=3.0), k, [n])
    rounds = math.ceil((n - 1) / k)
    assert res["rounds"][0] == rounds
    drafts = (k - 1) + k * (rounds - 1)
    assert res["time"][0] == pytest.approx(3.0 + drafts * 1.0 + rounds * 10.0)
    assert res["accepted"][0] == pytest.approx(k)


def test_never_agree_is_one_token_per_round():
    k, n = 4, 60
    res = simulate_chain([(_const(1.0),)], _costs(2, draft=1.0, verify=(7.0, 7.0)), k, [n])
    assert res["rounds"][0] == n - 1
    assert res["accepted"][0] == pytest.approx(1.0)
    assert res["time"][0] == pytest.approx((n - 1) * ((k - 1) * 1.0 + 7.0))


def test_rejecting_calls_pay_the_rollback_extra():
    k, n = 4, 30
    c = ChainCosts((1.0,), (((1.0, 2.0), (7.0, 7.0), "flat"),), 0.0, (0.5,))
    never = simulate_chain([(_const(1.0),)], c, k, [n])
    assert never["time"][0] == pytest.approx((n - 1) * ((k - 1) + 7.0 + 0.5))
    always = simulate_chain([(_const(0.0),)], c, k, [n])
    rounds = always["rounds"][0]
    assert always["time"][0] == pytest.approx((k - 1) + k * (rounds - 1) + 7.0 * rounds)


def test_three_models_always_agree_by_hand():
    # K=4, all outputs 1 token after prefill. Round 1: small drafts 3, middle verifies 4 and
    # accepts 4 (out 5, already K-1 ahead: no drafts), target verifies 1+4 and accepts 5 (6).
    # Later rounds: middle is one behind the target, small two behind: small drafts 4, middle
    # accepts 4, target verifies 4 and accepts 4. 6 + 4*9 >= 41 -> 10 rounds.
    res = simulate_chain([(_const(0.0), _const(0.0))], _costs(3, draft=1.0), 4, [41])
    assert res["rounds"][0] == 10
    assert res["accepted"][0] == pytest.approx(4.0)
    assert res["accepted"][1] == pytest.approx((5 + 4 * 9) / 10)
    assert res["time"][0] == pytest.approx(3 + 4 * 9)  # only the small model drafted


def _markov_mean_accepted(q, k):
    """Independent expectation: rounds after a rejection (A) check K-1 drafts; after a full
    round (B) the drafter first re-predicts the bonus position (fail -> 1 token)."""
    p = 1.0 - q
    e_a = sum(p ** j for j in range(k))
    full_a = p ** (k - 1)
    e_b = (1 - p) * 1.0 + p * e_a
    full_b = p * full_a
    pi_b = full_a / (1 - full_b + full_a)
    return (1 - pi_b) * e_a + pi_b * e_b


@settings(max_examples=8, deadline=None)
@given(q=st.floats(0.05, 0.6), k=st.integers(2, 9))
def test_constant_hazard_matches_the_markov_expectation(q, k):
    res = simulate_chain([(_const(q),)] * 30, _costs(2), k, [400] * 30, seed=7)
    want = _markov_mean_accepted(q, k)
    # tokens per call has sd <= k; ~ 30*400/want calls; 5 sd bound: false failure < 1e-6
    calls = 30 * 400 / want
    assert abs(res["accepted"][0] - want) < 5 * k / math.sqrt(calls) + 0.02


def test_same_seed_same_numbers_other_seed_other_numbers():
    laws = [(AgeHazard((0.3, 0.2, 0.1), 0.05),)] * 3
    a = simulate_chain(laws, _costs(2, verify=(2.0, 2.5)), 6, [200] * 3, seed=1)
    b = simulate_chain(laws, _costs(2, verify=(2.0, 2.5)), 6, [200] * 3, seed=1)
    c = simulate_chain(laws, _costs(2, verify=(2.0, 2.5)), 6, [200] * 3, seed=2)
    np.testing.assert_array_equal(a["time"], b["time"])
    assert not np.array_equal(a["time"], c["time"])


def test_one_replay_priced_under_several_costs():
    """simulate_chain_priced: each costs' times are those of its own replay (every float),
    and doubling every cost doubles every time exactly (the same calls, each sum scaled by
    2); the calls' counts are the replay's whatever the costs."""
    from simulators.replay import simulate_chain_priced

    laws = [(AgeHazard((0.3, 0.2, 0.1), 0.05), AgeHazard((0.1,), 0.2))] * 3
    known = [{0: True, 2: False}, {}, {1: True}]
    ms = (1.0, 2.0, 4.0)

    def costs(f, beyond):
        return ChainCosts((0.011 * f, 0.013 * f), ((ms, (0.03 * f, 0.031 * f, 0.05 * f), beyond),
                                                   (ms, (0.1 * f, 0.12 * f, 0.13 * f), "flat")),
                          0.3 * f, reject=(0.001 * f, 0.0021 * f),
                          draft_reset=(0.0005 * f, 0.0007 * f), per_round=0.0031 * f)

    sets = [costs(1.0, "linear"), costs(0.7, "flat"), costs(2.0, "linear")]
    for k in (1, 3, 6):
        got = simulate_chain_priced(laws, sets, k, [120, 90, 150], seed=5, known=known)
        for c, g in zip(sets, got, strict=True):
            one = simulate_chain(laws, c, k, [120, 90, 150], seed=5, known=known)
            assert set(g) == set(one)
            for key in one:
                np.testing.assert_array_equal(g[key], one[key])
        np.testing.assert_array_equal(got[2]["time"], 2.0 * got[0]["time"])
        assert not np.array_equal(got[1]["time"], got[0]["time"])
        for key in ("rounds", "tokens", "accepted"):
            np.testing.assert_array_equal(got[1][key], got[0][key])
    with pytest.raises(PolyspecInputError, match="costs"):
        simulate_chain_priced(laws, [], 3, [10] * 3)


def test_forecast_prices_each_costs_over_its_own_seeds():
    """pipespec_forecast._speedups: each (costs, seeds) gets the speedup of its own seeds'
    replays (mean time over seeds 0..seeds-1, by hand from simulate_chain), however many
    seeds the others take."""
    from types import SimpleNamespace

    from validation.analysis.pipespec_forecast import _speedups

    laws = [(AgeHazard((0.3, 0.2), 0.1),)] * 2
    n_tok, idx = [80, 60], [0, 1]
    base = SimpleNamespace(by_index=lambda: {0: SimpleNamespace(total_time=9.0,
                                                                 tokens_generated=80),
                                             1: SimpleNamespace(total_time=6.0,
                                                                 tokens_generated=60)})
    a, b = _costs(2, verify=(2.0, 2.5)), _costs(2, draft=0.5, verify=(1.0, 3.0))
    got = _speedups(base, laws, ((a, 3), (b, 1), (a, 2)), 4, idx, n_tok)
    for (costs, seeds), (sp, times, se) in zip(((a, 3), (b, 1), (a, 2)), got, strict=True):
        per = np.array([simulate_chain(laws, costs, 4, n_tok, seed=s)["time"]
                        for s in range(seeds)])
        np.testing.assert_array_equal(times, per.mean(axis=0))
        assert sp == (15.0 / 140) / (per.mean(axis=0).sum() / 140)
        assert (se > 0) == (seeds > 1)


def test_kaplan_meier_by_hand():
    # entries 0, agreements [0, 2, 3(censored), 1]: ages 0..3
    law = fit_age_hazard([(np.zeros(4, int), np.array([0, 2, 3, 1]),
                           np.array([False, False, True, False]))])
    # with MIN_AT_RISK 10 nothing has enough rounds: all in the tail = events / exposures
    events, exposure = 3, 1 + 3 + 3 + 2
    assert law.hazard == () and law.tail == pytest.approx(events / exposure)


def test_kaplan_meier_recovers_a_constant_hazard_under_censoring():
    rng = np.random.default_rng(3)
    q, n = 0.2, 4000
    agree = rng.geometric(q, n) - 1
    cap = rng.integers(1, 12, n)
    cens = agree >= cap
    law = fit_age_hazard([(np.zeros(n, int), np.minimum(agree, cap), cens)])
    for j, h in enumerate(law.hazard[:6]):
        # binomial sd with >= ~1000 at risk: 5 sd -> false failure < 1e-5 per age
        risk = ((np.minimum(agree, cap) - cens) >= j).sum()
        assert abs(h - q) < 5 * math.sqrt(q * (1 - q) / risk), j
    assert law.survival(3)[3] == pytest.approx(np.prod([1 - h for h in law.hazard[:3]]))


def _run(acc, k, verify_times=None):
    m = ModelSpec("a", "x/a", "float16", None, ())
    vt = np.zeros(len(acc)) if verify_times is None else np.asarray(verify_times, float)
    s = PipeSample(0, 1.0, int(sum(acc)) + 1, model_times=(np.zeros(3), vt),
                   accepted=(np.array(acc),))
    return PipeSpecRun("r.json", "chain", (m, m), k, "", (s,))


def test_round_exposures_continue_after_full_rounds():
    # K=4: [4 (full, A), 4 (full, B), 2 (B), 1 (A)]
    entry, agree, cens = round_exposures(_run([4, 4, 2, 1], 4))
    assert entry.tolist() == [0, 3, 7, 0]
    assert agree.tolist() == [3, 4, 2, 0]
    assert cens.tolist() == [True, True, False, False]


def test_revealed_positions_by_hand():
    # K=4 from verifier length 1: 4 (fresh, full): agree 1..3; 4 (continuing): bonus 4 agrees,
    # 5..7 agree; 2 (continuing): bonus 8, 9 agree, 10 disagrees; 1 (fresh): 11 disagrees;
    # 3 (fresh): 12, 13 agree, 14 disagrees
    d = revealed_positions(_run([4, 4, 2, 1, 3], 4))[0]
    want = {p: True for p in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13)}
    want.update({10: False, 11: False, 14: False})
    assert d == want
    # a continuing round that accepts 1 is ambiguous; its timed call tells: fast (below the
    # midpoint of the fastest such call, 1, and the mean rejecting call, 5): a 1-token verify,
    # the bonus position 4 disagreed and 5 went unchecked; slow: 4 agreed, 5 disagreed
    d = revealed_positions(_run([4, 1, 2], 4, [5.0, 1.0, 5.0]))[0]
    assert d == {1: True, 2: True, 3: True, 4: False, 6: True, 7: False}
    d = revealed_positions(_run([4, 1, 2], 4, [5.0, 5.0, 5.0]))[0]
    assert d == {1: True, 2: True, 3: True, 4: True, 5: False, 6: True, 7: False}
    # no rejecting call to compare with: nothing revealed there
    d = revealed_positions(_run([4, 1], 4, [5.0, 1.0]))[0]
    assert d == {1: True, 2: True, 3: True}
    # and these are the positions round_exposures puts at the same ages
    entry, agree, cens = round_exposures(_run([4, 4, 2, 1, 3], 4))
    assert entry.tolist()[:3] == [0, 3, 7]  # positions 1, 4, 8 at ages 0, 3, 7


def test_merge_positions_drops_conflicts():
    assert merge_positions([{1: True, 2: False}, {2: True, 3: False}, {1: True}]) == {
        1: True, 3: False}


def test_known_positions_replay_the_revealed_run_exactly():
    acc = [4, 4, 2, 1, 3, 2]
    known = [revealed_positions(_run(acc, 4))[0]]
    for seed in (0, 1, 2):
        res = simulate_chain([(_const(0.5),)], _costs(2), 4, [1 + sum(acc)], seed=seed,
                             known=known)
        assert res["rounds"][0] == len(acc)
        assert res["accepted"][0] == pytest.approx(sum(acc) / len(acc))
    # known agreement everywhere overrides a law that always disagrees
    n, k = 41, 5
    allk = [dict.fromkeys(range(n + k + 2), True)]
    res = simulate_chain([(_const(1.0),)], _costs(2), k, [n], known=allk)
    assert res["rounds"][0] == math.ceil((n - 1) / k)


def test_reset_step_and_per_round_costs_by_hand():
    k, n = 4, 30
    c = ChainCosts((1.0,), (((1.0, 2.0), (7.0, 7.0), "flat"),), 0.0, (), (0.25,), 0.125)
    never = simulate_chain([(_const(1.0),)], c, k, [n])
    # every round follows a reset (the prefill token disagreed too)
    assert never["time"][0] == pytest.approx((n - 1) * ((k - 1) + 0.25 + 7.0 + 0.125))
    always = simulate_chain([(_const(0.0),)], c, k, [n])
    r = always["rounds"][0]
    assert always["time"][0] == pytest.approx((k - 1) + k * (r - 1) + (7.0 + 0.125) * r)


def test_lookahead_one_by_hand():
    # K=1: no drafts past the verifier; the drafter catches up one step a round (none in the
    # first, prefill gave both one token) and every verify feeds one token
    n = 25
    c = ChainCosts((1.0,), (((1.0, 2.0), (7.0, 9.0), "flat"),), 0.0, (0.5,), (0.25,))
    always = simulate_chain([(_const(0.0),)], c, 1, [n])
    assert always["rounds"][0] == n - 1
    assert always["time"][0] == pytest.approx((n - 2) * 1.0 + (n - 1) * 7.0)
    never = simulate_chain([(_const(1.0),)], c, 1, [n])
    # each catch-up step disagrees, so the drafter is reset to the verifier's output after
    # the verify and needs no step in the next round: a step every other round (rounds 2, 4,
    # ..., 24), each the first after a reset; a 1-token verify rejects no draft
    assert never["rounds"][0] == n - 1
    assert never["time"][0] == pytest.approx(((n - 1) // 2) * 1.25 + (n - 1) * 7.0)


def test_replay_equals_r1_exact_chain_for_a_non_geometric_law():
    # R1 with PipeSpec's bonus re-check (polyspec_theory.core.runs.sync_two_level) against
    # the replay: tokens per round and seconds per token. 150 prompts (one seed each) are
    # independent replicas: ratio estimators with their delta-method standard errors over
    # prompts, 4 sd (two-sided 6.3e-5 each, 2 checks), plus the start-up transient (the
    # first round starts from the prefill state: < 1 round in ~160, 0.005 relative)
    from polyspec_theory.core.runs import RunLaw, sync_two_level

    hz, tail, k = (0.45, 0.3, 0.2, 0.12, 0.08), 0.04, 5
    vt = ((1.0, 2.0, 6.0), (0.6, 1.0, 1.2), "linear")
    c = ChainCosts((0.1,), (vt,), 0.0)
    th = sync_two_level(RunLaw(hz, tail), k - 1, 0.1,
                        lambda m: float(np.interp(m, vt[0], vt[1])), recheck_bonus=True)
    tok, rnd, sec = [], [], []
    for seed in range(150):
        res = simulate_chain([(AgeHazard(hz, tail),)], c, k, [600], seed=seed)
        rnd.append(float(res["rounds"][0]))
        tok.append(res["accepted"][0] * rnd[-1])
        sec.append(float(res["time"][0]))
    tok, rnd, sec = map(np.asarray, (tok, rnd, sec))

    def ratio(y, x):
        r = y.sum() / x.sum()
        return r, np.std(y - r * x, ddof=1) / math.sqrt(len(x)) / x.mean()

    tpr, se1 = ratio(tok, rnd)
    tau, se2 = ratio(sec, tok)
    assert abs(tpr - th["tokens_per_round"]) <= 4 * se1 + 0.005 * tpr, (tpr, se1, th)
    assert abs(tau - th["time_per_token"]) <= 4 * se2 + 0.005 * tau, (tau, se2, th)
    # power: the forgetful chain (every round from age 0) is outside
    fresh = 1 + sum(RunLaw(hz, tail).run_survival(0, j) for j in range(1, k))
    assert abs(tpr - fresh) > 8 * se1 + 0.005 * tpr


def test_pipespec_rounds_are_not_independent(runs):
    # R3 on the 1B -> 8B PipeSpec rounds (fixture: 3 prompts, five lookaheads): a constant
    # hazard (independent rounds, P1's per-round law) is rejected
    from polyspec_theory.core.runs import geometric_lr_test

    from . import M, S

    obs = [round_exposures(r) for r in runs
           if r.strategy == "chain" and r.names == (S, M) and r.lookahead >= 2]
    e, g, c = (np.concatenate([o[i] for o in obs]) for i in range(3))
    t = geometric_lr_test(e, g, c)
    assert t["p_value"] < 1e-6, t
    # and the same test keeps the geometric rounds of a constant hazard fitted to them
    rng = np.random.default_rng(5)
    q = t["hazard"]
    gg = np.minimum(rng.geometric(q, e.size) - 1, 7)
    t0 = geometric_lr_test(np.zeros(e.size, int), gg, gg >= 7)
    assert t0["p_value"] > 1e-4  # level 1e-4: the false-failure rate


def test_a_run_replayed_on_its_own_positions_is_reproduced_exactly(runs):
    # R1 on real rounds: every two-model synchronous fixture run, replayed at its lookahead on
    # the positions it reveals (the law is never drawn on the verifier's path), gives its
    # measured verify calls one for one (rounds and tokens per call per prompt)
    c = ChainCosts((0.0,), (((1.0, 2.0), (1.0, 1.0), "flat"),), 0.0)
    n_runs = 0
    for r in runs:
        if r.strategy != "chain" or len(r.models) != 2 or r.lookahead < 2:
            continue
        kn = revealed_positions(r)
        for s in r.samples:
            res = simulate_chain([(AgeHazard((), 0.5),)], c, r.lookahead,
                                 [s.tokens_generated], seed=3, known=[kn[s.index]])
            assert res["rounds"][0] == len(s.accepted[0]), (r.label, s.index)
            assert res["accepted"][0] == pytest.approx(float(np.mean(s.accepted[0])))
        n_runs += 1
    assert n_runs >= 5


def _splitmix_chain(*xs):
    """The replay's hash written out here from its definition (splitmix64 steps from the
    golden-ratio state), independent of the module's folded fast paths."""
    m = (1 << 64) - 1
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = ((h ^ (x & m)) * 0xBF58476D1CE4E5B9) & m
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & m
        h ^= h >> 31
    return h


@settings(max_examples=60, deadline=None)
@given(st.integers(-2**70, 2**70), st.integers(0, 2**64 - 1), st.integers(0, 127_999),
       st.integers(0, 3))
def test_the_replays_hashes_are_the_splitmix_chain(seed, h, t, i):
    """The world's token, agreement and prefix hashes (computed from the folded state of
    their fixed leading keys) equal the plain chain over all their keys."""
    from simulators import replay

    assert replay._mix(seed, 2, h) == _splitmix_chain(seed, 2, h)
    assert replay._fold(replay._mix(seed, 3, i), h) == _splitmix_chain(seed, 3, i, h)
    laws = [AgeHazard((0.3,), 0.3)] * 4
    w = replay._World(laws, seed)
    for a in w.age:  # h as a prompt's root: age 0 at every level
        a[h] = 0
    assert w.extend(h, t) == _splitmix_chain(h, t)
    assert w.next(4, h) == _splitmix_chain(seed, 2, h) % 128_000
    up = w.next(i + 1, h)
    u = (_splitmix_chain(seed, 3, i, h) >> 11) / float(1 << 53)
    alt = (up + 1 + _splitmix_chain(seed, 4, i, h) % 127_999) % 128_000
    assert w.next(i, h) == (up if u >= 0.3 else alt)
