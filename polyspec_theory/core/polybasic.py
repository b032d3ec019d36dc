"""P1: exact long-run time per token of an n-level polybasic cascade (docs/theory.md §6).

System ``S_n`` is ``M_n`` alone (one token per forward). For ``i < n``, a round of ``S_i``
runs rounds of ``S_{i+1}`` until at least ``theta_i`` new tokens have accumulated (the block,
``G_i`` tokens; ``"truncate"`` policy: exactly ``theta_i``, the excess discarded), then one
forward of ``M_i`` over ``G_i + 1`` positions verifies it and emits ``L_i = A_i + 1`` tokens.

Renewal–reward with Wald's identity: ``E[C_n] = T_n(1)``,
``E[C_i] = phi_{i+1} E[C_{i+1}] + E[T_i(G_i + 1)] + o_i`` and ``tau_i = E[C_i] / E[L_i]``;
speedup ``T_1(1) / tau_1``. ``o_i`` (``models[i].overhead``, default 0) is a fixed time per
verification round of level i; the autoregressive baseline ``T_1(1)`` does not include it
(docs/theory.md Part III-B). ``phi`` and the law of ``G`` come from a dynamic programme over the
accumulated length (no sampling). Assumes acceptance independent across rounds.
"""

from __future__ import annotations

import numpy as np

from polyspec_theory.core.config import Cascade
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import Prediction, block_laws, predict_chain, renewal_masses
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.structures.pairs import has_structures
from polyspec_theory.structures.structured import predict_structured

__all__ = [
    "renewal_fill",
    "emitted_law",
    "predict",
]


def renewal_fill(l_pmf, theta: int) -> tuple[float, np.ndarray]:
    """Fill a block of at least ``theta`` tokens from iid rounds with length law ``l_pmf``.

    ``l_pmf[l] = P(L = l)`` (index 0 must be 0: every round emits >= 1 token). Returns
    ``(phi, g_pmf)``: ``phi = E[N]``, ``N = min{k : L^(1)+...+L^(k) >= theta}``, and
    ``g_pmf[g] = P(S_N = g)`` for g = 0..theta+lmax-1 (:mod:`polyspec_theory.core.p1`)."""
    p = np.asarray(l_pmf, dtype=np.float64)
    theta = as_int(theta, "theta", low=1)
    if p.ndim != 1 or p.size < 2 or p[0] != 0.0:
        raise PolyspecInputError("l_pmf", "must be a pmf over lengths with P(L = 0) = 0")
    f = renewal_masses(p, theta)
    return float(f.sum()), block_laws(p, f, [theta])[0]


def emitted_law(g_pmf, law: AcceptanceLaw) -> np.ndarray:
    """``P(L = l) = sum_g P(G = g) P(A = l - 1 | cap g)`` for l = 0..gmax+1 (index = l)."""
    return np.concatenate([[0.0], law.pmf_over_blocks(g_pmf)])


def predict(cascade: Cascade) -> Prediction:
    """P1: exact speedup and per-level accounting of ``cascade`` run synchronously (module
    docstring; its ``mode`` is not read); a cascade with trees or schedules goes to
    :func:`polyspec_theory.structures.structured.predict_structured`. The prediction in the
    cascade's own scheme (async included) is :func:`polyspec_theory.schemes.predict`
    (``polyspec_theory.predict``)."""
    if not isinstance(cascade, Cascade):
        raise PolyspecInputError("cascade", "must be a Cascade (use Cascade.from_config)")
    if has_structures(cascade):
        return predict_structured(cascade).prediction
    return predict_chain(cascade)
