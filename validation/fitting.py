"""Fit what P1 needs from measurements: acceptance laws per adjacent pair and cost curves.

Acceptance data are kept as a weighted histogram of rounds (:class:`AcceptanceCounts`:
``counts[j]`` rounds had ``A = accepted[j]`` with block length / cap ``caps[j]``), so engine
counters with millions of rounds fit as fast as a short trace. Every law family of
:mod:`polyspec_theory.laws` is fitted by maximum likelihood with ``A = cap`` right-censored
(THEORY.md §2) and the fits are ranked by AIC, with the G-test of goodness of fit reported.

Cost curves ``T_i(m)`` are fitted from timing samples ``(m, context length, seconds)``: the
median per ``(m, context)`` cell (timing noise on these CPUs is heavy-tailed), an affine
``b + k (m - 1)`` and a context slope ``d`` (seconds per token of context) by least squares on
the cell medians, and a per-``m`` table at any requested context length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from polyspec_theory._input import (
    PolyspecInputError,
    as_int,
    as_int_array,
    as_real,
    as_real_array,
)
from polyspec_theory.config import Cascade, Model
from polyspec_theory.costs import CostCurve
from polyspec_theory.laws import (
    LAW_FAMILIES,
    AcceptanceLaw,
    BetaMixed,
    FitResult,
    GaussianBaseline,
    GoodnessOfFit,
    IIDGeometric,
    Positional,
    as_sample,
    pool_cells,
)

__all__ = [
    "AcceptanceCounts",
    "fit_law",
    "fit_laws",
    "best_fit",
    "CostFit",
    "fit_cost_curve",
    "build_cascade",
    "iid_alpha_from_mean",
    "FAMILIES",
]

FAMILIES = ("iid", "positional", "beta", "gaussian")


# --------------------------------------------------------------------------------------------
# acceptance data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AcceptanceCounts:
    """Observed rounds as a histogram over cells ``(accepted, cap)`` with ``counts`` rounds each.

    ``notes`` carries caveats from the source (e.g. an engine whose drafts were not all of the
    same length, so censoring is only approximate).
    """

    accepted: np.ndarray
    caps: np.ndarray
    counts: np.ndarray
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self):
        a, g = as_sample(self.accepted, self.caps)
        w = as_int_array(self.counts, "counts", low=0)
        if w.shape != a.shape:
            raise PolyspecInputError(
                "counts", f"must have one count per cell ({a.size}), got {w.size}"
            )
        keep = w > 0
        if not keep.any():
            raise PolyspecInputError("counts", "no rounds observed (all counts are 0)")
        # canonical form: unique cells sorted by (cap, accepted)
        key = g[keep] * (int(a.max()) + 2) + a[keep]
        uniq, inv = np.unique(key, return_inverse=True)
        ww = np.bincount(inv, weights=w[keep]).astype(np.int64)
        first = np.zeros(uniq.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(inv.size)[::-1]
        object.__setattr__(self, "accepted", a[keep][first])
        object.__setattr__(self, "caps", g[keep][first])
        object.__setattr__(self, "counts", ww)
        object.__setattr__(self, "notes", tuple(self.notes))

    # --- constructors ------------------------------------------------------------------------
    @classmethod
    def from_samples(cls, accepted, caps, source: str = "") -> AcceptanceCounts:
        """One cell per observed round (``caps`` an int or one cap per round)."""
        a, g = as_sample(accepted, caps)
        return cls(a, g, np.ones(a.size, dtype=np.int64), source)

    @classmethod
    def from_histogram(cls, histogram, cap, source: str = "", notes=()) -> AcceptanceCounts:
        """``histogram[k]`` rounds accepted exactly ``k`` of ``cap`` drafted tokens."""
        h = as_int_array(histogram, "histogram", low=0)
        cap = as_int(cap, "cap", low=1)
        if h.size > cap + 1:
            extra = h[cap + 1:]
            if extra.any():
                k = cap + 1 + int(np.flatnonzero(extra)[0])
                raise PolyspecInputError(
                    "histogram", f"has rounds with {k} accepted tokens, more than the cap {cap}"
                )
            h = h[: cap + 1]
        k = np.arange(h.size)
        return cls(k, np.full(h.size, cap), h, source, tuple(notes))

    @classmethod
    def from_survival_counts(cls, n_rounds, at_least, cap=None, source: str = "",
                             notes=()) -> AcceptanceCounts:
        """``at_least[k-1] = #{rounds with A >= k}`` for k = 1..len (all rounds capped at ``cap``,
        default ``len(at_least)``). The histogram is exact: ``#{A = k} = c_k - c_{k+1}``."""
        n = as_int(n_rounds, "num_drafts", low=1)
        c = as_int_array(at_least, "num_accepted_tokens_per_pos", low=0)
        cap = c.size if cap is None else as_int(cap, "cap", low=c.size)
        if c[0] > n:
            raise PolyspecInputError(
                "num_accepted_tokens_per_pos",
                f"position 0 has {c[0]} acceptances but there are only {n} drafts",
            )
        if (np.diff(c) > 0).any():
            k = int(np.flatnonzero(np.diff(c) > 0)[0]) + 1
            raise PolyspecInputError(
                "num_accepted_tokens_per_pos",
                f"must be non-increasing (a token is accepted only after the ones before it); "
                f"position {k} has {c[k]} > position {k - 1} with {c[k - 1]}",
            )
        full = np.concatenate([[n], c, np.zeros(cap - c.size + 1, dtype=np.int64)])
        hist = full[:-1] - full[1:]
        return cls.from_histogram(hist, cap, source, notes)

    # --- summaries ---------------------------------------------------------------------------
    @property
    def n_rounds(self) -> int:
        return int(self.counts.sum())

    def mean_accepted(self) -> float:
        """Sample mean of ``A``."""
        return float(np.dot(self.counts, self.accepted) / self.n_rounds)

    def mean_emitted(self) -> float:
        """Sample mean of ``L = A + 1`` (vLLM's "mean acceptance length" convention)."""
        return 1.0 + self.mean_accepted()

    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (vLLM's "draft acceptance rate")."""
        return float(np.dot(self.counts, self.accepted) / np.dot(self.counts, self.caps))

    def survival(self, kmax: int | None = None) -> np.ndarray:
        """Kaplan–Meier estimate of ``P(A >= k)``, k = 0..kmax (rounds at cap < k censored)."""
        kmax = int(self.caps.max()) if kmax is None else as_int(kmax, "kmax", low=0)
        s = np.ones(kmax + 1)
        for k in range(1, kmax + 1):
            at_risk = (self.accepted >= k - 1) & (self.caps >= k)
            trials = self.counts[at_risk].sum()
            if trials == 0:
                s[k:] = np.nan
                break
            succ = self.counts[at_risk & (self.accepted >= k)].sum()
            s[k] = s[k - 1] * succ / trials
        return s

    def histogram(self, cap: int) -> np.ndarray:
        """Counts of ``A = k``, k = 0..cap, among rounds whose cap is ``cap``."""
        cap = as_int(cap, "cap", low=1)
        sel = self.caps == cap
        return np.bincount(self.accepted[sel], weights=self.counts[sel],
                           minlength=cap + 1).astype(np.int64)[: cap + 1]

    def to_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Expand to one ``(accepted, cap)`` pair per round."""
        return np.repeat(self.accepted, self.counts), np.repeat(self.caps, self.counts)

    def merge(self, other: AcceptanceCounts) -> AcceptanceCounts:
        return AcceptanceCounts(
            np.concatenate([self.accepted, other.accepted]),
            np.concatenate([self.caps, other.caps]),
            np.concatenate([self.counts, other.counts]),
            self.source or other.source,
            self.notes + tuple(n for n in other.notes if n not in self.notes),
        )

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "n_rounds": self.n_rounds,
            "mean_accepted": self.mean_accepted(),
            "mean_emitted": self.mean_emitted(),
            "acceptance_rate": self.acceptance_rate(),
            "notes": list(self.notes),
            "cells": [[int(a), int(g), int(w)]
                      for a, g, w in zip(self.accepted, self.caps, self.counts, strict=True)],
        }


def _as_counts(data, caps=None) -> AcceptanceCounts:
    if isinstance(data, AcceptanceCounts):
        if caps is not None:
            raise PolyspecInputError("caps", "give caps only with an array of accepted counts")
        return data
    if caps is None:
        raise PolyspecInputError("caps", "required with an array of accepted counts")
    return AcceptanceCounts.from_samples(data, caps)


# --------------------------------------------------------------------------------------------
# weighted maximum likelihood
# --------------------------------------------------------------------------------------------
def _loglik(law: AcceptanceLaw, d: AcceptanceCounts) -> float:
    lp = law.logpmf_sample(d.accepted, d.caps)
    w = d.counts.astype(np.float64)
    if np.any((w > 0) & ~np.isfinite(lp)):
        return -math.inf
    return float(np.dot(w, np.where(w > 0, lp, 0.0)))


def _gof(law: AcceptanceLaw, d: AcceptanceCounts, min_expected: float = 5.0) -> GoodnessOfFit:
    """G-test on cells (cap, k) pooled within each cap until expected >= 5 (as in laws)."""
    stat = 0.0
    cells = groups = 0
    for cap in np.unique(d.caps):
        obs = d.histogram(int(cap)).astype(np.float64)
        exp = obs.sum() * law.pmf_vector(int(cap))
        e, o = pool_cells(exp, obs, min_expected)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(o > 0, o * np.log(o / e), 0.0)
        stat += 2.0 * float(np.sum(terms))
        cells += e.size
        groups += 1
    df = cells - groups - law.n_params
    p = float(stats.chi2.sf(stat, df)) if df > 0 else float("nan")
    return GoodnessOfFit(statistic=stat, df=int(df), p_value=p, n_cells=cells,
                         min_expected=min_expected)


def _result(law: AcceptanceLaw, d: AcceptanceCounts) -> FitResult:
    return FitResult(law=law, loglik=_loglik(law, d), n_params=law.n_params, n=d.n_rounds,
                     gof=_gof(law, d))


def _fit_iid(d: AcceptanceCounts) -> IIDGeometric:
    succ = float(np.dot(d.counts, d.accepted))
    fail = float(d.counts[d.accepted < d.caps].sum())
    return IIDGeometric(succ / (succ + fail) if succ + fail > 0 else 1.0)


def _fit_positional(d: AcceptanceCounts, max_positions: int | None) -> Positional:
    gmax = int(d.caps.max())
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
    return Positional(alphas or [1.0])


def _nelder_mead(fun, starts):
    best = None
    for x0 in starts:
        res = optimize.minimize(fun, x0, method="Nelder-Mead",
                                options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
        if best is None or res.fun < best.fun:
            best = res
    return best.x


def _fit_beta(d: AcceptanceCounts) -> BetaMixed:
    alpha0 = min(max(_fit_iid(d).alpha, 0.02), 0.98)

    def nll(x):
        la, lb = np.clip(x, -20, 20)
        ll = _loglik(BetaMixed(math.exp(la), math.exp(lb)), d)
        return -ll if math.isfinite(ll) else 1e300

    starts = [np.log([alpha0 * c, (1 - alpha0) * c]) for c in (2.0, 10.0, 50.0)]
    la, lb = np.clip(_nelder_mead(nll, starts), -20, 20)
    return BetaMixed(math.exp(la), math.exp(lb))


def _fit_gaussian(d: AcceptanceCounts) -> GaussianBaseline:
    m = d.mean_accepted()
    s = math.sqrt(float(np.dot(d.counts, (d.accepted - m) ** 2)) / d.n_rounds) or 0.5

    def nll(x):
        ll = _loglik(GaussianBaseline(x[0], math.exp(float(np.clip(x[1], -10, 10)))), d)
        return -ll if math.isfinite(ll) else 1e300

    mu, ls = _nelder_mead(nll, [np.array([m, math.log(max(s, 0.05))])])
    return GaussianBaseline(mu, math.exp(float(np.clip(ls, -10, 10))))


def fit_law(family: str, data, caps=None, *, max_positions: int | None = None) -> FitResult:
    """Censored maximum-likelihood fit of one law family (``iid``, ``positional``, ``beta``,
    ``gaussian``) to an :class:`AcceptanceCounts` or to arrays ``(accepted, caps)``.

    Same estimators as ``LAW.fit`` in :mod:`polyspec_theory.laws`, on weighted cells.
    ``max_positions`` pools positional hazards from that position on.
    """
    d = _as_counts(data, caps)
    if family not in LAW_FAMILIES:
        raise PolyspecInputError(
            "family", f"unknown law family {family!r}; choose from {', '.join(LAW_FAMILIES)}"
        )
    if max_positions is not None:
        max_positions = as_int(max_positions, "max_positions", low=1)
    if family == "iid":
        law = _fit_iid(d)
    elif family == "positional":
        law = _fit_positional(d, max_positions)
    elif family == "beta":
        law = _fit_beta(d)
    else:
        law = _fit_gaussian(d)
    return _result(law, d)


def fit_laws(data, caps=None, families=FAMILIES, *,
             max_positions: int | None = None) -> list[FitResult]:
    """Fit every family and rank by AIC (best first; ties -> fewer parameters)."""
    d = _as_counts(data, caps)
    if isinstance(families, str) or not families:
        raise PolyspecInputError("families", "must be a non-empty list of law family names")
    fits = [fit_law(f, d, max_positions=max_positions) for f in families]
    return sorted(fits, key=lambda r: (np.nan_to_num(r.aic, nan=np.inf), r.n_params))


def best_fit(fits: list[FitResult], exclude=("gaussian",)) -> FitResult:
    """The AIC-best fit among families not in ``exclude`` (the Gaussian is only a baseline)."""
    for f in fits:
        if f.law.family not in exclude:
            return f
    raise PolyspecInputError("fits", "no fit outside the excluded families")


def iid_alpha_from_mean(mean_accepted, cap) -> float:
    """Method of moments: the ``alpha`` whose capped geometric has ``E[A | cap] = mean``.

    For engines reporting only totals (no histogram); ``E[A|g]`` is increasing in ``alpha``.
    """
    cap = as_int(cap, "cap", low=1)
    m = as_real(mean_accepted, "mean_accepted", low=0.0, high=float(cap))
    if m == 0.0:
        return 0.0
    if m == cap:
        return 1.0
    return float(optimize.brentq(lambda a: IIDGeometric(a).mean(cap) - m, 0.0, 1.0,
                                 xtol=1e-14, rtol=1e-14))


# --------------------------------------------------------------------------------------------
# cost curves
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostFit:
    """Fitted ``T(m, c)`` of one model from timing samples.

    ``table[m-1]`` = median time of a forward scoring ``m`` positions, at context
    ``reference_context`` (cells measured at other contexts are shifted by the context slope
    before pooling). ``base``/``per_token``: least-squares affine ``b + k (m - 1)`` at the
    reference context; ``context_slope``: seconds per token of context (0 if only one context
    was measured) with its standard error ``context_slope_se``.
    """

    name: str
    ms: np.ndarray
    table: np.ndarray
    base: float
    per_token: float
    context_slope: float
    context_slope_se: float
    reference_context: float
    contexts: np.ndarray
    n_samples: int
    residual_rel_sd: float
    cells: tuple[tuple[int, float, float, int], ...]  # (m, context, median seconds, n)
    scale: float = 1.0  # calibration factor already applied (see :meth:`scaled`)
    lack_of_fit_p: float = math.nan  # F-test of the affine model against per-cell means

    @property
    def preferred_kind(self) -> str:
        """``"affine"`` unless the affine model's lack of fit is significant (p < 0.01) or
        untestable (no replicates), then ``"table"``."""
        p = self.lack_of_fit_p
        return "affine" if (not math.isnan(p) and p >= 0.01) else "table"

    def scaled(self, factor: float) -> CostFit:
        """The same curve with every time multiplied by ``factor`` (e.g. calibrated to
        forward times measured under the capture's own machine load)."""
        import dataclasses

        f = as_real(factor, "factor", low=0.0, low_open=True)
        return dataclasses.replace(
            self, table=self.table * f, base=self.base * f, per_token=self.per_token * f,
            context_slope=self.context_slope * f, context_slope_se=self.context_slope_se * f,
            cells=tuple((m, c, t * f, k) for m, c, t, k in self.cells), scale=self.scale * f)

    def at(self, m, context: float | None = None, kind: str = "auto"):
        """``T(m)`` at ``context`` (default: the reference context)."""
        return self.curve(context, kind)(m)

    def curve(self, context: float | None = None, kind: str = "auto") -> CostCurve:
        """A :class:`CostCurve` at ``context``: the median table (``kind="table"``, extended
        affinely past its end), the affine fit (``kind="affine"``) or ``"auto"``
        (:attr:`preferred_kind`: the affine fit unless the data reject it)."""
        if kind == "auto":
            kind = self.preferred_kind
        shift = 0.0
        if context is not None:
            c = as_real(context, "context", low=0.0)
            shift = self.context_slope * (c - self.reference_context)
        if kind == "affine":
            return CostCurve.affine(max(self.base + shift, 1e-12), max(self.per_token, 0.0))
        if kind != "table":
            raise PolyspecInputError("kind",
                                     f"must be 'auto', 'table' or 'affine', got {kind!r}")
        full = np.full(int(self.ms.max()), np.nan)
        full[self.ms - 1] = self.table
        # fill unmeasured m inside the range from the affine fit
        gaps = np.isnan(full)
        if gaps.any():
            m_all = np.arange(1, full.size + 1)
            full[gaps] = self.base + self.per_token * (m_all[gaps] - 1)
        return CostCurve.from_table(np.maximum(full + shift, 1e-12))

    def context_effect(self, c_lo: float, c_hi: float) -> float:
        """Relative change of ``T(1)`` between two context lengths (``d (c_hi - c_lo) / T(1)``)."""
        return self.context_slope * (c_hi - c_lo) / self.table[0]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "table": [float(x) for x in self.table],
            "ms": [int(m) for m in self.ms],
            "base": self.base,
            "per_token": self.per_token,
            "context_slope": self.context_slope,
            "context_slope_se": self.context_slope_se,
            "reference_context": self.reference_context,
            "contexts": [float(c) for c in self.contexts],
            "n_samples": self.n_samples,
            "residual_rel_sd": self.residual_rel_sd,
            "scale": self.scale,
            "lack_of_fit_p": self.lack_of_fit_p,
            "kind": self.preferred_kind,
        }


def fit_cost_curve(m, seconds, context=None, *, name: str = "model",
                   reference_context: float | None = None) -> CostFit:
    """Fit ``T(m, c) = table(m) + d (c - c_ref)`` and its affine summary from timing samples.

    ``m``: positions scored per forward (>= 1), ``seconds``: wall time of each forward,
    ``context``: prefix length before each forward (optional). Medians per (m, context) cell,
    then least squares ``median = b + k (m-1) + d (c - c_ref)`` over cells weighted by their
    sample counts. ``c_ref`` defaults to the count-weighted mean context.
    """
    mm = as_int_array(m, "m", low=1)
    t = as_real_array(seconds, "seconds", low=0.0)
    if t.shape != mm.shape:
        raise PolyspecInputError("seconds", f"must have one time per m ({mm.size}), got {t.size}")
    if context is None:
        cc = np.zeros(mm.size)
    else:
        cc = as_real_array(context, "context", low=0.0)
        if cc.shape != mm.shape:
            raise PolyspecInputError(
                "context", f"must have one context length per m ({mm.size}), got {cc.size}"
            )
    cells = []
    for mv in np.unique(mm):
        for cv in np.unique(cc[mm == mv]):
            sel = (mm == mv) & (cc == cv)
            cells.append((int(mv), float(cv), float(np.median(t[sel])), int(sel.sum())))
    cm = np.array([c[0] for c in cells], dtype=np.float64)
    cx = np.array([c[1] for c in cells])
    ct = np.array([c[2] for c in cells])
    cw = np.array([c[3] for c in cells], dtype=np.float64)
    c_ref = (float(np.dot(cw, cx) / cw.sum()) if reference_context is None
             else as_real(reference_context, "reference_context", low=0.0))
    contexts = np.unique(cx)
    cols = [np.ones_like(cm), cm - 1]
    use_ctx = contexts.size > 1
    if use_ctx:
        cols.append(cx - c_ref)
    X = np.stack(cols, axis=1)
    sw = np.sqrt(cw)
    beta, *_ = np.linalg.lstsq(X * sw[:, None], ct * sw, rcond=None)
    resid = ct - X @ beta
    slope = float(beta[2]) if use_ctx else 0.0
    slope_se = 0.0
    if use_ctx:
        # weighted least squares: Var(cell median) ~ s2 / n_cell
        free = len(cells) - X.shape[1]
        if free > 0:
            s2 = float(np.dot(cw, resid**2)) / free
            cov = s2 * np.linalg.pinv((X * cw[:, None]).T @ X)
            slope_se = float(math.sqrt(max(cov[2, 2], 0.0)))
        else:
            slope_se = math.inf
    # lack-of-fit F-test of the affine(+context) model on cell means vs pure replicate error
    lof_p = math.nan
    means = np.empty(len(cells))
    ss_pe = 0.0
    for j, (mv, cv, _, _) in enumerate(cells):
        sel = (mm == mv) & (cc == cv)
        means[j] = float(t[sel].mean())
        ss_pe += float(np.sum((t[sel] - means[j]) ** 2))
    df_pe = int(mm.size) - len(cells)
    df_lof = len(cells) - X.shape[1]
    if df_pe > 0 and df_lof > 0 and ss_pe > 0:
        b2, *_ = np.linalg.lstsq(X * sw[:, None], means * sw, rcond=None)
        ss_lof = float(np.dot(cw, (means - X @ b2) ** 2))
        lof_p = float(stats.f.sf((ss_lof / df_lof) / (ss_pe / df_pe), df_lof, df_pe))
    ms = np.unique(mm)
    table = np.empty(ms.size)
    for j, mv in enumerate(ms):
        sel = cm == mv
        shifted = ct[sel] - slope * (cx[sel] - c_ref)
        table[j] = float(np.average(shifted, weights=cw[sel]))
    rel = resid / np.maximum(ct, 1e-300)
    return CostFit(
        name=name, ms=ms, table=table, base=float(beta[0]), per_token=float(beta[1]),
        context_slope=slope, context_slope_se=slope_se, reference_context=c_ref,
        contexts=contexts, n_samples=int(mm.size),
        residual_rel_sd=float(math.sqrt(np.dot(cw, rel**2) / cw.sum())),
        cells=tuple(cells), lack_of_fit_p=lof_p,
    )


def build_cascade(names, cost_curves, laws, thresholds, *, policy: str = "accumulate",
                  name: str = "cascade") -> Cascade:
    """A :class:`Cascade` from fitted pieces (target first). ``cost_curves`` are
    :class:`CostCurve` or :class:`CostFit` (its median table at the reference context)."""
    models = []
    for i, (nm, c) in enumerate(zip(names, cost_curves, strict=True)):
        if isinstance(c, CostFit):
            c = c.curve()
        if not isinstance(c, CostCurve):
            raise PolyspecInputError(f"cost_curves[{i}]", "must be a CostCurve or CostFit")
        models.append(Model(str(nm), c))
    laws = tuple(f.law if isinstance(f, FitResult) else f for f in laws)
    return Cascade(tuple(models), laws, tuple(thresholds), policy, name)
