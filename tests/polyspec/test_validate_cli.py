"""`polyspec validate` on the committed trace subset; traces round-trip to the same captures;
bad trace files give clear one-line errors (exit status 2)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from polyspec.cli import main
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, Positional
from validation.analysis.validate import validate
from validation.traces.records import read_traces
from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

FIXTURES = Path(__file__).resolve().parents[1] / "validation" / "fixtures"
FIX = FIXTURES / "traces"


def _run(capsys, *argv):
    rc = main(["validate", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["validate", str(FIX), "--out", str(out), "--json"])
    return rc, json.loads(buf.getvalue()), out


def test_json_output_and_report_files(report):
    rc, obj, out = report
    assert rc == 0 and obj["headline"] == "predictive"
    names = sorted(p.stem for p in FIX.glob("*.jsonl"))
    assert sorted(c["name"] for c in obj["configs"]) == names
    errs = []
    for c in obj["configs"]:
        assert {"name", "measured_speedup", "measured_ci95", "predicted_speedup", "error",
                "inside_ci", "diagnostics"} <= set(c)
        lo, hi = c["measured_ci95"]
        assert lo < c["measured_speedup"] < hi
        for d in c["diagnostics"].values():
            assert d["error"] == pytest.approx(d["speedup"] / c["measured_speedup"] - 1,
                                               rel=1e-12)
        if c["predicted_speedup"] is None:  # a pair of it was captured nowhere else
            assert c["error"] is None and c["inside_ci"] is None
            continue
        assert c["error"] == pytest.approx(c["predicted_speedup"] / c["measured_speedup"] - 1,
                                           rel=1e-12)
        assert c["inside_ci"] == (lo <= c["predicted_speedup"] <= hi)
        errs.append(abs(c["error"]))
    # the fixtures are designed so that one configuration has every pair captured elsewhere
    assert len(errs) == obj["summary"]["n_predicted"] == 1
    assert obj["median_abs_error"] == pytest.approx(float(np.median(errs)), rel=1e-12)
    assert obj["max_abs_error"] == pytest.approx(max(errs), rel=1e-12)
    # the fixtures carry decoder overhead (known): the extended model must explain it
    s = obj["summary"]
    assert s["dominant_residual"] == "overhead"
    d = s["diagnostics"]
    assert d["extended"]["median_abs_error"] < d["p1_best"]["median_abs_error"]
    md = (out / "report.md").read_text()
    for c in obj["configs"]:
        assert c["name"] in md
    assert (out / "scatter.png").stat().st_size > 1000
    assert len(list(out.glob("acceptance_*.png"))) == len(obj["pairs"])
    assert len(list(out.glob("cost_*.png"))) == 4  # target, mid, small, ngram
    full = json.loads((out / "validation.json").read_text())
    assert len(full["details"]) == len(names)
    # every law is reported, the Gaussian included
    assert {f["law"] for p in full["pairs"] for f in p["fits"]} == {
        "iid", "positional", "beta", "gaussian"}
    # P5 on the captured cascades: target->ngram with mid or small inserted was captured
    measured = [x for x in full["insertions"] if x["measured"] is not None]
    assert measured and all(0 <= x["confidence"] <= 1 for x in full["insertions"])


def test_text_output(capsys, tmp_path):
    rc, out, err = _run(capsys, FIX, "--out", tmp_path, "--no-plots", "--no-insertions",
                        "--laws", "iid,positional")
    assert rc == 0 and err == ""
    assert "headline (predictive" in out and "diagnostic extended:" in out
    assert not list(tmp_path.glob("*.png"))


def test_notes_go_to_stderr_and_the_result_comes_last(capsys, tmp_path, monkeypatch):
    """Issue 32: a capture's notes (e.g. 'T(1) moved') were printed on stdout."""
    import dataclasses

    import validation.traces.records as traces

    real = traces.read_traces

    def with_note(*a, **kw):
        caps = real(*a, **kw)
        return [dataclasses.replace(caps[0], notes=(*caps[0].notes, "planted note")),
                *caps[1:]]

    monkeypatch.setattr(traces, "read_traces", with_note)
    rc, out, err = _run(capsys, FIX, "--out", tmp_path, "--no-plots", "--no-insertions",
                        "--laws", "iid,positional")
    assert rc == 0
    assert "note:" not in out and out.splitlines()[-1].startswith("report: ")
    assert err.splitlines() == ["note: planted note"]
    assert not list(tmp_path.glob("*.png"))


def test_trace_round_trip_gives_the_same_capture(tmp_path):
    costs = [CostCurve.affine(6e-3, 4e-4), CostCurve.affine(1.6e-3, 1e-4),
             CostCurve.constant(3e-5)]
    cap, trace = simulate_capture(SyntheticSpec("rt", ["t", "m", "g"], costs,
                                  [BetaMixed(5.0, 2.0), Positional([0.6, 0.5])], [4, 2],
                                  prompts=3, tokens_per_prompt=64, noise=0.05, seed=9))
    write_trace(tmp_path / "rt.jsonl", cap, trace, digits=16)
    (back,) = read_traces(tmp_path)
    assert back.notes == ()
    assert back.name == "rt" and back.models == cap.models and back.thresholds == (4, 2)
    assert back.tokens == cap.tokens and back.forward_count == cap.forward_count
    assert back.wall_s == pytest.approx(cap.wall_s, rel=1e-9)
    for a, b in zip(back.rounds, cap.rounds, strict=True):
        for k in ("ctx", "G", "A", "m", "prompt"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
        np.testing.assert_allclose(a.verify_s, b.verify_s, rtol=1e-8)
    for name in cap.models:
        x, y = back.baselines[name], cap.baselines[name]
        assert x.ar_time_per_token == pytest.approx(y.ar_time_per_token, rel=1e-9)
        assert x.ar_context == y.ar_context
        np.testing.assert_allclose(np.sort(x.cost_s), np.sort(y.cost_s), rtol=1e-8)
    r1 = validate([cap], insertions=False, holdout=False).configs[0]
    r2 = validate([back], insertions=False, holdout=False).configs[0]
    assert r2.measured_speedup == pytest.approx(r1.measured_speedup, rel=1e-8)
    assert r2.diagnostics == pytest.approx(r1.diagnostics, rel=1e-6)


def _copy(tmp_path, n=2):
    d = tmp_path / "traces"
    d.mkdir()
    files = sorted(FIX.glob("*.jsonl"))[:n]
    for f in files:
        shutil.copy(f, d / f.name)
    return d, sorted(d.glob("*.jsonl"))


def test_truncated_last_line_needs_the_flag(capsys, tmp_path):
    d, files = _copy(tmp_path)
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-40])  # cut inside the last record
    n_lines = data[:-40].count(b"\n") + 1
    rc, out, err = _run(capsys, d, "--out", tmp_path / "r", "--no-plots", "--no-insertions")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert f"line {n_lines}: truncated last line" in err and files[0].name in err
    rc, out, err = _run(capsys, d, "--out", tmp_path / "r", "--no-plots", "--no-insertions",
                        "--allow-truncated")
    assert rc == 0
    assert "truncated last line skipped" in err  # notes on stderr (issue 32)
    assert "capture not finished" in err  # the cut record was the end record


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello world\n", "line 1: not a polyspec trace"),
        ('{"type": "header", "schema": "polyspec-trace", "schema_version": 99}\n',
         "line 1: unsupported schema_version 99"),
        ("", "file is empty"),
    ],
)
def test_foreign_or_unknown_files_are_named(capsys, tmp_path, content, message):
    d = tmp_path / "t"
    d.mkdir()
    (d / "bad.jsonl").write_text(content)
    rc, out, err = _run(capsys, d, "--out", tmp_path / "r")
    assert rc == 2 and message in err and "bad.jsonl" in err


def test_bad_record_in_the_middle_is_named(capsys, tmp_path):
    d, files = _copy(tmp_path, 1)
    lines = files[0].read_text().splitlines(keepends=True)
    i = next(k for k, x in enumerate(lines) if '"type":"round"' in x)
    rec = json.loads(lines[i])
    rec["A"] = rec["G"] + 1
    rec["L"] = rec["A"] + 1
    lines[i] = json.dumps(rec) + "\n"
    files[0].write_text("".join(lines))
    rc, _, err = _run(capsys, d, "--out", tmp_path / "r")
    assert rc == 2 and f"line {i + 1}: round.A: inconsistent round" in err


def test_missing_baseline_and_bad_arguments(capsys, tmp_path):
    d, files = _copy(tmp_path, 1)
    kept = [x for x in files[0].read_text().splitlines(keepends=True)
            if not ('"type":"ar"' in x and '"model":"target"' in x)]
    files[0].write_text("".join(kept))
    rc, _, err = _run(capsys, d, "--out", tmp_path / "r")
    assert rc == 2 and "no autoregressive baseline" in err
    rc, _, err = _run(capsys, tmp_path / "nope")
    assert rc == 2 and "nope: no such directory" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = _run(capsys, tmp_path / "empty")
    assert rc == 2 and "no *.jsonl trace files" in err
    rc, _, err = _run(capsys, FIX, "--laws", "iid,normal")
    assert rc == 2 and "--laws: unknown law family 'normal'" in err


REAL = FIXTURES / "traces_cpu"


def test_validate_runs_on_the_committed_real_subset(tmp_path):
    # 2 prompts of 4 CPU captures (2-, 3-, 4-level; greedy and T = 1), cut from
    # validation/traces/cpu by fixtures/make_real_subset.py
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["validate", str(REAL), "--out", str(tmp_path), "--json", "--no-plots"])
    assert rc == 0
    obj = json.loads(buf.getvalue())
    assert len(obj["configs"]) == 4
    for c in obj["configs"]:
        plain, ext = c["diagnostics"]["p1_best"]["error"], c["diagnostics"]["extended"]["error"]
        assert np.isfinite([c["measured_speedup"], plain, ext]).all()
        # on real CPU traces the in-cascade forwards are slower than every baseline: plain P1
        # over-predicts, and the extended model removes most of that error
        assert plain > 0
        assert abs(ext) < 0.5 * abs(plain)
    assert obj["summary"]["dominant_residual"] == "forward_cost"
    details = json.loads((tmp_path / "validation.json").read_text())["details"]
    four = next(d for d in details if len(d["models"]) == 4)
    assert four["decomposition"]["coupling"]["k"] >= 1


def test_forecast_command(capsys, tmp_path):
    """``polyspec forecast`` predicts a configuration that is not in the traces folder from
    the others (the fixtures' profiles carry the synthetic cost model), refuses one that is,
    and names what is missing."""
    import shutil

    d = tmp_path / "t"
    (d / "profiles").mkdir(parents=True)
    for f in FIX.glob("*.jsonl"):
        if f.stem != "target-mid_th4_T0":
            shutil.copy(f, d / f.name)
    prof = FIX / "profiles" / "target-mid_th4_T0.json"
    rc, out, err = _run_cli(capsys, "forecast", "--traces", d, "--models", "target,mid",
                            "--thresholds", "4", "--profile", prof, "--json")
    assert rc == 0, err
    obj = json.loads(out)
    assert obj["models"] == ["target", "mid"] and obj["interval95"] is None
    assert sorted(obj["acceptance_from"]) == ["target-mid-ngram_th4-3_T0",
                                              "target-mid-small-ngram_th4-3-2_T0"]
    assert obj["speedup"] == pytest.approx(obj["ar_time_per_token"] / obj["time_per_token"])
    rc, _, err = _run_cli(capsys, "forecast", "--traces", FIX, "--models", "target,mid",
                          "--thresholds", "4", "--profile", prof)
    assert rc == 2 and "already captured" in err
    rc, _, err = _run_cli(capsys, "forecast", "--traces", d, "--models", "target,mid",
                          "--thresholds", "5", "--profile", prof)
    assert rc == 2 and "--profile: is of ['target', 'mid'] [4]" in err
    (d / "target-ngram_th3_T0.jsonl").unlink()
    (d / "target-small-ngram_th3-2_T0.jsonl").unlink()
    rc, _, err = _run_cli(capsys, "forecast", "--traces", d, "--models", "target,small",
                          "--thresholds", "3", "--profile",
                          FIX / "profiles" / "target-small-ngram_th3-2_T0.json")
    assert rc == 2 and "--profile" in err


def _run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err
