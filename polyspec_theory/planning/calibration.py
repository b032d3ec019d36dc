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
from scipy import optimize, stats

from polyspec_theory.core.config import (
    MAX_THRESHOLD,
    POLICIES,
    Cascade,
    Model,
    acceptance_from_config,
    law_from_config,
)
from polyspec_theory.core.costs import CostCurve, cost_from_config
from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric, Positional
from polyspec_theory.core.polybasic import predict
from polyspec_theory.errors import PolyspecInputError, as_int, as_real, require_keys

__all__ = [
    "PARAMETERS",
    "CostModel",
    "Run",
    "CalibrationProblem",
    "Calibration",
    "ThresholdChoice",
    "cost_coefficients",
    "acceptance_from_taus",
    "calibrate",
    "choose_threshold",
    "problem_from_config",
    "FIT",
]

PARAMETERS = ("base", "per_token", "overhead")
FIT = "fit"  # the config value that marks an unknown parameter
MAX_RUNS = 10_000
DEFAULT_DRAWS = 4000


# ------------------------------------------------------------------------------------------
# the cost model: known values and unknown parameters per model
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """Per model (target first): a known cost curve (``curves[i]``, any kind) or affine
    ``b + k (m - 1)`` with each of ``b``, ``k`` known (``values``) or unknown; the per-round
    overhead known or unknown. ``unknown`` lists ``(model index, parameter)`` pairs."""

    names: tuple[str, ...]
    curves: tuple[CostCurve | None, ...]  # a fully known curve, or None (affine, see values)
    values: tuple[dict, ...]  # per model: {"base": v, "per_token": v, "overhead": v} known
    unknown: tuple[tuple[int, str], ...]

    @property
    def n(self) -> int:
        return len(self.names)

    def label(self, j: int) -> str:
        i, p = self.unknown[j]
        return f"{self.names[i]}.{p}"

    def models(self, beta=None) -> tuple[Model, ...]:
        """The models with ``beta`` filled in for the unknowns (negative values clamped to 0,
        so that every curve is a valid cost)."""
        vals = [dict(v) for v in self.values]
        if beta is not None:
            for (i, p), b in zip(self.unknown, beta, strict=True):
                vals[i][p] = max(float(b), 0.0)
        out = []
        for i, nm in enumerate(self.names):
            curve = self.curves[i]
            if curve is None:
                curve = CostCurve.affine(vals[i].get("base", 0.0), vals[i].get("per_token", 0.0))
            out.append(Model(nm, curve, vals[i].get("overhead", 0.0) if i < self.n - 1 else 0.0))
        return tuple(out)


def _cost_model_from_config(models_cfg) -> CostModel:
    if not isinstance(models_cfg, list) or len(models_cfg) < 2:
        raise PolyspecInputError("models", "must be a list of at least 2 models, target first")
    names, curves, values, unknown = [], [], [], []
    for i, m in enumerate(models_cfg):
        f = f"models[{i}]"
        require_keys(m, f, required=["name"], optional=["cost", "overhead"])
        nm = m["name"]
        if not isinstance(nm, str) or not nm or nm in names:
            raise PolyspecInputError(f"{f}.name", "must be a non-empty, unique string")
        names.append(nm)
        vals = {}
        cost = m.get("cost", FIT)
        curve = None
        if cost == FIT:
            unknown.append((i, "base"))
            vals["per_token"] = 0.0
        elif isinstance(cost, dict) and "table" not in cost:
            require_keys(cost, f"{f}.cost", required=["base"], optional=["per_token"])
            for p in ("base", "per_token"):
                v = cost.get(p, 0.0)
                if v == FIT:
                    unknown.append((i, p))
                else:
                    vals[p] = as_real(v, f"{f}.cost.{p}", low=0.0)
        else:
            curve = cost_from_config(cost, f"{f}.cost")
        over = m.get("overhead", 0.0)
        if over == FIT:
            if i == len(models_cfg) - 1:
                raise PolyspecInputError(f"{f}.overhead", "the last model verifies nothing: "
                                         "it has no per-round overhead to fit")
            unknown.append((i, "overhead"))
        else:
            vals["overhead"] = as_real(over, f"{f}.overhead", low=0.0)
            if vals["overhead"] and i == len(models_cfg) - 1:
                raise PolyspecInputError(f"{f}.overhead", "the last model verifies nothing, so "
                                         "it has no verification rounds")
        if i == len(models_cfg) - 1 and (i, "per_token") in unknown:
            raise PolyspecInputError(f"{f}.cost.per_token", "the last model only runs "
                                     "single-token forwards: its growth per position cannot be "
                                     "fitted")
        curves.append(curve)
        values.append(vals)
    if not unknown:
        raise PolyspecInputError("models", "no parameter marked \"fit\": nothing to calibrate")
    if (0, "base") in unknown:
        raise PolyspecInputError("models[0].cost.base", "the target's T_1(1) must be known (it "
                                 "is the autoregressive time per token, the speedup baseline)")
    if curves[0] is None and "base" in values[0] and values[0]["base"] <= 0:
        raise PolyspecInputError("models[0].cost.base", "the target's T_1(1) must be > 0")
    return CostModel(tuple(names), tuple(curves), tuple(values), tuple(unknown))


# ------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One measured (or to-be-predicted) configuration. ``taus[i]``: the mean acceptance
    length given for pair i (None when a law was given), at ``thresholds[i]``."""

    name: str
    thresholds: tuple[int, ...]
    laws: tuple[AcceptanceLaw, ...]
    time_per_token: float | None
    sd: float | None = None
    taus: tuple[float | None, ...] = ()
    holdout: bool = False


def _run_from_config(r, i: int, n: int, unit_scale) -> Run:
    f = f"runs[{i}]"
    require_keys(r, f, required=["thresholds", "acceptance"],
                 optional=["name", "time_per_token", "tokens_per_s", "time_per_token_sd",
                           "holdout", "description"])
    th = r["thresholds"]
    if not isinstance(th, list) or len(th) != n - 1:
        raise PolyspecInputError(f"{f}.thresholds", f"must be a list of {n - 1} threshold(s)")
    th = tuple(as_int(t, f"{f}.thresholds[{k}]", low=1, high=MAX_THRESHOLD)
               for k, t in enumerate(th))
    acc = r["acceptance"]
    if not isinstance(acc, list) or len(acc) != n - 1:
        raise PolyspecInputError(f"{f}.acceptance", f"must be a list of {n - 1} law(s)")
    laws, taus = [], []
    for k, a in enumerate(acc):
        laws.append(acceptance_from_config(a, th[k], f"{f}.acceptance[{k}]"))
        is_tau = isinstance(a, dict) and "tau" in a and "threshold" not in a
        taus.append(float(a["tau"]) if is_tau else None)
    if "time_per_token" in r and "tokens_per_s" in r:
        raise PolyspecInputError(f"{f}.tokens_per_s", "give time_per_token or tokens_per_s, "
                                 "not both")
    y = None
    if "time_per_token" in r:
        y = as_real(r["time_per_token"], f"{f}.time_per_token", low=0.0, low_open=True)
    elif "tokens_per_s" in r:
        tps = as_real(r["tokens_per_s"], f"{f}.tokens_per_s", low=0.0, low_open=True)
        y = unit_scale / tps
    sd = None
    if "time_per_token_sd" in r:
        sd = as_real(r["time_per_token_sd"], f"{f}.time_per_token_sd", low=0.0, low_open=True)
    hold = r.get("holdout", False)
    if not isinstance(hold, bool):
        raise PolyspecInputError(f"{f}.holdout", "must be true or false")
    if y is None and not hold:
        raise PolyspecInputError(f"{f}.time_per_token", "missing (a run used for the fit needs "
                                 "its measured time per token or tokens_per_s)")
    name = r.get("name", f"run {i + 1}")
    if not isinstance(name, str):
        raise PolyspecInputError(f"{f}.name", "must be a string")
    return Run(name, th, tuple(laws), y, sd, tuple(taus), hold)


_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class CalibrationProblem:
    """What ``polyspec calibrate`` reads (see :func:`problem_from_config`)."""

    costs: CostModel
    runs: tuple[Run, ...]
    policy: str = "accumulate"
    time_unit: str | None = None
    name: str = "calibration"
    resolution_time: float | None = None  # rounding step of measured times per token
    resolution_tau: float | None = None  # rounding step of the tau inputs
    autoregressive: float | None = None  # measured autoregressive time per token
    acceptance: tuple[AcceptanceLaw, ...] | None = None  # laws for unmeasured thresholds
    max_threshold: int = 16
    engine_best: int | None = None

    @property
    def fit_runs(self) -> tuple[Run, ...]:
        return tuple(r for r in self.runs if not r.holdout)

    @property
    def t_ar(self) -> float:
        """The speedup baseline: the measured autoregressive time per token, else ``T_1(1)``."""
        return self.autoregressive if self.autoregressive is not None else (
            self.costs.models()[0].cost.t1)


def problem_from_config(cfg) -> CalibrationProblem:
    """Parse a runs mapping::

        {"time_unit": "ms",
         "models": [{"name": "target", "cost": {"base": 7.07}, "overhead": "fit"},
                    {"name": "drafter", "cost": "fit"}],
         "runs": [{"name": "K=2", "thresholds": [2], "acceptance": [{"tau": 2.1}],
                   "time_per_token": 4.37}, ...,
                  {"name": "K=3", ..., "holdout": true}],
         "resolution": {"time_per_token": 0.01, "tau": 0.01}}

    ``"fit"`` marks an unknown parameter: a model's whole ``cost`` (constant per forward),
    ``cost.base`` / ``cost.per_token``, or ``overhead``. The target's ``T_1(1)`` must be
    known (``models[0].cost`` or ``autoregressive.time_per_token``). Optional:
    ``autoregressive`` (``{"time_per_token": t}`` or ``{"tokens_per_s": r}``: the speedup
    baseline), ``acceptance`` (laws per pair for unmeasured thresholds; default: fitted to the
    runs' taus), ``max_threshold`` (threshold search, default 16), ``policy``, ``name``,
    ``description``, ``engine_best`` (the threshold the engine's authors found best)."""
    if not isinstance(cfg, dict):
        raise PolyspecInputError("runs", "must be an object/mapping")
    require_keys(cfg, "", required=["models", "runs"],
                 optional=["name", "description", "time_unit", "policy", "resolution",
                           "autoregressive", "acceptance", "max_threshold", "engine_best"])
    unit = cfg.get("time_unit")
    if unit is not None and (not isinstance(unit, str) or not unit.strip()):
        raise PolyspecInputError("time_unit", "must be a non-empty string")
    unit_scale = 1.0 / _UNIT_SECONDS.get(unit, 1.0) if unit in _UNIT_SECONDS else 1.0
    mc = cfg["models"]
    models_cfg = mc
    t_ar = None
    if "autoregressive" in cfg:
        ar = cfg["autoregressive"]
        require_keys(ar, "autoregressive", required=[], optional=["time_per_token",
                                                                  "tokens_per_s"])
        if len(ar) != 1:
            raise PolyspecInputError("autoregressive", "give time_per_token or tokens_per_s")
        if "time_per_token" in ar:
            t_ar = as_real(ar["time_per_token"], "autoregressive.time_per_token", low=0.0,
                           low_open=True)
        else:
            t_ar = unit_scale / as_real(ar["tokens_per_s"], "autoregressive.tokens_per_s",
                                        low=0.0, low_open=True)
        if isinstance(mc, list) and mc and isinstance(mc[0], dict) and "cost" not in mc[0]:
            models_cfg = [{**mc[0], "cost": {"base": t_ar}}] + list(mc[1:])
    costs = _cost_model_from_config(models_cfg)
    runs_cfg = cfg["runs"]
    if not isinstance(runs_cfg, list) or not runs_cfg:
        raise PolyspecInputError("runs", "must be a non-empty list of measured runs")
    if len(runs_cfg) > MAX_RUNS:
        raise PolyspecInputError("runs", f"at most {MAX_RUNS} runs")
    runs = tuple(_run_from_config(r, i, costs.n, unit_scale) for i, r in enumerate(runs_cfg))
    names = [r.name for r in runs]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise PolyspecInputError("runs", f"duplicate run name(s): {', '.join(dup)}")
    res_t = res_tau = None
    if "resolution" in cfg:
        res = require_keys(cfg["resolution"], "resolution", required=[],
                           optional=["time_per_token", "tau"])
        if "time_per_token" in res:
            res_t = as_real(res["time_per_token"], "resolution.time_per_token", low=0.0,
                            low_open=True)
        if "tau" in res:
            res_tau = as_real(res["tau"], "resolution.tau", low=0.0, low_open=True)
    policy = cfg.get("policy", "accumulate")
    if policy not in POLICIES:
        raise PolyspecInputError("policy", f"must be one of {POLICIES}, got {policy!r}")
    acc = None
    if "acceptance" in cfg:
        a = cfg["acceptance"]
        if not isinstance(a, list) or len(a) != costs.n - 1:
            raise PolyspecInputError("acceptance", f"must be a list of {costs.n - 1} law(s)")
        acc = tuple(law_from_config(x, f"acceptance[{i}]") for i, x in enumerate(a))
    mt = as_int(cfg.get("max_threshold", 16), "max_threshold", low=1, high=256)
    eb = cfg.get("engine_best")
    eb = None if eb is None else as_int(eb, "engine_best", low=1)
    name = cfg.get("name", "calibration")
    if not isinstance(name, str):
        raise PolyspecInputError("name", "must be a string")
    return CalibrationProblem(costs, runs, policy, unit, name, res_t, res_tau, t_ar, acc, mt,
                              eb)


# ------------------------------------------------------------------------------------------
# the design: tau_1 = known + x . beta
# ------------------------------------------------------------------------------------------
def cost_coefficients(costs: CostModel, laws, thresholds, policy: str = "accumulate"):
    """``(known, x)``: P1's time per token of the cascade with ``laws`` and ``thresholds`` is
    ``known + x . beta`` for the unknown parameters ``beta`` of ``costs`` (exact: P1 is
    linear in the costs and overheads given the laws and thresholds)."""
    if not isinstance(costs, CostModel):
        raise PolyspecInputError("costs", "must be a CostModel (problem_from_config(...).costs)")
    n = costs.n
    if isinstance(laws, (str, bytes)) or not hasattr(laws, "__len__") or len(laws) != n - 1:
        raise PolyspecInputError("laws", f"must be {n - 1} acceptance law(s), one per pair")
    laws = tuple(law if isinstance(law, AcceptanceLaw) else law_from_config(law, f"laws[{k}]")
                 for k, law in enumerate(laws))
    if isinstance(thresholds, (str, bytes)) or not hasattr(thresholds, "__len__"):
        raise PolyspecInputError("thresholds", f"must be a list of {n - 1} integer(s)")
    unit = Cascade(tuple(Model(nm, CostCurve.constant(1.0)) for nm in costs.names),
                   laws, tuple(thresholds), policy)
    pred = predict(unit)
    lv = pred.levels
    vals = costs.values
    known = 0.0
    coef = {}
    for i in range(n):
        f = lv[i].forwards_per_token
        if i < n - 1:
            g = lv[i].block_pmf
            gs = np.arange(g.size)
            mean_g = float(np.dot(gs, g))
            if costs.curves[i] is not None:
                nz = g > 0
                known += f * float(np.dot(g[nz], costs.curves[i](gs[nz] + 1)))
            else:
                coef[(i, "base")] = f
                coef[(i, "per_token")] = f * mean_g
            coef[(i, "overhead")] = f
        else:
            if costs.curves[i] is not None:
                known += f * costs.curves[i].t1
            else:
                coef[(i, "base")] = f
                coef[(i, "per_token")] = 0.0
        for p in PARAMETERS:
            if (i, p) in coef and (i, p) not in costs.unknown:
                known += coef[(i, p)] * vals[i].get(p, 0.0)
    x = np.array([coef.get(u, 0.0) for u in costs.unknown])
    return known, x


# ------------------------------------------------------------------------------------------
# acceptance at unmeasured thresholds
# ------------------------------------------------------------------------------------------
def acceptance_from_taus(points, field: str = "tau") -> AcceptanceLaw:
    """A law from mean acceptance lengths ``points = [(threshold, tau), ...]`` (``tau = E[L |
    cap threshold]``, bonus token included). One distinct threshold: the iid law with that
    capped mean. ``r >= 2`` distinct thresholds: the positional law with ``r`` hazards
    ``alpha_1..alpha_{r-1}`` for positions ``1..r-1`` and ``alpha_r`` for every later
    position, by least squares on the capped means (exact when a law fits; hazards in
    ``[0, 1]``)."""
    if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
        raise PolyspecInputError(field, "must be a list of (threshold, tau) pairs")
    pts = []
    for j, pt in enumerate(points):
        if isinstance(pt, (str, bytes)) or not hasattr(pt, "__len__") or len(pt) != 2:
            raise PolyspecInputError(f"{field}[{j}]", f"must be a (threshold, tau) pair, got "
                                     f"{pt!r}")
        pts.append((as_int(pt[0], f"{field}[{j}].threshold", low=1, high=MAX_THRESHOLD),
                    as_real(pt[1], f"{field}[{j}].tau", low=1.0)))
    if not pts:
        raise PolyspecInputError(field, "no mean acceptance length to fit")
    for g, t in pts:
        if t > g + 1:
            raise PolyspecInputError(field, f"tau {t} exceeds threshold + 1 = {g + 1}")
    distinct = sorted({g for g, _ in pts})
    if len(distinct) == 1:
        g = distinct[0]
        return IIDGeometric.from_mean(float(np.mean([t for _, t in pts])) - 1.0, g)
    return Positional(_positional_from_taus(np.array([g for g, _ in pts]),
                                            np.array([t for _, t in pts], dtype=float),
                                            len(distinct)))


def _positional_from_taus(gs: np.ndarray, ts: np.ndarray, r: int) -> np.ndarray:
    """Least-squares hazards ``alpha_1..alpha_r`` for the capped means ``ts`` at thresholds
    ``gs``. For a fixed tail hazard ``a = alpha_r`` the means are linear in the survivals
    ``S_1 >= .. >= S_{r-1}``: ``tau(g) - 1 = sum_{k <= min(g, r-1)} S_k + S_{r-1} sum_{m=1}^{g-r+1}
    a^m``; writing ``S = U d`` with ``d >= 0`` (``U`` upper-triangular ones, ``sum d = S_1 <=
    1``) makes the inner problem a non-negative least squares, and ``a`` is profiled out on
    a grid refined by a bounded scalar search (global on ``[0, 1]``; no local minimum traps
    it). When several laws give the same means (thresholds all ``>= r``) one of them."""
    y = ts - 1.0
    base = (gs[:, None] >= np.arange(1, r)[None, :]).astype(float)
    upper = np.triu(np.ones((r - 1, r - 1)))
    m = np.maximum(gs - r + 1, 0)

    def inner(a: float):
        x = base.copy()
        if a == 1.0:
            x[:, r - 2] += m
        elif a > 0.0:  # a (1 - a^m) / (1 - a), stable near a = 1
            x[:, r - 2] += a * -np.expm1(m * math.log(a)) / (1.0 - a)
        design = x @ upper
        d = optimize.nnls(design, y)[0]
        if d.sum() > 1.0:  # S_1 <= 1 binds: enforce sum(d) = 1 by a heavily weighted row
            w = 1e8 * max(1.0, float(np.abs(design).max()))
            d = optimize.nnls(np.vstack([design, np.full(r - 1, w)]), np.append(y, w))[0]
        return d, float(np.sum((design @ d - y) ** 2))

    grid = np.linspace(0.0, 1.0, 101)
    losses = [inner(a)[1] for a in grid]
    i = int(np.argmin(losses))
    res = optimize.minimize_scalar(lambda a: inner(a)[1], method="bounded",
                                   bounds=(grid[max(i - 1, 0)], grid[min(i + 1, 100)]),
                                   options={"xatol": 1e-14})
    tail = float(res.x) if res.fun <= losses[i] else float(grid[i])
    surv = upper @ inner(tail)[0]
    prev = np.concatenate([[1.0], surv[:-1]])
    hazards = np.divide(surv, prev, out=np.zeros(r - 1), where=prev > 0.0)
    return np.clip(np.append(hazards, tail), 0.0, 1.0)


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
        # propagate the rounding of the tau inputs of the fit runs: d beta / d tau_r
        jac = []
        for ri, r in enumerate(fit):
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
                jac.append((bs[1] - bs[0]) / (hi - lo))
                effects.append((ri, k, jac[-1]))
        for j in jac:
            cov = cov + np.outer(j, j) * st * st
        if jac:
            uncertainty += "; plus the rounding of the tau inputs (resolution / sqrt(12))"
    acc_model, acc_src = _acceptance_model(problem)
    cal = Calibration(problem, labels, beta, cov, dof, chi2, scale, uncertainty, (), (), (),
                      acc_model, acc_src, tuple(warnings), cov_y, tuple(effects))
    preds, preds_acc = [], []
    for r in problem.runs:
        v, sd = cal.predict_run(r.laws, r.thresholds, r.taus)
        preds.append(RunPrediction(r.name, r.thresholds, v, sd, r.time_per_token, r.holdout,
                                   "measured"))
        if any(t is not None for t in r.taus):
            v2, sd2 = _predict_with_model(cal, r.thresholds)
            preds_acc.append(RunPrediction(r.name, r.thresholds, v2, sd2, r.time_per_token,
                                           r.holdout, "predicted"))
    loo = []
    if m - 1 >= p:
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
    return Calibration(problem, labels, beta, cov, dof, chi2, scale, uncertainty, tuple(preds),
                       tuple(preds_acc), tuple(loo), acc_model, acc_src, tuple(warnings), cov_y,
                       tuple(effects))


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
    """Two-sided Student-t quantile (normal when ``dof`` is 0: known measurement errors)."""
    if dof <= 0:
        return float(stats.norm.isf((1 - level) / 2))
    return float(stats.t.isf((1 - level) / 2, dof))
