"""What every engine format shares above its parser: reading a file into an
:class:`~validation.formats.engine_common.EngineOutput` and its :class:`Evidence`
(:func:`engine_format` builds an engine's :class:`Format`), and the fit report (what
``polyspec fit --json`` prints): laws fitted to the pooled snapshot, and the confidence
cut-off model for drafts of varying length."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.formats import Evidence, Format, PairEvidence, registry
from validation.formats.engine_common import (
    SHORT_DRAFT_TOLERANCE,
    EngineOutput,
    Snapshot,
    check_counts,
    short_draft_note,
    strip_meta,
    walk_mappings,
)


def engine_format(name: str, description: str, parser, detect, *, order: int,
                  group: str | None = None) -> Format:
    """The :class:`Format` of one engine output: ``parser(text, gamma) -> EngineOutput``
    (``gamma``: the draft length where the output does not state it), detected by
    ``detect(source)``; its fit report is :func:`acceptance_report`."""

    def read(src, gamma: int | None = None) -> Evidence:
        if gamma is not None:
            gamma = as_int(gamma, "--gamma", low=1, high=4096)
        out = parser(src.body, gamma)
        if not out.snapshots:
            why = f": every one skipped ({'; '.join(out.skipped)})" if out.skipped else ""
            raise PolyspecInputError("rounds",
                                     f"no usable {description} snapshot found{why}"[:600])
        for s in out.snapshots:
            check_counts(s)
        out = replace(out, source=src.source)
        return engine_evidence(out, src.name, description)

    def report(ev: Evidence, eta: float | None = None, snapshot: int | None = None) -> dict:
        out = ev.data if snapshot is None else ev.data.select(snapshot)
        return acceptance_report(out, eta=eta)

    return Format(name, description, detect, read, order=order, group=group, report=report)


def engine_evidence(out: EngineOutput, path: str, description: str) -> Evidence:
    """The :class:`Evidence` of an engine output: its pooled rounds as the one pair's
    counts (the engines log the target and one drafter)."""
    pooled = out.pooled
    pair = PairEvidence(verifier=None, drafter=None, counts=pooled.counts, cap=pooled.cap)
    return Evidence(path=path, format=out.format, description=description, data=out,
                    pairs=(pair,), timing=dict(out.timing), warnings=tuple(out.warnings))


def json_dicts(src) -> list | None:
    """Every mapping of a JSON source (engine metadata stripped), computed once; ``None``
    when the source is not JSON."""
    if "_json_dicts" not in src.__dict__:
        obj = src.json
        src._json_dicts = None if obj is None else list(walk_mappings(strip_meta(obj)))
    return src._json_dicts


def not_json(src) -> bool:
    """A text source (log lines, tables) that is not JSON: the engines' log formats."""
    return src.json is None


def _finite(x):
    return None if x is None or not math.isfinite(x) else float(x)


def _solve_geometric_mean(mean: float, cap: int) -> float:
    """The ``x`` in [0, 1] with ``sum_{j=1}^{cap} x^j = mean`` (increasing in ``x``)."""
    from scipy import optimize

    if mean <= 0.0:
        return 0.0
    if mean >= cap:
        return 1.0

    def f(x):
        return float(np.sum(x ** np.arange(1, cap + 1))) - mean

    return float(optimize.brentq(f, 0.0, 1.0, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def variable_length_model(snap: Snapshot, cap: int, eta: float | None = None) -> dict:
    """Drafts of varying length (llama.cpp stops drafting when the drafter's top probability
    falls below ``p_min``) as the confidence cut-off of docs/theory.md Part III-D A2: per position
    the drafter stops with probability ``1 - q``, drafts a token that is accepted with
    probability ``r`` and one that is rejected with ``q - r``, at most ``cap`` tokens.

    What the engine's totals identify: with ``n`` rounds, ``D`` drafted and ``A`` accepted
    tokens, exactly the two numbers ``q = P(C >= eta)`` and ``r = P(C >= eta, accepted)`` at
    the engine's own ``eta``, from ``E[G] = sum_{g=1}^{cap} q^g = D / n`` and
    ``E[A] = sum_{j=1}^{cap} r^j = A / n`` (method of moments; with a histogram of ``A``,
    whose law is capped geometric in ``r``, ``r`` is its maximum-likelihood estimate
    ``sum A / (sum A + #{A < cap})``). Nothing else is: the law of the confidence ``C``, the
    acceptance curve and ``eta`` itself are not identified, and every joint law with these
    ``(q, r)`` gives the same prediction at this ``eta`` and cap (A2 depends on them only),
    none at another ``eta``. ``representative`` is one such law written in the config format
    (``C ~ Beta(a, 1)`` with ``1 - eta^a = q``, acceptance flat at ``r / q``), with the
    schedule, at ``eta`` (default 0.5, an arbitrary label: pass the engine's ``p_min``)."""
    from polyspec_theory.errors import as_probability
    from polyspec_theory.structures.schedule import ConfidenceLaw
    from polyspec_theory.structures.schedule_models import confidence_round

    n, cap = snap.rounds, as_int(cap, "cap", low=1)
    if snap.drafted is None:
        raise PolyspecInputError("drafted", "the drafted token count is needed to model drafts "
                                 "of varying length")
    eta = 0.5 if eta is None else as_probability(eta, "--eta")
    if not 0.0 < eta < 1.0:
        raise PolyspecInputError("--eta", f"must be in (0, 1), got {eta}")
    mean_g = snap.drafted / n
    mean_a = snap.accepted / n
    q = _solve_geometric_mean(mean_g, cap)
    hist = snap.counts.histogram(cap) if snap.counts is not None else None
    if hist is not None and len(hist) == cap + 1:
        k = np.arange(cap + 1)
        total_a = float(np.dot(k, hist))
        short = float(hist[:cap].sum())
        r = total_a / (total_a + short) if total_a + short > 0 else 0.0
        method = ("q: moments (E[G] = drafted / rounds); r: maximum likelihood on the "
                  "histogram of accepted drafts (capped geometric)")
    else:
        r = _solve_geometric_mean(mean_a, cap)
        method = ("moments: E[G] = drafted / rounds and E[A] = accepted / rounds under the "
                  "cut-off (A2)")
    notes = []
    if r > q:
        notes.append(f"r = {r:.4g} > q = {q:.4g}: more accepted than the cut-off model allows "
                     "(the drafts are not stopped by confidence alone); r set to q")
        r = q
    rep = None
    if 0.0 < q < 1.0:
        a = math.log1p(-q) / math.log(eta)
        ratio = min(max(r / q, 1e-12), 1.0 - 1e-12)
        b0 = math.log(ratio) - math.log1p(-ratio)
        law = ConfidenceLaw([a, 1.0], [b0, 0.0])
        rd = confidence_round(law, eta, cap)
        rep = {"acceptance": law.to_config(),
               "schedule": {"kind": "confidence", "eta": eta, "max": cap},
               "check": {"q": rd.q, "r": rd.r, "mean_drafted": rd.mean_block,
                         "mean_accepted": rd.mean_emitted - 1.0}}
    else:
        notes.append(f"q = {q:g}: every round drafts {'all' if q >= 1 else 'none'} of its "
                     "slots; no cut-off law represents it")
    g_pmf = np.concatenate([q ** np.arange(cap) * (1 - q), [q ** cap]])
    return {
        "model": "confidence cut-off (docs/theory.md Part III-D A2)",
        "cap": cap, "rounds": n, "mean_drafted": mean_g, "mean_accepted": mean_a,
        "q": q, "r": r, "method": method,
        "drafter_forwards_per_round": mean_g + float(1.0 - g_pmf[-1]),
        "identified": "q = P(draft a position) and r = P(draft it and accept it) at the "
                      "engine's own cut-off; not the confidence law, the acceptance curve or "
                      "the cut-off value (predictions hold at this cut-off and cap only)",
        "representative": rep,
        "notes": notes,
    }


MAX_LISTED_SNAPSHOTS = 1000  # per-snapshot detail listed (every snapshot enters the fit)
MAX_LISTED_NOTES = 20


def acceptance_report(out: EngineOutput, eta: float | None = None) -> dict:
    """Fitted laws for the pooled snapshot of ``out`` (and a summary per snapshot).

    With a histogram: every family by censored maximum likelihood (log-likelihood, AIC,
    G-test), ``best`` = AIC-best outside the Gaussian baseline. With totals only (rounds,
    accepted, one draft length): the iid law by the method of moments (no likelihood).
    Drafts of varying length (more than :data:`SHORT_DRAFT_TOLERANCE` of the slots missing,
    or unknown caps): no chain law, a warning saying why, and, where the drafted count and the
    maximum draft length are known, ``variable_length``: the confidence cut-off that
    reproduces them (:func:`variable_length_model`; ``eta`` labels its representative)."""
    from polyspec_theory.core.laws import IIDGeometric, best_fit, fit_laws

    if not isinstance(out, EngineOutput):
        raise PolyspecInputError("output", "must be an EngineOutput (formats.open(...).data)")
    warnings = list(out.warnings)
    pooled = out.pooled
    caps = {s.cap for s in out.snapshots}
    # several known draft lengths with histograms: one law, each snapshot censored at its own
    mixed = len(caps) > 1 and None not in caps and pooled.counts is not None
    laws, best, method = [], None, None
    short = sum(s.short_slots for s in out.snapshots)
    slots = sum((s.cap or 0) * s.rounds for s in out.snapshots)
    notes = [n for n in map(short_draft_note, out.snapshots) if n]
    warnings += notes[:MAX_LISTED_NOTES]
    if len(notes) > MAX_LISTED_NOTES:
        warnings.append(f"... and {len(notes) - MAX_LISTED_NOTES} more snapshots with short "
                        "drafts")
    variable = None
    if pooled.cap is None and not mixed:
        if not any("varies" in w or "differ in draft length" in w for w in warnings):
            warnings.append("the draft length is not the same in every round: no law fitted")
        if pooled.draft_cap is not None and pooled.drafted is not None:
            variable = variable_length_model(pooled, pooled.draft_cap, eta)
    elif slots and short > SHORT_DRAFT_TOLERANCE * slots:
        warnings.append(f"{short} of {slots} draft slots were not drafted (> "
                        f"{100 * SHORT_DRAFT_TOLERANCE:g} %): draft length varies by round, "
                        "no chain law fitted; modelled as a confidence cut-off "
                        "(variable_length)")
        if pooled.cap is not None and pooled.drafted is not None:
            variable = variable_length_model(pooled, pooled.cap, eta)
    elif pooled.counts is not None:
        fits = fit_laws(pooled.counts)
        for f in fits:
            d = f.to_dict()
            laws.append({k: _finite(v) if isinstance(v, float) else v for k, v in d.items()})
        best = best_fit(fits).law.to_config()
        method = "censored maximum likelihood on the acceptance histogram" + (
            f" (draft lengths {sorted(caps)}, each round censored at its own)" if mixed else "")
    else:
        law = IIDGeometric.from_mean(pooled.mean_accepted, pooled.cap)
        laws.append({"law": "iid", "params": law.to_config(), "loglik": None, "aic": None,
                     "n_params": 1, "n": pooled.rounds, "method": "moments (mean only)"})
        best = law.to_config()
        method = ("method of moments: the iid alpha whose capped mean E[A | gamma] equals the "
                  "observed mean (the output has totals only, no histogram: no likelihood)")
    snaps = []
    for s in out.snapshots[:MAX_LISTED_SNAPSHOTS]:  # a long log: the pooled fit uses all
        d = s.to_dict()
        if s.cap is not None:
            d["iid_alpha_moments"] = IIDGeometric.from_mean(min(s.mean_accepted, s.cap),
                                                            s.cap).alpha
        snaps.append(d)
    bad = [c for c in out.checks if not c["agree"]]
    for c in bad:
        warnings.append(f"{c['snapshot']}: the engine printed {c['figure']} = {c['engine']}, "
                        f"the counters give {c['ours']:.6g}")
    engine_mal = next((c["engine"] for c in out.checks
                       if c["figure"].startswith("mean acceptance length")
                       and len(out.snapshots) == 1), None)
    return {
        "format": out.format,
        "format_description": registry()[out.format].description,
        "source": out.source,
        "counters": out.counters,
        "rounds": pooled.rounds,
        "accepted": pooled.accepted,
        "drafted": pooled.drafted,
        "drafted_per_round": pooled.drafted_per_round,
        "cap": pooled.cap,
        "mean_accepted": pooled.mean_accepted,
        "mean_acceptance_length": pooled.mean_acceptance_length,
        "engine_mean_acceptance_length": engine_mal,
        "histogram": (None if pooled.counts is None or pooled.cap is None
                      else [int(x) for x in pooled.counts.histogram(pooled.cap)]),
        "caps": sorted(c for c in caps if c is not None),
        "histogram_source": pooled.histogram_source,
        "fit_method": method,
        "laws": laws,
        "best": best,
        "snapshots": snaps,
        "snapshots_total": len(out.snapshots),
        "checks": list(out.checks)[:MAX_LISTED_SNAPSHOTS],
        "checks_total": len(out.checks),
        "checks_agree": sum(bool(c["agree"]) for c in out.checks),
        "concurrency": out.concurrency,
        "timing": out.timing,
        "variable_length": variable,
        "warnings": list(dict.fromkeys(warnings)),
    }
