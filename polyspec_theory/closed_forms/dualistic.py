"""Dualistic speculative decoding, n = 2 (docs/theory.md D2; Leviathan et al. 2023).

A round runs ``gamma`` draft forwards and one target forward over ``gamma + 1`` positions:
``S = T_1(1) E[L] / (gamma T_2(1) + T_1(gamma + 1))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import law_from_config
from polyspec_theory.core.costs import cost_from_config
from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric
from polyspec_theory.errors import PolyspecInputError, as_int, as_nonnegative, as_probability

__all__ = [
    "expected_emitted",
    "leviathan_speedup",
    "dualistic_speedup",
    "operations_factor",
    "optimal_gamma",
    "OptimalGamma",
    "cor39_bound",
]


def _law(law) -> AcceptanceLaw:
    if isinstance(law, AcceptanceLaw):
        return law
    if isinstance(law, dict):
        return law_from_config(law, "law")
    return IIDGeometric(as_probability(law, "alpha"))


def expected_emitted(alpha, gamma) -> float:
    """``E[L] = (1 - alpha^{gamma+1}) / (1 - alpha)`` (stable; ``gamma + 1`` at alpha = 1).

    ``alpha`` may also be any :class:`AcceptanceLaw`."""
    return _law(alpha).mean_emitted(as_int(gamma, "gamma", low=1))


def leviathan_speedup(alpha, gamma, c) -> float:
    """Leviathan Thm 3.8: ``(1 - alpha^{gamma+1}) / ((1 - alpha)(gamma c + 1))``.

    Assumes iid acceptance ``alpha``, constant target cost and ``c = T_2 / T_1``."""
    c = as_nonnegative(c, "c")
    gamma = as_int(gamma, "gamma", low=1)
    return expected_emitted(alpha, gamma) / (gamma * c + 1.0)


def dualistic_speedup(law, gamma, target_cost, draft_cost) -> float:
    """``T_1(1) E[L] / (gamma T_2(1) + T_1(gamma + 1))`` for any law and cost curves."""
    gamma = as_int(gamma, "gamma", low=1)
    t1 = cost_from_config(target_cost, "target_cost")
    t2 = cost_from_config(draft_cost, "draft_cost")
    if t1.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    return t1.t1 * _law(law).mean_emitted(gamma) / (gamma * t2.t1 + t1(gamma + 1))


def operations_factor(alpha, gamma, c_hat) -> float:
    """Leviathan Thm 3.11: expected arithmetic operations relative to autoregressive decoding,
    ``(1 - alpha)(gamma c_hat + gamma + 1) / (1 - alpha^{gamma+1})``."""
    c_hat = as_nonnegative(c_hat, "c_hat")
    gamma = as_int(gamma, "gamma", low=1)
    return (gamma * c_hat + gamma + 1.0) / expected_emitted(alpha, gamma)


@dataclass(frozen=True)
class OptimalGamma:
    gamma: int
    speedup: float
    searched_up_to: int
    certified: bool  # True when no gamma beyond the search range can do better


def optimal_gamma(law, target_cost=1.0, draft_cost=0.0, max_gamma: int = 1024) -> OptimalGamma:
    """Exact optimal integer draft length over ``1..max_gamma`` (vectorized search).

    ``certified`` is True when no ``gamma > max_gamma`` can beat the optimum found: for such
    gamma, ``S <= T_1(1) E[L](no cap) / (gamma T_2(1) + min_m T_1(m))``. With a free drafter
    and iid alpha = 1 the speedup grows without bound and nothing can be certified.
    """
    law = _law(law)
    max_gamma = as_int(max_gamma, "max_gamma", low=1, high=100_000)
    t1 = cost_from_config(target_cost, "target_cost")
    t2 = cost_from_config(draft_cost, "draft_cost")
    if t1.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    g = np.arange(1, max_gamma + 1)
    mean_l = np.cumsum(law.survival(max_gamma))[1:]  # E[L | cap g], g = 1..max_gamma
    speed = t1.t1 * mean_l / (g * t2.t1 + t1(g + 1))
    best = int(np.argmax(speed))
    best_s = float(speed[best])
    tmin = min(t1.t1, t1.base) if t1.table is None else float(np.min(t1.table))
    limit = law.mean_emitted_limit()
    denom = (max_gamma + 1) * t2.t1 + tmin
    certified = bool(
        math.isfinite(limit) and denom > 0 and t1.t1 * limit / denom <= best_s
    )
    return OptimalGamma(best + 1, best_s, max_gamma, certified)


def cor39_bound(alpha, c) -> dict:
    """Leviathan Cor 3.9: if ``alpha > c`` then ``S(gamma=1) >= (1 + alpha)/(1 + c) > 1``."""
    a = as_probability(alpha, "alpha")
    c = as_nonnegative(c, "c")
    s1 = leviathan_speedup(a, 1, c)
    bound = (1 + a) / (1 + c)
    return {"applies": a > c, "speedup_gamma1": s1, "bound": bound,
            "holds": (not a > c) or s1 >= bound * (1 - 1e-15)}

