"""Finite-state, non-stationary Markov "language models" (docs/theory.md §7, Yin et al. setting).

Tokens are states ``{0, .., K-1}``. A model with horizon ``T`` is a prompt law ``init``
(shape ``(K,)``, the law of ``x_0``, which is given, not generated) and per-step transition
kernels ``kernels`` (shape ``(T, K, K)``): ``kernels[n, s, x] = P(x_{n+1} = x | x_n = s)`` for
``n = 0..T-1``. The generated sequence is ``x_1..x_T``. A target/draft pair shares ``init``
(both models continue the same prompt); :class:`MarkovPair` bundles the three arrays.

Every function takes and returns plain float64 numpy arrays (or Python floats), so a JAX
simulator can call them on ``np.asarray`` copies of its parameters. Probability vectors must be
non-negative and sum to 1 within :data:`PROB_TOL`; they are used as given (not renormalized).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_probability,
    as_real,
    as_real_array,
)

__all__ = [
    "as_output",
    "kernel_marginals",
    "check_sequence_size",
    "augmented_sequence_law",
    "PROB_TOL",
    "MAX_SEQUENCE_LAW_SIZE",
    "MarkovPair",
    "as_law",
    "as_kernels",
    "as_chain",
    "tv_distance",
    "step_tv",
    "state_marginals",
    "sequence_law",
    "random_law",
    "random_kernels",
    "mixture_draft",
    "logit_draft",
    "drop_support",
    "random_pair",
]

PROB_TOL = 1e-9
"""A probability vector must sum to 1 within this absolute tolerance."""

MAX_SEQUENCE_LAW_SIZE = 2**22
"""Largest ``K**T`` for which whole-sequence laws are built (32 MiB of float64)."""


class MarkovPair(NamedTuple):
    """A target/draft pair of Markov models sharing the prompt law.

    ``init``: ``(K,)`` law of ``x_0``; ``target``, ``draft``: ``(T, K, K)`` row-stochastic
    kernels. A NamedTuple of arrays, so ``f(*pair)`` works and JAX treats it as a pytree.
    """

    init: np.ndarray
    target: np.ndarray
    draft: np.ndarray

    @property
    def T(self) -> int:
        return int(self.target.shape[0])

    @property
    def K(self) -> int:
        return int(self.target.shape[-1])


# --- validation ----------------------------------------------------------------------------


def _index(flat_i: int, shape: tuple) -> str:
    idx = np.unravel_index(flat_i, shape) if shape else ()
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def as_law(p, field: str, *, size: int | None = None, ndim: int | None = None) -> np.ndarray:
    """Validate probability vector(s) along the last axis; returns a float64 copy.

    Each vector must be non-negative and sum to 1 within :data:`PROB_TOL`. ``size`` fixes the
    last-axis length, ``ndim`` the number of axes (default: any, at least 1).
    """
    arr = as_real_array(p, field, ndim=None, min_len=0)
    if arr.ndim == 0:
        raise PolyspecInputError(field, "must be a probability vector, got a scalar")
    if ndim is not None and arr.ndim != ndim:
        raise PolyspecInputError(field, f"must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.shape[-1] < 1:
        raise PolyspecInputError(field, "must have at least one entry")
    if size is not None and arr.shape[-1] != size:
        raise PolyspecInputError(field, f"must have {size} entries per law, got {arr.shape[-1]}")
    if (arr < 0).any():
        i = int(np.flatnonzero(arr.ravel() < 0)[0])
        raise PolyspecInputError(
            field, f"probabilities must be >= 0, got {arr.ravel()[i]} at {_index(i, arr.shape)}"
        )
    sums = arr.sum(axis=-1)
    bad = np.abs(sums - 1.0) > PROB_TOL
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        where = f" (law {_index(i, sums.shape)})" if sums.ndim else ""
        total = float(sums.ravel()[i])
        raise PolyspecInputError(
            field, f"probabilities must sum to 1 (within {PROB_TOL}), got {total!r}{where}"
        )
    return arr


def as_kernels(kernels, field: str, *, T: int | None = None, K: int | None = None) -> np.ndarray:
    """Validate ``(T, K, K)`` row-stochastic transition kernels (T >= 1, K >= 1)."""
    arr = as_real_array(kernels, field, ndim=None, min_len=0)
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise PolyspecInputError(field, f"must have shape (T, K, K), got {arr.shape}")
    if arr.shape[0] < 1:
        raise PolyspecInputError(field, "horizon T = kernels.shape[0] must be >= 1, got 0")
    if arr.shape[1] < 1:
        raise PolyspecInputError(field, "must have at least one state")
    if T is not None and arr.shape[0] != T:
        raise PolyspecInputError(field, f"must have horizon T = {T}, got {arr.shape[0]}")
    if K is not None and arr.shape[1] != K:
        raise PolyspecInputError(field, f"must have K = {K} states, got {arr.shape[1]}")
    return as_law(arr, field)


def as_chain(init, target, draft=None, *, target_field="target") -> tuple[np.ndarray, ...]:
    """Validate a prompt law and one or two kernel stacks of matching ``(T, K, K)`` shape.

    Returns ``(init, target)`` or ``(init, target, draft)`` as float64 arrays.
    """
    t = as_kernels(target, target_field)
    K = t.shape[1]
    i = as_law(init, "init", ndim=1)
    if i.shape[0] != K:
        raise PolyspecInputError(
            "init", f"must have K = {K} entries (like {target_field}), got {i.size}"
        )
    if draft is None:
        return i, t
    d = as_kernels(draft, "draft")
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    return i, t, d


def _check_pair(p, q, pf: str, qf: str) -> tuple[np.ndarray, np.ndarray]:
    a = as_law(p, pf)
    b = as_law(q, qf)
    if a.shape != b.shape:
        raise PolyspecInputError(qf, f"must have the shape of {pf} {a.shape}, got {b.shape}")
    return a, b


def as_output(x):
    """0-d arrays become Python floats; arrays pass through."""
    return float(x) if np.ndim(x) == 0 else x


# --- distances, marginals, sequence laws ---------------------------------------------------


def tv_distance(p, q):
    """Total variation ``0.5 * sum_x |p(x) - q(x)|`` along the last axis.

    ``p``, ``q``: laws of shape ``(..., K)``; returns a float (1-D inputs) or an array ``(...)``.
    """
    a, b = _check_pair(p, q, "p", "q")
    return as_output(0.5 * np.abs(a - b).sum(axis=-1))


def step_tv(target, draft) -> np.ndarray:
    """``TV(target_n(.|s), draft_n(.|s))`` for every step and previous state: shape ``(T, K)``."""
    t = as_kernels(target, "target")
    d = as_kernels(draft, "draft")
    if d.shape != t.shape:
        raise PolyspecInputError("draft", f"must have the shape of target {t.shape}, got {d.shape}")
    return 0.5 * np.abs(t - d).sum(axis=-1)


def kernel_marginals(init: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    mu = np.empty((kernels.shape[0] + 1, init.shape[0]))
    mu[0] = init
    for n in range(kernels.shape[0]):
        mu[n + 1] = mu[n] @ kernels[n]
    return mu


def state_marginals(init, kernels) -> np.ndarray:
    """Laws of ``x_0, .., x_T`` under the chain: shape ``(T + 1, K)``, row 0 = ``init``."""
    i, k = as_chain(init, kernels, target_field="kernels")
    return kernel_marginals(i, k)


def check_sequence_size(K: int, T: int, field: str) -> None:
    if K**T > MAX_SEQUENCE_LAW_SIZE:
        raise PolyspecInputError(
            field,
            f"whole-sequence law needs K**T = {K}**{T} entries, more than "
            f"{MAX_SEQUENCE_LAW_SIZE}; use a smaller chain",
        )


def augmented_sequence_law(init_aug: np.ndarray, trans: np.ndarray) -> np.ndarray:
    """Law of ``x_1..x_T`` for a chain on (state, hidden flag).

    ``init_aug``: ``(K, F)`` law of ``(x_0, f_0)``; ``trans``: ``(T, K, F, K, F)`` with
    ``trans[n, s, f, x, g] = P(x_{n+1} = x, f_{n+1} = g | x_n = s, f_n = f)``. Returns an array
    of shape ``(K,) * T`` (entry ``[x_1, .., x_T]``), the flag marginalized out.
    """
    T, K, F = trans.shape[0], trans.shape[1], trans.shape[2]
    # L[j, s, f]: P(prefix j of x_1..x_{n-1}, x_n = s, f_n = f); prefixes flattened row-major.
    L = np.einsum("sf,sfxg->xg", init_aug, trans[0])[None]
    for n in range(1, T):
        L = np.einsum("jsf,sfxg->jsxg", L, trans[n]).reshape(-1, K, F)
    return L.sum(axis=-1).reshape((K,) * T)


def sequence_law(init, kernels) -> np.ndarray:
    """Exact law of ``x_1..x_T``: array of shape ``(K,) * T``, entry ``[x_1, .., x_T]``.

    Only for small chains (``K**T <= MAX_SEQUENCE_LAW_SIZE``).
    """
    i, k = as_chain(init, kernels, target_field="kernels")
    check_sequence_size(k.shape[1], k.shape[0], "kernels")
    return augmented_sequence_law(i[:, None], k[:, :, None, :, None])


# --- random models with a chosen divergence ------------------------------------------------


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(as_int(seed, "seed", low=0))


def _dirichlet(rng: np.random.Generator, shape: tuple, concentration: float) -> np.ndarray:
    """Dirichlet(concentration * 1) rows; a row whose gammas all underflow gets a point mass."""
    g = rng.gamma(concentration, size=shape)
    s = g.sum(axis=-1, keepdims=True)
    zero = s[..., 0] == 0
    if zero.any():
        idx = rng.integers(0, shape[-1], size=int(zero.sum()))
        g[zero] = 0.0
        g[zero, idx] = 1.0
        s = g.sum(axis=-1, keepdims=True)
    return g / s


def random_law(K, seed, concentration=1.0) -> np.ndarray:
    """A ``Dirichlet(concentration)`` law on ``K`` states, shape ``(K,)``; same seed, same law."""
    K = as_int(K, "K", low=1)
    c = as_real(concentration, "concentration", low=0.0, low_open=True)
    return _dirichlet(_rng(seed), (K,), c)


def random_kernels(T, K, seed, concentration=1.0) -> np.ndarray:
    """Non-stationary kernels with iid ``Dirichlet(concentration)`` rows: shape ``(T, K, K)``.

    Small ``concentration`` gives peaked (low-entropy) rows, large gives near-uniform rows.
    """
    T = as_int(T, "T", low=1)
    K = as_int(K, "K", low=1)
    c = as_real(concentration, "concentration", low=0.0, low_open=True)
    return _dirichlet(_rng(seed), (T, K, K), c)


def mixture_draft(target, eps, seed, concentration=1.0) -> np.ndarray:
    """Draft ``(1 - eps) * target + eps * R`` with ``R`` iid ``Dirichlet(concentration)`` laws.

    ``target``: laws of shape ``(..., K)`` (a single law or a kernel stack); same shape out.
    ``TV(draft, target) = eps * TV(R, target) <= eps``.
    """
    t = as_law(target, "target")
    e = as_probability(eps, "eps")
    c = as_real(concentration, "concentration", low=0.0, low_open=True)
    r = _dirichlet(_rng(seed), t.shape, c)
    return (1.0 - e) * t + e * r


def logit_draft(target, temperature=1.0, noise=0.0, seed=0) -> np.ndarray:
    """Draft ``softmax((log target + noise * G) / temperature)`` with ``G`` iid standard normal.

    ``target``: laws of shape ``(..., K)``; same shape out. Zeros of ``target`` stay zeros.
    ``temperature > 1`` flattens, ``< 1`` sharpens; ``noise`` perturbs the logits.
    """
    t = as_law(target, "target")
    tau = as_real(temperature, "temperature", low=0.0, low_open=True)
    s = as_real(noise, "noise", low=0.0)
    g = _rng(seed).standard_normal(t.shape)
    with np.errstate(divide="ignore"):
        logits = np.where(t > 0, (np.log(np.where(t > 0, t, 1.0)) + s * g) / tau, -np.inf)
    logits = logits - logits.max(axis=-1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(axis=-1, keepdims=True)


def drop_support(laws, n_drop, seed) -> np.ndarray:
    """Zero ``n_drop`` random positive entries of each law (keeping >= 1) and renormalize.

    ``laws``: shape ``(..., K)``; same shape out. Used to make a draft that misses target mass.
    """
    p = as_law(laws, "laws")
    m = as_int(n_drop, "n_drop", low=0)
    rng = _rng(seed)
    flat = p.reshape(-1, p.shape[-1]).copy()
    for row in flat:
        pos = np.flatnonzero(row > 0)
        k = min(m, pos.size - 1)
        if k > 0:
            row[rng.choice(pos, size=k, replace=False)] = 0.0
            row /= row.sum()
    return flat.reshape(p.shape)


DRAFT_KINDS = ("mixture", "logit")


def random_pair(
    T,
    K,
    /,
    seed,
    *,
    kind="mixture",
    eps=0.5,
    concentration=1.0,
    temperature=1.5,
    noise=0.5,
    draft_drop=0,
    init=None,
) -> MarkovPair:
    """A random target/draft pair; deterministic in ``seed``.

    Target rows iid ``Dirichlet(concentration)``; ``init`` uniform unless given. Draft:
    ``kind="mixture"`` -> :func:`mixture_draft` with ``eps``; ``kind="logit"`` ->
    :func:`logit_draft` with ``temperature``, ``noise``. ``draft_drop > 0`` then removes that
    many tokens from the support of every draft row (:func:`drop_support`).
    """
    T = as_int(T, "T", low=1)
    K = as_int(K, "K", low=1)
    if kind not in DRAFT_KINDS:
        raise PolyspecInputError("kind", f"must be one of {', '.join(DRAFT_KINDS)}, got {kind!r}")
    rng = _rng(seed)
    target = random_kernels(T, K, rng, concentration)
    if kind == "mixture":
        draft = mixture_draft(target, eps, rng, concentration)
    else:
        draft = logit_draft(target, temperature, noise, rng)
    if as_int(draft_drop, "draft_drop", low=0):
        draft = drop_support(draft, draft_drop, rng)
    i = np.full(K, 1.0 / K) if init is None else as_law(init, "init", size=K, ndim=1)
    return MarkovPair(i, target, draft)
