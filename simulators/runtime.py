"""Shared machinery of the simulators: float64, device meshes, host gathers, estimators.

Importing this module turns on JAX's float64 mode (``jax_enable_x64``): every quantity that is
compared with theory is computed in float64; and partitionable threefry, so random bits do not
depend on how arrays are sharded over devices.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_threefry_partitionable", True)  # random bits independent of sharding

import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from polyspec_theory.errors import PolyspecInputError, as_int  # noqa: E402

__all__ = [
    "Z95",
    "MAX_CHAINS",
    "as_chains",
    "RatioEstimate",
    "ratio_estimate",
    "mean_estimate",
    "chain_mesh",
    "shard_chains",
    "to_host",
    "uniform_from_bits",
    "random_bits",
    "random_uniform",
    "device_array",
    "host_chains",
    "make_key",
    "cpu_cores",
    "use_cpu_cores",
]

Z95 = 1.959963984540054  # standard normal 97.5 % quantile
MAX_CHAINS = 2**24  # independent chains of any simulator (one limit for every scheme)


def as_chains(chains, field: str = "chains") -> int:
    """A number of independent chains, ``2..MAX_CHAINS`` (errors name ``field``)."""
    return as_int(chains, field, low=2, high=MAX_CHAINS)


def make_key(seed):
    """A typed threefry PRNG key from an int seed (a key passes through)."""
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed
    return jax.random.key(as_int(seed, "seed", low=0, high=2**63 - 1))


def uniform_from_bits(bits):
    """Map uint32 random bits ``b`` to ``u = (b + 1/2) / 2^32`` in float64: strictly inside
    (0, 1), so ``log u`` is finite; every probability is exact to within ``2^-32``."""
    return (bits.astype(jnp.float64) + 0.5) * (1.0 / 4294967296.0)


def random_bits(key, shape, dtype=jnp.uint32):
    """``jax.random.bits(key, shape, dtype)``, the same values, drawn as the 2-d array
    ``(shape[0], prod(shape[1:]))`` and reshaped. Partitionable threefry (set above) counts the
    row-major linear index of the element, so the values do not depend on the grouping; XLA on
    CPU compiles the threefry loop over a 3-d array with a short last axis several times more
    slowly (e.g. 2 s against 0.3 s for ``(64, 128, 9)``)."""
    return _drawn_2d(jax.random.bits, key, shape, dtype)


def random_uniform(key, shape, dtype=jnp.float64):
    """``jax.random.uniform(key, shape, dtype)``, the same values, drawn 2-d and reshaped as
    :func:`random_bits` (a uniform is an elementwise function of its element's bits)."""
    return _drawn_2d(jax.random.uniform, key, shape, dtype)


def _drawn_2d(draw, key, shape, dtype):
    """``draw(key, shape, dtype)`` drawn as ``(shape[0], prod(shape[1:]))`` and reshaped."""
    shape = tuple(int(d) for d in shape)
    if len(shape) <= 2:
        return draw(key, shape, dtype)
    return draw(key, (shape[0], math.prod(shape[1:])), dtype).reshape(shape)


class RatioEstimate(NamedTuple):
    """``value = sum(num) / sum(den)`` over independent chains with a delta-method CI."""

    value: float
    se: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"value": self.value, "se": self.se, "ci95": [self.low, self.high]}


def ratio_estimate(num, den, scale: float = 1.0, z: float = Z95) -> RatioEstimate:
    """Ratio estimator ``scale * sum(num)/sum(den)`` over iid chains (rows).

    Delta method: ``Var ~ sum((num_c - R den_c)^2) / (K (K-1) mean(den)^2)``; the chains are
    independent and identically distributed, so the normal CI is asymptotically exact in K.
    """
    x = np.asarray(num, dtype=np.float64)
    y = np.asarray(den, dtype=np.float64)
    k = x.size
    sy = float(y.sum())
    if sy == 0.0:
        return RatioEstimate(math.nan, math.nan, math.nan, math.nan)
    r = float(x.sum()) / sy
    if k < 2:
        se = math.inf
    else:
        resid = x - r * y
        se = math.sqrt(float(np.dot(resid, resid)) / (k * (k - 1))) / (sy / k)
    v, s = scale * r, abs(scale) * se
    return RatioEstimate(v, s, v - z * s, v + z * s)


def mean_estimate(x, z: float = Z95) -> RatioEstimate:
    """Sample mean with a normal CI (``se = sd / sqrt(n)``)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    return ratio_estimate(x, np.ones_like(x), z=z)


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def use_cpu_cores(count: int | None = None) -> int:
    """Give JAX one CPU device per core (``count``, default :func:`cpu_cores`), so that the
    simulators, which shard their chains over ``jax.devices()``, run on every core: a scan
    over events uses one thread per device. Results do not depend on the device count
    (tests/simulators/test_sharding.py). Takes effect only before JAX initializes its
    backends (call it first) and when ``XLA_FLAGS`` does not already force a count; otherwise
    it changes nothing. Returns the number of devices the simulators will use."""
    n = cpu_cores() if count is None else as_int(count, "cpu_devices", low=1, high=4096)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:  # backends already initialized: keep what they have
            pass
    return len(jax.devices())


def chain_mesh(devices=None) -> Mesh:
    """A 1-d mesh named ``"chains"`` over ``devices`` (default: every device of every host)."""
    devs = jax.devices() if devices is None else list(devices)
    if not devs:
        raise PolyspecInputError("devices", "need at least one device")
    return Mesh(np.asarray(devs), ("chains",))


def shard_chains(tree, mesh: Mesh):
    """Place every leaf (leading axis = chains) sharded over the mesh's ``chains`` axis."""
    sharding = NamedSharding(mesh, P("chains"))
    return jax.tree.map(lambda a: jax.device_put(a, sharding), tree)


def device_array(x, dtype) -> jax.Array:
    """``jnp.asarray(x, dtype)`` without an XLA compilation: numpy builds the array and
    ``jax.device_put`` places it (``jnp.asarray`` of a list, a tuple or a numpy array compiles
    a small copy program per shape and dtype)."""
    return jax.device_put(np.asarray(x, dtype=dtype))


def host_chains(state, count: int):
    """``count`` copies of the one-chain ``state`` (a pytree of scalars and arrays) stacked on
    a new leading axis, as numpy arrays of the same dtypes: what ``jax.vmap`` of an init
    function gives, but placing it on devices (:func:`shard_chains`) compiles nothing, where
    the eager ``vmap`` compiles a small program per leaf shape."""
    return jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], count, axis=0), state)


def to_host(x) -> np.ndarray:
    """Bring a (possibly sharded, possibly multi-host) array to this host as numpy."""
    if jax.process_count() > 1:  # jax.distributed: gather the global array on every host
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(jax.device_get(x))  # a writable host copy
