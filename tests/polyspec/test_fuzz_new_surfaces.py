"""Fuzzing the surfaces of the last wave (issue 39 item 4), in the project's pattern
(tests/polyspec/test_fuzz*.py): hostile values, dropped entries, wrapped and cut files.

* the Python API (``polyspec.predict`` / ``polyspec.simulate``) with a config of every scheme
  (chain, tree, schedule, serving batch, async) one value replaced, and hostile sizes: a
  result is finite and sane, or a :class:`PolyspecInputError` of one line naming a field --
  never another exception;
* ``forecast --score`` against a real capture (the forecast line mutated);
* ``validate DIR --costs-from OTHER`` with one line of OTHER mutated;
* folders whose files are wrapped (a PipeSpec run inside a list, a Spec-Bench line inside a
  list) or cut short (a partial file: truncated at a random byte) through ``validate``,
  ``forecast`` and ``plan --traces``.

Every command exits 0 or 2, prints one line on exit 2 and strict JSON on exit 0
(tests/cli_checks.py). Sizes are small: each test runs in seconds."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polyspec
from polyspec_theory import PolyspecInputError
from tests.cli_checks import run_checked
from tests.polyspec.test_fuzz_gpu_traces import HOSTILE, _finite_and_sane, mutated_json

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "fixtures" / "gpu-traces"
PS, SB = GPU / "pipespec-humaneval", GPU / "specbench-vicuna7b"
PRE2 = ROOT / "data" / "traces" / "cpu" / "preregistered-2"
_SCALE = int(os.environ.get("POLYSPEC_FUZZ_SCALE", "1"))
SETTINGS = settings(max_examples=12 * _SCALE, deadline=None, derandomize=_SCALE == 1,
                    database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

BASE = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.05}},
                   {"name": "d", "cost": 0.1}],
        "acceptance": [{"alpha": 0.7}], "thresholds": [3]}
SCHEMES = {
    "chain": (BASE, {}),
    "tree": ({**BASE, "acceptance": [{"sibling": [0.6, 0.2]}],
              "trees": [{"parents": [-1, 0, 0, 1, 2]}]}, {}),
    "schedule": ({**BASE, "schedules": [{"kind": "hf", "start": 3, "min": 1, "max": 6}]}, {}),
    "batch": (BASE, {"batch": 3}),
    "async": ({**BASE, "mode": "async", "thresholds": [2]}, {"events": 400}),
}
SIZES = {"tokens": 2000, "chains": 4}


def _finite_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _api(cfg, extra, **sizes):
    """polyspec.predict then polyspec.simulate: None on a PolyspecInputError (checked to be
    one line naming a field), else the two speedups."""
    try:
        pred = polyspec.predict(cfg, batch=extra.get("batch"))
        kw = {"seed": 1, **SIZES, **extra, **sizes}
        if "events" in extra:
            kw.pop("tokens", None)
        sim = polyspec.simulate(cfg, **kw)
    except PolyspecInputError as e:
        assert e.field and "\n" not in str(e), str(e)
        return None
    sp = pred.speedup
    assert sp is None or (_finite_number(sp) and sp > 0), sp
    v = sim.speedup.value
    assert _finite_number(v) and v >= 0 and math.isfinite(sim.speedup.se), sim.speedup
    return sp, v


@SETTINGS
@given(scheme=st.sampled_from(sorted(SCHEMES)), data=st.data())
def test_api_with_every_scheme_and_a_hostile_value(scheme, data):
    base, extra = SCHEMES[scheme]
    cfg = data.draw(mutated_json(base))
    _api(cfg, extra)


@SETTINGS
@given(scheme=st.sampled_from(sorted(SCHEMES)),
       size=st.sampled_from(["tokens", "chains", "seed", "events", "batch"]),
       value=st.sampled_from([v for v in HOSTILE if not isinstance(v, (list, dict))]
                             + [-5, 2**70]))
def test_api_with_every_scheme_and_a_hostile_size(scheme, size, value):
    base, extra = SCHEMES[scheme]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 10**6:
        value = -value  # never run a huge size: a refusal is what is checked here
    _api(base, extra, **{size: value})


FORECAST = json.loads((PRE2 / "forecasts.jsonl").read_text().splitlines()[0])


@settings(SETTINGS, max_examples=10 * _SCALE)
@given(line=mutated_json({k: FORECAST[k] for k in ("name", "kind", "levels", "batch",
                                                   "speedup", "interval95")}))
def test_forecast_score_against_a_real_capture(capsys, tmp_path_factory, line):
    d = tmp_path_factory.mktemp("score")
    (d / "captures").mkdir()
    shutil.copy(PRE2 / "captures" / f"{FORECAST['name']}.jsonl", d / "captures")
    f = d / "forecasts.jsonl"
    f.write_text(json.dumps(line) + "\n")
    rc, _, _, data = run_checked(capsys, ["forecast", "--score", f, "--json"])
    if rc == 0:
        _finite_and_sane(data)
        for c in data["configs"]:
            assert c["levels"] == 3 or c["measured"] is None  # never scored across configs


SPS = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"
SPS_LINES = (SB / SPS).read_text().splitlines()


@settings(SETTINGS, max_examples=8 * _SCALE)
@given(first=mutated_json(json.loads(SPS_LINES[0])))
def test_validate_costs_from_a_mutated_folder(capsys, tmp_path_factory, first):
    other = tmp_path_factory.mktemp("other")
    for name in os.listdir(SB):
        shutil.copy(SB / name, other / name)
    (other / SPS).write_text("\n".join([json.dumps(first), *SPS_LINES[1:]]) + "\n")
    rc, _, _, data = run_checked(capsys, ["validate", SB, "--costs-from", other, "--json"])
    if rc == 0:
        _finite_and_sane(data)
        # the same answers are never held out
        assert data["headline"].startswith("in-sample")


def _cut(text: str, at: float) -> str:
    return text[: max(1, int(len(text) * at))]


@settings(SETTINGS, max_examples=10 * _SCALE)
@given(kind=st.sampled_from(["wrap", "cut"]), at=st.floats(0.05, 0.95),
       which=st.sampled_from(["chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json",
                              "greedy_Llama-3.1-8B-Instruct.json",
                              "chain_Llama-3.1-8B-Instruct-Meta-Llama-3.1-70B-Instruct_8.json"]),
       cmd=st.sampled_from(["validate", "forecast", "plan"]))
def test_pipespec_folder_with_a_wrapped_or_partial_file(capsys, tmp_path_factory, kind, at,
                                                       which, cmd):
    d = tmp_path_factory.mktemp("ps")
    for f in PS.glob("*.json"):
        shutil.copy(f, d / f.name)
    text = (PS / which).read_text()
    (d / which).write_text(f"[{text}]" if kind == "wrap" else _cut(text, at))
    argv = {"validate": ["validate", d, "--json"],
            "forecast": ["forecast", "--traces", d, "--models", "70B,8B,1B", "--thresholds", 5,
                         "--dtype", "8B=float16", "--json"],
            "plan": ["plan", "--traces", d, "--json"]}[cmd]
    rc, _, err, data = run_checked(capsys, argv)
    # a file of the folder that is not a run is named, never dropped silently
    assert rc == 2 and which in err, err


@settings(SETTINGS, max_examples=8 * _SCALE)
@given(kind=st.sampled_from(["wrap", "cut"]), at=st.floats(0.05, 0.95),
       line=st.integers(0, 38))
def test_specbench_folder_with_a_wrapped_or_partial_file(capsys, tmp_path_factory, kind, at,
                                                         line):
    d = tmp_path_factory.mktemp("sb")
    for name in os.listdir(SB):
        shutil.copy(SB / name, d / name)
    lines = SPS_LINES[:]
    lines[line] = f"[{lines[line]}]" if kind == "wrap" else _cut(lines[line], at)
    (d / SPS).write_text("\n".join(lines) + "\n")
    rc, _, err, data = run_checked(capsys, ["validate", d, "--json"])
    if rc == 0:  # a cut that leaves a valid line (e.g. whitespace only) is served
        _finite_and_sane(data)
    else:
        assert SPS in err, err


TRACES = ROOT / "tests" / "validation" / "fixtures" / "traces"


@settings(SETTINGS, max_examples=8 * _SCALE)
@given(kind=st.sampled_from(["wrap", "cut"]), at=st.floats(0.05, 0.95),
       cmd=st.sampled_from(["validate", "plan"]))
def test_capture_folder_with_a_wrapped_or_partial_file(capsys, tmp_path_factory, kind, at,
                                                       cmd):
    d = tmp_path_factory.mktemp("tr")
    shutil.copytree(TRACES, d / "t")
    victim = d / "t" / "target-mid_th4_T0.jsonl"
    text = victim.read_text()
    if kind == "wrap":
        lines = text.splitlines()
        k = max(1, int(len(lines) * at))
        lines[k] = f"[{lines[k]}]"
        victim.write_text("\n".join(lines) + "\n")
    else:
        victim.write_text(_cut(text, at))
    argv = (["validate", d / "t", "--json", "--no-plots", "--no-insertions", "--out",
             d / "out"] if cmd == "validate" else
            ["plan", "--traces", d / "t", "--json", "--law", "iid", "--max-threshold", "4"])
    rc, _, err, data = run_checked(capsys, argv)
    if rc == 0:
        _finite_and_sane(data)
    else:
        assert "target-mid_th4_T0" in err, err
