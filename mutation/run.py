"""Mutation check: plant each mutant of ``mutation/mutants.toml`` in a copy of the repository,
run its test selection, and report which tests kill it.

    python mutation/run.py                 # every mutant (what ``make mutation`` runs)
    python mutation/run.py --only M01,M07  # some of them
    python mutation/run.py --list          # the list, without running anything
    python mutation/run.py --check         # every snippet still found exactly once?

The working tree (tracked files and untracked files that git does not ignore) is copied once
to a temporary directory; the user's checkout is never edited. The unmutated copy must pass
every selection first (``--no-baseline`` skips that). Then, one mutant at a time: replace the
mutant's ``original`` snippet (which must occur exactly once in its file) by its
``replacement``, run ``python -m pytest -x -q <tests>`` in the copy with a timeout, restore
the file. A mutant is *killed* when its tests fail (or time out), *survived* when they pass.
The report is a table (id, place, description, status, killing test, seconds) whose last
line is ``killed N/M``; the exit status is 0 only when every mutant is killed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = Path(__file__).resolve().with_name("mutants.toml")
FIELDS = ("id", "file", "original", "replacement", "description", "tests")


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    original: str
    replacement: str
    description: str
    tests: tuple[str, ...]


def load_mutants(path: Path = LIST) -> list[Mutant]:
    """The mutants of the TOML list (``[[mutant]]`` tables), checked for shape."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out, seen = [], set()
    for i, m in enumerate(data.get("mutant", [])):
        missing = [k for k in FIELDS if k not in m]
        if missing:
            raise SystemExit(f"{path}: mutant #{i + 1} misses {missing}")
        if m["id"] in seen:
            raise SystemExit(f"{path}: duplicate id {m['id']}")
        if m["original"] == m["replacement"]:
            raise SystemExit(f"{path}: {m['id']}: replacement equals the original")
        seen.add(m["id"])
        tests = m["tests"]
        tests = [tests] if isinstance(tests, str) else tests
        if not tests or any(t.startswith("-") for t in tests):
            raise SystemExit(f"{path}: {m['id']}: tests must be test paths or node ids")
        out.append(Mutant(m["id"], m["file"], m["original"], m["replacement"],
                          m["description"], tuple(tests)))
    return out


def copy_tree(dest: Path) -> None:
    """Copy the working tree as git sees it (tracked + untracked-not-ignored files)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def _env(work: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(work), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.pop("POLYSPEC_STRICT", None)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_tests(work: Path, tests, timeout: float) -> tuple[str, str, float]:
    """``(status, detail, seconds)``: status ``pass``, ``fail`` or ``timeout``; detail names
    the first failing test (or the last output line)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", *tests]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=work, env=_env(work), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"> {timeout:.0f} s", time.perf_counter() - t0
    finally:
        shutil.rmtree(work / ".hypothesis", ignore_errors=True)
    dt = time.perf_counter() - t0
    out = r.stdout + r.stderr
    if r.returncode == 0:
        return "pass", "", dt
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", out, re.MULTILINE)
    if m:
        return "fail", m.group(1), dt
    tail = [ln for ln in out.strip().splitlines() if ln.strip()]
    return "fail", (tail[-1] if tail else f"exit {r.returncode}")[:120], dt


def check_imports(work: Path) -> None:
    """The copy's packages, not an installed checkout, must be the ones imported."""
    code = ("import polyspec_theory, simulators, validation, polyspec;"
            "print('\\n'.join(m.__file__ for m in (polyspec_theory, simulators, validation,"
            " polyspec)))")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=_env(work),
                       capture_output=True, text=True, check=True)
    for path in r.stdout.split():
        if not Path(path).resolve().is_relative_to(work.resolve()):
            raise SystemExit(f"the copy imports {path}, not its own packages: check "
                             "PYTHONPATH / the editable install")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--check", action="store_true",
                    help="only check that every snippet is found exactly once, then exit")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the run of every selection on the unmutated copy")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = ap.parse_args(argv)
    mutants = load_mutants()
    if args.only:
        want = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = want - {m.id for m in mutants}
        if unknown:
            raise SystemExit(f"unknown mutant id(s): {sorted(unknown)}")
        mutants = [m for m in mutants if m.id in want]
    if args.list:
        for m in mutants:
            print(f"{m.id}  {m.file}: {m.description}  [{' '.join(m.tests)}]")
        return 0
    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="polyspec-mutation-"))
    try:
        copy_tree(work)
        check_imports(work)
        pristine = {}
        for m in mutants:  # every snippet must still be found, exactly once
            path = work / m.file
            if not path.is_file():
                raise SystemExit(f"{m.id}: no file {m.file}")
            text = pristine.setdefault(m.file, path.read_text(encoding="utf-8"))
            count = text.count(m.original)
            if count != 1:
                raise SystemExit(f"{m.id}: the original snippet occurs {count} times in "
                                 f"{m.file} (must be exactly once): update mutation/mutants.toml")
        if args.check:
            print(f"{len(mutants)} mutants: every original snippet found exactly once")
            return 0
        if not args.no_baseline:
            selections = sorted({t for m in mutants for t in m.tests})
            status, detail, dt = run_tests(work, selections, args.timeout * 4)
            print(f"baseline (unmutated, {len(selections)} selections): {status} "
                  f"in {dt:.0f} s {detail}", flush=True)
            if status != "pass":
                print("the unmutated copy fails its own selections: fix that first")
                return 2
        rows = []
        for m in mutants:
            path = work / m.file
            original = pristine[m.file]
            path.write_text(original.replace(m.original, m.replacement, 1), encoding="utf-8")
            try:
                status, detail, dt = run_tests(work, m.tests, args.timeout)
            finally:
                path.write_text(original, encoding="utf-8")
            verdict = {"pass": "SURVIVED", "fail": "killed", "timeout": "killed (timeout)"}
            rows.append((m, verdict[status], detail, dt))
            print(f"{m.id:5s} {verdict[status]:16s} {dt:6.1f} s  {m.file}: {m.description}"
                  f"{'  <- ' + detail if detail else ''}", flush=True)
    finally:
        if args.keep:
            print(f"copy kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    killed = sum(v.startswith("killed") for _, v, _, _ in rows)
    print()
    print("| id | place | description | result | killed by | s |")
    print("|---|---|---|---|---|---|")
    for m, verdict, detail, dt in rows:
        print(f"| {m.id} | {m.file} | {m.description} | {verdict} | {detail or '-'} | "
              f"{dt:.0f} |")
    print()
    print(f"wall time {time.perf_counter() - t_start:.0f} s")
    print(f"killed {killed}/{len(rows)}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
