"""A synthetic decoder with known laws and costs, for testing the validation pipeline.

:func:`simulate_capture` runs the docs/theory.md §6 block policy round by round (numpy, seeded),
exactly like :class:`validation.schemes.chain.PolybasicDecoder` does with real models, but each
verify round draws ``A`` from a given acceptance law (capped at the block length) and each
forward of ``M_i`` over ``m`` positions at context ``c`` takes ``T_i(m) + d_i c`` seconds
(times an optional log-normal timing noise with median 1). Knobs for the residual sources:
decoder overhead per forward and per verify round, context slopes ``d_i``, lag-1 correlation
``rho`` of the acceptance uniforms between consecutive rounds of a level (Gaussian copula:
the marginal law is unchanged, only P1's independence assumption breaks), and the real
decoder's occasional extra verify position (``catch_up``).

It returns the trace records of the ``polyspec-trace`` v1 schema (:mod:`validation.traces.schema`:
``cost``, then per prompt its :class:`~validation.traces.schema.Round` records, its ``ar``
baselines and its ``summary``; then ``end``) and the :class:`validation.traces.dataset.Capture`
built from them by the same constructor the trace reader uses; :func:`write_trace` writes
them with the project's trace writer.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.traces.dataset import Capture
from validation.traces.schema import Round

__all__ = ["simulate_capture", "trace_header", "write_trace", "synthetic_profile"]


def simulate_capture(name: str, models, costs, laws, thresholds, *, tokens_per_prompt=256,
                     prompts=8, prompt_len=32, temperature=0.0, top_k=0, context_slope=None,
                     overhead_per_forward=0.0, overhead_per_round=0.0, noise=0.0, rho=0.0,
                     catch_up=False, baseline_contexts=(32, 160, 288), baseline_reps=3,
                     baseline_max_m=16, ar_tokens=128, load=None, cascade_load=None,
                     regimes=None, seed=0):
    """Simulate one captured configuration; returns ``(Capture, trace records)``.

    ``models`` names (target first), ``costs`` :class:`CostCurve` per model, ``laws`` one
    :class:`AcceptanceLaw` per pair, ``thresholds`` one per pair. Baselines: cost-curve
    timings for ``m = 1..baseline_max_m`` at ``baseline_contexts`` (``baseline_reps`` each)
    and an autoregressive decode of ``ar_tokens`` tokens per prompt per model. ``load``: one
    factor per model multiplying its forward times during the cascade and AR runs but not in
    the cost-curve microbenchmark (machine load that differs between the two);
    ``cascade_load``: one factor per model applied only to its forwards inside the cascade
    (e.g. cold CPU caches after the other models ran); ``regimes``: ``[(weight, laws), ...]``
    — at the start of every top-level round one regime is drawn and all levels use its laws
    during that round (acceptance shared across levels; ``laws`` is then ignored).
    """
    n = len(models)
    if n < 2 or len(costs) != n or len(laws) != n - 1 or len(thresholds) != n - 1:
        raise PolyspecInputError("models", "need n >= 2 models, n costs, n-1 laws/thresholds")
    for i, c in enumerate(costs):
        if not isinstance(c, CostCurve):
            raise PolyspecInputError(f"costs[{i}]", "must be a CostCurve")
    for i, law in enumerate(laws):
        if not isinstance(law, AcceptanceLaw):
            raise PolyspecInputError(f"laws[{i}]", "must be an AcceptanceLaw")
    theta = [as_int(t, f"thresholds[{i}]", low=1) for i, t in enumerate(thresholds)]
    tokens_per_prompt = as_int(tokens_per_prompt, "tokens_per_prompt", low=1)
    prompts = as_int(prompts, "prompts", low=1)
    rho = as_real(rho, "rho", low=-0.99, high=0.99)
    noise = as_real(noise, "noise", low=0.0)
    o_f = as_real(overhead_per_forward, "overhead_per_forward", low=0.0)
    o_r = as_real(overhead_per_round, "overhead_per_round", low=0.0)
    slope = np.zeros(n) if context_slope is None else np.asarray(context_slope, dtype=float)
    ld = np.ones(n) if load is None else np.asarray(load, dtype=float)
    if ld.shape != (n,) or (ld <= 0).any():
        raise PolyspecInputError("load", f"need one positive factor per model ({n})")
    cl = np.ones(n) if cascade_load is None else np.asarray(cascade_load, dtype=float)
    if cl.shape != (n,) or (cl <= 0).any():
        raise PolyspecInputError("cascade_load", f"need one positive factor per model ({n})")
    if slope.shape != (n,):
        raise PolyspecInputError("context_slope", f"need one slope per model ({n})")
    rng = np.random.default_rng(as_int(seed, "seed", low=0))
    gmax = block_bounds(theta)
    if regimes is None:
        regimes = [(1.0, laws)]
    reg_w = np.array([w for w, _ in regimes], dtype=float)
    if (reg_w <= 0).any() or any(len(lw) != n - 1 for _, lw in regimes):
        raise PolyspecInputError("regimes", "need positive weights and n-1 laws per regime")
    reg_w /= reg_w.sum()
    reg_surv = [[lw[i].survival(gmax[i] + 1)[1:] for i in range(n - 1)] for _, lw in regimes]
    surv = list(reg_surv[0])

    def cost(i, m, c, loaded=True):
        t = (costs[i](m) + slope[i] * c) * (ld[i] if loaded else 1.0)
        if noise:
            t *= math.exp(noise * rng.standard_normal())
        return t

    records: list[dict] = []
    fwd_s = [0.0] * n
    fwd_n = [0] * n
    z_prev = [0.0] * (n - 1)
    full_prev = [False] * (n - 1)

    def uniform(i):
        if rho == 0.0:
            return rng.random()
        z = rho * z_prev[i] + math.sqrt(1 - rho * rho) * rng.standard_normal()
        z_prev[i] = z
        return float(stats.norm.cdf(z))

    def run_round(i, base, pid, clock):
        """One round of S_i at committed length ``base``; returns (L, seconds)."""
        if i == n - 1:
            t = cost(i, 1, base) * cl[i]
            fwd_s[i] += t
            fwd_n[i] += 1
            return 1, t + o_f
        acc = 0
        spent = 0.0
        while acc < theta[i]:
            ln, dt = run_round(i + 1, base + acc, pid, clock)
            acc += ln
            spent += dt
        g = acc
        m = g + 1 + (1 if (catch_up and full_prev[i]) else 0)
        t = cost(i, m, base) * cl[i]
        fwd_s[i] += t
        fwd_n[i] += 1
        u = uniform(i)
        a = min(int(np.count_nonzero(surv[i][:g] > u)), g)
        full_prev[i] = a == g
        total = spent + t + o_f + o_r
        records.append(Round(prompt=pid, level=i + 1, ctx=base, G=g, A=a, L=a + 1, m=m,
                             verify_s=t, draft_s=spent, round_s=total))
        return a + 1, total

    summaries = []
    for pid in range(prompts):
        z_prev[:] = [0.0] * (n - 1)
        full_prev[:] = [False] * (n - 1)
        s0, n0, r0 = list(fwd_s), list(fwd_n), len(records)
        produced = 0
        wall = 0.0
        while produced < tokens_per_prompt:
            if len(reg_surv) > 1:
                surv[:] = reg_surv[int(rng.choice(len(reg_surv), p=reg_w))]
            ln, dt = run_round(0, prompt_len + produced, pid, wall)
            produced += ln
            wall += dt
        f_s = [a - b for a, b in zip(fwd_s, s0, strict=True)]
        new = records[r0:]
        summaries.append({
            "type": "summary", "prompt": pid, "n_prompt_tokens": prompt_len,
            "n_generated": produced, "wall_s": wall, "prefill_s": 0.0, "forward_s": f_s,
            "forward_count": [a - b for a, b in zip(fwd_n, n0, strict=True)],
            "overhead_s": wall - sum(f_s),
            "n_rounds": [sum(1 for r in new if r.level == lv) for lv in range(1, n)],
            "matches_target_ar": None})

    trace_costs, trace_ar = [], []
    for i, name_i in enumerate(models):
        for c in baseline_contexts:
            for m in range(1, baseline_max_m + 1):
                times = [cost(i, m, c, loaded=False) for _ in range(baseline_reps)]
                trace_costs.append({"type": "cost", "model": name_i, "phase": "start",
                                    "ctx": int(c), "m": m, "times_s": times,
                                    "median_s": float(np.median(times))})
        for pid in range(prompts):
            steps = [cost(i, 1, prompt_len + j) for j in range(ar_tokens)]
            trace_ar.append({"type": "ar", "prompt": pid, "model": name_i,
                             "n_tokens": ar_tokens, "wall_s": sum(steps),
                             "forward_s": sum(steps), "prefill_s": 0.0, "ctx0": prompt_len,
                             "step_s": steps})
    trace = list(trace_costs)
    for pid in range(prompts):
        trace += [{"type": "round", **r._asdict()} for r in records if r.prompt == pid]
        trace += [r for r in trace_ar if r["prompt"] == pid] + [summaries[pid]]
    trace.append({"type": "end", "n_prompts": prompts})
    header = trace_header(name, models, theta, temperature, top_k, prompts, seed)
    return Capture.from_records(header, trace, path="synthetic"), trace


def trace_header(name, models, thresholds, temperature=0.0, top_k=0, prompts=1,
                 seed: int = 0) -> dict:
    """A ``polyspec-trace`` v1 header (without schema fields) for a synthetic capture."""
    return {
        "created": "synthetic", "tool": "validation.traces.synthetic",
        "models": [{"name": m, "kind": "synthetic", "params": 0, "vocab_size": 0,
                    "max_len": None} for m in models],
        "dtype": "float64", "device": "synthetic", "torch": "none", "threads": 1,
        "cascade": {"name": name, "models": [{"name": m} for m in models],
                    "thresholds": [int(t) for t in thresholds], "acceptance": None,
                    "policy": "accumulate"},
        "temperature": float(temperature), "top_k": int(top_k), "seed": int(seed),
        "prompts": {"source": "synthetic", "n_prompts": int(prompts)},
        "time_base": "seconds", "prefill": "excluded",
    }


def _rounded(x, digits):
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, list):
        return [_rounded(v, digits) for v in x]
    return x


def write_trace(path, capture: Capture, trace_records, digits: int = 7):
    """Write a synthetic capture as a ``polyspec-trace`` file (via the project's writer);
    times rounded to ``digits`` decimals as the real capture does."""
    from validation.traces.records import TraceWriter

    header = {k: v for k, v in capture.header.items() if k not in ("schema", "schema_version")}
    header["cascade"] = dict(header["cascade"], name=capture.name)
    with TraceWriter(path, header) as w:
        for rec in trace_records:
            w.write({k: _rounded(v, digits) for k, v in rec.items()})
    return path


def synthetic_profile(models, costs, thresholds, *, context: float, ar_context: float,
                      context_slope=None, load=None, cascade_load=None):
    """The composition profile the synthetic decoder's cost model implies (what
    :func:`validation.capture.composition.profile_cascade` would measure on it without
    noise): verify
    time of a block ``G`` = ``(T_i(G + 1) + d_i context) load_i cascade_load_i`` for every
    block length the accumulate policy allows, the bottom model's forward likewise at
    ``m = 1``, and the target's autoregressive time per token at ``ar_context`` (no cascade
    load)."""
    from polyspec_theory.core.p1 import block_bounds
    from validation.capture.composition import CompositionProfile

    n = len(models)
    theta = [as_int(t, f"thresholds[{i}]", low=1) for i, t in enumerate(thresholds)]
    slope = np.zeros(n) if context_slope is None else np.asarray(context_slope, float)
    ld = np.ones(n) if load is None else np.asarray(load, float)
    cl = np.ones(n) if cascade_load is None else np.asarray(cascade_load, float)
    c = as_real(context, "context", low=0.0)
    gmax = block_bounds(theta)
    verify = [{g: [float((costs[i](g + 1) + slope[i] * c) * ld[i] * cl[i])]
               for g in range(theta[i], gmax[i] + 1)} for i in range(n - 1)]
    ar = float((costs[0](1) + slope[0] * as_real(ar_context, "ar_context", low=0.0)) * ld[0])
    return CompositionProfile(
        models=list(models), thresholds=theta, verify=verify,
        draft_s=float((costs[-1](1) + slope[-1] * c) * ld[-1] * cl[-1]), draft_forwards=0,
        ar_s=ar, ar_tokens=0, replay_wall_s=0.0, replay_forward_s=0.0, replay_tokens=0,
        settings={"source": "synthetic cost model"})
