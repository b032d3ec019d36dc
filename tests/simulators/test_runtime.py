"""The simulators' host/device helpers that avoid XLA compilations (simulators/runtime.py) give
exactly what the JAX calls they replace give: values, dtypes and shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulators import length, serving, token
from simulators.runtime import device_array, host_chains, random_bits, random_uniform

DRAWS = {"bits": (random_bits, jax.random.bits), "uniform": (random_uniform, jax.random.uniform)}


@pytest.mark.parametrize(("draw", "shape", "dtype"), [
    ("bits", (3, 4, 5), jnp.uint32), ("bits", (3, 4, 5), jnp.uint64),
    ("bits", (2, 3, 4, 5), jnp.uint32), ("bits", (5, 1, 3), jnp.uint64),
    ("bits", (6, 4), jnp.uint32),
    ("uniform", (3, 4, 5), jnp.float64), ("uniform", (3, 4, 5), jnp.float32),
    ("uniform", (2, 3, 4, 5), jnp.float64), ("uniform", (6, 4), jnp.float64)])
def test_2d_draws_equal_jax_random(draw, shape, dtype):
    """random_bits / random_uniform give jax.random.bits / uniform's values, eager and jitted."""
    ours, theirs = DRAWS[draw]
    key = jax.random.fold_in(jax.random.key(11), 3)
    want = np.asarray(theirs(key, shape, dtype))
    got = ours(key, shape, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(ours, static_argnums=(1, 2))(key, shape, dtype)), want)


def _assert_same_tree(got, want):
    g, gt = jax.tree.flatten(got)
    w, wt = jax.tree.flatten(want)
    assert gt == wt
    for a, b in zip(g, w, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("m", [1, 3])
def test_host_chains_equal_vmapped_init(m):
    """host_chains(init(...), n) is what the drivers used to build with jax.vmap."""
    n = 5
    _assert_same_tree(host_chains(length.init_state(m), n),
                      jax.vmap(lambda d: length.init_state(m, d))(jnp.zeros(n, bool)))
    _assert_same_tree(host_chains(serving.init_state(m, 4), n),
                      jax.vmap(lambda _: serving.init_state(m, 4))(jnp.arange(n)))
    lms = token.make_lms(m + 1, vocab=4, seed=1)
    static = token.TokenModel.build(lms, [3] * m).static
    _assert_same_tree(host_chains(token.init_token_state(static), n),
                      jax.vmap(lambda d: token.init_token_state(static, d))(jnp.zeros(n, bool)))


def test_device_array_is_jnp_asarray():
    for x, dt in (((4, 2, 7), np.int32), ([0.5, 1.25], np.float64), (np.array([1.0, 0.3]) >= 1,
                                                                       bool), (2.5, np.float64)):
        got, want = device_array(x, dt), jnp.asarray(x, dt)
        assert isinstance(got, jax.Array)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
