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
from typing import NamedTuple

import numpy as np
from scipy import stats

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.traces.dataset import Capture
from validation.traces.schema import Round

__all__ = ["SyntheticSpec", "simulate_capture", "trace_header", "write_trace",
           "synthetic_profile"]


class SyntheticSpec(NamedTuple):
    """One configuration for :func:`simulate_capture`: ``models`` names (target first),
    ``costs`` :class:`CostCurve` per model, ``laws`` one :class:`AcceptanceLaw` per pair,
    ``thresholds`` one per pair; ``prompts`` of ``prompt_len`` tokens decoded to
    ``tokens_per_prompt``. Residual knobs (module docstring): ``context_slope`` (one per
    model), ``overhead_per_forward`` / ``overhead_per_round`` (s), ``noise`` (log-normal
    sd), ``rho`` (lag-1 correlation of the acceptance uniforms), ``catch_up``. Baselines:
    cost-curve timings for ``m = 1..baseline_max_m`` at ``baseline_contexts``
    (``baseline_reps`` each) and an autoregressive decode of ``ar_tokens`` tokens per prompt
    per model. ``load``: one factor per model multiplying its forward times during the
    cascade and AR runs but not in the cost-curve microbenchmark (machine load that differs
    between the two); ``cascade_load``: one factor per model applied only to its forwards
    inside the cascade (e.g. cold CPU caches after the other models ran); ``regimes``:
    ``[(weight, laws), ...]`` -- at the start of every top-level round one regime is drawn and
    all levels use its laws during that round (acceptance shared across levels; ``laws`` is
    then ignored)."""

    name: str
    models: tuple
    costs: tuple
    laws: tuple
    thresholds: tuple
    tokens_per_prompt: int = 256
    prompts: int = 8
    prompt_len: int = 32
    temperature: float = 0.0
    top_k: int = 0
    context_slope: object = None
    overhead_per_forward: float = 0.0
    overhead_per_round: float = 0.0
    noise: float = 0.0
    rho: float = 0.0
    catch_up: bool = False
    baseline_contexts: tuple = (32, 160, 288)
    baseline_reps: int = 3
    baseline_max_m: int = 16
    ar_tokens: int = 128
    load: object = None
    cascade_load: object = None
    regimes: object = None
    seed: int = 0


def _factors(v, n: int, field: str, default: float) -> np.ndarray:
    """One positive factor per model (``None``: ``default`` each)."""
    out = np.full(n, default) if v is None else np.asarray(v, dtype=float)
    if out.shape != (n,) or (default > 0 and (out <= 0).any()):
        what = "positive factor" if default > 0 else "slope"
        raise PolyspecInputError(field, f"need one {what} per model ({n})")
    return out


class _Run:
    """The synthetic decoder's state while it runs (:func:`simulate_capture`)."""

    def __init__(self, spec: SyntheticSpec):
        s = spec
        n = self.n = len(s.models)
        if n < 2 or len(s.costs) != n or len(s.laws) != n - 1 or len(s.thresholds) != n - 1:
            raise PolyspecInputError("models", "need n >= 2 models, n costs, n-1 "
                                     "laws/thresholds")
        for i, c in enumerate(s.costs):
            if not isinstance(c, CostCurve):
                raise PolyspecInputError(f"costs[{i}]", "must be a CostCurve")
        for i, law in enumerate(s.laws):
            if not isinstance(law, AcceptanceLaw):
                raise PolyspecInputError(f"laws[{i}]", "must be an AcceptanceLaw")
        self.spec = s
        self.theta = [as_int(t, f"thresholds[{i}]", low=1) for i, t in enumerate(s.thresholds)]
        self.rho = as_real(s.rho, "rho", low=-0.99, high=0.99)
        self.noise = as_real(s.noise, "noise", low=0.0)
        self.o_f = as_real(s.overhead_per_forward, "overhead_per_forward", low=0.0)
        self.o_r = as_real(s.overhead_per_round, "overhead_per_round", low=0.0)
        self.slope = _factors(s.context_slope, n, "context_slope", 0.0)
        self.ld = _factors(s.load, n, "load", 1.0)
        self.cl = _factors(s.cascade_load, n, "cascade_load", 1.0)
        self.rng = np.random.default_rng(as_int(s.seed, "seed", low=0))
        gmax = block_bounds(self.theta)
        regimes = [(1.0, s.laws)] if s.regimes is None else s.regimes
        w = np.array([x for x, _ in regimes], dtype=float)
        if (w <= 0).any() or any(len(lw) != n - 1 for _, lw in regimes):
            raise PolyspecInputError("regimes", "need positive weights and n-1 laws per "
                                     "regime")
        self.reg_w = w / w.sum()
        self.reg_surv = [[lw[i].survival(gmax[i] + 1)[1:] for i in range(n - 1)]
                         for _, lw in regimes]
        self.surv = list(self.reg_surv[0])
        self.records: list = []
        self.fwd_s, self.fwd_n = [0.0] * n, [0] * n
        self.z_prev, self.full_prev = [0.0] * (n - 1), [False] * (n - 1)

    def cost(self, i, m, c, loaded=True):
        t = (self.spec.costs[i](m) + self.slope[i] * c) * (self.ld[i] if loaded else 1.0)
        if self.noise:
            t *= math.exp(self.noise * self.rng.standard_normal())
        return t

    def uniform(self, i):
        if self.rho == 0.0:
            return self.rng.random()
        z = self.rho * self.z_prev[i] + math.sqrt(1 - self.rho ** 2) * self.rng.standard_normal()
        self.z_prev[i] = z
        return float(stats.norm.cdf(z))

    def round(self, i, base, pid):
        """One round of S_i at committed length ``base``; returns (L, seconds)."""
        if i == self.n - 1:
            t = self.cost(i, 1, base) * self.cl[i]
            self.fwd_s[i] += t
            self.fwd_n[i] += 1
            return 1, t + self.o_f
        acc, spent = 0, 0.0
        while acc < self.theta[i]:
            ln, dt = self.round(i + 1, base + acc, pid)
            acc += ln
            spent += dt
        g = acc
        m = g + 1 + (1 if (self.spec.catch_up and self.full_prev[i]) else 0)
        t = self.cost(i, m, base) * self.cl[i]
        self.fwd_s[i] += t
        self.fwd_n[i] += 1
        u = self.uniform(i)
        a = min(int(np.count_nonzero(self.surv[i][:g] > u)), g)
        self.full_prev[i] = a == g
        total = spent + t + self.o_f + self.o_r
        self.records.append(Round(prompt=pid, level=i + 1, ctx=base, G=g, A=a, L=a + 1, m=m,
                                  verify_s=t, draft_s=spent, round_s=total))
        return a + 1, total

    def prompt(self, pid) -> dict:
        """Decode prompt ``pid``; its summary record."""
        s, n = self.spec, self.n
        self.z_prev[:] = [0.0] * (n - 1)
        self.full_prev[:] = [False] * (n - 1)
        s0, n0, r0 = list(self.fwd_s), list(self.fwd_n), len(self.records)
        produced, wall = 0, 0.0
        while produced < s.tokens_per_prompt:
            if len(self.reg_surv) > 1:
                k = int(self.rng.choice(len(self.reg_surv), p=self.reg_w))
                self.surv[:] = self.reg_surv[k]
            ln, dt = self.round(0, s.prompt_len + produced, pid)
            produced += ln
            wall += dt
        f_s = [a - b for a, b in zip(self.fwd_s, s0, strict=True)]
        new = self.records[r0:]
        return {"type": "summary", "prompt": pid, "n_prompt_tokens": s.prompt_len,
                "n_generated": produced, "wall_s": wall, "prefill_s": 0.0, "forward_s": f_s,
                "forward_count": [a - b for a, b in zip(self.fwd_n, n0, strict=True)],
                "overhead_s": wall - sum(f_s),
                "n_rounds": [sum(1 for r in new if r.level == lv) for lv in range(1, n)],
                "matches_target_ar": None}

    def baselines(self) -> tuple[list, list]:
        """The cost-curve and autoregressive records of every model."""
        s = self.spec
        costs, ars = [], []
        for i, name_i in enumerate(s.models):
            for c in s.baseline_contexts:
                for m in range(1, s.baseline_max_m + 1):
                    times = [self.cost(i, m, c, loaded=False) for _ in range(s.baseline_reps)]
                    costs.append({"type": "cost", "model": name_i, "phase": "start",
                                  "ctx": int(c), "m": m, "times_s": times,
                                  "median_s": float(np.median(times))})
            for pid in range(s.prompts):
                steps = [self.cost(i, 1, s.prompt_len + j) for j in range(s.ar_tokens)]
                ars.append({"type": "ar", "prompt": pid, "model": name_i,
                            "n_tokens": s.ar_tokens, "wall_s": sum(steps),
                            "forward_s": sum(steps), "prefill_s": 0.0, "ctx0": s.prompt_len,
                            "step_s": steps})
        return costs, ars


def simulate_capture(spec: SyntheticSpec):
    """Simulate one captured configuration (:class:`SyntheticSpec`); returns ``(Capture,
    trace records)``."""
    spec = spec._replace(tokens_per_prompt=as_int(spec.tokens_per_prompt, "tokens_per_prompt",
                                                  low=1),
                         prompts=as_int(spec.prompts, "prompts", low=1))
    run = _Run(spec)
    summaries = [run.prompt(pid) for pid in range(spec.prompts)]
    trace_costs, trace_ar = run.baselines()
    trace = list(trace_costs)
    for pid in range(spec.prompts):
        trace += [{"type": "round", **r._asdict()} for r in run.records if r.prompt == pid]
        trace += [r for r in trace_ar if r["prompt"] == pid] + [summaries[pid]]
    trace.append({"type": "end", "n_prompts": spec.prompts})
    header = trace_header(spec.name, spec.models, run.theta, spec.temperature, spec.top_k,
                          spec.prompts, spec.seed)
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
    from validation.capture.composition_profile import CompositionProfile

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
