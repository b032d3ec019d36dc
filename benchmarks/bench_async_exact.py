"""Benchmark of AS7, the exact rate of asynchronous pipelines of three and four levels
(polyspec_theory.pipelines.async_exact.exact_async; docs/theory.md AS7), side by side with
the simulator that ``predict`` ran before it (64 chains x 20 000 events, the same cascade).

Prints, per case: the chain's size (states), the median wall time of one ``exact_async`` call
(target for issue 41: <= 1 s at three and four levels), the simulator's time on the same
cascade and the ratio of the two, all in one run. The cases: issue 41's three-level cascade
(1 / 0.3 / 0.05), a three-level cascade with an affine target cost (a finer lattice), and two
four-level cascades.

Run: ``.venv/bin/python benchmarks/bench_async_exact.py [--quick]``. Timings are medians over
repeated calls (``time.perf_counter``), single thread; they depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polyspec_theory import Cascade  # noqa: E402
from polyspec_theory.pipelines.async_exact import exact_async  # noqa: E402


def _cas(costs, alphas, thresholds):
    return Cascade.from_config({
        "models": [{"name": f"m{j}", "cost": c} for j, c in enumerate(costs)],
        "acceptance": [{"alpha": a} for a in alphas], "thresholds": list(thresholds),
        "mode": "async"})


CASES = [
    ("issue 41: 3 levels, 1 / 0.3 / 0.05, thresholds 2 / 3",
     _cas([1.0, 0.3, 0.05], [0.8, 0.7], [2, 3])),
    ("3 levels, affine target 1 + 0.02 (m - 1) / 0.25 / 0.04, thresholds 0 / 2",
     _cas([{"base": 1.0, "per_token": 0.02}, 0.25, 0.04], [0.8, 0.75], [0, 2])),
    ("4 levels, 1 / 0.5 / 0.2 / 0.1, thresholds 0 / 0 / 0",
     _cas([1.0, 0.5, 0.2, 0.1], [0.9, 0.8, 0.7], [0, 0, 0])),
    ("4 levels, 1 / 0.4 / 0.2 / 0.1, thresholds 1 / 1 / 1",
     _cas([1.0, 0.4, 0.2, 0.1], [0.85, 0.8, 0.75], [1, 1, 1])),
]


def median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no simulator")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")
    reps = 3 if args.quick else 7
    if not args.quick:
        from simulators.asynchronous import simulate_async

        simulate_async(CASES[0][1], 20_000, 0, chains=64)  # compile once, outside the timing
    print(f"{'case':<74} {'states':>7} {'exact s':>8} {'sim s':>7} {'sim/exact':>9}")
    for name, cas in CASES:
        res = exact_async(cas)
        t = median_time(lambda cas=cas: exact_async(cas), reps)
        if args.quick:
            sim, ratio = "", ""
        else:
            ts = median_time(lambda cas=cas: simulate_async(cas, 20_000, 0, chains=64), 3)
            sim, ratio = f"{ts:7.2f}", f"{ts / t:9.1f}"
        flag = "met" if t <= 1.0 else "NOT met"
        print(f"{name:<74} {res.states:>7} {t:8.3f} {sim:>7} {ratio:>9}  (<= 1 s: {flag}; "
              f"speedup {res.speedup:.6f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
