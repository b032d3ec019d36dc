"""The runnable blocks of README.md and docs/*.md (the convention: tests/test_docs.py), and
their runs: a block run by several tests (the `polyspec verify --quick` block is also the
source of tests/polyspec/test_simulate_verify_cli.py's rows) runs once per process."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

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


def run_block(block: Block, tmp_path: Path) -> str:
    """Run ``block``'s ``polyspec`` commands in order in ``tmp_path`` (a fresh copy of
    configs/ and examples/, data/ linked); their output, each command's stdout then stderr."""
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

_OUTPUT: dict[str, str] = {}


def run_block_once(block: Block, tmp_path: Path) -> str:
    """:func:`run_block`, run once per process for each block (later calls get its output)."""
    if block.id not in _OUTPUT:
        _OUTPUT[block.id] = run_block(block, tmp_path)
    return _OUTPUT[block.id]
