"""The format registry (validation.formats): every kind of file the validation layer reads is
detected and read into one Evidence, checked here against the files' own bytes read by
hand (json), never against the readers under test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from tests._samples import sample
from validation import formats

ROOT = Path(__file__).resolve().parents[2]
PIPESPEC = ROOT / "tests" / "fixtures" / "gpu-traces" / "pipespec-humaneval"
SPECBENCH = ROOT / "tests" / "fixtures" / "gpu-traces" / "specbench-vicuna7b"
TRACE = ROOT / "data" / "traces" / "cpu" / "target-mid_th4_T0.jsonl"
TREES = ROOT / "data" / "traces" / "trees"


def test_the_registry_holds_every_format_once_in_detection_order():
    reg = formats.registry()
    assert len(set(reg)) == len(reg) >= 16
    assert [f.order for f in reg.values()] == sorted(f.order for f in reg.values())
    assert {"pipespec", "specbench", "polyspec-trace", "vllm-v1-log", "vllm-sweep"} <= set(reg)


@pytest.mark.parametrize("path, name, scheme", [
    (PIPESPEC / "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json", "pipespec", "chain"),
    (PIPESPEC / "async-chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json", "pipespec",
     "async"),
    (SPECBENCH / "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl", "specbench", None),
    (TRACE, "polyspec-trace", "chain"),
    (sample("vllm_v1_log_issue19254.txt"), "vllm-v1-log", None),
])
def test_open_detects_and_reads_each_kind(path, name, scheme):
    ev = formats.open(path)
    assert ev.format == name and ev.scheme == scheme and ev.pairs
    assert formats.detect(path).name == name


def test_pipespec_evidence_is_the_files_rounds_top_pair_first():
    path = PIPESPEC / "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json"
    raw = json.loads(path.read_text())
    k = raw["metadata"]["lookahead"]
    acc = [a for r in raw["results"] for a in r["metrics"]["accepted_tokens"][0]]
    ev = formats.open(path)
    (pair,) = ev.pairs
    assert (pair.verifier, pair.drafter) == ("Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct")
    assert ev.models == ("Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct")
    assert pair.cap == k - 1 and pair.counts.n_rounds == len(acc)
    hist = np.bincount(np.array(acc) - 1, minlength=k)
    assert pair.counts.histogram(k - 1).tolist() == hist.tolist()
    assert sum(len(r) for r in pair.rounds) == len(acc)


def _p1_rounds_by_hand(path):
    """Level-1 ``(G, A)`` of every finished prompt, in file order, read from the JSON lines."""
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    done = {r["prompt"] for r in recs if r["type"] == "summary"}
    out: dict = {}
    for r in recs:
        if r["type"] == "round" and r["level"] == 1 and r["prompt"] in done:
            out.setdefault(r["prompt"], []).append((r["G"], r["A"]))
    return [out[p] for p in sorted(out)]


def test_fit_on_a_chain_trace_is_the_kaplan_meier_law_of_its_fresh_rounds(capsys):
    """P1's rounds: only a round after a rejection (or a prompt's first) starts at age 0 and
    is seen whole (the bonus position after a full round is never checked). The hazard at
    age j is (rounds ending at j) / (rounds at risk at j), by hand, at every age with at
    least 10 at risk."""
    rc = main(["fit", str(TRACE), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["round"] == "p1" and rep["format"] == "polyspec-trace"
    fresh = []
    for rounds in _p1_rounds_by_hand(TRACE):
        start = True
        for g, a in rounds:
            if start:
                fresh.append((g, a))
            start = a < g
    assert rep["rounds"] == sum(len(r) for r in _p1_rounds_by_hand(TRACE))
    assert rep["run_law_rounds"] == len(fresh)
    hazard = rep["run_law"]["run_hazard"]
    for j in range(len(hazard)):
        at_risk = sum(1 for g, a in fresh if a >= j)
        ended = sum(1 for g, a in fresh if a == j and a < g)
        if at_risk >= 10:
            assert hazard[j] == pytest.approx(ended / at_risk, rel=1e-12), j
    assert 0 <= rep["independence"]["p_value"] <= 1


def test_fit_refuses_a_trace_whose_blocks_are_not_p1s(capsys):
    tree = next(p for p in sorted(TREES.glob("*.jsonl")))
    assert formats.open(tree).scheme == "structured"
    with pytest.raises(PolyspecInputError, match="structured trace"):
        formats.fit_report(tree)
    assert main(["fit", str(tree)]) == 2
    assert "structured trace" in capsys.readouterr().err


def test_a_format_without_a_report_and_an_option_no_step_takes_are_refused():
    with pytest.raises(PolyspecInputError, match="sweep table"):
        formats.fit_report(sample("vllm_eagle_sweep_issue20780.txt"))
    with pytest.raises(PolyspecInputError, match="--gamma: does not apply"):
        formats.fit_report(PIPESPEC / "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json",
                           gamma=3)


def test_detect_dir_names_a_folder_of_one_data_set(tmp_path):
    assert formats.detect_dir(PIPESPEC).name == "pipespec"
    assert formats.detect_dir(SPECBENCH).name == "specbench"
    assert formats.detect_dir(ROOT / "data" / "traces" / "cpu") is None  # our traces
    assert formats.detect_dir(tmp_path) is None
