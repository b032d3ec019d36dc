"""Forecast PipeSpec synchronous cascades from the other runs of a folder: per-prompt acceptance
laws of each pair (:mod:`.chain`), call costs measured in the traces, the decoder replayed.

Acceptance (docs/theory.md R1-R2): each pair's per-prompt run law (:mod:`.chain`), and, for the
pair next to the target, its agreement at the output positions the pair's other synchronous
runs revealed (any lookahead; a run left out reveals nothing).

Costs (seconds per call, all from the logged calls; every source is printed with the forecast):

* draft step of a model at a precision (:func:`draft_costs`): from its two-model synchronous
  runs (those with the same verifier when any), the mean over runs of each run's mean
  single-token step, with the run-to-run sd of those means (interval: +-1.96 sd), plus the
  extra of the first step after a reset (it feeds the tokens from the divergence on); no such
  run: the mean of its logged draft steps, else its greedy decode step.
* verify call of m tokens (:func:`verify_costs`): T(1) from its 1-token verify calls (else
  its greedy step at that precision) and, for m >= 2, the fully accepting K-token calls: a
  least-squares line in K through >= 3 lookaheads (linear beyond), else the measured points
  with a step from T(1) at m = 2 (flat beyond; interval: the line from T(1) .. linear
  beyond); a rejecting call adds :func:`reject_cost`.
* a precision never seen verifying is carried from one that was, assuming the verify call
  scales like the single-token step (ratio of the steps at the two precisions); interval:
  from the single-token step (flat) to the other precision's verify cost (fp16 is not slower
  than fp32).
* per-prompt overhead (prefills, EOS checks): total_time - sum of the logged calls, mean over
  runs with the same target, less :func:`per_round_overhead` x rounds (the EOS check each
  round, fitted across lookaheads); a model added to a chain adds half the overhead of its
  runs without the target (interval: none to all of it).

interval95: the replay at the low and high ends of the cost intervals, widened by 1.96 x the
RMS relative error of the leave-one-out forecasts of the folder's lookahead sweeps (the model
error measured on these traces) and the seed spread of the replay.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from polyspec_theory.core.runs import RunLaw
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import synchronous
from simulators.replay import ChainCosts, simulate_chain_priced
from validation.analysis.score import widened_interval
from validation.formats.pipespec import (
    PipeSpecRun,
    fit_age_hazard,
    measured_speedup,
    merge_positions,
    read_pipespec_dir,
    revealed_positions,
    round_exposures,
)
from validation.schemes import captures_of
from validation.schemes.chain import name as SCHEME  # the scheme whose runs this forecasts

SEEDS = 6


def chain_runs(runs) -> list[PipeSpecRun]:
    """The runs of PipeSpec's synchronous chain (the chain scheme: ``PipeSpecRun.scheme``),
    in order: every forecast here reads these."""
    return captures_of(runs, SCHEME)


def pair_runs(runs) -> list[PipeSpecRun]:
    """The two-model chain runs that draft (lookahead >= 2): the rounds a pair's law, its
    revealed positions and its verify and draft costs are read from."""
    return [r for r in chain_runs(runs) if len(r.models) == 2 and r.lookahead >= 2]


def sync_pairs(runs, drafter: str, verifier: str) -> list[PipeSpecRun]:
    return [r for r in chain_runs(runs) if r.names == (drafter, verifier)]


def prompt_laws(runs, drafter: str, verifier: str, indices) -> dict[int, RunLaw]:
    """Per-prompt law of a pair from its two-model synchronous runs (any lookahead); a prompt
    no run holds gets the law pooled over all prompts."""
    pr = [r for r in sync_pairs(runs, drafter, verifier) if r.lookahead >= 2]
    if not pr:
        raise PolyspecInputError("models", f"no two-model synchronous run of {drafter} -> "
                                 f"{verifier} in the traces: its acceptance is unknown")
    pooled = fit_age_hazard([round_exposures(r) for r in pr])
    out = {}
    for i in indices:
        sub = [replace(r, samples=tuple(s for s in r.samples if s.index == i)) for r in pr]
        sub = [r for r in sub if r.samples]
        out[i] = fit_age_hazard([round_exposures(r) for r in sub]) if sub else pooled
    return out


def _logged(run, j):
    return np.concatenate([s.model_times[j] for s in run.samples])


def baseline_of(runs, name: str, precision: str):
    """The greedy baseline of model ``name``: at ``precision`` if the folder has one, else
    at any (``None``: none)."""
    return _greedy(runs, name, precision) or next(
        (r for r in runs if r.is_baseline and r.names == (name,)), None)


def _greedy(runs, name, precision):
    for r in runs:
        if r.is_baseline and r.names == (name,) and r.target.precision == precision:
            return r
    return None


def draft_step(runs, name: str, precision: str) -> float:
    vals = [_logged(r, 0) for r in chain_runs(runs)
            if r.models[0].name == name and r.models[0].precision == precision]
    if vals:
        return float(np.concatenate(vals).mean())
    g = _greedy(runs, name, precision)
    if g is None:
        raise PolyspecInputError("dtype", f"no call of {name} at {precision} in the traces: "
                                 "its draft cost is unknown")
    return float(np.concatenate([s.token_times for s in g.samples]).mean())


def reject_cost(runs, name: str, precision: str) -> float:
    """Extra seconds of a target verify call that rejects a draft token: per run (one
    lookahead K), the mean of the rejecting minus the fully accepting calls that certainly
    fed K tokens, averaged over the runs weighted by their rejecting calls (calls of
    different lengths are never compared: T(K) grows with K); two-model chains; >= 0."""
    diffs, weights = [], []
    for r in pair_runs(runs):
        if r.target.name == name and r.target.precision == precision:
            rej, full = [], []
            for s in r.samples:
                a, t = s.accepted[0], s.model_times[1]
                after_full = np.zeros(len(a), dtype=bool)
                after_full[1:] = a[:-1] >= r.lookahead
                ok = ~(after_full & (a == 1))
                rej.append(t[ok & (a < r.lookahead)])
                full.append(t[ok & (a >= r.lookahead)])
            rej, full = np.concatenate(rej), np.concatenate(full)
            if rej.size and full.size:
                diffs.append(float(rej.mean() - full.mean()))
                weights.append(rej.size)
    if not diffs:
        return 0.0
    return max(0.0, float(np.average(diffs, weights=weights)))


def _certain_calls(run):
    """Target calls of a two-model synchronous run: (fully accepting calls that fed K tokens,
    rejecting calls that fed K tokens, calls after a fully accepted round that accepted 1:
    either a 1-token verify -- the drafter missed the bonus position -- or a K-token one)."""
    k = run.lookahead
    full, rej, amb = [], [], []
    for s in run.samples:
        a, t = s.accepted[0], s.model_times[1]
        after_full = np.zeros(len(a), dtype=bool)
        after_full[1:] = a[:-1] >= k
        unsure = after_full & (a == 1)
        full.append(t[~unsure & (a >= k)])
        rej.append(t[~unsure & (a < k)])
        amb.append(t[unsure])
    return np.concatenate(full), np.concatenate(rej), np.concatenate(amb)


def one_token_verify(runs, name, precision):
    """T(1) of a verifier: (seconds, how many calls, source). Its 1-token verify calls are the
    ambiguous calls (after a fully accepted round, accepting 1) in the lower cluster: below
    the midpoint of the fastest one and the mean K-token rejecting call of the same run. None
    found: the greedy step at this precision; neither: None."""
    ones = []
    for r in pair_runs(runs):
        if r.target.name == name and r.target.precision == precision:
            _, rej, amb = _certain_calls(r)
            if amb.size and rej.size:
                ones.append(amb[amb < (amb.min() + rej.mean()) / 2])
    ones = np.concatenate(ones) if ones else np.zeros(0)
    if ones.size >= 3:
        return float(ones.mean()), int(ones.size), (f"T(1) = mean of {ones.size} 1-token "
                                                    "verify calls")
    g = _greedy(runs, name, precision)
    if g is not None:
        return (float(np.concatenate([s.token_times for s in g.samples]).mean()), 0,
                "T(1) = greedy step")
    return None, 0, "T(1) not measured (the line below K)"


def _verify_points(runs, name, precision):
    pts = {}
    for r in chain_runs(runs):
        if r.target.name == name and r.target.precision == precision:
            if len(r.models) == 2 and r.lookahead >= 2:
                full = _certain_calls(r)[0]
            else:
                full = _logged(r, len(r.models) - 1)
            if full.size:
                pts.setdefault(r.lookahead, []).append(full)
    if not pts:
        return None
    ks = sorted(pts)
    vs = [float(np.concatenate(pts[k]).mean()) for k in ks]
    t1, _, src = one_token_verify(runs, name, precision)
    return ks, vs, t1, src


def verify_costs(runs, name: str, precision: str):
    """(point, low, high) verify cost entries ``(ms, secs, beyond)`` and a note. The shape the
    timed calls show: T(1) (1-token verify calls, else the greedy step) and, for m >= 2, the
    fully accepting K-token calls (a rejecting call adds :func:`reject_cost`): a least-squares
    line in K through >= 3 lookaheads (linear beyond), else the measured points with a step
    from T(1) to the first one (flat beyond; interval: the line from T(1), below)."""
    p = _verify_points(runs, name, precision)
    if p is not None:
        ks, vs, t1, src = p
        fk = [float(k) for k in ks]
        if len(ks) >= 3:
            b, a = np.polyfit(fk, vs, 1)
            top = max(fk[-1], 2.0)
            v1 = t1 if t1 is not None else a + b
            e = ((1.0, 2.0, top), (v1, a + 2 * b, a + b * top), "linear")
            return (e, e, e, f"{name}@{precision}: verify = line in K through lookaheads "
                    f"{', '.join(str(k) for k in ks)} for m >= 2; {src} ({v1:.5f} s)")
        if t1 is None:
            e = (tuple(fk), tuple(vs), "flat")
            return (e, e, (e[0], e[1], "linear"), f"{name}@{precision}: verify calls measured "
                    f"at lookahead(s) {', '.join(str(k) for k in ks)}; {src}")
        if fk[0] > 2:
            step = ((1.0, 2.0) + tuple(fk), (t1, vs[0]) + tuple(vs))
        else:
            step = ((1.0,) + tuple(fk), (t1,) + tuple(vs))
        line = ((1.0,) + tuple(fk), (t1,) + tuple(vs), "flat")
        return ((step[0], step[1], "flat"), line, (step[0], step[1], "linear"),
                f"{name}@{precision}: verify calls measured at lookahead(s) "
                f"{', '.join(str(k) for k in ks)}, a step from T(1) at m = 2; {src} "
                f"({t1:.5f} s; interval: the line from T(1) .. linear beyond)")
    for r in chain_runs(runs):
        if r.target.name == name:
            q = verify_costs(runs, name, r.target.precision) if _verify_points(
                runs, name, r.target.precision) else None
            if q is None:
                continue
            ms, vs, beyond = q[0]
            step = draft_step(runs, name, precision)
            v1 = float(np.interp(1.0, ms, vs))
            ratio = step / v1
            return ((ms, tuple(v * ratio for v in vs), beyond),
                    (ms, tuple(step for _ in vs), "flat"), q[2],
                    f"{name}@{precision}: verify carried from {r.target.precision} by the "
                    f"single-step ratio {ratio:.3f} (interval: flat at the {precision} step .. "
                    f"the {r.target.precision} verify cost)")
    raise PolyspecInputError("models", f"{name} never verifies in the traces: its verify cost "
                             "is unknown")


def draft_costs(runs, name: str, precision: str, verifier=None):
    """A drafter's step as its timed calls show it: (plain step s, run-to-run sd of a run's
    mean plain step, extra s of the first step after a reset, source). From its two-model
    synchronous runs (those with this verifier and precision when there are any): a round
    after a rejection starts with the drafter reset to the verifier's output, and its first
    step feeds the tokens from the divergence on; every other step feeds one token. No such
    run: :func:`draft_step` (no split, no spread)."""
    cand = [r for r in pair_runs(runs) if r.models[0].name == name
            and r.models[0].precision == precision]
    same = [r for r in cand if verifier is not None
            and (r.models[1].name, r.models[1].precision) == verifier]
    cand = same or cand
    if not cand:
        d = draft_step(runs, name, precision)
        return d, 0.0, 0.0, f"{name}@{precision}: draft step {d:.5f} s (all its logged steps)"
    plain_by_run, first = [], []
    for r in cand:
        k, plain = r.lookahead, []
        for s in r.samples:
            d, i, prev = s.model_times[0], 0, None
            for a in s.accepted[0]:
                n = k if prev is not None and prev >= k else k - 1
                if prev is not None and prev < k:
                    first.append(d[i:i + 1])
                    plain.append(d[i + 1:i + n])
                else:
                    plain.append(d[i:i + n])
                i += n
                prev = int(a)
        plain_by_run.append(float(np.concatenate(plain).mean()))
    step = float(np.mean(plain_by_run))
    sd = float(np.std(plain_by_run, ddof=1)) if len(plain_by_run) > 1 else 0.0
    first = np.concatenate(first) if first else np.zeros(0)
    extra = max(0.0, float(first.mean()) - step) if first.size else 0.0
    spread = (f"run-to-run sd {sd:.5f} s" if len(plain_by_run) > 1 else
              "one run: no run-to-run spread measured")
    return step, sd, extra, (f"{name}@{precision}: draft step {step:.5f} s (mean of "
                             f"{len(cand)} runs' single-token steps, {spread}"
                             f"), +{extra:.5f} s for the first step after a rejection")


def _overhead(run):
    return float(np.mean([s.total_time - sum(float(t.sum()) for t in s.model_times)
                          for s in run.samples]))


def per_round_overhead(runs, models) -> float:
    """Seconds per target round outside every logged call (the EOS check): the least-squares
    slope of a prompt's unlogged time on its rounds over the two-model synchronous runs of
    this pair (>= 2 lookaheads; else 0), never below 0."""
    x, y, ks = [], [], set()
    for r in chain_runs(runs):
        if r.names == tuple(m.name for m in models) and len(models) == 2:
            ks.add(r.lookahead)
            for s in r.samples:
                x.append(len(s.accepted[-1]))
                y.append(s.total_time - sum(float(t.sum()) for t in s.model_times))
    if len(ks) < 2:
        return 0.0
    b = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0]
    return max(0.0, float(b))


def overhead(runs, models) -> tuple[float, float, float]:
    names = [m.name for m in models]
    tgt = models[-1]
    same = [r for r in chain_runs(runs) if r.target.name == tgt.name
            and set(r.names) <= set(names)]
    if not same:
        raise PolyspecInputError("models", f"no synchronous run with target {tgt.name}")
    base = float(np.mean([_overhead(r) for r in same]))
    covered = set().union(*(set(r.names) for r in same))
    extra = [n for n in names if n not in covered]
    if len(names) > 2:
        lower = [r for r in chain_runs(runs) if tgt.name not in r.names
                 and set(r.names) <= set(names)]
        if lower:
            add = float(np.mean([_overhead(r) for r in lower]))
            return base + add / 2, base, base + add
    if extra:
        raise PolyspecInputError("models", f"no overhead measured with {', '.join(extra)}")
    return base, base, base


def _default_precision(runs, name):
    for r in runs:
        if r.is_baseline and r.names == (name,):
            return r.target.precision
    for r in runs:
        for m in r.models:
            if m.name == name:
                return m.precision
    raise PolyspecInputError("models", f"{name!r} is in no trace file (models seen: "
                             f"{', '.join(sorted({m.name for r in runs for m in r.models}))})")


def _spec(runs, name, precision):
    for r in runs:
        for m in r.models:
            if m.name == name and m.precision == precision:
                return m
    for r in runs:
        for m in r.models:
            if m.name == name:
                return replace(m, dtype=precision, quantize=None)
    return _default_precision(runs, name)


def top_pair_positions(runs, models, idx):
    """Per prompt of ``idx``: the top pair's agreement at the output positions its two-model
    synchronous runs at the same precisions revealed (R1: a function of the position; any
    lookahead), merged; and how many runs gave them."""
    d, v = models[-2], models[-1]
    src = [r for r in chain_runs(runs) if len(r.models) == 2
           and (r.models[0].name, r.models[0].precision) == (d.name, d.precision)
           and (r.models[1].name, r.models[1].precision) == (v.name, v.precision)]
    maps = [revealed_positions(r) for r in src]
    return [merge_positions([m[i] for m in maps if i in m]) for i in idx], len(src)


def _speedups(base, laws, priced, k, idx, n_tok, known=None):
    """Per ``(costs, seeds)`` of ``priced``: (speedup, per-prompt seconds, standard error of
    the speedup over the seeds ``0..seeds-1``). A seed's replay is made once and priced under
    every costs that uses it (:func:`simulate_chain_priced`: the same times as a replay
    per costs)."""
    per = [[] for _ in priced]
    for s in range(max(seeds for _, seeds in priced)):
        use = [j for j, (_, seeds) in enumerate(priced) if s < seeds]
        outs = simulate_chain_priced(laws, [priced[j][0] for j in use], k, n_tok, seed=s,
                                     known=known)
        for j, out in zip(use, outs, strict=True):
            per[j].append(out["time"])
    return [_speedup_of(base, np.array(p), idx, n_tok) for p in per]


def _speedup_of(base, per, idx, n_tok):
    """(speedup, per-prompt seconds, standard error) from the replays' times ``per`` (seeds x
    prompts)."""
    seeds = len(per)
    times = per.mean(axis=0)
    b = base.by_index()
    bt = sum(b[i].total_time for i in idx) / sum(b[i].tokens_generated for i in idx)
    each = bt / (per.sum(axis=1) / sum(n_tok))
    se = float(each.std(ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0
    return bt / (times.sum() / sum(n_tok)), times, se


def chain_inputs(runs, names, precisions=None):
    """What every forecast of the chain ``names`` (smallest first) starts from: the model
    specs, the target's greedy baseline, its prompts that some non-async run of the target
    decoded, and their token counts."""
    precisions = dict(precisions or {})
    for n in precisions:
        if n not in names:
            raise PolyspecInputError("dtype", f"{n!r} is not one of the models {names}")
    models = tuple(_spec(runs, n, precisions.get(n) or _default_precision(runs, n))
                   for n in names)
    tgt = models[-1]
    base = baseline_of(runs, tgt.name, tgt.precision)
    if base is None:
        raise PolyspecInputError("models", f"no greedy baseline of {tgt.name} in the traces")
    tokens = {}
    for r in runs:
        # the synchronous decoders' runs (the chain and the greedy baseline, scheme None)
        if r.target.name == tgt.name and (r.scheme is None or synchronous(r.scheme)):
            for s in r.samples:
                tokens.setdefault(s.index, s.tokens_generated)
    idx = [s.index for s in base.samples if s.index in tokens]
    n_tok = [tokens[i] for i in idx]
    return models, base, idx, n_tok


def forecast_chain(runs, names, lookahead: int, precisions=None, *, model_error=None,
                   seeds: int = SEEDS) -> dict:
    """Predicted speedup of the synchronous chain ``names`` (smallest first) at ``lookahead``
    over the target's greedy baseline, from ``runs`` (a run of this very configuration must
    not be among them)."""
    if len(names) < 2:
        raise PolyspecInputError("models", "a cascade needs >= 2 models")
    if isinstance(lookahead, bool) or not isinstance(lookahead, (int, np.integer)):
        raise PolyspecInputError("lookahead", f"must be an integer, got {lookahead!r}")
    k = int(lookahead)
    if k < 1 or k > 100:
        raise PolyspecInputError("lookahead", f"must be in 1..100, got {lookahead}")
    models, base, idx, n_tok = chain_inputs(runs, names, precisions)
    per_pair = [prompt_laws(runs, names[j], names[j + 1], idx) for j in range(len(names) - 1)]
    laws = [tuple(p[i] for p in per_pair) for i in idx]
    known, n_known = top_pair_positions(runs, models, idx)
    notes = []
    ver = []
    for m in models[1:]:
        v = verify_costs(runs, m.name, m.precision)
        ver.append(v[:3])
        notes.append(v[3])
    dc = [draft_costs(runs, m.name, m.precision, (up.name, up.precision))
          for m, up in zip(models[:-1], models[1:], strict=True)]
    drafts = tuple(d[0] for d in dc)
    spread = tuple(1.96 * d[1] for d in dc)
    d_lo = tuple(d - w for d, w in zip(drafts, spread, strict=True))
    d_hi = tuple(d + w for d, w in zip(drafts, spread, strict=True))
    d_reset = tuple(d[2] for d in dc)
    notes += [d[3] for d in dc]
    o, o_lo, o_hi = overhead(runs, models)
    pr = per_round_overhead(runs, models)
    rej = tuple(reject_cost(runs, m.name, m.precision) for m in models[1:])
    # the per-prompt overhead measured holds the per-round part of the runs it came from
    same = [r for r in chain_runs(runs) if r.names == tuple(names)]
    mean_rounds = (float(np.mean([len(s.accepted[-1]) for r in same for s in r.samples]))
                   if same else 0.0)
    o, o_lo, o_hi = (x - pr * mean_rounds for x in (o, o_lo, o_hi))
    point = ChainCosts(drafts, tuple(v[0] for v in ver), o, rej, d_reset, pr)
    lo = ChainCosts(d_lo, tuple(v[1] for v in ver), o_lo, rej, d_reset, pr)
    hi = ChainCosts(d_hi, tuple(v[2] for v in ver), o_hi, rej, d_reset, pr)
    half = max(2, seeds // 2)
    (sp, times, se), (sp_fast, _, _), (sp_slow, _, _) = _speedups(
        base, laws, ((point, seeds), (lo, half), (hi, half)), k, idx, n_tok, known)
    rel = math.hypot(model_error or 0.0, se / sp)
    warnings = []
    if model_error is None:
        warnings.append("the forecasts' own error is not measured here (no synchronous run "
                        "can be forecast from the others: leave-one-out needs each run's pairs "
                        "in other runs): interval95 holds the cost and seed spread only")
    if k == 1:
        warnings.append("lookahead 1 drafts nothing: PipeSpec's drafter only catches up with "
                        "its verifier (K - 1 = 0 drafts ahead) and every verify call feeds 1 "
                        "token, so each round is a drafter step plus a 1-token verify -- "
                        "slower than greedy decoding by construction (no acceptance is "
                        "measured at this lookahead; the forecast replays that policy)")
    return {
        "models": list(names),
        "precisions": {m.name: m.precision for m in models},
        "lookahead": k,
        "warnings": warnings,
        "speedup": sp,
        "interval95": widened_interval(min(sp, sp_fast, sp_slow), max(sp, sp_fast, sp_slow),
                                       rel),
        "cost_interval": [min(sp_fast, sp_slow), max(sp_fast, sp_slow)],
        "model_error_rel_sd": model_error,
        "baseline": base.path,
        "prompts": idx,
        "predicted_time_per_token_s": float(times.sum() / sum(n_tok)),
        "acceptance_source": [f"{names[j]} -> {names[j + 1]}: per-prompt age-hazard law from "
                              f"{len(sync_pairs(runs, names[j], names[j + 1]))} two-model "
                              "synchronous run(s)" for j in range(len(names) - 1)]
        + [f"{names[-2]} -> {names[-1]}: agreement at "
           f"{sum(len(m) for m in known)} output positions revealed by {n_known} two-model "
           "synchronous run(s) of the pair (R1; the law elsewhere)"],
        "cost_source": notes + [f"draft steps (s): {', '.join(f'{d:.5f}' for d in drafts)} "
                                f"(interval +-{', '.join(map(_spread, spread, dc))}"
                                ", the run-to-run spread); rejecting verify calls "
                                f"+{', '.join(f'{x:.5f}' for x in rej)} s; overhead per "
                                f"prompt {o:.4f} s + {pr * 1e3:.3f} ms per round"],
    }


def _spread(width, draft_cost) -> str:
    """A draft step's interval half-width, or why there is none (one run: not measured)."""
    return f"{width:.5f}" if "one run" not in draft_cost[3] else "0 (one run: unmeasured)"


def sweeps(runs) -> dict[tuple[str, str], list[PipeSpecRun]]:
    """Two-model synchronous runs grouped by pair, for pairs seen at >= 3 lookaheads."""
    g: dict[tuple[str, str], list[PipeSpecRun]] = {}
    for r in pair_runs(runs):
        g.setdefault(r.names, []).append(r)
    return {k: sorted(v, key=lambda r: r.lookahead) for k, v in g.items()
            if len({r.lookahead for r in v}) >= 3}


def leave_one_out(runs, seeds: int = SEEDS) -> list[dict]:
    """Every synchronous cascade run whose pairs appear in other runs, forecast from the
    others (its own file left out): predicted vs measured speedup."""
    out = []
    for r in chain_runs(runs):
        others = [x for x in runs if x is not r]
        pairs = zip(r.names[:-1], r.names[1:], strict=True)
        if any(not sync_pairs(others, a, b) for a, b in pairs):
            continue
        base = baseline_of(runs, r.target.name, r.target.precision)
        if base is None:
            continue
        f = forecast_chain(others, r.names, r.lookahead,
                           {m.name: m.precision for m in r.models}, seeds=seeds)
        meas = measured_speedup(base, r)
        out.append({"name": r.path.rsplit("/", 1)[-1], "models": list(r.names),
                    "lookahead": r.lookahead, "predicted_speedup": f["speedup"],
                    "measured_speedup": meas, "error": f["speedup"] / meas - 1})
    return out


def model_error(runs, seeds: int = 2) -> float | None:
    """RMS relative error of the leave-one-out forecasts (None when nothing can be left out)."""
    loo = leave_one_out(runs, seeds=seeds)
    if not loo:
        return None
    return float(np.sqrt(np.mean([c["error"] ** 2 for c in loo])))


def refuse_existing(runs, names, lookahead, precisions):
    for r in chain_runs(runs):
        if (r.names == tuple(names) and r.lookahead == lookahead
                and all(precisions.get(m.name, m.precision) == m.precision for m in r.models)):
            raise PolyspecInputError(r.path, "this configuration was measured: the folder "
                                     "already holds it (compare with validate, or leave the "
                                     "file out to forecast it)")


def resolve_model_names(runs, names, precisions=None):
    """``names`` (and the keys of ``precisions``) as the trace files spell them: a name may be
    any part of one seen model name that no other contains (``1B`` for
    ``Llama-3.2-1B-Instruct``, case-insensitive); an exact name always wins. An unknown or
    ambiguous name is a one-line error listing the names to use."""
    seen = sorted({m.name for r in runs for m in r.models})

    def one(name, field):
        if name in seen:
            return name
        hits = [s for s in seen if name.lower() in s.lower()]
        if len(hits) == 1:
            return hits[0]
        what = (f"{name!r} matches {', '.join(hits)}: give more of the name" if hits else
                f"{name!r} is in no trace file")
        raise PolyspecInputError(field, f"{what} (models seen: {', '.join(seen)})")

    full = tuple(one(n, "models") for n in names)
    if len(set(full)) != len(full):
        raise PolyspecInputError("models", f"{', '.join(names)} name the same model twice "
                                 f"({', '.join(full)})")
    prec = {one(k, "dtype"): v for k, v in (precisions or {}).items()}
    return full, prec


def forecast_dir(directory, names, lookahead, precisions=None) -> dict:
    runs = read_pipespec_dir(directory)
    names, precisions = resolve_model_names(runs, names, precisions)
    full = {n: precisions.get(n) or _default_precision(runs, n) for n in names}
    refuse_existing(runs, names, int(lookahead), full)
    out = forecast_chain(runs, names, lookahead, full, model_error=model_error(runs))
    out["models_resolved"] = list(names)
    return out


def require_baselines(runs, directory) -> list[str]:
    """A PipeSpec folder's speedups are over each target's greedy run: the targets of its
    synchronous chains that have none (their chains still give laws and costs, but no speedup
    of theirs can be forecast); a folder where no target has one is refused, naming the files
    missing."""
    targets = {r.target.name for r in chain_runs(runs)}
    missing = sorted(targets - {r.target.name for r in runs if r.is_baseline})
    if targets and len(missing) == len(targets):
        raise PolyspecInputError(str(directory), f"no greedy baseline of {', '.join(missing)} "
                                 f"(greedy_<model>.json): every speedup is over the target's "
                                 "greedy run")
    return missing


def plan_dir(directory, lookaheads=range(1, 21)) -> dict:
    """Every synchronous chain of the seen models, per target, at every lookahead up to the
    largest the target was seen verifying (no extrapolation of its verify cost): the best per
    chain and whether a third model pays (its interval above the best two-model chain's)."""
    runs = read_pipespec_dir(directory)
    require_baselines(runs, directory)
    err = model_error(runs)
    targets = {r.target.name for r in chain_runs(runs)}
    rows = []
    for tgt in sorted(targets):
        drafters = sorted({n for r in chain_runs(runs) if r.target.name == tgt
                           for n in r.names[:-1]})
        chains = [(d, tgt) for d in drafters]
        for a in drafters:
            for b in drafters:
                if a != b and sync_pairs(runs, a, b):
                    chains.append((a, b, tgt))
        kmax = max(r.lookahead for r in chain_runs(runs) if r.target.name == tgt)
        for ch in chains:
            best = None
            for k in [k for k in lookaheads if k <= kmax]:
                try:
                    f = forecast_chain(runs, ch, k, model_error=err, seeds=2)
                except PolyspecInputError:
                    break
                if best is None or f["speedup"] > best["speedup"]:
                    best = f
            if best is not None:  # ranked on 2 seeds; shown as `forecast` prints it (one
                # number per configuration: the same call, the same seeds)
                best = forecast_chain(runs, ch, best["lookahead"], model_error=err)
                rows.append({"target": tgt, "models": list(ch), "lookahead": best["lookahead"],
                             "speedup": best["speedup"], "interval95": best["interval95"],
                             "precisions": best["precisions"]})
    verdicts = []
    for tgt in sorted(targets):
        two = [r for r in rows if r["target"] == tgt and len(r["models"]) == 2]
        three = [r for r in rows if r["target"] == tgt and len(r["models"]) == 3]
        if two and three:
            b2 = max(two, key=lambda r: r["speedup"])
            b3 = max(three, key=lambda r: r["speedup"])
            pays = b3["interval95"][0] > b2["interval95"][1]
            verdicts.append({"target": tgt, "best_two_model": b2, "best_three_model": b3,
                             "third_model_pays": bool(pays),
                             "why": ("its interval lies above the best two-model chain's"
                                     if pays else "its interval overlaps or lies below the "
                                     "best two-model chain's")})
    return {"chains": sorted(rows, key=lambda r: -r["speedup"]), "third_model": verdicts,
            "model_error_rel_sd": err,
            "missing_baselines": require_baselines(runs, directory)}
