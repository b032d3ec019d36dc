"""Predicted vs measured speedup on captured configurations (``polyspec validate``).

Per capture (:func:`validate`):

1. **Laws.** Every law family is fitted by censored MLE per adjacent pair and ranked by
   AIC; "best" = each pair's AIC-best law outside the Gaussian baseline. By default each
   capture uses its own rounds (``laws="config"``); also reported: laws pooled per pair
   ``(verifier, drafter, temperature, top_k)`` over every capture using it (docs/theory.md §4: a
   pair's acceptance does not depend on how the drafter's tokens were produced), and
   "holdout": pooled over the OTHER captures only.
2. **Costs.** Per model, ``T_i(m)`` and its context slope from the capture's baseline
   timings, calibrated to the forward time per token of the model's autoregressive baseline
   in the same capture (interleaved with the cascade runs: same machine load). The
   uncalibrated microbenchmark prediction is reported too.
3. **Plain prediction** = P1 exactly: ``T_1(1) / tau_1`` with the fitted laws and costs.
   **Measured** = the capture's AR target time per token / its cascade time per token.
4. **Extended** (a diagnostic: it uses this capture's measured forward times): P1's forward
   counts with acceptance coupled across the levels of a top-level round (cascades of
   n >= 3 models, :mod:`polyspec_theory.coupling`, 1-3 classes by BIC, fitted on the
   capture's rounds) times the capture's measured mean forward time per model, plus decoder
   overhead fitted on the OTHER captures of the same sampling mode. **In-run**: the same
   with P1's independent acceptance. **Predictive** variants use no timing of the capture:
   baseline costs at the capture's mean contexts with its extra verify positions, times
   each model's in-cascade slowdown learned on the other captures, plus the overhead, with
   coupled (``predictive``) or independent (``predictive_iid``) acceptance.
5. **Residual decomposition**: :func:`validation.analysis.residuals.decompose`.
6. **P5 on real data**: :func:`validation.analysis.insertion.insertion_analysis`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory._input import PolyspecInputError
from polyspec_theory.coupling import coupled_forwards, select_coupling
from polyspec_theory.laws import FAMILIES
from polyspec_theory.polybasic import predict

from .fits import capture_cascade, fit_costs, fit_pairs, predict_config
from .insertion import insertion_analysis
from .residuals import (
    decompose,
    lag1_correlation,
    overhead_model,
    role,
    slowdown_factor,
    slowdown_ratios,
)

__all__ = ["ConfigResult", "ValidationResult", "validate"]


@dataclass(frozen=True)
class ConfigResult:
    """Everything computed for one configuration."""

    name: str
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    measured_speedup: float
    measured_time_per_token: float
    ar_time_per_token: float
    predicted: dict  # family -> plain P1 speedup ("best" included)
    best_family: str
    extended_speedup: float
    extended_time_per_token: float
    decomposition: dict
    correlations: list
    forwards_per_token: dict  # measured / predicted per model
    costs: dict  # model -> CostFit.to_dict()
    context_effect: dict  # model -> relative T(1) change between reference and capture ctx
    holdout_speedup: float | None = None  # best laws fitted on the OTHER configurations only
    measured_speedup_se: float = math.nan
    microbenchmark_speedup: float = math.nan  # costs from the cost-curve timings alone
    pooled_speedup: float = math.nan  # laws pooled over every configuration using the pair
    # baseline costs x in-cascade factors (leave one out), contexts, extra positions,
    # overhead (leave one out), with block-dependent / independent acceptance
    predictive_speedup: float = math.nan
    predictive_iid_speedup: float = math.nan

    @property
    def predictive_error(self) -> float:
        return self.predictive_speedup / self.measured_speedup - 1.0

    @property
    def predictive_iid_error(self) -> float:
        return self.predictive_iid_speedup / self.measured_speedup - 1.0

    @property
    def pooled_error(self) -> float:
        return self.pooled_speedup / self.measured_speedup - 1.0
    inrun_speedup: float = math.nan  # P1 (iid) counts x this capture's per-level forward times

    @property
    def inrun_error(self) -> float:
        return self.inrun_speedup / self.measured_speedup - 1.0

    @property
    def microbenchmark_error(self) -> float:
        return self.microbenchmark_speedup / self.measured_speedup - 1.0

    @property
    def predicted_speedup(self) -> float:
        return self.predicted["best"]

    @property
    def error(self) -> float:
        """Relative error of the best-law plain prediction: (pred - meas) / meas."""
        return self.predicted_speedup / self.measured_speedup - 1.0

    @property
    def extended_error(self) -> float:
        return self.extended_speedup / self.measured_speedup - 1.0

    @property
    def holdout_error(self) -> float | None:
        if self.holdout_speedup is None:
            return None
        return self.holdout_speedup / self.measured_speedup - 1.0

    def errors(self) -> dict:
        return {f: s / self.measured_speedup - 1.0 for f, s in self.predicted.items()}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "models": list(self.models),
            "thresholds": list(self.thresholds),
            "temperature": self.temperature,
            "measured_speedup": self.measured_speedup,
            "predicted_speedup": self.predicted_speedup,
            "error": self.error,
            "best_family": self.best_family,
            "predicted_by_law": dict(self.predicted),
            "error_by_law": self.errors(),
            "extended_speedup": self.extended_speedup,
            "extended_error": self.extended_error,
            "holdout_speedup": self.holdout_speedup,
            "holdout_error": self.holdout_error,
            "microbenchmark_speedup": self.microbenchmark_speedup,
            "microbenchmark_error": self.microbenchmark_error,
            "predictive_speedup": self.predictive_speedup,
            "predictive_error": self.predictive_error,
            "predictive_iid_speedup": self.predictive_iid_speedup,
            "predictive_iid_error": self.predictive_iid_error,
            "pooled_speedup": self.pooled_speedup,
            "pooled_error": self.pooled_error,
            "inrun_speedup": self.inrun_speedup,
            "inrun_error": self.inrun_error,
            "measured_speedup_se": self.measured_speedup_se,
            "measured_time_per_token": self.measured_time_per_token,
            "extended_time_per_token": self.extended_time_per_token,
            "ar_time_per_token": self.ar_time_per_token,
            "decomposition": self.decomposition,
            "lag1_correlation": self.correlations,
            "forwards_per_token": self.forwards_per_token,
            "context_effect": self.context_effect,
            "costs": self.costs,
        }



def _holdout_speedup(capture, captures, families, costs) -> float | None:
    """Best-law P1 speedup with every pair law fitted only on the other configurations
    (``None`` if some pair of this configuration was captured nowhere else)."""
    others = [c for c in captures if c.name != capture.name]
    keys = {capture.pair_key(i) for i in range(capture.n - 1)}
    sub = [c for c in others if keys & {c.pair_key(i) for i in range(c.n - 1)}]
    fits = fit_pairs(sub, families)
    if not keys <= set(fits):
        return None
    return predict_config(capture, fits, costs, None).speedup



def _analyse(capture, pair_fits, pooled_fits, families, captures, holdout,
             ratios) -> ConfigResult:
    costs = fit_costs(capture)
    micro = predict_config(capture, pair_fits, fit_costs(capture, calibrate=False), None)
    predicted = {}
    for fam in families:
        predicted[fam] = predict_config(capture, pair_fits, costs, fam).speedup
    best = predict_config(capture, pair_fits, costs, None)
    predicted["best"] = best.speedup
    best_fams = sorted({pair_fits[capture.pair_key(i)].best.law.family
                        for i in range(capture.n - 1)})
    # ---- baseline costs at the capture's contexts x in-cascade slowdown (learned elsewhere)
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    extra = [r.extra_positions for r in capture.rounds]
    factors = [slowdown_factor(ratios, name, role(capture, i), capture.name, capture, captures)
               for i, name in enumerate(capture.models)]
    ext_costs = {name: costs[name].scaled(f) for name, f in zip(capture.models, factors,
                                                                strict=True)}
    ov = overhead_model(captures, exclude=capture.name, like=capture)
    ext_casc = capture_cascade(capture, pair_fits, ext_costs, None, ctxs, extra)
    pred_iid = predict(ext_casc)
    predictive_iid = capture.ar_time_per_token / (pred_iid.time_per_token
                                                  + ov.per_token(pred_iid))
    # ---- acceptance coupled across the levels of a top-level round (n >= 3)
    coupling = None
    if capture.n >= 3:
        try:
            coupling = select_coupling(capture.rounds, capture.n)
        except PolyspecInputError:
            coupling = None
    if coupling is not None:
        fw, tau_mix = coupled_forwards(ext_casc, coupling)
    else:
        fw = np.array([lv.forwards_per_token for lv in pred_iid.levels])
        tau_mix = pred_iid.time_per_token
    predictive = capture.ar_time_per_token / (tau_mix + ov.per_token_from_forwards(fw))
    # ---- extended: those counts x this capture's measured per-level forward times
    t_in = np.array(capture.forward_s) / np.maximum(np.array(capture.forward_count), 1)
    tau_ext = float(np.dot(fw, t_in)) + ov.per_token_from_forwards(fw)
    ext_speed = capture.ar_time_per_token / tau_ext
    decomposition, fwd = decompose(capture, pair_fits, costs, best, families)
    decomposition["overhead_model"] = {"per_forward": ov.per_forward,
                                       "per_round": ov.per_round}
    decomposition["slowdown_factors"] = dict(zip(capture.models, factors, strict=True))
    decomposition["coupling"] = None if coupling is None else {
        "k": coupling.k, "weights": coupling.weights.tolist(),
        "alphas": coupling.alphas.tolist(), "bic": coupling.bic, "top_rounds": coupling.n_top}
    corr = []
    for i, r in enumerate(capture.rounds):
        rho, se, k = lag1_correlation(r)
        corr.append({"level": i, "verifier": capture.models[i], "rho": rho, "se": se,
                     "pairs": k})
    ctx_eff = {name: float(costs[name].context_effect(costs[name].reference_context, ctxs[i]))
               for i, name in enumerate(capture.models)}
    f_pred = np.array([lv.forwards_per_token for lv in best.levels])
    return ConfigResult(
        name=capture.name, models=capture.models, thresholds=capture.thresholds,
        temperature=capture.temperature, measured_speedup=capture.measured_speedup,
        measured_time_per_token=capture.time_per_token,
        ar_time_per_token=capture.ar_time_per_token,
        predicted=predicted, best_family="+".join(best_fams), extended_speedup=ext_speed,
        extended_time_per_token=tau_ext, decomposition=decomposition, correlations=corr,
        forwards_per_token=fwd, costs={k: v.to_dict() for k, v in costs.items()},
        context_effect=ctx_eff,
        holdout_speedup=_holdout_speedup(capture, captures, families, costs) if holdout
        else None,
        pooled_speedup=predict_config(capture, pooled_fits, costs, None).speedup,
        predictive_speedup=predictive,
        predictive_iid_speedup=predictive_iid,
        microbenchmark_speedup=micro.speedup,
        inrun_speedup=capture.ar_time_per_token / (float(np.dot(f_pred, t_in))
                                                   + ov.per_token(best)),
        measured_speedup_se=capture.measured_speedup * capture.time_per_token_se()
        / capture.time_per_token,
    )


@dataclass(frozen=True)
class ValidationResult:
    configs: tuple[ConfigResult, ...]
    pairs: dict
    insertions: tuple
    families: tuple[str, ...]
    law_scope: str = "config"

    def _abs_errors(self, attr="error") -> np.ndarray:
        return np.array([abs(getattr(c, attr)) for c in self.configs])

    @property
    def median_abs_error(self) -> float:
        return float(np.median(self._abs_errors()))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(self._abs_errors()))

    def summary(self) -> dict:
        ext = self._abs_errors("extended_error")
        by_law = {}
        for fam in list(self.families) + ["best"]:
            e = np.array([abs(c.errors()[fam]) for c in self.configs])
            by_law[fam] = {"median_abs_error": float(np.median(e)),
                           "max_abs_error": float(np.max(e))}
        hold = [abs(c.holdout_error) for c in self.configs if c.holdout_error is not None]
        doms = [c.decomposition["dominant"] for c in self.configs]
        shares = {k: float(np.median([abs(c.decomposition["relative"][k]) for c in self.configs]))
                  for k in self.configs[0].decomposition["relative"]}
        return {
            "n_configs": len(self.configs),
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "extended": {"median_abs_error": float(np.median(ext)),
                         "max_abs_error": float(np.max(ext))},
            "law_scope": self.law_scope,
            "predictive": {
                "median_abs_error": float(np.median(self._abs_errors("predictive_error"))),
                "max_abs_error": float(np.max(self._abs_errors("predictive_error")))},
            "predictive_iid": {
                "median_abs_error": float(np.median(self._abs_errors("predictive_iid_error"))),
                "max_abs_error": float(np.max(self._abs_errors("predictive_iid_error")))},
            "pooled_laws": {
                "median_abs_error": float(np.median(self._abs_errors("pooled_error"))),
                "max_abs_error": float(np.max(self._abs_errors("pooled_error")))},
            "inrun_costs": {
                "median_abs_error": float(np.median(self._abs_errors("inrun_error"))),
                "max_abs_error": float(np.max(self._abs_errors("inrun_error")))},
            "microbenchmark_costs": {
                "median_abs_error": float(np.median(self._abs_errors("microbenchmark_error"))),
                "max_abs_error": float(np.max(self._abs_errors("microbenchmark_error")))},
            "holdout": {"n_configs": len(hold),
                        "median_abs_error": float(np.median(hold)) if hold else None,
                        "max_abs_error": float(np.max(hold)) if hold else None},
            "by_law": by_law,
            "dominant_residual": max(set(doms), key=doms.count),
            "median_abs_residual_share": shares,
        }

    def to_json(self) -> dict:
        """The ``polyspec validate --json`` object."""
        return {
            "configs": [{"name": c.name, "measured_speedup": c.measured_speedup,
                         "predicted_speedup": c.predicted_speedup, "error": c.error,
                         "best_law": c.best_family,
                         "extended_speedup": c.extended_speedup,
                         "extended_error": c.extended_error,
                         "predictive_error": c.predictive_error,
                         "inrun_error": c.inrun_error,
                         "holdout_error": c.holdout_error}
                        for c in self.configs],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "summary": self.summary(),
            "pairs": [p.to_dict() for p in self.pairs.values()],
            "insertions": list(self.insertions),
        }


def validate(captures, families=FAMILIES, *, laws: str = "config", insertions: bool = True,
             holdout: bool = True, confidence: str = "delta", n_boot: int = 200,
             seed: int = 0) -> ValidationResult:
    """Run the whole pipeline (module docstring) on a list of :class:`ConfigCapture`."""
    captures = list(captures)
    if not captures:
        raise PolyspecInputError("traces", "no captured configurations")
    names = [c.name for c in captures]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PolyspecInputError("traces", f"configuration name {dup!r} appears twice")
    families = tuple(families)
    if laws not in ("config", "pooled"):
        raise PolyspecInputError("laws", f"must be 'config' or 'pooled', got {laws!r}")
    pair_fits = fit_pairs(captures, families)
    own = {c.name: (fit_pairs([c], families) if laws == "config" else pair_fits)
           for c in captures}
    ratios = {c.name: slowdown_ratios(c, own[c.name]) for c in captures}
    results = tuple(_analyse(c, own[c.name], pair_fits, families, captures, holdout, ratios)
                    for c in captures)
    ins = tuple(insertion_analysis(captures, pair_fits, method=confidence, n_boot=n_boot,
                                   seed=seed, ratios=ratios)) if insertions else ()
    return ValidationResult(results, pair_fits, ins, families, laws)


