"""Spec-Bench reader and leave-one-category-out validation on the trimmed fixture copies."""

import json
import os

import numpy as np
import pytest

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.specbench import validate_specbench
from validation.formats.specbench import evidence, fit_report, read_answers, read_dir

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "gpu-traces",
                   "specbench-vicuna7b")
SPS = os.path.join(FIX, "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl")
VAN = os.path.join(FIX, "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl")


def _lines(path):
    with open(path) as fh:
        return [json.loads(x) for x in fh if x.strip()]


def test_reader_and_pooled_acceptance_from_the_raw_lines():
    raw = _lines(SPS)
    f = read_answers(SPS)
    assert f.method == "sps-68m" and not f.is_baseline and len(f.answers) == len(raw)
    acc = [x for r in raw for x in r["choices"][0]["accept_lengths"]]
    rep = fit_report(evidence(f))
    assert rep["mean_acceptance_length"] == pytest.approx(np.mean(acc), rel=1e-12)
    assert rep["rounds"] == len(acc) and rep["tokens"] == sum(acc)
    assert any("varies" in w for w in rep["warnings"])
    assert read_answers(VAN).is_baseline


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


def test_accept_lengths_must_add_up_to_tokens(tmp_path):
    raw = _lines(SPS)
    raw[4]["choices"][0]["accept_lengths"][0] += 1
    p = _write(tmp_path, "a.jsonl", raw)
    with pytest.raises(PolyspecInputError, match=r"a\.jsonl: line 5\.choices\[0\]\.accept_"):
        read_answers(p)


def test_truncated_line_and_nan_wall_time_are_named(tmp_path):
    p = tmp_path / "t.jsonl"
    text = open(SPS).read()
    p.write_text(text[: len(text) // 2])
    with pytest.raises(PolyspecInputError, match=r"t\.jsonl: line \d+.*malformed JSON"):
        read_answers(p)
    raw = _lines(SPS)
    raw[0]["choices"][0]["wall_time"][0] = float("nan")
    p2 = tmp_path / "n.jsonl"
    p2.write_text("\n".join(json.dumps(x) for x in raw))
    with pytest.raises(PolyspecInputError, match=r"line 1\.choices\[0\]\.wall_time\[0\]"):
        read_answers(p2)


def test_baseline_with_other_prompts_is_refused(tmp_path):
    van = _lines(VAN)[1:]
    _write(tmp_path, "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl", van)
    _write(tmp_path, "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl", _lines(SPS))
    with pytest.raises(PolyspecInputError, match="not in the baseline"):
        read_dir(tmp_path)


def test_validate_reports_every_method_and_category():
    rep = validate_specbench(FIX, n_boot=30)
    assert rep["headline"] == "costs-held-out"
    base, methods = read_dir(FIX)
    cats = base.categories()
    assert len(rep["configs"]) == len(methods) * len(cats)
    for c in rep["configs"]:
        lo, hi = c["measured_ci95"]
        assert lo <= c["measured_speedup"] <= hi
        assert c["error"] == pytest.approx(c["predicted_speedup"] / c["measured_speedup"] - 1)
    e = np.abs([c["error"] for c in rep["configs"]])
    assert rep["median_abs_error"] == pytest.approx(np.median(e))


def test_validate_left_out_category_does_not_influence_its_prediction(tmp_path):
    # scaling every wall time of one category in the method file changes its measured speedup
    # but not its prediction (the costs come from the other categories)
    base = validate_specbench(FIX, n_boot=2)
    raw = _lines(SPS)
    for r in raw:
        if r["category"] == "coding":
            r["choices"][0]["wall_time"] = [w * 1.5 for w in r["choices"][0]["wall_time"]]
    _write(tmp_path, os.path.basename(SPS), raw)
    _write(tmp_path, os.path.basename(VAN), _lines(VAN))
    rep = validate_specbench(tmp_path, n_boot=2)
    a = {c["name"]: c for c in base["configs"]}
    b = {c["name"]: c for c in rep["configs"]}
    assert b["sps-68m/coding"]["predicted_speedup"] == pytest.approx(
        a["sps-68m/coding"]["predicted_speedup"], rel=1e-9)
    assert b["sps-68m/coding"]["measured_speedup"] == pytest.approx(
        a["sps-68m/coding"]["measured_speedup"] / 1.5, rel=1e-9)
    assert b["sps-68m/math"]["predicted_speedup"] != pytest.approx(
        a["sps-68m/math"]["predicted_speedup"], rel=1e-6)


def _subset(tmp_path, cats, scale=1.0, name="sub"):
    d = tmp_path / name
    d.mkdir()
    for p in (SPS, VAN, os.path.join(FIX, "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl")):
        raw = [r for r in _lines(p) if cats is None or r["category"] in cats]
        for r in raw:
            r["choices"][0]["wall_time"] = [w * scale for w in r["choices"][0]["wall_time"]]
        _write(d, os.path.basename(p), raw)
    return d


def test_few_categories_leave_one_question_out(tmp_path):
    d = _subset(tmp_path, {"coding", "math", "qa"})
    rep = validate_specbench(d, n_boot=2)
    assert rep["held_out"] == {"eagle": "question", "sps-68m": "question"}
    assert rep["headline"] == "costs-held-out (question)"
    row = next(c for c in rep["configs"] if c["name"] == "sps-68m/math")
    # the category's prediction is the sum of its questions' held-out predictions
    qs = row["questions"]
    _, methods = read_dir(d)
    f = next(m for m in methods if m.method == "sps-68m")
    base = read_dir(d)[0]
    ids = {q["question_id"] for q in qs}
    bw = sum(sum(a.wall) for a in base.answers if a.question_id in ids)
    bn = sum(sum(a.tokens) for a in base.answers if a.question_id in ids)
    n = sum(sum(a.tokens) for a in f.answers if a.question_id in ids)
    assert row["predicted_speedup"] == pytest.approx(
        (bw / bn) / (sum(q["predicted_wall"] for q in qs) / n), rel=1e-12)
    # a question's own wall time does not enter its prediction; it enters the others'
    raw = _lines(os.path.join(d, os.path.basename(SPS)))
    qid = qs[0]["question_id"]
    for r in raw:
        if r["question_id"] == qid:
            r["choices"][0]["wall_time"] = [w * 1.7 for w in r["choices"][0]["wall_time"]]
    _write(d, os.path.basename(SPS), raw)
    rep2 = validate_specbench(d, n_boot=2)
    q2 = {q["question_id"]: q for c in rep2["configs"] if c["method"] == "sps-68m"
          for q in c["questions"]}
    assert q2[qid]["predicted_wall"] == pytest.approx(qs[0]["predicted_wall"], rel=1e-9)
    assert q2[qs[1]["question_id"]]["predicted_wall"] != pytest.approx(
        qs[1]["predicted_wall"], rel=1e-9)


def test_too_few_questions_is_refused_naming_the_file(tmp_path):
    d = _subset(tmp_path, {"coding"})
    with pytest.raises(PolyspecInputError, match="needs at least 5 categories or 5 "
                                                 "questions"):
        validate_specbench(d, n_boot=2)


def test_costs_from_another_folder_scale_by_the_ar_step(tmp_path):
    # a folder whose every wall time is 1.3x the fixture's: costs from the fixture, scaled by
    # the AR-step ratio 1.3, give exactly the fixture's in-sample predictions
    slow = _subset(tmp_path, None, scale=1.3, name="slow")
    a = validate_specbench(slow, costs_from=FIX, n_boot=2)
    b = validate_specbench(FIX, costs_from=FIX, n_boot=2)
    assert a["held_out"]["sps-68m"].startswith(f"costs-from {FIX}")
    assert "1.3000" in a["held_out"]["sps-68m"]
    pa = {c["name"]: c for c in a["configs"]}
    for c in b["configs"]:
        assert pa[c["name"]]["predicted_speedup"] == pytest.approx(c["predicted_speedup"],
                                                                   rel=1e-9)
        assert pa[c["name"]]["measured_speedup"] == pytest.approx(c["measured_speedup"],
                                                                  rel=1e-9)
    # and a few categories with costs from elsewhere are not refused
    few = _subset(tmp_path, {"coding"}, name="few")
    rep = validate_specbench(few, costs_from=slow, n_boot=2)
    assert {c["category"] for c in rep["configs"]} == {"coding"}
    assert {c["held_out"] for c in rep["configs"]} == {"costs-from"}
    # costs from a folder holding these very answers are in-sample (issue 39)
    rep = validate_specbench(few, costs_from=FIX, n_boot=2)
    assert {c["held_out"] for c in rep["configs"]} == {"in-sample"}


def test_costs_from_a_folder_without_the_method(tmp_path):
    d = tmp_path / "only"
    d.mkdir()
    _write(d, os.path.basename(VAN), _lines(VAN))
    _write(d, os.path.basename(SPS), _lines(SPS))
    with pytest.raises(PolyspecInputError, match=r"--costs-from.*no 'eagle' answers"):
        validate_specbench(FIX, costs_from=d, n_boot=2)
