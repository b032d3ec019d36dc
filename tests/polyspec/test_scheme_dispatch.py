"""The one scheme dispatch (polyspec.predict / polyspec.simulate / the commands) checked
against what each scheme MUST give, computed independently of the dispatch:

* every scheme's Monte Carlo, reached through ``polyspec.simulate``, estimates its own exact
  theory (``polyspec.predict``) at the batch, tokens and events asked for, and simulates
  about the tokens asked for in all (not per chain); a size the scheme does not use is
  refused, naming it;
* the synchronous twin of an asynchronous cascade exists only when every threshold is >= 1
  (AS0: threshold 0 has no synchronous meaning);
* AS0's window is min(99, queue): a queue above the verify cap does not lift the cap
  (a deterministic law makes the speedup a hand computation).

False-failure budget: the Monte-Carlo checks use 4.5 standard errors (two-sided normal tail
6.8e-6 each; 4 checks: < 3e-5 per run)."""

from __future__ import annotations

import json

import pytest

import polyspec
from polyspec_theory import PolyspecInputError
from tests.cli_checks import run_checked

Z = 4.5

CHAIN = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.05}},
                    {"name": "d", "cost": 0.1}],
         "acceptance": [{"alpha": 0.7}], "thresholds": [3]}
TREE = {**CHAIN, "acceptance": [{"sibling": [0.6, 0.2]}],
        "trees": [{"parents": [-1, 0, 0, 1, 2]}]}
ASYNC = {**CHAIN, "mode": "async", "thresholds": [2]}


def _inside(sim, exact):
    assert abs(sim.speedup.value - exact) <= Z * sim.speedup.se, (sim.speedup, exact)


def test_chain_scheme_estimates_p1_with_the_tokens_asked_for():
    sim = polyspec.simulate(CHAIN, tokens=40_000, seed=3, chains=64)
    _inside(sim, polyspec.predict(CHAIN).speedup)
    # every chain stops at the end of the round that reaches its share: one round (at most
    # theta + 1 tokens) over per chain at most
    assert 40_000 <= sim.tokens <= 40_000 + 64 * 4


def test_structured_scheme_sizes_its_rounds_for_the_tokens_over_all_chains():
    pred = polyspec.predict(TREE)
    sim = polyspec.simulate(TREE, tokens=30_000, seed=4, chains=32)
    _inside(sim, pred.speedup)
    # about 30 000 tokens in all (sizing from the mean per round: within 20 %), not 30 000
    # per chain
    assert 0.8 * 30_000 <= sim.tokens <= 1.2 * 30_000, sim.tokens


def test_batch_scheme_simulates_the_batch_asked_for():
    from polyspec_theory.serving.batch import predict_batch

    for b in (1, 3):
        sim = polyspec.simulate(CHAIN, tokens=20_000, seed=5, chains=32, batch=b)
        assert sim.batch == b
        exact = predict_batch(polyspec.load_cascade(CHAIN), b).speedup
        _inside(sim, exact)
        assert 20_000 <= sim.tokens <= 20_000 + 32 * b * 4


def test_async_scheme_runs_the_events_asked_for():
    sim = polyspec.simulate(ASYNC, seed=6, chains=16, events=6000)
    assert sim.events == 6000 and sim.chains == 16
    _inside(sim, polyspec.predict(ASYNC).speedup)


def test_sizes_a_scheme_does_not_use_are_refused_naming_them():
    with pytest.raises(PolyspecInputError) as e:
        polyspec.simulate(CHAIN, tokens=1000, events=50)
    assert e.value.field == "events"
    with pytest.raises(PolyspecInputError) as e:
        polyspec.simulate(ASYNC, events=100, batch=2)
    assert e.value.field == "batch"


def _write(tmp_path, cfg, name="c.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


THREE = {"models": [{"name": "t", "cost": 1.0}, {"name": "m", "cost": 0.3},
                    {"name": "d", "cost": 0.05}],
         "acceptance": [{"alpha": 0.8}, {"alpha": 0.7}], "mode": "async"}


@pytest.mark.parametrize("thresholds", [[2, 0], [0, 2], [0, 0]])
def test_no_synchronous_twin_when_some_threshold_is_zero(capsys, tmp_path, thresholds):
    cfg = _write(tmp_path, {**THREE, "thresholds": thresholds})
    rc, out, err, data = run_checked(capsys, ["predict", cfg, "--json"])
    assert rc == 0 and data["sync"] is None and "faster_mode" not in data
    rc, _, err, _ = run_checked(capsys, ["simulate", cfg, "--mode", "sync"])
    assert rc == 2 and "error: --mode:" in err and "threshold 0" in err


def test_a_synchronous_twin_when_every_threshold_is_positive(capsys, tmp_path):
    cfg = _write(tmp_path, {**THREE, "thresholds": [2, 1]})
    rc, out, err, data = run_checked(capsys, ["predict", cfg, "--json"])
    sync = {**THREE, "thresholds": [2, 1]}
    del sync["mode"]
    assert data["sync"]["speedup"] == pytest.approx(polyspec.predict(sync).speedup, rel=1e-12)


def test_a_queue_above_the_verify_cap_does_not_lift_the_cap():
    """Every verify's first 120 drafts are right and the 121st wrong (positional law); T = 1
    for any length, c = 0.001, threshold 0, queue 150. AS0: a verify checks
    m = min(ready, min(99, 150)) drafts. From a rollback: m = 0, 1 token, the drafter fills
    the queue (150) before the sync: kept. Then m = 99, all right (R = 120 >= 100): 100
    tokens, 1 more draft made -> 50 ready: m = 50, 51 tokens, 100 more -> 99 ready; and so on:
    the verifies alternate 99 / 50 drafts, 151 tokens per 2 units of time: speedup 75.5.
    A window of 150 would check 149 drafts and roll back (121 tokens), then restart from 0:
    (1 + 121) / 2 = 61."""
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.001}],
           "acceptance": [{"positional": [1.0] * 120 + [0.0]}], "thresholds": [0],
           "mode": "async", "queue": [150]}
    p = polyspec.predict(cfg)
    assert p.speedup == pytest.approx(151 / 2, rel=1e-12)
    assert [r.window for r in p.rules] == [99]


def test_simulate_command_refuses_a_size_the_scheme_does_not_use(capsys, tmp_path):
    sync, asy = _write(tmp_path, CHAIN, "s.json"), _write(tmp_path, ASYNC, "a.json")
    rc, _, err, _ = run_checked(capsys, ["simulate", sync, "--events", 50, "--json"])
    assert rc == 2 and "error: --events:" in err
    rc, _, err, _ = run_checked(capsys, ["simulate", asy, "--tokens", 1000, "--json"])
    assert rc == 2 and "error: --tokens:" in err
    # the same sync config in async mode takes --events
    rc, _, err, data = run_checked(capsys, ["simulate", sync, "--mode", "async", "--events",
                                            2000, "--chains", 4, "--json"])
    assert rc == 0 and data["mode"] == "async"
