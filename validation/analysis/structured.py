"""Predicted vs measured for captures with token trees and adaptive draft lengths
(docs/theory.md Part III-D; :mod:`validation.schemes.structured` records them, schema in
:mod:`validation.traces.schema`).

Per structured capture (:func:`analyse_structured`):

1. **Laws**, fitted on the capture's own rounds, per pair:

   * tree: :class:`~polyspec_theory.structures.trees.SiblingLaw` by
     :func:`~polyspec_theory.structures.trees.fit_sibling_law` on the recorded visits (children,
     rank
     of the accepted child), one row per depth where every depth up to it has at least
     :data:`MIN_VISITS` visits (the last row repeats), and the one-row law as a variant;
   * confidence cut-off: :class:`~polyspec_theory.structures.schedule.ConfidenceLaw` by
     :func:`~polyspec_theory.structures.schedule.fit_confidence_law` on every drafted token's top
     probability with the verifier's decision and the stop positions' top probabilities
     (no truncation: the decoder records the stop position);
   * chain or HF schedule: every chain law family by censored MLE on ``(A, G)`` (each round
     censored at its own ``G``), the AIC-best outside the Gaussian baseline.

2. **Costs**: each model's AR-calibrated cost curve from the capture's baselines
   (:func:`validation.analysis.fits.fit_costs`), as for chains.

3. **Predicted** = :func:`~polyspec_theory.structures.structured.predict_structured` of the cascade
   with those laws, costs, the capture's tree and schedules (stationary; with an HF schedule
   that restarts every prompt also the exact finite-horizon value over the mean number of
   top-level rounds per prompt): in-sample, a diagnostic like ``p1_best`` for chains.
   **Holdout** = the same with every pair's law fitted on the OTHER captures only (same
   verifier, drafter, temperature, top-k; trees: also the same child sampling; any tree
   shape, any cut-off ``eta``, chain and HF rounds pooled), the capture's own baseline costs
   (``None`` when some pair was captured nowhere else). **Verify-path** = the same two
   predictions with :func:`verify_path_costs` (the cost-curve timings as measured, the
   target's AR forward as the unit) plus the decoder overhead per forward and per round
   fitted on the other captures (:func:`~validation.analysis.residuals.overhead_model`):
   on the committed tree captures this cuts the error from ~40 % to ~12 % (median).
   **In-run** = the predicted forwards
   per token of each model × its measured mean forward time in the capture (isolates the
   count model from the costs). **Measured** = AR target time per token / cascade time per
   token, as for chains.

4. Per pair, measured against predicted: ``E[L]`` per verification, ``E[G]``, the fraction
   of fully accepted blocks; trees: the law of the accepted path length ``A``; HF: the
   length distribution; cut-off: ``P(draft)``, ``P(draft and accepted)``, drafter forwards
   per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.core.laws import FAMILIES, best_fit, fit_laws
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.structures.schedule import fit_confidence_law
from polyspec_theory.structures.structured import predict_structured
from polyspec_theory.structures.trees import SiblingLaw, accepted_pmf, fit_sibling_law
from validation.analysis.fits import fit_costs
from validation.analysis.relative import relative_error
from validation.analysis.residuals import overhead_model
from validation.traces.dataset import StructureRecords

__all__ = ["MIN_VISITS", "StructuredConfigResult", "fit_structured_laws", "structured_cascade",
           "analyse_structured", "sibling_law_by_depth", "confidence_qr", "verify_path_costs"]

MIN_VISITS = 30  # a depth gets its own sibling row with at least this many visits


def sibling_law_by_depth(structure, min_visits: int = MIN_VISITS) -> SiblingLaw:
    """Sibling law with one row per depth (rows while every depth so far has at least
    ``min_visits`` visits; the last row repeats); the one-row fit when even depth 1 has
    fewer."""
    rows = []
    for r, c in structure.sibling_data_by_depth():
        if r.size < min_visits:
            break
        rows.append(list(fit_sibling_law(r, c).rows[0]))
    if len(rows) <= 1:
        r, c = structure.sibling_data()
        return fit_sibling_law(r, c)
    width = max(len(x) for x in rows)
    return SiblingLaw([x + [0.0] * (width - len(x)) for x in rows])


def confidence_qr(capture, i: int) -> tuple[float, float]:
    """Empirical ``(q, r)`` of a cut-off pair: ``q`` = drafted / (drafted + stops) positions
    (the geometric MLE of ``P(C >= eta)``), ``r = q`` × accepted / decided tokens (MLE of
    ``P(accepted | drafted)``)."""
    st = capture.structure(i)
    r = capture.rounds[i]
    drafted = int(r.G.sum())
    stops = int(np.sum(~np.isnan(st.conf_stop)))
    decided = int(np.sum(np.minimum(r.A + 1, r.G)))
    acc = int(r.A.sum())
    q = drafted / (drafted + stops) if drafted + stops else math.nan
    return q, (q * acc / decided if decided else 0.0)


def _same_pair(c, j, capture, i) -> bool:
    if c.pair_key(j) != capture.pair_key(i):
        return False
    kind, other = capture.pair_kind(i), c.pair_kind(j)
    if kind == "tree":
        return other == "tree" and c.tree_sampling == capture.tree_sampling
    if kind == "confidence":
        return other == "confidence"
    return other in ("chain", "hf")


def fit_structured_laws(capture, families=FAMILIES, sources=None) -> tuple[list, list]:
    """Per pair: the law for the prediction and a dict describing the fit. ``sources``: the
    captures whose rounds are used (default: the capture itself); a pair of ``capture`` is
    fitted on the matching pairs of the sources (module docstring); ``None`` is returned when
    one has no data there."""
    sources = [capture] if sources is None else list(sources)
    laws, info = [], []
    for i in range(capture.n - 1):
        kind = capture.pair_kind(i)
        match = [(c, j) for c in sources for j in range(c.n - 1) if _same_pair(c, j, capture, i)]
        if not match:
            return None, None
        if kind == "tree":
            st = StructureRecords.concat(c.structure(j) for c, j in match)
            law = sibling_law_by_depth(st)
            rk, ch = st.sibling_data()
            one = fit_sibling_law(rk, ch)
            laws.append(law)
            info.append({"kind": kind, "law": law.to_config(), "one_row": one.to_config(),
                         "visits": int(rk.size)})
        elif kind == "confidence":
            cs, ys = [], []
            for c, j in match:
                r = c.rounds[j]
                x, y = c.structure(j).confidence_data(r.G, r.A)
                cs.append(x)
                ys.append(y)
            fit = fit_confidence_law(np.concatenate(cs), np.concatenate(ys), truncation=0.0)
            laws.append(fit.law)
            info.append({"kind": kind, "law": fit.law.to_config(), "fit": fit.to_dict()})
        else:
            counts = None
            for c, j in match:
                r = c.rounds[j]
                d = AcceptanceCounts.from_samples(r.A, r.G)
                counts = d if counts is None else counts.merge(d)
            fits = fit_laws(counts, families=families)
            best = best_fit(fits)
            laws.append(best.law)
            info.append({"kind": kind, "law": best.law.to_config(),
                         "aic": {f.law.family: f.aic for f in fits}})
    return laws, info


def structured_cascade(capture, laws, costs, contexts=None) -> Cascade:
    """The capture's cascade (its tree and schedules) with ``laws`` and ``costs`` (per model a
    fitted :class:`CostFit`, or a :class:`CostCurve` used as it is)."""
    models = tuple(Model(name, costs[name] if isinstance(costs[name], CostCurve) else
                         costs[name].curve(None if contexts is None else contexts[j]))
                   for j, name in enumerate(capture.models))
    return Cascade(models, tuple(laws), capture.thresholds, capture.policy, capture.name,
                   capture.trees, capture.schedules)


@dataclass(frozen=True)
class StructuredConfigResult:
    """Predicted vs measured for one structured capture (module docstring)."""

    name: str
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    kinds: tuple[str, ...]
    measured_speedup: float
    measured_speedup_se: float
    measured_time_per_token: float
    ar_time_per_token: float
    predicted_speedup: float
    transient_speedup: float | None
    inrun_speedup: float
    one_row_speedup: float | None
    holdout_speedup: float | None
    verify_path_speedup: float
    verify_path_holdout_speedup: float | None
    pairs: tuple[dict, ...]
    forwards_per_token: dict
    config: dict

    @property
    def error(self) -> float:
        return relative_error(self.predicted_speedup, self.measured_speedup)

    @property
    def inrun_error(self) -> float:
        return relative_error(self.inrun_speedup, self.measured_speedup)

    @property
    def holdout_error(self) -> float | None:
        return relative_error(self.holdout_speedup, self.measured_speedup)

    @property
    def verify_path_error(self) -> float:
        return relative_error(self.verify_path_speedup, self.measured_speedup)

    @property
    def verify_path_holdout_error(self) -> float | None:
        return relative_error(self.verify_path_holdout_speedup, self.measured_speedup)

    @property
    def transient_error(self) -> float | None:
        return relative_error(self.transient_speedup, self.measured_speedup)

    def to_dict(self) -> dict:
        return {"name": self.name, "models": list(self.models),
                "thresholds": list(self.thresholds), "temperature": self.temperature,
                "kinds": list(self.kinds), "measured_speedup": self.measured_speedup,
                "measured_speedup_se": self.measured_speedup_se,
                "measured_time_per_token": self.measured_time_per_token,
                "ar_time_per_token": self.ar_time_per_token,
                "predicted_speedup": self.predicted_speedup, "error": self.error,
                "transient_speedup": self.transient_speedup,
                "transient_error": self.transient_error,
                "inrun_speedup": self.inrun_speedup, "inrun_error": self.inrun_error,
                "one_row_speedup": self.one_row_speedup,
                "holdout_speedup": self.holdout_speedup, "holdout_error": self.holdout_error,
                "verify_path_speedup": self.verify_path_speedup,
                "verify_path_error": self.verify_path_error,
                "verify_path_holdout_speedup": self.verify_path_holdout_speedup,
                "verify_path_holdout_error": self.verify_path_holdout_error,
                "pairs": list(self.pairs),
                "forwards_per_token": self.forwards_per_token, "config": self.config}


def verify_path_costs(capture) -> dict[str, CostCurve]:
    """Per model a cost table in seconds: the capture's cost-curve timings as measured (each
    a forward after a cache rollback, the path a decoder's verify and draft forwards take),
    except the target's ``T(1)`` = its measured autoregressive forward time per token (the
    unit of the measured speedup) where the capture has one. :func:`fit_costs` instead
    scales the whole curve to the AR forward, which on the CPU zoo makes every verify
    forward 20-30 % too cheap."""
    raw = fit_costs(capture, calibrate=False)
    sizes = [t + 1 for t in capture.thresholds]
    sizes += [tr.n_nodes + 1 for tr in (capture.trees or ()) if tr is not None]
    sizes += [(sc.max or 0) + 1 for sc in (capture.schedules or ()) if sc is not None]
    m = np.arange(1, sum(sizes) + 2)  # a verify forward also scores catch-up positions
    out = {}
    for name in capture.models:
        tab = np.asarray(raw[name].curve()(m), dtype=np.float64)
        ar = capture.baselines[name].ar_forward_per_token
        if name == capture.models[0] and ar:
            tab[0] = ar
        out[name] = CostCurve.from_table([float(x) for x in np.maximum(tab, 0.0)])
    return out


def _hist(x, size) -> np.ndarray:
    h = np.bincount(np.asarray(x, np.int64), minlength=size).astype(np.float64)
    return h / h.sum() if h.sum() else h


def analyse_structured(capture, families=FAMILIES, others=()) -> StructuredConfigResult:
    """Fit, predict and compare one structured capture (module docstring); ``others``: the
    captures the holdout laws may come from (this one is left out)."""
    if not capture.structured:
        raise PolyspecInputError(f"{capture.name}.cascade", "has no tree or schedule")
    laws, fit_info = fit_structured_laws(capture, families)
    costs = fit_costs(capture)
    casc = structured_cascade(capture, laws, costs)
    hold_laws, _ = fit_structured_laws(capture, families,
                                       [c for c in others if c.name != capture.name])
    holdout = (None if hold_laws is None else
               predict_structured(structured_cascade(capture, hold_laws, costs)).speedup)
    sp = predict_structured(casc)
    pred = sp.prediction
    transient = None
    sched = capture.schedules
    if sched is not None and any(s is not None and s.kind == "hf" for s in sched):
        per_prompt = capture.rounds[0].n / max(capture.n_prompts, 1)
        transient = sp.finite_horizon(0, max(1, int(round(per_prompt))))["speedup"]
    one_row = None
    if any(k == "tree" for k in map(capture.pair_kind, range(capture.n - 1))):
        laws1 = [SiblingLaw(info["one_row"]["sibling"]) if info["kind"] == "tree" else law
                 for law, info in zip(laws, fit_info, strict=True)]
        one_row = predict_structured(structured_cascade(capture, laws1, costs)).speedup
    # verify-path costs + decoder overhead fitted on the other captures (own and holdout laws)
    vp_costs = verify_path_costs(capture)
    ov = overhead_model([c for c in others if c.name != capture.name], like=capture)

    def verify_path(laws_):
        p = predict_structured(structured_cascade(capture, laws_, vp_costs)).prediction
        t = vp_costs[capture.models[0]](1) / p.speedup + ov.per_token(p)
        return capture.ar_time_per_token / t

    vp = verify_path(laws)
    vp_hold = None if hold_laws is None else verify_path(hold_laws)
    fwd_pred = np.array([lv.forwards_per_token for lv in pred.levels])
    counts = np.array(capture.forward_count, dtype=np.float64)
    t_in = np.array(capture.forward_s) / np.maximum(counts, 1)
    inrun = capture.ar_time_per_token / float(np.dot(fwd_pred, t_in))
    fwd_meas = counts / capture.tokens
    pairs = []
    for i in range(capture.n - 1):
        r = capture.rounds[i]
        pi = sp.pairs[i]
        kind = capture.pair_kind(i)
        d = {"pair": i, "kind": kind, "verifier": capture.models[i],
             "drafter": capture.models[i + 1], "rounds": r.n, **fit_info[i],
             "mean_emitted": {"measured": float(r.L.mean()), "predicted": pi["mean_emitted"]},
             "mean_block": {"measured": float(r.G.mean()), "predicted": pi["mean_block"]},
             "full_acceptance": {"measured": float(np.mean(r.A == r.G)),
                                 "predicted": pi["full_acceptance"]}}
        if kind == "tree":
            tree = capture.trees[i]
            st = capture.structure(i)
            d["full_acceptance"]["measured"] = float(np.mean(r.A == tree.max_depth))
            d["tree"] = {"parents": list(tree.parents), "nodes": tree.n_nodes,
                         "depth": tree.max_depth}
            d["accepted_pmf"] = {"measured": _hist(r.A, tree.max_depth + 1).tolist(),
                                 "predicted": accepted_pmf(tree, laws[i]).tolist()}
            d["drafter_forwards_per_round"] = {
                "measured": float(np.mean([len(x) for x in st.draft_m])),
                "predicted": float(tree.max_depth)}
        elif kind == "hf":
            s = sched[i]
            st = capture.structure(i)
            occ = np.bincount(st.theta - s.min, minlength=s.max - s.min + 1).astype(float)
            d["lengths"] = s.states.tolist()
            d["length_distribution"] = {"measured": (occ / occ.sum()).tolist(),
                                        "predicted": pi["length_distribution"]}
            d["mean_length"] = {"measured": float(st.theta.mean()),
                                "predicted": pi["mean_length"]}
        elif kind == "confidence":
            q, rr = confidence_qr(capture, i)
            cap = pi["cap"]
            d["q"] = {"measured": q, "predicted": pi["q"]}
            d["r"] = {"measured": rr, "predicted": pi["r"]}
            d["drafter_forwards_per_round"] = {
                "measured": float(np.mean(r.G + (r.G < cap))),
                "predicted": pi["draft_forwards"]}
        pairs.append(d)
    return StructuredConfigResult(
        name=capture.name, models=capture.models, thresholds=capture.thresholds,
        temperature=capture.temperature,
        kinds=tuple(capture.pair_kind(i) for i in range(capture.n - 1)),
        measured_speedup=capture.measured_speedup,
        measured_speedup_se=capture.measured_speedup * capture.time_per_token_se()
        / capture.time_per_token,
        measured_time_per_token=capture.time_per_token,
        ar_time_per_token=capture.ar_time_per_token,
        predicted_speedup=pred.speedup, transient_speedup=transient, inrun_speedup=inrun,
        one_row_speedup=one_row, holdout_speedup=holdout, verify_path_speedup=vp,
        verify_path_holdout_speedup=vp_hold, pairs=tuple(pairs),
        forwards_per_token={name: {"measured": float(fwd_meas[j]),
                                   "predicted": float(fwd_pred[j])}
                            for j, name in enumerate(capture.models)},
        config=casc.to_config())
