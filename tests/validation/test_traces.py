"""Trace files: writer/reader round trip into a Capture, truncation and foreign files, resume
records."""

from __future__ import annotations

import json

import pytest

from validation.traces.records import TraceWriter, read_records, read_trace, read_traces
from validation.traces.schema import SCHEMA, Round, TraceError

HEADER = {
    "models": [{"name": "target", "kind": "zoo-gpt", "params": 10},
               {"name": "ngram", "kind": "ngram", "params": 0}],
    "dtype": "float32", "device": "cpu", "device_name": "cpu", "torch": "x", "threads": 1,
    "cascade": {"name": "t2", "models": [{"name": "target"}, {"name": "ngram"}],
                "thresholds": [3], "acceptance": None, "policy": "accumulate"},
    "temperature": 0.0, "top_k": 0, "seed": 0,
    "prompts": {"source": "test", "n_prompts": 2, "prompt_len": 4, "max_new_tokens": 6},
}


def _write(path, n_prompts=2, end=True):
    with TraceWriter(path, HEADER) as w:
        for k in range(n_prompts):
            for j in range(3):
                w.write({"type": "round", "prompt": k, "level": 1,
                         "ctx": 4 + j * (j + 1) // 2, "G": 3, "A": j % 3, "L": j % 3 + 1,
                         "m": 4, "verify_s": 0.01, "draft_s": 0.002, "round_s": 0.013})
            w.write({"type": "ar", "prompt": k, "model": "target", "n_tokens": 6,
                     "wall_s": 0.06, "forward_s": 0.05, "prefill_s": 0.01, "ctx0": 4,
                     "step_s": [0.01] * 6})
            w.write({"type": "summary", "prompt": k, "n_prompt_tokens": 4, "n_generated": 6,
                     "wall_s": 0.04, "prefill_s": 0.0, "forward_s": [0.03, 0.005],
                     "forward_count": [3, 9], "overhead_s": 0.005, "n_rounds": [3],
                     "matches_target_ar": True})
        w.write({"type": "cost", "model": "target", "phase": "end", "ctx": 8, "m": 1,
                 "times_s": [0.01, 0.011, 0.009], "median_s": 0.01})
        w.write({"type": "cost", "model": "ngram", "phase": "end", "ctx": 8, "m": 1,
                 "times_s": [0.0005], "median_s": 0.0005})
        if end:
            w.write({"type": "end", "n_prompts": n_prompts, "wall_s": 1.0})


def test_round_trip(tmp_path):
    p = tmp_path / "t.jsonl"
    _write(p)
    first = json.loads(p.read_text().splitlines()[0])
    assert first["schema"] == SCHEMA and first["schema_version"] == 1
    t = read_trace(p)
    assert t.complete and not t.notes
    assert t.models == ("target", "ngram") and t.thresholds == (3,) and t.n == 2
    assert t.header["cascade"]["acceptance"] is None and t.max_new_tokens == 6
    r = t.rounds[0]
    assert r.level == 1
    assert len(r) == 6 and r.A.tolist() == [0, 1, 2, 0, 1, 2] and (r.L == r.A + 1).all()
    assert r.round_s.tolist() == [0.013] * 6
    b = t.baselines["target"]
    assert b.ar_time_per_token == pytest.approx(0.06 / 6) and b.ar_tokens == 12
    assert b.ar_forward_per_token == pytest.approx(0.05 / 6)
    assert b.ar_context == pytest.approx(6.5)  # tokens decoded at contexts 4..9
    assert b.cost_m.tolist() == [1, 1, 1] and b.cost_s.tolist() == [0.01, 0.011, 0.009]
    assert t.baselines["ngram"].ar_time_per_token is None
    assert t.time_per_token == pytest.approx(0.04 / 6)
    assert t.measured_speedup == pytest.approx(0.01 / (0.04 / 6))
    assert t.overhead_fraction == pytest.approx(0.125)
    assert t.forward_count == (6, 18) and t.forward_s == pytest.approx((0.06, 0.01))
    assert t.pair_key(0) == ("target", "ngram", 0.0, 0)
    assert [x.name for x in read_traces(tmp_path)] == ["t2"]


def test_round_record_round_trip(tmp_path):
    r = Round(prompt=3, level=1, ctx=70, G=3, A=2, L=3, m=4, verify_s=0.012345678912,
              draft_s=0.5, round_s=0.6)
    p = tmp_path / "r.jsonl"
    with TraceWriter(p, HEADER) as w:
        w.write(r)
    (rec,) = read_records(p).of_type("round")
    assert rec == {"type": "round", "prompt": 3, "level": 1, "ctx": 70, "G": 3, "A": 2,
                   "L": 3, "m": 4, "verify_s": 0.0123457, "draft_s": 0.5, "round_s": 0.6}


def test_duplicate_names_are_renamed_after_the_file(tmp_path):
    _write(tmp_path / "a.jsonl")
    _write(tmp_path / "b.jsonl", n_prompts=1)  # another capture under the same name
    assert [c.name for c in read_traces(tmp_path)] == ["t2", "b"]


def test_killed_capture_keeps_finished_records(tmp_path):
    p = tmp_path / "t.jsonl"
    _write(p, end=False)
    text = p.read_text()
    p.write_text(text + '{"type":"round","prompt":2,"lev')  # killed mid-line
    with pytest.raises(TraceError, match=r"line 14: truncated last line"):
        read_trace(p)
    t = read_trace(p, allow_truncated=True)
    assert not t.complete and len(t.rounds[0]) == 6
    assert any("truncated last line skipped" in n for n in t.notes)
    assert any("capture not finished" in n for n in t.notes)
    # resume: the writer cuts the partial line and appends
    with TraceWriter(p, append=True) as w:
        w.write({"type": "resume", "next_prompt": 1})
        w.write({"type": "round", "prompt": 1, "level": 1, "ctx": 4, "G": 3, "A": 3, "L": 4,
                 "m": 4, "verify_s": 0.01, "draft_s": 0.0})
        w.write({"type": "end", "n_prompts": 2})
    tr = read_records(p)
    assert tr.complete and tr.n_discarded == 5  # prompt 1's 3 rounds, ar, summary
    t = read_trace(p)
    assert any("5 record(s) of an interrupted attempt discarded" in n for n in t.notes)
    # prompt 1 has no summary after the resume: only prompt 0 counts
    assert t.rounds[0].prompt.tolist() == [0, 0, 0] and t.n_prompts == 1


@pytest.mark.parametrize(
    "content,match",
    [
        ("", "empty"),
        ("hello world\n", "line 1: not a polyspec trace"),
        ('{"type": "header", "schema": "other"}\n', "line 1: not a polyspec trace"),
        ('[1, 2]\n', "line 1: not a polyspec trace"),
    ],
)
def test_foreign_files(tmp_path, content, match):
    p = tmp_path / "x.jsonl"
    p.write_text(content)
    with pytest.raises(TraceError, match=match):
        read_trace(p)


def test_bad_records_name_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    _write(p)
    lines = p.read_text().splitlines()
    cases = [
        (3, '{"type":"round","prompt":0,"level":1}', "line 3: round record misses"),
        (3, '{"type":"bogus"}', "line 3: unknown record type 'bogus'"),
        (3, '{"type":"round"', "line 3: invalid JSON"),
        (3, json.dumps({**json.loads(lines[2]), "A": 5}), "line 3: round.A: inconsistent round"),
        (3, json.dumps({**json.loads(lines[2]), "level": 7}), "line 3: round.level: must be <= 1"),
    ]
    for i, bad, match in cases:
        q = tmp_path / "bad.jsonl"
        q.write_text("\n".join(lines[: i - 1] + [bad] + lines[i:]) + "\n")
        with pytest.raises(TraceError, match=match):
            read_trace(q)
    h = json.loads(lines[0])
    q = tmp_path / "v.jsonl"
    q.write_text("\n".join([json.dumps({**h, "schema_version": 99})] + lines[1:]) + "\n")
    with pytest.raises(TraceError, match="line 1: unsupported schema_version 99"):
        read_trace(q)
    del h["cascade"]
    q.write_text("\n".join([json.dumps(h)] + lines[1:]) + "\n")
    with pytest.raises(TraceError, match=r"line 1: header record misses field\(s\) \['cascade'\]"):
        read_trace(q)


def test_missing_paths(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="no \\*.jsonl"):
        read_traces(tmp_path)


def _counting_parses(monkeypatch):
    """The files parsed from now on (a fresh per-process cache of parsed trace files)."""
    from validation.traces import records

    monkeypatch.setattr(records, "_PARSED", {})
    parsed = []
    real = records._digest_and_capture
    monkeypatch.setattr(records, "_digest_and_capture",
                        lambda f, t: parsed.append(f.name) or real(f, t))
    return parsed


def test_an_unchanged_file_is_parsed_once_and_each_read_gets_its_own_copy(tmp_path,
                                                                          monkeypatch):
    import pickle

    from validation.traces import records

    parsed = _counting_parses(monkeypatch)
    _write(tmp_path / "a.jsonl")
    _write(tmp_path / "b.jsonl", n_prompts=1)
    first = read_traces(tmp_path)
    second = read_traces(tmp_path)
    assert parsed == ["a.jsonl", "b.jsonl"]
    assert pickle.dumps(second) == pickle.dumps(first)
    monkeypatch.setattr(records, "_PARSED", {})
    fresh = read_traces(tmp_path)
    assert pickle.dumps(fresh) == pickle.dumps(first)
    assert [c.name for c in fresh] == ["t2", "b"]  # the rename is not kept in the cache
    # a caller that changes what it got changes nothing for the next reader
    kept = pickle.dumps(fresh)
    fresh[0].summaries[1]["n_generated"] = 0
    got = read_traces(tmp_path)
    got[0].rounds[0].A[0] = 99
    got[0].header["cascade"]["name"] = "changed"
    got[0].summaries[0]["wall_s"] = 5.0
    assert pickle.dumps(read_traces(tmp_path)) == kept
    assert parsed == ["a.jsonl", "b.jsonl"] * 2


def test_a_rewritten_file_is_parsed_again_even_with_its_size_and_mtime(tmp_path, monkeypatch):
    import os

    parsed = _counting_parses(monkeypatch)
    p = tmp_path / "t.jsonl"
    _write(p)
    st = p.stat()
    assert read_traces(tmp_path)[0].summaries[0]["wall_s"] == 0.04
    text = p.read_text()
    p.write_text(text.replace('"wall_s":0.04,', '"wall_s":0.05,', 1))  # same size
    assert p.stat().st_size == st.st_size
    assert read_traces(tmp_path)[0].summaries[0]["wall_s"] == 0.05
    p.write_text(text.replace('"wall_s":0.04,', '"wall_s":0.07,', 1))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old mtime back: the bytes differ
    assert read_traces(tmp_path)[0].summaries[0]["wall_s"] == 0.07
    assert parsed == ["t.jsonl"] * 3


def test_a_bad_file_is_never_kept_as_read(tmp_path, monkeypatch):
    from validation.traces import records

    _counting_parses(monkeypatch)
    p = tmp_path / "t.jsonl"
    _write(p)
    good = p.read_text()
    read_traces(tmp_path)
    p.write_text(good + '{"type":"round","prompt":2,"lev')  # cut last line
    for _ in range(2):
        with pytest.raises(TraceError, match="truncated last line"):
            read_traces(tmp_path)
    assert not records._PARSED
    assert read_traces(tmp_path, allow_truncated=True)[0].notes
    bad = good.replace('"G":3', '"G":"x"', 1)  # a schema error
    p.write_text(bad)
    for _ in range(2):
        with pytest.raises(TraceError, match=r"line 2: round\.G"):
            read_traces(tmp_path)
    p.write_text(good)
    assert read_traces(tmp_path)[0].name == "t2"
