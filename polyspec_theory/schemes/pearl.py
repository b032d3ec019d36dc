"""``pearl``: parallel draft-verify (PEARL, as nano-PEARL runs it; PL0-PL3, docs/theory.md
Part VI-PL). A config with ``"mode": "pearl"``: two models, ``thresholds[0]`` = ``gamma``, the
target's ``overhead`` = the handshake of a step, ``"batch": b`` (optional) a lockstep batch.

The drafter (its own device) drafts the next block of ``gamma`` tokens while the target
verifies the previous one; all ``b`` sequences of a batch advance in lockstep steps. A
sequence is in *pre-verify* (the target checks the first draft of the current block) or
*post-verify* (the target checks the ``gamma - 1`` unverified drafts of the previous block and
the first of the current one). A step costs
``max(gamma T_d(b), T_t(n_pre + gamma n_post)) + o`` (``o``: the handshake). Every drafted
position is checked, in order, until a rejection: the accepted drafts since the drafter's
last resync form a *run* ``R`` with survival ``S_k = P(R >= k)`` (iid ``alpha^k``; positional
``prod alpha_j``, positions counted from the resync; R1's run law). One run is a renewal
cycle of one sequence: ``1 + ceil(R / gamma)`` steps, ``R + 1`` tokens (PL1).

* :func:`pearl_chain` -- PL1: the per-sequence chain (MAT, tokens per step, post share).
* :func:`pearl_step_costs`, :func:`predict_pearl` -- PL1/PL2: exact long-run time per token
  for one sequence and for a lockstep batch (``n_post ~ Binomial(b, post share)``).
* :func:`pearl_horizon` -- PL3: the exact expectations of a run of ``steps`` steps from
  all-pre-verify, as nano-PEARL's benchmark counts them (tokens, ``tokens_per_step``, MAT).
* :func:`start_up_gamma` -- nano-PEARL's start-up rule for ``gamma``.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.config import Cascade, as_cascade
from ..core.costs import BatchCostCurve
from ..core.explain import law_text
from ..core.laws import IIDGeometric, Positional
from ..core.runs import RunLaw
from ..errors import PolyspecInputError, as_int, as_real
from ..serving.batch import as_batch
from . import get

__all__ = ["name", "description", "mode", "threshold_floor", "fields", "claims", "check",
           "predict", "report", "explain", "BENCH_STEPS", "MAX_GAMMA", "MAX_STEPS",
           "RunAcceptance", "run_acceptance", "PearlChain", "pearl_chain", "pearl_step_costs",
           "PearlPrediction", "predict_pearl", "predict_pearl_cascade", "PearlHorizon",
           "pearl_horizon", "pearl_horizons", "pearl_horizon_cascade", "start_up_gamma",
           "pearl_costs", "pearl_pair"]

MAX_GAMMA = 4096
MAX_STEPS = 100_000  # the longest finite horizon PL3 computes


@dataclass(frozen=True)
class RunAcceptance:
    """The law of a run of accepted drafts since the drafter's last resync: ``accept[a]`` =
    P(the draft at age ``a`` is accepted | the ``a`` before it were), ages ``>= len(accept)``
    accept with probability ``ratio`` (the geometric tail)."""

    accept: tuple[float, ...]
    ratio: float

    def p(self, age: int) -> float:
        return self.accept[age] if age < len(self.accept) else self.ratio

    def head(self) -> np.ndarray:
        """``S_0..S_K`` (``K = len(accept)``); past ``K``, ``S_{K+j} = S_K ratio^j``."""
        return np.concatenate([[1.0], np.cumprod(np.asarray(self.accept, dtype=np.float64))])

    def outcome(self, age: int, m: int) -> tuple[np.ndarray, float]:
        """A check of ``m`` drafts starting at ``age``: ``P(n accepted, then a rejection)``
        for ``n = 0..m-1``, and ``P(all m accepted)``."""
        out = np.empty(m)
        s = 1.0
        for n in range(m):
            p = self.p(age + n)
            out[n] = s * (1.0 - p)
            s *= p
        return out, s


def run_acceptance(law, field: str = "acceptance[0]") -> RunAcceptance:
    """The run law of a pair's acceptance law under PEARL (PL0): iid ``alpha`` (every age
    ``alpha``), positional ``alpha_1..alpha_J`` (age ``a`` accepts with ``alpha_{a+1}``, the
    last repeating: positions count from the drafter's last resync) or a run law with
    ``hazard`` and ``tail`` (R1: age ``a`` accepts with ``1 - hazard[a]``). Other laws are
    refused: their runs have no geometric tail."""
    if isinstance(law, IIDGeometric):
        return RunAcceptance((), float(law.alpha))
    if isinstance(law, Positional):
        a = tuple(float(x) for x in law.alphas)
        return RunAcceptance(a[:-1], a[-1])
    if isinstance(law, RunLaw):
        return RunAcceptance(tuple(1.0 - h for h in law.hazard), 1.0 - law.tail)
    fam = getattr(law, "family", type(law).__name__)
    raise PolyspecInputError(field, f"parallel draft-verify (PEARL) needs a run law with a "
                             f"geometric tail: iid alpha, positional or a run law "
                             f"(hazard, tail); got the {fam!r} law")


def _gamma(gamma) -> int:
    return as_int(gamma, "gamma", low=1, high=MAX_GAMMA)


@dataclass(frozen=True)
class PearlChain:
    """PL1: one sequence's chain of pre-/post-verify steps. ``mat`` = ``E[R] + 1`` (tokens
    per run: MAT in the long run; ``inf`` if runs may never end); ``steps_per_run`` =
    ``1 + E[ceil(R / gamma)]``; ``post_share`` = long-run share of steps in post-verify;
    ``tokens_per_step`` = long-run verified tokens per step; ``drafts_wasted`` = share of the
    drafter's drafts never accepted; ``period`` of the cycle length (1: aperiodic)."""

    gamma: int
    mat: float
    steps_per_run: float
    post_share: float
    tokens_per_step: float
    drafts_wasted: float
    period: int

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("gamma", "mat", "steps_per_run", "post_share",
                                              "tokens_per_step", "drafts_wasted", "period")}


def _period(run: RunAcceptance, gamma: int, s: np.ndarray) -> int:
    """gcd of the support of the cycle length ``1 + ceil(R / gamma)`` (1 when the tail is
    geometric with ``0 < ratio < 1``: every large ``R`` is possible)."""
    k = len(run.accept)
    if s[k] > 0.0 and 0.0 < run.ratio < 1.0:
        return 1
    if s[k] > 0.0 and run.ratio == 1.0:
        return 1  # runs of positive probability never end: post-verify absorbs
    g = 0
    for r in range(k + 1):
        p_r = s[r] * (1.0 - run.p(r))
        if p_r > 0.0:
            g = math.gcd(g, 1 + -(-r // gamma))
    return g or 1


def pearl_chain(law, gamma) -> PearlChain:
    """PL1 for the run law of ``law`` (:func:`run_acceptance`) and draft length ``gamma``.

    With ``u = 1 - ratio`` every sum is formed multiplied by ``u`` (``mat_u = u (E[R] + 1)``,
    ``ceil_u = u E[ceil(R/gamma)]``), so ``ratio -> 1`` is stable and ``ratio = 1`` exact."""
    gamma = _gamma(gamma)
    run = law if isinstance(law, RunAcceptance) else run_acceptance(law)
    s = run.head()
    k = len(run.accept)
    rho = run.ratio if s[k] > 0.0 else 0.0  # a run that stopped has no tail
    u = 1.0 - rho
    mat_u = u * float(np.sum(s[:k])) + s[k]
    j0 = max(0, -(-(k - 1) // gamma))  # first j with j gamma + 1 >= K
    head_terms = [s[j * gamma + 1] for j in range(j0) if j * gamma + 1 < k]
    geo = float(np.sum(rho ** np.arange(gamma)))  # (1 - rho^gamma) / (1 - rho), stably
    ceil_u = u * float(np.sum(head_terms)) + s[k] * rho ** (j0 * gamma + 1 - k) / geo
    cycle_u = u + ceil_u  # u E[D]
    accepted_u = mat_u - u  # u E[R]
    return PearlChain(
        gamma=gamma,
        mat=float(mat_u / u) if u > 0.0 else math.inf,
        steps_per_run=float(cycle_u / u) if u > 0.0 else math.inf,
        post_share=float(ceil_u / cycle_u),
        tokens_per_step=float(mat_u / cycle_u),
        drafts_wasted=float(1.0 - accepted_u / (gamma * cycle_u)),
        period=_period(run, gamma, s),
    )


def pearl_step_costs(draft_step: float, target_cost: Callable[[int], float], gamma, batch,
                     overhead: float = 0.0) -> np.ndarray:
    """``c[k] = max(gamma draft_step, target_cost(b + (gamma - 1) k)) + overhead`` for
    ``k = 0..b`` sequences in post-verify (PL0): the target's forward carries one token per
    pre-verify sequence and ``gamma`` per post-verify one."""
    gamma = _gamma(gamma)
    b = as_batch(batch)
    d = as_real(draft_step, "draft_step", low=0.0)
    o = as_real(overhead, "overhead", low=0.0)
    tokens = b + (gamma - 1) * np.arange(b + 1)
    t = np.array([as_real(float(target_cost(int(n))), f"target_cost({int(n)})", low=0.0)
                  for n in tokens])
    return np.maximum(gamma * d, t) + o


def _binomial(b: int, p) -> np.ndarray:
    """``P(n = k)``, ``k = 0..b``, for ``n ~ Binomial(b, p)``; one row per ``p`` when ``p`` is
    an array."""
    from scipy.stats import binom

    p = np.asarray(p, dtype=np.float64)
    return binom.pmf(np.arange(b + 1), b, p[..., None] if p.ndim else p)


@dataclass(frozen=True)
class PearlPrediction:
    """PL1/PL2: long-run per-sequence ``time_per_token``, ``speedup`` = ``ar_step /
    time_per_token`` (autoregressive target at the same batch), batch ``throughput``
    (tokens per unit time), ``mean_step`` = ``E[c(n_post)]`` with ``n_post ~ Binomial(b,
    post_share)``; ``target_busy`` / ``drafter_busy``: shares of a step each device computes;
    forwards per token of each model."""

    speedup: float
    time_per_token: float
    autoregressive_time_per_token: float
    throughput: float
    batch: int
    mean_step: float
    step_costs: np.ndarray
    post_pmf: np.ndarray
    chain: PearlChain
    target_busy: float
    drafter_busy: float
    target_forwards_per_token: float
    drafter_forwards_per_token: float

    def to_dict(self) -> dict:
        return {"scheme": "pearl", "speedup": self.speedup,
                "time_per_token": self.time_per_token,
                "autoregressive_time_per_token": self.autoregressive_time_per_token,
                "throughput": self.throughput, "batch": self.batch,
                "mean_step": self.mean_step, "step_costs": self.step_costs.tolist(),
                "post_pmf": self.post_pmf.tolist(), **self.chain.to_dict(),
                "target_busy": self.target_busy, "drafter_busy": self.drafter_busy,
                "target_forwards_per_token": self.target_forwards_per_token,
                "drafter_forwards_per_token": self.drafter_forwards_per_token}


def predict_pearl(law, gamma, step_costs, ar_step: float, *, draft_step: float = 0.0,
                  target_costs=None) -> PearlPrediction:
    """PL1 (``b = 1``) and PL2 (``b = len(step_costs) - 1``): the exact long-run time per
    token of one sequence of a lockstep batch, ``E[c(n_post)] / tokens_per_step``.

    ``step_costs``: :func:`pearl_step_costs`; ``ar_step``: one autoregressive target step at
    the same batch; ``draft_step`` and ``target_costs`` (the target's forward per ``k``, as in
    ``step_costs`` without the max and the handshake) only feed the busy shares. For ``b >=
    2`` the cycle length must be aperiodic (the binomial is the stationary law of the product
    chain); a periodic one is refused."""
    chain = pearl_chain(law, gamma)
    c = np.asarray(step_costs, dtype=np.float64)
    if c.ndim != 1 or c.size < 2 or not np.all(np.isfinite(c)) or np.any(c < 0):
        raise PolyspecInputError("step_costs", "must list c[k] >= 0 for k = 0..batch")
    b = c.size - 1
    if b >= 2 and chain.period > 1:
        raise PolyspecInputError("acceptance[0]", f"with this law every run lasts a multiple "
                                 f"of {chain.period} steps, so the {b} sequences stay in step "
                                 "and n_post is not binomial; PL2 does not cover it")
    ar = as_real(ar_step, "ar_step", low=0.0, low_open=True)
    pmf = _binomial(b, chain.post_share)
    mean_step = float(pmf @ c)
    if mean_step <= 0.0:
        raise PolyspecInputError("step_costs", "a step must take time > 0")
    tau = mean_step / chain.tokens_per_step
    busy_t = float(pmf @ np.asarray(target_costs)) / mean_step if target_costs is not None \
        else math.nan
    return PearlPrediction(
        speedup=ar / tau, time_per_token=tau, autoregressive_time_per_token=ar,
        throughput=b / tau, batch=b, mean_step=mean_step, step_costs=c, post_pmf=pmf,
        chain=chain, target_busy=busy_t, drafter_busy=chain.gamma * draft_step / mean_step,
        target_forwards_per_token=1.0 / chain.tokens_per_step,
        drafter_forwards_per_token=chain.gamma / chain.tokens_per_step)


@dataclass(frozen=True)
class PearlHorizon:
    """PL3: expectations of ``steps`` lockstep steps of ``batch`` sequences, all starting in
    pre-verify, per sequence: ``time`` (the steps only, no prefill), ``verified`` tokens,
    ``counted`` tokens as nano-PEARL's benchmark counts them (``1 + verified`` plus the
    ``gamma - 1`` pending drafts of a sequence ending in post-verify), ``tokens_per_step`` =
    ``counted / steps`` (the tables' derived field), ``mat`` = ``E[verified / (rejections +
    1)]`` (the benchmark's per-sequence MAT); ``post_by_step[t]`` = P(post-verify at step
    ``t``), ``t = 0..steps``."""

    steps: int
    batch: int
    time: float
    verified: float
    counted: float
    tokens_per_step: float
    mat: float
    post_by_step: np.ndarray

    def to_dict(self) -> dict:
        return {"steps": self.steps, "batch": self.batch, "time": self.time,
                "verified": self.verified, "counted": self.counted,
                "tokens_per_step": self.tokens_per_step, "mat": self.mat,
                "post_by_step": self.post_by_step.tolist()}


def _horizon_states(run: RunAcceptance, gamma: int):
    """Per-sequence states for PL3: 0 = pre-verify, ``j >= 1`` = the ``j``-th post-verify step
    of a run (it checks ages ``(j-1) gamma + 1 ..``); from ``J`` on every checked age is in
    the geometric tail, so the states ``j >= J`` act alike and are lumped into ``J``.
    Returns per state: the probability of the all-accepted outcome (to ``j + 1``, capped at
    ``J``) and the rejection probabilities ``P(n accepted, then a rejection)``."""
    k = len(run.accept)
    top = max(1, -(-(k - 1) // gamma) + 1)  # J: (J - 1) gamma + 1 >= K
    rows = [run.outcome(0, 1)]
    rows += [run.outcome((j - 1) * gamma + 1, gamma) for j in range(1, top + 1)]
    return top, rows


def pearl_horizon(law, gamma, step_costs, steps: int = 100) -> PearlHorizon:
    """PL3: exact expectations of ``steps`` steps from all-pre-verify, per sequence (the
    acceptance of one sequence does not depend on the others; the time does, through
    ``n_post(t) ~ Binomial(b, p_t)``, exactly, because the ``b`` sequences are independent
    copies started alike). MAT by a forward recursion over (state, rejections so far) of the
    probability and of ``E[verified; state, rejections]`` (linearity: no law of
    ``verified`` is needed)."""
    return pearl_horizons([law], gamma, step_costs, steps)[0]


def pearl_horizons(laws, gamma, step_costs, steps: int = 100) -> list[PearlHorizon]:
    """PL3 (:func:`pearl_horizon`) for several acceptance laws at one ``gamma``, step costs
    and horizon, the laws with as many states side by side in one recursion: each result is
    the very float :func:`pearl_horizon` gives for that law alone."""
    gamma = _gamma(gamma)
    steps = as_int(steps, "steps", low=1, high=MAX_STEPS)
    runs = [law if isinstance(law, RunAcceptance) else run_acceptance(law) for law in laws]
    if not runs:
        raise PolyspecInputError("laws", "need at least one acceptance law")
    c = np.asarray(step_costs, dtype=np.float64)
    if c.ndim != 1 or c.size < 2 or not np.all(np.isfinite(c)) or np.any(c < 0):
        raise PolyspecInputError("step_costs", "must list c[k] >= 0 for k = 0..batch")
    states = [_horizon_states(run, gamma) for run in runs]
    out: list = [None] * len(runs)
    for top in sorted({top for top, _ in states}):
        idx = [i for i, (tp, _) in enumerate(states) if tp == top]
        hs = _horizon_group(top, [states[i][1] for i in idx], gamma, c, steps)
        for i, h in zip(idx, hs, strict=True):
            out[i] = h
    return out


def _horizon_group(top, group, gamma, c, steps) -> list[PearlHorizon]:
    """PL3's recursion for laws of ``top + 1`` states each (``group``: their
    :func:`_horizon_states` rows), side by side along a first axis."""
    ns, n, b = top + 1, len(group), c.size - 1
    # per law and state: P(a rejection), E[tokens; a rejection], P(all accepted), tokens then
    pr = np.array([[float(rej.sum()) for rej, _ in rows] for rows in group])
    rt = np.array([[float(rej @ np.arange(1, rej.size + 1, dtype=np.float64))
                    for rej, _ in rows] for rows in group])
    full = np.array([[f for _, f in rows] for rows in group], dtype=np.float64)
    gain = np.array([1.0] + [float(gamma)] * top)[:, None]
    # p[:, 0] = P(state, rejections so far), p[:, 1] = E[verified; state, rejections so far]
    p = np.zeros((n, 2, ns, steps + 1))
    p[:, 0, 0, 0] = 1.0
    pr_c, rt_c, full_c = pr[:, None, :, None], rt[:, :, None], full[:, None, :, None]
    post = np.zeros((n, steps + 1))
    for t in range(steps):
        post[:, t] = p[:, 0, 1:].reshape(n, -1).sum(axis=1)
        # after t steps at most t rejections: the columns past w (and past w + 1 after this
        # step) hold 0 and stay 0, so the step works on the first w (at least 2, so that the
        # sum over states runs as on the whole array)
        w = min(max(t + 1, 2), steps)
        q = np.zeros_like(p)
        # a rejection after n accepted: n + 1 tokens, back to pre-verify, one more
        # rejection; shift along the rejection axis (summed over states in order)
        r = pr_c * p[:, :, :, :w]
        r[:, 1] += rt_c * p[:, 0, :, :w]
        q[:, :, 0, 1:w + 1] = r.sum(axis=2)
        # all accepted: state j -> min(j + 1, top); 1 token in pre-verify (the first
        # draft), gamma in post-verify
        p[:, 1, :, :w] += gain * p[:, 0, :, :w]
        f = full_c * p[:, :, :, :w]
        q[:, :, 1:, :w] = f[:, :, :-1]
        q[:, :, top, :w] += f[:, :, top]
        p = q
    post[:, steps] = p[:, 0, 1:].reshape(n, -1).sum(axis=1)
    verified = p[:, 1].reshape(n, -1).sum(axis=1)
    mat = (p[:, 1].sum(axis=1) / np.arange(1, steps + 2)).sum(axis=1)
    hs = []
    for i in range(n):
        # the steps' expected cost: n_post(t) ~ Binomial(b, post[t]) (c = 0: no time)
        time = 0.0
        if c.any():
            pmf = _binomial(b, np.clip(post[i, :steps], 0.0, 1.0))
            for t in range(steps):
                time += float(pmf[t] @ c)
        v = float(verified[i])
        counted = 1.0 + v + (gamma - 1) * post[i, steps]
        hs.append(PearlHorizon(steps=steps, batch=b, time=time, verified=v, counted=counted,
                               tokens_per_step=counted / steps, mat=float(mat[i]),
                               post_by_step=post[i].copy()))
    return hs


def start_up_gamma(target_step: float, draft_step: float) -> int:
    """nano-PEARL's start-up rule (PL0): ``gamma = round(target speed ... )``, i.e. Python's
    ``round(target_step / draft_step)`` (half to even) of one decode step of each model at
    batch 1. A drafter slower than twice the target gives 0, which the rule does not
    define: refused."""
    t = as_real(target_step, "target_step", low=0.0, low_open=True)
    d = as_real(draft_step, "draft_step", low=0.0, low_open=True)
    g = round(t / d)
    if g < 1:
        raise PolyspecInputError("draft_step", f"the drafter's step {d:g} is more than twice "
                                 f"the target's {t:g}: the start-up rule gives gamma = 0")
    return min(g, MAX_GAMMA)


# --- a Cascade (two models, threshold = gamma) ---------------------------------------------

def pearl_costs(cascade: Cascade, batch=None):
    """The costs PL0 charges for ``cascade`` at ``batch`` (``None``: 1): ``(draft_step,
    target_cost, ar_step)``. A batch cost (``batch_table``, ``roofline``) prices the target's
    forward over ``N`` packed tokens as ``T_1(N, 1)`` (nano-PEARL packs every token as its own
    decode sample: a sequence's cache is read once per token) and the drafter's step as
    ``T_2(b, 1)``; a plain curve ``T(m)`` prices a forward over ``N`` tokens as ``T(N)`` and is
    taken as batch-independent for the drafter; a plain target at ``b >= 2`` is refused (it
    does not say what ``b`` sequences cost)."""
    b = 1 if batch is None else as_batch(batch)
    target, drafter = cascade.models[0].cost, cascade.models[1].cost
    if isinstance(target, BatchCostCurve):
        def target_cost(n: int) -> float:
            return float(target.at_batch(n)(1))
        ar = float(target.at_batch(b)(1))
    elif b == 1:
        def target_cost(n: int) -> float:
            return float(target(n))
        ar = float(target.t1)
    else:
        raise PolyspecInputError("models[0].cost", "parallel draft-verify at batch >= 2 needs "
                                 "the target's batch cost (batch_table or roofline): a plain "
                                 "T(m) does not say what a forward over b sequences costs")
    if isinstance(drafter, BatchCostCurve):
        draft = float(drafter.at_batch(b)(1))
    else:
        draft = float(drafter.t1)
    return draft, target_cost, ar


def pearl_pair(cascade) -> Cascade:
    """``cascade`` checked to be a two-model chain whose law has a PEARL run law."""
    cascade = as_cascade(cascade, chain_only="parallel draft-verify (PEARL)")
    if cascade.n != 2:
        raise PolyspecInputError("models", f"parallel draft-verify (PEARL) runs one drafter "
                                 f"and one target: need 2 models, got {cascade.n}")
    run_acceptance(cascade.laws[0])
    return cascade


def predict_pearl_cascade(cascade, batch=None) -> PearlPrediction:
    """PL1/PL2 for a two-model ``cascade`` (``thresholds[0]`` = ``gamma``, handshake = the
    target's ``overhead``) at ``batch`` (``None``: 1)."""
    cascade = pearl_pair(cascade)
    gamma = cascade.thresholds[0]
    b = 1 if batch is None else as_batch(batch)
    draft, target_cost, ar = pearl_costs(cascade, b)
    law = run_acceptance(cascade.laws[0])
    costs = pearl_step_costs(draft, target_cost, gamma, b, cascade.models[0].overhead)
    target_costs = [target_cost(int(b + (gamma - 1) * k)) for k in range(b + 1)]
    return predict_pearl(law, gamma, costs, ar, draft_step=draft, target_costs=target_costs)


def pearl_horizon_cascade(cascade, batch=None, steps: int = 100) -> PearlHorizon:
    """PL3 for a two-model ``cascade`` at ``batch`` over ``steps`` steps."""
    cascade = pearl_pair(cascade)
    gamma = cascade.thresholds[0]
    b = 1 if batch is None else as_batch(batch)
    draft, target_cost, _ = pearl_costs(cascade, b)
    costs = pearl_step_costs(draft, target_cost, gamma, b, cascade.models[0].overhead)
    return pearl_horizon(run_acceptance(cascade.laws[0]), gamma, costs, steps)


# --- the scheme (polyspec_theory.schemes): config rules, predict, what `predict` prints -----

name = "pearl"
description = "parallel draft-verify (PEARL)"
mode = "pearl"
threshold_floor = 1
fields = {"batch": "the serving-batch theory is not available for {description} "
                   "(scheme {name!r})"}
position_laws = True  # a run law (R1) is the law of PEARL's runs
BENCH_STEPS = 100  # the steps nano-PEARL's benchmark times per batch (PL3)
MODEL_NOTE = ("parallel draft-verify (PL0): the drafter drafts the next gamma tokens while the "
              "target verifies; a step costs max(gamma T_d(b), T_t(b + (gamma - 1) n_post)) + "
              "handshake; a rejection discards the block drafted in parallel; lockstep batch, "
              "acceptance independent per sequence")


def claims(features) -> bool:
    return True


def check(cascade) -> dict:
    """Two models, chain drafts, a law with a geometric-tail run law, costs defined at the
    batch; returns the normalised ``batch``."""
    if cascade.n != 2:
        raise PolyspecInputError("models", f"parallel draft-verify (PEARL) runs one drafter "
                                 f"and one target: need 2 models, got {cascade.n}")
    for key in ("trees", "schedules"):
        items = getattr(cascade, key)
        if items is not None and any(x is not None for x in items):
            raise PolyspecInputError(key, "parallel draft-verify (PEARL) drafts chains: no "
                                     "token trees or draft-length schedules")
    run_acceptance(cascade.laws[0])
    b = None if cascade.batch is None else as_batch(cascade.batch)
    _, target_cost, _ = pearl_costs(cascade, b)
    target_cost((b or 1) * cascade.thresholds[0])  # the largest forward a step can run
    return {"batch": b}


def predict(cascade) -> PearlPrediction:
    """PL1 (one sequence) or PL2 (``cascade.batch``)."""
    return predict_pearl_cascade(cascade, cascade.batch)


def _sync_speedup(cascade, batch):
    """The same models and ``gamma`` decoded synchronously (P1 / B2: draft, then verify), or
    ``None`` where no synchronous scheme serves this law."""
    try:
        twin = dataclasses.replace(cascade, mode="sync", batch=batch)
        return get(twin.scheme).predict(twin).speedup
    except PolyspecInputError:
        return None


def _point(cascade, b) -> dict:
    pred = predict_pearl_cascade(cascade, b)
    sync = _sync_speedup(cascade, b)
    return {"batch": b or 1, "speedup": pred.speedup, "throughput": pred.throughput,
            "autoregressive_throughput": (b or 1) / pred.autoregressive_time_per_token,
            "mean_step": pred.mean_step, "sync_speedup": sync}


def _law_text(law) -> str:
    if isinstance(law, RunLaw):
        return (f"run law: hazard {', '.join(f'{h:.3g}' for h in law.hazard)}, tail "
                f"{law.tail:.3g}")
    return law_text(law)


def report(cascade, options=None) -> dict:
    """PL1/PL2 at the cascade's batch, the benchmark's 100-step run (PL3), each batch of
    ``options.batches``, the synchronous draft-then-verify speedup of the same models, and
    the draft length nano-PEARL's start-up rule would pick from these costs."""
    pred = predict(cascade)
    draft, _, ar = pearl_costs(cascade, 1)
    try:
        auto = start_up_gamma(ar, draft)
    except PolyspecInputError:
        auto = None
    config = cascade.to_config()
    out = {"config": config, **pred.to_dict(), "model": MODEL_NOTE,
           "law": _law_text(cascade.laws[0]),
           "method": "exact (PL1/PL2: renewal cycles of runs, n_post binomial)",
           "benchmark": pearl_horizon_cascade(cascade, cascade.batch, BENCH_STEPS).to_dict(),
           "sync_speedup": _sync_speedup(cascade, cascade.batch),
           "start_up_gamma": auto,
           "time_base": (cascade.time_unit or "model-cost units") + "; speedup against the "
           "autoregressive target at the same batch"}
    if options is not None and options.batches:
        out["batches"] = [_point(cascade, b) for b in options.batches]
    return out


def explain(cascade, options=None) -> str:
    rep = report(cascade, options)
    names = [m["name"] for m in rep["config"]["models"]]
    b, g = rep["batch"], rep["gamma"]
    bench = rep["benchmark"]
    c = rep["step_costs"]
    lines = [
        f"Cascade {cascade.name!r}: {names[0]} <- {names[1]}, parallel draft-verify (PEARL), "
        f"gamma {g}, batch {b}",
        f"Predicted speedup over autoregressive {names[0]}: {rep['speedup']:.3f}x "
        f"({rep['method']}; time base: {rep['time_base']})",
        f"  acceptance: {rep['law']}; MAT (long run) {rep['mat']:.4g}; tokens per step "
        f"{rep['tokens_per_step']:.4f}; post-verify share of steps {rep['post_share']:.3f}",
        f"  step: pre-verify {c[0]:.4g}, all post-verify {c[-1]:.4g}; mean {rep['mean_step']:.4g}"
        f"; target busy {100 * rep['target_busy']:.1f} %, drafter busy "
        f"{100 * rep['drafter_busy']:.1f} %; drafts discarded {100 * rep['drafts_wasted']:.1f} %",
        f"  nano-PEARL's benchmark ({bench['steps']} steps from pre-verify): tokens_per_step "
        f"{bench['tokens_per_step']:.4f}, MAT {bench['mat']:.4g}",
    ]
    if rep["sync_speedup"] is not None:
        lines.append(f"Synchronous draft-then-verify, same gamma: {rep['sync_speedup']:.3f}x")
    if rep["start_up_gamma"] is not None:
        lines.append(f"nano-PEARL's start-up rule round(T_t/T_d) at batch 1 would pick gamma "
                     f"{rep['start_up_gamma']}")
    for p in rep.get("batches", []):
        sy = "-" if p["sync_speedup"] is None else f"{p['sync_speedup']:.3f}x"
        lines.append(f"  batch {p['batch']:>5}: speedup {p['speedup']:.3f}x, throughput "
                     f"{p['throughput']:.4g} (AR {p['autoregressive_throughput']:.4g}); "
                     f"synchronous {sy}")
    lines.append(rep["model"] + ".")
    return "\n".join(lines)
