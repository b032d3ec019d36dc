"""``batch``: a chain decoded in a lockstep serving batch of ``batch`` sequences (B0-B6,
docs/theory.md Part III-C). Claimed by a ``"mode": "sync"`` cascade with ``"batch": b``
(``polyspec predict --batch``, ``Cascade.with_batch``)."""

from __future__ import annotations

from polyspec_theory.core.costs import BatchTableCost, RooflineCost
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.serving.batch import (
    as_batch,
    batch_sweep,
    crossover_batch,
    large_batch_limit,
    predict_batch,
)

name = "batch"
description = "a lockstep serving batch"
mode = "sync"
threshold_floor = 1
fields = {"batch": "the serving-batch theory is not available for {description} "
                   "(scheme {name!r})"}

MODEL_NOTE = ("lockstep batch (B0): every forward is batched over all b slots and padded to "
              "the longest block; a level waits for the sequence needing the most rounds; "
              "acceptance independent per sequence; costs T_i(b, m)")


def claims(features) -> bool:
    return features.batch is not None


def check(cascade) -> dict:
    return {"batch": as_batch(cascade.batch)}


def predict(cascade):
    """B2 (:func:`polyspec_theory.serving.batch.predict_batch`) at the cascade's batch."""
    return predict_batch(cascade, cascade.batch)


def _cost_kind(cost) -> str:
    if isinstance(cost, RooflineCost):
        return "roofline"
    if isinstance(cost, BatchTableCost):
        return f"batch_table (b = {', '.join(map(str, cost.batches))})"
    return "plain (independent of b)"


def report(cascade, options=None) -> dict:
    """``batches`` (one row per batch size of ``options.batches``, default the cascade's:
    batch, speedup, tokens_per_time, thresholds_optimal, speedup_optimal, ...), the crossover
    (B6) and, for roofline costs, the large-batch limit (B5)."""
    batches = list(options.batches) if options and options.batches else [cascade.batch]
    max_threshold = options.max_threshold if options else 16
    pts = batch_sweep(cascade, batches, max_threshold)
    cross = crossover_batch(cascade, max_threshold=max_threshold)
    try:
        limit = large_batch_limit(cascade)
    except PolyspecInputError as e:
        limit = {"unavailable": str(e)}
    config = cascade.to_config()
    config.pop("batch", None)
    return {
        "config": config,
        "model": MODEL_NOTE,
        "thresholds": list(cascade.thresholds),
        "max_threshold": max_threshold,
        "costs": {m.name: _cost_kind(m.cost) for m in cascade.models},
        "batches": [p.to_dict() for p in pts],
        "crossover": cross.to_dict(),
        "large_batch_limit": limit,
        "time_base": "the config's cost units; speedup = T_1(b,1) / tau_b (throughput ratio "
                     "against autoregressive M_1 at the same batch)",
    }


def explain(cascade, options=None) -> str:
    rep = report(cascade, options)
    th = rep["thresholds"]
    lines = [f"Serving batches: {rep['model']}.",
             "Costs: " + "; ".join(f"{k}: {v}" for k, v in rep["costs"].items()), "",
             f"{'batch':>6} {'speedup':>8} {'tokens/time':>12} {'AR tok/time':>12} "
             f"{'unsync P1':>9} {'E[max N] per level':>22} {'idle %':>12}   "
             f"optimal thresholds (1..{rep['max_threshold']}) -> speedup"]
    for p in rep["batches"]:
        phis = ", ".join(f"{x:.2f}" for x in p["phi_batch"][:-1]) or "-"
        idle = ", ".join(f"{100 * x:.0f}" for x in p["idle_share"][:-1]) or "-"
        lines.append(
            f"{p['batch']:>6} {p['speedup']:>7.3f}x {p['tokens_per_time']:>12.4g} "
            f"{p['autoregressive_tokens_per_time']:>12.4g} {p['speedup_unsynchronised']:>8.3f}x "
            f"{phis:>22} {idle:>12}   {p['thresholds_optimal']} -> "
            f"{p['speedup_optimal']:.3f}x")
    lines.append(f"(speedup at thresholds {th}; unsync P1 = the same costs without waiting for "
                 "the slowest sequence)")
    lines += _crossover_lines(rep)
    free = [k for k, v in rep["costs"].items() if v.startswith("plain")]
    if free:
        lines.append(f"Note: the costs of {', '.join(free)} do not depend on b (plain costs); "
                     "give a batch_table or roofline cost to model the load.")
    lines.append("Time base: " + rep["time_base"] + ".")
    return "\n".join(lines)


def _crossover_lines(rep) -> list[str]:
    th = rep["thresholds"]
    c = rep["crossover"]
    if c["batch"] is None:
        out = [f"Crossover (B6): speculation at its optimal thresholds still pays at every "
               f"probed batch up to {c['max_batch']}."]
    elif c["batch"] == 1:
        out = ["Crossover (B6): speculation does not pay even at batch 1."]
    else:
        ev = c["evaluated"]
        b = c["batch"]
        out = [f"Crossover (B6): speculation at its optimal thresholds stops paying at "
               f"batch {b} (optimal speedup {ev[str(b - 1)]:.4f}x at {b - 1}, "
               f"{ev[str(b)]:.4f}x at {b})."]
    lim = rep["large_batch_limit"]
    if "speedup" in lim:
        out.append(f"Large-batch limit (B5) at thresholds {th}: {lim['speedup']:.4f}x "
                   f"(compute-bound bound E[L_1]/(G_max+1) = {lim['bound']:.4f}).")
    return out
