"""The reader decides most ``round`` records on columns (``RecordChecker.rounds_pass``, the
schemes' ``rounds_pass``) and checks the rest one by one: a record the column pass lets
through is one the per-record check passes unchanged, every record of a clean trace goes
through it, and a bad trace is refused with the same line as the per-record check alone
gives (checked against that check, the independent computation)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from validation.traces.checks import RecordChecker
from validation.traces.records import read_records
from validation.traces.schema import FieldError, RecordError, TraceError

from .test_trace_checks import _synthetic

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "data" / "traces" / "trees" / "fig11_target-ngram_T0_n4_877445e0.jsonl"
ASYNC = ROOT / "data" / "traces" / "cpu-async" / "idle" / "target-draft-t_async_th4_q48_T0.jsonl"


def _header(path):
    with open(path, encoding="utf-8") as f:
        return json.loads(f.readline())


def _headers(tmp_path):
    """Headers of every scheme with rounds: a 3-level chain (accumulate and truncate),
    a 2-level tree, a 3-level cascade with a tree at its bottom pair, an async pipeline."""
    chain = _header(_synthetic(tmp_path / "c.jsonl"))
    trunc = copy.deepcopy(chain)
    trunc["cascade"]["policy"] = "truncate"
    mixed = copy.deepcopy(chain)
    mixed["cascade"]["trees"] = [None, _header(TREE)["cascade"]["trees"][0]]
    mixed["tree_sampling"] = "distinct"
    top = copy.deepcopy(mixed)
    top["cascade"]["trees"] = [_header(TREE)["cascade"]["trees"][0], None]
    return {"chain": chain, "truncate": trunc, "tree": _header(TREE), "mixed": mixed,
            "top-tree": top, "async": _header(ASYNC)}


def _random_rounds(rng, n_levels, k, g_max=12):
    """``k`` round records (blocks up to ``g_max``), mostly plausible, some with a wrong
    value or JSON type."""
    odd = [True, False, None, "1", 1.5, 2.0, -1, 2**70, [], float("nan")]
    recs = []
    for _ in range(k):
        g = int(rng.integers(0, g_max))
        a = int(rng.integers(0, g + 1))
        r = {"type": "round", "prompt": int(rng.integers(0, 4)),
             "level": int(rng.integers(1, n_levels)), "ctx": int(rng.integers(0, 99)),
             "G": g, "A": a, "L": a + 1, "m": g + 1 + int(rng.integers(0, 3)),
             "verify_s": float(rng.random()), "draft_s": float(rng.random())}
        if rng.random() < 0.8:
            r["round_s"] = float(rng.random())
        for _ in range(int(rng.integers(0, 3))):
            key = str(rng.choice(["prompt", "level", "ctx", "G", "A", "L", "m", "verify_s",
                                  "draft_s", "round_s"]))
            pick = rng.random()
            r[key] = (odd[int(rng.integers(len(odd)))] if pick < 0.5
                      else int(rng.integers(-2, 14)) if pick < 0.8 else 86401.0)
        recs.append(r)
    return recs


@pytest.mark.parametrize("kind", ["chain", "truncate", "tree", "mixed", "top-tree", "async"])
def test_column_pass_agrees_with_the_record_check(tmp_path, kind):
    header = _headers(tmp_path)[kind]
    checker = RecordChecker(header)
    recs = _random_rounds(np.random.default_rng(len(kind)), checker.n, 3000,
                          g_max=getattr(checker, "window", 9) + 3)  # async: past it
    ok = checker.rounds_pass(recs)
    assert ok.dtype == bool and ok.shape == (len(recs),)
    n_pass = 0
    for r, decided in zip(recs, ok, strict=True):
        mine = copy.deepcopy(r)
        try:
            checker.check(mine)
            passed = True
        except (FieldError, RecordError):
            passed = False
        exact = all(type(r[k]) is int and abs(r[k]) < 2**63  # int64 columns
                    for k in ("prompt", "level", "ctx", "G", "A", "L", "m")) and all(
            type(r.get(k, 0.0)) is float for k in ("verify_s", "draft_s", "round_s"))
        if decided:  # let through: the check passes and normalizes nothing
            assert passed and mine == r and exact, r
        else:  # left to the check: only where it fails or a value needs normalizing
            assert not passed or not exact, r
        n_pass += passed
    assert 0 < int(ok.sum()) <= n_pass < len(recs)  # both outcomes were drawn


def _read(path, monkeypatch, columns: bool):
    """What ``read_records`` gives (records, or the error line), with or without the column
    pass."""
    with monkeypatch.context() as m:
        if not columns:
            m.setattr(RecordChecker, "rounds_pass",
                      lambda self, recs: np.zeros(len(recs), bool))
        try:
            tr = read_records(path)
        except TraceError as e:
            return str(e)
        return tr.header, tr.records, tr.lines


def test_a_clean_trace_is_read_alike_and_every_round_decided_on_columns(tmp_path,
                                                                        monkeypatch):
    path = _synthetic(tmp_path / "c.jsonl")
    calls = []
    real = RecordChecker.check

    def counted(self, rec):
        calls.append(rec["type"])
        return real(self, rec)

    monkeypatch.setattr(RecordChecker, "check", counted)
    got = _read(path, monkeypatch, True)
    assert "round" not in calls and calls  # every round on columns, the rest one by one
    calls.clear()
    assert _read(path, monkeypatch, False) == got and "round" in calls


BAD = [  # (round field, value): each refused (or normalized) by the per-record check
    ("G", True), ("G", 2.0), ("G", -1), ("G", 99), ("A", 99), ("L", 0), ("m", 0), ("m", 99),
    ("level", 0), ("level", 3), ("level", 2.0), ("prompt", -1), ("prompt", "0"),
    ("ctx", None), ("ctx", 2**70), ("verify_s", -1e-9), ("verify_s", 0), ("verify_s", 1e12),
    ("round_s", "x"), ("draft_s", True), ("round_s", None), ("G", None)]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_a_bad_round_is_refused_as_the_record_check_refuses_it(tmp_path, monkeypatch, key,
                                                               value):
    src = _synthetic(tmp_path / "c.jsonl")
    recs = [json.loads(x) for x in src.read_text().splitlines()]
    rounds = [i for i, r in enumerate(recs) if r["type"] == "round"]
    for j in (rounds[1], rounds[len(rounds) // 2]):
        bad = copy.deepcopy(recs)
        bad[j][key] = value
        path = tmp_path / f"bad_{key}_{j}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
        got = _read(path, monkeypatch, True)
        assert got == _read(path, monkeypatch, False)
        if isinstance(got, str):
            assert f"line {j + 1}: round." in got or "line" in got


def test_the_first_bad_record_is_named_whatever_its_type(tmp_path, monkeypatch):
    """A bad round before a bad ``ar`` record, and after one: the first in the file."""
    src = _synthetic(tmp_path / "c.jsonl")
    recs = [json.loads(x) for x in src.read_text().splitlines()]
    ar = next(i for i, r in enumerate(recs) if r["type"] == "ar")
    before = max(i for i, r in enumerate(recs[:ar]) if r["type"] == "round")
    after = next(i for i, r in enumerate(recs) if r["type"] == "round" and i > ar)
    for rnd in (before, after):
        bad = copy.deepcopy(recs)
        bad[rnd]["A"] = 99
        bad[ar]["n_tokens"] = 0
        path = tmp_path / f"two_{rnd}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
        got = _read(path, monkeypatch, True)
        assert got == _read(path, monkeypatch, False)
        assert f"line {min(rnd, ar) + 1}: " in got


def test_a_list_of_times_is_checked_alike_on_an_array():
    """``check_reals`` (an array for a long list of floats) refuses exactly what
    ``check_real`` of each entry refuses, naming the first bad entry."""
    from validation.traces.schema import check_real, check_reals

    rng = np.random.default_rng(7)
    odd = [-1e-9, 0.0, 86400.0, 86400.5, float("nan"), float("inf"), 3, True, None, "x"]
    for _ in range(400):
        xs = [float(x) for x in rng.random(int(rng.integers(0, 20)))]
        for _ in range(int(rng.integers(0, 2))):
            if xs:
                xs[int(rng.integers(len(xs)))] = odd[int(rng.integers(len(odd)))]
        for positive in (False, True):
            want = None
            for j, x in enumerate(xs):
                try:
                    check_real(x, f"t[{j}]", positive=positive)
                except FieldError as e:
                    want = str(e)
                    break
            try:
                check_reals(xs, "t", positive=positive)
                got = None
            except FieldError as e:
                got = str(e)
            assert got == want, (xs, positive)


def test_integer_lists_of_batched_records_are_decided_alike():
    """``_ints_in`` (extremes of a list of JSON integers) agrees with the entry-by-entry
    test it stands for."""
    from validation.schemes.batch import _ints_in, _is_int

    rng = np.random.default_rng(8)
    odd = [True, False, 1.0, None, "1", -1, 0, 5, 2**70]
    for _ in range(2000):
        xs = [int(x) for x in rng.integers(0, 6, int(rng.integers(0, 6)))]
        if xs and rng.random() < 0.5:
            xs[int(rng.integers(len(xs)))] = odd[int(rng.integers(len(odd)))]
        for low, high in ((0, 4), (1, None)):
            want = all(_is_int(x) and low <= x and (high is None or x < high) for x in xs)
            assert _ints_in(xs, low, high) == want, (xs, low, high)


@pytest.mark.parametrize(("tail", "error"), [
    (' {"type":"end"}', "invalid JSON: Extra data"), ("x", "invalid JSON: Extra data"),
    ("   ", None), ("\t", None)])
def test_a_line_is_parsed_as_json_loads_parses_it(tmp_path, monkeypatch, tail, error):
    """A record followed by another value is refused (json.loads's error); one followed by
    spaces is read as json.loads reads it."""
    src = _synthetic(tmp_path / "c.jsonl")
    lines = src.read_text().splitlines()
    lines[3] += tail
    path = tmp_path / "tail.jsonl"
    path.write_text("\n".join(lines) + "\n")
    got = _read(path, monkeypatch, True)
    if error is None:
        assert got[1] == read_records(src).records
    else:
        assert isinstance(got, str) and f"line 4: {error}" in got


@pytest.mark.parametrize("value", [True, 1.0, None, "1", 3])
def test_a_batched_round_needs_integer_fields(value):
    """``bround``: every one of its integral fields a JSON integer (not a bool, not 1.0)."""
    from validation.schemes.batch import check_batch_record

    header = {"cascade": {"models": [{"name": "t"}, {"name": "d"}]}, "batch": {"size": 2}}
    ok = {"type": "bround", "decode": 0, "level": 1, "round": 0, "seq": 1, "prompt": 1,
          "ctx": 8, "G": 3, "A": 1, "L": 2, "m": 4, "waited": 0, "discarded": 0}
    assert check_batch_record(ok, header) is None
    for key in ("level", "seq", "G", "A", "L", "m", "waited", "discarded"):
        msg = check_batch_record({**ok, key: value}, header)
        if value == 3 and type(value) is int:
            assert msg is None or "must be integers" not in msg
        else:
            assert msg == ("bround fields level, seq, G, A, L, m, waited, discarded must be "
                           "integers"), (key, value)
