"""Imports flow one way: polyspec_theory <- simulators <- validation <- paper_figures <-
polyspec. Every import statement of every module (function-local ones included) is read from
the source with ast; a module may import its own layer and the layers below it only."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("polyspec_theory", "simulators", "validation", "paper_figures", "polyspec")


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level project package, line) of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            if top in LAYERS:
                out.add((top, node.lineno))
    return out


def violations(package: str) -> list[str]:
    allowed = set(LAYERS[: LAYERS.index(package) + 1])
    bad = []
    for f in sorted((ROOT / package).rglob("*.py")):
        for top, line in sorted(imported_packages(f)):
            if top not in allowed:
                bad.append(f"{f.relative_to(ROOT)}:{line} imports {top}")
    return bad


@pytest.mark.parametrize("package", LAYERS)
def test_imports_flow_one_way(package):
    assert violations(package) == []


def test_the_check_sees_function_local_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy\n\ndef f():\n    from paper_figures import registry\n"
                 "    import polyspec.cli\n")
    assert imported_packages(f) == {("paper_figures", 4), ("polyspec", 5)}
