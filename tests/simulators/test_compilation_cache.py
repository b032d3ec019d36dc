"""The suite's persistent JAX compilation cache (tests/conftest.py) changes no number: a
simulator run compiled fresh, the same run loaded from the cache, and the same run with the
cache off give bit-identical results. One subprocess (the cache is configured before jax is
imported) with a cache folder of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._optional import optional_import

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json
import jax
from jax._src import compilation_cache, monitoring
from polyspec_theory.core.config import Cascade
from simulators.asynchronous import simulate_async
from simulators.length import simulate_lengths

events = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))
cas = Cascade.from_config({
    "models": [{"name": "t", "cost": 1.0}, {"name": "m", "cost": 0.3}, {"name": "d", "cost": 0.05}],
    "acceptance": [{"alpha": 0.8}, {"beta": [4.0, 1.5]}], "thresholds": [3, 2]})
two = Cascade.from_config({
    "models": [{"name": "t", "cost": 1.0}, {"name": "d", "cost": 0.1}],
    "acceptance": [{"alpha": 0.7}], "thresholds": [3], "mode": "async"})


def run():
    r = simulate_lengths(cas, 4000, seed=3, chains=8)
    a = simulate_async(two, 400, seed=5, chains=4)
    nums = [r.speedup.value, r.speedup.se, *r.chain_time.tolist(), *r.chain_tokens.tolist(),
            a.speedup.value, a.speedup.se, *a.mean_checked]
    return [float(x).hex() for x in nums]


out = {"fresh": run()}
n = len(events)
jax.clear_caches()  # the in-memory executables: the next run reads the folder
out["cached"] = run()
out["hits"] = events[n:].count("/jax/compilation_cache/cache_hits")
out["misses"] = events[n:].count("/jax/compilation_cache/cache_misses")
jax.config.update("jax_enable_compilation_cache", False)
compilation_cache.reset_cache()
jax.clear_caches()
n = len(events)
out["off"] = run()
out["off_requests"] = events[n:].count("/jax/compilation_cache/compile_requests_use_cache")
print(json.dumps(out))
"""


def test_cached_executables_give_bit_identical_numbers(tmp_path):
    optional_import("jax")
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_ENABLE_COMPILATION_CACHE="true")
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(cache.iterdir())  # the fresh run wrote its executables
    assert out["hits"] >= 2 and out["misses"] == 0  # both simulators loaded from the folder
    assert out["off_requests"] == 0  # the last run compiled without the cache
    assert out["fresh"] == out["cached"] == out["off"]
    assert len(out["fresh"]) > 20


def test_the_suite_runs_with_a_cache_of_its_own():
    """conftest.py made the run's folder before jax was imported (jax read it)."""
    jax = optional_import("jax")
    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if os.environ.get("JAX_ENABLE_COMPILATION_CACHE", "true").lower() in ("0", "false"):
        return
    assert folder and Path(folder).is_dir()
    assert jax.config.jax_compilation_cache_dir == folder
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
