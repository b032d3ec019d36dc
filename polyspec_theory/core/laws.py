"""Acceptance-length laws (docs/theory.md §1.4) as scipy.stats-like distribution objects.

A round checks a block of ``cap`` drafted tokens; ``A`` in {0..cap} is the number accepted
before the first rejection and the round emits ``L = A + 1`` tokens. Every law is defined by
its uncapped survival sequence ``S_k = P(A >= k)`` (``S_0 = 1``); a cap ``g`` only censors:
``P(A = k | g) = S_k - S_{k+1}`` for ``k < g`` and ``P(A = g | g) = S_g``.

Laws: :class:`IIDGeometric` (Leviathan), :class:`Positional`, :class:`BetaMixed` (context
heterogeneity) and :class:`GaussianBaseline` (the polybasic paper's assumption, kept only to
show how badly it fits). ``fit`` is maximum likelihood with ``A = cap`` right-censored.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from polyspec_theory.core.counts import MAX_CAP, AcceptanceCounts, as_sample
from polyspec_theory.core.fitting import FitResult, fit_result
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_int_array,
    as_positive,
    as_probability,
    as_real,
    as_real_array,
    require_keys,
)

__all__ = [
    "AcceptanceLaw",
    "IIDGeometric",
    "Positional",
    "BetaMixed",
    "GaussianBaseline",
    "LAW_FAMILIES",
    "FAMILIES",
    "LAW_FAMILY_NAMES",
    "chain_law_from_config",
]


def _cap(cap, field="cap") -> int:
    return as_int(cap, field, low=1, high=MAX_CAP)


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise PolyspecInputError("seed", "a seed (int) or numpy Generator is required")
    return np.random.default_rng(as_int(seed, "seed", low=0))


class AcceptanceLaw(ABC):
    """Law of the accepted count ``A`` of one verification round, for any cap."""

    family: str = ""

    # --- the defining sequences -------------------------------------------------------
    @abstractmethod
    def survival(self, kmax: int) -> np.ndarray:
        """``S_k = P(A >= k)`` uncapped, for k = 0..kmax (float64, ``S_0 = 1``)."""

    def pmf_vector(self, cap: int) -> np.ndarray:
        """``P(A = k | cap)`` for k = 0..cap (sums to 1)."""
        cap = _cap(cap)
        s = self.survival(cap)
        p = np.empty(cap + 1)
        p[:-1] = self._point_masses(s, cap)
        p[-1] = s[-1]
        return p

    def _point_masses(self, s: np.ndarray, cap: int) -> np.ndarray:
        """``P(A = k)`` for k < cap; subclasses override with cancellation-free forms."""
        return np.maximum(s[:-1] - s[1:], 0.0)

    # --- P1's view: the law of A for every cap at once (docs/theory.md §6) ---------------
    def cap_pmf_table(self, gmax: int) -> np.ndarray:
        """``K[g, a] = P(A = a | cap g)`` for g, a = 0..gmax (row 0: ``A = 0``). Here a cap
        censors one uncapped law: row g is ``P(A = a)`` for a < g and ``S_g`` at a = g.
        Laws whose law depends on the cap (:class:`polyspec_theory.core.regimes.RegimeLaw`)
        override this and the two methods below."""
        gmax = as_int(gmax, "gmax", low=0, high=MAX_CAP)
        s = self.survival(gmax)
        k = np.zeros((gmax + 1, gmax + 1))
        if gmax >= 1:
            pm = self._point_masses(s, gmax)
            k[:, :gmax] = np.tril(np.ones((gmax + 1, gmax)), -1) * pm[None, :]
        k[np.arange(gmax + 1), np.arange(gmax + 1)] = s
        return k

    def pmf_over_blocks(self, block_pmf) -> np.ndarray:
        """``P(A = a) = sum_g P(G = g) K[g, a]`` for a block of random length ``G`` (rows of
        ``block_pmf``, index = g; a = 0..gmax), in the O(gmax) form
        ``P(A = a) P(G > a) + S_a P(G = a)`` (``P(A = a)`` uncapped)."""
        w = np.asarray(block_pmf, dtype=np.float64)
        if w.ndim not in (1, 2) or w.shape[-1] < 1 or not (np.isfinite(w) & (w >= 0)).all():
            raise PolyspecInputError("block_pmf", "must be rows of a pmf over block lengths")
        gmax = w.shape[-1] - 1
        s = self.survival(gmax)
        point = np.append(self._point_masses(s, gmax), 0.0)
        g_gt = np.concatenate(  # P(G > a)
            [np.cumsum(w[..., ::-1], axis=-1)[..., ::-1][..., 1:], np.zeros(w.shape[:-1] + (1,))],
            axis=-1)
        return point * g_gt + w * s

    def capped_mean_emitted(self, gmax: int) -> np.ndarray:
        """``E[L | cap g] = sum_{k<=g} S_k`` (``L = A + 1``) for g = 0..gmax."""
        return np.cumsum(self.survival(as_int(gmax, "gmax", low=0, high=MAX_CAP)))

    # --- scipy.stats-like interface -----------------------------------------------------
    def pmf(self, k, cap):
        """``P(A = k | cap)`` (0 outside 0..cap)."""
        p = self.pmf_vector(cap)
        k = np.asarray(k)
        inside = (k >= 0) & (k <= len(p) - 1) & (k == np.floor(k))
        out = np.where(inside, p[np.clip(k, 0, len(p) - 1).astype(np.int64)], 0.0)
        return out if out.ndim else float(out)

    def sf(self, k, cap):
        """``P(A > k | cap)``."""
        cap = _cap(cap)
        s = self.survival(cap)
        k = np.floor(np.asarray(k, dtype=np.float64))
        idx = np.clip(k + 1, 0, cap + 1).astype(np.int64)
        ext = np.append(s, 0.0)
        out = np.where(k < 0, 1.0, ext[idx])
        return out if out.ndim else float(out)

    def cdf(self, k, cap):
        """``P(A <= k | cap)``."""
        out = 1.0 - np.asarray(self.sf(k, cap))
        return out if out.ndim else float(out)

    def mean(self, cap) -> float:
        """``E[A | cap] = sum_{k=1}^{cap} S_k``."""
        cap = _cap(cap)
        return float(np.sum(self.survival(cap)[1:]))

    def var(self, cap) -> float:
        """``Var[A | cap]`` (two-pass, no cancellation)."""
        cap = _cap(cap)
        p = self.pmf_vector(cap)
        m = self.mean(cap)
        k = np.arange(cap + 1)
        return float(np.sum(p * (k - m) ** 2))

    def std(self, cap) -> float:
        return math.sqrt(self.var(cap))

    def mean_emitted(self, cap) -> float:
        """``E[L | cap] = 1 + E[A | cap]``."""
        return 1.0 + self.mean(cap)

    def mean_emitted_limit(self) -> float:
        """``E[L]`` with no cap, ``1 + sum_{k>=1} S_k`` (``inf`` when it diverges)."""
        s = self.survival(100_000)
        return float(np.sum(s)) if s[-1] < 1e-16 else math.inf

    def emitted_pmf(self, cap) -> np.ndarray:
        """``P(L = l | cap)`` for l = 0..cap+1 (index = l; index 0 is 0)."""
        return np.concatenate([[0.0], self.pmf_vector(cap)])

    def pgf(self, z, cap):
        """``E[z^A | cap]``."""
        p = self.pmf_vector(cap)
        z = np.asarray(z, dtype=np.float64)
        out = np.polynomial.polynomial.polyval(z, p)
        return out if np.ndim(out) else float(out)

    def rvs(self, cap, size=None, seed=None):
        """Sample accepted counts with one uniform per round (inverse CDF).

        ``cap`` is an int or an array of caps (then ``size`` defaults to its shape);
        ``seed`` is an int or a ``numpy.random.Generator``.
        """
        rng = _rng(seed)
        caps = self._caps_for_sampling(cap, size)
        return self._rvs(caps, rng)

    def _caps_for_sampling(self, cap, size) -> np.ndarray:
        if np.ndim(cap) == 0:
            c = _cap(cap)
            shape = () if size is None else size
            return np.full(shape, c, dtype=np.int64)
        caps = as_int_array(cap, "cap", low=1)
        if size is not None and tuple(np.atleast_1d(size)) != caps.shape:
            raise PolyspecInputError("size", "must match the shape of the cap array")
        return caps

    def _rvs(self, caps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        gmax = int(caps.max()) if caps.size else 1
        s = self.survival(gmax)
        u = rng.random(caps.shape)
        # A = #{k in 1..g : S_k > u}; S is non-increasing so use searchsorted on -S.
        a = np.searchsorted(-s[1:], -u, side="left")
        return np.minimum(a, caps).astype(np.int64)

    # --- likelihood and fitting ---------------------------------------------------------
    def logpmf_sample(self, accepted, caps) -> np.ndarray:
        """Per-round log-likelihood of ``A = accepted`` given the cap (censored at the cap)."""
        return self._logpmf_checked(*as_sample(accepted, caps))

    def _logpmf_checked(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        """:meth:`logpmf_sample` of a checked sample (int64 arrays, ``0 <= a <= g``, as an
        :class:`AcceptanceCounts` holds them): the likelihood inside a fit is not re-checked
        at every evaluation."""
        full = a == g
        return self._log_probs(a, full, np.where(full, 0, a), int(g.max()))

    def _log_probs(self, a, full, a_point, gmax: int) -> np.ndarray:
        """The rounds' log-probabilities from their set-up (what does not depend on the law):
        ``full`` (all ``g`` accepted: ``log S(a)``), ``a_point`` (``a`` where not full, else
        0: ``log P(A = a)``), ``gmax`` (the largest cap)."""
        s = self.survival(gmax)
        p = np.where(full, s[a], self._point_masses(s, gmax)[a_point])
        with np.errstate(divide="ignore"):
            return np.log(p)

    def loglik(self, data, caps=None) -> float:
        """Censored log-likelihood of observed rounds (:class:`AcceptanceCounts`, or arrays
        of accepted counts with ``caps``)."""
        return _Likelihood(AcceptanceCounts.coerce(data, caps))(self)

    @property
    @abstractmethod
    def n_params(self) -> int: ...

    @abstractmethod
    def to_config(self) -> dict:
        """The config-file form of this law (inverse of :func:`law_from_config`)."""

    @classmethod
    def fit(cls, data, caps=None, **options) -> FitResult:
        """Maximum-likelihood fit with ``A = cap`` right-censored (docs/theory.md §1.4) to observed
        rounds: an :class:`AcceptanceCounts` or arrays ``(accepted, caps)``. Returns the law
        with its log-likelihood, AIC and G-test (:class:`FitResult`)."""
        d = AcceptanceCounts.coerce(data, caps)
        return fit_result(cls._mle(d, **options), d)

    @classmethod
    def mle(cls, data, caps=None, **options) -> AcceptanceLaw:
        """The law of :meth:`fit` alone (no log-likelihood, AIC or G-test computed): for
        callers that use only the law, e.g. one fit per prompt in a forecast."""
        return cls._mle(AcceptanceCounts.coerce(data, caps), **options)

    @classmethod
    @abstractmethod
    def _mle(cls, d: AcceptanceCounts) -> AcceptanceLaw:
        """The maximum-likelihood law of this family for the weighted cells ``d``."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.to_config() == other.to_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.to_config())))


class _Likelihood:
    """:meth:`AcceptanceLaw.loglik` of one sample ``d`` for any law, with what does not
    depend on the law taken once (a fit's optimizer evaluates it thousands of times): the
    per-round log-probabilities of :meth:`AcceptanceLaw._logpmf_checked` weighted by the
    counts, ``-inf`` where a round with a count is impossible under the law."""

    def __init__(self, d: AcceptanceCounts):
        self.a, self.g, self.full = d.accepted, d.caps, d.accepted == d.caps
        self.gmax = int(d.caps.max())
        self.a_point = np.where(self.full, 0, d.accepted)  # a < cap <= gmax where it is read
        self.w = d.counts.astype(np.float64)
        self.pos = self.w > 0
        self.all_pos = bool(self.pos.all())  # every cell of an AcceptanceCounts has rounds

    def __call__(self, law: AcceptanceLaw) -> float:
        if type(law)._logpmf_checked is not AcceptanceLaw._logpmf_checked:
            lp = law._logpmf_checked(self.a, self.g)  # a law of its own per-round form
        else:  # AcceptanceLaw._logpmf_checked with its set-up taken once
            lp = law._log_probs(self.a, self.full, self.a_point, self.gmax)
        if self.all_pos:
            # lp <= 0 or NaN and w > 0: the dot is finite exactly when every lp is
            ll = float(np.dot(self.w, lp))
            return ll if math.isfinite(ll) else -math.inf
        if np.any(self.pos & ~np.isfinite(lp)):
            return -math.inf
        return float(np.dot(self.w, np.where(self.pos, lp, 0.0)))


class IIDGeometric(AcceptanceLaw):
    """iid per-position acceptance ``alpha`` (Leviathan et al.): capped geometric.

    ``P(A=k) = alpha^k (1-alpha)`` for k < g, ``P(A=g) = alpha^g``,
    ``E[L] = (1 - alpha^{g+1}) / (1 - alpha)`` (computed stably; ``g+1`` at alpha = 1).
    """

    family = "iid"

    def __init__(self, alpha):
        self.alpha = as_probability(alpha, "alpha")

    @property
    def n_params(self) -> int:
        return 1

    def to_config(self) -> dict:
        return {"alpha": self.alpha}

    def survival(self, kmax: int) -> np.ndarray:
        return np.power(self.alpha, np.arange(kmax + 1, dtype=np.float64))

    def _point_masses(self, s, cap):
        return s[:-1] * (1.0 - self.alpha)

    def mean(self, cap) -> float:
        cap = _cap(cap)
        a = self.alpha
        if a == 1.0:
            return float(cap)
        if a == 0.0:
            return 0.0
        # alpha (1 - alpha^g) / (1 - alpha) without 0/0 as alpha -> 1
        return float(a * -math.expm1(cap * math.log(a)) / (1.0 - a))

    def mean_emitted_limit(self) -> float:
        return math.inf if self.alpha == 1.0 else 1.0 / (1.0 - self.alpha)

    def _rvs(self, caps, rng):
        a = self.alpha
        if a == 1.0:
            return caps.astype(np.int64)
        if a == 0.0:
            return np.zeros(caps.shape, dtype=np.int64)
        u = rng.random(caps.shape)
        # A >= k  <=>  u < alpha^k  <=>  k <= log(u)/log(alpha)
        with np.errstate(divide="ignore"):
            k = np.floor(np.log1p(-u) / math.log(a))
        return np.minimum(k, caps).astype(np.int64)

    @classmethod
    def _mle(cls, d: AcceptanceCounts) -> IIDGeometric:
        succ = float(np.dot(d.counts, d.accepted))
        fail = float(d.counts[d.accepted < d.caps].sum())
        return cls(succ / (succ + fail) if succ + fail > 0 else 1.0)

    @classmethod
    def from_mean(cls, mean_accepted, cap) -> IIDGeometric:
        """Method of moments: the law whose capped mean ``E[A | cap]`` is ``mean_accepted``
        (``E[A | g]`` is increasing in ``alpha``); for data that report only totals."""
        from scipy import optimize

        cap = as_int(cap, "cap", low=1)
        m = as_real(mean_accepted, "mean_accepted", low=0.0, high=float(cap))
        if m == 0.0:
            return cls(0.0)
        if m == cap:
            return cls(1.0)
        return cls(float(optimize.brentq(lambda a: cls(a).mean(cap) - m, 0.0, 1.0,
                                         xtol=1e-14, rtol=1e-14)))


class Positional(AcceptanceLaw):
    """Position-dependent acceptance: ``alpha_k = P(A >= k | A >= k-1)``; the last repeats."""

    family = "positional"

    def __init__(self, alphas):
        arr = as_real_array(alphas, "positional", low=0.0, high=1.0)
        self.alphas = tuple(float(x) for x in arr)

    @property
    def n_params(self) -> int:
        return len(self.alphas)

    def to_config(self) -> dict:
        return {"positional": list(self.alphas)}

    def hazards(self, kmax: int) -> np.ndarray:
        """``alpha_k`` for k = 1..kmax (the last given value repeats)."""
        h = np.asarray(self.alphas, dtype=np.float64)
        if kmax <= h.size:
            return h[:kmax]
        return np.concatenate([h, np.full(kmax - h.size, h[-1])])

    def survival(self, kmax: int) -> np.ndarray:
        return np.concatenate([[1.0], np.cumprod(self.hazards(kmax))])

    def _point_masses(self, s, cap):
        return s[:-1] * (1.0 - self.hazards(cap))

    def mean_emitted_limit(self) -> float:
        k = len(self.alphas)
        s = self.survival(k)
        last = self.alphas[-1]
        if s[-1] == 0.0:  # the chain has stopped: no geometric tail (avoids 0 * 1/0)
            return float(np.sum(s))
        if last == 1.0:
            return math.inf
        return float(np.sum(s) + s[-1] * last / (1.0 - last))

    @classmethod
    def _mle(cls, d: AcceptanceCounts, max_positions: int | None = None) -> Positional:
        """Kaplan–Meier-style hazard MLE per position; positions from ``max_positions`` on
        are pooled into one hazard."""
        gmax = int(d.caps.max())
        if max_positions is not None:
            max_positions = as_int(max_positions, "max_positions", low=1)
        kmax = gmax if max_positions is None else min(gmax, max_positions)
        alphas = []
        for k in range(1, kmax + 1):
            hi = gmax if (max_positions is not None and k == kmax) else k
            succ = trials = 0.0
            for j in range(k, hi + 1):
                at_risk = (d.accepted >= j - 1) & (d.caps >= j)
                trials += float(d.counts[at_risk].sum())
                succ += float(d.counts[at_risk & (d.accepted >= j)].sum())
            if trials == 0:
                break
            alphas.append(succ / trials)
        return cls(alphas or [1.0])


class BetaMixed(AcceptanceLaw):
    """Each round draws its own ``alpha ~ Beta(a, b)``: ``P(A >= k) = B(a+k, b) / B(a, b)``.

    Continuation probability at position k is ``(a+k-1)/(a+b+k-1)``; rejection ``b/(a+b+k-1)``.
    """

    family = "beta"

    def __init__(self, a, b):
        self.a = as_positive(a, "beta[0]")
        self.b = as_positive(b, "beta[1]")

    @property
    def n_params(self) -> int:
        return 2

    @property
    def mean_alpha(self) -> float:
        return 1.0 / (1.0 + self.b / self.a)

    def to_config(self) -> dict:
        return {"beta": [self.a, self.b]}

    # Written so that no sum like a + k - 1 loses a tiny a or b (1e-20 + 1 - 1 == 0 in
    # floating point) and no a + b overflows: continuation at position k is
    # 1 / (1 + b / (a + (k - 1))), rejection 1 / (1 + (a + k) / b).
    def survival(self, kmax: int) -> np.ndarray:
        k = np.arange(1, kmax + 1, dtype=np.float64)
        with np.errstate(over="ignore", divide="ignore"):
            log_h = -np.log1p(self.b / (self.a + (k - 1.0)))
        return np.concatenate([[1.0], np.exp(np.cumsum(log_h))])

    def _point_masses(self, s, cap):
        k = np.arange(cap, dtype=np.float64)
        with np.errstate(over="ignore"):
            return s[:-1] / (1.0 + (self.a + k) / self.b)

    def mean_emitted_limit(self) -> float:
        # sum_k B(a+k, b)/B(a, b) = (a + b - 1)/(b - 1) = 1 + a/(b - 1) for b > 1, divergent
        # otherwise
        return 1.0 + self.a / (self.b - 1.0) if self.b > 1.0 else math.inf

    def _rvs(self, caps, rng):
        alpha = rng.beta(self.a, self.b, size=caps.shape)
        u = rng.random(caps.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.floor(np.log1p(-u) / np.log(alpha))
        k = np.where(alpha >= 1.0, caps, np.where(alpha <= 0.0, 0, k))
        return np.minimum(k, caps).astype(np.int64)

    @classmethod
    def _mle(cls, d: AcceptanceCounts) -> BetaMixed:
        alpha0 = min(max(IIDGeometric._mle(d).alpha, 0.02), 0.98)
        loglik = _Likelihood(d)

        def nll(x):
            # np.clip(x, -20, 20) element by element on Python floats (NaN stays NaN): the
            # same numbers without a numpy call per evaluation
            la, lb = min(max(x[0], -20.0), 20.0), min(max(x[1], -20.0), 20.0)
            ll = loglik(cls(math.exp(la), math.exp(lb)))
            return -ll if math.isfinite(ll) else 1e300

        starts = [np.log([alpha0 * c, (1 - alpha0) * c]) for c in (2.0, 10.0, 50.0)]
        la, lb = np.clip(_nelder_mead(nll, starts), -20, 20)
        return cls(math.exp(la), math.exp(lb))


class GaussianBaseline(AcceptanceLaw):
    """The polybasic paper's Gaussian assumption ``A ~ N(mu, sigma^2)``, discretized.

    To be a law on {0..g} the normal mass below 0.5 is lumped at 0 and the mass above
    ``g - 0.5`` at the cap. :meth:`improper_mass` reports how much mass the raw Gaussian puts
    below 0 and above the cap — the reason this baseline is wrong for short blocks.
    """

    family = "gaussian"

    def __init__(self, mu, sigma):
        self.mu = as_real(mu, "gaussian[0]")
        self.sigma = as_positive(sigma, "gaussian[1]")

    @property
    def n_params(self) -> int:
        return 2

    def to_config(self) -> dict:
        return {"gaussian": [self.mu, self.sigma]}

    def _cdf(self, x, upper: bool = False) -> np.ndarray:
        """Normal cdf (``upper``: sf) at ``x``: ``ndtr`` of the standardised ``x``, as
        ``scipy.stats.norm.cdf`` / ``.sf`` compute it (the same numbers, without their
        argument checks: this sits inside the fit's likelihood)."""
        from scipy import special

        z = (x - self.mu) / self.sigma
        return special.ndtr(-z if upper else z)

    def survival(self, kmax: int) -> np.ndarray:
        k = np.arange(1, kmax + 1, dtype=np.float64)
        with np.errstate(over="ignore", divide="ignore", under="ignore"):  # sd -> 0: 0 or 1
            return np.concatenate([[1.0], self._cdf(k - 0.5, upper=True)])

    def _point_masses(self, s, cap):
        k = np.arange(cap, dtype=np.float64)
        lo = np.where(k == 0, -np.inf, k - 0.5)
        # difference of sf on the upper side, of cdf on the lower side: no cancellation. The
        # sf at k - 0.5 and k + 0.5 are s[k] and s[k + 1] (s = survival(cap): the same sf
        # at the same points; sf(-inf) = 1 = s[0]), so only the cdf is evaluated here
        upper = k >= self.mu
        p_up = s[:-1] - s[1:]
        with np.errstate(over="ignore", divide="ignore", under="ignore"):
            p_lo = self._cdf(k + 0.5) - self._cdf(lo)
        return np.maximum(np.where(upper, p_up, p_lo), 0.0)

    def improper_mass(self, cap) -> dict:
        """Raw Gaussian mass below 0 and above ``cap`` (impossible accepted counts)."""
        cap = _cap(cap)
        from scipy import stats

        return {
            "below_zero": float(stats.norm.cdf(0.0, self.mu, self.sigma)),
            "above_cap": float(stats.norm.sf(cap, self.mu, self.sigma)),
        }

    def _rvs(self, caps, rng):
        x = rng.normal(self.mu, self.sigma, size=caps.shape)
        return np.clip(np.rint(x), 0, caps).astype(np.int64)

    @classmethod
    def _mle(cls, d: AcceptanceCounts) -> GaussianBaseline:
        m = d.mean_accepted()
        s = math.sqrt(float(np.dot(d.counts, (d.accepted - m) ** 2)) / d.n_rounds) or 0.5

        loglik = _Likelihood(d)

        def nll(x):
            ll = loglik(cls(x[0], math.exp(min(max(float(x[1]), -10.0), 10.0))))
            return -ll if math.isfinite(ll) else 1e300

        mu, ls = _nelder_mead(nll, [np.array([m, math.log(max(s, 0.05))])])
        return cls(mu, math.exp(float(np.clip(ls, -10, 10))))


def _nelder_mead(fun, starts):
    from scipy import optimize

    best = None
    for x0 in starts:
        res = optimize.minimize(fun, x0, method="Nelder-Mead",
                                options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
        if best is None or res.fun < best.fun:
            best = res
    return best.x


LAW_FAMILIES: dict[str, type[AcceptanceLaw]] = {
    "iid": IIDGeometric,
    "positional": Positional,
    "beta": BetaMixed,
    "gaussian": GaussianBaseline,
}
LAW_FAMILY_NAMES = tuple(LAW_FAMILIES)  # names of the acceptance-law families
FAMILIES = LAW_FAMILY_NAMES  # the same, under its older name

_CONFIG_KEYS = {"alpha": "iid", "positional": "positional", "beta": "beta", "gaussian": "gaussian"}


def chain_law_from_config(spec, field: str = "acceptance") -> AcceptanceLaw:
    """Build a chain law from ``{"alpha": a}``, ``{"positional": [...]}``, ``{"beta": [a, b]}``
    or ``{"gaussian": [mu, sigma]}`` (every family, regimes and tree laws included:
    :func:`polyspec_theory.core.config.law_from_config`). An :class:`AcceptanceLaw` passes
    through."""
    if isinstance(spec, AcceptanceLaw):
        return spec
    if not isinstance(spec, dict) or len(spec) != 1:
        raise PolyspecInputError(
            field,
            "must be one of {\"alpha\": a}, {\"positional\": [a1, ...]}, {\"beta\": [a, b]}, "
            f"{{\"gaussian\": [mu, sigma]}}; got {spec!r}",
        )
    require_keys(spec, field, required=[], optional=list(_CONFIG_KEYS))
    (key, value), = spec.items()
    try:
        if key == "alpha":
            return IIDGeometric(value)
        if key == "positional":
            return Positional(value)
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
            raise PolyspecInputError(key, f"must be a list of two numbers, got {value!r}")
        return LAW_FAMILIES[_CONFIG_KEYS[key]](*value)
    except PolyspecInputError as e:
        sub = e.field.split("[")[0]
        suffix = e.field[len(sub):] if sub == key else ""
        raise PolyspecInputError(f"{field}.{key}{suffix}", str(e).split(": ", 1)[1]) from None


def fit_laws(data, caps=None, families=FAMILIES, *,
             max_positions: int | None = None) -> list[FitResult]:
    """Fit every family in ``families`` and rank by AIC (best first; ties: fewer
    parameters). ``max_positions`` pools the positional law's hazards from that position."""
    d = AcceptanceCounts.coerce(data, caps)
    if isinstance(families, str) or not families:
        raise PolyspecInputError("families", "must be a non-empty list of law family names")
    fits = []
    for fam in families:
        if fam not in LAW_FAMILIES:
            raise PolyspecInputError(
                "families", f"unknown law family {fam!r}; choose from {', '.join(FAMILIES)}")
        opts = {"max_positions": max_positions} if fam == "positional" else {}
        fits.append(LAW_FAMILIES[fam].fit(d, **opts))
    return sorted(fits, key=lambda r: (np.nan_to_num(r.aic, nan=np.inf), r.n_params))


def best_fit(fits, exclude=("gaussian",)) -> FitResult:
    """The AIC-best fit among families not in ``exclude`` (the Gaussian is only a baseline)."""
    for f in fits:
        if f.law.family not in exclude:
            return f
    raise PolyspecInputError("fits", "no fit outside the excluded families")
