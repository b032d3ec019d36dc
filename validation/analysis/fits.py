"""Fitted pieces of captured configurations, shared by validation, insertion and pools: the
acceptance laws of every pair (rounds pooled per pair and sampling setting), each model's cost
curve from a capture's baselines, and the cascade of a capture built from them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve, CostFit, fit_cost_curve
from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.core.fitting import FitResult
from polyspec_theory.core.kept import Kept, content_key
from polyspec_theory.core.laws import FAMILIES, best_fit, fit_laws
from polyspec_theory.core.p1 import Prediction
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import predict
from validation.traces.dataset import Capture

__all__ = ["PairFit", "pool_pairs", "fit_pairs", "fit_laws_once", "cached_cost_fit", "fit_costs",
           "fit_cost_for",
           "cost_curve_for", "cost_rel_se", "capture_cascade", "predict_config"]


@dataclass(frozen=True)
class PairFit:
    """Pooled acceptance data and ranked law fits of one pair at one sampling setting."""

    key: tuple
    counts: AcceptanceCounts
    fits: tuple[FitResult, ...]
    configs: tuple[str, ...]

    @property
    def best(self) -> FitResult:
        return best_fit(list(self.fits))

    def law(self, family: str | None):
        """The fitted law of ``family`` (``None``/``"best"``: the AIC-best non-Gaussian)."""
        if family in (None, "best"):
            return self.best.law
        for f in self.fits:
            if f.law.family == family:
                return f.law
        raise PolyspecInputError("family", f"no {family!r} fit for pair {self.key}")

    def to_dict(self) -> dict:
        v, d, t, k = self.key
        return {
            "verifier": v, "drafter": d, "temperature": t, "top_k": k,
            "configs": list(self.configs),
            "n_rounds": self.counts.n_rounds,
            "mean_accepted": self.counts.mean_accepted(),
            "best": self.best.law.family,
            "fits": [f.to_dict() for f in self.fits],
        }


def fit_laws_once(counts: AcceptanceCounts, families, cache: dict | None) -> tuple:
    """:func:`~polyspec_theory.core.laws.fit_laws` of ``counts``, kept in ``cache`` (a dict
    the caller holds for one run; ``None``: no cache) under the cells' content and the
    families: the fit reads nothing else of ``counts`` (not its source or notes), so equal
    cells (the canonical form of the same rounds) give the same fits to the last bit. A
    pair captured in one configuration has its own and its pooled fit on the same rounds;
    one captured in two, the one's held-out fit on the other's own."""
    families = tuple(families)
    if cache is None:
        return tuple(fit_laws(counts, families=families))
    key = (families, content_key(counts.accepted, counts.caps, counts.counts))
    if key[1] is None:  # object cells: no content key
        return tuple(fit_laws(counts, families=families))
    if key not in cache:
        cache[key] = tuple(fit_laws(counts, families=families))
    return cache[key]


def pool_pairs(captures) -> dict[tuple, tuple[AcceptanceCounts, tuple[str, ...]]]:
    """``{pair key: (counts, configuration names)}``: the chain rounds of every pair pooled
    over the configurations that captured it (in capture order; tree and confidence cut-off
    pairs are left out, as :func:`fit_pairs` fits them by :mod:`.structured`)."""
    pooled: dict[tuple, list] = {}
    for c in captures:
        for i in range(c.n - 1):
            if c.rounds[i].n == 0 or c.pair_kind(i) in ("tree", "confidence"):
                continue  # not chain rounds: their A is not a capped chain acceptance
            pooled.setdefault(c.pair_key(i), []).append((c.name, c.rounds[i].counts()))
    out = {}
    for key, items in pooled.items():
        counts = items[0][1]
        for _, d in items[1:]:
            counts = counts.merge(d)
        out[key] = (counts, tuple(n for n, _ in items))
    return out


def fit_pairs(captures, families=FAMILIES, *, cache: dict | None = None,
              keys=None) -> dict[tuple, PairFit]:
    """Pool rounds per pair key over configurations (:func:`pool_pairs`) and fit every law
    family (chain and HF pairs; tree and confidence cut-off pairs are fitted by
    :mod:`.structured`). ``cache``: the fits of one run (:func:`fit_laws_once`). ``keys``:
    fit only these pair keys (each must be pooled from ``captures``; a pair's fit depends on
    its own rounds only, so it equals the one among all pairs); ``None``: every pair."""
    pooled = pool_pairs(captures)
    if keys is not None:
        keys = set(keys)
        unknown = sorted(map(str, keys - set(pooled)))
        if unknown:
            raise PolyspecInputError("keys", f"no chain rounds of pair(s) {unknown} in the "
                                     "captures")
    return {key: PairFit(key, counts, fit_laws_once(counts, families, cache), names)
            for key, (counts, names) in pooled.items() if keys is None or key in keys}


def counts_without(total: AcceptanceCounts, part: AcceptanceCounts) -> AcceptanceCounts:
    """The rounds of ``total`` that are not in ``part`` (``part`` pooled into ``total``):
    cell by cell, in the canonical form, so it equals pooling the rest afresh."""
    cells = {}
    for a, g, w in zip(total.accepted, total.caps, total.counts, strict=True):
        cells[(int(a), int(g))] = int(w)
    for a, g, w in zip(part.accepted, part.caps, part.counts, strict=True):
        left = cells.get((int(a), int(g)), 0) - int(w)
        if left < 0:
            raise PolyspecInputError("counts", f"cell (A={a}, cap={g}) has more rounds in the "
                                     "part than in the total")
        cells[(int(a), int(g))] = left
    keep = [(a, g, w) for (a, g), w in cells.items() if w > 0]
    if not keep:
        raise PolyspecInputError("counts", "no rounds left")
    a, g, w = (np.array(x, dtype=np.int64) for x in zip(*keep, strict=True))
    return AcceptanceCounts(a, g, w, total.source, total.notes)


MAX_COST_FITS = 1024
_COST_FITS = Kept(MAX_COST_FITS)  # (name, content key of the timings) -> CostFit


def cached_cost_fit(m, seconds, context, name: str) -> CostFit:
    """:func:`~polyspec_theory.core.costs.fit_cost_curve` ``(m, seconds, context,
    name=name)``, computed once per process for equal arguments (the fit reads nothing else
    and is deterministic, so a kept fit is the same to the last bit): ``validate`` asks for
    each capture's cost fits several times (calibrated or not, per diagnostic, the insertion
    analysis, the plots). The kept fit is shared, so its arrays are read-only."""
    arrays = tuple(None if x is None else np.asarray(x) for x in (m, seconds, context))
    digest = content_key(*arrays)
    if digest is None:
        return fit_cost_curve(m, seconds, context, name=name)  # no content key: it refuses
    key = (name, digest)
    hit = _COST_FITS.get(key)
    if hit is not None:
        return hit
    cf = fit_cost_curve(*arrays, name=name)
    for x in (cf.ms, cf.table, cf.contexts):
        x.flags.writeable = False
    _COST_FITS.keep({key: cf})
    return cf


def fit_costs(capture: Capture, calibrate: bool = True) -> dict[str, CostFit]:
    """Cost fit of every model of the capture from its own baseline timings.

    ``calibrate``: scale each model's cost curve so that ``T_i(1)`` at the mean context of
    its autoregressive baseline equals the forward time per token measured in that baseline
    (interleaved with the cascade runs, so under the same machine load; the curve's shape in
    ``m`` and context comes from the cost-curve timings). Models without an AR baseline keep
    the raw curve."""
    out = {}
    for name in capture.models:
        b = capture.baselines[name]
        if len(b.cost_m) == 0:
            raise PolyspecInputError(f"{capture.name}.baselines.{name}",
                                     "no cost-curve timings")
        cf = cached_cost_fit(b.cost_m, b.cost_s, b.cost_ctx, name)
        if calibrate and b.ar_forward_per_token and b.ar_context is not None:
            t1 = cf.at(1, context=b.ar_context)
            if t1 > 0:
                cf = cf.scaled(b.ar_forward_per_token / t1)
        out[name] = cf
    return out



def fit_cost_for(name: str, captures, prefer: Capture) -> CostFit | None:
    """Cost fit of ``name`` from ``prefer``'s baselines if it has them, else from the first
    capture that does."""
    for c in [prefer] + list(captures):
        b = c.baselines.get(name)
        if b is not None and len(b.cost_m):
            return cached_cost_fit(b.cost_m, b.cost_s, b.cost_ctx, name)
    return None


def cost_curve_for(name, captures, prefer) -> CostCurve | None:
    f = fit_cost_for(name, captures, prefer)
    return None if f is None else f.curve()


def cost_rel_se(f: CostFit | None) -> float:
    """Relative standard error of T(1): residual relative sd / sqrt(samples at m = 1)."""
    if f is None:
        return 0.0
    n1 = sum(n for m, _, _, n in f.cells if m == 1) or 1
    return float(f.residual_rel_sd / math.sqrt(n1)) if f.residual_rel_sd > 0 else 0.0



def capture_cascade(capture, pair_fits, costs, family=None, contexts=None,
                    extra=None) -> Cascade:
    """The cascade of ``capture`` with fitted pieces: pair laws from ``pair_fits`` (``family``;
    ``None`` = each pair's AIC-best), cost curves from ``costs`` (:class:`CostFit` per model,
    at ``contexts[i]`` if given; ``extra[i]`` = mean positions a verify forward of model
    ``i`` scores beyond ``G + 1``)."""
    models = []
    for i, name in enumerate(capture.models):
        cf = costs[name]
        curve = cf.curve(None if contexts is None else contexts[i])
        if extra is not None and i < capture.n - 1 and extra[i] > 0:
            # expected cost with extra[i] more scored positions on average (catch-up tokens;
            # exact for affine curves, linear interpolation between table entries)
            if curve.table is None:
                curve = CostCurve.affine(curve.base + extra[i] * curve.per_token,
                                         curve.per_token)
            else:
                t = np.asarray(curve.table)
                nxt = curve(np.arange(2, t.size + 2))
                curve = CostCurve.from_table((1 - extra[i]) * t + extra[i] * nxt)
        models.append(Model(name, curve))
    laws = []
    for i in range(capture.n - 1):
        key = capture.pair_key(i)
        if key not in pair_fits:
            raise PolyspecInputError(f"{capture.name}.rounds",
                                     f"no acceptance data for pair {key[:2]}")
        laws.append(pair_fits[key].law(family))
    return Cascade(tuple(models), tuple(laws), capture.thresholds, capture.policy, capture.name)


def predict_config(capture: Capture, pair_fits, costs, family=None, *,
                   contexts=None, extra_positions=None) -> Prediction:
    """P1 for one captured configuration with fitted laws (``family``; ``None`` = best) and
    fitted costs (at ``contexts[i]`` per model if given; ``extra_positions[i]`` = mean number
    of positions a verify forward of model ``i`` scores beyond ``G + 1``)."""
    return predict(capture_cascade(capture, pair_fits, costs, family, contexts,
                                   extra_positions))


