"""Trace files (:mod:`validation.traces`, schema ``polyspec-trace`` v1) -> the
:class:`validation.compare.ConfigCapture` objects the comparison works on.

Per capture: the rounds of every verifying level; decode totals from the per-prompt
``summary`` records (cascade wall time, forward time and count per level); per model the
autoregressive baseline (Σ wall / Σ tokens, mean context ``ctx0 + j``) and every cost-curve
repeat as a timing sample ``(m, ctx, seconds)`` (start and end phases pooled; their drift is
reported in the notes when a model's ``T(1)`` moved by more than 5 % during the capture).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyspec_theory._input import PolyspecInputError

from .compare import ConfigCapture, LevelRounds, ModelBaseline
from .traces import Trace, TraceError, read_trace

__all__ = ["capture_from_trace", "load_captures", "phase_drift"]

DRIFT_NOTE = 0.05


def phase_drift(trace: Trace, model: str) -> float | None:
    """Median ``T(1)`` at the end of the capture / at its start, minus 1 (``None`` if the
    trace lacks one of the two phases)."""
    ct = trace.costs.get(model)
    if ct is None:
        return None
    out = {}
    for ph in ("start", "end"):
        sel = (ct.phase == ph) & (ct.m == 1)
        if sel.any():
            out[ph] = float(np.median(np.concatenate([t for t, s in zip(ct.times_s, sel,
                                                                         strict=True) if s])))
    if len(out) < 2 or out["start"] <= 0:
        return None
    return out["end"] / out["start"] - 1.0


def capture_from_trace(trace: Trace) -> tuple[ConfigCapture, list[str]]:
    """One :class:`ConfigCapture` (and notes) from a parsed trace."""
    where = trace.path
    names = trace.model_names
    n = len(names)
    if not trace.summaries:
        raise TraceError(f"{where}: no finished prompt (no summary record)")
    notes = []
    if not trace.complete:
        notes.append(f"{Path(where).name}: capture not finished (no end record); "
                     f"{len(trace.summaries)} prompt(s) used")
    if trace.truncated_tail:
        notes.append(f"{Path(where).name}: truncated last line skipped (--allow-truncated)")
    if trace.n_discarded:
        notes.append(f"{Path(where).name}: {trace.n_discarded} record(s) of an interrupted "
                     "attempt discarded (resume)")
    done = {int(s["prompt"]) for s in trace.summaries}
    rounds = []
    for lv in range(1, n):
        r = trace.rounds.get(lv)
        if r is None or len(r) == 0:
            raise TraceError(f"{where}: no round records for level {lv} "
                             f"({names[lv - 1]} verifying {names[lv]})")
        keep = np.isin(r.prompt, list(done))
        rounds.append(LevelRounds(
            ctx=r.ctx[keep].astype(np.float64), G=r.G[keep], A=r.A[keep], m=r.m[keep],
            verify_s=r.verify_s[keep], draft_s=r.draft_s[keep], prompt=r.prompt[keep]))
    fs = trace.forward_time_per_level()
    fc = trace.forward_count_per_level()
    if len(fs) != n or len(fc) != n:
        raise TraceError(f"{where}: summary forward_s / forward_count need {n} entries")
    baselines = {}
    for name in names:
        ar = trace.ar.get(name)
        ar_t = ar_tok = ar_ctx = ar_f = None
        if ar is not None:
            keep = np.isin(ar.prompt, list(done))
            if keep.any():
                ar_t = float(ar.wall_s[keep].sum() / ar.n_tokens[keep].sum())
                ar_f = float(ar.forward_s[keep].sum() / ar.n_tokens[keep].sum())
                ar_tok = int(ar.n_tokens[keep].sum())
                ctx = np.concatenate([c + np.arange(k) for c, k, s in
                                      zip(ar.ctx0, ar.n_tokens, keep, strict=True) if s])
                ar_ctx = float(ctx.mean())
        ct = trace.costs.get(name)
        if ct is None or len(ct.m) == 0:
            raise TraceError(f"{where}: no cost-curve records for model {name!r}")
        reps = [len(t) for t in ct.times_s]
        cm = np.repeat(ct.m, reps)
        cc = np.repeat(ct.ctx, reps).astype(np.float64)
        cs = np.concatenate(ct.times_s)
        baselines[name] = ModelBaseline(name=name, ar_time_per_token=ar_t,
                                        ar_tokens=ar_tok or 0, ar_context=ar_ctx,
                                        cost_m=cm, cost_ctx=cc, cost_s=cs,
                                        ar_forward_per_token=ar_f)
        d = phase_drift(trace, name)
        if d is not None and abs(d) > DRIFT_NOTE:
            notes.append(f"{Path(where).name}: {name} T(1) moved {100 * d:+.1f} % between the "
                         "start and the end of the capture")
    if baselines[names[0]].ar_time_per_token is None:
        raise TraceError(f"{where}: no autoregressive baseline ('ar' records) for the target "
                         f"{names[0]!r}")
    summ = sorted(trace.summaries, key=lambda s: s["prompt"])
    cap = ConfigCapture(
        name=trace.name, models=tuple(names), thresholds=tuple(trace.thresholds),
        temperature=trace.temperature, top_k=int(trace.header.get("top_k", 0)),
        rounds=tuple(rounds), tokens=trace.n_generated,
        wall_s=float(sum(s["wall_s"] for s in summ)), forward_s=tuple(float(x) for x in fs),
        forward_count=tuple(int(x) for x in fc), baselines=baselines,
        policy=trace.header["cascade"].get("policy", "accumulate"), n_prompts=len(summ),
        source=where, notes=tuple(notes),
        prompt_wall_s=tuple(float(s["wall_s"]) for s in summ),
        prompt_tokens=tuple(int(s["n_generated"]) for s in summ),
    )
    return cap, notes


def load_captures(directory, *, allow_truncated: bool = False):
    """Read every ``*.jsonl`` trace of ``directory``; returns ``(captures, notes)``.

    Configuration names must be unique (a duplicate is renamed after its file)."""
    d = Path(directory)
    if not d.exists():
        raise PolyspecInputError("traces_dir", f"not found: {d}")
    if not d.is_dir():
        raise PolyspecInputError("traces_dir", f"not a directory: {d}")
    files = sorted(d.glob("*.jsonl"))
    if not files:
        raise PolyspecInputError("traces_dir", f"no *.jsonl trace files in {d}")
    caps, notes, seen = [], [], set()
    for f in files:
        cap, nts = capture_from_trace(read_trace(f, allow_truncated=allow_truncated))
        if cap.name in seen:
            cap = _renamed(cap, f.stem)
        seen.add(cap.name)
        caps.append(cap)
        notes.extend(nts)
    return caps, notes


def _renamed(cap: ConfigCapture, name: str) -> ConfigCapture:
    import dataclasses

    return dataclasses.replace(cap, name=name)
