"""Spec-Bench reader and leave-one-category-out validation on the trimmed fixture copies."""

import json
import os

import numpy as np
import pytest

from polyspec_theory.errors import PolyspecInputError
from validation.gpu_traces.specbench import (
    fit_report,
    read_answers,
    read_dir,
    validate_specbench,
)

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
    rep = fit_report(f)
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
