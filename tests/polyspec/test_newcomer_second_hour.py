"""A newcomer's second hour (issue 39): every documented command gives one answer, says which
configuration a number belongs to, and refuses what it cannot serve in one line.

* ``plan`` makes ONE recommendation: the best synchronous cascade, unless an asynchronous
  pipeline is both run by the engine the pool names and ahead beyond the uncertainty;
* ``plan`` on a cascade config says so (not "thresholds: unknown field")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyspec.cli import main
from tests.cli_checks import run_checked

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eagle_pool(tmp_path_factory):
    """The README's EAGLE-1 pool (calibrated from the vLLM sweep), as a newcomer makes it."""
    d = tmp_path_factory.mktemp("eagle")
    assert main(["calibrate", str(ROOT / "configs" / "calibration-eagle1.json"),
                 "--write-pool", str(d / "pool.json")]) == 0
    return d / "pool.json"


def _plan(capsys, pool, *extra):
    capsys.readouterr()
    assert main(["plan", str(pool), *extra]) == 0
    return capsys.readouterr().out


def test_plan_on_the_readme_pool_recommends_one_thing(capsys, eagle_pool):
    out = _plan(capsys, eagle_pool)
    runs = [ln for ln in out.splitlines() if ln.startswith("Run:")]
    assert runs == ["Run: llama-3.1-8b <- eagle1 sync thresholds [3] (1.6325x)"], out
    assert "Best cascade: llama-3.1-8b <- eagle1  thresholds [3]" in out
    # the faster async pipeline is shown, not advised: vLLM does not run one
    assert "not advised: the pool names no engine that runs an asynchronous pipeline" in out
    data = json.loads(_plan(capsys, eagle_pool, "--json"))
    rec = data["modes"]["recommendation"]
    assert (rec["mode"], rec["thresholds"]) == ("sync", [3])
    assert rec["not_advised"]["mode"] == "async"


def _with(tmp_path, pool, **extra):
    cfg = {**json.loads(pool.read_text()), **extra}
    p = tmp_path / "pool.json"
    p.write_text(json.dumps(cfg))
    return p


def test_plan_advises_async_only_for_an_engine_that_runs_it(capsys, eagle_pool, tmp_path):
    out = _plan(capsys, _with(tmp_path, eagle_pool, engine="vllm"))
    assert "Run: llama-3.1-8b <- eagle1 sync thresholds [3]" in out
    assert "engine 'vllm' does not run one" in out
    out = _plan(capsys, _with(tmp_path, eagle_pool, engine="pipespec"))
    assert "Run: llama-3.1-8b <- eagle1 async thresholds [2] (1.6422x" in out
    rc, _, err, _ = run_checked(capsys, ["plan", _with(tmp_path, eagle_pool, engine=3)])
    assert rc == 2 and "error: engine:" in err


def test_a_mode_switch_must_clear_the_interval():
    """With the synchronous best's 95 % interval known (plan --traces), the async value (same
    relative width) must lie wholly above it: 1.6422 against 1.6325 [1.60, 1.66] does not;
    against [1.630, 1.634] it does."""
    from polyspec_theory.planning.modes import plan_modes
    from polyspec_theory.planning.planner import plan
    from polyspec_theory.planning.pool import Pool

    cfg = {"name": "p", "engine": "polyspec",
           "models": [{"name": "t", "cost": 7.07, "overhead": 0.6402},
                      {"name": "d", "cost": 0.7334}],
           "acceptance": {"t|d": {"positional": [0.72935, 0.50818]}}, "max_threshold": 10}
    pool = Pool.from_config(cfg)
    result = plan(pool, 3)
    sy = result.best.speedup
    wide = plan_modes(pool, result, (sy - 0.03, sy + 0.03))["recommendation"]
    assert wide["mode"] == "sync" and "inside the uncertainty" in wide["not_advised"]["why"]
    narrow = plan_modes(pool, result, (sy - 0.002, sy + 0.002))["recommendation"]
    assert narrow["mode"] == "async"
    # the async point (1.6422) is above the sync interval's top (1.6375), but its own lower
    # end (same relative width below it: 1.622) is not: not advised
    lopsided = plan_modes(pool, result, (sy - 0.02, sy + 0.005))["recommendation"]
    assert lopsided["mode"] == "sync"


def test_plan_on_a_cascade_config_says_it_needs_a_pool(capsys):
    rc, _, err, _ = run_checked(capsys, ["plan", ROOT / "configs" / "default.json"])
    assert rc == 2 and "error: pool: this is a cascade config" in err and "predict" in err


def test_validate_time_left_holds_within_2x():
    """`validate data/traces/cpu` said 1653 s left after its first configuration and took
    173 s: the first one carries the one-off work (reading and fitting every capture), and
    was extrapolated. With a clock scripted as that run (150 s of one-off work, then 2 to 8 s
    per configuration), every time left printed is within 2x of the time that follows."""
    import io
    import re

    from polyspec.commands.validate import _progress_lines

    rng = __import__("numpy").random.default_rng(0)
    per = [150.0] + list(rng.uniform(2, 8, 34))
    ends = __import__("numpy").cumsum(per)
    t = {"now": 0.0}
    out = io.StringIO()
    progress = _progress_lines(clock=lambda: t["now"], out=out)
    for done, end in enumerate(ends, 1):
        t["now"] = float(end)
        progress(done, len(ends))
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and "s left" not in lines[0]
    for ln in lines[1:]:
        done = int(re.search(r"(\d+)/", ln).group(1))
        said = float(re.search(r"about (\d+) s left", ln).group(1))
        true = float(ends[-1] - ends[done - 1])
        assert (said == true == 0) or 0.5 * true <= said <= 2 * true, (ln, true)


def test_the_figures_bar_follows_figure_7(monkeypatch, tmp_path):
    """`polyspec figures` stalled 5 minutes on figure 7 (validate of every capture): the bar
    now receives that figure's progress, configuration by configuration."""
    from paper_figures import fig07_predicted_vs_measured as fig7
    from paper_figures.registry import build_figure

    seen = []

    class Stop(Exception):
        pass

    def fake_validate(captures, *a, progress=None, **kw):
        for i in range(1, 4):
            progress(i, 3)
        raise Stop

    monkeypatch.setattr(fig7, "validate", fake_validate)
    # the progress plumbing needs some captures, not the 43 committed ones (seconds to read)
    small = ROOT / "tests" / "validation" / "fixtures" / "traces"
    monkeypatch.setattr(fig7.trace_sources, "default_traces_dir", lambda device="cpu": small)
    with pytest.raises(Stop):
        build_figure(7, tmp_path, quick=True, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


PS = ROOT / "tests" / "fixtures" / "gpu-traces" / "pipespec-humaneval"


def _forecast_text(capsys, folder, *args):
    capsys.readouterr()
    rc = main(["forecast", "--traces", str(folder), *map(str, args)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, err


def test_a_forecast_at_the_edge_of_its_interval_says_why_first(capsys):
    """70B <- 1B at K = 4: the 70B verify was measured at K = 8 only, so a 4-token call costs
    the 8-token call at the point and the line from T(1) at the interval's top: the point
    sits at the bottom (0.966 [0.941, 1.529]); the reason is the line after the headline."""
    out, _ = _forecast_text(capsys, PS, "--models", "70B,1B", "--thresholds", 3)
    head, why = out.splitlines()[:2]
    assert "forecast speedup 0.966" in head
    assert why.startswith("  the point sits near the bottom of its interval")
    assert "interval: the line from T(1)" in why


def test_one_run_is_no_spread(capsys):
    out, _ = _forecast_text(capsys, PS, "--models", "70B,8B", "--thresholds", 2)
    assert "run-to-run sd 0.00000" not in out and "+-0.00000" not in out
    assert "one run: no run-to-run spread measured" in out


def test_lookahead_one_is_served_with_a_warning(capsys):
    out, err = _forecast_text(capsys, PS, "--models", "8B,1B", "--thresholds", 0, "--dtype",
                              "8B=float32")
    assert err.startswith("polyspec forecast: warning: lookahead 1 drafts nothing")
    assert "forecast speedup 0.6" in out  # slower than greedy, as the policy makes it


def test_async_forecast_without_async_runs_states_no_interval(capsys, tmp_path):
    import shutil

    for f in PS.glob("*.json"):
        if not f.name.startswith("async-chain"):
            shutil.copy(f, tmp_path / f.name)
    rc, out, err, data = run_checked(capsys, ["forecast", "--traces", tmp_path, "--models",
                                              "8B,1B", "--thresholds", 0, "--mode", "async",
                                              "--dtype", "8B=float32", "--json"])
    assert rc == 0 and data["interval95"] is None
    assert "0 asynchronous run(s)" in data["warnings"][0] and "warning:" in err
    out, _ = _forecast_text(capsys, tmp_path, "--models", "8B,1B", "--thresholds", 0,
                            "--mode", "async", "--dtype", "8B=float32")
    assert "no 95 % interval" in out.splitlines()[0]


PRE2 = ROOT / "data" / "traces" / "cpu" / "preregistered-2"


def _score_file(tmp_path, **change):
    import shutil

    line = json.loads((PRE2 / "forecasts.jsonl").read_text().splitlines()[0])
    (tmp_path / "captures").mkdir()
    shutil.copy(PRE2 / "captures" / f"{line['name']}.jsonl", tmp_path / "captures")
    p = tmp_path / "forecasts.jsonl"
    p.write_text(json.dumps({**line, **change}) + "\n")
    return p


@pytest.mark.parametrize("change,msg", [
    ({"levels": 2}, "levels 2, but the capture"),  # a 3-model capture
    ({"levels": 0}, "levels must be the number of models"),
    ({"levels": True}, "levels must be the number of models"),
])
def test_score_refuses_a_forecast_of_another_configuration(capsys, tmp_path, change, msg):
    rc, _, err, _ = run_checked(capsys, ["forecast", "--score", _score_file(tmp_path, **change)])
    assert rc == 2 and "error: --score:" in err and msg in err


def test_score_of_an_empty_file_says_so(capsys, tmp_path):
    p = tmp_path / "forecasts.jsonl"
    for text in ("", "\n\n"):
        p.write_text(text)
        rc, _, err, _ = run_checked(capsys, ["forecast", "--score", p])
        assert rc == 2 and "no forecast in it" in err
    rc, _, err, data = run_checked(capsys, ["forecast", "--score", _score_file(tmp_path),
                                            "--json"])
    assert rc == 0 and data["captured"] == 1


def test_refusals_name_what_is_wrong(capsys, tmp_path):
    import shutil

    rc, _, err, _ = run_checked(capsys, ["profile", "--cascade", "target", "ngram",
                                         "--thresholds", "3", "--traces", tmp_path / "nope"])
    assert rc == 2 and "error: --traces:" in err and "no such folder" in err
    chains = tmp_path / "chains"
    chains.mkdir()
    for f in PS.glob("chain_*.json"):
        shutil.copy(f, chains / f.name)
    for argv in (["validate", chains], ["plan", "--traces", chains]):
        rc, _, err, _ = run_checked(capsys, argv)
        assert rc == 2 and "no greedy baseline of" in err and "greedy_<model>.json" in err


def test_a_folder_missing_some_baselines_says_which(capsys, tmp_path):
    import shutil

    for f in list(PS.glob("chain_*.json")) + list(PS.glob("greedy_Meta*.json")):
        shutil.copy(f, tmp_path / f.name)
    capsys.readouterr()
    assert main(["plan", "--traces", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "note: chains into Llama-3.1-8B-Instruct not forecast: no greedy baseline" in out
    # no chain can be forecast from the others here: no decision on unmeasured error
    assert "Best: not decided: no chain of this folder can be forecast from the others" in out
    rc, _, err, _ = run_checked(capsys, ["validate", tmp_path])
    assert rc == 2 and "have no greedy baseline" in err


def test_the_pool_format_in_usage_md_is_a_pool(tmp_path, capsys):
    """docs/usage.md states the pool format with an example: it plans (its fit file made
    here by `polyspec fit` on an engine sample)."""
    import re

    text = (ROOT / "docs" / "usage.md").read_text()
    block = re.search(r"\*\*The pool format\*\*.*?```json\n(.*?)```", text, re.S).group(1)
    cfg = json.loads(block)
    (tmp_path / "fits").mkdir()
    sample = ROOT / "tests" / "fixtures" / "engine-samples" / "vllm_v0_log_issue9539.txt"
    capsys.readouterr()
    assert main(["fit", str(sample), "--json"]) == 0
    (tmp_path / "fits" / "mid-small.json").write_text(capsys.readouterr().out)
    p = tmp_path / "pool.json"
    p.write_text(json.dumps(cfg))
    out = _plan(capsys, p)
    assert "Best cascade:" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("Run:")]) == 1
