"""The documentation is a tested guide: every ``sh`` block of README.md and docs/*.md runs.

Convention (stated in README.md, "How the examples are tested"):

- A fenced block whose info string is ``sh`` is run. If it has lines starting with ``$ ``, those
  are the commands (the other lines show output); otherwise every line is a command. A line
  ending in ``\\`` continues on the next. Only ``polyspec ...`` commands are run (as
  ``python -m polyspec`` with this repository first on ``PYTHONPATH``); ``make``, ``cat`` and
  ``python ...`` lines are shown, not run.
- The HTML comments right after the block say what the commands must print:
  ``<!-- expect: TEXT -->`` (TEXT occurs in their output, each command's stdout then its
  stderr, the expectations in the order given), ``<!-- exit: N -->`` (every command exits N;
  default 0), ``<!-- slow -->``
  (pytest mark ``slow``: part of the suite, run by ``make test``).
- The commands run in a temporary folder holding a copy of ``configs/`` and ``examples/`` and
  the repository's ``data/`` (read only), so that outputs (``--out out/...``) never land in
  the repository; the commands of one block run in order, in the same folder.
"""

from __future__ import annotations

import re

import pytest

from tests.doc_blocks import (
    DOCS,
    ROOT,
    RUNNABLE,
    check_output,
    parse_blocks,
    polyspec_argv,
    run_block_once,
)


def test_parser_reads_the_convention(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n```sh\n$ polyspec predict a.json \\\n    --json\nout 1\n$ make x\n```\n"
                   "<!-- expect: 2.191x -->\n<!-- exit: 2 -->\n<!-- slow -->\n\n"
                   "```\npolyspec not-run\n```\n```sh\npolyspec b\n```\n", encoding="utf-8")
    a, b = parse_blocks(doc)
    assert a.commands == ["polyspec predict a.json --json", "make x"]
    assert (a.expect, a.exit, a.slow, a.line) == (["2.191x"], 2, True, 2)
    assert (b.commands, b.expect, b.exit, b.slow) == (["polyspec b"], [], 0, False)
    assert polyspec_argv("make x") is None
    assert polyspec_argv("polyspec fit 'a b' # note")[-2:] == ["fit", "a b"]
    assert check_output(a, "speedup 2.191x") == []
    assert check_output(a, "speedup 2.192x") == ["2.191x"]


def test_every_documented_number_is_checked():
    """The README and docs have runnable blocks, and a block that states numbers says which."""
    assert len(RUNNABLE) >= 10
    assert all(b.expect for b in RUNNABLE if b.exit == 0), [
        b.id for b in RUNNABLE if b.exit == 0 and not b.expect]


def test_readme_opens_with_the_makefile_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    first = [line.split("#")[0].strip() for line in text[3:5]]
    assert first[:2] == ["make demo", "make test"], text[:6]
    for target in ("demo", "test"):
        assert re.search(rf"^{target}:", make, re.M)
    assert len(text) <= 200, f"README.md has {len(text)} lines (a guide of about 150)"


def test_no_doc_reads_outside_the_repository():
    for path in DOCS:
        assert "../shared" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("block", [
    pytest.param(b, id=b.id, marks=[pytest.mark.slow] if b.slow else [])
    for b in RUNNABLE])
def test_block_runs_as_printed(block, tmp_path):
    text = run_block_once(block, tmp_path)
    missing = check_output(block, text)
    assert not missing, f"{block.id}: the output lacks {missing} (in order)\n{text[-4000:]}"
