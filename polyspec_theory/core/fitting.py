"""How well an acceptance law fits measured rounds (docs/theory.md §1.4): the G-test on cells
(cap, accepted) pooled to a least expected count, and a fit's summary (log-likelihood, AIC,
G-test). Fitting every family and choosing the best: :func:`polyspec_theory.core.laws.fit_laws`,
:func:`~polyspec_theory.core.laws.best_fit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import as_real

__all__ = [
    "GoodnessOfFit",
    "FitResult",
    "fit_result",
    "goodness_of_fit",
    "pool_cells",
    "pooled_chi2_terms",
]


@dataclass(frozen=True)
class GoodnessOfFit:
    """G-test on cells (cap, accepted) pooled until every expected count is >= ``min_expected``."""

    statistic: float
    df: int
    p_value: float
    n_cells: int
    min_expected: float


@dataclass(frozen=True)
class FitResult:
    law: Any  # a polyspec_theory.core.laws.AcceptanceLaw (laws import this module)
    loglik: float
    n_params: int
    n: int
    gof: GoodnessOfFit
    aic: float = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "aic", 2 * self.n_params - 2 * self.loglik)

    def to_dict(self) -> dict:
        return {
            "law": self.law.family,
            "params": self.law.to_config(),
            "loglik": self.loglik,
            "aic": self.aic,
            "n_params": self.n_params,
            "n": self.n,
            "g_statistic": self.gof.statistic,
            "gof_df": self.gof.df,
            "gof_p_value": self.gof.p_value,
        }


def pool_cells(expected: np.ndarray, observed: np.ndarray, min_expected: float):
    """Merge consecutive cells until each pooled cell has expected >= min_expected (a short
    remainder joins the last cell); returns ``(expected, observed)`` of the pooled cells."""
    e_out, o_out = [], []
    e_acc = o_acc = 0.0
    for e, o in zip(expected, observed, strict=True):
        e_acc += e
        o_acc += o
        if e_acc >= min_expected:
            e_out.append(e_acc)
            o_out.append(o_acc)
            e_acc = o_acc = 0.0
    if e_acc > 0 or o_acc > 0:
        if e_out:
            e_out[-1] += e_acc
            o_out[-1] += o_acc
        else:
            e_out.append(e_acc)
            o_out.append(o_acc)
    return np.asarray(e_out), np.asarray(o_out)


def pooled_chi2_terms(expected: np.ndarray, observed: np.ndarray, min_expected: float):
    """One row's Pearson chi-square terms: the cells with ``expected > 0``, sorted by expected
    count and pooled by :func:`pool_cells`; returns ``(statistic, df)``, or ``None`` when fewer
    than 2 pooled cells remain (the row adds nothing)."""
    keep = expected > 0
    e, o = expected[keep], observed[keep]
    order_ = np.argsort(e)
    ce, co = pool_cells(e[order_], o[order_], min_expected)
    if len(ce) < 2:
        return None
    return float(np.sum((co - ce) ** 2 / ce)), len(ce) - 1


def goodness_of_fit(law: Any, data, caps=None, *, min_expected: float = 5.0,
                    n_fitted_params: int | None = None) -> GoodnessOfFit:
    """G-test: cells are (cap, k), pooled within each cap until expected counts >= 5.

    ``df = sum over caps (cells - 1) - fitted parameters`` (``NaN`` p-value when df <= 0).
    """
    d = AcceptanceCounts.coerce(data, caps)
    min_expected = as_real(min_expected, "min_expected", low=0.0, low_open=True)
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
    k = law.n_params if n_fitted_params is None else n_fitted_params
    df = cells - groups - k
    from scipy import stats

    p = float(stats.chi2.sf(stat, df)) if df > 0 else float("nan")
    return GoodnessOfFit(statistic=stat, df=int(df), p_value=p, n_cells=cells,
                         min_expected=min_expected)


def fit_result(law: Any, data, caps=None) -> FitResult:
    """``law`` scored on observed rounds: log-likelihood, AIC and G-test."""
    d = AcceptanceCounts.coerce(data, caps)
    return FitResult(law=law, loglik=law.loglik(d), n_params=law.n_params, n=d.n_rounds,
                     gof=goodness_of_fit(law, d))
