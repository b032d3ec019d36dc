"""Async captures made before AS0 took the decoder's window (a verify checked at most θ drafts)
are not predicted under today's AS0 (polyspec/commands/validate.py, earlier_window)."""

from __future__ import annotations

from pathlib import Path

from validation.analysis.async_validate import earlier_window
from validation.traces.records import read_trace

ROOT = Path(__file__).resolve().parents[2] / "data" / "traces" / "cpu-async"


def test_earlier_window_tells_the_old_rule_from_the_new():
    old = read_trace(ROOT / "target-draft-t_async_th4_T0.jsonl")  # window 4 = θ, no queue
    assert old.header["async"]["window"] == 4 and old.header["async"]["queue"] is None
    assert earlier_window(old) == 4  # AS0 today: every ready draft up to 99
    same = read_trace(ROOT / "target-draft-t_async_th0_q48_T0.jsonl")  # θ = 0, queue 48
    assert earlier_window(same) is None  # window 48 = min(99, queue): the rule then and now


def test_validate_notes_and_skips_the_earlier_capture(capsys, tmp_path):
    import json
    import shutil

    from polyspec.cli import main

    for name in ("target-draft-t_async_th4_T0", "target-draft-t_async_th0_q48_T0"):
        shutil.copy(ROOT / f"{name}.jsonl", tmp_path)
    rc = main(["validate", str(tmp_path), "--no-progress", "--json"])
    out, _ = capsys.readouterr()
    assert rc == 0
    d = json.loads(out)
    names = [r["name"] for r in d["async"]]
    assert "target-draft-t_async_th4_T0" not in names
    assert "target-draft-t_async_th0_q48_T0" in names
    assert any("target-draft-t_async_th4_T0" in n and "not predicted" in n
               for n in d["notes"])
