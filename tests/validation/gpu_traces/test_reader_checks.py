"""GPU trace readers (issue 33): implausible times, an empty drafter list, async-chain files
checked like chain files, and folders holding a FIFO or a link to a device (never opened)."""

import copy
import json
import os
import shutil

import pytest

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation.formats.pipespec import parse_pipespec, read_pipespec_dir
from validation.formats.specbench import read_answers

from . import FIX

CHAIN8 = os.path.join(FIX, "chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_8.json")
GREEDY8B = os.path.join(FIX, "greedy_Llama-3.1-8B-Instruct.json")
ASYNC4 = os.path.join(FIX, "async-chain_Llama-3.2-1B-Instruct-Llama-3.1-8B-Instruct_4.json")
SB = os.path.join(FIX, "..", "specbench-vicuna7b")


def _raw(path):
    with open(path) as fh:
        return json.load(fh)


def _error(path, change) -> str:
    d = copy.deepcopy(_raw(path))
    change(d["results"][1]["metrics"])
    with pytest.raises(PolyspecInputError) as e:
        parse_pipespec(d, "x.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("x.json: results[1].metrics.")
    return msg


@pytest.mark.parametrize("value", [1e300, 1e-300, 0.0, 1e5])
def test_implausible_times_are_refused_naming_file_record_and_field(value):
    def chain_time(m):
        m["model_times"][0][2] = value
    assert "model_times[0][2]: " in _error(CHAIN8, chain_time)

    def greedy_step(m):
        m["token_times"][3] = value
    assert "token_times[3]: " in _error(GREEDY8B, greedy_step)

    def total(m):
        m["total_time"] = value
    assert "total_time: " in _error(CHAIN8, total)


def test_plausible_times_at_the_bounds_are_kept():
    d = copy.deepcopy(_raw(CHAIN8))
    d["results"][1]["metrics"]["model_times"][0][2] = 1e-6
    assert parse_pipespec(d, "x.json").samples[1].model_times[0][2] == 1e-6


def test_an_empty_drafter_time_list_is_refused():
    def empty(m):
        m["model_times"][0] = []
    assert "model_times[0]: 0 draft steps logged" in _error(CHAIN8, empty)
    assert "model_times[0]: 0 draft steps logged" in _error(ASYNC4, empty)


def test_async_chain_files_are_checked():
    def doubled(m):
        m["accepted_tokens"][0] = m["accepted_tokens"][0] * 2
    assert "does not fit tokens_generated" in _error(ASYNC4, doubled)

    def long_verify(m):
        m["accepted_tokens"][0][5] = 50
    assert "accepted_tokens[0][5]: 50 tokens from one verify call exceed lookahead 4" in (
        _error(ASYNC4, long_verify))

    def few_tokens(m):
        m["tokens_generated"] = m["tokens_generated"] // 2
    assert "does not fit tokens_generated" in _error(ASYNC4, few_tokens)

    def many_tokens(m):  # hand: 1 + sum(acc) + 5 fits at lookahead 4 only when a call gave 5
        m["tokens_generated"] = 1 + sum(m["accepted_tokens"][0]) + 5
    assert "does not fit tokens_generated" in _error(ASYNC4, many_tokens)


def test_every_fixture_async_file_passes_its_checks():
    runs = [r for r in read_pipespec_dir(FIX) if r.strategy == "async-chain"]
    assert sorted(r.lookahead for r in runs) == [0, 4, 8, 16]


def test_specbench_wall_times_are_bounded(tmp_path):
    name = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"
    lines = open(os.path.join(SB, name)).read().splitlines()
    for value in (1e300, 1e-300):
        obj = json.loads(lines[0])
        obj["choices"][0]["wall_time"][0] = value
        p = tmp_path / name
        p.write_text("\n".join([json.dumps(obj), *lines[1:]]) + "\n")
        with pytest.raises(PolyspecInputError, match=r"line 1\.choices\[0\]\.wall_time\[0\]: "
                           "must be a plausible measured time"):
            read_answers(p)


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
@pytest.mark.parametrize("folder,name", [(FIX, "extra.json"), (SB, "extra.jsonl")])
def test_a_fifo_or_a_device_in_a_trace_folder_is_never_opened(tmp_path, capsys, kind,
                                                               folder, name):
    d = tmp_path / "traces"
    shutil.copytree(folder, d)
    if kind == "fifo":
        os.mkfifo(d / name)
    else:
        os.symlink("/dev/zero", d / name)
    rc = main(["validate", str(d), "--json"])
    out, err = capsys.readouterr()
    # either refused naming the file or the file skipped (it is no trace): never a hang
    assert rc in (0, 2), err
    if rc == 2:
        assert err.count("\n") == 1 and name in err


def _folder(tmp_path):
    d = tmp_path / "ps"
    shutil.copytree(FIX, d)
    return d


def test_a_duplicated_run_is_refused(tmp_path):
    d = _folder(tmp_path)
    shutil.copy(CHAIN8, d / "copy.json")
    with pytest.raises(PolyspecInputError, match="the same run chain:"):
        read_pipespec_dir(d)


def test_two_baselines_of_one_model_are_refused(tmp_path):
    d = _folder(tmp_path)
    g = _raw(GREEDY8B)
    g["metadata"]["model_configs"][0]["dtype"] = "float32"  # another precision, same model
    (d / "greedy_again.json").write_text(json.dumps(g))
    with pytest.raises(PolyspecInputError, match="two greedy baselines of Llama-3.1-8B"):
        read_pipespec_dir(d)


def test_runs_from_two_datasets_are_refused(tmp_path):
    d = _folder(tmp_path)
    g = _raw(CHAIN8)
    g["metadata"]["dataset"] = "datasets/other"
    (d / os.path.basename(CHAIN8)).write_text(json.dumps(g))
    with pytest.raises(PolyspecInputError, match="metadata.dataset: the runs come from 2 "):
        read_pipespec_dir(d)
