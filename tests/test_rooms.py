"""The house's limits (issue 37), read from the source with ast: the validation room's root
holds at most six modules; no function of any layer takes more than eight keyword
parameters or runs over a hundred lines (a group of settings is one object: ``CaptureSpec``,
``ProfileSpec``, ``TrainRun``...); no import circle among the project's modules
(function-local imports count); no comparison with a scheme's name or mode outside the
scheme registries (``polyspec_theory/schemes/``, ``simulators/schemes/``,
``validation/schemes/``) but the listed words of other vocabularies (:data:`SCHEME_WORDS_ALLOWED`);
the command line reaches ``validation.files`` through one door (:data:`FILES_DOORS`).

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


REGISTRIES = ("polyspec_theory/schemes", "simulators/schemes", "validation/schemes")
# Comparisons with a scheme's name or mode left outside the registries, each with why: words
# of another vocabulary that happen to spell a scheme's name. (file, the comparison as
# ast.unparse writes it) -> why.
_PIPESPEC = ("PipeSpec's `strategy` values (greedy, chain, async-chain) are its log format's "
             "words; SCHEMES maps them onto the registry once")
_KIND = ("a forecast line's `kind` (chain, tree, schedule, batch, async) is the forecasts "
         "file's word; KIND_SCHEMES maps it onto the registry")
_PAIR = "a pair's drafting structure (chain, tree, hf, confidence), not a scheme"
_HARDWARE = ("the GPU cost database's vocabulary: a published row's `method` / draft shape "
             "and a GPU plan config's `methods`, priced by that wing's own models (issue 38)")
SCHEME_WORDS_ALLOWED = {
    ("polyspec_theory/core/config.py", "e.field != 'batch'"): "an error's field name",
    ("polyspec_theory/structures/structured.py", "kind == 'chain'"): _PAIR,
    ("polyspec_theory/structures/structured.py", "p['kind'] == 'chain'"): _PAIR,
    ("validation/traces/dataset.py", "kind == 'chain'"): _PAIR,
    ("validation/traces/dataset.py", "self.pair_kind(i) != 'chain'"): _PAIR,
    ("validation/analysis/structured.py", "other in ('chain', 'hf')"): _PAIR,
    ("validation/analysis/score.py", "kind == 'batch'"): _KIND,
    ("validation/analysis/score.py", "f['kind'] == 'batch'"): _KIND,
    ("validation/analysis/score.py", "'batch' in f"): "the forecast line's `batch` field",
    ("validation/formats/pipespec.py", "strategy == 'chain'"): _PIPESPEC,
    ("validation/formats/pipespec.py", "run.strategy != 'chain'"): _PIPESPEC,
    ("validation/formats/pipespec.py", "run.strategy == 'chain'"): _PIPESPEC,
    ("validation/hardware/acceptance.py", "r.method == 'pearl'"): _HARDWARE,
    ("validation/hardware/acceptance.py", "r.method != 'pearl'"): _HARDWARE,
    ("validation/hardware/acceptance.py", "r.method in ('pearl', 'eagle')"): _HARDWARE,
    ("validation/hardware/acceptance.py", "r.get('draft_shape') == 'chain'"): _HARDWARE,
    ("validation/hardware/fit.py", "r.method == 'pearl'"): _HARDWARE,
    ("validation/hardware/forecast.py", "row.method == 'pearl'"): _HARDWARE,
    ("validation/hardware/forecast.py", "r.method in ('pearl', 'sd-sync', 'ssd-async')"):
        _HARDWARE,
    ("validation/hardware/plan.py", "'chain' in pool.methods"): _HARDWARE,
    ("validation/hardware/plan.py", "'pearl' in pool.methods"): _HARDWARE,
    ("validation/hardware/rows.py", "method == 'pearl'"): _HARDWARE,
    ("validation/hardware/rows.py", "shape not in ('tree', 'chain')"): _HARDWARE,
}

# The command line's modules that may import validation.files: its one door for writing
# outputs (polyspec/output.py) and the reader of a config's bytes (polyspec/configs.py).
FILES_DOORS = {"polyspec.output", "polyspec.configs"}


def scheme_words() -> set[str]:
    """Every registered scheme's name and every mode (the theory registry's)."""
    from polyspec_theory.schemes import modes, registry

    return set(registry()) | set(modes())


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def scheme_comparisons(root: Path, layers, words) -> list[tuple[str, int, str]]:
    """``(file, line, comparison)`` of every comparison (``==``, ``!=``, ``in``, ``is``...)
    of ``layers`` outside the scheme registries with a string of ``words`` on a side (a
    literal or in a literal tuple / list / set)."""
    out = []
    for layer in layers:
        for f in sorted((root / layer).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel.startswith(tuple(r + "/" for r in REGISTRIES)):
                continue
            for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(n, ast.Compare) and any(
                        w in words for side in (n.left, *n.comparators) for w in _strings(side)):
                    out.append((rel, n.lineno, ast.unparse(n)))
    return out


def importers(graph: dict[str, set[str]], module: str, layer: str) -> list[str]:
    """The modules of ``layer`` that import ``module`` (anywhere in them)."""
    return sorted(m for m, deps in graph.items()
                  if m.split(".")[0] == layer and module in deps)


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


def test_no_scheme_name_or_mode_compared_outside_the_registries():
    words = scheme_words()
    assert {"chain", "async", "sync"} <= words  # the registry is read
    found = scheme_comparisons(ROOT, LAYERS, words)
    assert [(f, ln, c) for f, ln, c in found if (f, c) not in SCHEME_WORDS_ALLOWED] == []
    # every allowance is still needed (a stale one would hide a new comparison like it)
    assert {(f, c) for f, _, c in found} == set(SCHEME_WORDS_ALLOWED)


def test_the_command_line_reaches_validation_files_through_one_door():
    assert set(importers(import_graph(), "validation.files", "polyspec")) == FILES_DOORS


def test_the_door_check_sees_a_planted_import(tmp_path):
    (tmp_path / "validation").mkdir()
    (tmp_path / "polyspec" / "commands").mkdir(parents=True)
    for f in ("validation/__init__.py", "validation/files.py", "polyspec/__init__.py",
              "polyspec/commands/__init__.py", "polyspec/commands/ok.py"):
        (tmp_path / f).write_text("")
    (tmp_path / "polyspec" / "output.py").write_text("from validation.files import dump_json\n")
    (tmp_path / "polyspec" / "commands" / "a.py").write_text(
        "def f():\n    from validation import files\n")
    (tmp_path / "polyspec" / "commands" / "b.py").write_text("import validation.files\n")
    (tmp_path / "polyspec" / "commands" / "c.py").write_text(
        "def f():\n    from ..output import dump_json\n")
    g = import_graph(tmp_path, ("validation", "polyspec"))
    assert importers(g, "validation.files", "polyspec") == [
        "polyspec.commands.a", "polyspec.commands.b", "polyspec.output"]
    assert importers(g, "polyspec.output", "polyspec") == ["polyspec.commands.c"]


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
    words = {"chain", "async", "sync"}
    (pkg / "m0.py").write_text(
        "def f(c, k):\n    return (c.mode == 'async', k in ('tree', 'chain'), "
        "'sync' != c.x, c.mode == 'per_position', k == 'chained')\n")
    (pkg / "schemes").mkdir()
    (pkg / "schemes" / "a.py").write_text("def f(c):\n    return c.mode == 'async'\n")
    assert scheme_comparisons(tmp_path, ("validation",), words) == [
        ("validation/m0.py", 2, "c.mode == 'async'"),
        ("validation/m0.py", 2, "k in ('tree', 'chain')"),
        ("validation/m0.py", 2, "'sync' != c.x")]


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
    doors = importers(import_graph(), "validation.files", "polyspec")
    print(f"polyspec modules importing validation.files: {doors} (allowed: "
          f"{sorted(FILES_DOORS)})")
    sc = scheme_comparisons(ROOT, LAYERS, scheme_words())
    print(f"scheme name / mode comparisons outside the registries: {len(sc)} "
          f"({sum((f, c) not in SCHEME_WORDS_ALLOWED for f, _, c in sc)} not allowed)")
    for f, ln, c in sc:
        print(f"  {f}:{ln} {c}" + ("" if (f, c) in SCHEME_WORDS_ALLOWED else "  <- NOT ALLOWED"))
