"""P6 (stability, paper Thm 3.3 in formal form) and P7 (heterogeneity) — docs/theory.md §6.

**P6, theorem.** For the capped geometric (iid acceptance ``alpha``, cap ``g >= 1``) the
coefficient of variation of the *accepted count* ``A``, ``CV(A) = sd(A)/E[A]``, is strictly
decreasing in ``alpha`` on ``(0, 1)`` (indeed on ``(0, inf)`` as a rational function).
*Proof* (:func:`cv_general_proof` re-derives every step with sympy). With
``P = sum_{k=1}^g alpha^k = E[A]`` and ``Q = sum_{k=1}^g (2k-1) alpha^k = E[A^2]``,
``CV^2 = Q/P^2 - 1`` and ``d CV^2/d alpha = N(alpha)/P^3`` with
``N = Q'P - 2QP' = sum_{j,k=1}^g (2k-1)(k-2j) alpha^{j+k-1}``. The coefficient of
``alpha^{s-1}`` is ``c_s = sum_k (2k-1)(3k-2s)`` over ``max(1,s-g) <= k <= min(g,s-1)``:
``c_s = -m(m+1)/2`` with ``m = s-1`` for ``2 <= s <= g+1``, and
``c_s = -(g-t+1)(4gt-3g+t)/2`` with ``t = s-g`` for ``g+2 <= s <= 2g``; all are < 0, so
``N < 0`` for ``alpha > 0`` and ``P^3 > 0``. ∎ Independent per-cap checks:
:func:`cv_monotone_certificate` (exact Sturm root count of ``N`` on [0, 1]) and
:func:`cv_dense_check` (dense float grid, any cap).
*Careful:* the CV of the emitted length ``L = A + 1`` is NOT monotone: it is 0 at
``alpha = 0`` (``L = 1``) and at ``alpha = 1`` (``L = g + 1``) and positive in between
(:func:`cv_emitted_not_monotone`). The theorem is about ``A``.

**P6, speculative sampling vs greedy** on one pair of next-token laws ``P`` (verifier) and
``Q`` (drafter): speculative sampling accepts with probability ``1 - TV(P, Q) = sum_x
min(P, Q)`` (F2); greedy verification (temperature 0 on both) accepts iff ``argmax P ==
argmax Q`` (ties: first index). What holds: greedy acceptance is speculative acceptance of
the two argmax point masses, the limit of ``1 - TV`` as both temperatures go to 0 when the
argmaxes are unique; per context greedy >= speculative when the argmaxes agree and greedy
(= 0) <= speculative otherwise; with iid acceptance ``E[L]``, the dualistic speedup (fixed
``gamma``, costs) and ``1/CV(A)`` all increase with ``alpha``, so the rule with the larger
mean acceptance has the larger ``E[L]`` and the smaller ``CV(A)``. What does not hold in
general: neither rule dominates — the sign of ``alpha_spec - alpha_greedy`` depends on the
laws (both directions occur, :func:`verification_comparison`); even the ordering of ``E[L]``
can differ between the iid model at the mean acceptance and the context-mixed model (each
round in one context: e.g. P = [[.5,.3,.2],[.4,.35,.25]], Q = [[.3,.5,.2],[.9,.05,.05]],
gamma = 4: alpha_spec = .65 > alpha_greedy = .5, yet mixed E[L] is 2.65 vs 3.0); and the two
rules do not
decode the same distribution (greedy emits the target's argmax, speculative sampling
samples the target), so "speculative sampling stabilizes acceptance" is only the P6 theorem
(stability as a function of ``alpha``), not a comparison of the rules.

**P7.** ``E[L | alpha] = sum_{k=0}^g alpha^k`` is convex in ``alpha``; by Jensen, for any law of
``alpha`` with mean ``abar``, the mixed ``E[L] >= sum_k abar^k`` (iid at the same mean), strictly
unless ``alpha`` is a.s. constant or ``g = 1``. For ``alpha ~ Beta(a, b)`` with moments
``m_k = E[alpha^k] = prod_{j<k} (a+j)/(a+b+j)``: ``Var(A) = E[Var(A|alpha)] +
Var(E[A|alpha])`` with ``E[Var(A|alpha)] = sum_k (2k-1) m_k - sum_{j,k} m_{j+k}`` and
``Var(E[A|alpha]) = sum_{j,k} m_{j+k} - (sum_k m_k)^2`` (sums over 1..g), exact;
``method="quadrature"`` integrates against the Beta density instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import integrate, stats

from polyspec_theory.closed_forms.dualistic import dualistic_speedup
from polyspec_theory.core.laws import MAX_CAP, BetaMixed, IIDGeometric
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_positive,
    as_probability,
    as_real_array,
)

__all__ = [
    "cv_accepted",
    "cv_emitted",
    "cv_derivative_coefficients",
    "cv_general_proof",
    "cv_monotone_certificate",
    "cv_dense_check",
    "cv_emitted_not_monotone",
    "speculative_acceptance",
    "greedy_acceptance",
    "VerificationComparison",
    "verification_comparison",
    "heterogeneity_gap",
    "beta_heterogeneity_gap",
    "beta_variance_decomposition",
]


def _cap(g, field="g") -> int:
    return as_int(g, field, low=1, high=MAX_CAP)


def _geom_moments(alpha: float, g: int) -> tuple[float, float]:
    """``(E[A], Var[A])`` of the capped geometric, two-pass variance."""
    law = IIDGeometric(alpha)
    return law.mean(g), law.var(g)


def cv_accepted(alpha, g) -> float:
    """``CV(A) = sd(A)/E[A]`` of the capped geometric (``inf`` at ``alpha = 0``)."""
    a = as_probability(alpha, "alpha")
    g = _cap(g)
    if a == 0.0:
        return math.inf
    m, v = _geom_moments(a, g)
    return math.sqrt(v) / m


def cv_emitted(alpha, g) -> float:
    """``CV(L) = sd(A)/(1 + E[A])`` for ``L = A + 1`` — not monotone in ``alpha``."""
    a = as_probability(alpha, "alpha")
    g = _cap(g)
    m, v = _geom_moments(a, g)
    return math.sqrt(v) / (1.0 + m)


def cv_derivative_coefficients(g) -> np.ndarray:
    """Exact integer coefficients ``c_s`` (s = 2..2g) of ``N(alpha) = sum_s c_s alpha^{s-1}``,
    the numerator of ``d CV(A)^2/d alpha`` (closed forms of the module docstring)."""
    g = as_int(g, "g", low=1, high=100_000)
    s = np.arange(2, 2 * g + 1, dtype=object)
    out = []
    for si in s:
        if si <= g + 1:
            m = si - 1
            out.append(-(m * (m + 1)) // 2)
        else:
            t = si - g
            out.append(-((g - t + 1) * (4 * g * t - 3 * g + t)) // 2)
    return np.array(out, dtype=object)


def _numerator_poly(g: int):
    import sympy as sp

    a = sp.Symbol("alpha", positive=True)
    p = sp.Poly([1] * g + [0], a)  # alpha^g + ... + alpha
    q = sp.Poly([2 * k - 1 for k in range(g, 0, -1)] + [0], a)
    return a, q.diff(a) * p - 2 * q * p.diff(a)


def cv_general_proof(check_up_to: int = 12) -> dict:
    """Re-derive the P6 proof with sympy: the coefficient sums in closed form (factored) and
    their agreement with the expanded numerator ``N`` for ``g = 1..check_up_to``.

    Returns ``{"low": expr in m, "high": expr in g, t, "verified_caps": [...],
    "all_negative": True}`` or raises AssertionError if a step fails."""
    import sympy as sp

    up_to = as_int(check_up_to, "check_up_to", low=1, high=200)
    g, t, k, m = sp.symbols("g t k m", integer=True, positive=True)
    low = sp.factor(sp.summation((2 * k - 1) * (3 * k - 2 * (m + 1)), (k, 1, m)))
    high = sp.factor(sp.summation((2 * k - 1) * (3 * k - 2 * (g + t)), (k, t, g)))
    assert sp.simplify(low + m * (m + 1) / 2) == 0
    assert sp.simplify(high + (g - t + 1) * (4 * g * t - 3 * g + t) / 2) == 0
    verified = []
    for gg in range(1, up_to + 1):
        _, num = _numerator_poly(gg)
        coeffs = [int(c) for c in reversed(num.all_coeffs())]  # index = power
        expected = [0] + [int(c) for c in cv_derivative_coefficients(gg)]
        assert coeffs == expected, (gg, coeffs, expected)
        verified.append(gg)
    # sign: -(m(m+1))/2 < 0 for m >= 1; for 2 <= t <= g, g-t+1 >= 1 and 4gt-3g+t >= 5g+2 > 0
    return {"low": low, "high": high, "verified_caps": verified, "all_negative": True}


def cv_monotone_certificate(g) -> dict:
    """Per-cap exact certificate: ``N(alpha)/alpha`` has no root in [0, 1] (Sturm count in
    rational arithmetic) and is negative at 1/2, so ``CV(A)`` is strictly decreasing."""
    import sympy as sp

    g = as_int(g, "g", low=1, high=400)
    a, num = _numerator_poly(g)
    reduced = sp.Poly(sp.quo(num, sp.Poly(a, a)), a)  # N has the factor alpha
    roots = int(reduced.count_roots(0, 1))
    neg = bool(reduced.eval(sp.Rational(1, 2)) < 0)
    return {"g": g, "degree": reduced.degree(), "roots_in_0_1": roots,
            "negative_at_half": neg, "decreasing": roots == 0 and neg}


def cv_dense_check(g, n_grid=4001, lo=1e-3, hi=1 - 1e-3) -> dict:
    """Dense float check: ``CV(A)`` on ``n_grid`` points of ``[lo, hi]`` strictly decreases.
    Returns ``{"decreasing", "max_step_ratio"}`` (largest ``CV(next)/CV(prev)``, < 1)."""
    g = _cap(g)
    n = as_int(n_grid, "n_grid", low=2, high=10_000_000)
    xs = np.linspace(as_probability(lo, "lo"), as_probability(hi, "hi"), n)
    cv = np.array([cv_accepted(float(x), g) for x in xs])
    ratio = cv[1:] / cv[:-1]
    return {"decreasing": bool(np.all(ratio < 1.0)), "max_step_ratio": float(ratio.max())}


def cv_emitted_not_monotone(g, n_grid=2001) -> dict:
    """Witness that ``CV(L)`` rises then falls: values at the ends and the interior peak."""
    g = _cap(g)
    xs = np.linspace(0.0, 1.0, as_int(n_grid, "n_grid", low=3))
    cv = np.array([cv_emitted(float(x), g) for x in xs])
    j = int(np.argmax(cv))
    return {"alpha_peak": float(xs[j]), "cv_peak": float(cv[j]), "cv_at_0": float(cv[0]),
            "cv_at_1": float(cv[-1]),
            "monotone": bool(np.all(np.diff(cv) <= 0) or np.all(np.diff(cv) >= 0))}


# --- speculative sampling vs greedy ------------------------------------------------------------

def _pmf(p, field) -> np.ndarray:
    arr = as_real_array(p, field, low=0.0, min_len=1)
    s = float(arr.sum())
    if abs(s - 1.0) > 1e-9:
        raise PolyspecInputError(field, f"must sum to 1, sums to {s!r}")
    return arr


def speculative_acceptance(p, q) -> float:
    """F2: acceptance probability of speculative sampling, ``sum_x min(P, Q) = 1 - TV``
    (``p`` verifier law, ``q`` drafter law, same vocabulary)."""
    pp, qq = _pmf(p, "p"), _pmf(q, "q")
    if pp.shape != qq.shape:
        raise PolyspecInputError("q", f"must have the same length as p ({pp.size}), "
                                 f"got {qq.size}")
    return float(np.minimum(pp, qq).sum())


def greedy_acceptance(p, q) -> float:
    """Greedy verification: 1.0 iff ``argmax p == argmax q`` (first index on ties)."""
    pp, qq = _pmf(p, "p"), _pmf(q, "q")
    if pp.shape != qq.shape:
        raise PolyspecInputError("q", f"must have the same length as p ({pp.size}), "
                                 f"got {qq.size}")
    return float(int(np.argmax(pp)) == int(np.argmax(qq)))


@dataclass(frozen=True)
class VerificationComparison:
    """Both rules on the same contexts. ``alpha_*``: mean acceptance; ``mean_emitted_iid_*``:
    ``E[L]`` of the iid model at that mean; ``mean_emitted_mixed_*``: ``E[L]`` when every
    round stays in one context drawn with ``weights`` (P7: >= iid); ``speedup_*``: dualistic
    speedup of the iid model; ``cv_accepted_*``: ``CV(A)`` of the iid model."""

    gamma: int
    per_context_spec: np.ndarray
    per_context_greedy: np.ndarray
    alpha_spec: float
    alpha_greedy: float
    mean_emitted_iid_spec: float
    mean_emitted_iid_greedy: float
    mean_emitted_mixed_spec: float
    mean_emitted_mixed_greedy: float
    speedup_spec: float
    speedup_greedy: float
    cv_accepted_spec: float
    cv_accepted_greedy: float

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["per_context_spec"] = self.per_context_spec.tolist()
        d["per_context_greedy"] = self.per_context_greedy.tolist()
        return d


def verification_comparison(ps, qs, gamma, *, weights=None, target_cost=1.0,
                            draft_cost=0.0) -> VerificationComparison:
    """Speculative sampling vs greedy on contexts ``(ps[h], qs[h])`` (verifier, drafter laws;
    arrays of shape (contexts, vocab)), block ``gamma``, context weights (default uniform)."""
    p = as_real_array([ps] if np.ndim(ps) == 1 else ps, "ps", low=0.0, ndim=2)
    q = as_real_array([qs] if np.ndim(qs) == 1 else qs, "qs", low=0.0, ndim=2)
    if p.shape != q.shape:
        raise PolyspecInputError("qs", f"must have the shape of ps {p.shape}, got {q.shape}")
    gamma = as_int(gamma, "gamma", low=1, high=MAX_CAP)
    h = p.shape[0]
    w = (np.full(h, 1.0 / h) if weights is None
         else as_real_array(weights, "weights", low=0.0))
    if w.size != h or w.sum() <= 0:
        raise PolyspecInputError("weights", f"need {h} non-negative weights with positive sum")
    w = w / w.sum()
    spec = np.array([speculative_acceptance(p[i], q[i]) for i in range(h)])
    greedy = np.array([greedy_acceptance(p[i], q[i]) for i in range(h)])
    k = np.arange(gamma + 1)

    def mixed(al):
        return float(np.sum(w * np.sum(al[:, None] ** k[None, :], axis=1)))

    a_s, a_g = float(w @ spec), float(w @ greedy)
    return VerificationComparison(
        gamma=gamma,
        per_context_spec=spec,
        per_context_greedy=greedy,
        alpha_spec=a_s,
        alpha_greedy=a_g,
        mean_emitted_iid_spec=IIDGeometric(min(a_s, 1.0)).mean_emitted(gamma),
        mean_emitted_iid_greedy=IIDGeometric(a_g).mean_emitted(gamma),
        mean_emitted_mixed_spec=mixed(spec),
        mean_emitted_mixed_greedy=mixed(greedy),
        speedup_spec=dualistic_speedup(min(a_s, 1.0), gamma, target_cost, draft_cost),
        speedup_greedy=dualistic_speedup(a_g, gamma, target_cost, draft_cost),
        cv_accepted_spec=cv_accepted(min(a_s, 1.0), gamma),
        cv_accepted_greedy=cv_accepted(a_g, gamma),
    )


# --- P7 -----------------------------------------------------------------------------------------

def heterogeneity_gap(alphas, g, weights=None) -> dict:
    """P7 for a discrete law of ``alpha`` (values ``alphas``, ``weights``): ``mixed`` =
    ``E[sum_{k<=g} alpha^k]``, ``iid`` = ``sum_{k<=g} abar^k``, ``gap = mixed - iid >= 0``."""
    al = as_real_array(alphas, "alphas", low=0.0, high=1.0)
    g = _cap(g)
    w = (np.full(al.size, 1.0 / al.size) if weights is None
         else as_real_array(weights, "weights", low=0.0))
    if w.size != al.size or w.sum() <= 0:
        raise PolyspecInputError("weights", f"need {al.size} non-negative weights with "
                                 "positive sum")
    w = w / w.sum()
    mixed = float(sum(w[i] * IIDGeometric(float(al[i])).mean_emitted(g)
                      for i in range(al.size)))
    abar = float(min(w @ al, 1.0))
    iid = IIDGeometric(abar).mean_emitted(g)
    return {"mixed": mixed, "iid": iid, "gap": mixed - iid, "mean_alpha": abar}


def beta_heterogeneity_gap(a, b, g) -> dict:
    """P7 for ``alpha ~ Beta(a, b)``: ``mixed`` = BetaMixed ``E[L]``, ``iid`` = iid ``E[L]`` at
    ``a/(a+b)``, ``gap >= 0``."""
    law = BetaMixed(a, b)
    g = _cap(g)
    mixed = law.mean_emitted(g)
    iid = IIDGeometric(law.mean_alpha).mean_emitted(g)
    return {"mixed": mixed, "iid": iid, "gap": mixed - iid, "mean_alpha": law.mean_alpha}


def beta_variance_decomposition(a, b, g, method: str = "moments") -> dict:
    """Law of total variance of ``A`` (cap ``g``) for ``alpha ~ Beta(a, b)``:
    ``total = within + between``, ``within = E[Var(A|alpha)]``, ``between =
    Var(E[A|alpha])``. ``method``: ``"moments"`` (exact Beta moments) or ``"quadrature"``."""
    a = as_positive(a, "a")
    b = as_positive(b, "b")
    g = as_int(g, "g", low=1, high=10_000)
    k = np.arange(1, g + 1, dtype=np.float64)
    if method == "moments":
        j = np.arange(0, 2 * g, dtype=np.float64)
        mom = np.concatenate([[1.0], np.exp(np.cumsum(np.log(a + j) - np.log(a + b + j)))])
        s = np.arange(2, 2 * g + 1)
        mult = np.minimum(s - 1, 2 * g - s + 1).astype(np.float64)  # #{(j,k): j+k = s}
        e_sq_mean = float(np.sum(mult * mom[s]))  # E[(E[A|alpha])^2]
        e_mean = float(np.sum(mom[1 : g + 1]))  # E[E[A|alpha]]
        e_second = float(np.sum((2 * k - 1) * mom[1 : g + 1]))  # E[E[A^2|alpha]]
    elif method == "quadrature":
        dist = stats.beta(a, b)

        def integ(fn):
            return integrate.quad(lambda x: fn(x) * dist.pdf(x), 0.0, 1.0, limit=200,
                                  epsabs=1e-13, epsrel=1e-12)[0]

        def cond_mean(x):
            return float(np.sum(x**k))

        e_mean = integ(cond_mean)
        e_sq_mean = integ(lambda x: cond_mean(x) ** 2)
        e_second = integ(lambda x: float(np.sum((2 * k - 1) * x**k)))
    else:
        raise PolyspecInputError("method", f"must be 'moments' or 'quadrature', got {method!r}")
    within = e_second - e_sq_mean
    between = e_sq_mean - e_mean**2
    return {"total": within + between, "within": within, "between": between,
            "mean": e_mean, "method": method}
