"""A calibration problem (docs/theory.md Part III-B, O2): the cost model with its known values
and unknown parameters, the measured runs, the linear design of P1's time per token in the
cost parameters (:func:`cost_coefficients`) and acceptance laws from measured mean lengths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

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
from polyspec_theory.errors import PolyspecInputError, as_int, as_real, require_keys
from polyspec_theory.schemes import predict

__all__ = [
    "PARAMETERS",
    "CostModel",
    "Run",
    "CalibrationProblem",
    "cost_coefficients",
    "acceptance_from_taus",
    "problem_from_config",
    "FIT",
]


PARAMETERS = ("base", "per_token", "overhead")
FIT = "fit"  # the config value that marks an unknown parameter
MAX_RUNS = 10_000


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
