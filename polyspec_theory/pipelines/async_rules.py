"""AS0's rules of the asynchronous pipeline, shared by its two-level exact rate (AS1,
:mod:`.asynchronous`) and its n-level exact rate (AS7, :mod:`.async_exact`): each verifier's
wait, window and queue (:func:`async_rules`), a pair's survival sequence, the tie tolerance,
and the prediction's data classes (docs/theory.md Part VI-AS)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.config import as_cascade, check_async_cascade
from ..errors import PolyspecInputError

__all__ = ["MAX_VERIFY_TOKENS", "READY_WINDOW", "TIE_RTOL", "AsyncPair", "AsyncLevel",
           "AsyncPrediction", "async_pair", "async_rules", "async_survival",
           "as_async_cascade", "async_tie_tolerance", "lookahead_threshold"]
# PipeSpec's verify cap (decoding.py build_verify_inputs, max_verify_tokens): one verify
# scores at most the last verified token + 99 drafts. The one place this number lives.
MAX_VERIFY_TOKENS = 100
READY_WINDOW = MAX_VERIFY_TOKENS - 1  # the most drafts one verify checks
# AS0 ties: two actions ending less than TIE_RTOL x (the cascade's longest action) apart end
# at the same instant (a verify ending on a drafter boundary syncs there, that step included)
TIE_RTOL = 1e-9


@dataclass(frozen=True)
class AsyncPair:
    """Rules of one (verifier, drafter) pair: start a verify once ``wait`` drafts are ready,
    check at most ``window`` of them; the drafter runs at most ``queue`` drafts past the
    verifier's prefix (``None``: unbounded, as in PipeSpec)."""

    wait: int
    window: int
    queue: int | None

    def to_dict(self) -> dict:
        return {"wait": self.wait, "window": self.window, "queue": self.queue}


def async_survival(law, kmax: int, field: str) -> np.ndarray:
    """``S_0..S_kmax`` of a pair's law (AS0 needs one survival sequence; a cap-conditional
    law is refused naming ``field``)."""
    if getattr(law, "cap_conditional", False):
        raise PolyspecInputError(field, "the asynchronous theory needs a law given by one "
                                 "survival sequence (iid, positional, beta); this law's "
                                 "acceptance depends on the block length")
    s = np.asarray(law.survival(kmax), dtype=np.float64)
    if s.shape != (kmax + 1,) or not np.all(np.isfinite(s)):
        raise PolyspecInputError(field, "the law's survival sequence is not finite")
    return s




def async_pair(threshold: int, queue: int | None = None) -> AsyncPair:
    """AS0, the one definition of what a threshold and a queue mean for an asynchronous pair
    (PipeSpec's ``AsyncChainSpeculativeDecoder``): verify once ``threshold`` drafts are ready
    past the verifier's prefix (``curr_length <= prev_length - lookahead + 1``, threshold =
    lookahead - 1), then check every ready draft up to :data:`READY_WINDOW` (the verify cap);
    the drafter runs at most ``queue`` drafts ahead (``None``: unbounded), so no verify checks
    more than ``queue``. The theory, the simulator, the GPU forecast and our own async decoder
    all take their rules from here."""
    window = READY_WINDOW if queue is None else min(READY_WINDOW, int(queue))
    return AsyncPair(wait=int(threshold), window=window, queue=queue)


def lookahead_threshold(k) -> int:
    """AS0: PipeSpec lookahead ``k`` (``0 <= k <= MAX_VERIFY_TOKENS``) -> the threshold of
    ``"mode": "async"``: ``max(k - 1, 0)`` (lookaheads 0 and 1 both verify at once)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not (
            0 <= int(k) <= MAX_VERIFY_TOKENS):
        raise PolyspecInputError("lookahead", f"must be an int in 0..{MAX_VERIFY_TOKENS}, got "
                                 f"{k!r}")
    return max(int(k) - 1, 0)


def async_rules(cascade) -> tuple[AsyncPair, ...]:
    """Per pair: the rules a config's thresholds and queues mean in async mode
    (:func:`async_pair`)."""
    queues = cascade.queues or (None,) * (cascade.n - 1)
    return tuple(async_pair(th, q) for th, q in zip(cascade.thresholds, queues, strict=True))


def as_async_cascade(cascade):
    """``cascade`` checked for the asynchronous theory (a :class:`Cascade`, async fields)."""
    check_async_cascade(as_cascade(cascade))
    return cascade


@dataclass(frozen=True)
class AsyncLevel:
    """Per-model accounting of the async pipeline (exact: AS1, AS7)."""

    name: str
    busy_fraction: float  # share of wall time this model computes
    idle_fraction: float  # share of wall time it waits (verifier: for drafts or the sync)
    mean_checked: float | None  # verifier: drafts checked per verify, E[m]
    mean_emitted: float | None  # verifier: tokens emitted per verify, E[L]
    verifies_per_token: float | None
    forwards_per_token: float  # forwards of this model per generated token
    wasted_fraction: float | None  # drafter: share of its drafts rolled back

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AsyncPrediction:
    """``speedup = T_1(1) / time_per_token`` (``None`` where no exact value is computed: use
    the bounds and the simulator); ``bounds``: the exact pair of :func:`async_bounds`."""

    speedup: float | None
    time_per_token: float | None
    autoregressive_time_per_token: float
    exact: bool
    bounds: tuple[float, float]
    rules: tuple[AsyncPair, ...]
    levels: tuple[AsyncLevel, ...]
    ready_pmf: np.ndarray | None  # stationary law of drafts ready at a verify start

    def to_dict(self) -> dict:
        return {
            "mode": "async",
            "speedup": self.speedup,
            "time_per_token": self.time_per_token,
            "autoregressive_time_per_token": self.autoregressive_time_per_token,
            "exact": self.exact,
            "bounds": list(self.bounds),
            "rules": [r.to_dict() for r in self.rules],
            "levels": [lv.to_dict() for lv in self.levels],
            "ready_pmf": None if self.ready_pmf is None else self.ready_pmf.tolist(),
        }


def async_tie_tolerance(cascade) -> float:
    """AS0's tie tolerance ``eps``: :data:`TIE_RTOL` times the longest action of the cascade
    (every verify ``T_i(m + 1) + o_i`` its rules allow, and the drafter's step). Actions
    ending less than ``eps`` apart end at the same instant; the theory (AS1) and the simulator
    both use this one value."""
    cascade = as_async_cascade(cascade)
    rules = async_rules(cascade)
    longest = float(cascade.models[-1].cost.t1)
    for i, r in enumerate(rules):
        m = cascade.models[i]
        vals = np.asarray(m.cost(np.arange(1, r.window + 2)), dtype=np.float64) + m.overhead
        longest = max(longest, float(np.max(vals)))
    return TIE_RTOL * longest
