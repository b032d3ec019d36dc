"""Zoo-trainer checkpoints load with ``weights_only=True``: a planted checkpoint that would run
a shell command under plain pickle is refused with a one-line error and runs nothing; real
checkpoints resume and grow as before, and are written atomically."""

from __future__ import annotations

import os
import pickletools
import zipfile

import pytest
import torch

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation.zoo.model import GPTConfig
from validation.zoo.train import TrainRun, TrainSpec, load_checkpoint, save_checkpoint, train_model

TINY = dict(batch_size=2, seq_len=32, warmup=1, lr=1e-3)


class _Planted:
    """Unpickling this runs ``touch <marker>`` (what the issue's planted file did)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _pickle_calls(path) -> set[tuple[str, str]]:
    """(callable name, string argument) pairs that unpickling ``path``'s ``data.pkl`` would
    call: each STACK_GLOBAL / GLOBAL name with the next string pushed after it."""
    with zipfile.ZipFile(path) as zf:
        data = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    calls, strings, pending = set(), [], None
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            if pending is not None:
                calls.add((pending, arg))
                pending = None
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            pending = strings[-1]
        elif op.name == "GLOBAL":
            pending = arg.split()[-1]
    return calls


def _plant(path, marker):
    torch.save({"model": {"w": torch.zeros(1)}, "opt": _Planted(marker), "step": 1,
                "history": []}, path)


def test_planted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    ck = tmp_path / "ckpt" / "small.pt"
    ck.parent.mkdir()
    marker = tmp_path / "pwned"
    _plant(ck, marker)
    spec = TrainSpec("small", GPTConfig(n_layer=1, n_head=2, d_model=16), steps=2, **TINY)
    with pytest.raises(PolyspecInputError, match=r"checkpoint: .*small\.pt: refused"):
        train_model(spec, 0, 0, tmp_path, TrainRun(resume=True, log=lambda m: None))
    assert not marker.exists()
    # the plant is live: its pickle calls os.system("touch <marker>") when fully unpickled
    # (read with pickletools, which executes nothing)
    assert _pickle_calls(ck) >= {("system", f"touch {marker}")}


def test_planted_grow_base_is_refused_by_the_cli(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    marker = tmp_path / "pwned"
    _plant(tmp_path / "ckpt" / "target_base.pt", marker)
    rc = main(["zoo", "train", "--out", str(tmp_path), "--only", "target",
               "--steps-scale", "0.002"])
    out, err = capsys.readouterr()
    assert rc == 2 and "target_base.pt: refused" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()
    assert "expected run time" not in out  # refused with the inputs, before the probe


def test_damaged_or_foreign_checkpoints_are_refused(tmp_path):
    p = tmp_path / "x.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(PolyspecInputError, match="x.pt: refused"):
        load_checkpoint(p)
    torch.save({"model": [1, 2]}, p)
    with pytest.raises(PolyspecInputError, match="not a training checkpoint"):
        load_checkpoint(p)


def test_real_checkpoints_resume(tmp_path):
    spec = TrainSpec("small", GPTConfig(n_layer=1, n_head=2, d_model=16), steps=2, **TINY)
    logs = []
    train_model(spec, 0, 0, tmp_path, TrainRun(ckpt_every=1, log=logs.append))
    state = load_checkpoint(tmp_path / "ckpt" / "small.pt")
    assert state["step"] == 2 and set(state["model"]) and isinstance(state["opt"], dict)
    longer = TrainSpec("small", spec.config, steps=3, **TINY)
    train_model(longer, 0, 0, tmp_path, TrainRun(resume=True, ckpt_every=1, log=logs.append))
    assert any("resumed at step 2" in m for m in logs)
    assert load_checkpoint(tmp_path / "ckpt" / "small.pt")["step"] == 3
    # written through a temporary file and a rename: no stray temporary left behind
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["small.pt"]


def test_save_checkpoint_is_atomic(tmp_path, monkeypatch):
    p = tmp_path / "c.pt"
    save_checkpoint({"model": {"w": torch.ones(2)}, "opt": {}, "step": 1, "history": []}, p)
    before = p.read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt  # killed while writing

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"model": {"w": torch.zeros(2)}, "opt": {}, "step": 2, "history": []},
                        p)
    assert p.read_bytes() == before and load_checkpoint(p)["step"] == 1
    assert [x.name for x in tmp_path.iterdir()] == ["c.pt"]
