"""Start-up cost of the command line: wall time of ``polyspec predict configs/default.json``
and of ``import polyspec_theory``, here and (with ``--before REV``) in a checkout of another
git revision, side by side in one run.

    python benchmarks/bench_startup.py [--before REV] [--repeats 7]

Each measurement is a fresh Python process (median of the repeats); the revisions alternate
so that machine load affects both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _entry(tree: Path) -> str:
    module = "polyspec.cli" if (tree / "polyspec" / "cli.py").exists() else "validation.cli"
    return f"import sys; from {module} import main; sys.exit(main(sys.argv[1:]))"


def _time(cmd, env_path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=env_path, check=True, stdout=subprocess.DEVNULL,
                   env={"PYTHONPATH": str(env_path), "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t0


def measure(trees: dict, repeats: int) -> dict:
    out = {name: {"predict": [], "import": []} for name in trees}
    for _ in range(repeats):
        for name, tree in trees.items():
            cfg = tree / "configs" / "default.json"
            out[name]["predict"].append(
                _time([sys.executable, "-c", _entry(tree), "predict", str(cfg)], tree))
            out[name]["import"].append(
                _time([sys.executable, "-c", "import polyspec_theory"], tree))
    return {name: {k: statistics.median(v) for k, v in d.items()} for name, d in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=None, help="git revision to compare with")
    ap.add_argument("--repeats", type=int, default=7)
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")
    trees = {"this checkout": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            wt = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt),
                            args.before], check=True, capture_output=True)
            trees = {f"revision {args.before}": wt, **trees}
        try:
            res = measure(trees, args.repeats)
        finally:
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(wt)], check=False, capture_output=True)
    print(f"{'':<28}{'polyspec predict (s)':>22}{'import polyspec_theory (s)':>28}")
    for name, r in res.items():
        print(f"{name:<28}{r['predict']:>22.3f}{r['import']:>28.3f}")
    if len(res) == 2:
        (a, ra), (b, rb) = res.items()
        print(f"{'ratio (before / after)':<28}{ra['predict'] / rb['predict']:>22.2f}"
              f"{ra['import'] / rb['import']:>28.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
