"""Fuzzing the real command line in-process (``polyspec.cli.main``), bounded to a few seconds
per test (issue 17): random JSON-ish trees around the valid config schema through
``predict --json``, and valid synthetic traces with one field of one record replaced by a
random JSON value (or deleted) through ``validate --json`` and ``plan --traces --json``.

Every run must: exit 0 or 2 (no traceback, no internal error); on exit 2 print one line; on
exit 0 print strict JSON (no NaN/Infinity). And no impossible value may be silently
accepted: a mutation that a test-side oracle knows to be impossible (wrong JSON type,
non-finite or negative time, a count or block that breaks the policy, ...) gives exit 2, or
provably did not change the output (the same stdout as the unmutated input)."""

from __future__ import annotations

import copy
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_checks import run_checked, strict_json

# CI: a few seconds per test. POLYSPEC_FUZZ_SCALE=k runs k times as many examples, and
# POLYSPEC_FUZZ_TALLY=<file> appends one JSON line per example (command, exit status, what the
# oracle said) for the counts of a longer campaign.
_SCALE = int(os.environ.get("POLYSPEC_FUZZ_SCALE", "1"))
SETTINGS = settings(max_examples=60 * _SCALE, deadline=None, derandomize=_SCALE == 1,
                    database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _tally(**row):
    path = os.environ.get("POLYSPEC_FUZZ_TALLY")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")


def _run(capsys, argv):
    rc, out, err, _ = run_checked(capsys, argv)
    return rc, out, err


JSON_LEAF = (st.none() | st.booleans() | st.integers() | st.integers(-3, 5)
             | st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1)
             | st.text(max_size=4))
JSON = st.recursive(JSON_LEAF, lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=4)


def _bool(v):
    return isinstance(v, bool)


def _num(v):
    return isinstance(v, (int, float)) and not _bool(v)


def _finite(v):
    if not _num(v):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _int(v, low=None, high=None):
    if not _finite(v) or float(v) != int(v):
        return False
    return (low is None or int(v) >= low) and (high is None or int(v) <= high)


def _time(v):
    return _finite(v) and float(v) >= 0


def _same(a, b) -> bool:
    """JSON-equal after the reader's normalization (3.0 reads as 3); a bool never equals a
    number."""
    if _bool(a) or _bool(b):
        return type(a) is type(b) and a == b
    if _num(a) and _num(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
LAW = st.one_of(
    st.builds(lambda a: {"alpha": a}, st.floats(0, 1)),
    st.builds(lambda v: {"positional": v}, st.lists(st.floats(0, 1), min_size=1, max_size=4)),
    st.builds(lambda a, b: {"beta": [a, b]}, st.floats(1e-30, 50), st.floats(1e-30, 50)),
    st.builds(lambda m, s: {"gaussian": [m, s]}, st.floats(-5, 20), st.floats(1e-6, 10)),
)
COST = st.one_of(
    st.floats(0, 2),
    st.builds(lambda b, k: {"base": b, "per_token": k}, st.floats(0, 2), st.floats(0, 0.1)),
    st.builds(lambda t: {"table": t}, st.lists(st.floats(0, 2), min_size=1, max_size=5)),
)


@st.composite
def configs(draw):
    n = draw(st.integers(2, 4))
    cfg = {"models": [{"name": f"m{i}", "cost": draw(COST)} for i in range(n)],
           "acceptance": [draw(LAW) for _ in range(n - 1)],
           "thresholds": [draw(st.integers(1, 8)) for _ in range(n - 1)]}
    if draw(st.booleans()):
        cfg["policy"] = draw(st.sampled_from(["accumulate", "truncate"]))
    return cfg


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


LAW_OK = {
    "alpha": lambda v: _finite(v) and 0 <= v <= 1,
    "positional": lambda v: isinstance(v, list) and len(v) > 0
    and all(_finite(x) and 0 <= x <= 1 for x in v),
    "beta": lambda v: isinstance(v, list) and len(v) == 2 and all(_finite(x) and x > 0 for x in v),
    "gaussian": lambda v: isinstance(v, list) and len(v) == 2 and all(map(_finite, v))
    and v[1] > 0,
}


def _cost_ok(c):
    if _num(c):
        return _time(c)
    if not isinstance(c, dict):
        return False
    if set(c) <= {"base", "per_token"} and "base" in c:
        return all(_time(x) for x in c.values())
    if set(c) == {"table"}:
        return isinstance(c["table"], list) and len(c["table"]) > 0 and all(map(_time,
                                                                                 c["table"]))
    return None  # other forms (batch costs): the oracle does not judge


def _config_verdict(cfg):
    """False: certainly invalid; None: the oracle does not know (numerical range, ...)."""
    if not isinstance(cfg, dict) or not {"models", "acceptance", "thresholds"} <= set(cfg):
        return False
    if set(cfg) - {"models", "acceptance", "thresholds", "policy", "name", "description"}:
        return False
    ms, acc, th = cfg["models"], cfg["acceptance"], cfg["thresholds"]
    if not (isinstance(ms, list) and isinstance(acc, list) and isinstance(th, list)):
        return False
    n = len(ms)
    if n < 2 or len(acc) != n - 1 or len(th) != n - 1:
        return False
    names = []
    for m in ms:
        if not isinstance(m, dict) or set(m) != {"name", "cost"}:
            return False
        if not isinstance(m["name"], str) or not m["name"]:
            return False
        names.append(m["name"])
    if len(set(names)) != n:
        return False
    for law in acc:
        if not isinstance(law, dict) or len(law) != 1:
            return False
        (k, v), = law.items()
        if k not in LAW_OK or not LAW_OK[k](v):
            return False
    if not all(_int(t, 1, 4096) for t in th):
        return False
    if cfg.get("policy", "accumulate") not in ("accumulate", "truncate"):
        return False
    if "name" in cfg and not isinstance(cfg["name"], str):
        return False
    verdicts = [_cost_ok(m["cost"]) for m in ms]
    if False in verdicts:
        return False
    return None


@SETTINGS
@given(cfg=configs(), data=st.data(), yaml_file=st.booleans())
def test_fuzz_configs_through_predict(tmp_path_factory, capsys, cfg, data, yaml_file):
    mutated = copy.deepcopy(cfg)
    action = data.draw(st.sampled_from(["none", "replace", "replace", "delete", "add"]))
    paths = list(_paths(mutated))[1:]
    if action != "none":
        path = data.draw(st.sampled_from(paths))
        parent = _get(mutated, path[:-1])
        if action == "replace":
            parent[path[-1]] = data.draw(JSON)
        elif action == "delete":
            del parent[path[-1]]
        else:
            target = parent if isinstance(parent, dict) else mutated
            target[data.draw(st.text(min_size=1, max_size=6))] = data.draw(JSON)
    d = tmp_path_factory.mktemp("cfg")
    if yaml_file:
        p = d / "c.yaml"
        p.write_text(yaml.safe_dump(mutated))
    else:
        p = d / "c.json"
        p.write_text(json.dumps(mutated))
    rc, out, err = _run(capsys, ["predict", p, "--json"])
    verdict = _config_verdict(mutated)
    _tally(command="predict", rc=rc, action=action,
           oracle="invalid" if verdict is False else "unknown" if action != "none" else "valid",
           error=err.strip()[:200])
    if verdict is False:
        assert rc == 2, f"an invalid config was accepted: {mutated}"
    if rc == 0:
        sp = strict_json(out)["speedup"]
        assert sp is not None and math.isfinite(sp) and sp > 0
    if action == "none":  # a valid config: a result, or a range error that names a field
        assert rc == 0 or "cost" in err or "P1" in err, err


# --------------------------------------------------------------------------------------------
# traces
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_trace(tmp_path_factory):
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import BetaMixed, IIDGeometric
    from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

    cap, recs = simulate_capture(SyntheticSpec(
        "fz", ["t", "m", "d"],
        [CostCurve.affine(1e-3, 1e-4), CostCurve.affine(3e-4, 2e-5), CostCurve.constant(2e-5)],
        [BetaMixed(5.0, 2.0), IIDGeometric(0.6)], [3, 2], tokens_per_prompt=16, prompts=2,
        prompt_len=16, baseline_contexts=(16,), baseline_max_m=4, baseline_reps=2,
        ar_tokens=4, seed=3))
    d = tmp_path_factory.mktemp("base")
    write_trace(d / "fz.jsonl", cap, recs)
    return [json.loads(x) for x in (d / "fz.jsonl").read_text().splitlines()]


HEADER_TYPES = {
    "temperature": lambda v: _finite(v) and 0 <= float(v) <= 100,
    "top_k": lambda v: _int(v, 0), "seed": lambda v: _int(v, 0),
    "threads": lambda v: _int(v, 1), "dtype": lambda v: isinstance(v, str),
    "device": lambda v: isinstance(v, str), "torch": lambda v: isinstance(v, str),
    "models": lambda v: isinstance(v, list), "prompts": lambda v: isinstance(v, dict),
}
REQUIRED = {"round": {"prompt", "level", "ctx", "G", "A", "L", "m", "verify_s", "draft_s"},
            "ar": {"prompt", "model", "n_tokens", "wall_s", "forward_s", "step_s"},
            "cost": {"model", "ctx", "m", "times_s", "median_s"},
            "summary": {"prompt", "n_generated", "wall_s", "forward_s", "forward_count"},
            "end": {"n_prompts"},
            "header": {"schema", "schema_version", "models", "dtype", "device", "torch",
                       "threads", "cascade", "temperature", "top_k", "seed", "prompts"}}


def _impossible(rec, key, v, deleted) -> bool | None:
    """True: the mutated record is impossible (every such change is detectable); None: the
    oracle does not know (a plausible value)."""
    t = rec["type"]
    if key == "type":
        return True
    if deleted:
        return True if key in REQUIRED.get(t, ()) or (t == "summary" and key in (
            "n_rounds", "n_prompt_tokens")) else None
    if t == "header":
        if key in ("cascade", "schema", "schema_version"):
            return True
        ok = HEADER_TYPES.get(key)
        return (not ok(v)) or None if ok else None
    if t == "round":
        if key in ("prompt", "level", "ctx", "G", "A", "L"):
            return True
        if key == "m":
            return (not _int(v, rec["G"] + 1, rec["G"] + rec["level"])) or None
        return (not _time(v)) or None
    if t == "ar":
        if key in ("model", "n_tokens"):
            return True
        if key == "prompt":
            return (not _int(v, 0)) or None
        if key == "ctx0":
            return (not _int(v, 0)) or None
        if key == "step_s":
            return (not (isinstance(v, list) and len(v) == rec["n_tokens"]
                         and all(map(_time, v)))) or None
        return (not _time(v)) or None
    if t == "cost":
        if key == "model":
            return True
        if key == "phase":
            return (v not in ("start", "end") or _bool(v)) or None
        if key == "ctx":
            return (not _int(v, 0)) or None
        if key == "m":
            return (not _int(v, 1)) or None
        if key == "times_s":
            return (not (isinstance(v, list) and v and all(map(_time, v)))) or None
        return (not _time(v)) or None
    if t == "summary":
        if key in ("prompt", "n_generated", "forward_count", "n_rounds", "n_prompt_tokens"):
            return True
        if key == "forward_s":
            return (not (isinstance(v, list) and len(v) == 3 and all(map(_time, v)))) or None
        if key == "overhead_s":
            return (not _finite(v)) or None
        if key == "matches_target_ar":
            return (not (v is None or _bool(v))) or None
        return (not _time(v)) or None
    if t == "end":
        if key == "n_prompts":
            return (not _int(v, 0)) or None
        return (not _time(v)) or None
    return None


_BASE_RUNS: dict = {}


def _write_records(path, recs):
    path.write_text("\n".join(json.dumps(r, separators=(",", ":")) for r in recs) + "\n")


def _fuzz_trace(tmp_path_factory, capsys, base_trace, data, argv):
    # one folder per command, reused by every example, so that the output of the unmutated
    # trace (run once) is comparable: same paths, same names
    key = tuple(argv)
    if key not in _BASE_RUNS:
        d = tmp_path_factory.mktemp("fuzz")
        (d / "t").mkdir()
        args = [a.replace("{dir}", str(d / "t")).replace("{out}", str(d / "r")) for a in argv]
        _write_records(d / "t" / "fz.jsonl", base_trace)
        rc, out, _ = _run(capsys, args)
        assert rc == 0
        _BASE_RUNS[key] = (d, args, out)
    d, args, base_out = _BASE_RUNS[key]
    recs = copy.deepcopy(base_trace)
    i = data.draw(st.integers(0, len(recs) - 1))
    rec = recs[i]
    key = data.draw(st.sampled_from(sorted(rec)))
    orig = rec[key]
    deleted = data.draw(st.integers(0, 9)) == 0 and key != "type"
    if deleted:
        del rec[key]
        v = None
    else:
        near = (st.integers(-2, 2).map(lambda x: orig + x) if _int(orig)
                else st.floats(-1, 1).map(lambda x: orig + x) if _finite(orig) else JSON)
        v = rec[key] = data.draw(JSON | near)
    _write_records(d / "t" / "fz.jsonl", recs)
    rc, out, err = _run(capsys, args)
    unchanged = not deleted and _same(v, orig)
    imp = None if unchanged else _impossible(rec, key, v, deleted)
    _tally(command=argv[0], rc=rc, field=f"{rec['type']}.{key}",
           oracle="unchanged" if unchanged else "impossible" if imp else "plausible",
           same_output=out == base_out, error=err.strip()[:200])
    if unchanged:
        assert rc == 0 and out == base_out
    elif imp:
        assert rc == 2 or out == base_out, (
            f"impossible {rec['type']}.{key} = {v!r} (was {orig!r}) silently accepted")


@SETTINGS
@given(data=st.data())
def test_fuzz_mutated_traces_through_plan(tmp_path_factory, capsys, base_trace, data):
    _fuzz_trace(tmp_path_factory, capsys, base_trace, data,
                ["plan", "--traces", "{dir}", "--json", "--law", "iid", "--max-threshold",
                 "4"])


@settings(SETTINGS, max_examples=30 * _SCALE)
@given(data=st.data())
def test_fuzz_mutated_traces_through_validate(tmp_path_factory, capsys, base_trace, data):
    _fuzz_trace(tmp_path_factory, capsys, base_trace, data,
                ["validate", "{dir}", "--json", "--no-plots", "--no-insertions", "--out",
                 "{out}"])
