"""Bad input gets one clear line on stderr and exit 2, or a correct result (issue 17): config
files that are not UTF-8, too big, too deep, YAML anchor/alias bombs; numbers out of double
range; Beta laws with tiny parameters; plans that would rank NaN; wide blocks and long runs
in ``simulate``; output names outside ``--out``; a closed stdout; and ``--json`` output that
is always strict JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
TWO = {"models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.1}],
       "acceptance": [{"alpha": 0.7}], "thresholds": [4]}


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _error(capsys, *argv, code=2):
    rc, out, err = _run(capsys, *argv)
    assert rc == code, (rc, out[-500:], err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _strict_json(text):
    def refuse(c):
        raise ValueError(f"not JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def _cfg(tmp_path, obj, name="c.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


# --- config files: encoding, size, nesting, aliases ------------------------------------------
def test_config_not_utf8(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_bytes(b'{"models": [\n  {"name": "t\xff", "cost": 1}]}')
    err = _error(capsys, "predict", p)
    assert "c.json is not UTF-8 text (line 2, column 14: byte 0xff)" in err
    y = tmp_path / "c.yaml"
    y.write_bytes(b"models:\n- name: \xe9\n")
    assert "c.yaml is not UTF-8 text (line 2, column 9: byte 0xe9)" in _error(capsys, "plan", y)
    # a UTF-8 byte-order mark is fine
    b = tmp_path / "bom.json"
    b.write_bytes(b"\xef\xbb\xbf" + json.dumps(TWO).encode())
    assert _run(capsys, "predict", b)[0] == 0


def test_deep_json_is_refused_before_parsing(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    assert "deep.json nests more than 64 levels deep (line 1, column 65)" in _error(
        capsys, "predict", p)
    # brackets inside strings do not count
    ok = dict(TWO, description="[" * 1000)
    assert _run(capsys, "predict", _cfg(tmp_path, ok))[0] == 0


def test_deep_yaml_is_refused(tmp_path, capsys):
    p = tmp_path / "deep.yaml"
    p.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "deep.yaml nests more than 64 levels deep (line 1)" in _error(capsys, "predict", p)
    s = "a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(100)) + "  " * 101 + "v\n"
    p.write_text(s)
    assert "nests more than 64 levels deep" in _error(capsys, "predict", p)


def _bomb(inside_list: bool) -> str:
    head = "models: [{name: t, cost: 1}, {name: d, cost: 0.1}]\nacceptance: [{alpha: 0.5}]\n" \
           "thresholds: [2]\n"
    levels = ["&l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"] + [
        f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 12)]
    if inside_list:  # the case: 10^12 values once expanded, inside a list
        return head + "description:\n" + "".join(f"  - {x}\n" for x in levels)
    return head + "".join(f"x{i}: {x}\n" for i, x in enumerate(levels))


@pytest.mark.parametrize("inside_list", [True, False])
def test_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys, inside_list):
    p = tmp_path / "bomb.yaml"
    p.write_text(_bomb(inside_list))
    t0 = time.perf_counter()
    err = _error(capsys, "predict", p)
    assert time.perf_counter() - t0 < 5
    assert "expands to more than 100000 values once its aliases are followed" in err


def test_yaml_aliases_within_bounds_and_recursive_ones(tmp_path, capsys):
    p = tmp_path / "ok.yaml"
    p.write_text("models:\n- {name: t, cost: &c {base: 1.0, per_token: 0.0}}\n"
                 "- {name: d, cost: 0.1}\nacceptance: [&a {alpha: 0.7}]\nthresholds: [4]\n")
    assert _run(capsys, "predict", p)[0] == 0  # ordinary anchors still work
    p.write_text("a: &x [*x]\n")
    assert "a recursive alias" in _error(capsys, "predict", p)
    p.write_text("models: 1\nmodels: 2\n")
    assert "models: appears twice in the same mapping (duplicate key, line 2)" in _error(
        capsys, "predict", p)


def test_config_size_is_capped(tmp_path, capsys):
    from validation.files import MAX_CONFIG_BYTES

    p = tmp_path / "big.json"
    p.write_text(json.dumps(dict(TWO, description="x" * MAX_CONFIG_BYTES)))
    assert "big.json is" in _error(capsys, "predict", p) and "at most 4,194,304" in \
        capsys.readouterr().err + _error(capsys, "predict", p)


def test_numbers_json_cannot_hold(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(TWO).replace('"cost": 1.0', '"cost": ' + "9" * 5000))
    assert "invalid JSON in" in _error(capsys, "predict", p)
    p.write_text(json.dumps(TWO).replace('"cost": 1.0', '"cost": 1e400'))
    assert "models[0].cost: must be finite, got inf" in _error(capsys, "predict", p)
    p.write_text(json.dumps(TWO).replace('"cost": 1.0', '"cost": ' + "9" * 400))
    assert "models[0].cost: must be finite, got an integer beyond 1e308" in _error(
        capsys, "predict", p)


# --- numbers out of range -------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["predict", "simulate"])
def test_costs_out_of_double_range(tmp_path, capsys, cmd):
    huge = _cfg(tmp_path, dict(TWO, models=[{"name": "t", "cost": 1e306},
                                            {"name": "d", "cost": 0.1}]))
    err = _error(capsys, cmd, huge)
    assert "models[0].cost: the target's T(1) = 1e+306 is outside [1e-100, 1e+100]" in err
    steep = _cfg(tmp_path, dict(TWO, models=[
        {"name": "t", "cost": {"base": 1.0, "per_token": 1e99}}, {"name": "d", "cost": 0.1}]))
    assert _run(capsys, cmd, steep, *(["--tokens", "5000"] if cmd == "simulate" else []))[0] == 0
    steep2 = _cfg(tmp_path, dict(TWO, models=[
        {"name": "t", "cost": {"base": 1.0, "per_token": 1e100}}, {"name": "d", "cost": 0.1}]))
    assert "models[0].cost: T(m) for m up to 5 reaches 4e+100 times the target's T(1)" in \
        _error(capsys, cmd, steep2)


def test_beta_law_with_tiny_parameters(tmp_path, capsys):
    # Beta(e, e) with e -> 0 puts alpha at 0 or 1 with probability 1/2 each: P(A >= k) = 1/2
    # for every k >= 1, so with theta = 4: E[L] = 1 + 4/2 = 3, tau = (1 + 4 * 0.1) / 3
    cfg = _cfg(tmp_path, dict(TWO, acceptance=[{"beta": [1e-20, 1e-20]}]))
    rc, out, err = _run(capsys, "predict", cfg, "--json")
    assert rc == 0 and "RuntimeWarning" not in err
    d = _strict_json(out)
    assert d["speedup"] == pytest.approx(3 / 1.4, rel=1e-12)
    assert d["levels"][0]["mean_emitted"] == pytest.approx(3.0, rel=1e-12)
    rc, out, _ = _run(capsys, "simulate", cfg, "--tokens", "40000", "--json")
    s = _strict_json(out)
    assert rc == 0 and s["speedup"] > 1.5  # not the alpha = 0 result (speedup 1/1.4)
    assert abs(s["speedup"] - 3 / 1.4) < 4 * s["se"]


def test_beta_survival_against_high_precision():
    import mpmath

    from polyspec_theory.core.laws import BetaMixed

    for a, b in ((1e-20, 1e-20), (1e-20, 3.0), (2.5, 1e-12), (1e-300, 1e-300), (7.0, 2.0),
                 (1e8, 3.0), (1e200, 1e200), (3.0, 1e-300)):
        s = BetaMixed(a, b).survival(40)
        with mpmath.workdps(340):  # enough digits that a + k keeps a = 1e-300 or 1e200
            ma, mb = mpmath.mpf(a), mpmath.mpf(b)
            # independent: S_k = B(a + k, b) / B(a, b) in 340-digit arithmetic
            ref = [float(mpmath.beta(ma + k, mb) / mpmath.beta(ma, mb)) for k in range(41)]
        assert s == pytest.approx(ref, rel=1e-12, abs=1e-300), (a, b)
    assert BetaMixed(1e-20, 1e-20).survival(5)[1:] == pytest.approx([0.5] * 5, rel=1e-12)
    assert BetaMixed(1e-20, 1e-20).pmf_vector(4) == pytest.approx([0.5, 0, 0, 0, 0.5],
                                                                  abs=1e-15)


def test_plan_with_a_tiny_beta_pair_ranks_finite_values(tmp_path, capsys):
    pool = {"name": "p", "models": [{"name": "target", "cost": 1.0}, {"name": "a", "cost": 0.1},
                                    {"name": "b", "cost": 0.01}],
            "acceptance": {"target|a": {"beta": [1e-20, 1e-20]}, "target|b": {"alpha": 0.5},
                           "a|b": {"alpha": 0.6}}, "max_threshold": 8}
    rc, out, _ = _run(capsys, "plan", _cfg(tmp_path, pool), "--json")
    d = _strict_json(out)
    assert rc == 0 and "non_finite" not in d
    # target <- a at theta: E[L] = 1 + theta/2, tau = 1 + 0.1 theta: best theta 8, 5/1.8
    assert d["best_two_model"]["chain"] == ["target", "a"]
    assert d["best_two_model"]["speedup"] == pytest.approx(5 / 1.8, rel=1e-12)
    assert d["speedup"] >= 5 / 1.8


def test_a_nan_speedup_is_never_ranked(monkeypatch):
    from polyspec_theory.core.config import Model
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.planning.planner import plan
    from polyspec_theory.planning.pool import Pool

    class Broken(IIDGeometric):
        def survival(self, kmax):
            s = super().survival(kmax)
            s[1:] = math.nan
            return s

    models = (Model("t", CostCurve.constant(1.0)), Model("a", CostCurve.constant(0.1)),
              Model("b", CostCurve.constant(0.05)))
    pool = Pool(models, {("t", "a"): Broken(0.9), ("t", "b"): IIDGeometric(0.5)}, 4)
    with pytest.raises(PolyspecInputError, match=r"acceptance: P1 gives speedup nan for t <- a"):
        plan(pool)


# --- simulate: wide blocks, long runs ----------------------------------------------------------
def test_theta_4096_predicts_and_simulates_consistently(tmp_path, capsys):
    cfg = _cfg(tmp_path, dict(TWO, thresholds=[4096]))
    rc, out, _ = _run(capsys, "predict", cfg, "--json")
    p1 = _strict_json(out)["speedup"]
    rc, out, err = _run(capsys, "simulate", cfg, "--tokens", "100000", "--json")
    s = _strict_json(out)
    assert rc == 0 and s["prediction"]["speedup"] == pytest.approx(p1, rel=1e-12)
    assert abs(s["speedup"] - p1) < 4 * s["se"]
    assert s["levels"][0]["block_hist"] is None and "histograms omitted" in s["notes"][0]
    rc, out, _ = _run(capsys, "simulate", cfg, "--tokens", "20000")
    assert rc == 0 and "note: block/emitted histograms omitted" in out


def _levels(n, theta=4):
    return {"models": [{"name": f"m{i}", "cost": 0.5 ** i} for i in range(n)],
            "acceptance": [{"alpha": 0.8}] * (n - 1), "thresholds": [theta] * (n - 1)}


def test_long_simulation_is_estimated_and_refused(tmp_path, capsys):
    from polyspec.api import load_cascade, predict

    cfg = _cfg(tmp_path, _levels(30))
    t0 = time.perf_counter()
    err = _error(capsys, "simulate", cfg)
    assert time.perf_counter() - t0 < 10
    per_token = sum(lv.forwards_per_token for lv in predict(load_cascade(cfg)).levels[:-1])
    est = f"{per_token * 1e6:.3g}"
    assert f"this run needs about {est} verification rounds (30 models, 1,000,000 tokens" in err
    assert "raise the limit with --max-events" in err and "more than the limit 1e+09" in err
    # the limit is the user's: lower it and a small run is refused too
    small = _cfg(tmp_path, TWO, "two.json")
    assert "more than the limit 100" in _error(capsys, "simulate", small, "--tokens", "10000",
                                                "--max-events", "100")


def test_long_simulation_is_announced_and_bounded(tmp_path, capsys, monkeypatch):
    from polyspec.commands import simulate as cmd

    small = _cfg(tmp_path, TWO)
    monkeypatch.setattr(cmd, "ANNOUNCE_EVENTS", 100)
    rc, out, err = _run(capsys, "simulate", small, "--tokens", "20000", "--json")
    assert rc == 0 and _strict_json(out)["speedup"] > 1
    assert err.startswith("polyspec simulate: about ") and "verification rounds" in err
    # a run that goes past twice the limit (the estimate was wrong) is stopped
    import simulators.schemes.chain as chain

    monkeypatch.setattr(chain, "work", lambda c, b: 1.0)
    err = _error(capsys, "simulate", small, "--tokens", "4000000", "--max-events", "10")
    assert "--max-events: the run went past twice the limit 10" in err


# --- outputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "ABS", ".", "..", "a/b", "", "~x"])
def test_capture_names_stay_inside_out(tmp_path, capsys, name):
    out = tmp_path / "out"
    if name == "ABS":  # an absolute name
        name = str(tmp_path / "x")
    err = _error(capsys, "capture", "--models", "target,ngram", "--thresholds", "2", "--out",
                 out, "--name", name, "--no-progress")
    assert "name: must" in err
    assert not (tmp_path / "x.jsonl").exists() and not out.exists()


def test_json_output_is_strict_with_a_note(tmp_path, capsys):
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import IIDGeometric
    from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

    d = tmp_path / "one"
    cap, recs = simulate_capture(SyntheticSpec("one", ["t", "d"], [CostCurve.affine(1e-3, 1e-4),
                                                     CostCurve.constant(2e-5)],
                                 [IIDGeometric(0.6)], [3], tokens_per_prompt=24, prompts=1,
                                 prompt_len=16, baseline_contexts=(16,), baseline_max_m=6,
                                 ar_tokens=8))
    write_trace(d / "one.jsonl", cap, recs)
    rc, out, _ = _run(capsys, "validate", d, "--json", "--no-plots", "--out", tmp_path / "r")
    obj = _strict_json(out)  # one prompt: goodness-of-fit p-values are NaN
    assert rc == 0 and obj["non_finite"]["fields"]["pairs[0].fits[0].gof_p_value"] == "NaN"
    assert obj["pairs"][0]["fits"][0]["gof_p_value"] is None
    _strict_json((tmp_path / "r" / "validation.json").read_text())


def test_dump_json_rule():
    import numpy as np

    from validation.files import dump_json

    d = _strict_json(dump_json({"a": float("nan"), "b": [1.0, np.float64("inf")],
                                "c": {"d": -math.inf, "e": np.arange(2)}, "f": 2}))
    assert d["a"] is None and d["b"] == [1.0, None] and d["c"] == {"d": None, "e": [0, 1]}
    assert d["non_finite"]["fields"] == {"a": "NaN", "b[1]": "Infinity", "c.d": "-Infinity"}
    rows = _strict_json(dump_json([{"x": math.nan}, {"x": 1.0}]))
    assert rows[0]["non_finite"]["fields"] == {"x": "NaN"} and "non_finite" not in rows[1]
    assert "non_finite" not in _strict_json(dump_json({"x": 1.5}))


# --- the command line itself -----------------------------------------------------------------
def test_closed_stdout_is_not_a_traceback(tmp_path):
    cmd = (f"{sys.executable} -m polyspec predict {ROOT / 'configs/default.json'} 2>{tmp_path}"
           "/err | head -c 10 >/dev/null")
    subprocess.run(["bash", "-c", cmd], check=True, timeout=60, cwd=ROOT)
    assert "Traceback" not in (tmp_path / "err").read_text()


def test_a_bug_is_one_line_and_exit_1(capsys, monkeypatch):
    import polyspec.commands.predict as predict_cmd

    def boom(args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(predict_cmd, "run", boom)
    err = _error(capsys, "predict", ROOT / "configs/default.json", code=1)
    assert "internal error: ZeroDivisionError: float division by zero (a bug" in err
    monkeypatch.setenv("POLYSPEC_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(["predict", str(ROOT / "configs/default.json")])


def test_engine_output_too_deep_or_too_long(tmp_path, capsys):
    p = tmp_path / "run.log"
    p.write_text("[" * 100_000 + "]" * 100_000)
    assert "file: JSON nested too deeply" in _error(capsys, "fit", p)
    p.write_text('{"num_drafts": ' + "9" * 5000 + "}")
    assert "integer too long to read" in _error(capsys, "fit", p)
