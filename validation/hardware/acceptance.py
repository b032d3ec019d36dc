"""Acceptance of a model pair from another log of the same pair (docs/theory.md HW3).

Greedy acceptance depends on the pair and the prompts, not the GPU. A log is a GPU table of
measured rows (:func:`validation.hardware.rows.read_measured`); from it:

* nano-PEARL rows give ``tokens_per_step`` at the draft length ``gamma`` the engine chose on
  the log's GPU (not printed: modelled by the start-up rule on that GPU's costs, passed in as
  ``gamma_of``) and ``mat`` (mean run between rejections). The iid acceptance rate ``alpha``
  is the one whose PEARL run (PL3 of :mod:`polyspec_theory.schemes.pearl`) gives the log's
  tokens per step at that ``gamma`` (:func:`alpha_for_tokens`); ``1 - 1/mat`` is kept as a
  check of the iid model.
* EAGLE chain rows give ``accept_length`` at ``D`` drafts: ``alpha`` solves
  ``(1 - alpha**(D+1)) / (1 - alpha) = accept_length``.

Rows of the same pair and dataset are pooled (mean ``alpha``; the spread over them is the
acceptance part of a forecast's uncertainty). A row's own measurement is never its acceptance
source: :meth:`AcceptanceLog.alpha` excludes the row being forecast by id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.core.kept import Kept
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.hardware.methods import pearl_counts, pearl_counts_many
from validation.hardware.rows import Row, read_measured

__all__ = ["AcceptanceLog", "Estimate", "implied_gamma", "implied_gammas", "alpha_for_chain",
           "alpha_for_tokens", "alphas_for_tokens"]


def alpha_for_tokens(tokens_per_step, gamma, steps) -> float:
    """The iid ``alpha`` whose PL3 tokens per step over ``steps`` steps at draft length
    ``gamma`` (:func:`validation.hardware.methods.pearl_counts`) equal ``tokens_per_step``
    (bisection; the map increases with ``alpha``). Refused outside what PEARL can give:
    ``(1 + steps) / steps`` at ``alpha = 0`` up to about ``gamma`` (all accepted)."""
    (alpha,) = _alphas([tokens_per_step], gamma, steps)
    if isinstance(alpha, PolyspecInputError):
        raise PolyspecInputError(alpha.field, alpha.reason)
    return alpha


def alphas_for_tokens(tokens, gamma, steps) -> list[float | None]:
    """:func:`alpha_for_tokens` of each of ``tokens`` (one ``gamma`` and ``steps``), ``None``
    where it refuses; the bisections run side by side (one PL3 recursion per batch of
    halvings for all of them), each ending on the very float it gives alone."""
    return [None if isinstance(a, PolyspecInputError) else a
            for a in _alphas(tokens, gamma, steps)]


ALPHAS_KEPT = 8192
_ALPHAS = Kept(ALPHAS_KEPT)  # (tokens_per_step, gamma, steps) -> alpha or its refusal


def _alphas(tokens, gamma, steps) -> list:
    """Per ``tokens`` entry the alpha of :func:`alpha_for_tokens` or its refusal (a
    :class:`PolyspecInputError`); kept, at most ``ALPHAS_KEPT`` of them."""
    g = as_int(gamma, "gamma", low=1, high=4096)
    steps = as_int(steps, "steps", low=1, high=100_000)
    lo_v, hi_v = (pearl_counts(a, g, steps)[0] / steps for a in (0.0, 1.0))
    known: dict = {}  # (entry, gamma, steps) -> alpha or refusal
    todo: dict = {}  # tokens per step -> [lo, hi]
    for x in tokens:
        key = (x, g, steps)
        if key in _ALPHAS:
            known[key] = _ALPHAS[key]
            continue
        try:
            t = as_real(x, "tokens_per_step", low=0.0, low_open=True)
            if not lo_v <= t <= hi_v:
                raise PolyspecInputError(
                    "tokens_per_step", f"{t:.4g} is outside what PEARL with gamma = {g} over "
                    f"{steps} steps gives ([{lo_v:.4g}, {hi_v:.4g}])")
        except PolyspecInputError as e:
            known[key] = e
            continue
        todo.setdefault(t, [0.0, 1.0])
    # a PL3 recursion's cost grows with its laws past a few: more than SIDE_BY_SIDE targets
    # halve once per recursion, fewer take BISECT_LEVELS halvings per recursion
    levels = 1 if len(todo) > SIDE_BY_SIDE else BISECT_LEVELS
    for _ in range(48 // levels):
        # the midpoints the next ``levels`` halvings of each may visit, side by side
        mids = {t: _midpoints(lo, hi, levels) for t, (lo, hi) in todo.items()}
        flat = [m for ms in mids.values() for m in ms]
        counts = pearl_counts_many(flat, g, steps, keep=False) if flat else []
        tps = {m: n / steps for m, (n, _) in zip(flat, counts, strict=True)}
        for t, bounds in todo.items():
            lo, hi = bounds
            for _ in range(levels):
                mid = 0.5 * (lo + hi)
                if tps[mid] < t:
                    lo = mid
                else:
                    hi = mid
            bounds[:] = lo, hi
    for x in tokens:
        if (x, g, steps) not in known:
            lo, hi = todo[float(x)]
            known[x, g, steps] = 0.5 * (lo + hi)
    _ALPHAS.keep(known)
    return [known[x, g, steps] for x in tokens]


BISECT_LEVELS = 3  # halvings per PL3 recursion of a few targets (divides 48)
SIDE_BY_SIDE = 4  # more targets than this: one halving per recursion


def _midpoints(lo: float, hi: float, levels: int) -> list[float]:
    """Every midpoint ``levels`` successive halvings of ``[lo, hi]`` can visit, as the
    bisection computes them."""
    if levels == 0:
        return []
    mid = 0.5 * (lo + hi)
    return [mid] + _midpoints(lo, mid, levels - 1) + _midpoints(mid, hi, levels - 1)


def alpha_for_chain(accept_length: float, drafts: int) -> float:
    """iid ``alpha`` of a chain of ``drafts`` drafts committing ``accept_length`` tokens per
    round on average (bisection)."""
    if not 1.0 <= accept_length <= drafts + 1:
        raise PolyspecInputError("accept_length", f"{accept_length:g} is outside [1, "
                                 f"{drafts + 1}] for {drafts} drafts")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if (1 - mid ** (drafts + 1)) / (1 - mid) < accept_length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def implied_gamma(rows: list[Row], gammas=range(1, 33)) -> tuple[int, float]:
    """The draft length that best reconciles a pair's ``mat`` and ``tokens_per_step`` over its
    datasets under iid acceptance (``alpha = 1 - 1/mat``): the one integer for all its rows,
    as nano-PEARL keeps one ``gamma`` per process. Returns ``(gamma, rms log error)``."""
    return implied_gammas([rows], gammas)[0]


def implied_gammas(pairs: list[list[Row]], gammas=range(1, 33)) -> list[tuple[int, float]]:
    """:func:`implied_gamma` of each list of rows in ``pairs``, the rows of every list at one
    draft length and horizon side by side in one PL3 recursion."""
    used = []  # per list: (alpha, tokens per step, steps) of its usable rows
    for rows in pairs:
        u = []
        for r in rows:
            mat, tps, steps = (r.measured.get("mat"), r.measured.get("tokens_per_step"),
                               r.get("steps"))
            if mat and tps and steps and not mat < 1:
                u.append((1.0 - 1.0 / mat, tps, steps))
        used.append(u)
    best = [None] * len(pairs)
    for g in gammas:
        pred = {}  # (alpha, steps) -> tokens per step
        for steps in sorted({s for u in used for _, _, s in u}):
            alphas = [a for u in used for a, _, s in u if s == steps]
            for a, (n, _) in zip(alphas, pearl_counts_many(alphas, g, steps),
                                 strict=True):
                pred[a, steps] = n / steps
        for i, u in enumerate(used):
            errs = [np.log(pred[a, steps] / tps) for a, tps, steps in u]
            if not errs:
                raise PolyspecInputError("rows", "no row with mat and tokens_per_step")
            e = float(np.sqrt(np.mean(np.square(errs))))
            if best[i] is None or e < best[i][1]:
                best[i] = (g, e)
    return best


@dataclass
class Estimate:
    """An acceptance estimate: ``alpha`` (iid), the log rows it came from, their spread."""

    alpha: float
    sources: list = field(default_factory=list)
    spread: float = 0.0
    alpha_from_mat: float | None = None

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "rows": list(self.sources), "spread": self.spread,
                "alpha_from_mat": self.alpha_from_mat}


def _key(name) -> str:
    return str(name or "").split("/")[-1].lower()


class AcceptanceLog:
    """Measured rows of one or more files, indexed by (target, drafter, dataset)."""

    def __init__(self, rows: list[Row], origin: str = "rows"):
        self.rows = [r for r in rows if r.method in ("pearl", "eagle")]
        self.origin = origin

    @classmethod
    def read(cls, path, field_name: str = "--acceptance-from") -> AcceptanceLog:
        rows, _refused = read_measured(path, field_name)
        return cls(rows, str(path))

    def matching(self, target, drafter, dataset=None, exclude: str | None = None) -> list[Row]:
        """Rows of the pair (names compared without the organisation, case-insensitive) and,
        when given, the dataset; ``exclude``: a row id never used."""
        t, d = _key(target), _key(drafter)
        out = [r for r in self.rows if r.id != exclude and _key(r.pair[0]) == t
               and _key(r.pair[1]) == d]
        if dataset is not None:
            out = [r for r in out if str(r.dataset).lower() == str(dataset).lower()]
        return out

    def _sources(self, target, drafter, dataset, exclude, batch) -> list[Row]:
        """The rows :meth:`alpha` pools: the pair's on ``dataset`` but ``exclude``, those at
        ``batch`` when there are any."""
        rows = self.matching(target, drafter, dataset, exclude)
        if batch is not None and any(r.batch == batch for r in rows):
            rows = [r for r in rows if r.batch == batch]
        return rows

    def prefetch(self, asks, *, gamma_of: Callable[[Row], int]) -> None:
        """Compute ahead the PEARL rows' alphas that :meth:`alpha` needs for ``asks`` (each
        ``(target, drafter, dataset, exclude, batch)``), the rows of one draft length and
        horizon side by side (:func:`alphas_for_tokens`); kept, so those calls find them.
        Changes no result: what cannot be computed here is left to :meth:`alpha`."""
        groups: dict = {}  # (gamma, steps) -> tokens per step
        for ask in asks:
            for r in self._sources(*ask):
                tps, steps = r.measured.get("tokens_per_step"), r.get("steps")
                if r.method != "pearl" or not tps or not steps:
                    continue
                try:
                    groups.setdefault((gamma_of(r), steps), []).append(tps)
                except PolyspecInputError:
                    continue
        for (g, steps), tokens in groups.items():
            try:
                alphas_for_tokens(tokens, g, steps)
            except PolyspecInputError:
                continue

    def alpha(self, target, drafter, dataset, *, gamma_of: Callable[[Row], int],
              exclude: str | None = None, batch: int | None = None) -> Estimate | None:
        """The pair's iid acceptance on ``dataset`` from this log, or ``None`` when the log
        has no row of the pair and dataset. ``gamma_of(row)``: the draft length the log's
        engine ran that row with. ``batch``: prefer the log's rows at that batch size (greedy
        acceptance moves a little with the batch's kernels); all rows of the pair and dataset
        otherwise."""
        rows = self._sources(target, drafter, dataset, exclude, batch)
        if not rows:
            return None
        alphas, mats = [], []
        for r in rows:
            if r.method == "pearl":
                tps, steps = r.measured.get("tokens_per_step"), r.get("steps")
                if not tps or not steps:
                    continue
                try:
                    alphas.append(alpha_for_tokens(tps, gamma_of(r), steps))
                except PolyspecInputError:
                    continue  # tokens per step the chain cannot give at that gamma
                if r.measured.get("mat"):
                    mats.append(1.0 - 1.0 / max(1.0, float(r.measured["mat"])))
            elif r.method == "eagle" and r.get("draft_shape") == "chain":
                alphas.append(alpha_for_chain(r.get("accept_length"),
                                              r.get("speculative_num_steps")))
        if not alphas:
            return None
        return Estimate(float(np.mean(alphas)), [r.id for r in rows],
                        float(np.std(alphas)) if len(alphas) > 1 else 0.0,
                        float(np.mean(mats)) if mats else None)
