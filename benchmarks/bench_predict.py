"""Benchmark of the exact P1 predictor (polyspec_theory.core.p1.predict_chain, via
polyspec_theory.predict) and its batched form.

Prints: the median (and 90th percentile) wall time of one ``predict`` call on random 4-level
cascades with thresholds <= 16 (target <= 1 ms); how the time grows with the threshold
(all pairs equal) and with the number of models n; and the per-config time of
``batch.predict_grid`` on the full 16^3 threshold grid of a 4-level cascade.

Run: ``.venv/bin/python benchmarks/bench_predict.py [--quick]``. Timings are medians over
repeated calls (``time.perf_counter``), single thread; they depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# run from anywhere: the repository root first on the path (the editable install may resolve
# polyspec_theory as a namespace package when the script's directory is sys.path[0])
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polyspec_theory import Cascade, predict  # noqa: E402
from polyspec_theory.planning.grid import predict_grid  # noqa: E402

LAW_CONFIG_KEYS = ("alpha", "positional", "beta", "gaussian")


def random_cascade(rng, n: int, theta_max: int | None = None, theta: int | None = None):
    models = [{"name": "m1", "cost": {"base": 1.0, "per_token": float(rng.uniform(0, 0.05))}}]
    for i in range(1, n):
        models.append({"name": f"m{i + 1}",
                       "cost": {"base": float(10 ** rng.uniform(-2.5, -0.5)),
                                "per_token": float(rng.uniform(0, 0.01))}})
    laws = []
    for _ in range(n - 1):
        fam = LAW_CONFIG_KEYS[int(rng.integers(4))]
        if fam == "alpha":
            laws.append({"alpha": float(rng.uniform(0.4, 0.95))})
        elif fam == "positional":
            laws.append({"positional": rng.uniform(0.4, 0.95, 3).tolist()})
        elif fam == "beta":
            laws.append({"beta": [float(rng.uniform(1, 8)), float(rng.uniform(0.5, 3))]})
        else:
            laws.append({"gaussian": [float(rng.uniform(0, 5)), float(rng.uniform(0.5, 3))]})
    if theta is None:
        th = [int(rng.integers(1, theta_max + 1)) for _ in range(n - 1)]
    else:
        th = [theta] * (n - 1)
    return Cascade.from_config({"models": models, "acceptance": laws, "thresholds": th})


def time_call(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls (after one warm-up call)."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def per_config_times(rng, n, count, repeats, **kw) -> np.ndarray:
    out = []
    for _ in range(count):
        c = random_cascade(rng, n, **kw)
        out.append(time_call(lambda c=c: predict(c), repeats))
    return np.asarray(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer configs and repeats")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")
    rng = np.random.default_rng(0)
    count, reps = (40, 5) if args.quick else (300, 9)

    t = per_config_times(rng, 4, count, reps, theta_max=16) * 1e3
    print(f"predict, 4 levels, thresholds uniform in 1..16, {count} random configs "
          f"(median of {reps} calls each):")
    print(f"  median {np.median(t):.3f} ms   p90 {np.percentile(t, 90):.3f} ms   "
          f"max {t.max():.3f} ms   target <= 1 ms: "
          f"{'met' if np.median(t) <= 1.0 else 'NOT met'}")

    print("\ngrowth with theta (4 levels, all thresholds = theta), median ms per call:")
    print(f"  {'theta':>6} {'ms':>9}")
    thetas = (1, 2, 4, 8, 16, 32, 64) if args.quick else (1, 2, 4, 8, 16, 32, 64, 128, 256)
    for th in thetas:
        tt = per_config_times(rng, 4, 5 if args.quick else 10, 3, theta=th) * 1e3
        print(f"  {th:>6} {np.median(tt):>9.3f}")

    print("\ngrowth with n (all thresholds = 8), median ms per call:")
    print(f"  {'n':>6} {'ms':>9}")
    for n in range(2, 9):
        tt = per_config_times(rng, n, 5 if args.quick else 20, 3, theta=8) * 1e3
        print(f"  {n:>6} {np.median(tt):>9.3f}")

    c = random_cascade(np.random.default_rng(1), 4, theta=8)
    grid = [np.arange(1, 17)] * 3
    dt = time_call(lambda: predict_grid(c, grid), 3)
    print(f"\nbatch.predict_grid, 4 levels, full 16^3 = 4096 threshold grid: {dt * 1e3:.1f} ms "
          f"total, {dt / 4096 * 1e6:.1f} us per config")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
