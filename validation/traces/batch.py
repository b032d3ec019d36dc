"""A batched capture as data (:class:`BatchCapture`): one cascade configuration decoded in
lockstep batches of ``b`` sequences (records of :mod:`validation.traces.schema`, batched part), with
its per-sequence rounds, batched rounds, every forward, the decode totals and the batched
autoregressive baseline at the same ``b``. Only finished decodes (with a ``bsummary``) count.

Measured quantities (one decode is the unit of the standard errors):

* per-sequence time per token ``tau_b = b Σ wall / Σ tokens``, batch throughput
  ``Σ tokens / Σ wall``;
* autoregressive step time ``Σ AR wall / Σ steps`` (one token per sequence per step), its
  throughput ``b / step``;
* speedup = AR step time / ``tau_b`` = the ratio of the two throughputs at the same ``b``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.traces.dataset import CaptureConfig, Rounds, finished
from validation.traces.schema import TraceError, is_batch_header

__all__ = ["BatchCapture", "BatchRounds", "Forwards", "read_batch_trace", "read_batch_traces"]


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class BatchRounds:
    """The batched rounds of one verifying level (file order)."""

    level: int
    decode: np.ndarray
    round: np.ndarray
    K: np.ndarray
    max_G: np.ndarray
    m: np.ndarray
    waiting: np.ndarray
    verify_s: np.ndarray
    draft_s: np.ndarray
    round_s: np.ndarray

    @property
    def n(self) -> int:
        return len(self.K)


@dataclass(frozen=True)
class Forwards:
    """Every recorded forward (columns): ``run`` 0 = cascade, 1 = autoregressive."""

    decode: np.ndarray
    run: np.ndarray
    model: np.ndarray
    m: np.ndarray
    m0: np.ndarray
    ctx: np.ndarray
    wall_s: np.ndarray

    def select(self, model: int, run: str | None = None) -> Forwards:
        sel = self.model == model
        if run is not None:
            sel &= self.run == (0 if run == "cascade" else 1)
        return Forwards(*(getattr(self, k)[sel] for k in self.__dataclass_fields__))

    @property
    def n(self) -> int:
        return len(self.m)


@dataclass(frozen=True)
class BatchCapture(CaptureConfig):
    """One batched capture: configuration (header), per-level rounds (``rounds[i]`` = level
    ``i+1``, one row per sequence per verification that was not lockstep padding — the
    rounds a single-stream decode runs, the acceptance data; ``waited[i]`` alongside),
    batched rounds, forwards, decode summaries, autoregressive baselines and cost samples."""

    header: dict
    rounds: tuple[Rounds, ...]
    waited: tuple[np.ndarray, ...]
    batch_rounds: tuple[BatchRounds, ...]
    forwards: Forwards
    summaries: tuple[dict, ...]
    ar: tuple[dict, ...]
    costs: tuple[dict, ...]
    path: str = ""
    complete: bool = True
    notes: tuple[str, ...] = field(default=())
    name: str = ""

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", str(self.header["cascade"].get("name")
                                                 or Path(self.path).stem or "capture"))

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def from_records(cls, header: dict, records, *, path: str = "", complete: bool = True,
                     notes=()) -> BatchCapture:
        if not is_batch_header(header):
            where = path or header["cascade"].get("name", "capture")
            raise TraceError(f"{where}: not a batched trace (no header 'batch')")
        where, _, notes, summaries, done = finished(header, records, path=path,
                                                    complete=complete, notes=notes,
                                                    unit="decode")
        n = len(header["cascade"]["models"])
        ar = sorted((r for r in records if r["type"] == "bar" and int(r["decode"]) in done),
                    key=lambda r: r["decode"])
        if {int(r["decode"]) for r in ar} != done:
            raise TraceError(f"{where}: every finished decode needs its batched "
                             "autoregressive baseline ('bar' record)")
        rounds, waited, brounds = [], [], []
        for lv in range(1, n):
            rows = [r for r in records if r["type"] == "bround" and r["level"] == lv
                    and int(r["decode"]) in done and not r["discarded"]]
            if not rows:
                raise TraceError(f"{where}: no bround records for level {lv}")
            rounds.append(Rounds.from_records(lv, rows, timed=False))
            waited.append(np.asarray([r["waited"] for r in rows], dtype=np.int64))
            br = [r for r in records if r["type"] == "bbatch" and r["level"] == lv
                  and int(r["decode"]) in done]
            brounds.append(BatchRounds(
                level=lv, **{k: np.asarray([r[k] for r in br],
                                           dtype=np.float64 if k.endswith("_s") else np.int64)
                             for k in ("decode", "round", "K", "max_G", "m", "waiting",
                                       "verify_s", "draft_s", "round_s")}))
        fw = [r for r in records if r["type"] == "bforwards" and int(r["decode"]) in done]
        cols = {k: [] for k in ("decode", "run", "model", "m", "m0", "ctx", "wall_s")}
        for r in fw:
            k = len(r["wall_s"])
            cols["decode"].append(np.full(k, int(r["decode"])))
            cols["run"].append(np.full(k, 0 if r["run"] == "cascade" else 1))
            for key in ("model", "m", "m0", "ctx", "wall_s"):
                cols[key].append(np.asarray(r[key]))
        forwards = Forwards(**{k: (np.concatenate(v).astype(
            np.float64 if k == "wall_s" else np.int64) if v else np.zeros(
            0, np.float64 if k == "wall_s" else np.int64)) for k, v in cols.items()})
        costs = tuple(r for r in records if r["type"] == "bcost")
        return cls(header=header, rounds=tuple(rounds), waited=tuple(waited),
                   batch_rounds=tuple(brounds), forwards=forwards,
                   summaries=tuple(summaries), ar=tuple(ar), costs=costs, path=str(path),
                   complete=complete, notes=tuple(notes))

    @property
    def batch(self) -> int:
        return int(self.header["batch"]["size"])

    def pair_kind(self, i: int) -> str:
        """``"chain"``: the batched decoder drafts chains only."""
        return "chain"

    @property
    def config_key(self) -> tuple:
        """What makes two captures the same cascade at different batch sizes."""
        return (self.models, self.thresholds, self.policy, self.temperature, self.top_k)

    @property
    def label(self) -> str:
        """``target<-mid<-ngram th=.. T=..`` (the cascade without its batch size)."""
        t = f"{self.temperature:g}"
        return (f"{' <- '.join(self.models)} θ={','.join(map(str, self.thresholds))} T={t}"
                + (f" k={self.top_k}" if self.top_k else ""))

    @property
    def prompt_len(self) -> int | None:
        v = self.header.get("prompts", {}).get("prompt_len")
        return int(v) if _is_int(v) else None

    @property
    def max_new_tokens(self) -> int | None:
        v = self.header.get("prompts", {}).get("max_new_tokens")
        return int(v) if _is_int(v) else None

    @property
    def nominal_context(self) -> float | None:
        """Prompt length + half the tokens asked: the mean context of a decode, from the
        settings alone (no measurement)."""
        if self.prompt_len is None or self.max_new_tokens is None:
            return None
        return self.prompt_len + self.max_new_tokens / 2.0

    # --- decode totals -----------------------------------------------------------------------
    @property
    def n_decodes(self) -> int:
        return len(self.summaries)

    def _col(self, key, src=None) -> np.ndarray:
        return np.asarray([float(np.sum(s[key])) for s in (src or self.summaries)])

    @property
    def tokens(self) -> int:
        return int(self._col("n_generated").sum())

    @property
    def wall_s(self) -> float:
        return float(self._col("wall_s").sum())

    @property
    def verifications(self) -> int:
        """Batched verification forwards (all verifying levels)."""
        return int(sum(br.n for br in self.batch_rounds))

    @property
    def time_per_token(self) -> float:
        """Per-sequence decode time per token ``b Σ wall / Σ tokens`` (seconds)."""
        return self.batch * self.wall_s / self.tokens

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall_s

    @property
    def ar_steps(self) -> int:
        return int(sum(r["n_steps"] for r in self.ar))

    @property
    def ar_wall_s(self) -> float:
        return float(sum(r["wall_s"] for r in self.ar))

    @property
    def ar_step_s(self) -> float:
        """Batched autoregressive time per step (= per token of one sequence)."""
        return self.ar_wall_s / self.ar_steps

    @property
    def ar_tokens_per_second(self) -> float:
        return self.batch / self.ar_step_s

    @property
    def ar_overhead_per_step(self) -> float:
        """Autoregressive time per step outside its forward."""
        return (self.ar_wall_s - sum(r["forward_s"] for r in self.ar)) / self.ar_steps

    @property
    def measured_speedup(self) -> float:
        """AR step time / per-sequence cascade time per token (= throughput ratio)."""
        return self.ar_step_s / self.time_per_token

    def speedup_se(self) -> float:
        """Delta-method standard error of :attr:`measured_speedup` over decodes (a decode's
        AR and cascade runs are paired; NaN with fewer than two decodes)."""
        k = self.n_decodes
        if k < 2:
            return math.nan
        a = np.asarray([r["wall_s"] for r in self.ar], dtype=np.float64)
        s = np.asarray([r["n_steps"] for r in self.ar], dtype=np.float64)
        w = self._col("wall_s")
        t = self._col("n_generated")
        u = a / a.mean() + t / t.mean() - s / s.mean() - w / w.mean()
        return float(self.measured_speedup * math.sqrt(np.var(u, ddof=1) / k))

    @property
    def greedy_lossless(self) -> bool | None:
        """Greedy: every sequence's tokens equal the target's AR tokens (None if sampling)."""
        m = [s.get("matches_target_ar") for s in self.summaries]
        if any(x is None for x in m):
            return None
        return all(all(x) for x in m)

    @property
    def stops(self) -> dict:
        out = {}
        for s in self.summaries:
            out[s.get("stop", "tokens")] = out.get(s.get("stop", "tokens"), 0) + 1
        return out

    # --- structure (B2/B3 quantities) ----------------------------------------------------------
    def structure(self) -> list[dict]:
        """Per verifying level (``level`` 1 = the target): batched rounds, E[K] (= E[max_j
        N]), E[max G], the idle share of the level below's slot-rounds, E[G], E[L]."""
        out = []
        b = self.batch
        for i, br in enumerate(self.batch_rounds):
            r = self.rounds[i]
            out.append({"level": i + 1, "verifier": self.models[i],
                        "drafter": self.models[i + 1], "rounds": br.n,
                        "mean_K": float(br.K.mean()), "mean_max_G": float(br.max_G.mean()),
                        "idle_share": float(br.waiting.sum() / (b * br.K.sum())),
                        "mean_G": float(r.G.mean()), "mean_L": float(r.L.mean()),
                        "mean_padded_m": float(br.m.mean())})
        return out

    def extra_positions(self) -> list[float]:
        """Per model: mean padded positions per cascade forward beyond what B0 charges
        (catch-up tokens of some slot: ``m - m0``)."""
        out = []
        for i in range(self.n):
            f = self.forwards.select(i, "cascade")
            out.append(float(np.mean(f.m - f.m0)) if f.n else 0.0)
        return out


def read_batch_trace(path, *, allow_truncated: bool = False) -> BatchCapture:
    """The :class:`BatchCapture` of one batched trace file."""
    from validation.traces.records import read_records

    tr = read_records(path, allow_truncated=allow_truncated)
    if not is_batch_header(tr.header):
        raise TraceError(f"{tr.path}: not a batched trace (no header 'batch')")
    return BatchCapture.from_records(tr.header, tr.records, path=tr.path,
                                     complete=tr.complete, notes=tr.skipped_notes())


def read_batch_traces(directory, *, allow_truncated: bool = False) -> list[BatchCapture]:
    """Every batched ``*.jsonl`` trace of a directory (single-stream ones are skipped), sorted
    by file name; names made unique."""
    from validation.traces.records import is_batched_file

    d = Path(directory)
    if not d.is_dir():
        raise PolyspecInputError("traces", f"{d}: no such directory")
    out, seen = [], set()
    for f in sorted(d.glob("*.jsonl")):
        if not is_batched_file(f):
            continue
        cap = read_batch_trace(f, allow_truncated=allow_truncated)
        if cap.name in seen:
            cap = cap.renamed(f.stem)
        seen.add(cap.name)
        out.append(cap)
    return out
