"""Each decoding method's timed run as its code runs (docs/theory.md HW4), on engine-corrected
costs (:class:`validation.hardware.engines.EngineModel`).

Every function returns a :class:`Run`: tokens per sequence counted as the benchmark counts
them, the timed milliseconds, and the quantities behind them. KV lengths grow during a run;
a step's cost is averaged over the run by Simpson's rule on three KV lengths (attention is
close to linear in the KV length, the rest does not depend on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.core.kept import Kept
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes.pearl import (
    RunAcceptance,
    pearl_chain,
    pearl_horizons,
    start_up_gamma,
)
from validation.hardware.engines import EngineModel

__all__ = ["Run", "simpson", "ar_run", "pearl_gamma", "pearl_counts", "pearl_counts_many",
           "pearl_run",
           "pearl_terms", "PearlTerms",
           "shared_prefix_cached", "PROFILE_CONTEXT", "sd_sync_run", "ssd_async_run",
           "eagle_run", "EagleShape", "chain_tokens", "async_hit"]

# nano-PEARL's start-up profile: 256 dummy tokens, 30 engine steps of which the first is the
# prefill and the next 4 are dropped: decode at KV lengths 261..284 (mean ~273)
PROFILE_CONTEXT = 273
BLOCK = 256  # nano-vllm KV block (prefix-cache granularity)


@dataclass
class Run:
    """``tokens`` per sequence over ``ms`` of timed work (``batch`` sequences)."""

    tokens: float
    ms: float
    batch: int
    detail: dict = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return 1e3 * self.batch * self.tokens / self.ms


def simpson(f, a: float, b: float) -> float:
    """Mean of ``f`` over [a, b] by Simpson's rule on integer points."""
    a, b = int(round(a)), int(round(b))
    return (f(a) + 4.0 * f((a + b) // 2) + f(b)) / 6.0


def shared_prefix_cached(settings: dict, prompt: int, batch: int) -> int:
    """Prompt tokens per sequence served from the prefix cache within one batch (the cache is
    cleared between batches): few-shot prompts (``shared_prefix`` in the row settings, or the
    8-shot GSM8K prompts of nano-PEARL's benchmark, all but the question shared) let every
    sequence after the first reuse the full 256-token blocks of the shared part. Averaged over
    the batch."""
    shared = settings.get("shared_prefix")
    if shared is None and str(settings.get("dataset", "")).lower() == "gsm8k" \
            and settings.get("engine", "").lower() == "nano-pearl":
        shared = max(0, prompt - 65)  # the question (~60 tokens) and the template's tail
    if not shared or batch <= 1:
        return 0
    blocks = BLOCK * (min(int(shared), prompt - 1) // BLOCK)
    return int(round(blocks * (batch - 1) / batch))


def ar_run(target: EngineModel, batch: int, prompt: int, tokens: int, *, cached: int = 0,
           prefill: bool = True) -> Run:
    """Autoregressive decoding: one prefill (the first token; timed when ``prefill``), then
    ``tokens - 1`` single-token decode steps at batch ``batch``."""
    steps = tokens - 1
    step = simpson(lambda s: target.decode(batch, s), prompt + 1, prompt + steps)
    pre = target.prefill(batch, prompt, cached) if prefill else 0.0
    ms = pre + steps * step
    return Run(tokens if prefill else steps, ms if prefill else steps * step, batch,
               {"prefill_ms": pre, "step_ms": step, "steps": steps})


def pearl_gamma(target: EngineModel, drafter: EngineModel) -> int:
    """nano-PEARL's start-up rule as the benchmark leaves it (PL0,
    :func:`polyspec_theory.schemes.pearl.start_up_gamma`): the speed of each model at batch
    1 (the warm-up generation has one sequence), one token per forward, ~273 tokens of
    context, host time included."""
    return start_up_gamma(target.decode(1, PROFILE_CONTEXT), drafter.decode(1, PROFILE_CONTEXT))


COUNTS_KEPT = 8192
_COUNTS = Kept(COUNTS_KEPT)  # (alpha, gamma, steps) -> pearl_counts


def pearl_counts(alpha: float, gamma: int, steps: int) -> tuple[float, tuple]:
    """PL3 for iid acceptance ``alpha`` over ``steps`` steps from all-pre-verify
    (:func:`polyspec_theory.schemes.pearl.pearl_horizon`): the tokens a sequence's
    completion counts as the benchmark counts them, and ``P(post-verify)`` at each step."""
    return pearl_counts_many([alpha], gamma, steps)[0]


def pearl_counts_many(alphas, gamma: int, steps: int, keep: bool = True
                      ) -> list[tuple[float, tuple]]:
    """:func:`pearl_counts` of each of ``alphas`` (the same floats), the ones not computed
    yet side by side in one PL3 recursion
    (:func:`polyspec_theory.schemes.pearl.pearl_horizons`); ``keep=False``: the new ones
    are not kept (a bisection's points, never asked again)."""
    keys = [(float(a), gamma, steps) for a in alphas]
    todo = sorted({k[0] for k in keys if k not in _COUNTS})
    new = {}
    if todo:
        hs = pearl_horizons([RunAcceptance((), a) for a in todo], gamma, np.zeros(2), steps)
        new = {(a, gamma, steps): (h.counted, tuple(h.post_by_step[:steps]))
               for a, h in zip(todo, hs, strict=True)}
        if keep:
            _COUNTS.keep(new)
    return [new[k] if k in new else _COUNTS[k] for k in keys]


@dataclass
class PearlTerms:
    """A PEARL step's parts at three KV lengths (Simpson's rule): ``w`` the Binomial weights
    of ``k`` sequences in post-verify, ``draft`` the drafter's ``gamma`` forwards, ``target``
    the target's packed forward without its per-sample host time, ``samples`` its tokens."""

    w: np.ndarray
    draft: np.ndarray    # (3,)
    target: np.ndarray   # (3, len(w))
    samples: np.ndarray  # (len(w),)

    def step_ms(self, per_sample_ms: float, handshake_ms: float) -> float:
        t = self.target + per_sample_ms * self.samples[None, :]
        per_s = np.maximum(self.draft[:, None], t) @ self.w
        return float((per_s[0] + 4.0 * per_s[1] + per_s[2]) / 6.0) + handshake_ms


def pearl_terms(target: EngineModel, drafter: EngineModel, batch: int, prompt: int,
                steps: int, alpha: float, gamma: int) -> PearlTerms:
    """:class:`PearlTerms` of ``steps`` steps whose sequences grow from ``prompt`` to
    ``prompt + tokens``: ``w`` the step-averaged law of ``k``, ``Binomial(batch, p_t)`` at
    step ``t`` with ``p_t`` PL3's post-verify probability (all sequences start in pre-verify),
    so that ``steps * (w @ c)`` is PL3's time of the steps for step costs ``c[k]``."""
    from scipy.stats import binom  # scipy.stats loads where a PEARL run is priced

    tokens, post = pearl_counts(alpha, gamma, steps)
    ks = np.arange(batch + 1)
    w = np.mean(binom.pmf(ks[None, :], batch, np.clip(post, 0.0, 1.0)[:, None]), axis=0)
    keep = w > 1e-9
    ks, w = ks[keep], w[keep] / w[keep].sum()
    samples = (batch - ks + gamma * ks).astype(int)
    a, b = int(round(prompt + 1)), int(round(prompt + tokens))
    kvs = (a, (a + b) // 2, b)
    bare = target.c.per_sample_ms
    draft = np.array([gamma * drafter.decode(batch, s) for s in kvs])
    tgt = np.array([[target.packed(int(x), s, batch) - bare * x for x in samples]
                    for s in kvs])
    return PearlTerms(w, draft, tgt, samples)


def pearl_run(target: EngineModel, drafter: EngineModel, batch: int, prompt: int, steps: int,
              alpha: float, gamma: int, *, cached: int = 0) -> Run:
    """nano-PEARL's timed region for one batch: both prefills (in parallel, on their own
    GPUs), then ``steps`` lock-step PEARL steps (PL0-PL3,
    :mod:`polyspec_theory.schemes.pearl`). A step costs ``max(gamma * drafter decode(b),
    target packed forward(n_pre + gamma * n_post tokens))`` plus the handshake,
    ``n_post ~ Binomial(b, p_t)`` at step ``t`` (PL3). Tokens counted as the benchmark does
    (PL3's ``counted``)."""
    if steps < 1:
        raise PolyspecInputError("steps", f"must be >= 1, got {steps}")
    tokens = pearl_counts(alpha, gamma, steps)[0]
    terms = pearl_terms(target, drafter, batch, prompt, steps, alpha, gamma)
    step = terms.step_ms(target.c.per_sample_ms, target.c.handshake_ms)
    pre = max(target.prefill(batch, prompt, cached), drafter.prefill(batch, prompt, cached))
    ms = pre + steps * step
    return Run(tokens, ms, batch, {"gamma": gamma, "alpha": alpha,
                                   "post_share": float(pearl_chain(RunAcceptance(
                                       (), float(alpha)), gamma).post_share),
                                   "prefill_ms": pre, "step_ms": step, "steps": steps})


def chain_tokens(alpha: float, k: int) -> float:
    """Tokens a chain round of ``k`` drafts commits under iid acceptance ``alpha`` (accepted
    prefix + 1): ``(1 - alpha**(k+1)) / (1 - alpha)``."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def sd_sync_run(target: EngineModel, drafter: EngineModel, batch: int, prompt: int,
                output: int, alpha: float, k: int) -> Run:
    """SSD's synchronous mode, decode only (prefill excluded from the timing): per step the
    drafter (on the target's first GPU) runs ``k + 1`` single-token forwards at batch ``b``,
    then the target one forward over ``k + 1`` tokens per sequence; the accepted prefix + 1 is
    committed."""
    per = chain_tokens(alpha, k)

    def step_at(s):
        return (k + 1) * drafter.decode(batch, s) + target.verify(batch, k + 1, s)

    step = simpson(step_at, prompt + 1, prompt + output)
    return Run(per, step, batch, {"k": k, "alpha": alpha, "step_ms": step})


def ssd_async_run(target: EngineModel, drafter: EngineModel, batch: int, prompt: int,
                  output: int, alpha: float, k: int, fan_out: int) -> Run:
    """SSD's asynchronous mode, decode only: the target verifies ``k + 1`` tokens per sequence
    each step while the drafter, on its own GPU, extends ``(k + 1) * fan_out`` speculation
    branches per sequence ``k`` tokens ahead (``k`` forwards, :meth:`EngineModel.speculate`).
    A step costs ``max(target verify, speculation) + handshake``; with probability
    ``1 - hit**b`` some sequence of the batch misses the cache (:func:`async_hit`) and the
    drafter drafts ``k`` tokens on the spot (``--jit``) before the next verify."""
    per = chain_tokens(alpha, k)
    branches = (k + 1) * fan_out
    hit = async_hit(alpha, k, fan_out, drafter.c.rank_coverage)

    def step_at(s):
        v = target.verify(batch, k + 1, s)
        spec = k * drafter.speculate(batch, branches, s)
        miss = 1.0 - hit ** batch
        return max(v, spec) + miss * k * drafter.decode(batch, s)

    step = simpson(step_at, prompt + 1, prompt + output) + target.c.handshake_ms
    return Run(per, step, batch, {"k": k, "fan_out": fan_out, "alpha": alpha, "hit": hit,
                                  "step_ms": step})


@dataclass(frozen=True)
class EagleShape:
    """SGLang's EAGLE settings: ``steps`` (``speculative-num-steps``, head forwards per
    round), ``topk`` (``speculative-eagle-topk``: 1 for a chain), ``draft_tokens``
    (``speculative-num-draft-tokens``: tokens the target verifies per sequence)."""

    steps: int
    topk: int
    draft_tokens: int


def eagle_run(target: EngineModel, head: EngineModel, batch: int, prompt: int, output: int,
              accept_length: float, shape: EagleShape) -> Run:
    """SGLang EAGLE, one serial round: ``shape.steps`` head forwards (the first over one token
    per sequence, each later one over ``shape.topk`` tokens per sequence), the target's verify
    over ``shape.draft_tokens`` tokens per sequence (tree mask: one KV read per sequence), and
    the head's extend forward over the committed tokens; ``accept_length`` tokens committed per
    round (bonus included). Decode only."""
    steps, topk, draft_tokens = shape.steps, shape.topk, shape.draft_tokens

    def round_at(s):
        draft = head.verify(batch, 1, s) + (steps - 1) * head.verify(batch, topk, s)
        verify = target.verify(batch, draft_tokens, s)
        extend = head.verify(batch, max(1, int(round(accept_length))), s)
        return draft + verify + extend

    ms = simpson(round_at, prompt + 1, prompt + output)
    return Run(accept_length, ms, batch, {"round_ms": ms, "accept_length": accept_length})


def async_hit(alpha: float, k: int, fan_out: int, coverage: float) -> float:
    """The probability that a sequence's verify outcome is in SSD's speculation cache
    (docs/theory.md HW4). The outcome is (accepted count, next token); every count is
    speculated, each with the drafter's top ``fan_out`` next tokens. After all ``k`` drafts are
    accepted the next (bonus) token is the drafter's first choice with probability ``alpha``;
    otherwise -- and always after a rejection, where the target overruled the first choice --
    it is among the next ``fan_out - 1`` choices with probability
    ``1 - (1 - coverage)**(fan_out - 1)``."""
    later = 1.0 - (1.0 - coverage) ** (fan_out - 1)
    all_acc = alpha**k
    return all_acc * (alpha + (1 - alpha) * later) + (1 - all_acc) * later
