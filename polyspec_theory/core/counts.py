"""Observed acceptance data: rounds as a weighted histogram over (accepted, cap) cells.

Trace rounds, engine counters and per-request histograms all reduce to
:class:`AcceptanceCounts` (``counts[j]`` rounds had ``A = accepted[j]`` with block length /
cap ``caps[j]``), so engine counters with millions of rounds fit as fast as a short trace.
Law fitting (:meth:`polyspec_theory.core.laws.AcceptanceLaw.fit`) works on this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_int_array

__all__ = ["AcceptanceCounts", "as_sample", "MAX_CAP"]

MAX_CAP = 1_000_000


def as_sample(accepted, caps) -> tuple[np.ndarray, np.ndarray]:
    """An observed sample of accepted counts with their caps (block lengths), checked."""
    a = as_int_array(accepted, "accepted", low=0)
    if np.ndim(caps) == 0:
        g = np.full(a.shape, as_int(caps, "caps", low=1, high=MAX_CAP), dtype=np.int64)
    else:
        g = as_int_array(caps, "caps", low=1)
    if g.shape != a.shape:
        raise PolyspecInputError(
            "caps", f"must have the same length as accepted ({a.size}), got {g.size}"
        )
    bad = np.flatnonzero(a > g)
    if bad.size:
        i = int(bad[0])
        raise PolyspecInputError(
            "accepted", f"accepted count {a[i]} exceeds its cap {g[i]} at index {i}"
        )
    return a, g


@dataclass(frozen=True)
class AcceptanceCounts:
    """Observed rounds as a histogram over cells ``(accepted, cap)`` with ``counts`` rounds each.

    ``notes`` carries caveats from the source (e.g. an engine whose drafts were not all of the
    same length, so censoring is only approximate).
    """

    accepted: np.ndarray
    caps: np.ndarray
    counts: np.ndarray
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self):
        a, g = as_sample(self.accepted, self.caps)
        w = as_int_array(self.counts, "counts", low=0)
        if w.shape != a.shape:
            raise PolyspecInputError(
                "counts", f"must have one count per cell ({a.size}), got {w.size}"
            )
        keep = w > 0
        if not keep.any():
            raise PolyspecInputError("counts", "no rounds observed (all counts are 0)")
        # canonical form: unique cells sorted by (cap, accepted)
        key = g[keep] * (int(a.max()) + 2) + a[keep]
        uniq, inv = np.unique(key, return_inverse=True)
        ww = np.bincount(inv, weights=w[keep]).astype(np.int64)
        first = np.zeros(uniq.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(inv.size)[::-1]
        object.__setattr__(self, "accepted", a[keep][first])
        object.__setattr__(self, "caps", g[keep][first])
        object.__setattr__(self, "counts", ww)
        object.__setattr__(self, "notes", tuple(self.notes))

    # --- constructors ------------------------------------------------------------------------
    @classmethod
    def from_samples(cls, accepted, caps, source: str = "") -> AcceptanceCounts:
        """One cell per observed round (``caps`` an int or one cap per round)."""
        a, g = as_sample(accepted, caps)
        return cls(a, g, np.ones(a.size, dtype=np.int64), source)

    @classmethod
    def from_histogram(cls, histogram, cap, source: str = "", notes=()) -> AcceptanceCounts:
        """``histogram[k]`` rounds accepted exactly ``k`` of ``cap`` drafted tokens."""
        h = as_int_array(histogram, "histogram", low=0)
        cap = as_int(cap, "cap", low=1)
        if h.size > cap + 1:
            extra = h[cap + 1:]
            if extra.any():
                k = cap + 1 + int(np.flatnonzero(extra)[0])
                raise PolyspecInputError(
                    "histogram", f"has rounds with {k} accepted tokens, more than the cap {cap}"
                )
            h = h[: cap + 1]
        k = np.arange(h.size)
        return cls(k, np.full(h.size, cap), h, source, tuple(notes))

    @classmethod
    def from_checked_histogram(cls, histogram: np.ndarray, cap: int, source: str = "",
                               notes=()) -> AcceptanceCounts:
        """:meth:`from_histogram` for a histogram its caller has checked (non-negative int64
        counts of ``0..cap`` accepted, not all zero): no re-validation, for readers of long
        logs (one histogram per line)."""
        h = np.asarray(histogram, dtype=np.int64)
        keep = np.flatnonzero(h > 0)
        if keep.size == 0 or h.size != cap + 1 or (h < 0).any():
            return cls.from_histogram(h, cap, source, notes)  # the checked path's errors
        obj = object.__new__(cls)
        for name, value in (("accepted", keep.astype(np.int64)),
                            ("caps", np.full(keep.size, cap, dtype=np.int64)),
                            ("counts", h[keep]), ("source", source), ("notes", tuple(notes))):
            object.__setattr__(obj, name, value)
        return obj

    @classmethod
    def from_survival_counts(cls, n_rounds, at_least, cap=None, source: str = "",
                             notes=()) -> AcceptanceCounts:
        """``at_least[k-1] = #{rounds with A >= k}`` for k = 1..len (all rounds capped at ``cap``,
        default ``len(at_least)``). The histogram is exact: ``#{A = k} = c_k - c_{k+1}``."""
        n = as_int(n_rounds, "num_drafts", low=1)
        c = as_int_array(at_least, "num_accepted_tokens_per_pos", low=0)
        cap = c.size if cap is None else as_int(cap, "cap", low=c.size)
        if c[0] > n:
            raise PolyspecInputError(
                "num_accepted_tokens_per_pos",
                f"position 0 has {c[0]} acceptances but there are only {n} drafts",
            )
        if (np.diff(c) > 0).any():
            k = int(np.flatnonzero(np.diff(c) > 0)[0]) + 1
            raise PolyspecInputError(
                "num_accepted_tokens_per_pos",
                f"must be non-increasing (a token is accepted only after the ones before it); "
                f"position {k} has {c[k]} > position {k - 1} with {c[k - 1]}",
            )
        full = np.concatenate([[n], c, np.zeros(cap - c.size + 1, dtype=np.int64)])
        hist = full[:-1] - full[1:]
        return cls.from_histogram(hist, cap, source, notes)

    @classmethod
    def coerce(cls, data, caps=None) -> AcceptanceCounts:
        """``data`` as counts: an :class:`AcceptanceCounts` (``caps`` must be ``None``) or an
        array of accepted counts with ``caps`` (an int or one cap per round)."""
        if isinstance(data, AcceptanceCounts):
            if caps is not None:
                raise PolyspecInputError("caps",
                                         "give caps only with an array of accepted counts")
            return data
        if caps is None:
            raise PolyspecInputError("caps", "required with an array of accepted counts")
        return cls.from_samples(data, caps)

    # --- summaries ---------------------------------------------------------------------------
    @property
    def n_rounds(self) -> int:
        return int(self.counts.sum())

    def mean_accepted(self) -> float:
        """Sample mean of ``A``."""
        return float(np.dot(self.counts, self.accepted) / self.n_rounds)

    def mean_emitted(self) -> float:
        """Sample mean of ``L = A + 1`` (vLLM's "mean acceptance length" convention)."""
        return 1.0 + self.mean_accepted()

    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (vLLM's "draft acceptance rate")."""
        return float(np.dot(self.counts, self.accepted) / np.dot(self.counts, self.caps))

    def survival(self, kmax: int | None = None) -> np.ndarray:
        """Kaplan–Meier estimate of ``P(A >= k)``, k = 0..kmax (rounds at cap < k censored)."""
        kmax = int(self.caps.max()) if kmax is None else as_int(kmax, "kmax", low=0)
        s = np.ones(kmax + 1)
        for k in range(1, kmax + 1):
            at_risk = (self.accepted >= k - 1) & (self.caps >= k)
            trials = self.counts[at_risk].sum()
            if trials == 0:
                s[k:] = np.nan
                break
            succ = self.counts[at_risk & (self.accepted >= k)].sum()
            s[k] = s[k - 1] * succ / trials
        return s

    def histogram(self, cap: int) -> np.ndarray:
        """Counts of ``A = k``, k = 0..cap, among rounds whose cap is ``cap``."""
        cap = as_int(cap, "cap", low=1)
        sel = self.caps == cap
        return np.bincount(self.accepted[sel], weights=self.counts[sel],
                           minlength=cap + 1).astype(np.int64)[: cap + 1]

    def to_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Expand to one ``(accepted, cap)`` pair per round."""
        return np.repeat(self.accepted, self.counts), np.repeat(self.caps, self.counts)

    def merge(self, other: AcceptanceCounts) -> AcceptanceCounts:
        return AcceptanceCounts(
            np.concatenate([self.accepted, other.accepted]),
            np.concatenate([self.caps, other.caps]),
            np.concatenate([self.counts, other.counts]),
            self.source or other.source,
            self.notes + tuple(n for n in other.notes if n not in self.notes),
        )

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "n_rounds": self.n_rounds,
            "mean_accepted": self.mean_accepted(),
            "mean_emitted": self.mean_emitted(),
            "acceptance_rate": self.acceptance_rate(),
            "notes": list(self.notes),
            "cells": [[int(a), int(g), int(w)]
                      for a, g, w in zip(self.accepted, self.caps, self.counts, strict=True)],
        }
