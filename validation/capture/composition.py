"""Composition-aware cost profiles: each model's forward time measured inside the cascade's own
calling pattern, without decoding.

On a CPU a model runs slower inside a cascade than alone: the other models' weights and
caches evict its own between its forwards, by an amount that depends on which models share
the process and how often each runs. Cost curves measured on a model alone cannot see this.
A profile replays the cascade: :class:`ReplayDecoder` runs the decoder's block policy and its
forwards (same models, same positions scored, same contexts, same order, same cache
rollbacks) but draws each round's accepted count from given acceptance laws instead of
deciding it from the logits, and drafts random tokens. Timing a replay gives, per model, the
mean wall time of a verify forward for each block length ``G`` (the catch-up positions the
decoder adds are included in the mean, as they are in a real run) and of a drafting forward
of the bottom model; the target decoding alone (interleaved with the replays, on the same
prompts) gives the autoregressive time per token that the speedup is measured against.

The profile is a prediction input: it uses no decoding of the capture it predicts (its
acceptance laws are fitted elsewhere, its prompts need not be the capture's) and runs in a
few seconds per cascade. :meth:`CompositionProfile.cost_curves` turns it into the cost
tables P1 uses (``T_i(G + 1)`` = the mean verify time of a block of ``G``).
"""

from __future__ import annotations

import time

import numpy as np

from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.capture.composition_profile import CompositionProfile
from validation.capture.setup import alternate
from validation.schemes import torch  # on first use: reading a profile never loads it
from validation.schemes.chain import PolybasicDecoder, autoregressive

__all__ = ["ReplayDecoder", "profile_cascade"]



class ReplayDecoder(PolybasicDecoder):
    """The cascade's calling pattern with acceptance drawn from ``laws`` (one per pair):
    forwards and cache moves are the decoder's own; verification draws ``A`` (one uniform,
    inverse CDF of the law capped at the block) and a random correction token."""

    def __init__(self, models, thresholds, laws, *, seed: int = 0):
        super().__init__(models, thresholds, temperature=0.0, seed=seed)
        if len(laws) != self.n - 1:
            raise PolyspecInputError("laws", f"need one law per pair ({self.n - 1}), got "
                                     f"{len(laws)}")
        for k, law in enumerate(laws):
            if not isinstance(law, AcceptanceLaw):
                raise PolyspecInputError(f"laws[{k}]", "must be an AcceptanceLaw")
        gmax = block_bounds(self.thresholds)
        self._surv = [np.asarray(law.survival(gmax[k])[1:]) for k, law in enumerate(laws)]
        self.rng = np.random.default_rng(as_int(seed, "seed", low=0))

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(as_int(seed, "seed", low=0))

    def _draft(self, i, lg, base):
        return int(self.rng.integers(self.vocab))

    def _verify(self, i, lg, base, g):
        a = min(int(np.count_nonzero(self._surv[i][:g] > self.rng.random())), g)
        return a, int(self.rng.integers(self.vocab))


def profile_cascade(models, thresholds, laws, prompts, max_new_tokens: int, *, seed: int = 0,
                    warmup: int = 1) -> CompositionProfile:
    """Replay the cascade (``models``: loaded :class:`validation.capture.models.DecoderModel`,
    target first) on each prompt, interleaved with the target decoding the same prompt alone
    (alternating which runs first), and collect the in-cascade forward times."""
    max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
    if not prompts:
        raise PolyspecInputError("prompts", "need at least one prompt")
    rep = ReplayDecoder(models, thresholds, laws, seed=seed)
    n = rep.n
    with torch.inference_mode():
        for _ in range(max(0, warmup)):
            rep.generate(prompts[0], min(32, max_new))
            autoregressive(models[0], prompts[0], min(16, max_new))
    verify: list[dict] = [dict() for _ in range(n - 1)]
    draft_s = 0.0
    draft_n = 0
    ar_wall = 0.0
    ar_tok = 0
    wall = fwd = 0.0
    tok = 0
    t_start = time.perf_counter()
    for k, prompt in enumerate(prompts):
        def run_replay(k=k, prompt=prompt):
            rep.reseed(int(seed) * 1_000_003 + k)
            return rep.generate(prompt, max_new, prompt_index=k)

        def run_ar(prompt=prompt):
            return autoregressive(models[0], prompt, max_new)

        res, ar = alternate(k, run_replay, run_ar)
        for r in res.rounds:
            verify[r.level - 1].setdefault(int(r.G), []).append(float(r.verify_s))
        draft_s += res.forward_s[-1]
        draft_n += res.forward_count[-1]
        wall += res.wall_s
        fwd += sum(res.forward_s)
        tok += res.n_generated
        ar_wall += ar.wall_s
        ar_tok += len(ar.tokens)
    return CompositionProfile(
        models=[m.name for m in models], thresholds=list(rep.thresholds), verify=verify,
        draft_s=draft_s / max(draft_n, 1), draft_forwards=draft_n,
        ar_s=ar_wall / max(ar_tok, 1), ar_tokens=ar_tok, replay_wall_s=wall,
        replay_forward_s=fwd, replay_tokens=tok,
        settings={"n_prompts": len(prompts), "max_new_tokens": max_new, "seed": int(seed),
                  "laws": [law.to_config() for law in laws],
                  "threads": torch.get_num_threads(),
                  "elapsed_s": round(time.perf_counter() - t_start, 3)})
