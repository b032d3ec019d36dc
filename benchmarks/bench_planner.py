"""Benchmark of the cascade planner (``polyspec_theory.planning.planner.plan``).

Exact optimum over every chain containing the target and every threshold tuple in
``1..16``; prints the wall time and how much of the space was scored vs pruned:

1. ``configs/pool.json`` (8 models, 23 of the 56 possible pairs, thresholds <= 16), the
   full ``plan`` (top 5 alternatives, best two-model, the paper's greedy rule) — target
   <= 10 s;
2. the same 8 models with all 56 pairs (missing acceptance rates filled in from the size
   gap) — every one of the 13,699 chains is allowed;
3. twelve random fully connected 8-model pools (random costs and laws of all families);
4. a stress family built to defeat pruning: drafters 4x cheaper per level, every pair
   well aligned, so the optimum uses every model and the speedup is flat over thresholds
   (n = 6 by default; ``--stress`` adds n = 7 and n = 8, minutes);
5. pruning off vs on, on a small pool (same answer; the count of scored configurations).

Run: ``.venv/bin/python benchmarks/bench_planner.py [--stress] [--json out.json]``.
Single process; timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polyspec_theory.core.config import Model  # noqa: E402
from polyspec_theory.core.costs import CostCurve  # noqa: E402
from polyspec_theory.core.laws import (  # noqa: E402
    BetaMixed,
    GaussianBaseline,
    IIDGeometric,
    Positional,
)
from polyspec_theory.planning.planner import plan  # noqa: E402
from polyspec_theory.planning.pool import Pool

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
SIZE = {"target": 70, "m34b": 34, "m13b": 13, "m7b": 7, "m3b": 3, "m1b": 1, "m350m": 0.35,
        "ngram": 0.05}


def example_pool(full: bool = False) -> Pool:
    cfg = json.loads((ROOT / "configs" / "pool.json").read_text())
    if full:
        names = [m["name"] for m in cfg["models"]]
        acc = dict(cfg["acceptance"])
        for v in names:
            for d in names[1:]:
                if v != d and f"{v}|{d}" not in acc:
                    gap = abs(math.log(SIZE[v] / SIZE[d]))
                    acc[f"{v}|{d}"] = {"alpha": round(max(0.2, 0.92 - 0.07 * gap), 3)}
        cfg["acceptance"] = acc
    return Pool.from_config(cfg)


def random_pool(seed: int, k: int = 8, theta: int = 16) -> Pool:
    rng = np.random.default_rng(seed)
    models = [Model("t", CostCurve(base=1.0, per_token=float(rng.uniform(0, 0.03))))]
    for i in range(1, k):
        models.append(Model(f"d{i}", CostCurve(base=float(10 ** rng.uniform(-2.7, -0.3)),
                                               per_token=float(rng.uniform(0, 0.01)))))
    pairs = {}
    for v in models:
        for d in models[1:]:
            if v is d:
                continue
            f = int(rng.integers(4))
            if f == 0:
                law = IIDGeometric(float(rng.uniform(0.3, 0.95)))
            elif f == 1:
                law = Positional([float(x) for x in rng.uniform(0.3, 0.95, size=3)])
            elif f == 2:
                law = BetaMixed(float(rng.uniform(1, 12)), float(rng.uniform(0.8, 3)))
            else:
                law = GaussianBaseline(float(rng.uniform(0, 6)), float(rng.uniform(0.5, 3)))
            pairs[(v.name, d.name)] = law
    return Pool(tuple(models), pairs, theta)


def stress_pool(k: int, theta: int = 16) -> Pool:
    models = [Model("target", CostCurve(base=1.0))] + [
        Model(f"m{i}", CostCurve(base=0.25**i)) for i in range(1, k)]
    pairs = {(models[i].name, models[j].name):
             IIDGeometric(max(0.2, 0.97 - 0.05 * abs(i - j) ** 1.5))
             for i in range(k) for j in range(1, k) if i != j}
    return Pool(tuple(models), pairs, theta, name=f"stress-{k}")


def timed(pool: Pool, **kw):
    t = time.perf_counter()
    res = plan(pool, **kw)
    return time.perf_counter() - t, res


def line(label: str, dt: float, res) -> dict:
    s = res.stats
    print(f"{label:<34}{dt:8.2f} s  best {' <- '.join(res.chain)} {list(res.thresholds)} "
          f"{res.speedup:.4f}x")
    print(f"{'':<34}chains {s.chains_scored:,}/{s.chains_total:,} scored; configurations "
          f"{s.configs_scored:,} scored / {s.configs_pruned:,} pruned of {s.configs_total:,}; "
          f"states {s.states_computed:,} computed, {s.states_pruned:,} pruned")
    return {"label": label, "seconds": dt, "chain": list(res.chain),
            "thresholds": list(res.thresholds), "speedup": res.speedup, **s.to_dict()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="cascade planner benchmark")
    ap.add_argument("--stress", action="store_true", help="also the 7- and 8-model stress pools")
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")
    out = {"target_seconds": TARGET_S, "runs": []}

    print("1. configs/pool.json (8 models, thresholds <= 16), full plan (top 5 + greedy rule)")
    dt, res = timed(example_pool(), top=5)
    out["runs"].append(line("   example pool", dt, res))
    ok = dt <= TARGET_S
    print(f"   {'PASS' if ok else 'FAIL'}: {dt:.2f} s (target <= {TARGET_S:.0f} s)")
    out["example_pass"] = ok

    print("2. same models, all 56 pairs allowed (13,699 chains)")
    dt, res = timed(example_pool(full=True), top=5)
    out["runs"].append(line("   example pool, fully connected", dt, res))

    print("3. random fully connected 8-model pools, thresholds <= 16 (no greedy rule)")
    times = []
    for seed in range(12):
        dt, res = timed(random_pool(seed), top=5, greedy=False)
        times.append(dt)
        out["runs"].append({"label": f"random seed {seed}", "seconds": dt,
                            "chain": list(res.chain), "speedup": res.speedup,
                            **res.stats.to_dict()})
    print(f"   12 pools: median {statistics.median(times):.2f} s, max {max(times):.2f} s")

    print("4. stress pools (deep optimum, flat speedup over thresholds; thresholds <= 16)")
    for k in (6, 7, 8) if args.stress else (6,):
        dt, res = timed(stress_pool(k), top=5, greedy=False)
        out["runs"].append(line(f"   stress, {k} models", dt, res))

    print("5. pruning off vs on (5 models, thresholds <= 8, same answer)")
    small = Pool(stress_pool(5).models, stress_pool(5).pairs, 8, name="stress-5-th8")
    dt_on, on = timed(small, top=5, greedy=False)
    dt_off, off = timed(small, top=5, prune=False, greedy=False)
    same = rounded([a.speedup for a in (on.best, *on.alternatives)]) == rounded(
        [a.speedup for a in (off.best, *off.alternatives)])
    out["runs"].append(line("   pruning on", dt_on, on))
    out["runs"].append(line("   pruning off", dt_off, off))
    print(f"   same top-6 values: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0 if ok and same else 1


def rounded(values):
    """Values rounded to 12 significant digits (summation order may differ in the last bit)."""
    return [float(f"{v:.12g}") for v in values]


if __name__ == "__main__":
    sys.exit(main())
