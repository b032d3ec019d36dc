"""Predicted vs measured throughput of batched captures, per batch size, and the crossover batch
(``polyspec validate`` on batched traces; docs/theory.md, B0–B6).

Per batched capture (cascade ``C`` at batch ``b``), the B2 prediction
:func:`polyspec_theory.serving.batch.predict_batch` with

* **laws** — each pair's AIC-best law (censored MLE, as :func:`.fits.fit_pairs`) from the
  per-sequence rounds;
* **costs** — ``T_i(b, m)`` per model: a table over ``m`` at the capture's ``b``;
* **orchestration** — time outside forwards, as ``a_b`` per forward (measured on the batched
  autoregressive runs: their time per step outside the forward) plus ``o_b`` per batched
  verification (the cascade's remaining time outside forwards per verification round),
  entered as ``T_i(b, m) + a_b`` and B2's per-round overhead ``o_b``; the autoregressive
  baseline is ``T_1(b, 1) + a_b``.

The predicted speedup ``(T_1(b,1) + a_b) / tau_b`` and throughput ``b / tau_b`` are compared
with the measured ones (:class:`validation.traces.batch.BatchCapture`). Variants:

``predictive`` (the prediction: nothing of the predicted capture goes in)
    laws pooled over the OTHER captures with the same pairs (the same cascade at the other
    batch sizes, other cascades, and single-stream traces given as ``law_captures``); costs
    from a separate batched profile (``profile``: ``polyspec profile --batch``) or else from
    the batched cost samples (``bcost``) of the other captures at the same ``b``, at the
    context the settings imply (prompt + half the tokens), times each model's in-cascade
    factor (how much slower it ran inside the same cascade at the OTHER batch sizes than in
    the profile: models share the CPU caches, docs/README) — learned elsewhere, as the
    single-stream predictive variant does; ``a_b``, ``o_b`` from the other captures at the
    same ``b`` (0 if there are none, noted). Pure B0: no catch-up positions.
``predictive_microbenchmark``
    the same with the profile's costs as they are (no in-cascade factors).
``in_sample`` (a diagnostic)
    the capture's own laws, costs fitted on its own forwards (cascade and autoregressive),
    its own orchestration, and its own mean catch-up positions per forward (``m − m0``:
    tokens a cache had not seen, which B0 does not charge) added to every forward.
``in_sample_b0`` (a diagnostic)
    the same without the catch-up positions: what B0 itself explains of the capture.

Per cascade swept over batch sizes: the measured crossover (first measured ``b`` with speedup
``<= 1``) and, per variant, the predicted one —
:func:`~polyspec_theory.serving.batch.crossover_batch`
on a ``batch_table`` cascade whose rows are that variant's ``T_i(b, m)`` (orchestration
folded in: ``+ a_b``, and ``+ o_b`` for the verify forwards, ``m >= 2``) at the measured
batch sizes, linear in ``b`` between them. "Within one grid step" compares the two on the
measured grid. Predictive crossover laws come from outside the cascade's own captures when
every pair has such data (else from all of its captures, labelled ``in-group laws``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import BatchTableCost, CostCurve, fit_cost_curve
from polyspec_theory.core.laws import FAMILIES, fit_laws
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.serving.batch import crossover_batch, predict_batch
from validation.analysis.fits import PairFit
from validation.analysis.relative import relative_error
from validation.traces.batch import BatchCapture
from validation.traces.dataset import check_captures

__all__ = ["BatchVariant", "BatchConfigResult", "CrossoverResult", "BatchValidation",
           "validate_batches", "load_profile", "VARIANTS", "ROW_LENGTH", "LawFits", "capture_laws",
           "predictive_costs"]

VARIANTS = ("predictive", "predictive_microbenchmark", "in_sample", "in_sample_b0")
ROW_LENGTH = 16  # m = 1..16 in the batch_table rows of the crossover cascades
CTX_BIN = 32  # forwards' contexts are binned to this many tokens for the cost fits
UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


# --------------------------------------------------------------------------------------------
# pieces
# --------------------------------------------------------------------------------------------
def load_profile(path) -> dict[str, BatchTableCost]:
    """Batched cost tables (seconds) per model from a ``polyspec profile --batch`` JSON."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except FileNotFoundError:
        raise PolyspecInputError("profile", f"{p}: no such file") from None
    except json.JSONDecodeError as e:
        raise PolyspecInputError("profile", f"{p}: invalid JSON: {e}") from None
    unit = obj.get("time_unit", "s") if isinstance(obj, dict) else None
    if unit not in UNIT_SECONDS:
        raise PolyspecInputError("profile.time_unit", f"must be one of {list(UNIT_SECONDS)}, "
                                 f"got {unit!r}")
    models = obj.get("models") if isinstance(obj, dict) else None
    if not isinstance(models, list) or not models:
        raise PolyspecInputError("profile.models", "must be a non-empty list")
    out = {}
    for i, m in enumerate(models):
        where = f"profile.models[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise PolyspecInputError(where, "needs a name")
        cost = m.get("cost")
        if not isinstance(cost, dict) or "batch_table" not in cost:
            raise PolyspecInputError(f"{where}.cost", "needs a batch_table (run polyspec "
                                     "profile --batch 1,2,...)")
        out[m["name"]] = BatchTableCost(cost["batch_table"], f"{where}.cost").scaled(
            UNIT_SECONDS[unit])
    return out


def _binned(ctx) -> np.ndarray:
    return (np.asarray(ctx, dtype=np.float64) // CTX_BIN) * CTX_BIN + CTX_BIN / 2


def _forward_fit(cap: BatchCapture, k: int):
    """Cost fit of model ``k`` on the capture's own forwards (cascade, and autoregressive
    for the target)."""
    f = cap.forwards.select(k)
    if f.n == 0:
        return None
    return fit_cost_curve(f.m, f.wall_s, _binned(f.ctx), name=cap.models[k])


def _mean_ctx(cap: BatchCapture, k: int, run: str) -> float | None:
    f = cap.forwards.select(k, run)
    return float(np.mean(_binned(f.ctx))) if f.n else None


def _bcost_fit(name: str, caps):
    ms, ts, cs = [], [], []
    for c in caps:
        for r in c.costs:
            if r["model"] == name:
                ms += [r["m"]] * len(r["times_s"])
                ts += list(r["times_s"])
                cs += [r["ctx"]] * len(r["times_s"])
    if not ms:
        return None
    return fit_cost_curve(ms, ts, cs, name=name)


def _shift(curve: CostCurve, x: float) -> CostCurve:
    """``T(m + x)`` (linear between integers, the curve's own extension beyond)."""
    if x <= 0:
        return curve
    m = np.arange(1, ROW_LENGTH + 2, dtype=np.float64) + x
    lo = np.floor(m)
    w = m - lo
    t = (1 - w) * curve(lo) + w * curve(lo + 1)
    return CostCurve.from_table([float(v) for v in t])


def _plus(curve: CostCurve, a: float) -> CostCurve:
    t = np.asarray(curve(np.arange(1, ROW_LENGTH + 2)), dtype=np.float64) + a
    return CostCurve.from_table([float(v) for v in t])


def _overheads(caps) -> tuple[float, float] | None:
    """Pooled ``(a_b, o_b)`` over captures: AR time outside the forward per step, and the
    cascade's time outside forwards beyond ``a_b`` per forward, per batched verification."""
    caps = list(caps)
    if not caps:
        return None
    a_num = sum(c.ar_wall_s - sum(r["forward_s"] for r in c.ar) for c in caps)
    a_den = sum(c.ar_steps for c in caps)
    a = max(a_num / a_den, 0.0)
    o_num = sum(c.overhead_s - a * sum(c.forward_count) for c in caps)
    o_den = sum(c.verifications for c in caps)
    return a, max(o_num / o_den, 0.0)


@dataclass(frozen=True)
class _Costs:
    """One variant's costs at one batch size: per-model curves ``T_i(b, .)`` (orchestration
    not included), the autoregressive ``T_1(b, 1)``, ``a_b``, ``o_b``, and where they came
    from."""

    curves: tuple[CostCurve, ...]
    t_ar: float
    a: float
    o: float
    sources: dict

    def cascade(self, cap: BatchCapture, laws) -> Cascade:
        n = len(self.curves)
        models = tuple(Model(cap.models[k], _plus(self.curves[k], self.a),
                             self.o if k < n - 1 else 0.0) for k in range(n))
        return Cascade(models, tuple(laws), cap.thresholds, cap.policy, cap.name)

    def row(self, k: int, n: int) -> list[float]:
        """The ``batch_table`` row of model ``k`` with orchestration folded in (``+ a_b``;
        ``+ o_b`` at ``m >= 2`` for a verifying model, whose every forward verifies; the
        target's ``T(b, 1)`` is its autoregressive step)."""
        m = np.arange(1, ROW_LENGTH + 1)
        t = np.asarray(self.curves[k](m), dtype=np.float64) + self.a
        if k == 0:
            t[0] = self.t_ar + self.a
        if k < n - 1:
            t[1:] += self.o
        return [float(x) for x in t]


def _in_sample_costs(cap: BatchCapture, extras: bool) -> _Costs:
    n = cap.n
    curves = []
    ex = cap.extra_positions() if extras else [0.0] * n
    t_ar = None
    for k in range(n):
        fit = _forward_fit(cap, k)
        if fit is None:
            raise PolyspecInputError(f"{cap.name}.forwards", f"no forwards of {cap.models[k]}")
        curve = fit.curve(_mean_ctx(cap, k, "cascade"), kind="table")
        curves.append(_shift(curve, ex[k]))
        if k == 0:
            t_ar = float(fit.curve(_mean_ctx(cap, 0, "ar"), kind="table")(1))
    a, o = _overheads([cap])
    return _Costs(tuple(curves), t_ar, a, o, {
        "costs": "this capture's forwards", "orchestration": "this capture",
        "catch_up_positions": [float(x) for x in ex]})


def _in_run_factors(cap: BatchCapture, captures, profile) -> tuple[list, float, str]:
    """How much slower each model of ``cap`` runs inside this cascade than in the profile,
    learned on OTHER captures: per model, Σ forward wall / Σ profile ``T(b, m)`` over the
    cascade forwards of the same cascade at the other batch sizes (else of every other
    capture running the model); the same for the target's autoregressive forwards over every
    other capture. Models without a profile table keep 1."""
    n = cap.n
    if profile is None:
        return [1.0] * n, 1.0, "no profile: none (1)"
    others = [c for c in captures if c is not cap]
    same = [c for c in others if c.config_key == cap.config_key]

    def ratio(pool, name, run):
        num = den = 0.0
        for c in pool:
            if name not in c.models or c.batch > profile[name].max_batch:
                continue
            f = c.forwards.select(c.models.index(name), run)
            if f.n:
                num += float(f.wall_s.sum())
                den += float(np.sum(profile[name].at_batch(c.batch)(f.m)))
        return num / den if den > 0 else None

    facs = []
    for name in cap.models:
        r = None
        if name in profile:
            r = ratio(same, name, "cascade")
            if r is None:
                r = ratio(others, name, "cascade")
        facs.append(1.0 if r is None else r)
    tgt = cap.models[0]
    r_ar = ratio(others, tgt, "ar") if tgt in profile else None
    src = ("same cascade at the other batch sizes" if same else
           "other captures running the model")
    return facs, 1.0 if r_ar is None else r_ar, src


def _scaled_curve(curve: CostCurve, f: float) -> CostCurve:
    t = np.asarray(curve(np.arange(1, ROW_LENGTH + 2)), dtype=np.float64) * f
    return CostCurve.from_table([float(v) for v in t])


def predictive_costs(cap: BatchCapture, captures, profile, in_run: bool = True) -> _Costs:
    """Costs of ``cap`` with nothing of ``cap``: profile tables, else the ``bcost`` samples
    of the other captures at the same batch size; with ``in_run``, times each model's
    in-cascade factor learned on other captures (:func:`_in_run_factors`)."""
    b = cap.batch
    same_b = [c for c in captures if c.batch == b and c is not cap]
    ctx = cap.nominal_context
    curves, src = [], {}
    for name in cap.models:
        if profile is not None and name in profile:
            try:
                curves.append(profile[name].at_batch(b))
            except PolyspecInputError as e:
                raise PolyspecInputError("profile", f"{name}: {e}") from None
            src[name] = "profile"
            continue
        fit = _bcost_fit(name, same_b)
        if fit is None:
            raise PolyspecInputError(
                "costs", f"no cost source for {name!r} at b = {b} outside this capture (give "
                "a batched profile, polyspec profile --batch, or capture another cascade "
                "with it at this batch size)")
        curves.append(fit.curve(ctx, kind="table"))
        src[name] = "bcost samples of " + ", ".join(sorted(c.name for c in same_b
                                                            if any(r["model"] == name
                                                                   for r in c.costs)))
    t_ar = float(curves[0](1))
    facs, f_ar, fsrc = ([1.0] * cap.n, 1.0, "none") if not in_run else _in_run_factors(
        cap, captures, profile)
    curves = [_scaled_curve(c, f) for c, f in zip(curves, facs, strict=True)]
    t_ar *= f_ar
    ov = _overheads(same_b)
    if ov is None:
        a, o, osrc = 0.0, 0.0, "none at this batch size outside this capture (0)"
    else:
        a, o = ov
        osrc = ", ".join(sorted(c.name for c in same_b))
    return _Costs(tuple(curves), t_ar, a, o, {
        "costs": src, "orchestration": osrc, "context": ctx, "catch_up_positions": None,
        "in_run_factors": dict(zip(cap.models, facs, strict=True)), "ar_factor": f_ar,
        "in_run_factors_from": fsrc})


def capture_laws(cap, fits):
    missing = [cap.pair_key(i)[:2] for i in range(cap.n - 1) if cap.pair_key(i) not in fits]
    if missing:
        return None, missing
    return [fits[cap.pair_key(i)].law(None) for i in range(cap.n - 1)], []


class LawFits:
    """Pair fits of ``cap``'s pairs pooled over a set of source captures (as
    :func:`.fits.fit_pairs`, only the pairs asked, each (pair, sources) fitted once)."""

    def __init__(self, families):
        self.families = tuple(families)
        self._fits: dict = {}

    def __call__(self, cap, sources):
        out = {}
        for i in range(cap.n - 1):
            key = cap.pair_key(i)
            items = [(c.name, c.rounds[j].counts()) for c in sources
                     for j in range(c.n - 1) if c.pair_key(j) == key and c.rounds[j].n]
            if not items:
                continue
            names = tuple(n for n, _ in items)
            if (key, names) not in self._fits:
                counts = items[0][1]
                for _, d in items[1:]:
                    counts = counts.merge(d)
                self._fits[(key, names)] = PairFit(
                    key, counts, tuple(fit_laws(counts, families=self.families)), names)
            out[key] = self._fits[(key, names)]
        return out


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchVariant:
    """One prediction of one capture (``unavailable`` says why there is none)."""

    name: str
    speedup: float = math.nan
    tokens_per_second: float = math.nan
    ar_tokens_per_second: float = math.nan
    time_per_token: float = math.nan
    error: float = math.nan  # predicted / measured speedup - 1
    throughput_error: float = math.nan  # predicted / measured cascade throughput - 1
    structure: tuple = ()
    sources: dict = field(default_factory=dict)
    unavailable: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__, structure=list(self.structure))


@dataclass(frozen=True)
class BatchConfigResult:
    """A batched capture: measured, its structure against B2/B3, and the variants."""

    name: str
    label: str
    batch: int
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    measured: dict
    structure: tuple
    variants: dict

    def to_dict(self) -> dict:
        return {"name": self.name, "cascade": self.label, "batch": self.batch,
                "models": list(self.models), "thresholds": list(self.thresholds),
                "temperature": self.temperature, "measured": self.measured,
                "structure": list(self.structure),
                "variants": {k: v.to_dict() for k, v in self.variants.items()}}


def _grid_step(grid, x) -> int:
    """Index of the first grid size ``>= x`` (``len(grid)`` for none / beyond the grid)."""
    if x is None:
        return len(grid)
    for i, g in enumerate(grid):
        if g >= x:
            return i
    return len(grid)


@dataclass(frozen=True)
class CrossoverResult:
    """One cascade over its measured batch sizes: measured speedups and crossover, and per
    variant the predicted speedups at those sizes and the predicted crossover."""

    label: str
    batches: tuple[int, ...]
    measured_speedup: tuple[float, ...]
    measured_se: tuple[float, ...]
    measured_crossover: int | None  # first measured b with speedup <= 1
    predicted: dict  # variant -> dict

    def to_dict(self) -> dict:
        return {"cascade": self.label, "batches": list(self.batches),
                "measured_speedup": list(self.measured_speedup),
                "measured_se": list(self.measured_se),
                "measured_crossover": self.measured_crossover,
                "predicted": self.predicted}


@dataclass(frozen=True)
class BatchValidation:
    configs: tuple[BatchConfigResult, ...]
    crossovers: tuple[CrossoverResult, ...]
    notes: tuple[str, ...] = ()

    def summary(self) -> dict:
        out = {"n_captures": len(self.configs), "n_cascades": len(self.crossovers)}
        for v in VARIANTS:
            e = [abs(c.variants[v].error) for c in self.configs
                 if c.variants[v].unavailable is None]
            te = [abs(c.variants[v].throughput_error) for c in self.configs
                  if c.variants[v].unavailable is None]
            out[v] = {"n": len(e),
                      "median_abs_error": float(np.median(e)) if e else None,
                      "max_abs_error": float(np.max(e)) if e else None,
                      "median_abs_throughput_error": float(np.median(te)) if te else None}
            ok = [x.predicted[v]["within_one_step"] for x in self.crossovers
                  if x.predicted.get(v, {}).get("within_one_step") is not None]
            out[v]["crossovers_within_one_step"] = f"{sum(ok)}/{len(ok)}" if ok else None
        return out

    def to_json(self) -> dict:
        return {"summary": self.summary(), "configs": [c.to_dict() for c in self.configs],
                "crossovers": [x.to_dict() for x in self.crossovers],
                "notes": list(self.notes)}


# --------------------------------------------------------------------------------------------
# the pipeline
# --------------------------------------------------------------------------------------------
def _variant(cap, name, laws, costs: _Costs | None, why=None, law_src="") -> BatchVariant:
    if why is not None:
        return BatchVariant(name, unavailable=why)
    pr = predict_batch(costs.cascade(cap, laws), cap.batch)
    t_ar = costs.t_ar + costs.a
    s = t_ar / pr.time_per_token
    tps = cap.batch / pr.time_per_token
    st = tuple({"level": i, "mean_K": pr.levels[i].phi_batch,
                "mean_max_G": pr.levels[i - 1].mean_max_block,
                "idle_share": pr.levels[i].idle_share,
                "mean_G": pr.levels[i - 1].mean_block,
                "mean_L": pr.levels[i - 1].mean_emitted} for i in range(1, cap.n))
    return BatchVariant(
        name, speedup=s, tokens_per_second=tps, ar_tokens_per_second=cap.batch / t_ar,
        time_per_token=pr.time_per_token, error=relative_error(s, cap.measured_speedup),
        throughput_error=relative_error(tps, cap.tokens_per_second), structure=st,
        sources=dict(costs.sources, laws=law_src, a_b=costs.a, o_b=costs.o,
                     t_ar=costs.t_ar))


def _measured(cap: BatchCapture) -> dict:
    return {"speedup": cap.measured_speedup, "speedup_se": cap.speedup_se(),
            "tokens_per_second": cap.tokens_per_second,
            "ar_tokens_per_second": cap.ar_tokens_per_second,
            "time_per_token": cap.time_per_token, "ar_step_s": cap.ar_step_s,
            "tokens": cap.tokens, "decodes": cap.n_decodes,
            "overhead_fraction": cap.overhead_s / cap.wall_s,
            "greedy_lossless": cap.greedy_lossless, "stops": cap.stops,
            "catch_up_positions": cap.extra_positions()}


def _crossover(group, costs_at: dict, laws, law_src: str) -> dict:
    """Predicted speedups on the grid and the crossover of one variant (``costs_at[b]``)."""
    grid = tuple(sorted(costs_at))
    cap = group[0]
    n = cap.n
    if 1 not in costs_at:
        return {"unavailable": "the crossover's batch_table needs b = 1 among the measured "
                               "batch sizes"}
    models = []
    for k in range(n):
        rows = {str(b): costs_at[b].row(k, n) for b in grid}
        models.append(Model(cap.models[k], BatchTableCost(rows, f"models[{k}].cost")))
    c = Cascade(tuple(models), tuple(laws), cap.thresholds, cap.policy, cap.label)
    cross = crossover_batch(c, max_batch=max(grid), optimal=False)
    meas = [x.measured_speedup for x in sorted(group, key=lambda x: x.batch)]
    k_meas = next((i for i, s in enumerate(meas) if s <= 1.0), len(grid))
    k_pred = _grid_step(grid, cross.batch)
    curve = list(range(1, max(grid) + 1))
    return {"speedup": [predict_batch(c, b).speedup for b in grid],
            "crossover": cross.batch, "grid_step": k_pred, "measured_grid_step": k_meas,
            "within_one_step": abs(k_pred - k_meas) <= 1, "laws": law_src,
            "curve_batches": curve, "curve_speedup": [predict_batch(c, b).speedup
                                                      for b in curve]}


def validate_batches(captures, *, families=FAMILIES, profile=None,
                     law_captures=()) -> BatchValidation:
    """Predicted vs measured per batched capture and the crossover per cascade (module
    docstring). ``profile``: ``{model: BatchTableCost}`` in seconds (:func:`load_profile`);
    ``law_captures``: other captures (e.g. single-stream) used only as law sources."""
    caps = check_captures(captures, empty="no batched captures", kind="capture")
    if any(not isinstance(c, BatchCapture) for c in caps):
        raise PolyspecInputError("traces", "validate_batches takes batched captures")
    families = tuple(families)
    extra = list(law_captures)
    notes = []
    groups: dict[tuple, list] = {}
    for c in caps:
        groups.setdefault(c.config_key, []).append(c)
    for g in groups.values():
        bs = [c.batch for c in g]
        if len(set(bs)) != len(bs):
            raise PolyspecInputError("traces", f"{g[0].label}: two captures at the same batch "
                                     "size")
    results = []
    lawfits = LawFits(families)
    costs_by = {v: {} for v in VARIANTS}  # variant -> {capture name: _Costs}
    for cap in caps:
        own_laws, _ = capture_laws(cap, lawfits(cap, [cap]))
        others = [c for c in caps if c is not cap] + extra
        pred_laws, missing = capture_laws(cap, lawfits(cap, others))
        variants = {}
        for v in ("in_sample", "in_sample_b0"):
            cs = _in_sample_costs(cap, extras=(v == "in_sample"))
            costs_by[v][cap.name] = cs
            variants[v] = _variant(cap, v, own_laws, cs, law_src="this capture")
        law_src = "other captures: " + ", ".join(sorted({
            c.name for c in others for i in range(cap.n - 1)
            if cap.pair_key(i) in {c.pair_key(j) for j in range(c.n - 1)}}))
        for v, in_run in (("predictive", True), ("predictive_microbenchmark", False)):
            why = None
            cs = None
            if pred_laws is None:
                why = f"no acceptance data outside this capture for pair(s) {missing}"
            else:
                try:
                    cs = predictive_costs(cap, caps, profile, in_run)
                except PolyspecInputError as e:
                    why = str(e)
            if cs is not None:
                costs_by[v][cap.name] = cs
            variants[v] = _variant(cap, v, pred_laws, cs, why, law_src)
        st = []
        for row, pv in zip(cap.structure(), variants["in_sample"].structure, strict=True):
            st.append({**row, "predicted": {k: pv[k] for k in pv if k != "level"}})
        results.append(BatchConfigResult(
            name=cap.name, label=cap.label, batch=cap.batch, models=cap.models,
            thresholds=cap.thresholds, temperature=cap.temperature, measured=_measured(cap),
            structure=tuple(st), variants=variants))
        notes += list(cap.notes)
    crossovers = []
    for g in groups.values():
        g = sorted(g, key=lambda c: c.batch)
        grid = tuple(c.batch for c in g)
        pred = {}
        group_laws, _ = capture_laws(g[0], lawfits(g[0], g))
        outside = [c for c in caps if c.config_key != g[0].config_key] + extra
        out_laws, _ = capture_laws(g[0], lawfits(g[0], outside))
        for v in VARIANTS:
            have = {c.batch: costs_by[v][c.name] for c in g if c.name in costs_by[v]}
            if len(have) < len(g):
                pred[v] = {"unavailable": "no predictive costs at every measured batch size"}
                continue
            if v.startswith("predictive") and out_laws is not None:
                laws, src = out_laws, "outside this cascade's captures"
            else:
                laws, src = group_laws, "in-group laws (all b of this cascade)"
            pred[v] = _crossover(g, have, laws, src)
        meas = tuple(c.measured_speedup for c in g)
        crossovers.append(CrossoverResult(
            label=g[0].label, batches=grid, measured_speedup=meas,
            measured_se=tuple(c.speedup_se() for c in g),
            measured_crossover=next((b for b, s in zip(grid, meas, strict=True) if s <= 1.0),
                                    None),
            predicted=pred))
    return BatchValidation(tuple(results), tuple(crossovers), tuple(notes))


def validate_part(captures, ctx):
    """``polyspec validate``'s part for the batched captures
    (:mod:`validation.analysis.traces`): :func:`validate_batches` with the batched cost
    tables of ``--batch-profile`` (default FOLDER/profile.json) and the ``--laws-from``
    captures, the report written to ``ctx.options.out``."""
    from validation.analysis.batch_report import batch_text, write_batch_report
    from validation.analysis.traces import Part

    opts = ctx.options
    if not captures:
        if opts.batch_profile:
            raise PolyspecInputError("--batch-profile", f"{ctx.folder} holds no batched "
                                     "traces: --batch-profile applies to batched traces")
        return None
    default = ctx.folder / "profile.json"
    if opts.batch_profile:
        profile = load_profile(opts.batch_profile)
    else:
        profile = load_profile(default) if default.is_file() else None
    res = validate_batches(captures, families=opts.families, profile=profile,
                           law_captures=ctx.laws_from())
    paths = write_batch_report(res, opts.out, title=f"Batched validation: {ctx.folder}")
    obj = dict(res.to_json(), report=paths)
    text = batch_text(res)
    return Part("batch", obj, obj, f"{text}\nreport: {paths['markdown']}", tuple(res.notes),
                order=1, joined=f"\n{text}\nbatched report: {paths['markdown']}")
