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

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
COMMENT = re.compile(r"^<!--\s*(expect|exit|slow)\s*(?::\s*(.*?))?\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    commands: list[str]
    expect: list[str] = field(default_factory=list)
    exit: int = 0
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _commands(body: list[str]) -> list[str]:
    prompted = any(line.startswith("$ ") for line in body)
    out, pending = [], None
    for line in body:
        if pending is not None:
            text = pending + " " + line.strip()
        elif prompted:
            if not line.startswith("$ "):
                continue
            text = line[2:].strip()
        else:
            text = line.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip()
            continue
        pending = None
        if text:
            out.append(text)
    return out


def parse_blocks(path: Path) -> list[Block]:
    """Every ``sh`` block of ``path`` with the expectations written right after it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[start + 1:j]
        i = j + 1
        if lang != "sh":
            continue
        block = Block(path, start + 1, _commands(body))
        while i < len(lines) and (c := COMMENT.match(lines[i].strip())):
            kind, value = c.group(1), c.group(2)
            if kind == "expect":
                block.expect.append(value)
            elif kind == "exit":
                block.exit = int(value)
            else:
                block.slow = True
            i += 1
        blocks.append(block)
    return blocks


def polyspec_argv(command: str) -> list[str] | None:
    words = shlex.split(command, comments=True)
    if not words or words[0] != "polyspec":
        return None
    return [sys.executable, "-m", "polyspec", *words[1:]]


def check_output(block: Block, text: str) -> list[str]:
    """The expectations of ``block`` missing from ``text`` (in order)."""
    missing, pos = [], 0
    for want in block.expect:
        k = text.find(want, pos)
        if k < 0:
            missing.append(want)
        else:
            pos = k + len(want)
    return missing


def _run_block(block: Block, tmp_path: Path) -> str:
    for name in ("configs", "examples"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), MPLBACKEND="Agg")
    env.pop("POLYSPEC_TRACEBACK", None)
    text = ""
    for command in block.commands:
        argv = polyspec_argv(command)
        if argv is None:
            continue
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=1800)
        text += done.stdout + done.stderr
        assert done.returncode == block.exit, (
            f"{block.id}: `{command}` exited {done.returncode}, the doc says {block.exit}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return text


BLOCKS = [b for path in DOCS for b in parse_blocks(path)]
RUNNABLE = [b for b in BLOCKS if any(polyspec_argv(c) for c in b.commands)]


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
    text = _run_block(block, tmp_path)
    missing = check_output(block, text)
    assert not missing, f"{block.id}: the output lacks {missing} (in order)\n{text[-4000:]}"
