"""Two records a user relies on, checked at the edges the earlier tests missed:

* no command writes over a file it read, and a folder it read counts for every regular
  file in it (validation.files.note_read) -- including files no reader opens itself (a
  README, notes): the check is by file identity (device, inode), each file its own;
* ``--allow-load`` is recorded as given (docs/measuring.md: ``"allow_load": true`` means the
  capture was started with ``--allow-load``), also on an idle machine where it overrode
  nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import validation.capture.machine as machine
from polyspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "validation" / "fixtures" / "traces"


def _refused(capsys, argv, option, victim: Path):
    before = victim.read_bytes()
    rc = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert err.count("\n") == 1 and f"error: {option}" in err and "would be overwritten" in err
    assert victim.read_bytes() == before


@pytest.mark.parametrize("option", ["--write-pool", "--write-config"])
def test_a_file_of_a_folder_read_is_never_written_over(capsys, tmp_path, option):
    d = tmp_path / "traces"
    shutil.copytree(TRACES, d)
    notes = d / "NOTES.md"
    notes.write_text("what these captures are: kept by hand\n")
    _refused(capsys, ["plan", "--traces", d, option, notes], option, notes)


def test_each_file_of_the_folder_keeps_its_own_identity(capsys, tmp_path):
    """A new file beside the folder (not in it) is written: the rule protects the folder's
    files, not everything near it."""
    d = tmp_path / "traces"
    shutil.copytree(TRACES, d)
    out = tmp_path / "pool.json"
    rc = main(["plan", "--traces", str(d), "--write-pool", str(out)])
    capsys.readouterr()
    assert rc == 0 and json.loads(out.read_text())


# --- --allow-load --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    from validation.zoo.model import GPT, GPTConfig
    from validation.zoo.weights import save_model

    d = tmp_path_factory.mktemp("zoo")
    for i, (name, width) in enumerate([("target", 16), ("small", 8)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(1, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


@pytest.fixture
def idle(monkeypatch):
    monkeypatch.delenv(machine.MAX_LOAD_ENV, raising=False)
    monkeypatch.setattr(machine, "load_average", lambda: (0.05, 0.1, 0.2))


def test_allow_load_on_an_idle_machine_is_recorded_as_given(zoo_dir, tmp_path, capsys, idle):
    from validation.traces.records import read_records

    assert main(["capture", "--models", "target,small", "--thresholds", "2", "--out",
                 str(tmp_path), "--zoo-dir", str(zoo_dir), "--prompts", "2", "--prompt-len",
                 "8", "--tokens", "6", "--warmup", "0", "--cost-contexts", "8",
                 "--cost-repeats", "1", "--no-progress", "--allow-load"]) == 0
    capsys.readouterr()
    h = read_records(tmp_path / "target-small_th2_T0.jsonl").header
    assert h["load_check"] == {"max_load": 0.5, "allow_load": True, "load_1min": 0.05}
    assert main(["profile", "small", "--max-m", "1", "--repeats", "1", "--warmup", "0",
                 "--zoo-dir", str(zoo_dir), "--json", "--allow-load"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["load_check"] == {"max_load": 0.5, "allow_load": True, "load_1min": 0.05}
