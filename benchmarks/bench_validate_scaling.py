"""Benchmark of ``polyspec validate`` against the number of traces (issue 27: 50 traces took
18 s, 1 000 took 528 s, faster than linear).

Writes ``N`` small synthetic single-stream traces (two- and three-model cascades of three
models, known iid laws, random thresholds) into a temporary folder and times the command
line ``validate DIR --json --no-plots`` in-process, for each ``N`` asked;
prints seconds and seconds per trace (linear scaling: a flat per-trace time).

Run: ``.venv/bin/python benchmarks/bench_validate_scaling.py [N ...]`` (default 50 200).
Single process; timings depend on the machine and its load.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_traces(folder: Path, n: int, seed: int = 0) -> None:
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import IIDGeometric
    from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

    costs = {"t": CostCurve.affine(6e-3, 5e-4), "mid": CostCurve.affine(1.5e-3, 1e-4),
             "ng": CostCurve.constant(2e-5)}
    laws = {("t", "mid"): IIDGeometric(0.8), ("mid", "ng"): IIDGeometric(0.6),
            ("t", "ng"): IIDGeometric(0.5)}
    rng = np.random.default_rng(seed)
    chains = [("t", "mid"), ("t", "ng"), ("mid", "ng"), ("t", "mid", "ng")]
    for k in range(n):
        ms = chains[k % len(chains)]
        th = [int(x) for x in rng.integers(1, 8, size=len(ms) - 1)]
        cap, rec = simulate_capture(SyntheticSpec(
            f"c{k:05d}", list(ms), [costs[m] for m in ms],
            [laws[(ms[i], ms[i + 1])] for i in range(len(ms) - 1)], th, prompts=2,
            tokens_per_prompt=40, prompt_len=16, baseline_contexts=(16,), baseline_reps=1,
            baseline_max_m=4, ar_tokens=8, seed=seed + k))
        write_trace(folder / f"c{k:05d}.jsonl", cap, rec)


def time_validate(folder: Path) -> float:
    from polyspec.cli import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["validate", str(folder), "--json", "--no-plots",
                   "--out", str(folder / "report")])
    if rc != 0:
        raise SystemExit(f"validate exited {rc}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    from validation.capture.machine import check_load_or_exit

    argv = list(argv if argv is not None else sys.argv[1:])
    allow = "--allow-load" in argv
    check_load_or_exit(allow, "a benchmark")
    ns = [int(x) for x in argv if x != "--allow-load"] or [50, 200]
    for n in ns:
        with tempfile.TemporaryDirectory() as d:
            write_traces(Path(d), n)
            s = time_validate(Path(d))
        print(f"{n:6d} traces: validate {s:8.2f} s   {1e3 * s / n:8.1f} ms per trace",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
