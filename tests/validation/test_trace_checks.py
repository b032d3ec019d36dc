"""The trace reader refuses every impossible value with one line naming the file, the line
and the field (issue 17): wrong JSON types, non-finite or negative times, blocks outside the
accumulate policy's bounds, rounds that do not form the policy's blocks, duplicated records,
summaries that disagree with their rounds, copies of one capture; and says (in a note) what
it skipped or what looks wrong but is possible (an unfinished prompt, a lossy greedy run)."""

from __future__ import annotations

import json

import pytest

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import BetaMixed, IIDGeometric
from validation.traces.records import read_records, read_trace, read_traces
from validation.traces.schema import TraceError
from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace


def _synthetic(path, seed=3, prompts=2):
    cap, recs = simulate_capture(SyntheticSpec(
        "fz", ["t", "m", "d"],
        [CostCurve.affine(1e-3, 1e-4), CostCurve.affine(3e-4, 2e-5), CostCurve.constant(2e-5)],
        [BetaMixed(5.0, 2.0), IIDGeometric(0.6)], [3, 2], tokens_per_prompt=24,
        prompts=prompts, prompt_len=16, baseline_contexts=(16,), baseline_max_m=6,
        baseline_reps=2, ar_tokens=8, seed=seed))
    write_trace(path, cap, recs)
    return path


@pytest.fixture()
def trace(tmp_path):
    return _synthetic(tmp_path / "fz.jsonl")


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(path, recs, raw_lines=None, *, beside=True):
    """The records (or raw lines) as a trace: by default in ``bad/<same name>`` next to
    ``path``, so the original stays intact."""
    text = "\n".join(raw_lines if raw_lines is not None else
                     [json.dumps(r, separators=(",", ":")) for r in recs])
    if beside:
        path = path.parent / "bad" / path.name
        path.parent.mkdir(exist_ok=True)
    path.write_text(text + "\n")
    return path


def _first(recs, kind, **match):
    return next(i for i, r in enumerate(recs)
                if r["type"] == kind and all(r.get(k) == v for k, v in match.items()))


def _fails(path, pattern):
    with pytest.raises(TraceError, match=pattern) as e:
        read_trace(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    return str(e.value)


def test_the_synthetic_trace_is_valid(trace):
    t = read_trace(trace)
    assert t.n == 3 and t.n_prompts == 2 and not t.notes


FIELD_CASES = [
    # (record kind, field, bad value, message)
    ("round", "A", "2", "round.A: must be an integer, got '2'"),
    ("round", "A", None, "round.A: must be an integer, got null"),
    ("round", "A", 0.5, "round.A: must be an integer, got 0.5"),
    ("round", "A", True, "round.A: must be an integer, got true"),
    ("round", "G", [3], "round.G: must be an integer"),
    ("round", "prompt", "0", "round.prompt: must be an integer, got '0'"),
    ("round", "ctx", -1, "round.ctx: must be >= 0, got -1"),
    ("round", "level", 0, "round.level: must be >= 1"),
    ("round", "verify_s", -0.001, "round.verify_s: must be >= 0, got -0.001"),
    ("round", "draft_s", "fast", "round.draft_s: must be a number"),
    ("ar", "wall_s", -1.0, "ar.wall_s: must be >= 0, got -1.0"),
    ("ar", "n_tokens", 0, "ar.n_tokens: must be >= 1"),
    ("ar", "model", "ghost", "ar.model: 'ghost' is not a model of the cascade"),
    ("ar", "step_s", [0.001], "ar.step_s: must have 8 entries, got 1"),
    ("cost", "times_s", [], "cost.times_s: must have at least 1 entries"),
    ("cost", "phase", "middle", "cost.phase: must be 'start' or 'end'"),
    ("cost", "m", 0, "cost.m: must be >= 1"),
    ("summary", "forward_s", "0.1", "summary.forward_s: must be a list, got '0.1'"),
    ("summary", "forward_s", [0.1, "x", 0.1], r"summary.forward_s\[1\]: must be a number"),
    ("summary", "forward_count", [1, 2], "summary.forward_count: must have 3 entries"),
    ("summary", "n_generated", 2.5, "summary.n_generated: must be an integer"),
    ("summary", "matches_target_ar", "yes", "summary.matches_target_ar: must be true, false"),
    ("summary", "wall_s", {"s": 1}, "summary.wall_s: must be a number"),
]


@pytest.mark.parametrize("kind,key,value,message", FIELD_CASES,
                         ids=[f"{c[0]}.{c[1]}={c[2]!r}" for c in FIELD_CASES])
def test_field_types_and_ranges(trace, kind, key, value, message):
    recs = _lines(trace)
    i = _first(recs, kind)
    recs[i][key] = value
    _fails(_write(trace, recs), rf"line {i + 1}: {message}")


HEADER_CASES = [
    (lambda h: h.update(cascade=None), "header.cascade: must be an object, got null"),
    (lambda h: h["cascade"].pop("models"), "header.cascade.models: missing"),
    (lambda h: h["cascade"].update(models=None), "header.cascade.models: must be a list"),
    (lambda h: h["cascade"].update(models=[{"name": "t"}]),
     "header.cascade.models: must have at least 2 entries"),
    (lambda h: h["cascade"].update(models=[{"name": "t"}, {"name": 3}, {"name": "d"}]),
     r"header.cascade.models\[1\].name: must be a non-empty string"),
    (lambda h: h["cascade"].update(thresholds=[3]), "header.cascade.thresholds: must have 2"),
    (lambda h: h["cascade"].update(thresholds=[3, "2"]),
     r"header.cascade.thresholds\[1\]: must be an integer"),
    (lambda h: h["cascade"].update(policy="eager"), "header.cascade.policy: must be one of"),
    (lambda h: h.update(temperature="hot"), "header.temperature: must be a number, got 'hot'"),
    (lambda h: h.update(temperature=-1), "header.temperature: must be >= 0"),
    (lambda h: h.update(top_k="0"), "header.top_k: must be an integer"),
    (lambda h: h.update(top_k=1.5), "header.top_k: must be an integer, got 1.5"),
    (lambda h: h.update(prompts=[]), "header.prompts: must be an object"),
]


@pytest.mark.parametrize("edit,message", HEADER_CASES, ids=[c[1] for c in HEADER_CASES])
def test_header(trace, edit, message):
    recs = _lines(trace)
    edit(recs[0])
    _fails(_write(trace, recs), rf"line 1: {message}")


def test_non_finite_times_are_refused(trace):
    raw = trace.read_text().splitlines()
    i = next(k for k, x in enumerate(raw) if '"type":"round"' in x)
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        rec = raw[i].replace('"verify_s":', f'"verify_s":{bad},"x_":', 1)
        _fails(_write(trace, None, raw[:i] + [rec] + raw[i + 1:]),
               rf"line {i + 1}: round.verify_s: must be a finite number")
    j = next(k for k, x in enumerate(raw) if '"type":"ar"' in x)
    rec = json.loads(raw[j])
    rec["step_s"][3] = float("nan")
    _fails(_write(trace, None, raw[:j] + [json.dumps(rec)] + raw[j + 1:]),
           rf"line {j + 1}: ar.step_s\[3\]: must be a finite number, got NaN")


def test_blocks_outside_the_policy_bounds(trace):
    recs = _lines(trace)
    # level 2 is the bottom pair: G == theta_2 = 2 exactly
    i = _first(recs, "round", level=2)
    recs[i].update(G=3, A=0, L=1, m=4)
    _fails(_write(trace, recs), rf"line {i + 1}: round.G: level 2 verifies blocks of exactly "
           "theta = 2")
    # level 1: theta_1 = 3 <= G <= theta_1 + Gmax_2 = 5
    for g in (2, 6):
        recs = _lines(trace)
        i = _first(recs, "round", level=1)
        recs[i].update(G=g, A=0, L=1, m=g + 1)
        _fails(_write(trace, recs), rf"line {i + 1}: round.G: level 1 blocks have theta = 3 "
               f"<= G <= 5 tokens .*got G = {g}")
    recs = _lines(trace)
    i = _first(recs, "round", level=1)
    recs[i]["m"] = recs[i]["G"] + 2
    _fails(_write(trace, recs), rf"line {i + 1}: round.m: a level-1 verify forward scores")


def test_rounds_must_form_the_blocks(trace):
    recs = _lines(trace)
    # a level-1 block whose G disagrees with the level-2 rounds that drafted it (but stays
    # inside the bounds and keeps A <= G)
    i = next(k for k, r in enumerate(recs) if r["type"] == "round" and r["level"] == 1
             and r["G"] == 4 and r["A"] < 3)
    recs[i]["G"] = 3
    recs[i]["m"] = 4
    _fails(_write(trace, recs), rf"line {i + 1}: round.G: level-1 block of G = 3 tokens, but "
           "the level-2 rounds that drafted it")
    # a level-2 round at the wrong context
    recs = _lines(trace)
    i = _first(recs, "round", level=2, prompt=1)
    recs[i]["ctx"] += 1
    _fails(_write(trace, recs), rf"line {i + 1}: round.ctx: level-2 round at ctx")
    # a level-1 round that does not continue the text
    recs = _lines(trace)
    idx = [k for k, r in enumerate(recs) if r["type"] == "round" and r["level"] == 1]
    recs[idx[1]]["ctx"] += 1
    for k in range(idx[0] + 1, idx[1]):  # keep its level-2 rounds consistent with it
        if recs[k]["type"] == "round" and recs[k]["level"] == 2:
            recs[k]["ctx"] += 1
    _fails(_write(trace, recs), rf"line {idx[1] + 1}: round.ctx: level-1 round at ctx")


def test_duplicated_records(trace):
    recs = _lines(trace)
    i = _first(recs, "round", level=1)
    _fails(_write(trace, recs[: i + 1] + [recs[i]] + recs[i + 1:]),
           rf"line {i + 2}: round: duplicated round record \(same as line {i + 1}\)")
    # the same round again later in the prompt: the blocks no longer add up
    j = _first(recs, "summary", prompt=0)
    _fails(_write(trace, recs[:j] + [recs[i]] + recs[j:]),
           r"line \d+: round\.G: this level-1 round verifies a block of \d+ tokens, but no "
           "level-2 round drafted it")
    for kind in ("ar", "cost", "summary"):
        k = _first(recs, kind)
        _fails(_write(trace, recs[: k + 1] + [recs[k]] + recs[k + 1:]),
               rf"line {k + 2}: {kind}(\.prompt)?: .*(second|twice).*line {k + 1}")


def test_summaries_are_cross_checked(trace):
    for key, bump in (("n_generated", 1), ("n_rounds", None), ("forward_count", None)):
        recs = _lines(trace)
        j = _first(recs, "summary", prompt=1)
        if bump:
            recs[j][key] += bump
        else:
            recs[j][key][0] += 1
        _fails(_write(trace, recs), rf"line {j + 1}: summary.{key}: ")


def test_missing_summary_is_a_note_not_silence(trace):
    recs = _lines(trace)
    j = _first(recs, "summary", prompt=1)
    t = read_trace(_write(trace, recs[:j] + recs[j + 1:]))
    assert t.n_prompts == 1
    assert any("prompt(s) 1 have round/ar records but no summary" in n for n in t.notes)


def test_lossy_greedy_run_is_a_warning(trace):
    recs = _lines(trace)
    for r in recs:
        if r["type"] == "summary":
            r["matches_target_ar"] = r["prompt"] == 0
    t = read_trace(_write(trace, recs))
    assert [n for n in t.notes if "WARNING" in n] == [
        "fz.jsonl: WARNING: on prompt(s) 1 the greedy cascade's output differs from the "
        "target's autoregressive output (matches_target_ar false): the decoder was not "
        "lossless there"]


def test_zero_autoregressive_time_is_refused(trace):
    recs = _lines(trace)
    for r in recs:
        if r["type"] == "ar" and r["model"] == "t":
            r["wall_s"] = 0.0
    _fails(_write(trace, recs), "target's autoregressive wall times .* sum to 0")


def test_deep_or_undecodable_lines(trace):
    raw = trace.read_text().splitlines()
    _fails(_write(trace, None, raw[:3] + ["[" * 50000 + "]" * 50000] + raw[3:]),
           "line 4: record nests more than 16 levels deep")
    bad = _write(trace, None, raw)
    bad.write_bytes(("\n".join(raw[:3]) + "\n").encode() + b'{"type":"\xff"}\n'
                    + ("\n".join(raw[3:]) + "\n").encode())
    _fails(bad, "line 4: not UTF-8 text")


def test_copies_of_one_capture_are_refused_by_both_trace_commands(tmp_path, capsys):
    from polyspec.cli import main

    d = tmp_path / "t"
    d.mkdir()
    _synthetic(d / "a.jsonl")
    recs = _lines(d / "a.jsonl")
    recs[0]["cascade"]["name"] = "renamed"  # a renamed copy is still the same capture
    _write(d / "b.jsonl", recs, beside=False)
    with pytest.raises(TraceError, match="b.jsonl: holds the same records as a.jsonl"):
        read_traces(d)
    for argv in (["validate", str(d), "--out", str(tmp_path / "r"), "--no-plots"],
                 ["plan", "--traces", str(d)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "holds the same records as a.jsonl" in err and len(err.splitlines()) == 1
    _synthetic(d / "b.jsonl", seed=4)  # another capture of the same configuration: fine
    assert len(read_traces(d)) == 2


def test_reader_normalizes_integral_floats(trace):
    recs = _lines(trace)
    i = _first(recs, "round")
    recs[i]["A"] = float(recs[i]["A"])
    tr = read_records(_write(trace, recs))
    assert type(tr.records[i - 1]["A"]) is int


@pytest.mark.parametrize("kind,key,value,message", [
    ("summary", "wall_s", 1e308, r"summary\.wall_s: must be at most 86400 s"),
    ("round", "verify_s", 1e12, r"round\.verify_s: must be at most 86400 s"),
    ("end", "wall_s", 1e308, r"end\.wall_s: must be at most 2\.592e\+06 s"),
    ("cost", "median_s", 0.0, r"cost\.median_s: must be > 0"),
])
def test_absurd_finite_times_and_zero_costs_are_refused(trace, kind, key, value, message):
    """An absurd but finite time (1e308) or a cost T(1) = 0 would flow into pooled cost fits
    and leave-one-out laws, i.e. into OTHER captures' results: refused, naming the line."""
    recs = _lines(trace)
    i = _first(recs, kind)
    recs[i][key] = value
    _fails(_write(trace, recs), rf"line {i + 1}: {message}")


def test_zero_cost_sample_is_refused(trace):
    recs = _lines(trace)
    i = _first(recs, "cost", m=1)
    recs[i]["times_s"][0] = 0.0
    _fails(_write(trace, recs), rf"line {i + 1}: cost\.times_s\[0\]: must be > 0")
