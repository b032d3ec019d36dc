"""One name for the draft length on the command line (issue 37): ``--thresholds`` (θ per
adjacent pair). An engine's γ (``--gamma``) is θ, PipeSpec's lookahead K (``--lookahead``) is
θ + 1, and ``K=`` values are refused with the conversion, on one line naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "examples" / "engine-logs" / "vllm_v1_log_issue19254.txt"
SWEEP = ROOT / "examples" / "engine-logs" / "vllm_eagle_sweep_issue20780.txt"


def _refused(capsys, argv, option, text):
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"error: {option}:" in err, err
    assert text in err, err


@pytest.mark.parametrize("option, value, theta", [("--gamma", 5, 5), ("--lookahead", 8, 7),
                                                  ("--lookahead", 1, 0)])
def test_retired_spellings_name_thresholds_and_the_conversion(capsys, option, value, theta):
    _refused(capsys, ["fit", LOG, option, value], option, f"give --thresholds {theta}")


def test_fit_takes_one_draft_length(capsys):
    _refused(capsys, ["fit", LOG, "--thresholds", "3,2"], "--thresholds", "one draft length")
    # the engine's own check of the draft length names our option
    _refused(capsys, ["fit", LOG, "--thresholds", "5"], "--thresholds", "not 5")


def test_k_values_are_refused_with_the_plain_number(capsys):
    _refused(capsys, ["calibrate", SWEEP, "--method", "EAGLE 1", "--fit-on", "K=2,7"],
             "--fit-on", "as plain numbers (e.g. 2)")
    assert main(["calibrate", str(SWEEP), "--method", "EAGLE 1", "--fit-on", "2,7",
                 "--json"]) == 0
    capsys.readouterr()
