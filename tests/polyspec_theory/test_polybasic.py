"""P1 (exact polybasic time per token) against an independent Monte Carlo, D2, and bad input.

The Monte Carlo here is written from docs/theory.md §6 directly (plain numpy, no call into the code
under test except to build the Cascade): a round of S_i runs rounds of S_{i+1} until at least
theta_i tokens have accumulated, then accepted counts are drawn by per-position Bernoulli
trials (iid / positional / Beta-per-round) or a rounded Gaussian, capped at the block, and
costs T_i(m) = b_i + k_i (m - 1) are summed. It is vectorized over many independent top-level
rounds.

False-failure budget (seeds fixed, so runs are deterministic; the rates say how often an
arbitrary seed would fail a correct implementation): every MC assertion is a 4-standard-error
interval, two-sided normal tail 6.3e-5 each. The property test checks tau_1 on 60 configs
(<= 3.8e-3 per run, union bound); the per-level test checks 7 quantities (<= 4.4e-4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory import (
    Cascade,
    IIDGeometric,
    PolyspecInputError,
    dualistic_speedup,
    emitted_law,
    predict,
    renewal_fill,
)
from polyspec_theory.planning.grid import predict_many

Z = 4.0  # standard errors; two-sided tail 6.3e-5 per check

# ----------------------------------------------------------------------------------------
# the independent Monte Carlo


def _accepted(spec, caps, rng):
    """Accepted counts for blocks ``caps`` under ``spec`` (a config-law dict)."""
    m = caps.size
    kind, val = next(iter(spec.items()))
    if kind == "gaussian":
        x = rng.normal(val[0], val[1], size=m)
        return np.clip(np.rint(x), 0, caps).astype(np.int64)
    if kind == "beta":
        alpha_round = rng.beta(val[0], val[1], size=m)
    a = np.zeros(m, dtype=np.int64)
    alive = caps > 0
    k = 1
    while alive.any():
        if kind == "alpha":
            h = np.full(m, val)
        elif kind == "positional":
            h = np.full(m, val[min(k, len(val)) - 1])
        else:
            h = alpha_round
        ok = alive & (rng.random(m) < h)
        a += ok
        alive = ok & (a < caps)
        k += 1
    return a


def _cost(spec, m):
    if isinstance(spec, dict):
        return spec["base"] + spec.get("per_token", 0.0) * (m - 1)
    return spec + 0.0 * m


def simulate(cfg, rounds, rng):
    """``rounds`` independent rounds of S_1: returns emitted lengths, costs and per-level
    counters (rounds of S_{i+1} per block, block sizes)."""
    models, laws, th = cfg["models"], cfg["acceptance"], cfg["thresholds"]
    truncate = cfg.get("policy", "accumulate") == "truncate"
    n = len(models)
    stats = {"n_sub": [[] for _ in range(n)], "block": [[] for _ in range(n)]}

    def run(i, m):
        if i == n - 1:
            return np.ones(m, dtype=np.int64), np.full(m, _cost(models[i]["cost"], 1))
        acc = np.zeros(m, dtype=np.int64)
        cost = np.zeros(m)
        count = np.zeros(m, dtype=np.int64)
        active = np.arange(m)
        while active.size:
            ln, c = run(i + 1, active.size)
            acc[active] += ln
            cost[active] += c
            count[active] += 1
            active = active[acc[active] < th[i]]
        block = np.minimum(acc, th[i]) if truncate else acc
        stats["n_sub"][i + 1].append(count)
        stats["block"][i].append(block)
        a = _accepted(laws[i], block, rng)
        return a + 1, cost + _cost(models[i]["cost"], block + 1)

    ln, c = run(0, rounds)
    return ln, c, stats


def ratio_and_se(num, den):
    r = num.sum() / den.sum()
    se = math.sqrt(np.var(num - r * den) / num.size) / den.mean()
    return r, se


def mean_and_se(x):
    return float(np.mean(x)), float(np.std(x) / math.sqrt(x.size))


# ----------------------------------------------------------------------------------------
# strategies: random configs n = 2..5, every law family, affine costs

probs = st.floats(0.05, 0.97)
law_specs = st.one_of(
    probs.map(lambda a: {"alpha": a}),
    st.lists(probs, min_size=1, max_size=4).map(lambda v: {"positional": v}),
    st.tuples(st.floats(0.3, 8.0), st.floats(0.3, 4.0)).map(lambda t: {"beta": list(t)}),
    st.tuples(st.floats(-0.5, 5.0), st.floats(0.3, 3.0)).map(lambda t: {"gaussian": list(t)}),
)
MAX_THETA = {2: 12, 3: 7, 4: 5, 5: 4}
LAW_CONFIG_KEYS = ("alpha", "positional", "beta", "gaussian")


def random_config(rng):
    """A random cascade: n = 2..5, each pair's law from a random family, affine costs."""
    n = int(rng.integers(2, 6))
    models = [{"name": "m1", "cost": {"base": 1.0, "per_token": float(rng.uniform(0, 0.1))}}]
    for i in range(1, n):
        models.append({"name": f"m{i + 1}",
                       "cost": {"base": float(10 ** rng.uniform(-2.3, -0.3)),
                                "per_token": float(rng.uniform(0, 0.05))}})
    laws = []
    for _ in range(n - 1):
        fam = LAW_CONFIG_KEYS[int(rng.integers(4))]
        if fam == "alpha":
            laws.append({"alpha": float(rng.uniform(0.05, 0.97))})
        elif fam == "positional":
            laws.append({"positional": rng.uniform(0.05, 0.97, int(rng.integers(1, 5))).tolist()})
        elif fam == "beta":
            laws.append({"beta": [float(rng.uniform(0.3, 8)), float(rng.uniform(0.3, 4))]})
        else:
            laws.append({"gaussian": [float(rng.uniform(-0.5, 5)), float(rng.uniform(0.3, 3))]})
    th = [int(rng.integers(1, MAX_THETA[n] + 1)) for _ in range(n - 1)]
    policy = "truncate" if rng.random() < 0.2 else "accumulate"
    return {"models": models, "acceptance": laws, "thresholds": th, "policy": policy}


# hypothesis draws 60 distinct seeds (derandomized); each seed defines one random config and
# the MC stream, so the configs are diverse (n = 2..5 in about equal shares, all families)
@settings(derandomize=True, deadline=None, max_examples=60)
@given(seed=st.integers(0, 2**63 - 1))
def test_p1_matches_independent_monte_carlo(seed):
    rng = np.random.default_rng(seed)
    cfg = random_config(rng)
    pred = predict(Cascade.from_config(cfg))
    ln, c, _ = simulate(cfg, 30_000, rng)
    tau, se = ratio_and_se(c, ln)
    if se == 0.0:
        assert tau == pytest.approx(pred.time_per_token, rel=1e-12)
    else:
        assert abs(tau - pred.time_per_token) <= Z * se, (cfg, tau, pred.time_per_token, se)


def test_p1_per_level_matches_monte_carlo():
    cfg = {
        "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.03}},
                   {"name": "mid", "cost": {"base": 0.25, "per_token": 0.01}},
                   {"name": "small", "cost": {"base": 0.06, "per_token": 0.004}},
                   {"name": "ngram", "cost": 0.005}],
        "acceptance": [{"alpha": 0.85}, {"beta": [6.0, 1.5]}, {"positional": [0.8, 0.7, 0.6]}],
        "thresholds": [8, 4, 2],
    }
    pred = predict(Cascade.from_config(cfg))
    ln, c, st_ = simulate(cfg, 40_000, np.random.default_rng(20240601))
    checks = [
        (mean_and_se(ln), pred.levels[0].mean_emitted),
        (ratio_and_se(c, ln), pred.time_per_token),
    ]
    for i in (1, 2):
        checks.append((mean_and_se(np.concatenate(st_["n_sub"][i])), pred.levels[i].phi))
    for i in (0, 1, 2):
        checks.append((mean_and_se(np.concatenate(st_["block"][i])), pred.levels[i].mean_block))
    for (est, se), exact in checks:
        assert abs(est - exact) <= Z * se, (est, exact, se)
    # bottom level: G_{n-1} = theta_{n-1} exactly and M_n runs it once per token it drafts
    assert np.all(np.concatenate(st_["block"][2]) >= 2)
    assert pred.levels[3].phi == 2.0 and pred.levels[2].mean_block == 2.0


def test_monte_carlo_has_power():
    """The same MC rejects wrong predictions: the other block policy (taus differ by 5.3%
    here) and the paper's Lemma 3.1 approximation (-7.2%)."""
    from polyspec_theory.bounds.approximation import paper_approximation

    cfg = {"models": [{"name": "a", "cost": 1.0}, {"name": "b", "cost": 0.1},
                      {"name": "c", "cost": 0.01}],
           "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [6, 3]}
    casc = Cascade.from_config(cfg)
    ln, c, _ = simulate(cfg, 30_000, np.random.default_rng(7))
    tau, se = ratio_and_se(c, ln)
    assert abs(tau - predict(casc).time_per_token) <= Z * se
    wrong = predict(Cascade(casc.models, casc.laws, casc.thresholds, "truncate"))
    assert abs(tau - wrong.time_per_token) > 10 * se
    assert abs(tau - paper_approximation(casc).time_per_token) > 10 * se


# ----------------------------------------------------------------------------------------
# exact identities

@settings(derandomize=True, deadline=None, max_examples=120)
@given(law=law_specs, gamma=st.integers(1, 40), t1=st.floats(0.01, 10.0),
       k1=st.floats(0.0, 1.0), t2=st.floats(0.0, 3.0))
def test_two_models_equal_d2(law, gamma, t1, k1, t2):
    cfg = {"models": [{"name": "t", "cost": {"base": t1, "per_token": k1}},
                      {"name": "d", "cost": t2}],
           "acceptance": [law], "thresholds": [gamma]}
    casc = Cascade.from_config(cfg)
    ref = dualistic_speedup(casc.laws[0], gamma, casc.costs[0], casc.costs[1])
    for policy in ("accumulate", "truncate"):
        pred = predict(Cascade(casc.models, casc.laws, casc.thresholds, policy))
        assert pred.speedup == pytest.approx(ref, rel=1e-12, abs=0)


def test_two_models_table_cost_equals_d2():
    cfg = {"models": [{"name": "t", "cost": {"table": [1.0, 1.1, 1.3, 1.6]}},
                      {"name": "d", "cost": 0.07}],
           "acceptance": [{"beta": [3.0, 1.0]}], "thresholds": [6]}
    casc = Cascade.from_config(cfg)
    ref = dualistic_speedup(casc.laws[0], 6, casc.costs[0], casc.costs[1])
    assert predict(casc).speedup == pytest.approx(ref, rel=1e-12)


def _brute_force_fill(l_pmf, theta):
    """Enumerate every sequence of round lengths until the sum reaches theta."""
    phi = 0.0
    g = {}
    stack = [(0, 0, 1.0)]  # (sum, rounds, probability)
    while stack:
        s, k, p = stack.pop()
        if s >= theta:
            phi += k * p
            g[s] = g.get(s, 0.0) + p
            continue
        for ln, q in enumerate(l_pmf):
            if q > 0:
                stack.append((s + ln, k + 1, p * q))
    return phi, g


@settings(derandomize=True, deadline=None, max_examples=60)
@given(w=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4), theta=st.integers(1, 7))
def test_renewal_fill_equals_enumeration(w, theta):
    w = np.asarray(w) + 1e-3
    pmf = np.concatenate([[0.0], w / w.sum()])
    phi, g_pmf = renewal_fill(pmf, theta)
    phi_b, g_b = _brute_force_fill(pmf, theta)
    assert phi == pytest.approx(phi_b, rel=1e-12)
    for gg, p in g_b.items():
        assert g_pmf[gg] == pytest.approx(p, rel=1e-10, abs=1e-15)
    assert g_pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(g_pmf[:theta] == 0)


def test_emitted_law_is_the_mixture_over_blocks():
    law = IIDGeometric(0.7)
    g_pmf = np.array([0, 0, 0.25, 0.5, 0.25])
    direct = sum(g_pmf[g] * np.pad(law.emitted_pmf(g), (0, 6 - (g + 2))) for g in (2, 3, 4))
    got = emitted_law(g_pmf, law)
    assert np.allclose(got, direct, atol=1e-15)
    assert got.sum() == pytest.approx(1.0)


def test_accounting_identities_default():
    cfg = {
        "models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "b", "cost": 0.2}, {"name": "c", "cost": 0.01}],
        "acceptance": [{"alpha": 0.8}, {"beta": [4, 1]}], "thresholds": [5, 3],
    }
    pred = predict(Cascade.from_config(cfg))
    shares = [lv.time_share for lv in pred.levels]
    assert sum(shares) == pytest.approx(1.0, abs=1e-12)
    assert sum(lv.time_per_token for lv in pred.levels) == pytest.approx(pred.time_per_token)
    # F_{i+1} = F_i phi_{i+1}
    for i in range(2):
        assert pred.levels[i + 1].forwards_per_token == pytest.approx(
            pred.levels[i].forwards_per_token * pred.levels[i + 1].phi)
    assert pred.levels[0].forwards_per_token == pytest.approx(1 / pred.levels[0].mean_emitted)


def test_batch_equals_predict():
    cfg = {
        "models": [{"name": "a", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "b", "cost": {"table": [0.2, 0.21, 0.25]}},
                   {"name": "c", "cost": 0.03}, {"name": "d", "cost": 0.001}],
        "acceptance": [{"alpha": 0.8}, {"beta": [4, 1]}, {"gaussian": [1.5, 1.0]}],
        "thresholds": [5, 3, 2],
    }
    casc = Cascade.from_config(cfg)
    th = np.random.default_rng(3).integers(1, 13, size=(150, 3))
    for policy in ("accumulate", "truncate"):
        c = Cascade(casc.models, casc.laws, casc.thresholds, policy)
        bp = predict_many(c, th)
        for j in range(0, 150, 7):
            p = predict(c.with_thresholds(tuple(th[j])))
            assert bp.speedup[j] == pytest.approx(p.speedup, rel=1e-12)
            assert bp.mean_emitted[j] == pytest.approx(p.levels[0].mean_emitted, rel=1e-12)
            assert bp.phi_top[j] == pytest.approx(p.levels[1].phi, rel=1e-12)


# ----------------------------------------------------------------------------------------
# bad input

BASE = {"models": [{"name": "t", "cost": 1.0}, {"name": "m", "cost": 0.2},
                   {"name": "d", "cost": 0.02}],
        "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "thresholds": [4, 2]}


def _with(**kw):
    cfg = {k: (list(v) if isinstance(v, list) else v) for k, v in BASE.items()}
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("cfg, field", [
    (_with(thresholds=[0, 2]), "thresholds[0]"),
    (_with(thresholds=[4, -1]), "thresholds[1]"),
    (_with(thresholds=[4, 1.5]), "thresholds[1]"),
    (_with(thresholds=[4, float("nan")]), "thresholds[1]"),
    (_with(thresholds=[4, "2"]), "thresholds[1]"),
    (_with(thresholds=[4]), "thresholds"),
    (_with(thresholds=[4, 2, 2]), "thresholds"),
    (_with(thresholds=4), "thresholds"),
    (_with(acceptance=[{"alpha": 0.8}]), "acceptance"),
    (_with(acceptance=[{"alpha": 0.8}, {"alpha": 0.7}, {"alpha": 0.6}]), "acceptance"),
    (_with(acceptance=[{"alpha": 1.2}, {"alpha": 0.7}]), "acceptance[0].alpha"),
    (_with(acceptance=[{"alpha": 0.8}, {"alpha": float("nan")}]), "acceptance[1].alpha"),
    (_with(acceptance=[{"alpha": 0.8}, {"alhpa": 0.7}]), "acceptance[1].alhpa"),
    (_with(models=[{"name": "t", "cost": 1.0}]), "models"),
    (_with(models=[{"name": "t", "cost": 0.0}, {"name": "m", "cost": 0.2},
                   {"name": "d", "cost": 0.02}]), "models[0].cost"),
    (_with(models=[{"name": "t", "cost": 1.0}, {"name": "m", "cost": -0.2},
                   {"name": "d", "cost": 0.02}]), "models[1].cost"),
    ({"models": BASE["models"], "acceptance": BASE["acceptance"]}, "thresholds"),
    (_with(thresholdz=[4, 2]), "thresholdz"),
])
def test_bad_config_names_the_field(cfg, field):
    with pytest.raises(PolyspecInputError) as e:
        predict(Cascade.from_config(cfg))
    assert str(e.value).startswith(field), str(e.value)


def test_drafter_cost_zero_allowed():
    cfg = _with(models=[{"name": "t", "cost": 1.0}, {"name": "m", "cost": 0.2},
                        {"name": "d", "cost": 0.0}])
    assert predict(Cascade.from_config(cfg)).speedup > 1


def test_bad_direct_input():
    with pytest.raises(PolyspecInputError, match="^cascade"):
        predict(BASE)
    with pytest.raises(PolyspecInputError, match="^theta"):
        renewal_fill([0.0, 1.0], 0)
    with pytest.raises(PolyspecInputError, match="^l_pmf"):
        renewal_fill([0.5, 0.5], 3)
    casc = Cascade.from_config(BASE)
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, [[1, 2, 3]])
    with pytest.raises(PolyspecInputError, match="^thresholds"):
        predict_many(casc, [[0, 2]])
