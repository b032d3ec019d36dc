"""R1 for users (issue 37): a config with a run law ``{"run_hazard": [...], "tail": q}`` is
predicted (R1, with the round policy named), simulated (positions drawn from the law), verified
and fitted through the CLI and the API.

Independent values: R1's time per token is checked against an independent Monte Carlo over
positions in tests/polyspec_theory/test_runs.py; here the numbers the CLI and API print are
held against ``sync_two_level`` called by hand, the simulator against R1 (a different
computation: a Markov chain solved exactly) inside 4.5 standard errors (false failure 7e-6
per check, 4 checks), and the PipeSpec run law against exposures counted by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polyspec
from polyspec.cli import main
from polyspec_theory.core.runs import (
    RunLaw,
    p1_exposures,
    pipespec_exposures,
    run_law_report,
    sync_two_level,
)
from polyspec_theory.errors import PolyspecInputError

ROOT = Path(__file__).resolve().parents[2]
PIPESPEC = ROOT / "tests" / "fixtures" / "gpu-traces" / "pipespec-humaneval"
HAZ, TAIL = [0.45, 0.3, 0.2, 0.12, 0.08], 0.04
CFG = {"models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.04}},
                  {"name": "draft", "cost": 0.1}],
       "acceptance": [{"run_hazard": HAZ, "tail": TAIL}], "thresholds": [4]}
Z = 4.5


def _by_hand(cfg, recheck):
    law = RunLaw(HAZ, TAIL) if "run_hazard" in cfg["acceptance"][0] else RunLaw.geometric(
        cfg["acceptance"][0]["alpha"])
    th = cfg["thresholds"][0]
    r = sync_two_level(law, th, 0.1 if cfg is CFG else cfg["models"][1]["cost"],
                       lambda m: 1.0 + 0.04 * (m - 1) if cfg is CFG else 1.0,
                       recheck_bonus=recheck)
    return 1.0 / r["time_per_token"]


def _cli(capsys, tmp_path, cfg, *argv):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    rc = main([argv[0], str(p), *argv[1:]])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("rnd", ["p1", "pipespec"])
def test_predict_is_r1_and_names_the_round(capsys, tmp_path, rnd):
    cfg = {**CFG, "round": rnd}
    want = _by_hand(CFG, rnd == "pipespec")
    assert polyspec.predict(cfg).speedup == pytest.approx(want, rel=1e-12)
    rc, out, _ = _cli(capsys, tmp_path, cfg, "predict", "--json")
    d = json.loads(out)
    assert rc == 0 and d["speedup"] == pytest.approx(want, rel=1e-12) and d["round"] == rnd
    assert d["config"]["acceptance"] == [{"run_hazard": HAZ, "tail": TAIL}]
    rc, out, _ = _cli(capsys, tmp_path, cfg, "predict")
    assert rc == 0 and "exact R1" in out and (
        "PipeSpec's round" if rnd == "pipespec" else "P1's round") in out


def test_geometric_law_is_p1_only_with_p1s_round():
    iid = {**CFG, "acceptance": [{"alpha": 0.6}], "thresholds": [2],
           "models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.05}]}
    p1 = polyspec.predict(iid).speedup
    r1_p1 = polyspec.predict({**iid, "acceptance": [{"run_hazard": [], "tail": 0.4}]})
    pipespec = polyspec.predict({**iid, "round": "pipespec"}).speedup
    assert r1_p1.speedup == pytest.approx(p1, rel=1e-12)
    assert pipespec == pytest.approx(_by_hand(iid, True), rel=1e-12)
    assert abs(pipespec - p1) > 0.05  # the bonus re-check costs: 1.648 against 1.782


@pytest.mark.parametrize("rnd", ["p1", "pipespec"])
def test_simulate_draws_positions_and_agrees_with_r1(capsys, tmp_path, rnd):
    cfg = {**CFG, "round": rnd}
    res = polyspec.simulate(cfg, tokens=120_000, seed=5, chains=64)
    s = res.speedup
    assert abs(s.value - _by_hand(CFG, rnd == "pipespec")) <= Z * s.se
    assert res.to_dict()["round"] == rnd
    rc, out, _ = _cli(capsys, tmp_path, cfg, "simulate", "--tokens", "40000", "--seed", "5",
                      "--chains", "16", "--json", "--no-progress")
    d = json.loads(out)
    assert rc == 0 and d["round"] == rnd and d["prediction"]["method"] == "exact R1"
    assert abs(d["speedup"] - d["prediction"]["speedup"]) <= Z * d["se"]
    again = polyspec.simulate(cfg, tokens=120_000, seed=5, chains=64)
    assert again.to_dict() == res.to_dict()  # same seed, same numbers


def test_verify_has_r1_rows(capsys):
    rc = main(["verify", "--quick", "--only", "R", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["id"] for r in rows] == ["R1"] * 3 and all(r["passed"] for r in rows)


@pytest.mark.parametrize("cfg, field", [
    ({**CFG, "models": [*CFG["models"], {"name": "x", "cost": 0.01}],
      "acceptance": [{"alpha": 0.8}, {"run_hazard": HAZ, "tail": TAIL}],
      "thresholds": [4, 2]}, "models"),  # R1 is two-level
    ({**CFG, "acceptance": [{"positional": [0.8, 0.7]}], "round": "pipespec"},
     "acceptance[0]"),  # a per-round law says nothing of how a run continues
    ({**CFG, "round": "never"}, "round"),
    ({**CFG, "mode": "async"}, "acceptance[0]"),  # AS0 draws rounds afresh
    ({**CFG, "acceptance": [{"alpha": 0.8}], "round": "pipespec", "mode": "async"}, "round"),
    ({**CFG, "acceptance": [{"run_hazard": [0.2, 1.5], "tail": TAIL}]},
     "acceptance[0].run_hazard[1]"),
    ({**CFG, "acceptance": [{"run_hazard": HAZ}]}, "acceptance[0].tail"),
])
def test_bad_run_law_configs_name_the_field(capsys, tmp_path, cfg, field):
    with pytest.raises(PolyspecInputError) as e:
        polyspec.load_cascade(cfg)
    assert e.value.field == field
    rc, _, err = _cli(capsys, tmp_path, cfg, "predict")
    assert rc == 2 and err.count("\n") == 1 and f"error: {field}" in err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), max_size=6), st.floats(0.01, 1.0),
       st.integers(1, 12))
def test_run_law_is_an_acceptance_law_of_a_fresh_run(haz, tail, cap):
    law = RunLaw(haz, tail)
    s = law.survival(cap)
    assert s[0] == 1.0
    for j in range(cap + 1):  # survival of a fresh run, by the hazard's product
        assert s[j] == pytest.approx(law.run_survival(0, j), rel=1e-12, abs=1e-300)
    assert law.pmf_vector(cap).sum() == pytest.approx(1.0, rel=1e-12)
    assert RunLaw.from_config(law.to_config()) == law


def test_exposures_by_hand():
    # PipeSpec, K = 3: rounds emit 3 (full), 2, 1, 3, 3, 1
    e, g, c = pipespec_exposures([[3, 2, 1, 3, 3, 1]], 3)
    # fresh 0/2 agree censored; continuing from 2 (2 checks +bonus): emits 2 -> 2 agree,
    # then fresh 0 agree 0; fresh censored; continuing entry 2 censored (3 agreements);
    # continuing entry 5 emits 1: a disagreement at its entry
    assert e.tolist() == [0, 2, 0, 0, 2, 5]
    assert g.tolist() == [2, 2, 0, 2, 3, 0]
    assert c.tolist() == [True, False, False, True, True, False]
    # P1's round: only the rounds after a rejection (and the first) enter, from age 0
    e, g, c = p1_exposures([[(3, 3), (3, 1), (3, 0), (2, 2), (2, 1)]])
    assert e.tolist() == [0, 0, 0] and g.tolist() == [3, 0, 2]
    assert c.tolist() == [True, False, True]


def test_fit_writes_a_run_law_with_r3_and_a_config_uses_it(capsys, tmp_path):
    f = PIPESPEC / "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_8.json"
    rc = main(["fit", str(f), "--json"])
    out = capsys.readouterr().out
    d = json.loads(out)
    assert rc == 0 and d["round"] == "pipespec" and set(d["run_law"]) == {"run_hazard", "tail"}
    ind = d["independence"]
    assert 0 <= ind["p_value"] <= 1 and ind["independent"] == (ind["p_value"] >= ind["level"])
    assert polyspec.fit(f)["run_law"] == d["run_law"]  # the API gives the same
    # the law is the Kaplan-Meier fit of the exposures (R2), recomputed from the report's
    # own rounds by a second path: the report of run_law_report on the same exposures
    from validation.formats.pipespec import read_pipespec, round_exposures

    rep = run_law_report(*round_exposures(read_pipespec(f)), "pipespec")
    assert rep["run_law"] == d["run_law"] and rep["rounds"] == d["rounds"]
    (tmp_path / "fit.json").write_text(out)
    cfg = {**CFG, "acceptance": [{"fit": "fit.json"}], "round": "pipespec",
           "thresholds": [7]}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    rc = main(["predict", str(tmp_path / "c.json"), "--json"])
    p = json.loads(capsys.readouterr().out)
    law = RunLaw(d["run_law"]["run_hazard"], d["run_law"]["tail"])
    want = 1.0 / sync_two_level(law, 7, 0.1, lambda m: 1.0 + 0.04 * (m - 1),
                                recheck_bonus=True)["time_per_token"]
    assert rc == 0 and p["speedup"] == pytest.approx(want, rel=1e-12)
    assert np.isfinite(p["speedup"])


def test_pipespec_replay_of_a_cascade_is_r1_for_two_models_and_serves_three(capsys, tmp_path):
    from simulators.replay import replay_cascade

    # costs through the replay's calls: a step in T_1 between m = 1 and 2, an overhead
    cfg = {"models": [{"name": "target", "cost": {"table": [1.0, 1.3, 1.32, 1.34, 1.36]},
                       "overhead": 0.05}, {"name": "draft", "cost": 0.1}],
           "acceptance": [{"run_hazard": HAZ, "tail": TAIL}], "thresholds": [3],
           "round": "pipespec"}
    cas = polyspec.load_cascade(cfg)
    res = replay_cascade(cas, 30_000, 4, chains=24)
    s = res.speedup
    want = 1.0 / sync_two_level(RunLaw(HAZ, TAIL), 3, 0.1, lambda m: float(
        cas.models[0].cost(m)), 0.05, recheck_bonus=True)["time_per_token"]
    assert abs(s.value - want) <= Z * s.se, (s, want)
    three = {**cfg, "models": [*cfg["models"][:1], {"name": "mid", "cost": 0.3},
                               cfg["models"][1]],
             "acceptance": [{"alpha": 0.8}, {"run_hazard": HAZ, "tail": TAIL}],
             "thresholds": [3, 3]}
    rc, out, _ = _cli(capsys, tmp_path, three, "simulate", "--tokens", "3000", "--chains",
                      "4", "--json", "--no-progress")
    d = json.loads(out)
    assert rc == 0 and d["prediction"] is None and d["lookahead"] == 4 and d["speedup"] > 0
    rc, _, err = _cli(capsys, tmp_path, three, "predict")
    assert rc == 2 and "error: models: R1 is exact for two models" in err
    rc, _, err = _cli(capsys, tmp_path, {**three, "thresholds": [3, 2]}, "predict")
    assert rc == 2 and "error: thresholds:" in err


def test_a_failed_bonus_recheck_pays_a_one_position_verify():
    """PipeSpec's round with a verify of 1 position far cheaper than one of θ + 1: R1 and the
    simulator both charge T_1(1) when the re-predicted bonus draft disagrees (charging
    T_1(θ + 1) there moves the speedup by about 150 standard errors)."""
    from simulators.runs import simulate_runs

    tab = [0.1, 2.0, 2.0, 2.0, 2.0, 2.0]
    cfg = {"models": [{"name": "t", "cost": {"table": tab}}, {"name": "d", "cost": 0.02}],
           "acceptance": [{"run_hazard": [0.1, 0.05, 0.05], "tail": 0.05}],
           "thresholds": [4], "round": "pipespec"}
    cas = polyspec.load_cascade(cfg)
    want = 0.1 / sync_two_level(RunLaw([0.1, 0.05, 0.05], 0.05), 4, 0.02,
                                lambda m: tab[m - 1], recheck_bonus=True)["time_per_token"]
    assert polyspec.predict(cas).speedup == pytest.approx(want, rel=1e-12)
    s = simulate_runs(cas, 20_000, 1, chains=64).speedup
    assert abs(s.value - want) <= Z * s.se



def test_one_executable_for_every_length():
    """Compiles, not numbers: rounds and burn-in are traced, so runs of other lengths reuse
    the compiled run; the hazard table's padding (the tail repeated) changes no number: the
    same run on the unpadded table gives the same tokens and time."""
    import jax.numpy as jnp

    from simulators import runs
    from simulators.runtime import make_key

    cas = polyspec.load_cascade({**CFG, "round": "pipespec"})
    a = runs.simulate_runs(cas, 300, 1, chains=16, burn_in=7)
    size = runs._run._cache_size()
    runs.simulate_runs(cas, 500, 2, chains=16, burn_in=0)
    assert runs._run._cache_size() == size
    q, costs = runs._tables(cas)
    assert len(q) % runs.HAZARD_STEP == 0 and len(q) > len(HAZ) + 1
    tok, tim = runs._run(jnp.asarray(np.array([*HAZ, TAIL])), jnp.asarray(costs), make_key(1),
                         4, True, 16, jnp.int64(300), jnp.int64(7))
    assert a.tokens == int(np.asarray(tok).sum())
    assert a.speedup == runs.ratio_estimate(np.asarray(tok, np.float64), np.asarray(tim),
                                            scale=cas.models[0].cost.t1)
