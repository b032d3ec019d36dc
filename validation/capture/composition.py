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

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.capture.setup import alternate
from validation.schemes import torch  # on first use: reading a profile never loads it
from validation.schemes.chain import PolybasicDecoder, autoregressive

__all__ = ["ReplayDecoder", "CompositionProfile", "profile_cascade", "load_profiles",
           "PROFILE_FORMAT"]

PROFILE_FORMAT = "polyspec-composition-profile-1"


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


@dataclass
class CompositionProfile:
    """Per model (target first): in-cascade forward times. ``verify[i]`` maps a block
    length ``G`` to the list of verify-forward seconds of model ``i`` for such blocks
    (``i < n - 1``); ``draft_s`` is the bottom model's mean forward time; ``ar_s`` the
    target's autoregressive time per token over the same prompts (decode only)."""

    models: list[str]
    thresholds: list[int]
    verify: list[dict]
    draft_s: float
    draft_forwards: int
    ar_s: float
    ar_tokens: int
    replay_wall_s: float
    replay_forward_s: float
    replay_tokens: int
    settings: dict = field(default_factory=dict)

    def mean_verify(self, i: int) -> dict[int, float]:
        """``{G: mean verify seconds}`` of model ``i``."""
        return {g: float(np.mean(v)) for g, v in sorted(self.verify[i].items())}

    def cost_curves(self) -> list[CostCurve]:
        """One :class:`CostCurve` per model for P1: verifiers get the table
        ``T(m) = mean verify time of a block of G = m - 1`` over the measured block lengths
        (linear between them, affine past the ends, at least 0); the bottom model its mean
        drafting forward time; the target's ``T(1)`` is its autoregressive time per token."""
        out = []
        for i in range(len(self.models)):
            if i == len(self.models) - 1:
                out.append(CostCurve.constant(self.draft_s))
                continue
            mv = self.mean_verify(i)
            gs = np.array(sorted(mv), dtype=np.float64)
            ts = np.array([mv[int(g)] for g in gs])
            m_max = int(gs.max()) + 1
            ms = np.arange(1, m_max + 1, dtype=np.float64)
            if gs.size == 1:
                table = np.full(ms.size, ts[0])
            else:
                table = np.interp(ms - 1, gs, ts)
                lo = (ts[1] - ts[0]) / (gs[1] - gs[0])
                below = ms - 1 < gs[0]
                table[below] = ts[0] + lo * (ms[below] - 1 - gs[0])
            table = np.maximum(table, 0.0)
            if i == 0:
                table[0] = self.ar_s
            out.append(CostCurve.from_table([float(x) for x in table]))
        return out

    def to_dict(self) -> dict:
        return {
            "format": PROFILE_FORMAT,
            "models": list(self.models),
            "thresholds": list(self.thresholds),
            "verify": [{str(g): [float(t) for t in v] for g, v in sorted(d.items())}
                       for d in self.verify],
            "draft_s": self.draft_s, "draft_forwards": self.draft_forwards,
            "ar_s": self.ar_s, "ar_tokens": self.ar_tokens,
            "replay_wall_s": self.replay_wall_s, "replay_forward_s": self.replay_forward_s,
            "replay_tokens": self.replay_tokens,
            "settings": self.settings,
            "cost_curves": [c.to_config() for c in self.cost_curves()],
        }

    @classmethod
    def from_dict(cls, d, field_name: str = "profile") -> CompositionProfile:
        if not isinstance(d, dict) or d.get("format") != PROFILE_FORMAT:
            raise PolyspecInputError(field_name, f"not a composition profile (expected format "
                                     f"{PROFILE_FORMAT!r})")
        try:
            verify = [{int(g): [float(t) for t in v] for g, v in x.items()}
                      for x in d["verify"]]
            for i, x in enumerate(verify):
                for g, v in x.items():
                    for j, t in enumerate(v):
                        _check_time(t, field_name, f"verify[{i}].{g}[{j}]")
            for k in ("draft_s", "ar_s", "replay_wall_s", "replay_forward_s"):
                # the replay totals are a diagnostic, 0 in a synthetic profile (no replay)
                _check_time(float(d[k]), field_name, k, zero_ok=k.startswith("replay_"))
            return cls(models=list(d["models"]), thresholds=[int(t) for t in d["thresholds"]],
                       verify=verify, draft_s=float(d["draft_s"]),
                       draft_forwards=int(d["draft_forwards"]), ar_s=float(d["ar_s"]),
                       ar_tokens=int(d["ar_tokens"]),
                       replay_wall_s=float(d["replay_wall_s"]),
                       replay_forward_s=float(d["replay_forward_s"]),
                       replay_tokens=int(d["replay_tokens"]),
                       settings=dict(d.get("settings", {})))
        except PolyspecInputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PolyspecInputError(field_name, f"malformed composition profile ({e})") from None

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


def _check_time(t: float, field_name: str, key: str, zero_ok: bool = False) -> None:
    """A measured time of a profile: finite and > 0 (a zero or negative forward time would make
    the cost curves, and every speedup over them, silently wrong)."""
    if not (math.isfinite(t) and (t >= 0 if zero_ok else t > 0)):
        raise PolyspecInputError(field_name, f"{key}: must be a finite time "
                                 f"{'>=' if zero_ok else '>'} 0 s, got {t!r}")


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


def load_profiles(directory, captures) -> dict:
    """``{capture name: CompositionProfile}`` from the files ``<name>.json`` of
    ``directory`` (an absent directory gives ``{}``)."""
    d = Path(directory)
    if not d.is_dir():
        return {}
    out = {}
    for c in captures:
        f = d / f"{c.name}.json"
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise PolyspecInputError("profiles", f"{f}: not JSON ({e})") from None
            out[c.name] = CompositionProfile.from_dict(data, f"profiles: {f}")
    return out
