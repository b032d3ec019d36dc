"""Bad input of the fourth audit (issue 39 item 2), built from the shared samples and traces
(tests/fixtures), cut or altered as each case needs: each is refused in one line naming the
field or file, or served correctly with a warning where it is legal but odd."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli_checks import run_checked

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "fixtures" / "gpu-traces"
PS, SB = GPU / "pipespec-humaneval", GPU / "specbench-vicuna7b"
S, M = "Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct"


def _ps_folder(tmp_path, **extra):
    d = tmp_path / "ps"
    d.mkdir()
    for f in PS.glob("*.json"):
        shutil.copy(f, d / f.name)
    for name, text in extra.items():
        (d / name).write_text(text)
    return d


@pytest.mark.parametrize("name,text,msg", [
    (f"chain_{S}-{M}_4.json", None, "a list holding PipeSpec run(s)"),  # wrapped in [...]
    ("notes.json", json.dumps({"what": "my notes"}), "not a PipeSpec run"),
])
def test_a_pipespec_folder_holds_runs_only(capsys, tmp_path, name, text, msg):
    if text is None:
        text = "[" + (PS / name).read_text() + "]"
    d = _ps_folder(tmp_path, **{name: text})
    for argv in (["validate", d], ["forecast", "--traces", d, "--models", "8B,1B",
                                   "--lookahead", 6, "--dtype", "8B=float32"]):
        rc, _, err, _ = run_checked(capsys, argv)
        assert rc == 2 and name in err and msg in err, err
