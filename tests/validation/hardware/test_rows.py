"""The GPU-table row format (validation/hardware/rows.py) on the shared tables' committed
copies (data/gpu-tables/, sources in its README): settings read, measured fields dropped,
bad rows refused by id with the field named, the rest still read."""

from __future__ import annotations

import json

import pytest

from polyspec_theory.errors import PolyspecInputError
from validation.hardware import rows as R

from .tables import NANOPEARL, SSD


def test_reads_the_shared_tables_without_measurements():
    got, bad = R.read(NANOPEARL)
    assert not bad and len(got) == 96
    assert {r.method for r in got} == {"pearl"}
    for r in got:
        assert not (set(r.settings) & R.MEASURED)
        assert r.measured == {}
    ssd, bad = R.read(SSD)
    assert not bad and len(ssd) == 11
    assert {r.method for r in ssd} == {"ar", "sd-sync", "ssd-async"}


def test_read_measured_keeps_them():
    got, _ = R.read_measured(NANOPEARL)
    raw = {r["id"]: r for r in json.loads(NANOPEARL.read_text())["rows"]}
    for r in got:
        assert r.measured["speedup"] == raw[r.id]["speedup"]
        assert r.measured["tokens_per_step"] == raw[r.id]["tokens_per_step"]


def test_detect():
    assert R.detect(json.loads(NANOPEARL.read_text()))
    assert R.detect(json.loads(NANOPEARL.read_text())["rows"])
    assert not R.detect({"models": []})
    assert not R.detect([{"id": "x"}])


def _row(**kw):
    base = json.loads(NANOPEARL.read_text())["rows"][0]
    base.update(kw)
    return base


@pytest.mark.parametrize("change,field", [
    ({"batch": 0}, "batch"), ({"batch": 2.5}, "batch"), ({"method": "magic"}, "method"),
    ({"gpu": ""}, "gpu"), ({"prompt_len": -1}, "prompt_len"), ({"temperature": 0.7},
                                                                "temperature"),
    ({"steps": None}, "steps"), ({"tp_target": 0}, "tp_target"), ({"target": None}, "target"),
])
def test_bad_rows_are_refused_by_id_and_the_rest_read(tmp_path, change, field):
    rows = [_row(id="good"), _row(id="bad", **change)]
    p = tmp_path / "rows.json"
    p.write_text(json.dumps({"rows": rows}))
    got, bad = R.read(p)
    assert [r.id for r in got] == ["good"]
    assert [b.id for b in bad] == ["bad"] and bad[0].reason.startswith(field)


def test_duplicate_and_anonymous_rows(tmp_path):
    p = tmp_path / "rows.json"
    p.write_text(json.dumps([_row(id="a"), _row(id="a"), _row(id=None)]))
    got, bad = R.read(p)
    assert [r.id for r in got] == ["a"]
    assert [(b.id, b.reason) for b in bad][0] == ("a", "duplicate id")
    assert bad[1].id == "rows[2]"


@pytest.mark.parametrize("text,match", [("{", "not JSON"), ('{"rows": 3}', "list of rows"),
                                        ("[" * 100 + "]" * 100, "nests")])
def test_unreadable_files_are_one_line_errors(tmp_path, text, match):
    p = tmp_path / "rows.json"
    p.write_text(text)
    with pytest.raises(PolyspecInputError, match=match):
        R.read(p)


def test_missing_file(tmp_path):
    with pytest.raises(PolyspecInputError, match="--rows"):
        R.read(tmp_path / "nope.json")


def test_eagle_rows_carry_their_acceptance(tmp_path):
    row = {"id": "e", "gpu": "H200", "engine": "SGLang", "method": "eagle3",
           "target": "Qwen3-32B", "drafter": "AngelSlim/Qwen3-32B_eagle3", "batch": 16,
           "prompt_len": 100, "speculative_num_steps": 3, "speculative_eagle_topk": 1,
           "speculative_num_draft_tokens": 4, "draft_shape": "chain", "accept_length": 2.5}
    p = tmp_path / "rows.json"
    p.write_text(json.dumps([row, dict(row, id="f", accept_length=None),
                             dict(row, id="g", draft_shape="bush")]))
    got, bad = R.read(p)
    assert [r.method for r in got] == ["eagle"] and got[0].get("accept_length") == 2.5
    assert {b.id: b.reason.split(":")[0] for b in bad} == {"f": "accept_length",
                                                          "g": "draft_shape"}
