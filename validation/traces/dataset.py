"""A capture as data: one recorded configuration (header kept), its rounds per level, each
model's baselines, and the decode totals of the prompts it finished.

:meth:`Capture.from_records` is the one constructor: the trace reader
(:func:`validation.traces.records.read_trace`) and the synthetic decoder
(:func:`validation.traces.synthetic.simulate_capture`) both build captures through it, from the
records of the schema in :mod:`validation.traces.schema`. Only finished prompts (those with a
``summary`` record) count; records of other prompts are dropped with a note.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import DEFAULT_MODE
from validation.traces.schema import ROUND_FIELDS, ROUND_OPTIONAL, TraceError

__all__ = ["Rounds", "Baseline", "CaptureConfig", "Capture", "DRIFT_NOTE", "StructureRecords",
           "header_structures", "finished", "Finished", "check_captures"]

DRIFT_NOTE = 0.05  # a model's T(1) moving more than this between start and end is noted


class Finished(NamedTuple):
    """What every ``from_records`` starts from: where the trace is (``where`` for errors,
    ``label`` for notes), its notes so far, its summaries in order and the finished units."""

    where: str
    label: str
    notes: list
    summaries: list
    done: set


def finished(header: dict, records, *, path: str, complete: bool, notes, unit: str = "prompt"
             ) -> Finished:
    """The finished units (``"prompt"``: ``summary`` records; ``"decode"``: ``bsummary``) of a
    trace's records; an unfinished capture (no ``end`` record) adds a note, none finished is
    an error."""
    where = path or header["cascade"].get("name", "capture")
    label = Path(path).name if path else where
    kind = "summary" if unit == "prompt" else "bsummary"
    summaries = sorted((r for r in records if r["type"] == kind), key=lambda s: s[unit])
    if not summaries:
        raise TraceError(f"{where}: no finished {unit} (no {kind} record)")
    notes = list(notes)
    if not complete:
        notes.append(f"{label}: capture not finished (no end record); "
                     f"{len(summaries)} {unit}(s) used")
    return Finished(where, label, notes, summaries, {int(s[unit]) for s in summaries})


def check_captures(captures, *, empty: str, kind: str = "configuration") -> list:
    """``captures`` as a list: at least one (else the error ``empty``), names unique (``kind``
    names them in the error)."""
    caps = list(captures)
    if not caps:
        raise PolyspecInputError("traces", empty)
    names = [c.name for c in caps]
    if len(set(names)) != len(names):
        dup = next(x for x in names if names.count(x) > 1)
        raise PolyspecInputError("traces", f"{kind} name {dup!r} appears twice")
    return caps


def _ids(ids, limit: int = 8) -> str:
    s = ", ".join(str(i) for i in ids[:limit])
    return s + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


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

    @classmethod
    def from_records(cls, level: int, recs, *, timed: bool = True) -> Rounds:
        """Columns from ``round`` records (dicts, all of level ``level``), as
        :meth:`from_rounds` of their :class:`Round` (a field a record lacks is NaN) builds
        them, without a tuple per round; ``timed=False``: every time is NaN (records that
        hold no times, e.g. ``bround``)."""
        cols = {}
        for k in ROUND_FIELDS:
            if k == "level":
                continue
            if k.endswith("_s"):
                cols[k] = np.asarray([r.get(k, math.nan) for r in recs] if timed
                                     else [math.nan] * len(recs), dtype=np.float64)
            else:
                cols[k] = np.asarray([r.get(k, math.nan) for r in recs], dtype=np.int64)
        return cls(level=level, **cols)

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


def header_structures(header: dict) -> tuple:
    """``(trees, schedules)`` of a trace header's cascade, one entry per pair (``None`` =
    chain; both ``None`` for a plain capture), validated (errors name
    ``cascade.trees[i]...`` / ``cascade.schedules[i]...``)."""
    from polyspec_theory.structures.schedule import schedule_from_config
    from polyspec_theory.structures.trees import tree_from_config

    casc = header["cascade"]
    m = len(casc["models"]) - 1
    out = []
    for key, conv in (("trees", tree_from_config), ("schedules", schedule_from_config)):
        x = casc.get(key)
        if x is None:
            out.append(None)
            continue
        if not isinstance(x, list) or len(x) != m:
            raise PolyspecInputError(f"cascade.{key}", f"need one entry per adjacent pair ({m})")
        out.append(tuple(None if e is None else conv(e, f"cascade.{key}[{i}]")
                         for i, e in enumerate(x)))
    return tuple(out)


@dataclass(frozen=True)
class StructureRecords:
    """The optional round fields of one level (schema: trees and schedules), aligned with
    that level's :class:`Rounds`: ``theta`` (-1 where absent), per round ``conf`` (drafted
    tokens' top probabilities) and ``conf_stop`` (NaN: none), tree ``nodes``/``depth`` (-1
    where absent), accepted path ``ranks``, ``visits`` ([children, accepted rank] per visited
    node, per round), drafter forwards ``draft_m`` and their times ``draft_fwd_s``."""

    level: int
    theta: np.ndarray
    conf: tuple
    conf_stop: np.ndarray
    nodes: np.ndarray
    depth: np.ndarray
    ranks: tuple
    visits: tuple
    draft_m: tuple
    draft_fwd_s: tuple

    @classmethod
    def from_records(cls, level: int, recs) -> StructureRecords:
        def ints(k):
            return np.asarray([int(r[k]) if r.get(k) is not None else -1 for r in recs],
                              np.int64)

        return cls(
            level=level, theta=ints("theta"),
            conf=tuple(np.asarray(r.get("conf") or [], np.float64) for r in recs),
            conf_stop=np.asarray([np.nan if r.get("conf_stop") is None else r["conf_stop"]
                                  for r in recs], np.float64),
            nodes=ints("nodes"), depth=ints("depth"),
            ranks=tuple(tuple(r.get("ranks") or ()) for r in recs),
            visits=tuple(np.asarray(r.get("visits") or [], np.int64).reshape(-1, 2)
                         for r in recs),
            draft_m=tuple(tuple(r.get("draft_m") or ()) for r in recs),
            draft_fwd_s=tuple(tuple(r.get("draft_fwd_s") or ()) for r in recs))

    def __len__(self) -> int:
        return len(self.theta)

    @classmethod
    def concat(cls, items) -> StructureRecords:
        """The rounds of several levels' records, in order (for pooled fits)."""
        items = list(items)
        if not items:
            raise PolyspecInputError("structures", "nothing to pool")
        return cls(level=items[0].level,
                   **{k: (np.concatenate([getattr(x, k) for x in items])
                          if isinstance(getattr(items[0], k), np.ndarray)
                          else tuple(v for x in items for v in getattr(x, k)))
                      for k in ("theta", "conf", "conf_stop", "nodes", "depth", "ranks",
                                "visits", "draft_m", "draft_fwd_s")})

    def sibling_data(self) -> tuple[np.ndarray, np.ndarray]:
        """``(accepted_rank, n_children)`` of every visited node: the data of
        :func:`polyspec_theory.structures.trees.fit_sibling_law`."""
        v = [x for x in self.visits if len(x)]
        if not v:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        allv = np.concatenate(v)
        return allv[:, 1], allv[:, 0]

    def sibling_data_by_depth(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`sibling_data` split by the depth of the children (row d = depth d + 1),
        each depth's visits in the order of the rounds."""
        v = [x for x in self.visits if len(x)]
        if not v:
            return []
        allv = np.concatenate(v).astype(np.int64)
        sizes = np.fromiter(map(len, v), np.int64, len(v))
        # each visit's depth - 1: its row within its round
        depth = np.arange(len(allv)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        return [(allv[depth == d, 1], allv[depth == d, 0]) for d in range(int(depth.max()) + 1)]

    def confidence_data(self, G, A) -> tuple[np.ndarray, np.ndarray]:
        """``(confidence, accepted)`` for
        :func:`polyspec_theory.structures.schedule.fit_confidence_law`
        (truncation 0): every drafted token's top probability with the verifier's decision
        (1 before the first rejection, 0 at it, NaN after) and the stop position's top
        probability (NaN: not drafted)."""
        c, y = [], []
        for conf, stop, g, a in zip(self.conf, self.conf_stop, G, A, strict=True):
            if len(conf) != g:
                raise PolyspecInputError("conf", f"a round has {len(conf)} top probabilities "
                                         f"for G = {g} drafted tokens")
            for j, x in enumerate(conf):
                c.append(x)
                y.append(1.0 if j < a else 0.0 if j == a else np.nan)
            if not np.isnan(stop):
                c.append(stop)
                y.append(np.nan)
        return np.asarray(c, np.float64), np.asarray(y, np.float64)


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


class CaptureConfig:
    """The configuration of a capture, read from its header (shared by single-stream and
    batched captures): models target first, thresholds, policy, sampling setting; and its
    forward-time totals over the per-prompt ``summaries`` (with the subclass's ``wall_s``)."""

    header: dict
    name: str
    summaries: tuple[dict, ...]

    def renamed(self, name: str):
        return dataclasses.replace(self, name=name)

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
    def scheme(self) -> str:
        """The scheme that wrote the capture: the theory's decision on its header
        (:func:`validation.schemes.scheme_of_trace`)."""
        from validation.schemes import scheme_of_trace

        return scheme_of_trace(self.header)

    @property
    def mode(self) -> str:
        """The header's ``"mode"`` (the config's; :data:`polyspec_theory.schemes.DEFAULT_MODE`
        where it gives none: traces written before the mode was recorded are synchronous).
        Which scheme wrote the capture is :attr:`scheme`; ask the registry about it."""
        return self.header.get("mode", DEFAULT_MODE)

    @property
    def machine(self) -> dict | None:
        """The machine at the capture's start (header ``machine``: load average, CPU
        frequency; docs/measuring.md); ``None`` for traces written before it was recorded."""
        return self.header.get("machine")

    @property
    def load_check(self) -> dict | None:
        """The load check the capture started after (header ``load_check``: ``max_load``,
        ``allow_load``, ``load_1min``); ``None`` when none ran or the trace predates it."""
        return self.header.get("load_check")

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
        """(verifier, drafter, temperature, top_k) of pair ``i``: the key under which laws
        pool across captures."""
        return (self.models[i], self.models[i + 1], self.temperature, self.top_k)

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


@dataclass(frozen=True)
class Capture(CaptureConfig):
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
    structures: tuple = field(default=())  # per level: StructureRecords or None

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
        where, label, notes, summaries, done = finished(header, records, path=path,
                                                        complete=complete, notes=notes)
        names = [m["name"] for m in header["cascade"]["models"]]
        n = len(names)
        orphans = sorted({int(r["prompt"]) for r in records
                          if r["type"] in ("round", "ar") and int(r["prompt"]) not in done})
        if orphans:
            notes.append(f"{label}: prompt(s) {_ids(orphans)} have round/ar records but no "
                         "summary (unfinished): not used")
        lossy = [int(s["prompt"]) for s in summaries if s.get("matches_target_ar") is False]
        if lossy:
            notes.append(f"{label}: WARNING: on prompt(s) {_ids(lossy)} the greedy cascade's "
                         "output differs from the target's autoregressive output "
                         "(matches_target_ar false): the decoder was not lossless there")
        raw_level: dict[int, list[dict]] = {lv: [] for lv in range(1, n)}
        for r in records:
            if r["type"] == "round" and int(r["prompt"]) in done:
                raw_level[int(r["level"])].append(r)
        rounds = []
        for lv in range(1, n):
            if not raw_level[lv]:
                raise TraceError(f"{where}: no round records for level {lv} "
                                 f"({names[lv - 1]} verifying {names[lv]})")
            rounds.append(Rounds.from_records(lv, raw_level[lv]))
        structures = tuple(
            StructureRecords.from_records(lv, raw_level[lv])
            if any(not r.keys().isdisjoint(ROUND_OPTIONAL) for r in raw_level[lv]) else None
            for lv in range(1, n))
        try:
            header_structures(header)
        except PolyspecInputError as e:
            raise TraceError(f"{where}: header {e}") from None
        baselines = {}
        ar_recs = [r for r in records if r["type"] == "ar"]  # one pass, file order kept
        cost_recs = [r for r in records if r["type"] == "cost"]
        for name in names:
            ar = [r for r in ar_recs if r["model"] == name and int(r["prompt"]) in done]
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
            cost = [r for r in cost_recs if r["model"] == name]
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
        if not baselines[names[0]].ar_time_per_token > 0:
            raise TraceError(f"{where}: the target's autoregressive wall times ('ar' records, "
                             "wall_s) sum to 0: no measured speedup")
        for s in summaries:
            if len(s["forward_s"]) != n or len(s["forward_count"]) != n:
                raise TraceError(f"{where}: summary forward_s / forward_count need {n} entries")
        return cls(header=header, rounds=tuple(rounds), baselines=baselines,
                   summaries=tuple(summaries), path=str(path), complete=complete,
                   notes=tuple(notes), structures=structures)

    # --- draft structures (docs/theory.md Part III-D) --------------------------------------------
    @property
    def trees(self) -> tuple | None:
        """Per pair: a :class:`~polyspec_theory.structures.trees.Tree` or ``None`` (chain);
        ``None`` if
        the capture has no tree."""
        return header_structures(self.header)[0]

    @property
    def schedules(self) -> tuple | None:
        """Per pair: an HF / confidence schedule or ``None``; ``None`` if none."""
        return header_structures(self.header)[1]

    @property
    def tree_sampling(self) -> str | None:
        return self.header.get("tree_sampling")

    def pair_kind(self, i: int) -> str:
        """``"chain"``, ``"tree"``, ``"hf"`` or ``"confidence"``."""
        t, s = self.trees, self.schedules
        if t is not None and t[i] is not None:
            return "tree"
        if s is not None and s[i] is not None:
            return s[i].kind
        return "chain"

    @property
    def structured(self) -> bool:
        """True when some pair drafts a tree or has a schedule."""
        return any(self.pair_kind(i) != "chain" for i in range(self.n - 1))

    def structure(self, i: int) -> StructureRecords:
        """The optional round fields of pair ``i`` (error if the trace has none)."""
        s = self.structures[i] if i < len(self.structures) else None
        if s is None:
            raise PolyspecInputError(f"{self.name}.rounds", f"pair {i} ({self.pair_kind(i)}) "
                                     "has no tree / schedule records")
        return s

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
        if not r.n:
            return 0.0
        kind = self.pair_kind(self.n - 2)
        if kind == "chain":
            return float(np.mean(r.ctx)) + (self.thresholds[-1] - 1) / 2.0
        if kind == "tree":  # forward d scores nodes at depth d - 1: context ctx - 1 + d
            return float(np.mean(r.ctx)) + float(np.mean(self.structure(self.n - 2).depth
                                                         - 1)) / 2.0
        return float(np.mean(r.ctx)) + float(np.mean(r.G)) / 2.0  # G + 1{G < cap} forwards
