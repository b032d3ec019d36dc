"""Predicted vs measured speedup of asynchronous pipeline traces (``capture --mode async``):
docs/theory.md AS1 (:func:`polyspec_theory.predict_async`) against the measured speedup.

Headline (predictive): the pair's acceptance law is fitted on the OTHER captures of the same
pair and sampling setting (synchronous ones, e.g. ``data/traces/cpu``, and other async ones),
and the costs come from the synchronous captures of the same two models (their cost curves
calibrated to their autoregressive forward time, in units of the target's ``T_1(1)``; the
median over those captures; ``cost_caps`` — captures taken alongside, on the same machine —
first if any has both models): nothing of the capture being predicted but its settings
(threshold, queue, context). Diagnostics, labelled: ``own_costs`` — the same laws with the
costs of the capture's own single-core cost curves and baselines (same machine and load,
not its pipeline's timings); ``in_sample`` — the law fitted on the capture's own verifies,
``T_1(m)`` from its own verify forwards, the drafter's ``c`` from its own drafter forwards and
the per-verify overhead ``o_1`` from its own rounds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from polyspec_theory import Cascade, Model, async_pair, predict_async
from polyspec_theory.core.costs import CostCurve, fit_cost_curve
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import DEFAULT_MODE, get, synchronous
from validation.analysis.fits import fit_costs, fit_pairs
from validation.analysis.forecast import measured_ci95
from validation.analysis.relative import error_headline, inside_ci, relative_error
from validation.schemes import synchronous_captures
from validation.schemes.async_ import name as SCHEME  # the scheme whose captures this predicts

__all__ = ["AsyncConfigResult", "validate_async", "earlier_window", "async_cascade",
           "sync_cost_curves", "drafter_forward_s", "async_text", "pair_law", "SCHEME"]

MAX_M = 128  # cost tables are extended (affinely, CostCurve) up to here


@dataclass(frozen=True)
class AsyncConfigResult:
    """One async capture: measured speedup (two cores against the single-core AR target)
    with its 95 % bootstrap interval, the predictive AS1 speedup (``None`` when no other
    capture has the pair or no synchronous capture has both models) and the in-sample
    diagnostic, with what each used."""

    name: str
    threshold: int
    queue: int | None
    measured_speedup: float
    measured_ci95: tuple[float, float]
    predicted_speedup: float | None
    bounds: tuple[float, float] | None
    law_from: tuple[str, ...]
    costs_from: tuple[str, ...]
    in_sample_speedup: float
    own_costs_speedup: float | None
    measured: dict
    predicted: dict | None
    lossless: bool

    @property
    def error(self) -> float | None:
        return relative_error(self.predicted_speedup, self.measured_speedup)

    @property
    def inside_ci(self) -> bool | None:
        return inside_ci(self.predicted_speedup, self.measured_ci95)

    @property
    def in_sample_error(self) -> float:
        return relative_error(self.in_sample_speedup, self.measured_speedup)

    def to_dict(self) -> dict:
        return {"name": self.name, "mode": get(SCHEME).mode, "threshold": self.threshold,
                "queue": self.queue, "measured_speedup": self.measured_speedup,
                "measured_ci95": list(self.measured_ci95),
                "predicted_speedup": self.predicted_speedup, "error": self.error,
                "inside_ci": self.inside_ci,
                "bounds": None if self.bounds is None else list(self.bounds),
                "law_from": list(self.law_from), "costs_from": list(self.costs_from),
                "diagnostics": {"in_sample": self.in_sample_speedup,
                                "in_sample_error": self.in_sample_error,
                                "own_costs": self.own_costs_speedup,
                                "note": "own_costs: laws from the other captures, costs from "
                                        "this capture's single-core cost curves; in_sample: "
                                        "its own law, verify forwards, drafter forwards and "
                                        "overhead"},
                "measured": self.measured, "predicted": self.predicted,
                "lossless": self.lossless, "cores": 2}


def async_cascade(capture, law, target_cost: CostCurve, drafter_cost: CostCurve,
                  overhead: float = 0.0) -> Cascade:
    """The AS0 cascade of an async capture: its models, threshold and queue with the given
    law and costs."""
    q = capture.header.get("async", {}).get("queue")
    return Cascade(models=(Model(capture.models[0], target_cost, overhead),
                           Model(capture.models[1], drafter_cost)),
                   laws=(law,), thresholds=capture.thresholds, policy=capture.policy,
                   name=capture.name, mode=get(SCHEME).mode,
                   queues=None if q is None else (q,))


def _context(capture) -> float:
    p = capture.header["prompts"]
    return float(p["prompt_len"] + p["max_new_tokens"] / 2)


def sync_cost_curves(capture, sync_caps) -> tuple[CostCurve, CostCurve, tuple[str, ...]] | None:
    """Target and drafter costs for ``capture`` from the synchronous captures that ran both
    of its models: each capture's calibrated curves at ``capture``'s mean context, divided
    by its target ``T_1(1)``; the median over captures (``None`` if there is none)."""
    tgt, dr = capture.models
    tables, cs, names = [], [], []
    for c in sync_caps:
        if not synchronous(c.scheme) or tgt not in c.models or dr not in c.models:
            continue
        fits = fit_costs(c)
        ctx = _context(capture)
        t = fits[tgt].curve(ctx)(np.arange(1, MAX_M + 1))
        if not t[0] > 0:
            continue
        tables.append(t / t[0])
        cs.append(fits[dr].curve(ctx).t1 / t[0])
        names.append(c.name)
    if not tables:
        return None
    return (CostCurve.from_table(np.median(tables, axis=0)),
            CostCurve.constant(float(np.median(cs))), tuple(names))


def drafter_forward_s(capture) -> list[float]:
    """The capture's drafter forwards that scored one position (its ``dforwards``)."""
    from validation.traces.records import read_records

    if not capture.path:
        return []
    recs = read_records(capture.path, allow_truncated=True).of_type("dforwards")
    done = {int(s["prompt"]) for s in capture.summaries}
    return [t for r in recs if r["prompt"] in done
            for m, t in zip(r["m"], r["wall_s"], strict=True) if m == 1]


def _in_sample(capture, families, c_own) -> float:
    """AS1 with the capture's own law, verify and drafter forwards and overhead."""
    fits = fit_pairs([_law_view(capture)], families)
    law = _law(fits[capture.pair_key(0)])
    r = capture.rounds[0]
    tcf = fit_cost_curve(r.m, r.verify_s, r.ctx, name=capture.models[0])
    c = c_own if c_own is not None else capture.baselines[capture.models[1]].ar_forward_per_token
    over = float(np.median(np.asarray(r.round_s) - np.asarray(r.verify_s)
                           - np.asarray(r.draft_s)))
    casc = async_cascade(capture, law, tcf.curve(_context(capture)),
                         CostCurve.constant(c), max(0.0, over))
    return capture.ar_time_per_token / predict_async(casc).time_per_token


def _law_view(capture):
    """An async capture with its verifies of no draft (G = 0: plain steps, no acceptance
    information) left out of its rounds, for law fits."""
    if capture.scheme != SCHEME:
        return capture
    r = capture.rounds[0]
    return dataclasses.replace(capture, rounds=(r.select(np.asarray(r.G) > 0),))


def pair_law(captures, key, families) -> tuple[object, tuple[str, ...]] | None:
    """The per-round law of pair ``key`` an async prediction uses: fitted (the families'
    best, :func:`validation.analysis.fits.fit_pairs`) on the rounds of ``captures`` that
    have the pair, an async capture's verifies of no draft left out; with the captures it
    came from; ``None`` when none has the pair."""
    fits = fit_pairs([_law_view(c) for c in captures
                      if key in {c.pair_key(i) for i in range(c.n - 1)}], families)
    if key not in fits:
        return None
    return _law(fits[key]), tuple(fits[key].configs)


def _law(pair_fit):
    try:
        law = pair_fit.law(None)
        law.survival(2)
        return law
    except (PolyspecInputError, AttributeError, NotImplementedError):
        return pair_fit.law("positional")


def _measured(capture, drafter_m1_s) -> dict:
    r = capture.rounds[0]
    n = capture.tokens
    fc = capture.forward_count
    return {"mean_checked": float(np.mean(r.G)), "mean_emitted": float(np.mean(r.L)),
            "verifies_per_token": fc[0] / n, "drafter_forwards_per_token": fc[1] / n,
            "drafter_forward_s": drafter_m1_s,
            "target_ar_s_per_token": capture.ar_time_per_token,
            "pipeline_s_per_token": capture.time_per_token}


def earlier_window(capture) -> int | None:
    """The window an async capture recorded when it differs from AS0's (captures made when a
    verify checked at most θ drafts, before AS0 took the decoder's rule), else ``None``: such a
    capture ran other rules than the theory states, so it is not predicted."""
    a = capture.header.get("async", {})
    rule = async_pair(capture.thresholds[0], a.get("queue")).window
    w = a.get("window", rule)
    return None if w == rule else w


def validate_async(async_caps, law_caps=(), families=None, cost_caps=()
                   ) -> list[AsyncConfigResult]:
    """Predict every async capture (module docstring). ``law_caps``: other captures
    (synchronous) for laws and costs; ``cost_caps``: synchronous captures preferred for
    costs (taken alongside the async ones)."""
    from polyspec_theory.core.laws import FAMILIES

    families = FAMILIES if families is None else families
    out = []
    allc = list(async_caps) + synchronous_captures(law_caps)
    for cap in async_caps:
        if cap.scheme != SCHEME:
            raise PolyspecInputError("captures", f"{cap.name} is not an async capture")
        others = [c for c in allc if c.name != cap.name]
        fitted = pair_law(others, cap.pair_key(0), families)
        costs = sync_cost_curves(cap, [c for c in cost_caps if c.name != cap.name])
        if costs is None:
            costs = sync_cost_curves(cap, others)
        pred = bounds = own = None
        law_from, costs_from = (), ()
        if fitted is not None and costs is not None:
            law, law_from = fitted
            costs_from = costs[2]
            p = predict_async(async_cascade(cap, law, costs[0], costs[1]))
            pred, bounds = p, p.bounds
            mine = sync_cost_curves(cap, [dataclasses.replace(cap, header=dict(
                cap.header, mode=DEFAULT_MODE))])
            if mine is not None:
                own = predict_async(async_cascade(cap, law, mine[0], mine[1])).speedup
        m1 = drafter_forward_s(cap)
        c_own = float(np.median(m1)) if m1 else None
        ins = _in_sample(cap, families, c_own)
        out.append(AsyncConfigResult(
            name=cap.name, threshold=cap.thresholds[0],
            queue=cap.header.get("async", {}).get("queue"),
            measured_speedup=cap.measured_speedup, measured_ci95=measured_ci95(cap),
            predicted_speedup=None if pred is None else pred.speedup,
            bounds=None if bounds is None else tuple(bounds), law_from=tuple(law_from),
            costs_from=tuple(costs_from), in_sample_speedup=ins, own_costs_speedup=own,
            measured=_measured(cap, c_own),
            predicted=None if pred is None else {
                "mean_checked": pred.levels[0].mean_checked,
                "mean_emitted": pred.levels[0].mean_emitted,
                "verifies_per_token": pred.levels[0].verifies_per_token,
                "drafter_forwards_per_token": pred.levels[1].forwards_per_token,
                "drafter_wasted_fraction": pred.levels[1].wasted_fraction},
            lossless=all(s.get("matches_target_ar") for s in cap.summaries)))
    return out


def async_text(results) -> str:
    """The table ``polyspec validate`` prints for async captures."""
    if not results:
        return ""
    w = max(len(r.name) for r in results)
    lines = [f"{len(results)} asynchronous pipeline capture(s) (two processes on two cores; "
             "speedup against the single-core autoregressive target; docs/theory.md AS1)",
             f"{'config':<{w}}  measured [95 % CI]        predicted   error  inside  "
             "own costs   error  in-sample   error  lossless"]
    for r in results:
        lo, hi = r.measured_ci95
        pred = "        —       —      —" if r.predicted_speedup is None else (
            f"{r.predicted_speedup:9.3f} {100 * r.error:+6.2f}%  "
            f"{'yes' if r.inside_ci else 'no':>5}")
        own = "        —       —" if r.own_costs_speedup is None else (
            f"{r.own_costs_speedup:9.3f} "
            f"{100 * (relative_error(r.own_costs_speedup, r.measured_speedup)):+6.2f}%")
        lines.append(f"{r.name:<{w}}  {r.measured_speedup:8.3f} [{lo:.3f}, {hi:.3f}]  {pred}  "
                     f"{own}  {r.in_sample_speedup:9.3f} {100 * r.in_sample_error:+6.2f}%  "
                     f"{'yes' if r.lossless else 'NO'}")
    lines.append(error_headline(
        [r.error for r in results], "async headline (laws from the other captures, costs from "
        "the synchronous captures)", "async: no headline prediction (no other capture of the "
        "pair or no synchronous capture of both models: pass --laws-from DIR)"))
    return "\n".join(lines)


def validate_part(captures, ctx):
    """``polyspec validate``'s part for the asynchronous captures
    (:mod:`validation.analysis.traces`): :func:`validate_async` with laws and costs from the
    folder's synchronous captures and ``--laws-from``; a capture made under an earlier window
    rule is not predicted (a note says so)."""
    from validation.analysis.traces import Part

    caps = []
    for c in captures:
        w = earlier_window(c)
        if w is None:
            caps.append(c)
        else:
            ctx.notes.append(f"{c.name}: captured when a verify checked at most {w} drafts "
                             f"(header async.window); AS0 now checks every ready draft up to "
                             f"min(99, queue) (docs/theory.md AS0): not predicted")
    if not caps:
        return None
    names = {c.name for c in captures}
    sync = [c for c in ctx.stream if c.name not in names]
    res = validate_async(caps, sync + ctx.laws_from(), ctx.options.families, cost_caps=sync)
    rows = [r.to_dict() for r in res]
    text = async_text(res)
    return Part("async", rows, {"async": rows, "notes": list(ctx.notes)}, text,
                tuple(ctx.notes), order=2, joined=f"\n{text}")
