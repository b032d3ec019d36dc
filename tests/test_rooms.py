"""The house's limits (issue 37), read from the source with ast: the validation room's root
holds at most six modules; no function of any layer takes more than eight keyword
parameters or runs over a hundred lines (a group of settings is one object: ``CaptureSpec``,
``ProfileSpec``, ``TrainRun``...); no import circle among the project's modules
(function-local imports count).

``python tests/test_rooms.py`` prints the measures for every layer."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("polyspec_theory", "simulators", "validation", "paper_figures", "polyspec")
LIMITED = LAYERS  # every layer is held to the limits (issue 37: "no source function")
MAX_ROOT_MODULES = 6
MAX_KEYWORDS = 8
MAX_LINES = 100


def root_modules(root: Path = ROOT) -> list[str]:
    """The modules directly in ``validation/`` (``__init__`` not counted)."""
    return sorted(p.name for p in (root / "validation").glob("*.py") if p.name != "__init__.py")


def function_measures(root: Path, layers) -> list[tuple[str, int, int]]:
    """``(where, keyword parameters, lines)`` of every function of ``layers`` (``self`` and
    ``cls`` not counted, ``*args`` / ``**kwargs`` not counted)."""
    out = []
    for layer in layers:
        for f in sorted((root / layer).rglob("*.py")):
            for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    kw = [a for a in n.args.args + n.args.kwonlyargs
                          if a.arg not in ("self", "cls")]
                    out.append((f"{f.relative_to(root)}:{n.lineno} {n.name}", len(kw),
                                n.end_lineno - n.lineno + 1))
    return out


def _modules(root: Path, layers) -> dict[str, tuple[Path, list[str]]]:
    mods = {}
    for layer in layers:
        for f in (root / layer).rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            pkg = parts[:-1]
            if parts[-1] == "__init__":
                parts, pkg = parts[:-1], parts[:-1]
            mods[".".join(parts)] = (f, pkg)
    return mods


def import_graph(root: Path = ROOT, layers=LAYERS) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in it; a package's own modules
    importing the package are not edges)."""
    mods = _modules(root, layers)

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for m, (f, pkg) in mods.items():
        out = set()
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Import):
                out |= {resolve(a.name) for a in n.names}
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    base = ".".join(pkg[:len(pkg) - (n.level - 1)] + ([base] if base else []))
                for a in n.names:
                    full = f"{base}.{a.name}"
                    out.add(resolve(full) if full in mods else resolve(base))
        out.discard(None)
        out.discard(m)
        graph[m] = {o for o in out if not m.startswith(o + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_validation_root_holds_at_most_six_modules():
    assert len(root_modules()) <= MAX_ROOT_MODULES, root_modules()


def test_no_function_over_eight_keyword_parameters_or_a_hundred_lines():
    m = function_measures(ROOT, LIMITED)
    assert len(m) > 500  # the walk sees the functions
    assert [w for w, k, _ in m if k > MAX_KEYWORDS] == []
    assert [w for w, _, n in m if n > MAX_LINES] == []


def test_no_import_circle():
    g = import_graph()
    assert len(g) > 100 and any(g.values())
    assert circles(g) == []


def test_the_checks_see_planted_violations(tmp_path):
    pkg = tmp_path / "validation"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from validation.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .. import a\n\n\ndef g(" + ", ".join(
        f"x{i}" for i in range(9)) + "):\n" + "    pass\n" * 100)
    assert circles(import_graph(tmp_path, ("validation",))) == [["validation.a",
                                                                 "validation.sub.b"]]
    (w, k, n), = [x for x in function_measures(tmp_path, ("validation",)) if "g" in x[0]]
    assert (k, n) == (9, 101)
    for i in range(7):
        (pkg / f"m{i}.py").write_text("")
    assert len(root_modules(tmp_path)) == 8


if __name__ == "__main__":
    m = function_measures(ROOT, LAYERS)
    print(f"validation/ root: {len(root_modules())} modules {root_modules()}")
    for what, i, lim in (("keyword parameters", 1, MAX_KEYWORDS), ("lines", 2, MAX_LINES)):
        over = sorted((x for x in m if x[i] > lim), key=lambda x: -x[i])
        print(f"functions over {lim} {what}: {len(over)}")
        for x in over:
            print(f"  {x[i]:4d}  {x[0]}")
    cs = circles(import_graph())
    print(f"import circles: {len(cs)}")
    for c in cs:
        print("  " + " <-> ".join(c))
