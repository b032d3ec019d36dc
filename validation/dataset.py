"""A capture as data: one recorded configuration (header kept), its rounds per level, each
model's baselines, and the decode totals of the prompts it finished.

:meth:`Capture.from_records` is the one constructor: the trace reader
(:func:`validation.traces.read_trace`) and the synthetic decoder
(:func:`validation.synthetic.simulate_capture`) both build captures through it, from the
records of the schema in :mod:`validation.schema`. Only finished prompts (those with a
``summary`` record) count; records of other prompts are dropped with a note.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory._input import PolyspecInputError
from polyspec_theory.counts import AcceptanceCounts

from .schema import ROUND_FIELDS, Round, TraceError

__all__ = ["Rounds", "Baseline", "Capture", "DRIFT_NOTE"]

DRIFT_NOTE = 0.05  # a model's T(1) moving more than this between start and end is noted


@dataclass(frozen=True)
class Rounds:
    """All verification rounds of one level, as columns of :class:`Round` (file order)."""

    level: int
    prompt: np.ndarray
    ctx: np.ndarray
    G: np.ndarray
    A: np.ndarray
    L: np.ndarray
    m: np.ndarray
    verify_s: np.ndarray
    draft_s: np.ndarray
    round_s: np.ndarray

    def __post_init__(self):
        n = len(self.G)
        for k in ROUND_FIELDS:
            if k != "level" and len(getattr(self, k)) != n:
                raise PolyspecInputError(k, f"must have one value per round ({n})")

    @classmethod
    def from_rounds(cls, level: int, rounds) -> Rounds:
        """Columns from :class:`Round` records (all of level ``level``)."""
        cols = {k: [] for k in ROUND_FIELDS if k != "level"}
        for r in rounds:
            for k in cols:
                cols[k].append(getattr(r, k))
        arrays = {k: np.asarray(v, dtype=np.float64 if k.endswith("_s") else np.int64)
                  for k, v in cols.items()}
        return cls(level=level, **arrays)

    def select(self, mask) -> Rounds:
        mask = np.asarray(mask, dtype=bool)
        return dataclasses.replace(self, **{k: getattr(self, k)[mask] for k in ROUND_FIELDS
                                            if k != "level"})

    def __len__(self) -> int:
        return len(self.G)

    @property
    def n(self) -> int:
        return len(self.G)

    def counts(self) -> AcceptanceCounts:
        """The accepted counts with their caps (block lengths)."""
        return AcceptanceCounts.from_samples(self.A, self.G)

    @property
    def extra_positions(self) -> float:
        """Mean positions a verify forward scored beyond ``G + 1`` (catch-up tokens)."""
        return float(np.mean(self.m - self.G - 1)) if self.n else 0.0


@dataclass(frozen=True)
class Baseline:
    """One model's baselines in a capture: autoregressive decoding (``ar_*``, over the
    finished prompts; ``None`` if the model had no AR run) and cost-curve timing samples
    ``(cost_m, cost_ctx, cost_s)`` with the phase of each sample (start / end)."""

    name: str
    ar_time_per_token: float | None
    ar_forward_per_token: float | None
    ar_tokens: int
    ar_context: float | None
    ar_prompt: np.ndarray  # per AR run: prompt id, wall seconds, tokens
    ar_wall_s: np.ndarray
    ar_n_tokens: np.ndarray
    cost_m: np.ndarray
    cost_ctx: np.ndarray
    cost_s: np.ndarray
    cost_phase: np.ndarray

    def phase_drift(self) -> float | None:
        """Median ``T(1)`` at the end of the capture / at its start, minus 1 (``None`` if a
        phase is missing)."""
        out = {}
        for ph in ("start", "end"):
            sel = (self.cost_phase == ph) & (self.cost_m == 1)
            if sel.any():
                out[ph] = float(np.median(self.cost_s[sel]))
        if len(out) < 2 or out["start"] <= 0:
            return None
        return out["end"] / out["start"] - 1.0


@dataclass(frozen=True)
class Capture:
    """One captured configuration: models target first, one threshold per pair, the rounds of
    each verifying level (``rounds[i]`` = level i+1), per-model baselines, and the per-prompt
    summaries of the finished prompts (sorted by prompt)."""

    header: dict
    rounds: tuple[Rounds, ...]
    baselines: dict
    summaries: tuple[dict, ...]
    path: str = ""
    complete: bool = True
    notes: tuple[str, ...] = field(default=())
    name: str = ""

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", str(self.header["cascade"].get("name")
                                                 or Path(self.path).stem or "capture"))
        n = self.n
        if n < 2:
            raise PolyspecInputError(f"{self.name}.models", "need at least two models")
        if len(self.thresholds) != n - 1 or len(self.rounds) != n - 1:
            raise PolyspecInputError(f"{self.name}.thresholds", f"need {n - 1} entries")
        for m in self.models:
            if m not in self.baselines:
                raise PolyspecInputError(f"{self.name}.baselines", f"no baseline for {m!r}")
        if self.tokens <= 0 or self.wall_s <= 0:
            raise PolyspecInputError(f"{self.name}.tokens", "no decoded tokens / time")

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def from_records(cls, header: dict, records, *, path: str = "", complete: bool = True,
                     notes=()) -> Capture:
        """Build a capture from a header and trace records (``round``, ``ar``, ``cost``,
        ``summary``; others ignored), keeping the prompts that have a summary."""
        where = path or header["cascade"].get("name", "capture")
        label = Path(path).name if path else where
        names = [m["name"] for m in header["cascade"]["models"]]
        n = len(names)
        notes = list(notes)
        summaries = sorted((r for r in records if r["type"] == "summary"),
                           key=lambda s: s["prompt"])
        if not summaries:
            raise TraceError(f"{where}: no finished prompt (no summary record)")
        if not complete:
            notes.append(f"{label}: capture not finished (no end record); "
                         f"{len(summaries)} prompt(s) used")
        done = {int(s["prompt"]) for s in summaries}
        by_level: dict[int, list[Round]] = {lv: [] for lv in range(1, n)}
        for r in records:
            if r["type"] == "round" and int(r["prompt"]) in done:
                by_level[int(r["level"])].append(Round(**{k: r.get(k, math.nan)
                                                          for k in ROUND_FIELDS}))
        rounds = []
        for lv in range(1, n):
            if not by_level[lv]:
                raise TraceError(f"{where}: no round records for level {lv} "
                                 f"({names[lv - 1]} verifying {names[lv]})")
            rounds.append(Rounds.from_rounds(lv, by_level[lv]))
        baselines = {}
        for name in names:
            ar = [r for r in records if r["type"] == "ar" and r["model"] == name
                  and int(r["prompt"]) in done]
            ar_t = ar_f = ar_ctx = None
            ar_tok = 0
            wall = np.asarray([r["wall_s"] for r in ar], np.float64)
            ntok = np.asarray([r["n_tokens"] for r in ar], np.int64)
            if ar:
                fwd = np.asarray([r["forward_s"] for r in ar], np.float64)
                ar_t = float(wall.sum() / ntok.sum())
                ar_f = float(fwd.sum() / ntok.sum())
                ar_tok = int(ntok.sum())
                ar_ctx = float(np.concatenate([r.get("ctx0", 0) + np.arange(k)
                                               for r, k in zip(ar, ntok, strict=True)]).mean())
            cost = [r for r in records if r["type"] == "cost" and r["model"] == name]
            if not cost:
                raise TraceError(f"{where}: no cost-curve records for model {name!r}")
            reps = [len(r["times_s"]) for r in cost]
            b = Baseline(
                name=name, ar_time_per_token=ar_t, ar_forward_per_token=ar_f,
                ar_tokens=ar_tok, ar_context=ar_ctx,
                ar_prompt=np.asarray([r["prompt"] for r in ar], np.int64), ar_wall_s=wall,
                ar_n_tokens=ntok,
                cost_m=np.repeat(np.asarray([r["m"] for r in cost], np.int64), reps),
                cost_ctx=np.repeat(np.asarray([r["ctx"] for r in cost], np.float64), reps),
                cost_s=np.concatenate([np.asarray(r["times_s"], np.float64) for r in cost]),
                cost_phase=np.repeat(np.asarray([r.get("phase", "") for r in cost]), reps))
            baselines[name] = b
            d = b.phase_drift()
            if d is not None and abs(d) > DRIFT_NOTE:
                notes.append(f"{label}: {name} T(1) moved {100 * d:+.1f} % between the start "
                             "and the end of the capture")
        if baselines[names[0]].ar_time_per_token is None:
            raise TraceError(f"{where}: no autoregressive baseline ('ar' records) for the "
                             f"target {names[0]!r}")
        for s in summaries:
            if len(s["forward_s"]) != n or len(s["forward_count"]) != n:
                raise TraceError(f"{where}: summary forward_s / forward_count need {n} entries")
        return cls(header=header, rounds=tuple(rounds), baselines=baselines,
                   summaries=tuple(summaries), path=str(path), complete=complete,
                   notes=tuple(notes))

    def renamed(self, name: str) -> Capture:
        return dataclasses.replace(self, name=name)

    # --- configuration -----------------------------------------------------------------------
    @property
    def cascade(self) -> dict:
        return self.header["cascade"]

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m["name"] for m in self.cascade["models"])

    @property
    def n(self) -> int:
        return len(self.cascade["models"])

    @property
    def thresholds(self) -> tuple[int, ...]:
        return tuple(int(t) for t in self.cascade["thresholds"])

    @property
    def policy(self) -> str:
        return self.cascade.get("policy", "accumulate")

    @property
    def temperature(self) -> float:
        return float(self.header["temperature"])

    @property
    def top_k(self) -> int:
        return int(self.header.get("top_k", 0))

    @property
    def max_new_tokens(self) -> int | None:
        """Tokens asked per prompt (header ``prompts.max_new_tokens``), if recorded."""
        v = self.header.get("prompts", {}).get("max_new_tokens")
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def pair_key(self, i: int) -> tuple:
        """(verifier, drafter, temperature, top_k) of pair ``i``."""
        return (self.models[i], self.models[i + 1], self.temperature, self.top_k)

    # --- decode totals -----------------------------------------------------------------------
    @property
    def n_prompts(self) -> int:
        return len(self.summaries)

    @property
    def prompt_wall_s(self) -> tuple[float, ...]:
        return tuple(float(s["wall_s"]) for s in self.summaries)

    @property
    def prompt_tokens(self) -> tuple[int, ...]:
        return tuple(int(s["n_generated"]) for s in self.summaries)

    @property
    def tokens(self) -> int:
        return int(sum(self.prompt_tokens))

    @property
    def wall_s(self) -> float:
        return float(sum(self.prompt_wall_s))

    @property
    def forward_s(self) -> tuple[float, ...]:
        """Σ forward seconds per model (target first) over the finished prompts."""
        return tuple(float(x) for x in np.sum([s["forward_s"] for s in self.summaries], axis=0))

    @property
    def forward_count(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.sum([s["forward_count"] for s in self.summaries],
                                            axis=0))

    @property
    def overhead_s(self) -> float:
        """Decode time outside model forwards."""
        return self.wall_s - float(sum(self.forward_s))

    @property
    def overhead_fraction(self) -> float:
        return self.overhead_s / self.wall_s

    @property
    def time_per_token(self) -> float:
        """Measured cascade decode time per token (seconds)."""
        return self.wall_s / self.tokens

    def time_per_token_se(self) -> float:
        """Delta-method standard error of the measured time per token over prompts (ratio
        estimator ``Σ wall / Σ tokens``; NaN with fewer than two prompts)."""
        w = np.asarray(self.prompt_wall_s, dtype=np.float64)
        n = np.asarray(self.prompt_tokens, dtype=np.float64)
        k = w.size
        if k < 2:
            return math.nan
        tau = w.sum() / n.sum()
        return float(math.sqrt(k / (k - 1) * np.sum((w - tau * n) ** 2)) / n.sum())

    @property
    def ar_time_per_token(self) -> float:
        """The target's autoregressive decode time per token in this capture."""
        return float(self.baselines[self.models[0]].ar_time_per_token)

    @property
    def measured_speedup(self) -> float:
        """AR target time per token / cascade time per token (same capture, same prompts)."""
        return self.ar_time_per_token / self.time_per_token

    def paired_table(self) -> np.ndarray:
        """Per finished prompt with a target AR run, in prompt order: (prompt id, AR target
        wall seconds, AR tokens, cascade wall seconds, cascade tokens) — the data of a paired
        (per-prompt) bootstrap of the measured speedup."""
        b = self.baselines[self.models[0]]
        ar = {int(p): (w, k) for p, w, k in zip(b.ar_prompt, b.ar_wall_s, b.ar_n_tokens,
                                                  strict=True)}
        rows = [(int(s["prompt"]),) + ar[int(s["prompt"])]
                + (float(s["wall_s"]), int(s["n_generated"]))
                for s in self.summaries if int(s["prompt"]) in ar]
        return np.asarray(rows, dtype=np.float64).reshape(-1, 5)

    def mean_context(self, i: int) -> float:
        """Mean context of model ``i``'s forwards: its verify rounds' mean ``ctx``; the bottom
        model drafts the last pair's blocks at ``ctx + 0..theta-1``, mean
        ``ctx + (theta-1)/2``."""
        if i < self.n - 1:
            r = self.rounds[i]
            return float(np.mean(r.ctx)) if r.n else 0.0
        r = self.rounds[-1]
        return float(np.mean(r.ctx)) + (self.thresholds[-1] - 1) / 2.0 if r.n else 0.0
