"""R1-R3 (acceptance as a process over positions) against P1, an independent Monte Carlo
over positions, and hand computations.

The Monte Carlo is written from docs/theory.md Part III-E directly: it draws the agreement of
every output position from the run law (age = agreements since the last disagreement), then
plays the rounds on that sequence. False-failure budget (seeds fixed; the rates say how often
an arbitrary seed would fail a correct implementation): every Monte Carlo check is a
4-standard-error interval (two-sided normal tail 6.3e-5 each, batch means over 40 batches:
a t-quantile with 39 df at 4 is 2.8e-4); 4 such checks: <= 1.2e-3 per run. The LR test on
geometric data fails with probability 1e-4 (its level).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyspec_theory import Cascade, PolyspecInputError, predict
from polyspec_theory.core.runs import (
    RunLaw,
    carry_test,
    fit_run_law,
    geometric_lr_test,
    sync_two_level,
)

Z = 4.0


def _vc(m):
    return 1.0 + 0.04 * (m - 1) + (0.3 if m >= 2 else 0.0)  # a step between m = 1 and 2


@pytest.mark.parametrize("theta,alpha", [(1, 0.5), (3, 0.7), (6, 0.85), (12, 0.93)])
def test_geometric_equals_p1(theta, alpha):
    cfg = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.05}},
                      {"name": "d", "cost": 0.12, "overhead": 0.0}],
           "acceptance": [{"alpha": alpha}], "thresholds": [theta]}
    p = predict(Cascade.from_config(cfg))
    r = sync_two_level(RunLaw.geometric(alpha), theta, 0.12, lambda m: 1.0 + 0.05 * (m - 1))
    assert r["time_per_token"] == pytest.approx(p.time_per_token, rel=1e-12)
    # and the tokens per round are the capped geometric's E[min(A, theta)] + 1 by hand
    assert r["tokens_per_round"] == pytest.approx(
        1 + sum(alpha ** j for j in range(1, theta + 1)), rel=1e-12)


def _mc(law, theta, d, vc, recheck, n_rounds, rng, batches=40):
    """Independent simulation: per batch (sum cost, sum tokens); the sequence runs on."""
    u = rng.random(n_rounds * (theta + 3) + 10)
    seq = []  # agreement of positions 0, 1, ...
    age = [0]

    def agree(p):
        while len(seq) <= p:
            ok = u[len(seq)] >= law.q(age[0])
            seq.append(ok)
            age[0] = age[0] + 1 if ok else 0
        return seq[p]

    p, cont = 0, False
    per = n_rounds // batches
    out = np.zeros((batches, 2))
    for r in range(per * batches):
        b = r // per
        if cont:  # PipeSpec: p is the bonus position, re-predicted
            if not agree(p):
                out[b] += ((theta + 1) * d + vc(1), 1)
                p, cont = p + 2, False
                continue
            c, start = (theta + 1) * d + vc(theta + 1), p + 1
        else:
            c, start = theta * d + vc(theta + 1), p
        j = 0
        while j < theta and agree(start + j):
            j += 1
        if j < theta:
            out[b] += (c, j + 1)
            p, cont = start + j + 1, False
        elif recheck:
            out[b] += (c, theta + 1)
            p, cont = start + theta, True
        else:
            out[b] += (c, theta + 1)
            p, cont = start + theta + 1, False
    c, t = out[:, 0], out[:, 1]
    tau = c.sum() / t.sum()
    resid = c - tau * t
    se = math.sqrt(np.sum(resid ** 2) / (batches * (batches - 1))) / t.mean()
    return tau, se


LAW = RunLaw(hazard=(0.45, 0.3, 0.2, 0.12, 0.08), tail=0.04)  # runs persist with age


@pytest.mark.parametrize("recheck", [False, True])
def test_non_geometric_matches_monte_carlo(recheck):
    theta = 4
    r = sync_two_level(LAW, theta, 0.1, _vc, recheck_bonus=recheck)
    tau, se = _mc(LAW, theta, 0.1, _vc, recheck, 60_000, np.random.default_rng(31 + recheck))
    assert abs(tau - r["time_per_token"]) <= Z * se, (tau, se, r["time_per_token"])
    # power: the forgetful per-round law (every round drawn afresh from age 0, today's P1
    # with the law of a fresh round) lies far outside the same interval
    tok = 1 + sum(LAW.run_survival(0, j) for j in range(1, theta + 1))
    assert abs((theta * 0.1 + _vc(theta + 1)) / tok - tau) > 8 * se


def test_fit_run_law_by_hand():
    # rounds: from age 0, agree 2 then disagree; from 0, agree 0; from 3, agree 1 (censored)
    law = fit_run_law([0, 0, 3], [2, 0, 1], [False, False, True], min_at_risk=1)
    # at risk: age 0: 2 (one event), age 1: 1, age 2: 1 (event), age 3: 1 (censored after)
    assert law.hazard == (0.5, 0.0, 1.0, 0.0)


def _rounds(law, theta, n, rng):
    """(entry, agree, censored) of P1 rounds (skip convention) played on positions."""
    e, g, c = [], [], []
    a = 0
    for _ in range(n):
        a0 = a
        j = 0
        while j < theta and rng.random() >= law.q(a + j):
            j += 1
        e.append(a0)
        g.append(j)
        c.append(j == theta)
        if j < theta:
            a = 0
        else:
            a = a + theta + 1 if rng.random() >= law.q(a + theta) else 0
    return np.array(e), np.array(g), np.array(c)


def test_fit_recovers_the_law_and_lr_test():
    rng = np.random.default_rng(7)
    e, g, c = _rounds(LAW, 5, 30_000, rng)
    law = fit_run_law(e, g, c)
    for a in range(5):
        # binomial standard error at the age's risk set
        risk = sum(1 for x, y, z in zip(e, g, c, strict=True) if x <= a < x + y + (not z))
        sd = math.sqrt(LAW.q(a) * (1 - LAW.q(a)) / risk)
        assert abs(law.q(a) - LAW.q(a)) <= Z * sd
    assert geometric_lr_test(e, g, c)["p_value"] < 1e-12
    eg, gg, cg = _rounds(RunLaw.geometric(0.8), 5, 20_000, np.random.default_rng(8))
    t = geometric_lr_test(eg, gg, cg)
    assert t["p_value"] > 1e-4 and t["hazard"] == pytest.approx(0.2, abs=Z * 0.003)


def test_bad_input_names_the_field():
    with pytest.raises(PolyspecInputError, match="tail"):
        RunLaw((0.2,), -0.1)
    with pytest.raises(PolyspecInputError, match=r"hazard\[1\]"):
        RunLaw((0.2, 1.5), 0.1)
    with pytest.raises(PolyspecInputError, match="theta"):
        sync_two_level(LAW, 0, 0.1, _vc)
    with pytest.raises(PolyspecInputError, match="verify_cost"):
        sync_two_level(LAW, 2, 0.1, lambda m: -1.0)
    with pytest.raises(PolyspecInputError, match="censored"):
        fit_run_law([0], [0], [True])


def _capture_rounds(name):
    import json
    from pathlib import Path

    p = Path(__file__).resolve().parents[2] / "data" / "traces" / "cpu" / name
    by: dict[int, list] = {}
    for line in p.read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "round" and r["level"] == 1:
            by.setdefault(r["prompt"], []).append((r["G"], r["A"]))
    return list(by.values())


def test_carry_test_on_our_captures_t0_dependent_t1_independent():
    # greedy (T = 0): agreement is a function of the position, a full round carries its run
    # (more accepted after a full round); sampling (T = 1): a fresh draw per position, rounds
    # independent. Under independence p > 1e-3 fails with probability 1e-3 per file.
    t0 = carry_test(_capture_rounds("target-draft-t_th5_T0.jsonl"))
    assert t0["p_value"] < 1e-10 and t0["mean_after_full"] > t0["mean_after_rejection"]
    for name in ("target-draft-t_th5_T1.jsonl", "target-draft-t_th7_T1.jsonl"):
        assert carry_test(_capture_rounds(name))["p_value"] > 1e-3


def test_carry_test_by_hand_and_on_simulated_rounds():
    # one prompt, G = 2: rounds (2,2) (2,1) (2,2) (2,0): after full: A = 1, 0; after a
    # rejection: A = 2. Table [[1, 1, 0], [0, 0, 1]]
    t = carry_test([[(2, 2), (2, 1), (2, 2), (2, 0)]])
    tab = np.array([[1, 1, 0], [0, 0, 1]], float)
    exp = tab.sum(1, keepdims=True) * tab.sum(0, keepdims=True) / tab.sum()
    assert t["statistic"] == pytest.approx(((tab - exp) ** 2 / exp).sum())
    assert t["df"] == 2 and t["n_after_full"] == 2 and t["n_after_rejection"] == 1
    e, g, c = _rounds(LAW, 5, 6000, np.random.default_rng(9))
    seq = [list(zip([5] * len(g), g.tolist(), strict=True))]
    assert carry_test(seq)["p_value"] < 1e-8  # the carried run shows
    e, g, c = _rounds(RunLaw.geometric(0.7), 5, 6000, np.random.default_rng(10))
    seq = [list(zip([5] * len(g), g.tolist(), strict=True))]
    assert carry_test(seq)["p_value"] > 1e-4  # memoryless: level 1e-4, the false-failure rate
    with pytest.raises(PolyspecInputError, match=r"prompts\[0\]\[1\]"):
        carry_test([[(2, 1), (2, 3)]])
