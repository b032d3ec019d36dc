"""Calibration of unknown cost parameters from measured runs (pure numerics, no I/O).

**Model (docs/theory.md Part III-B, O2).** P1 with per-round overheads gives the time per
token of a cascade as ``tau_1 = sum_{i<n} F_i (E[T_i(G_i + 1)] + o_i) + F_n T_n(1)`` where
``F_i`` (forwards of ``M_i`` per generated token) and the block laws ``G_i`` depend only on
the acceptance laws and thresholds, not on the costs. With affine costs ``T_i(m) = b_i +
k_i (m - 1)``::

    tau_1 = sum_i F_i b_i + sum_{i<n} F_i E[G_i] k_i + sum_{i<n} F_i o_i,

linear in the cost parameters ``(b_i, k_i, o_i)``. Each measured run r (thresholds,
acceptance, measured time per token ``y_r``) is one linear equation ``y_r = c_r + x_r . beta``
in the unknown parameters ``beta`` (``c_r``: the known parameters' part); ordinary (or, with
measurement standard deviations, weighted) least squares gives ``beta`` with covariance
``(X' W X)^-1`` (scaled by ``chi2 / dof`` when that exceeds 1, or ``s^2 (X'X)^-1`` when the
measurement errors are unknown). Rounded acceptance inputs (``tau``) are propagated by the
derivative of ``beta`` with respect to each ``tau``. Two columns that are proportional in
every run (for two models: the drafter's cost per forward and the growth of the verify
cost per position, both ``theta / E[L]``) cannot be told apart: that is reported as an
error naming both.

Predictions for unmeasured thresholds need the acceptance there: given as a law, or fitted
to the runs' ``tau`` values (:func:`acceptance_from_taus`: one ``tau`` -> the iid law with
that capped mean; ``r`` taus at distinct thresholds -> the positional law with ``r``
hazards: one per position ``1..r-1``, the last one repeating).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from polyspec_theory.core.config import (
    MAX_THRESHOLD,
    Cascade,
    Model,
)
from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from polyspec_theory.planning.calibration_problem import (
    CalibrationProblem,
    Run,
    acceptance_from_taus,
    cost_coefficients,
)

__all__ = [
    "Calibration",
    "ThresholdChoice",
    "calibrate",
    "choose_threshold",
]

DEFAULT_DRAWS = 4000


# ------------------------------------------------------------------------------------------
# the fit
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunPrediction:
    name: str
    thresholds: tuple[int, ...]
    predicted: float
    sd: float | None
    measured: float | None
    holdout: bool
    acceptance: str  # "measured" (the run's own) or "predicted" (the acceptance model)

    @property
    def relative_error(self) -> float | None:
        return None if self.measured is None else self.predicted / self.measured - 1.0

    def to_dict(self) -> dict:
        return {"name": self.name, "thresholds": list(self.thresholds),
                "predicted": self.predicted, "sd": self.sd, "measured": self.measured,
                "relative_error": self.relative_error, "holdout": self.holdout,
                "acceptance": self.acceptance}


@dataclass(frozen=True)
class ThresholdChoice:
    """The best threshold vector with its predicted time per token and speedup;
    ``probability_best``: share of draws of the fitted cost parameters (normal, their
    covariance; the acceptance at each candidate held fixed) in which it stays the best;
    ``runner_up`` and the predicted gap ``tau_runner_up / tau_best - 1`` with its standard
    deviation."""

    thresholds: tuple[int, ...]
    time_per_token: float
    speedup: float
    probability_best: float | None
    probability_within: float | None  # P(its tau is within `within` of the best draw)
    within: float
    runner_up: tuple[int, ...] | None
    gap: float | None
    gap_sd: float | None
    candidates: tuple[tuple[tuple[int, ...], float, float | None], ...]  # (th, tau, P(best))

    def to_dict(self) -> dict:
        return {
            "thresholds": list(self.thresholds),
            "time_per_token": self.time_per_token,
            "speedup": self.speedup,
            "probability_best": self.probability_best,
            f"probability_within_{100 * self.within:g}_percent": self.probability_within,
            "runner_up": None if self.runner_up is None else list(self.runner_up),
            "gap": self.gap,
            "gap_sd": self.gap_sd,
            "candidates": [{"thresholds": list(t), "time_per_token": v, "probability_best": p}
                           for t, v, p in self.candidates],
        }


@dataclass(frozen=True)
class Calibration:
    """Fitted unknown parameters (``estimates``, ``covariance``), residuals, leave-one-out,
    predictions of every run (own acceptance) and, for runs with ``tau`` inputs, with the
    acceptance predicted from the fit runs."""

    problem: CalibrationProblem
    labels: tuple[str, ...]
    estimates: np.ndarray
    covariance: np.ndarray | None
    dof: int
    chi2: float | None
    scale: float
    uncertainty: str
    runs: tuple[RunPrediction, ...]
    runs_predicted_acceptance: tuple[RunPrediction, ...]
    loo: tuple[dict, ...]
    acceptance_model: tuple[AcceptanceLaw, ...]
    acceptance_source: str
    warnings: tuple[str, ...] = field(default=())
    cov_y: np.ndarray | None = field(default=None, repr=False)  # from the measured times
    tau_effects: tuple = field(default=(), repr=False)  # ((run index, pair, d beta / d tau),)

    @property
    def sd(self) -> np.ndarray | None:
        return None if self.covariance is None else np.sqrt(np.maximum(np.diag(
            self.covariance), 0.0))

    def models(self) -> tuple[Model, ...]:
        return self.problem.costs.models(self.estimates)

    def cascade(self, thresholds, laws=None) -> Cascade:
        """The calibrated cascade at ``thresholds`` (acceptance: ``laws`` or the model)."""
        laws = self.acceptance_model if laws is None else tuple(laws)
        return Cascade(self.models(), laws, tuple(thresholds), self.problem.policy,
                       self.problem.name, time_unit=self.problem.time_unit)

    def predict_run(self, laws, thresholds, taus=(), *, model_acceptance: bool = False
                    ) -> tuple[float, float | None]:
        """Predicted time per token and its standard deviation: the measured times' part of
        the parameter covariance, plus (with a tau resolution) the rounding of every fit run's
        tau (through the parameters and, with ``model_acceptance``, through the acceptance
        model fitted to them) and of this run's own tau inputs."""
        known, x = cost_coefficients(self.problem.costs, laws, thresholds, self.problem.policy)
        y = known + float(x @ self.estimates)
        if self.cov_y is None:
            return y, None
        var = float(x @ self.cov_y @ x)
        st = _tau_sd(self.problem)
        if st is not None:
            fit = self.problem.fit_runs
            for ri, k, dbeta in self.tau_effects:
                d = float(x @ dbeta)
                if model_acceptance and self.acceptance_source.startswith("pair"):
                    d += _d_model(self, thresholds, fit[ri], k)
                var += d * d * st * st
            for k, t in enumerate(taus):
                if t is None:
                    continue
                d = _d_dtau(self, laws, thresholds, k, t)
                var += d * d * st * st
        return y, math.sqrt(max(var, 0.0))


def _tau_sd(problem) -> float | None:
    return None if problem.resolution_tau is None else problem.resolution_tau / math.sqrt(12.0)


def _y_sd(problem, run: Run) -> float | None:
    if run.sd is not None:
        return run.sd
    if problem.resolution_time is not None:
        return problem.resolution_time / math.sqrt(12.0)
    return None


def _laws_with_tau(run_laws, thresholds, k: int, tau: float):
    laws = list(run_laws)
    laws[k] = IIDGeometric.from_mean(min(max(tau - 1.0, 0.0), thresholds[k]), thresholds[k])
    return tuple(laws)


def _d_dtau(cal: Calibration, laws, thresholds, k: int, tau: float) -> float:
    eps = 1e-5
    g = thresholds[k]
    lo, hi = max(tau - eps, 1.0), min(tau + eps, g + 1.0)
    if hi <= lo:
        return 0.0
    ys = []
    for t in (lo, hi):
        kn, x = cost_coefficients(cal.problem.costs, _laws_with_tau(laws, thresholds, k, t),
                                  thresholds, cal.problem.policy)
        ys.append(kn + float(x @ cal.estimates))
    return (ys[1] - ys[0]) / (hi - lo)


def _d_model(cal: Calibration, thresholds, run: Run, k: int) -> float:
    """d(prediction with the acceptance model)/d(tau of ``run`` at pair ``k``), parameters
    fixed: the acceptance model refitted with that tau moved."""
    eps = 1e-4
    t = run.taus[k]
    g = run.thresholds[k]
    lo, hi = max(t - eps, 1.0), min(t + eps, g + 1.0)
    ys = []
    for tt in (lo, hi):
        fit = [r if r is not run else Run(r.name, r.thresholds, r.laws, r.time_per_token, r.sd,
                                          tuple(tt if j == k else x
                                                for j, x in enumerate(r.taus)), r.holdout)
               for r in cal.problem.fit_runs]
        laws = list(cal.acceptance_model)
        pts = [(r.thresholds[k], r.taus[k]) for r in fit if r.taus[k] is not None]
        laws[k] = acceptance_from_taus(pts)
        kn, x = cost_coefficients(cal.problem.costs, laws, thresholds, cal.problem.policy)
        ys.append(kn + float(x @ cal.estimates))
    return (ys[1] - ys[0]) / (hi - lo)


def _design(problem: CalibrationProblem, runs):
    rows, c = [], []
    for r in runs:
        kn, x = cost_coefficients(problem.costs, r.laws, r.thresholds, problem.policy)
        rows.append(x)
        c.append(kn)
    return np.array(rows, dtype=np.float64).reshape(len(runs), -1), np.array(c)


def _check_identifiable(problem, X, labels) -> None:
    p = X.shape[1]
    if X.shape[0] < p:
        raise PolyspecInputError(
            "runs", f"{X.shape[0]} run(s) used for the fit cannot determine {p} unknown "
            f"parameter(s) ({', '.join(labels)}): add runs or give values")
    scale = np.linalg.norm(X, axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale
    sv = np.linalg.svd(Xs, compute_uv=True)
    s = sv[1]
    if s[-1] > 1e-9 * s[0]:
        return
    null = sv[2][-1]
    involved = [labels[j] for j in np.flatnonzero(np.abs(null) > 1e-6)]
    zero = [labels[j] for j in range(p) if np.linalg.norm(X[:, j]) == 0]
    if zero:
        raise PolyspecInputError("runs", f"{', '.join(zero)}: no run depends on it; give its "
                                 "value")
    raise PolyspecInputError(
        "runs", f"the unknown parameters {' and '.join(involved)} cannot be told apart from "
        "these runs (their coefficients are proportional in every run: e.g. for two models the "
        "drafter's cost per forward and the verify cost's growth per position both enter as "
        "theta / E[L]); give one of them a value")


def _solve(X, y, w):
    """Weighted least squares with every parameter >= 0 (costs and overheads are times):
    the unconstrained solution when it is non-negative, else bounded-variable least squares
    (exact, active set)."""
    sw = np.sqrt(w)
    a, b = X * sw[:, None], y * sw
    beta, *_ = np.linalg.lstsq(a, b, rcond=None)
    if (beta >= 0).all():
        return beta
    res = optimize.lsq_linear(a, b, bounds=(0.0, np.inf), method="bvls", tol=1e-15)
    return np.maximum(res.x, 0.0)


def calibrate(problem: CalibrationProblem) -> Calibration:
    """Least squares of the unknown cost parameters on the fit runs (module docstring), with
    uncertainty, leave-one-out errors and predictions of every run."""
    if not isinstance(problem, CalibrationProblem):
        raise PolyspecInputError("problem", "must be a CalibrationProblem "
                                 "(problem_from_config)")
    fit = problem.fit_runs
    labels = tuple(problem.costs.label(j) for j in range(len(problem.costs.unknown)))
    if not fit:
        raise PolyspecInputError("runs", "every run is a holdout: nothing to fit")
    X, c = _design(problem, fit)
    y = np.array([r.time_per_token for r in fit]) - c
    _check_identifiable(problem, X, labels)
    sds = [_y_sd(problem, r) for r in fit]
    known_sd = all(s is not None for s in sds)
    w = np.array([1.0 / s**2 for s in sds]) if known_sd else np.ones(len(fit))
    beta = _solve(X, y, w)
    resid = y - X @ beta
    m, p = X.shape
    dof = m - p
    warnings = []
    cov, chi2, scale = None, None, 1.0
    free = beta > 0
    if not free.all():
        free_beta, *_ = np.linalg.lstsq(X * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)
        for j in np.flatnonzero(~free):
            warnings.append(f"{labels[j]}: unconstrained least squares gives "
                            f"{free_beta[j]:.4g} < 0; the runs do not support a positive value, "
                            "so it is fixed at 0 (bounded least squares; no interval)")
    xtwx_inv = np.zeros((p, p))
    if free.any():
        xf = X[:, free]
        xtwx_inv[np.ix_(free, free)] = np.linalg.inv((xf * w[:, None]).T @ xf)
    if known_sd:
        chi2 = float(np.sum(w * resid**2))
        cov = xtwx_inv
        uncertainty = ("measurement errors of the times per token (given sd, or the printed "
                       "rounding: step / sqrt(12))")
        if dof > 0 and chi2 / dof > 1.0:
            scale = chi2 / dof
            cov = cov * scale
            uncertainty += f", scaled by chi2/dof = {scale:.3g} (residuals exceed them)"
        if dof == 0:
            warnings.append("as many fit runs as unknowns: the intervals cover the measurement "
                            "rounding only, not the model's misfit (fit more runs for a "
                            "residual check and leave-one-out)")
    elif dof > 0:
        s2 = float(np.sum(resid**2)) / dof
        cov = s2 * xtwx_inv
        uncertainty = "residual variance (no measurement errors given)"
    else:
        uncertainty = ("none: as many runs as unknowns and no measurement error given (add "
                       "'resolution' or time_per_token_sd)")
        warnings.append("no uncertainty: " + uncertainty)
    st = _tau_sd(problem)
    cov_y = cov
    effects = []
    if cov is not None and st is not None:
        effects = _tau_effects(problem, X, y, w)
        for _, _, j in effects:
            cov = cov + np.outer(j, j) * st * st
        if effects:
            uncertainty += "; plus the rounding of the tau inputs (resolution / sqrt(12))"
    acc_model, acc_src = _acceptance_model(problem)
    cal = Calibration(problem, labels, beta, cov, dof, chi2, scale, uncertainty, (), (), (),
                      acc_model, acc_src, tuple(warnings), cov_y, tuple(effects))
    preds, preds_acc = _run_predictions(cal)
    loo = _leave_one_out(fit, X, y, w, c) if m - 1 >= p else []
    return Calibration(problem, labels, beta, cov, dof, chi2, scale, uncertainty, tuple(preds),
                       tuple(preds_acc), tuple(loo), acc_model, acc_src, tuple(warnings), cov_y,
                       tuple(effects))


def _tau_effects(problem: CalibrationProblem, X, y, w) -> list:
    """``(run, pair, d beta / d tau)`` for every tau input of the fit runs (central
    differences): how the rounding of a measured tau moves the fitted parameters."""
    effects = []
    for ri, r in enumerate(problem.fit_runs):
        for k, t in enumerate(r.taus):
            if t is None:
                continue
            eps = 1e-5
            g = r.thresholds[k]
            lo, hi = max(t - eps, 1.0), min(t + eps, g + 1.0)
            bs = []
            for tt in (lo, hi):
                kn, x = cost_coefficients(problem.costs, _laws_with_tau(r.laws, r.thresholds,
                                                                        k, tt),
                                          r.thresholds, problem.policy)
                X2, y2 = X.copy(), y.copy()
                X2[ri] = x
                y2[ri] = r.time_per_token - kn
                bs.append(_solve(X2, y2, w))
            effects.append((ri, k, (bs[1] - bs[0]) / (hi - lo)))
    return effects


def _run_predictions(cal: Calibration):
    """Every run predicted from its measured acceptance, and (runs given as tau) from the
    acceptance model."""
    preds, preds_acc = [], []
    for r in cal.problem.runs:
        v, sd = cal.predict_run(r.laws, r.thresholds, r.taus)
        preds.append(RunPrediction(r.name, r.thresholds, v, sd, r.time_per_token, r.holdout,
                                   "measured"))
        if any(t is not None for t in r.taus):
            v2, sd2 = _predict_with_model(cal, r.thresholds)
            preds_acc.append(RunPrediction(r.name, r.thresholds, v2, sd2, r.time_per_token,
                                           r.holdout, "predicted"))
    return preds, preds_acc


def _leave_one_out(fit, X, y, w, c) -> list[dict]:
    """Each fit run predicted from the others (when they determine the parameters)."""
    m, p = X.shape
    loo = []
    for ri, r in enumerate(fit):
        keep = [j for j in range(m) if j != ri]
        Xk = X[keep]
        if np.linalg.matrix_rank(Xk) < p:
            loo.append({"name": r.name, "predicted": None, "relative_error": None,
                        "note": "the other runs do not determine the parameters"})
            continue
        bk = _solve(Xk, y[keep], w[keep])
        pred = c[ri] + float(X[ri] @ bk)
        loo.append({"name": r.name, "predicted": pred,
                    "relative_error": pred / r.time_per_token - 1.0})
    return loo


def _acceptance_model(problem: CalibrationProblem):
    if problem.acceptance is not None:
        return problem.acceptance, "given (acceptance in the runs file)"
    n = problem.costs.n
    laws, srcs = [], []
    for k in range(n - 1):
        pts = [(r.thresholds[k], r.taus[k]) for r in problem.fit_runs if r.taus[k] is not None]
        given = {repr(r.laws[k].to_config()) for r in problem.fit_runs if r.taus[k] is None}
        if pts and given:
            raise PolyspecInputError(f"acceptance[{k}]", "the fit runs mix tau inputs and laws "
                                     "for this pair: give the acceptance for predictions")
        if pts:
            law = acceptance_from_taus(pts, f"runs.acceptance[{k}].tau")
            laws.append(law)
            srcs.append(f"pair {k}: {law.family} law fitted to tau at thresholds "
                        f"{sorted({g for g, _ in pts})}")
        elif len(given) == 1:
            laws.append(problem.fit_runs[0].laws[k])
            srcs.append(f"pair {k}: the law given in the runs")
        else:
            raise PolyspecInputError(f"acceptance[{k}]", "the fit runs give different laws for "
                                     "this pair: give the acceptance for predictions")
    return tuple(laws), "; ".join(srcs)


def _predict_with_model(cal: Calibration, thresholds):
    return cal.predict_run(cal.acceptance_model, thresholds, model_acceptance=True)


# ------------------------------------------------------------------------------------------
# threshold choice
# ------------------------------------------------------------------------------------------
def _candidates(n: int, max_threshold: int):
    import itertools

    if n - 1 == 1:
        return [(t,) for t in range(1, max_threshold + 1)]
    total = max_threshold ** (n - 1)
    if total > 20_000:
        raise PolyspecInputError("max_threshold", f"{total} threshold vectors to search; "
                                 "lower max_threshold")
    return list(itertools.product(range(1, max_threshold + 1), repeat=n - 1))


def choose_threshold(cal: Calibration, candidates=None, laws_for=None, *, within: float = 0.02,
                     draws: int = DEFAULT_DRAWS, seed: int = 0) -> ThresholdChoice:
    """The threshold vector with the least predicted time per token among ``candidates``
    (default: every vector in ``1..max_threshold``), acceptance from ``laws_for(th)`` (default:
    the calibration's acceptance model). How sure: ``draws`` normal draws of the fitted
    parameters (their covariance; fixed ``seed``) give the probability that the choice stays
    the best and that its time is within ``within`` of the best draw's."""
    if not isinstance(cal, Calibration):
        raise PolyspecInputError("calibration", "must be a Calibration (from calibrate)")
    n1 = cal.problem.costs.n - 1
    if candidates is None:
        cands = _candidates(n1 + 1, cal.problem.max_threshold)
    else:
        cands = []
        for j, t in enumerate(candidates):
            if isinstance(t, (str, bytes)) or not hasattr(t, "__len__") or len(t) != n1:
                raise PolyspecInputError(f"candidates[{j}]", f"must be {n1} threshold(s)")
            cands.append(tuple(as_int(x, f"candidates[{j}]", low=1, high=MAX_THRESHOLD)
                               for x in t))
    if not cands:
        raise PolyspecInputError("candidates", "no threshold vector to choose from")
    within = as_real(within, "within", low=0.0)
    draws = as_int(draws, "draws", low=1, high=1_000_000)
    rows, known = [], []
    for th in cands:
        laws = cal.acceptance_model if laws_for is None else laws_for(th)
        kn, x = cost_coefficients(cal.problem.costs, laws, th, cal.problem.policy)
        rows.append(x)
        known.append(kn)
    X = np.array(rows)
    kn = np.array(known)
    tau = kn + X @ cal.estimates
    order = np.argsort(tau, kind="stable")
    b = int(order[0])
    t_ar = cal.problem.t_ar
    p_best = p_within = gap = gap_sd = None
    probs = [None] * len(cands)
    runner = None
    if len(cands) > 1:
        r2 = int(order[1])
        runner = cands[r2]
        gap = float(tau[r2] / tau[b] - 1.0)
    if cal.covariance is not None:
        rng = np.random.default_rng(as_int(seed, "seed", low=0))
        cov = 0.5 * (cal.covariance + cal.covariance.T)
        sample = rng.multivariate_normal(cal.estimates, cov, size=draws, method="eigh")
        taus = kn[None, :] + sample @ X.T
        winners = np.argmin(taus, axis=1)
        counts = np.bincount(winners, minlength=len(cands))
        probs = [float(x) / draws for x in counts]
        p_best = probs[b]
        p_within = float(np.mean(taus[:, b] <= (1.0 + within) * taus.min(axis=1)))
        if runner is not None:
            # gap = tau_r / tau_b - 1; delta method on the ratio
            grad = (X[r2] * tau[b] - X[b] * tau[r2]) / tau[b] ** 2
            gap_sd = float(math.sqrt(max(grad @ cov @ grad, 0.0)))
    top = [(cands[int(j)], float(tau[int(j)]), probs[int(j)]) for j in order[:10]]
    return ThresholdChoice(cands[b], float(tau[b]), float(t_ar / tau[b]), p_best, p_within,
                           within, runner, gap, gap_sd, tuple(top))


def t_quantile(dof: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile (normal when ``dof`` is 0: known measurement errors):
    ``stats.t.isf`` / ``stats.norm.isf`` at ``(1 - level) / 2``, the same floats, from
    ``scipy.special`` (their ``-stdtrit`` / ``-ndtri`` and the ``* scale + loc`` they apply;
    ``scipy.stats`` takes a second to import)."""
    from scipy import special

    q = (1 - level) / 2
    if not 0 < q < 1:  # the distributions' own edge values (a level of 0 or 1, NaN)
        from scipy import stats

        return float(stats.norm.isf(q) if dof <= 0 else stats.t.isf(q, dof))
    x = -special.ndtri(q) if dof <= 0 else -special.stdtrit(dof, q)
    return float(x * 1.0 + 0.0)
