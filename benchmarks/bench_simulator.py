"""Simulated drafted positions per second, side by side in one run:

* the length-level JAX simulator (one uniform per verification round, inverse CDF), its
  chains sharded over one CPU device per core (``simulators.runtime.use_cpu_cores``);
* (a) a vectorized numpy reference of the same event-driven algorithm that draws one uniform
  per drafted position (Bernoulli acceptance with the law's hazards);
* (b) a plain Python loop (one chain, ``random.random()`` per drafted position);
* (c) the raw ``jax.random.uniform`` rate (float32, JAX's default partitionable threefry, one
  device) — the ceiling of any simulator drawing one uniform per drafted position; for
  context the same sharded over every device and the legacy non-partitionable threefry
  (one device / all devices), the best of the four, and numpy's generator;

plus the token-level simulator's verifications (positions checked) per second.

The speedups printed under (a) and (b) are sanity values only (a fixed event budget from an
empty state, no stopping rule, so they carry an O(1/events) start-up bias); the simulator's
agreement with P1 is tested in tests/simulators.

Usage: ``python benchmarks/bench_simulator.py [--seconds S] [--cpu-devices K] [--json]``.
"Drafted positions" = the sum over all verification rounds of the block length ``G_i`` at
every level.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from polyspec_theory.core.config import Cascade  # noqa: E402
from polyspec_theory.core.p1 import block_bounds  # noqa: E402
from polyspec_theory.schemes import predict  # noqa: E402


def _hazards(cascade: Cascade, width: int) -> np.ndarray:
    """``h[i, k] = P(A >= k+1 | A >= k)`` for k = 0..width-1 (per-position acceptance)."""
    out = []
    for law in cascade.laws:
        s = law.survival(width)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.where(s[:-1] > 0, s[1:] / np.where(s[:-1] > 0, s[:-1], 1), 0.0))
    return np.stack(out)


def numpy_reference(cascade: Cascade, chains: int, events: int, seed: int = 0) -> dict:
    """(a) The event-driven cascade, vectorized over chains with numpy, drawing ONE UNIFORM
    PER DRAFTED POSITION (accept position k with the law's hazard). Returns counts and the
    resulting speedup (a sanity check against P1)."""
    rng = np.random.default_rng(seed)
    m = cascade.n - 1
    th = np.asarray(cascade.thresholds)
    width = max(block_bounds(cascade.thresholds, cascade.policy))
    haz = _hazards(cascade, width)
    g = np.arange(width + 1)
    vcost = np.stack([cascade.costs[i](g + 1) for i in range(m)])
    bottom = th[-1] * cascade.costs[-1].t1
    level = np.full(chains, m - 1)
    acc = np.zeros((chains, m), dtype=np.int64)
    tokens = np.zeros(chains)
    time_ = np.zeros(chains)
    positions = 0
    rows = np.arange(chains)
    for _ in range(events):
        block = np.where(level == m - 1, th[-1], acc[rows, level])
        if cascade.policy == "truncate":
            block = np.minimum(block, th[level])
        total = int(block.sum())
        positions += total
        u = rng.random(total)
        offsets = np.concatenate([[0], np.cumsum(block)[:-1]])
        pos = np.arange(total) - np.repeat(offsets, block)
        fail = u >= haz[np.repeat(level, block), pos]
        a = np.minimum.reduceat(np.where(fail, pos, np.repeat(block, block)), offsets)
        emitted = a + 1
        time_ += vcost[level, block] + np.where(level == m - 1, bottom, 0.0)
        acc[rows, level] = 0
        up = level - 1
        has_up = up >= 0
        acc[rows[has_up], up[has_up]] += emitted[has_up]
        ready = has_up & (acc[rows, np.maximum(up, 0)] >= th[np.maximum(up, 0)])
        tokens += np.where(level == 0, emitted, 0)
        level = np.where(ready, up, m - 1)
    return {"positions": positions, "speedup": cascade.costs[0].t1 * tokens.sum() / time_.sum()}


def python_loop(cascade: Cascade, events: int, seed: int = 0) -> dict:
    """(b) One chain in plain Python, one ``random.random()`` per drafted position."""
    rnd = random.Random(seed)
    m = cascade.n - 1
    th = list(cascade.thresholds)
    width = max(block_bounds(th, cascade.policy))
    haz = _hazards(cascade, width).tolist()
    costs = [[float(cascade.costs[i](gg + 1)) for gg in range(width + 1)] for i in range(m)]
    bottom = th[-1] * cascade.costs[-1].t1
    level, acc = m - 1, [0] * m
    tokens, t, positions = 0, 0.0, 0
    for _ in range(events):
        block = th[-1] if level == m - 1 else acc[level]
        if cascade.policy == "truncate":
            block = min(block, th[level])
        positions += block
        h = haz[level]
        a = 0
        while a < block and rnd.random() < h[a]:
            a += 1
        t += costs[level][block] + (bottom if level == m - 1 else 0.0)
        acc[level] = 0
        if level == 0:
            tokens += a + 1
            level = m - 1
        else:
            acc[level - 1] += a + 1
            level = level - 1 if acc[level - 1] >= th[level - 1] else m - 1
    return {"positions": positions, "speedup": cascade.costs[0].t1 * tokens / t}


def _timed(fn, seconds: float):
    """Run ``fn()`` (returns a count) repeatedly for about ``seconds``; count per second."""
    count, start = 0, time.perf_counter()
    while True:
        count += fn()
        el = time.perf_counter() - start
        if el >= seconds:
            return count / el


def _uniform_rate(key, seconds: float, mesh=None) -> float:
    """Raw ``jax.random.uniform`` float32 rate, on one device or sharded over ``mesh``."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n_u = 1 << 22
    out = None if mesh is None else NamedSharding(mesh, P("chains"))
    f32 = jax.jit(lambda k, i: jax.random.uniform(jax.random.fold_in(k, i), (n_u,),
                                                  jnp.float32), out_shardings=out)
    f32(key, 0).block_until_ready()
    it = iter(range(1, 10**9))
    return _timed(lambda: (f32(key, next(it)).block_until_ready(), n_u)[1], seconds)


def bench(seconds: float = 3.0, cpu_devices: int | None = None) -> dict:
    from simulators.runtime import chain_mesh, shard_chains, use_cpu_cores

    ndev = use_cpu_cores(cpu_devices)  # before any JAX operation
    import jax
    import jax.numpy as jnp

    from simulators.length import LengthModel, init_state, run_chunk
    from simulators.token import TokenModel, make_lms, run_token_chunk

    mesh = chain_mesh()
    out = {"machine": {"devices": [str(d) for d in jax.devices()],
                       "cpu_count": __import__("os").cpu_count()}, "configs": {}}
    # (c) = jax.random.uniform as JAX ships it (partitionable threefry, the default since JAX
    # 0.5; one device). For context: sharded over every device, and the legacy
    # non-partitionable threefry; "best" is the fastest of the four.
    key = jax.random.key(0)
    rates = {}
    for part in (True, False):
        jax.config.update("jax_threefry_partitionable", part)
        tag = "default" if part else "legacy"
        rates[f"{tag}_1dev"] = _uniform_rate(key, seconds)
        if ndev > 1:
            rates[f"{tag}_{ndev}dev"] = _uniform_rate(key, seconds, mesh)
    jax.config.update("jax_threefry_partitionable", True)
    out["jax_uniform_f32_rates"] = rates
    out["jax_uniform_f32_per_s"] = rates["default_1dev"]
    out["jax_uniform_best_per_s"] = max(rates.values())
    rng = np.random.default_rng(0)
    n_u = 1 << 22
    out["numpy_uniform_f64_per_s"] = _timed(lambda: (rng.random(n_u), n_u)[1], seconds)

    chains, chunk = 1024, 512
    for name in ("default", "dualistic"):
        cas = Cascade.from_config(json.loads((ROOT / "configs" / f"{name}.json").read_text()))
        row = {"p1_speedup": predict(cas).speedup}
        runs = [("jax_sim", False, mesh), ("jax_sim_hist", True, mesh)]
        if ndev > 1:
            runs.append(("jax_sim_1dev", False, chain_mesh(jax.devices()[:1])))
        for label, hist, msh in runs:
            model = LengthModel.from_cascade(cas, histograms=hist)
            st = shard_chains(jax.vmap(lambda d, m=model: init_state(m.static.m, d))(
                jnp.zeros(chains, bool)), msh)
            target = jnp.int64(10**15)  # steady state: no chain stops
            st, _ = run_chunk(model.params, model.static, chunk, chains, target, key,
                              jnp.int64(0), st)
            jax.block_until_ready(st)
            box = {"st": st, "i": 1}

            def one(model=model, box=box, target=target):
                before = sum(int(np.asarray(b).sum()) for b in box["st"].block_sum)
                box["st"], _ = run_chunk(model.params, model.static, chunk, chains, target,
                                         key, jnp.int64(box["i"]), box["st"])
                box["i"] += 1
                after = sum(int(np.asarray(b).sum()) for b in box["st"].block_sum)
                return after - before

            row[label] = _timed(one, seconds)
        row.setdefault("jax_sim_1dev", row["jax_sim"])
        ev = {"n": 0}

        def np_ref(cas=cas, ev=ev, row=row):
            ev["n"] += 1
            r = numpy_reference(cas, 4096, 200, seed=ev["n"])
            row["numpy_reference_speedup"] = r["speedup"]
            return r["positions"]

        row["numpy_reference"] = _timed(np_ref, seconds)

        def py(cas=cas, row=row):
            r = python_loop(cas, 20_000, seed=1)
            row["python_loop_speedup"] = r["speedup"]
            return r["positions"]

        row["python_loop"] = _timed(py, seconds)
        row["x_vs_jax_uniform"] = row["jax_sim"] / out["jax_uniform_f32_per_s"]
        row["x_vs_best_uniform"] = row["jax_sim"] / out["jax_uniform_best_per_s"]
        row["x_1dev_vs_1dev_uniform"] = row["jax_sim_1dev"] / rates["default_1dev"]
        row["x_vs_numpy_reference"] = row["jax_sim"] / row["numpy_reference"]
        row["x_vs_python_loop"] = row["jax_sim"] / row["python_loop"]
        out["configs"][name] = row

    # token level: verifications (positions checked by a verifier) per second
    lms = make_lms(3, vocab=8, order=1, perturbation=0.7, seed=1)
    tm = TokenModel.build(lms, [6, 2])
    from simulators.token import init_token_state

    tchains, tchunk = 256, 64
    st = jax.vmap(lambda d: init_token_state(tm.static, d))(jnp.zeros(tchains, bool))
    args = (tm.params, tm.static, tchunk, tchains, tm.uniforms_per_step, jnp.int64(10**15), key)
    st, *_ = run_token_chunk(*args, jnp.int64(0), st)
    jax.block_until_ready(st)
    tbox = {"st": st, "i": 1}

    def tok():
        before = sum(int(np.asarray(c).sum()) for c in tbox["st"].checked)
        r0 = sum(int(np.asarray(c).sum()) for c in tbox["st"].rounds)
        tbox["st"], *_ = run_token_chunk(*args, jnp.int64(tbox["i"]), tbox["st"])
        tbox["i"] += 1
        tbox["rounds"] = tbox.get("rounds", 0) + sum(
            int(np.asarray(c).sum()) for c in tbox["st"].rounds) - r0
        return sum(int(np.asarray(c).sum()) for c in tbox["st"].checked) - before

    t0 = time.perf_counter()
    out["token_verifications_per_s"] = _timed(tok, seconds)
    out["token_rounds_per_s"] = tbox["rounds"] / (time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="CPU devices (default: one per core); the simulator shards its "
                         "chains over them")
    ap.add_argument("--json", action="store_true")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    a = ap.parse_args(argv)
    check_load_or_exit(a.allow_load, "a benchmark")
    res = bench(a.seconds, a.cpu_devices)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"devices: {len(res['machine']['devices'])} ({res['machine']['cpu_count']} cores)")
    print("raw jax.random.uniform (float32, threefry): " + ", ".join(
        f"{k} {v:.3e}/s" for k, v in res["jax_uniform_f32_rates"].items()))
    print(f"(c) = default_1dev {res['jax_uniform_f32_per_s']:.3e}/s; best of the four "
          f"{res['jax_uniform_best_per_s']:.3e}/s; numpy default_rng().random: "
          f"{res['numpy_uniform_f64_per_s']:.3e}/s")
    print("drafted positions per second:")
    hdr = (f"{'config':<11}{'JAX sim':>11}{'+hist':>11}{'(a) numpy':>11}{'(b) python':>11}"
           f"{'(c) uniform':>12}{'sim/(c)':>9}{'sim/(a)':>9}{'sim/(b)':>9}")
    print(hdr)
    for name, r in res["configs"].items():
        print(f"{name:<11}{r['jax_sim']:>11.3e}{r['jax_sim_hist']:>11.3e}"
              f"{r['numpy_reference']:>11.3e}{r['python_loop']:>11.3e}"
              f"{res['jax_uniform_f32_per_s']:>12.3e}{r['x_vs_jax_uniform']:>9.2f}"
              f"{r['x_vs_numpy_reference']:>9.2f}{r['x_vs_python_loop']:>9.1f}")
        print(f"{'':<11}JAX sim on 1 device {r['jax_sim_1dev']:.3e} = "
              f"{r['x_1dev_vs_1dev_uniform']:.2f}x (c) on 1 device; all devices vs the best "
              f"uniform variant: {r['x_vs_best_uniform']:.2f}x")
        print(f"{'':<11}speedup: P1 {r['p1_speedup']:.4f}, numpy ref "
              f"{r['numpy_reference_speedup']:.4f}, python {r['python_loop_speedup']:.4f}")
    print(f"token level: {res['token_verifications_per_s']:.3e} verifications/s "
          f"({res['token_rounds_per_s']:.3e} rounds/s)")
    assert all(math.isfinite(r["jax_sim"]) for r in res["configs"].values())
    return 0


if __name__ == "__main__":
    sys.exit(main())
