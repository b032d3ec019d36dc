"""Fuzzing ``polyspec fit`` and ``polyspec calibrate`` in-process (issue 27), like
``test_fuzz.py`` for configs and traces: each real engine sample with one number replaced by
a hostile value (null, n/a, 1e308, inf, a negative, a fraction, an empty cell, ...), a line
dropped or repeated, or the text cut.

Every run must exit 0 or 2 (no traceback, no internal error), print one line on exit 2 and
strict JSON on exit 0. And no impossible result may pass: on exit 0 the report's counts are
whole and consistent (``0 <= accepted <= rounds x cap``, ``accepted <= drafted``, rounds > 0),
every number is finite, and ``calibrate`` reproduces its own fit runs (the fitted model is
checked against the data it was fitted to)."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._samples import SAMPLES
from tests.cli_checks import run_checked

_SCALE = int(os.environ.get("POLYSPEC_FUZZ_SCALE", "1"))
SETTINGS = settings(max_examples=30 * _SCALE, deadline=None, derandomize=_SCALE == 1,
                    database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
HOSTILE = ["null", "n/a", "N/A", "1e308", "inf", "-inf", "nan", "-1", "0", "0.5", "", "1e300",
           "99999999999999999999", "-0", "1,5", "abc", "3.000000001"]
NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
FIT_SAMPLES = sorted(p.name for p in SAMPLES.iterdir()
                     if p.name not in ("README.md", "vllm_eagle_sweep_issue20780.txt"))
SWEEP = "vllm_eagle_sweep_issue20780.txt"


def _run(capsys, argv):
    rc, _, _, data = run_checked(capsys, argv)
    return rc, data


@st.composite
def mutated(draw, names):
    name = draw(st.sampled_from(names))
    text = (SAMPLES / name).read_text(encoding="utf-8")
    head, sep, body = text.partition("\n---\n")
    if not sep:
        head, body = "", text
    lines = body.split("\n")
    kind = draw(st.sampled_from(["number", "number", "number", "drop", "repeat", "cut"]))
    if kind == "number":
        spots = [(i, m) for i, ln in enumerate(lines) for m in NUMBER.finditer(ln)]
        if spots:
            i, m = draw(st.sampled_from(spots))
            new = draw(st.sampled_from(HOSTILE))
            lines[i] = lines[i][: m.start()] + new + lines[i][m.end():]
    elif kind in ("drop", "repeat") and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines[i: i + 1] = [] if kind == "drop" else [lines[i], lines[i]]
    else:
        cut = draw(st.integers(0, len(body)))
        lines = body[:cut].split("\n")
    return name, (head + sep if sep else "") + "\n".join(lines)


def _finite_numbers(obj):
    if isinstance(obj, float):
        assert obj == obj and abs(obj) != float("inf"), obj
    elif isinstance(obj, dict):
        for v in obj.values():
            _finite_numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            _finite_numbers(v)


@SETTINGS
@given(case=mutated(FIT_SAMPLES))
def test_fuzz_fit(tmp_path, capsys, case):
    name, text = case
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    rc, rep = _run(capsys, ["fit", path, "--json"])
    if rc:
        return
    _finite_numbers(rep)
    assert isinstance(rep["rounds"], int) and rep["rounds"] > 0
    assert isinstance(rep["accepted"], int) and rep["accepted"] >= 0
    for s in rep["snapshots"]:
        assert s["rounds"] > 0 and 0 <= s["accepted"]
        if s["cap"] is not None:
            assert s["accepted"] <= s["rounds"] * s["cap"], s
        if s["drafted"] is not None:
            assert s["accepted"] <= s["drafted"], s
        if s["histogram"] is not None:
            assert len(s["histogram"]) == s["cap"] + 1 and sum(s["histogram"]) == s["rounds"]


@SETTINGS
@given(case=mutated([SWEEP]), method=st.sampled_from(["EAGLE 1", "Eagle 3"]))
def test_fuzz_calibrate(tmp_path, capsys, case, method):
    _, text = case
    path = tmp_path / "sweep.txt"
    path.write_text(text, encoding="utf-8")
    rc, rep = _run(capsys, ["calibrate", path, "--method", method, "--json"])
    if rc:
        return
    _finite_numbers(rep)
    for p in rep["parameters"]:
        assert p["estimate"] >= 0, p
    # the fit reproduces its own runs (a wrong unit or a corrupt cell would not)
    for r in rep["runs"]:
        if not r["holdout"] and r["measured"] is not None:
            assert abs(r["relative_error"]) < 0.5, r


@pytest.mark.parametrize("value", HOSTILE)
def test_every_hostile_value_in_every_sweep_cell_kind(tmp_path, capsys, value):
    """The AL cell, the TPOT cell and the vanilla cell of the first K, each replaced."""
    text = (SAMPLES / SWEEP).read_text(encoding="utf-8")
    lines = text.split("\n")
    rows = [i for i, ln in enumerate(lines) if re.match(r"^\s*\|?\s*(2|K\s*=\s*2)\s*\|", ln)]
    for i in rows:
        cells = lines[i].split("|")
        for j in range(1, min(len(cells), 4)):
            bad = list(cells)
            bad[j] = f" {value} "
            path = tmp_path / "sweep.txt"
            path.write_text("\n".join(lines[:i] + ["|".join(bad)] + lines[i + 1:]))
            rc, rep = _run(capsys, ["calibrate", path, "--method", "EAGLE 1", "--json"])
            if rc == 0:
                _finite_numbers(rep)
