"""Imports flow one way: polyspec_theory <- simulators <- validation <- paper_figures <-
polyspec. Every import of every module is read from the source with ast — function-local ones
and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal (or f-string
prefix) name included; a module may import its own layer and the layers below it only. The
tools (``benchmarks/``, ``mutation/``) may import every layer but not the tests nor another
tool; the experiments (``experiments/**/*.py``, the scripts behind the committed data) use
the public API only (``polyspec``: ``polyspec.api``, ``polyspec.research``, the CLI); no
layer imports a tool or the tests.

Inside the theory package, no function imports a project module (the sub-packages form one
direction of module imports) and no module imports another module's private name."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("polyspec_theory", "simulators", "validation", "paper_figures", "polyspec")
TOOLS = ("benchmarks", "experiments", "mutation")
PUBLIC = {"experiments": {"polyspec"}}  # tools held to the public API
KNOWN = LAYERS + TOOLS + ("tests",)
DYNAMIC = {"import_module", "__import__"}


def _package_of(path: Path, root: Path) -> list[str]:
    return list(path.relative_to(root).parent.parts)


def _dynamic_name(node: ast.Call, path: Path, root: Path) -> str | None:
    """The module named by ``importlib.import_module(X[, package])`` / ``__import__(X)``:
    a string literal or the literal prefix of an f-string; a leading dot is resolved against
    the module's own package."""
    f = node.func
    fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    if fname not in DYNAMIC or not node.args:
        return None
    a = node.args[0]
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        name = a.value
    elif isinstance(a, ast.JoinedStr) and a.values and isinstance(a.values[0], ast.Constant):
        name = str(a.values[0].value)
    else:
        return None
    if name.startswith("."):
        name = ".".join(_package_of(path, root)) + name
    return name.strip(".") or None


def imported_packages(path: Path, root: Path = ROOT) -> set[tuple[str, int]]:
    """(top-level project package, line) of every import in ``path`` (absolute, relative
    ones resolved, and dynamic ones with a literal name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            name = _dynamic_name(node, path, root)
            names = [name] if name else []
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            if top in KNOWN:
                out.add((top, node.lineno))
    return out


def _files(root: Path, package: str):
    return sorted((root / package).rglob("*.py"))


def violations(package: str, root: Path = ROOT) -> list[str]:
    if package in LAYERS:
        allowed = set(LAYERS[: LAYERS.index(package) + 1])
    elif package in PUBLIC:
        allowed = PUBLIC[package] | {package}
    else:
        allowed = set(LAYERS) | {package}
    bad = []
    for f in _files(root, package):
        for top, line in sorted(imported_packages(f, root)):
            if top not in allowed:
                bad.append(f"{f.relative_to(root)}:{line} imports {top}")
    return bad


def theory_violations(root: Path = ROOT) -> list[str]:
    """Function-local project imports and imports of private names inside the theory."""
    bad = []
    for f in sorted((root / "polyspec_theory").rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                mod = None
                if isinstance(node, ast.ImportFrom):
                    mod = "." if node.level else node.module
                elif isinstance(node, ast.Import):
                    mod = node.names[0].name
                if mod and (mod == "." or mod.split(".")[0] in KNOWN):
                    bad.append(f"{f.relative_to(root)}:{node.lineno} imports {mod} in a function")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(
                    ".")[0] in KNOWN):
                parts = (node.module or "").split(".")
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(p.startswith("_") for p in parts):
                    bad.append(f"{f.relative_to(root)}:{node.lineno} imports a private name "
                               f"{private or node.module}")
    return bad


@pytest.mark.parametrize("package", LAYERS + TOOLS)
def test_imports_flow_one_way(package):
    assert violations(package) == []


def test_theory_has_no_function_local_or_private_imports():
    assert theory_violations() == []


def test_the_check_sees_function_local_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy\n\ndef f():\n    from paper_figures import registry\n"
                 "    import polyspec.cli\n")
    assert imported_packages(f, tmp_path) == {("paper_figures", 4), ("polyspec", 5)}


@pytest.mark.parametrize("package, rel, source, offender", [
    # a dynamic import by literal name, an f-string prefix, a relative one
    ("polyspec_theory", "polyspec_theory/m.py",
     "import importlib\nimportlib.import_module('paper_figures.registry')\n", "paper_figures"),
    ("simulators", "simulators/m.py",
     "from importlib import import_module\nimport_module(f'validation.{1}')\n", "validation"),
    ("validation", "validation/m.py", "__import__('polyspec.cli')\n", "polyspec"),
    # the tools: benchmarks, experiments (any depth, the public API only), mutation
    ("benchmarks", "benchmarks/b.py", "from tests import _samples\n", "tests"),
    ("experiments", "experiments/x/y/z.py",
     "import importlib\nimportlib.import_module('mutation.run')\n", "mutation"),
    ("experiments", "experiments/z.py", "from validation.traces import records\n",
     "validation"),
    ("mutation", "mutation/m.py", "def f():\n    import benchmarks.run_all\n", "benchmarks"),
    # a layer importing a tool
    ("polyspec", "polyspec/m.py", "import benchmarks.bench_predict\n", "benchmarks"),
])
def test_planted_violations_are_caught(tmp_path, package, rel, source, offender):
    f = tmp_path / rel
    f.parent.mkdir(parents=True)
    f.write_text(source)
    bad = violations(package, tmp_path)
    assert len(bad) == 1 and bad[0].endswith(f"imports {offender}")
    clean = "polyspec.research" if package in PUBLIC else "polyspec_theory.core"
    f.write_text(f"import importlib\nimportlib.import_module('{clean}')\n")
    assert violations(package, tmp_path) == []


def test_planted_theory_violations_are_caught(tmp_path):
    d = tmp_path / "polyspec_theory" / "core"
    d.mkdir(parents=True)
    (d / "a.py").write_text("def f():\n    from polyspec_theory.core import b\n")
    (d / "b.py").write_text("from polyspec_theory.core.a import _helper\n")
    (d / "c.py").write_text("def g():\n    from . import a\n    import scipy\n")
    bad = theory_violations(tmp_path)
    assert len(bad) == 3
    assert "a.py:2 imports polyspec_theory.core in a function" in bad[0]
    assert "private name ['_helper']" in bad[1]
    assert "c.py:2 imports . in a function" in bad[2]
