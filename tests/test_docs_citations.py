"""docs/theory.md is the statement of record: every repository path it cites in backticks
exists, and every name cited after it (``path: name, name`` or ``path::test_name``) is defined
in that file (a def, a class or an assignment)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "theory.md"
TOP = ("polyspec_theory", "simulators", "validation", "paper_figures", "polyspec", "tests",
       "docs", "configs", "data", "mutation", "benchmarks")
CITE = re.compile(rf"^((?:{'|'.join(TOP)})/[\w./-]*\w)(?:(?:::|:)\s*(.*))?$")
NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def citations(text: str):
    """(path, [names]) for every backticked citation of a repository path in ``text``."""
    out = []
    for span in re.findall(r"`([^`]+)`", text):
        m = CITE.match(span.strip())
        if m:
            names = [n for n in re.split(r"[,\s]+", (m.group(2) or "").strip())
                     if NAME.match(n)]
            out.append((m.group(1), names))
    return out


def defines(source: str, name: str) -> bool:
    last = re.escape(name.split(".")[-1])
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{last}\b|^\s*{last}\s*[:=]",
                     source, re.M) is not None


def problems(root: Path, text: str) -> list[str]:
    bad = []
    for path, names in citations(text):
        p = root / path
        if not p.exists():
            bad.append(f"{path}: no such path")
            continue
        if p.is_file() and p.suffix == ".py":
            src = p.read_text(encoding="utf-8")
            bad += [f"{path}: {n} is not defined there" for n in names if not defines(src, n)]
    return bad


def test_every_cited_path_and_name_exists():
    cites = citations(DOC.read_text(encoding="utf-8"))
    assert len(cites) >= 100  # the citations are found at all
    assert problems(ROOT, DOC.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_missing_path_and_a_missing_name(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_here():\n    pass\nX = 1\n")
    text = ("see `tests/test_a.py: test_here, X`, `tests/test_a.py::test_gone` and "
            "`tests/test_cli.py: test_x` but not `some words`")
    assert problems(tmp_path, text) == ["tests/test_a.py: test_gone is not defined there",
                                        "tests/test_cli.py: no such path"]
