"""Issue 32: the CLI bugs a newcomer hit following the README (each test failed before)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from paper_figures.registry import FIGURES
from polyspec import cli

ROOT = Path(__file__).resolve().parents[2]


class _Called(Exception):
    pass


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    raise AssertionError("no sub-commands")


def test_tree_with_a_leading_minus_parses_in_capture_and_forecast():
    parser = cli.build_parser()
    for argv in (["capture", "--models", "target,ngram", "--thresholds", "2",
                  "--tree", "-1,0,0,1", "--out", "o"],
                 ["forecast", "--traces", "d", "--models", "a,b", "--thresholds", "2",
                  "--tree", "-1,0,0,1"]):
        args = parser.parse_args(cli._join_negative_lists(argv))
        assert args.tree == "-1,0,0,1"


def test_join_negative_lists_leaves_other_words_alone():
    j = cli._join_negative_lists
    assert j(["--tree", "-1,0,0,1"]) == ["--tree=-1,0,0,1"]
    assert j(["--tree=-1,0", "x"]) == ["--tree=-1,0", "x"]
    assert j(["--seed", "-3"]) == ["--seed", "-3"]  # one negative number: argparse's own
    assert j(["-1,0"]) == ["-1,0"]
    assert j(["--out", "--tree", "-1,2"]) == ["--out", "--tree=-1,2"]


def test_async_capture_without_ar_models_uses_every_model(monkeypatch):
    import validation.capture.async_ as ac

    seen = {}

    def fake(spec, **kw):
        seen["ar_models"] = spec.checked().ar_models  # the spec as the capture reads it
        raise _Called

    monkeypatch.setattr(ac, "capture_async", fake)
    # the fake records the call, then stops the command (reported as an internal error)
    cli.main(["capture", "--mode", "async", "--models", "target,draft-t",
              "--thresholds", "0", "--queue", "48", "--out", "o"])
    assert seen["ar_models"] == "all"
    cli.main(["capture", "--mode", "async", "--models", "target,draft-t",
              "--thresholds", "0", "--ar-models", "target", "--out", "o"])
    assert seen["ar_models"] == "target"


def test_help_texts_show_no_doubled_percent():
    for name, sub in _subparsers(cli.build_parser()).items():
        text = sub.format_help()
        assert "%%" not in text, name
    top = cli.build_parser().format_help()
    assert "%%" not in top


def test_help_texts_name_what_exists():
    subs = _subparsers(cli.build_parser())
    only = subs["figures"].format_help()
    assert f"1-{max(FIGURES)}" in " ".join(only.split())
    verify = " ".join(subs["verify"].format_help().split())
    for family in ("T1-T5", "A1", "AS1", "AS2", "B2"):
        assert family in verify, family
    profile = " ".join(subs["profile"].format_help().split())
    assert "validate --batch-profile" in profile
    simulate = " ".join(subs["simulate"].format_help().split())
    assert "theory-serving" not in simulate and "docs/theory.md Part III-C" in simulate
    assert (ROOT / "docs" / "theory.md").read_text(encoding="utf-8").count("Part III-C") >= 1


def test_no_file_points_to_a_missing_doc():
    for path in [*(ROOT / "configs").glob("*.json"), *(ROOT / "polyspec").rglob("*.py")]:
        assert "theory-serving" not in path.read_text(encoding="utf-8"), path


def _runs(*names):
    from types import SimpleNamespace as NS

    return [NS(models=[NS(name=n) for n in names])]


def test_a_model_may_be_named_by_any_unique_part():
    from polyspec_theory.errors import PolyspecInputError
    from validation.analysis.pipespec_forecast import resolve_model_names

    runs = _runs("Meta-Llama-3.1-70B-Instruct", "Llama-3.1-8B-Instruct",
                 "Llama-3.2-1B-Instruct")
    full, prec = resolve_model_names(runs, ("1b", "8B", "70B"), {"8B": "float16"})
    assert full == ("Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct",
                    "Meta-Llama-3.1-70B-Instruct")
    assert prec == {"Llama-3.1-8B-Instruct": "float16"}
    # an exact name wins over a longer one containing it
    exact = _runs("a-1B", "a-1B-chat")
    assert resolve_model_names(exact, ("a-1B",))[0] == ("a-1B",)
    for names, said in ((("Llama", "1B"), "give more of the name"),
                        (("3B", "1B"), "'3B' is in no trace file"),
                        (("1B", "3.2"), "name the same model twice")):
        with pytest.raises(PolyspecInputError) as e:
            resolve_model_names(runs, names)
        assert said in str(e.value) and (
            "models seen: Llama-3.1-8B-Instruct, Llama-3.2-1B-Instruct, "
            "Meta-Llama-3.1-70B-Instruct" in str(e.value) or "twice" in said)


def test_no_numpy_warning_reaches_the_user(tmp_path, capsys):
    import json
    import warnings

    runs = {"name": "x", "time_unit": "ms", "autoregressive": {"time_per_token": 1e300},
            "models": [{"name": "t", "overhead": "fit"}, {"name": "d", "cost": "fit"}],
            "runs": [{"name": "a", "thresholds": [2], "acceptance": [{"tau": 2.1}],
                      "time_per_token": 4.37},
                     {"name": "b", "thresholds": [3], "acceptance": [{"tau": 2.2}],
                      "time_per_token": 4.2}]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs), encoding="utf-8")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc = cli.main(["calibrate", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and [str(w.message) for w in seen] == []
    assert len(err.splitlines()) == 1 and err.startswith("polyspec calibrate: error: runs:")


def test_one_decision_rule_for_every_recommendation():
    from polyspec_theory.planning.advice import CONFIDENT, decide
    from validation.analysis import plan_uncertainty

    assert CONFIDENT == plan_uncertainty.CONFIDENT == 0.9
    assert decide("a", "b", probability_best=0.9)["decision"] == "confident"
    assert decide("a", "b", probability_best=0.89)["decision"] == "too close to call"
    # the numbers of issue 32: async MC 2.219 [2.149, 2.289] against sync 2.191
    d = decide("async", "sync", speedup=2.219, interval=(2.149, 2.289), rival_speedup=2.191)
    assert d["decision"] == "too close to call" and d["text"].startswith("too close to call")
    assert decide("async", "sync", speedup=2.3, interval=(2.2, 2.4),
                  rival_speedup=2.191)["decision"] == "confident"
    assert decide("sync", "async", speedup=2.3, rival_speedup=2.2,
                  rival_interval=(2.1, 2.31))["decision"] == "too close to call"
    assert decide("async", "sync", speedup=3.2, rival_speedup=3.1)["text"] == \
        "run async (confident: exact)"


def _async_rep(speedup, ci, sync):
    return {"method": "simulated", "speedup": speedup, "speedup_ci95": ci,
            "bounds": [1.0, 3.0], "rules": [], "config": {"models": []}, "levels": [],
            "sync": {"speedup": sync}, "async_over_sync_bounds": None}


def test_predict_async_says_run_async_only_when_its_interval_does():
    from polyspec_theory.schemes.async_ import report_text as async_text

    close = async_text(_async_rep(2.219, [2.149, 2.289], 2.1909))
    assert "-> too close to call" in close and "run async" not in close
    clear = async_text(_async_rep(2.5, [2.4, 2.6], 2.1909))
    assert "-> run async (confident" in clear


def test_plan_run_line_follows_the_decision():
    from polyspec_theory.planning.modes import modes_text

    modes = {"chains": [], "note": "n", "recommendation": {
        "chain": ["target", "draft-t"], "mode": "async", "thresholds": [5], "speedup": 2.0}}
    assert "\nRun: target <- draft-t async thresholds [5]" in "\n" + modes_text(modes)
    close = modes_text(modes, probability_best=0.44)
    assert "Run:" not in close and "Not decided: too close to call: target <- draft-t" in close
    assert "Run: run target <- draft-t" not in modes_text(modes, probability_best=0.95)
    assert "Run: target <- draft-t" in modes_text(modes, probability_best=0.95)


def test_a_fitted_law_used_past_its_data_is_named(tmp_path, capsys):
    import json
    import warnings

    from polyspec import api

    log = ROOT / "examples" / "engine-logs" / "vllm_v1_log_issue19254.txt"
    (tmp_path / "fit.json").write_text(json.dumps(api.fit(log)), encoding="utf-8")
    cfg = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.0}],
           "acceptance": [{"fit": "fit.json", "law": "positional"}], "thresholds": [12]}
    (tmp_path / "c.json").write_text(json.dumps(cfg), encoding="utf-8")
    assert cli.main(["predict", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "polyspec predict: warning: acceptance[0].fit: fitted on drafts at positions 1..3, "
        "used at threshold 12: positions 4..12 are extrapolated; the positional law repeats "
        "its last rate 0.8116 there"]
    cfg["thresholds"] = [4]  # one position past the data
    (tmp_path / "c.json").write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.warns(api.FitExtrapolationWarning, match=r"positions 4\.\.4 are extrapolated"):
        api.load_cascade(tmp_path / "c.json")
    cfg["thresholds"] = [3]  # inside the data: silent
    (tmp_path / "c.json").write_text(json.dumps(cfg), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", api.FitExtrapolationWarning)
        api.load_cascade(tmp_path / "c.json")
    # the SGLang case of issue 32: a positional fit ending in 1.0
    with pytest.warns(api.FitExtrapolationWarning,
                      match=r"past position 5 accepted"):
        api._extrapolation("acceptance[0]", {"positional": [0.8, 0.9, 1.0, 1.0, 1.0]}, 5, 12)


def test_validate_progress_without_a_terminal_says_how_long(capsys):
    """`validate` on a pipe: a line after the first configuration with the time left, then one
    at each quarter (polyspec/commands/validate.py _progress_lines)."""
    from polyspec.commands.validate import _progress_lines

    progress = _progress_lines()
    for done in range(1, 9):
        progress(done, 8)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [ln.split()[1] for ln in lines] == ["1/8", "2/8", "4/8", "6/8", "8/8"]
    assert "reading and fitting" in lines[0]
    assert all("s left" in ln for ln in lines[1:]) and lines[-1].endswith("about 0 s left")
