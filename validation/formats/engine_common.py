"""Shared pieces of the engine parsers: the data types (:class:`Snapshot`,
:class:`EngineOutput`, :class:`SweepTable`), reading a file (bounded, ``#`` source header
stripped), JSON helpers, and the arithmetic of printed figures (rounding intervals, per-position
rates to counts)."""

from __future__ import annotations

import errno
import json
import math
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import PolyspecInputError, as_int, as_real_array

# Drafts shorter than the configured length: up to this fraction of the draft slots missing,
# the rounds are still fitted as capped at gamma (with a warning); beyond it, no law is fitted.
SHORT_DRAFT_TOLERANCE = 0.05

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


# ------------------------------------------------------------------------------------------
# data types
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """Acceptance data of one interval / request / run.

    ``rounds``: verification rounds; ``accepted``: accepted draft tokens (the prefix that the
    verifier kept; the bonus / correction token is not counted); ``drafted``: drafted tokens
    (None if not reported); ``cap``: the draft length gamma when it is known (None when drafts
    varied by round); ``counts``: the histogram of ``A`` per round when the engine reports
    one (exact, or reconstructed from rounded per-position rates: see ``histogram_source``).
    ``engine``: the engine's own printed figures, as printed (text).
    """

    label: str
    rounds: int
    accepted: int
    drafted: int | None = None
    cap: int | None = None
    counts: AcceptanceCounts | None = None
    histogram_source: str = "none"
    engine: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    draft_cap: int | None = None  # the configured maximum when drafts vary (cap None)

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds

    @property
    def mean_acceptance_length(self) -> float:
        """``1 + accepted / rounds``: the engines' convention (bonus token included)."""
        return 1.0 + self.accepted / self.rounds

    @property
    def drafted_per_round(self) -> float | None:
        return None if self.drafted is None else self.drafted / self.rounds

    @property
    def short_slots(self) -> int:
        """Draft slots not drafted (``cap * rounds - drafted``; 0 if unknown)."""
        if self.drafted is None or self.cap is None:
            return 0
        return max(self.cap * self.rounds - self.drafted, 0)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "rounds": self.rounds,
            "accepted": self.accepted,
            "drafted": self.drafted,
            "cap": self.cap,
            "drafted_per_round": self.drafted_per_round,
            "mean_accepted": self.mean_accepted,
            "mean_acceptance_length": self.mean_acceptance_length,
            "engine": dict(self.engine),
            "histogram": (None if self.counts is None or self.cap is None
                          else [int(x) for x in self.counts.histogram(self.cap)]),
            "histogram_source": self.histogram_source,
            "notes": list(self.notes),
            "draft_cap": self.draft_cap,
        }


def pool_snapshots(snaps, label: str = "pooled") -> Snapshot:
    snaps = list(snaps)
    if not snaps:
        raise PolyspecInputError("rounds", "no snapshot with rounds to pool")
    if len(snaps) == 1:
        return replace(snaps[0], label=label if label != "pooled" else snaps[0].label)
    caps = {s.cap for s in snaps}
    drafted = None if any(s.drafted is None for s in snaps) else sum(s.drafted for s in snaps)
    counts = None
    if all(s.counts is not None for s in snaps):
        # one merge of every cell (pairwise merges are quadratic in the snapshots: a long
        # log has hundreds of thousands)
        first = snaps[0].counts
        notes = tuple(dict.fromkeys(n for s in snaps for n in s.counts.notes))
        counts = AcceptanceCounts(np.concatenate([s.counts.accepted for s in snaps]),
                                  np.concatenate([s.counts.caps for s in snaps]),
                                  np.concatenate([s.counts.counts for s in snaps]),
                                  first.source or next((s.counts.source for s in snaps
                                                        if s.counts.source), ""), notes)
    srcs = {s.histogram_source for s in snaps}
    return Snapshot(
        label=label,
        rounds=sum(s.rounds for s in snaps),
        accepted=sum(s.accepted for s in snaps),
        drafted=drafted,
        cap=caps.pop() if len(caps) == 1 else None,
        counts=counts,
        histogram_source=srcs.pop() if len(srcs) == 1 else "mixed",
        notes=tuple(dict.fromkeys(n for s in snaps for n in s.notes)),
        draft_cap=_common({s.draft_cap for s in snaps}),
    )


def _common(values: set):
    """The one value of ``values``, ``None`` if there are several."""
    return next(iter(values)) if len(values) == 1 else None


@dataclass(frozen=True)
class EngineOutput:
    """A parsed engine output: snapshots (per interval / request / run, already differenced
    when the engine's counters are cumulative), warnings, and the engine's printed figures
    recomputed (``checks``: one entry per printed figure, ``agree`` at its precision)."""

    format: str
    snapshots: tuple[Snapshot, ...]
    counters: str  # "per-interval", "cumulative", "per-request", "per-run", "single"
    source: str = ""
    warnings: tuple[str, ...] = ()
    checks: tuple[dict, ...] = ()
    concurrency: float | None = None  # largest number of concurrent requests seen
    timing: dict = field(default_factory=dict)
    skipped: tuple[str, ...] = ()

    @property
    def pooled(self) -> Snapshot:
        """All snapshots pooled (computed once: a long log has many)."""
        cached = self.__dict__.get("_pooled")
        if cached is None:
            cached = pool_snapshots(self.snapshots)
            object.__setattr__(self, "_pooled", cached)
        return cached

    def select(self, index: int) -> EngineOutput:
        """Only snapshot ``index`` (1-based)."""
        i = as_int(index, "--snapshot", low=1, high=len(self.snapshots))
        return replace(self, snapshots=(self.snapshots[i - 1],))


@dataclass(frozen=True)
class SweepTable:
    """Calibration data: per method, ``{K: (mean acceptance length, time per output token)}``
    with the autoregressive ("vanilla") time per token per K, the batch size, and the
    resolution (last printed digit) of each column."""

    methods: dict
    vanilla: dict
    batch_size: int | None
    time_unit: str
    al_resolution: float
    tpot_resolution: float
    engine_best: dict
    source: str = ""


# ------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------
def read_engine_text(path) -> tuple[str, str]:
    """``(body, source)``: the file's text without the ``#`` source header above a ``---``
    line (the shared samples' convention); ``source`` is that header. Only regular files;
    the read is bounded by the bytes actually read (a device or a FIFO reports size 0), a
    UTF-8 byte-order mark is dropped, and every failure is a one-line error naming the file."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PolyspecInputError("file", f"symbolic link loop: {p}") from None
        if e.errno == errno.ENOENT:
            raise PolyspecInputError("file", f"not found: {p}") from None
        raise PolyspecInputError("file", f"cannot read {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PolyspecInputError("file", f"is a directory, expected an engine output: {p}")
    if not stat.S_ISREG(st.st_mode):
        raise PolyspecInputError("file", f"not a regular file (a device, FIFO or socket): {p}")
    if st.st_size > MAX_ENGINE_BYTES:
        raise PolyspecInputError("file", f"{p} is {st.st_size:,} bytes; an engine output may "
                                 f"have at most {MAX_ENGINE_BYTES:,} (cut it to the run you mean)")
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_ENGINE_BYTES + 1)
    except OSError as e:
        raise PolyspecInputError("file", f"cannot read {p}: {e.strerror or e}") from None
    if len(raw) > MAX_ENGINE_BYTES:
        raise PolyspecInputError("file", f"{p} has more than {MAX_ENGINE_BYTES:,} bytes; cut "
                                 "it to the run you mean")
    from validation.files import note_read

    note_read(p)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise PolyspecInputError("file", f"is not UTF-8 text: {p} (line {line})") from None
    return split_header(text)


def split_header(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "---":
            head = lines[:i]
            if head and all(h.startswith("#") or not h.strip() for h in head):
                src = " ".join(h.lstrip("#").strip() for h in head if h.strip())
                return "\n".join(lines[i + 1:]), src
            break
    return text, ""


MAX_ENGINE_BYTES = 2**30  # 1 GiB


def json_or_none(text: str):
    s = text.strip()
    if not s or s[0] not in "[{":
        return None
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    except (RecursionError, ValueError):  # nested too deeply; an integer of > 4300 digits
        raise PolyspecInputError("file", "JSON nested too deeply or holding an integer too "
                                 "long to read: not an engine output") from None
    rows = []
    for line in s.splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            return None
        except (RecursionError, ValueError):
            raise PolyspecInputError("file", "a JSON line nested too deeply or holding an "
                                     "integer too long to read: not an engine output") from None
    return rows or None


def strip_meta(obj):
    """JSON without the samples' ``_source`` / ``_engine`` annotation keys."""
    if isinstance(obj, dict):
        return {k: strip_meta(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, list):
        return [strip_meta(v) for v in obj]
    return obj


def walk_mappings(obj):
    """Every mapping inside ``obj`` (depth first)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk_mappings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_mappings(v)


# ------------------------------------------------------------------------------------------
# printed figures
# ------------------------------------------------------------------------------------------
def decimals(s: str) -> int:
    s = s.strip().rstrip("%")
    if "e" in s.lower():
        return 12
    return len(s.split(".")[1]) if "." in s else 0


def half_unit(s: str) -> float:
    return 0.5 * 10.0 ** (-decimals(s))


def _agree(ours: float, printed: str, scale: float = 1.0) -> bool:
    """``ours`` rounds to the printed text (``scale`` = 100 for percentages)."""
    val = float(printed.strip().rstrip("%"))
    return abs(ours * scale - val) <= half_unit(printed) * (1 + 1e-9) + 1e-12


def check(label: str, figure: str, ours: float, printed: str, scale: float = 1.0) -> dict:
    return {"snapshot": label, "figure": figure, "engine": printed.strip(),
            "ours": ours * scale, "agree": _agree(ours, printed, scale)}


def printed(x, fieldname: str) -> str:
    """An engine's printed figure (a JSON number) as text at full precision; anything else
    (null, "n/a", inf) is a one-line error naming the field."""
    v = x
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            v = None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise PolyspecInputError(fieldname, f"must be a finite number, got {x!r}")
    return repr(float(v))


def count(x, fieldname: str) -> int:
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            raise PolyspecInputError(fieldname, f"must be a count, got {x!r}") from None
    if isinstance(x, float) and x.is_integer() and abs(x) <= MAX_COUNT:
        x = int(x)
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x > MAX_COUNT:
        raise PolyspecInputError(fieldname, f"{x:.3g} is not a plausible count (at most "
                                 f"{MAX_COUNT:.0e}: no engine run drafts that many tokens)")
    return as_int(x, fieldname, low=0)


MAX_COUNT = 10**15  # rounds or tokens of one engine output


def survival_from_rates(rates, rounds: int, accepted: int | None = None,
                        half_units=None, field: str = "per-position rates") -> np.ndarray:
    """Integer counts ``c_k = #{A >= k}``, k = 1..len(rates), from per-position rates
    ``c_k / rounds`` printed with rounding: each ``c_k`` inside its rounding interval
    ``[(r_k - h_k) N, (r_k + h_k) N]``, non-increasing, summing to ``accepted`` (when given),
    and closest to ``r_k N`` in squared distance among the one-step moves (greedy). When
    ``h_k N < 1/2`` the counts are exact. One-line error when no counts fit."""
    r = as_real_array(rates, field, low=0.0, high=1.0)
    n = as_int(rounds, "rounds", low=1)
    h = (np.zeros(r.size) if half_units is None
         else as_real_array(half_units, "half_units", low=0.0))
    if h.shape != r.shape:
        raise PolyspecInputError("half_units", f"must have one value per rate ({r.size})")
    return _survival(r, h, n, accepted, field)


def _survival(r, h, n: int, accepted, field) -> np.ndarray:
    """:func:`survival_from_rates` on checked arrays (``0 <= r <= 1``, ``h >= 0``)."""
    t = r * n
    lo = np.maximum(np.ceil((r - h) * n - 1e-9), 0).astype(np.int64)
    hi = np.minimum(np.floor((r + h) * n + 1e-9), n).astype(np.int64)
    if (lo > hi).any():
        k = int(np.flatnonzero(lo > hi)[0])
        raise PolyspecInputError(field, f"position {k}: rate {r[k]} is not a count over "
                                 f"{n} rounds")
    c = np.clip(np.rint(t), lo, hi).astype(np.int64)
    if accepted is not None:
        target = as_int(accepted, "accepted", low=0)
        guard = 0
        while int(c.sum()) != target:
            step = 1 if target > c.sum() else -1
            best, best_cost = -1, math.inf
            for k in range(c.size):
                v = c[k] + step
                if not lo[k] <= v <= hi[k]:
                    continue
                if (k > 0 and v > c[k - 1]) or (k + 1 < c.size and v < c[k + 1]):
                    continue
                cost = (v - t[k]) ** 2 - (c[k] - t[k]) ** 2
                if cost < best_cost:
                    best, best_cost = k, cost
            if best < 0 or guard > 100_000:
                raise PolyspecInputError(
                    field, f"no per-position counts within the printed rounding add up to "
                    f"{target} accepted tokens over {n} rounds (rates {list(r)})")
            c[best] += step
            guard += 1
    if (np.diff(c) > 0).any():
        raise PolyspecInputError(field, f"per-position rates {list(r)} increase with the "
                                 "position (a token is accepted only after the ones before it)")
    return c


def survival_from_printed(texts, rounds: int, accepted: int | None, field: str) -> list[int]:
    """:func:`survival_from_rates` of per-position rates as printed (strings), each known to
    within half a unit of its last printed digit."""
    r = np.array([float(x) for x in texts], dtype=np.float64)
    if r.size and np.isfinite(r).all() and (r >= 0).all() and (r <= 1).all() and \
            isinstance(rounds, int) and rounds >= 1:  # the common case of a long log: fast
        return _survival(r, np.array([half_unit(x) for x in texts]), rounds, accepted, field)
    return survival_from_rates(r.tolist(), rounds, accepted, [half_unit(x) for x in texts],
                               field)


def histogram_counts(hist, cap: int, label: str, rounds: int, field: str,
                     rounds_name: str) -> tuple[AcceptanceCounts, int]:
    """The counts of an acceptance histogram (cells 0..cap accepted), which must hold the
    ``rounds`` stated as ``rounds_name``; returns ``(counts, accepted drafts they imply)``."""
    if isinstance(hist, list):
        hist = [count(c, f"{field}[{i}]") for i, c in enumerate(hist)]
    counts = AcceptanceCounts.from_histogram(hist, cap, label)
    if counts.n_rounds != rounds:
        raise PolyspecInputError(field, f"counts {counts.n_rounds} rounds but {rounds_name} is "
                                 f"{rounds}")
    return counts, int(np.dot(counts.accepted, counts.counts))


def counts_from_survival(n: int, surv, cap: int, label: str, notes=()) -> AcceptanceCounts:
    c = np.asarray(surv)
    if (isinstance(surv, np.ndarray) and c.dtype.kind == "i" and c.ndim == 1 and c.size
            and isinstance(n, int) and isinstance(cap, int) and cap >= c.size
            and 0 <= c[-1] and c[0] <= n and not (np.diff(c) > 0).any()):
        # counts already checked (:func:`_survival`): the histogram directly (a long log)
        full = np.concatenate([[n], c, np.zeros(cap - c.size + 1, dtype=np.int64)])
        return AcceptanceCounts.from_checked_histogram(full[:-1] - full[1:], cap, label,
                                                       notes)
    return AcceptanceCounts.from_survival_counts(n, surv, cap, label, notes)


def short_draft_note(s: Snapshot) -> str | None:
    if not s.short_slots:
        return None
    return (f"{s.label}: {s.drafted} drafted tokens over {s.rounds} rounds of gamma = {s.cap} "
            f"({s.short_slots} draft slots not drafted: some drafts were shorter than "
            f"{s.cap}); rounds are fitted as capped at {s.cap}, so the censoring is approximate")


def line_field(pat: str, line: str, fieldname: str, required=True):
    """Group 1 of ``pat`` in ``line``; a number that continues past the match (``1e308``,
    ``3.5`` where a count is expected) is an error, not its leading digits."""
    m = re.search(pat, line)
    if m is None:
        if required:
            raise PolyspecInputError(fieldname, f"missing in line: {line.strip()[:120]!r}")
        return None
    rest = re.match(r"[.eE][-+]?\d[\w.+-]*|\d", line[m.end(1):])
    if rest:
        raise PolyspecInputError(fieldname, f"{m.group(1) + rest.group(0)!r} is not a "
                                 f"{'count' if m.group(1).isdigit() else 'number'} (line: "
                                 f"{line.strip()[:80]!r})")
    return m.group(1)


def check_counts(s: Snapshot) -> None:
    """Counts no engine can produce are refused, naming the snapshot: no rounds, more accepted
    drafts than drafted or than ``rounds x gamma``."""
    where = f"{s.label}"
    if not s.rounds > 0:
        raise PolyspecInputError("rounds", f"{where}: {s.rounds} verification rounds")
    if s.accepted < 0 or (s.drafted is not None and s.drafted < 0):
        raise PolyspecInputError("accepted", f"{where}: negative counts")
    if s.drafted is not None and s.accepted > s.drafted:
        raise PolyspecInputError("accepted", f"{where}: {s.accepted} accepted drafts exceed "
                                 f"the {s.drafted} drafted: impossible counts (a corrupt or "
                                 "mixed log?)")
    cap = s.cap if s.cap is not None else s.draft_cap
    if cap is not None and s.accepted > s.rounds * cap:
        raise PolyspecInputError("accepted", f"{where}: {s.accepted} accepted drafts exceed "
                                 f"{s.rounds} rounds x {cap} drafts")
    if cap is not None and s.drafted is not None and s.drafted > s.rounds * cap:
        raise PolyspecInputError("drafted", f"{where}: {s.drafted} drafted tokens exceed "
                                 f"{s.rounds} rounds x {cap} drafts")


def rounds_from_mal(accepted: int, mal_text: str) -> tuple[float, float]:
    """Range of rounds N with 1 + accepted/N rounding to the printed mean length."""
    v, h = float(mal_text), half_unit(mal_text)
    lo = accepted / (v + h - 1.0) if v + h > 1.0 else 0.0
    hi = accepted / (v - h - 1.0) if v - h > 1.0 else math.inf
    return lo, hi


def integers_in(lo: float, hi: float) -> list[int]:
    return list(range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1))
