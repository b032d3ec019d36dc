"""PipeSpec reader: field meanings on the fixture copies, and one-line errors on bad files."""

import copy
import json
import os

import numpy as np
import pytest

from polyspec_theory.errors import PolyspecInputError
from validation.formats.pipespec import (
    measured_speedup,
    parse_pipespec,
    read_pipespec,
    read_pipespec_dir,
)

from . import FIX

CHAIN8 = os.path.join(FIX, "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_8.json")
GREEDY8B = os.path.join(FIX, "greedy_Llama-3.1-8B-Instruct.json")


def _raw(path):
    with open(path) as fh:
        return json.load(fh)


def test_directory_reads_every_strategy_with_metadata_names_and_dtypes():
    runs = {os.path.basename(r.path): r for r in read_pipespec_dir(FIX)}
    assert len(runs) == 14
    r = runs[os.path.basename(CHAIN8)]
    assert r.strategy == "chain" and r.lookahead == 8
    assert r.names == ("Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct")
    assert [m.dtype for m in r.models] == ["float16", "float32"]  # README precision caveat
    r70 = runs["chain_Llama-3.1-8B-Instruct-Meta-Llama-3.1-70B-Instruct_8.json"]
    assert r70.target.quantize == "4bit" and r70.target.precision == "4bit"
    assert r70.models[0].dtype == "float16"
    assert runs["async-chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_0.json"].strategy == (
        "async-chain")
    assert runs[os.path.basename(GREEDY8B)].is_baseline


def test_sample_fields_match_the_raw_json():
    raw = _raw(CHAIN8)["results"][1]["metrics"]
    s = read_pipespec(CHAIN8).by_index()[1]
    assert s.total_time == raw["total_time"] and s.tokens_generated == raw["tokens_generated"]
    np.testing.assert_array_equal(s.accepted[0], raw["accepted_tokens"][0])
    np.testing.assert_array_equal(s.model_times[0], raw["model_times"][0])
    assert s.accepted[0].max() <= 8 and s.accepted[0].min() >= 1


def test_measured_speedup_is_the_ratio_of_pooled_time_per_token():
    b, r = read_pipespec(GREEDY8B), read_pipespec(CHAIN8)
    rb, rr = _raw(GREEDY8B)["results"], _raw(CHAIN8)["results"]
    tb = sum(x["metrics"]["total_time"] for x in rb) / sum(
        x["metrics"]["tokens_generated"] for x in rb)
    tr = sum(x["metrics"]["total_time"] for x in rr) / sum(
        x["metrics"]["tokens_generated"] for x in rr)
    assert measured_speedup(b, r) == pytest.approx(tb / tr, rel=1e-12)


def _bad(mutate, tmp_path):
    d = _raw(CHAIN8)
    mutate(d)
    p = tmp_path / "x.json"
    p.write_text(json.dumps(d))
    with pytest.raises(PolyspecInputError) as e:
        read_pipespec(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)
    return str(e.value)


def test_bad_files_name_file_record_and_field(tmp_path):
    def nan_time(d):
        d["results"][2]["metrics"]["total_time"] = float("nan")
    assert "results[2].metrics.total_time" in _bad(nan_time, tmp_path)

    def too_many(d):
        d["results"][0]["metrics"]["accepted_tokens"][0][3] = 9
    assert "accepted_tokens[0][3]" in _bad(too_many, tmp_path)

    def sum_off(d):
        d["results"][1]["metrics"]["tokens_generated"] += 40
    assert "does not add up" in _bad(sum_off, tmp_path)

    def strat(d):
        d["metadata"]["strategy"] = "tree"
    assert "metadata.strategy" in _bad(strat, tmp_path)

    def dup(d):
        d["results"][1]["sample_index"] = 0
    assert "duplicate" in _bad(dup, tmp_path)

    def lists(d):
        d["results"][0]["metrics"]["model_times"].append([0.1])
    assert "model_times" in _bad(lists, tmp_path)


def test_truncated_json_names_its_line(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_raw(CHAIN8), indent=1)[:5000])
    with pytest.raises(PolyspecInputError, match=r"t\.json: line \d+.*malformed JSON"):
        read_pipespec(p)


def test_greedy_steps_must_fit_tokens():
    d = _raw(GREEDY8B)
    d2 = copy.deepcopy(d)
    d2["results"][0]["metrics"]["token_times"].pop()
    with pytest.raises(PolyspecInputError, match="token_times"):
        parse_pipespec(d2, "g.json")
    assert parse_pipespec(d, "g.json").samples[0].token_times is not None


def test_measured_speedup_uses_each_files_own_tokens():
    # a baseline whose prompts yield different token counts than the run (hand-made numbers)
    b = parse_pipespec(_raw(GREEDY8B), "g.json")
    r = read_pipespec(CHAIN8)
    b2 = copy.deepcopy(_raw(GREEDY8B))
    for x in b2["results"]:
        n = x["metrics"]["tokens_generated"]
        x["metrics"]["tokens_generated"] = 2 * n
        # every step split in two, the last half in two again: 2n - 1 steps, the same sum
        halves = [t / 2 for t in x["metrics"]["token_times"] for _ in (0, 1)]
        x["metrics"]["token_times"] = halves[:-1] + [halves[-1] / 2] * 2
    assert measured_speedup(parse_pipespec(b2, "g2.json"), r) == pytest.approx(
        measured_speedup(b, r) / 2, rel=1e-12)


def test_too_few_generated_tokens_for_the_accepted_ones(tmp_path):
    def short(d):
        d["results"][1]["metrics"]["tokens_generated"] -= 20
    assert "does not add up" in _bad(short, tmp_path)
