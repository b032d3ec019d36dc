"""Real serving-engine output -> acceptance data (:class:`AcceptanceCounts`) and calibration runs.

Every parser reads what an engine actually prints (log lines, metric dumps, per-request JSON,
benchmark tables; the real samples are in ``../shared/engine-samples``) and returns an
:class:`EngineOutput`: one :class:`Snapshot` per log interval / request / run, each with its
verification ``rounds``, ``accepted`` draft tokens (the accepted *prefix*, bonus token
excluded), the draft length ``cap`` when every round drafted it, and the exact (or, from
rounded rates, reconstructed) acceptance histogram where the engine reports one. The
engines' "mean acceptance length" convention is ``1 + accepted / rounds`` (bonus token
included); every figure the engine printed is recomputed and compared at its printed
precision (:attr:`EngineOutput.checks`).

Formats (detected from the content, :func:`detect_format`; ``--format`` overrides):

=========================  =============================================================
``vllm-v0-log``            vLLM V0 ``Speculative metrics:`` lines; cumulative counters;
                           "accepted tokens" counts accepted drafts at ANY position, so the
                           prefix is ``emitted - rounds``; rounds = draft tokens / k
``vllm-v1-log``            vLLM V1 ``SpecDecoding metrics:`` lines (per-interval counters,
                           both wordings); rounds = Drafted / gamma (gamma = number of
                           per-position rates, or ``--gamma``)
``vllm-offline-example``   the V1 ``examples/offline_inference/spec_decode.py`` printout
                           (per-position rates printed with 2 decimals)
``prometheus-text``        vLLM counters in the Prometheus text exposition format
``prometheus-ui``          the same counters pasted from the Prometheus UI (``series | value``)
``vllm-json``              ``SpecDecodingStats`` fields or ``LLM.get_metrics()`` records
``vllm-per-request``       per-request ``speculative_decoding`` metrics with
                           ``acceptance_histogram``
``sglang-log``             SGLang ``Decode batch. ... accept len: x, accept rate: y`` lines
``sglang-meta``            per-request ``meta_info``, all three key schemas
``llamacpp-speculative``   ``llama-speculative`` statistics (n_draft, n_predict, ...)
``llamacpp-server``        llama-server draft statistics (``#gen drafts``, ...)
``trtllm-bench``           ``trtllm-bench`` decoding statistics (per-request averages)
``vllm-sweep``             a table of mean acceptance length and time per output token per
                           number of speculative tokens K: calibration data
                           (:func:`load_sweep`, :func:`sweep_runs`), no round counts
=========================  =============================================================

Counters over time: per-interval snapshots are summed; cumulative ones are differenced (a
decrease is a restart: a new segment). Where the data cannot mean what the law fit assumes,
the output says so in ``warnings`` and, when the fit would be meaningless (draft lengths
varying by round), no law is fitted. Missing data raise :class:`PolyspecInputError` naming
what is missing, on one line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import PolyspecInputError, as_int, as_real_array

__all__ = [
    "FORMATS",
    "Snapshot",
    "EngineOutput",
    "SweepTable",
    "read_engine_text",
    "detect_format",
    "parse_engine_output",
    "load_engine_output",
    "survival_from_rates",
    "acceptance_report",
    "variable_length_model",
    "load_sweep",
    "sweep_runs",
    "SHORT_DRAFT_TOLERANCE",
]

FORMATS = {
    "vllm-v0-log": "vLLM V0 'Speculative metrics:' log lines (cumulative counters)",
    "vllm-v1-log": "vLLM V1 'SpecDecoding metrics:' log lines (per-interval counters)",
    "vllm-offline-example": "vLLM V1 offline spec_decode.py printout (LLM.get_metrics())",
    "prometheus-text": "vLLM spec-decode counters, Prometheus text exposition",
    "prometheus-ui": "vLLM spec-decode counters pasted from the Prometheus UI (series | value)",
    "vllm-json": "vLLM SpecDecodingStats / LLM.get_metrics() as JSON",
    "vllm-per-request": "vLLM per-request speculative_decoding metrics (acceptance_histogram)",
    "sglang-log": "SGLang 'Decode batch.' log lines with accept len / accept rate",
    "sglang-meta": "SGLang per-request meta_info (<=0.5.10, 0.5.11 and >=0.5.12 key names)",
    "llamacpp-speculative": "llama.cpp llama-speculative statistics",
    "llamacpp-server": "llama-server draft statistics",
    "trtllm-bench": "TensorRT-LLM trtllm-bench decoding statistics",
    "vllm-sweep": "table of mean acceptance length and TPOT per K (calibration data)",
}

# Drafts shorter than the configured length: up to this fraction of the draft slots missing,
# the rounds are still fitted as capped at gamma (with a warning); beyond it, no law is fitted.
SHORT_DRAFT_TOLERANCE = 0.05

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


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


def _pool(snaps, label: str = "pooled") -> Snapshot:
    snaps = list(snaps)
    if not snaps:
        raise PolyspecInputError("rounds", "no snapshot with rounds to pool")
    if len(snaps) == 1:
        return replace(snaps[0], label=label if label != "pooled" else snaps[0].label)
    caps = {s.cap for s in snaps}
    drafted = None if any(s.drafted is None for s in snaps) else sum(s.drafted for s in snaps)
    counts = None
    if all(s.counts is not None for s in snaps):
        counts = snaps[0].counts
        for s in snaps[1:]:
            counts = counts.merge(s.counts)
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
        return _pool(self.snapshots)

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
# reading and detection
# ------------------------------------------------------------------------------------------
def read_engine_text(path) -> tuple[str, str]:
    """``(body, source)``: the file's text without the ``#`` source header above a ``---``
    line (the shared samples' convention); ``source`` is that header."""
    p = Path(path)
    if not p.exists():
        raise PolyspecInputError("file", f"not found: {p}")
    if p.is_dir():
        raise PolyspecInputError("file", f"is a directory, expected an engine output: {p}")
    size = p.stat().st_size
    if size > MAX_ENGINE_BYTES:
        raise PolyspecInputError("file", f"{p} is {size:,} bytes; an engine output may have at "
                                 f"most {MAX_ENGINE_BYTES:,} (cut it to the run you mean)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PolyspecInputError("file", f"is not UTF-8 text: {p}") from None
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


def _json_or_none(text: str):
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


def _strip_meta(obj):
    """JSON without the samples' ``_source`` / ``_engine`` annotation keys."""
    if isinstance(obj, dict):
        return {k: _strip_meta(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, list):
        return [_strip_meta(v) for v in obj]
    return obj


def _walk(obj):
    """Every mapping inside ``obj`` (depth first)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


_SGLANG_KEYS = ("spec_verify_ct",)
_VLLM_JSON_KEYS = ("num_drafts", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def detect_format(text: str) -> str:
    """The format of an engine output (see the module docstring); a one-line error when
    nothing is recognised."""
    obj = _json_or_none(text)
    if obj is not None:
        dicts = list(_walk(_strip_meta(obj)))
        if any("speculative_decoding" in d for d in dicts):
            return "vllm-per-request"
        if any(any(k in d for k in _SGLANG_KEYS) for d in dicts):
            return "sglang-meta"
        if any(any(str(k).replace("vllm:spec_decode_", "").removesuffix("_total") in
                   _VLLM_JSON_KEYS for k in d) for d in dicts) or any(
                str(d.get("name", "")).startswith("vllm:spec_decode") for d in dicts):
            return "vllm-json"
        raise PolyspecInputError(
            "format", "JSON without speculative-decoding fields (looked for "
            "speculative_decoding, spec_verify_ct, num_drafts); pass --format")
    if "Speculative metrics:" in text:
        return "vllm-v0-log"
    if "SpecDecoding metrics:" in text:
        return "vllm-v1-log"
    if "Decode batch." in text and "accept len" in text:
        return "sglang-log"
    if re.search(r"^\s*n_predict\s*=", text, re.M) and re.search(
            r"^\s*n_(drafted|accept|draft)\s*=", text, re.M):
        return "llamacpp-speculative"
    if "#gen drafts" in text or "draft acceptance =" in text:
        return "llamacpp-server"
    if "DECODING STATISTICS" in text or re.search(r"^\[AL\]", text, re.M):
        return "trtllm-bench"
    if "vllm:spec_decode" in text:
        rows = [ln for ln in text.splitlines() if "vllm:spec_decode" in ln]
        if any("|" in ln.split("}")[-1] for ln in rows):
            return "prometheus-ui"
        return "prometheus-text"
    if re.search(r"^\s*num_drafts:\s*\d", text, re.M):
        return "vllm-offline-example"
    if re.search(r"TPOT", text) and re.search(r"^\s*K\s*\|", text, re.M):
        return "vllm-sweep"
    raise PolyspecInputError(
        "format", "not a recognised engine output (no vLLM, SGLang, llama.cpp or TensorRT-LLM "
        f"speculative-decoding statistics found); pass --format, one of: {', '.join(FORMATS)}")


def load_engine_output(path, fmt: str | None = None, gamma: int | None = None) -> EngineOutput:
    """Read and parse an engine output file (``fmt`` overrides detection; ``gamma`` gives
    the draft length where the output does not state it)."""
    text, source = read_engine_text(path)
    return parse_engine_output(text, fmt, gamma, source)


def parse_engine_output(text: str, fmt: str | None = None, gamma: int | None = None,
                        source: str = "") -> EngineOutput:
    if not isinstance(text, str) or not text.strip():
        raise PolyspecInputError("file", "is empty")
    if fmt is None:
        fmt = detect_format(text)
    elif fmt not in FORMATS:
        raise PolyspecInputError("--format", f"unknown format {fmt!r}; one of: "
                                 f"{', '.join(FORMATS)}")
    if gamma is not None:
        gamma = as_int(gamma, "--gamma", low=1, high=4096)
    if fmt == "vllm-sweep":
        raise PolyspecInputError(
            "rounds", "this is a sweep table (mean acceptance length and time per token per K,"
            " no round counts): calibration data; use `polyspec calibrate FILE --method M`")
    out = _PARSERS[fmt](text, gamma)
    if not out.snapshots:
        raise PolyspecInputError("rounds", f"no usable {FORMATS[fmt]} snapshot found")
    return replace(out, source=source)


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _decimals(s: str) -> int:
    s = s.strip().rstrip("%")
    if "e" in s.lower():
        return 12
    return len(s.split(".")[1]) if "." in s else 0


def _half_unit(s: str) -> float:
    return 0.5 * 10.0 ** (-_decimals(s))


def _agree(ours: float, printed: str, scale: float = 1.0) -> bool:
    """``ours`` rounds to the printed text (``scale`` = 100 for percentages)."""
    val = float(printed.strip().rstrip("%"))
    return abs(ours * scale - val) <= _half_unit(printed) * (1 + 1e-9) + 1e-12


def _check(label: str, figure: str, ours: float, printed: str, scale: float = 1.0) -> dict:
    return {"snapshot": label, "figure": figure, "engine": printed.strip(),
            "ours": ours * scale, "agree": _agree(ours, printed, scale)}


def _count(x, fieldname: str) -> int:
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            raise PolyspecInputError(fieldname, f"must be a count, got {x!r}") from None
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return as_int(x, fieldname, low=0)


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


def _counts_from_survival(n: int, surv, cap: int, label: str, notes=()) -> AcceptanceCounts:
    return AcceptanceCounts.from_survival_counts(n, surv, cap, label, notes)


def _short_draft_note(s: Snapshot) -> str | None:
    if not s.short_slots:
        return None
    return (f"{s.label}: {s.drafted} drafted tokens over {s.rounds} rounds of gamma = {s.cap} "
            f"({s.short_slots} draft slots not drafted: some drafts were shorter than "
            f"{s.cap}); rounds are fitted as capped at {s.cap}, so the censoring is approximate")


# ------------------------------------------------------------------------------------------
# vLLM V0 log (cumulative counters)
# ------------------------------------------------------------------------------------------
def _field(pat: str, line: str, fieldname: str, required=True):
    m = re.search(pat, line)
    if m is None:
        if required:
            raise PolyspecInputError(fieldname, f"missing in line: {line.strip()[:120]!r}")
        return None
    return m.group(1)


def _cumulative_to_intervals(rows, keys):
    """Per-interval differences of cumulative rows (dicts of ints); a decrease of any counter
    is an engine restart: that row starts a new segment. Returns (intervals, n_restarts)."""
    out, prev, restarts = [], None, 0
    for r in rows:
        if prev is not None and any(r[k] < prev[k] for k in keys):
            restarts += 1
            prev = None
        d = dict(r) if prev is None else {**r, **{k: r[k] - prev[k] for k in keys}}
        out.append(d)
        prev = r
    return out, restarts


def _parse_vllm_v0(text: str, gamma) -> EngineOutput:
    rows, checks, warnings = [], [], []
    lines = [ln for ln in text.splitlines() if "Speculative metrics:" in ln]
    for j, line in enumerate(lines, 1):
        label = f"line {j}"
        k = int(_field(r"Number of speculative tokens:\s*(\d+)", line,
                       "Number of speculative tokens"))
        acc_any = int(_field(r"Number of accepted tokens:\s*(\d+)", line,
                             "Number of accepted tokens"))
        drafted = int(_field(r"Number of draft tokens:\s*(\d+)", line, "Number of draft tokens"))
        emitted = int(_field(r"Number of emitted tokens:\s*(\d+)", line,
                             "Number of emitted tokens"))
        rate = _field(r"Draft acceptance rate:\s*(" + _NUM + ")", line, "rate", required=False)
        eff = _field(r"System efficiency:\s*(" + _NUM + ")", line, "eff", required=False)
        if gamma is not None and gamma != k:
            raise PolyspecInputError("--gamma", f"the log states {k} speculative tokens, "
                                     f"not {gamma}")
        if k < 1:
            raise PolyspecInputError("Number of speculative tokens", "must be >= 1")
        rows.append({"k": k, "acc_any": acc_any, "drafted": drafted, "emitted": emitted,
                     "rate": rate, "eff": eff, "label": label})
    if not rows:
        raise PolyspecInputError("Speculative metrics", "no such log line")
    snaps = []
    intervals, restarts = _cumulative_to_intervals(rows, ("acc_any", "drafted", "emitted"))
    if restarts:
        warnings.append(f"counters decreased {restarts} time(s) (engine restart?): each "
                        "restart starts a new segment")
    for raw, d in zip(rows, intervals, strict=True):
        k = d["k"]
        # cumulative checks against the engine's printed rates
        if raw["drafted"] % k:
            raise PolyspecInputError(
                "Number of draft tokens", f"{raw['drafted']} is not a multiple of the "
                f"{k} speculative tokens per round ({raw['label']})")
        n_cum = raw["drafted"] // k
        if raw["rate"] is not None and raw["drafted"]:
            checks.append(_check(raw["label"], "draft acceptance rate (accepted at any "
                                 "position / drafted)", raw["acc_any"] / raw["drafted"],
                                 raw["rate"]))
        if raw["eff"] is not None and n_cum:
            checks.append(_check(raw["label"], "system efficiency (emitted / (rounds (k+1)))",
                                 raw["emitted"] / (n_cum * (k + 1)), raw["eff"]))
        if d["drafted"] == 0:
            continue
        n = d["drafted"] // k
        prefix = d["emitted"] - n
        if not 0 <= prefix <= n * k:
            raise PolyspecInputError(
                "Number of emitted tokens", f"{d['emitted']} emitted over {n} rounds of {k} "
                "drafts is impossible (emitted must be rounds + accepted prefix)")
        snaps.append(Snapshot(
            label=raw["label"] if len(rows) == 1 else f"interval ending {raw['label']}",
            rounds=n, accepted=prefix, drafted=d["drafted"], cap=k,
            histogram_source="none (totals only)",
            engine={"Number of accepted tokens": str(d["acc_any"])}))
    last = rows[-1]
    prefix_last = last["emitted"] - last["drafted"] // last["k"]
    warnings.append(
        "vLLM V0's 'Number of accepted tokens' counts accepted drafts at ANY position "
        f"({last['acc_any']}), not the accepted prefix ({prefix_last} = emitted - rounds); "
        "its 'Draft acceptance rate' is therefore not alpha")
    return EngineOutput("vllm-v0-log", tuple(snaps), "cumulative", warnings=tuple(warnings),
                        checks=tuple(checks))


# ------------------------------------------------------------------------------------------
# vLLM V1 log (per-interval counters)
# ------------------------------------------------------------------------------------------
def _rounds_from_mal(accepted: int, mal_text: str) -> tuple[float, float]:
    """Range of rounds N with 1 + accepted/N rounding to the printed mean length."""
    v, h = float(mal_text), _half_unit(mal_text)
    lo = accepted / (v + h - 1.0) if v + h > 1.0 else 0.0
    hi = accepted / (v - h - 1.0) if v - h > 1.0 else math.inf
    return lo, hi


def _parse_vllm_v1(text: str, gamma) -> EngineOutput:
    snaps, checks, warnings = [], [], []
    running = []
    j = 0
    for line in text.splitlines():
        m = re.search(r"Running:\s*(\d+)\s*reqs", line)
        if m:
            running.append(int(m.group(1)))
        if "SpecDecoding metrics:" not in line:
            continue
        j += 1
        label = f"interval {j}"
        acc = _field(r"Accepted:\s*(\d+)\s*tokens", line, "Accepted")
        drafted = _field(r"Drafted:\s*(\d+)\s*tokens", line, "Drafted")
        acc, drafted = int(acc), int(drafted)
        mal = _field(r"Mean acceptance length:\s*(" + _NUM + ")", line, "mal", required=False)
        rate = _field(r"Draft acceptance rate:\s*(" + _NUM + ")%", line, "rate", required=False)
        pp = re.search(r"Per-position acceptance rate:\s*((?:" + _NUM + r"\s*,\s*)*" + _NUM +
                       ")", line)
        rates_txt = [x.strip() for x in pp.group(1).split(",")] if pp else []
        k = len(rates_txt) if rates_txt else gamma
        if rates_txt and gamma is not None and gamma != len(rates_txt):
            raise PolyspecInputError("--gamma", f"{label} has {len(rates_txt)} per-position "
                                     f"rates, so gamma = {len(rates_txt)}, not {gamma}")
        if drafted == 0:
            continue
        if k is None:
            raise PolyspecInputError(
                "rounds", f"{label}: the line gives Drafted tokens but not the draft length "
                "(no per-position rates); pass --gamma (num_speculative_tokens)")
        if drafted % k == 0:
            n = drafted // k
        else:  # shorter drafts: the round count comes from the printed mean length
            if mal is None:
                raise PolyspecInputError(
                    "rounds", f"{label}: Drafted = {drafted} is not a multiple of gamma = {k} "
                    "and no mean acceptance length is printed: the number of rounds is unknown")
            lo, hi = _rounds_from_mal(acc, mal)
            cands = [x for x in range(max(math.ceil(lo), -(-drafted // k)),
                                      math.floor(hi) + 1)]
            if len(cands) != 1:
                raise PolyspecInputError(
                    "rounds", f"{label}: Drafted = {drafted} is not a multiple of gamma = {k};"
                    f" the mean acceptance length {mal} allows rounds {lo:.1f}..{hi:.1f}")
            n = cands[0]
        if acc > n * k:
            raise PolyspecInputError("Accepted", f"{label}: {acc} accepted tokens exceed "
                                     f"{n} rounds x {k} drafts")
        counts, src = None, "none (totals only)"
        if rates_txt:
            surv = survival_from_rates([float(x) for x in rates_txt], n, acc,
                                       [_half_unit(x) for x in rates_txt],
                                       f"{label}.Per-position acceptance rate")
            counts = _counts_from_survival(n, surv, k, label)
            exact = all(_half_unit(x) * n < 0.5 for x in rates_txt)
            src = ("exact (per-position rates x rounds)" if exact else
                   f"reconstructed from per-position rates printed with "
                   f"{_decimals(rates_txt[0])} decimals (each count within the rounding)")
        engine = {}
        if mal is not None:
            engine["mean_acceptance_length"] = mal
        if rate is not None:
            engine["draft_acceptance_rate"] = rate + "%"
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if mal is not None:
            checks.append(_check(label, "mean acceptance length", s.mean_acceptance_length, mal))
        if rate is not None:
            checks.append(_check(label, "draft acceptance rate (accepted / drafted, %)",
                                 acc / drafted, rate, 100.0))
    if any(c["figure"].startswith("draft acceptance rate") for c in checks):
        warnings.append("the engine's 'Draft acceptance rate' is accepted / drafted tokens, "
                        "not the per-position alpha (see the fitted laws)")
    conc = max(running) if running else None
    if conc is not None and conc > 1:
        warnings.append(f"up to {conc} concurrent requests: acceptance counts are usable, "
                        "but timings are not single-stream")
    return EngineOutput("vllm-v1-log", tuple(snaps), "per-interval", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=conc)


# ------------------------------------------------------------------------------------------
# vLLM V1 offline example printout
# ------------------------------------------------------------------------------------------
def _parse_vllm_offline(text: str, gamma) -> EngineOutput:
    runs, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or set(s) <= {"-"}:
            continue
        m = re.match(r"acceptance at token (\d+):\s*(" + _NUM + ")$", s)
        if m:
            if cur is None:
                raise PolyspecInputError("num_drafts", "per-position rates before the totals")
            cur["rates"].append((int(m.group(1)), m.group(2)))
            continue
        m = re.match(r"([A-Za-z_ ]+):\s*(" + _NUM + ")$", s)
        if not m:
            continue
        key, val = m.group(1).strip(), m.group(2)
        if cur is None or key in cur["kv"]:
            cur = {"kv": {}, "rates": []}
            runs.append(cur)
        cur["kv"][key] = val
    snaps, checks, warnings = [], [], []
    for j, run in enumerate(runs, 1):
        kv = run["kv"]
        label = f"run {j}"
        for key in ("num_drafts", "num_accepted_tokens"):
            if key not in kv:
                raise PolyspecInputError(key, f"missing in {label} of the printout")
        n = _count(kv["num_drafts"], "num_drafts")
        acc = _count(kv["num_accepted_tokens"], "num_accepted_tokens")
        drafted = _count(kv["num_draft_tokens"], "num_draft_tokens") if (
            "num_draft_tokens" in kv) else None
        if n == 0:
            continue
        rates = [r for _, r in sorted(run["rates"])]
        if [p for p, _ in sorted(run["rates"])] != list(range(len(rates))):
            raise PolyspecInputError("acceptance at token", f"{label}: positions are not "
                                     "0, 1, 2, ...")
        k = len(rates) if rates else gamma
        if k is None and drafted is not None and drafted % n == 0:
            k = drafted // n
        if rates and gamma is not None and gamma != len(rates):
            raise PolyspecInputError("--gamma", f"{label} prints {len(rates)} positions, "
                                     f"not {gamma}")
        if k is None:
            raise PolyspecInputError("acceptance at token", f"{label}: no per-position rates "
                                     "and num_draft_tokens is not a multiple of num_drafts: "
                                     "pass --gamma")
        counts, src = None, "none (totals only)"
        if rates:
            surv = survival_from_rates([float(x) for x in rates], n, acc,
                                       [_half_unit(x) for x in rates],
                                       f"{label}.acceptance at token")
            counts = _counts_from_survival(n, surv, k, label)
            src = (f"reconstructed from per-position rates printed with "
                   f"{_decimals(rates[0])} decimals (each count within the rounding)")
        engine = {}
        if "mean acceptance length" in kv:
            engine["mean_acceptance_length"] = kv["mean acceptance length"]
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if "mean acceptance length" in kv:
            checks.append(_check(label, "mean acceptance length", s.mean_acceptance_length,
                                 kv["mean acceptance length"]))
        wo = kv.get("num_tokens_generated_without_sd")
        if wo is not None and int(float(wo)) > 0:
            warnings.append(f"{label}: {wo} tokens were generated without speculation (no "
                            "draft proposed); they are not rounds of the fitted law")
    if len({s.cap for s in snaps}) > 1:
        warnings.append("the runs differ in draft length (" + ", ".join(
            f"{s.label}: {s.cap}" for s in snaps) + "); the pooled fit assumes one law for "
            "all of them: fit each with --snapshot N")
    return EngineOutput("vllm-offline-example", tuple(snaps), "per-run",
                        warnings=tuple(warnings), checks=tuple(checks))


# ------------------------------------------------------------------------------------------
# Prometheus (text exposition and UI table) and JSON counters
# ------------------------------------------------------------------------------------------
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_SERIES_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
                        r"(?:\{(?P<labels>(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?$")


def _parse_series(series: str, where: str) -> tuple[str, dict]:
    m = _SERIES_RE.match(series.strip())
    if not m:
        raise PolyspecInputError("metrics", f"{where}: not a metric series: {series!r}")
    labels = {}
    body = (m.group("labels") or "").strip()
    pos = 0
    while pos < len(body):
        lm = _LABEL_RE.match(body, pos)
        if not lm:
            raise PolyspecInputError("metrics", f"{where}: malformed labels {{{body}}}")
        labels[lm.group(1)] = lm.group(2)
        pos = lm.end()
    return m.group("name"), labels


def _prom_samples(text: str, ui: bool):
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or set(line) <= set("-| "):
            continue
        if ui:
            if "|" not in line:
                continue
            series, _, value = line.rpartition("|")
        else:
            m = re.match(r"^(\S+?(?:\{.*\})?)\s+(\S+)(?:\s+-?\d+)?$", line)
            if not m:
                raise PolyspecInputError("metrics", f"line {lineno}: not a Prometheus sample: "
                                         f"{raw.strip()[:100]!r}")
            series, value = m.group(1), m.group(2)
        name, labels = _parse_series(series, f"line {lineno}")
        try:
            v = float(value.strip())
        except ValueError:
            raise PolyspecInputError("metrics", f"line {lineno}: value {value.strip()!r} is not "
                                     "a number") from None
        out.append((name, labels, v))
    return out


_VLLM_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                  "num_accepted_tokens_per_pos")


def _canonical(name: str) -> str | None:
    n = str(name)
    if n.startswith("vllm:"):
        if not n.startswith("vllm:spec_decode_"):
            return None
        n = n[len("vllm:spec_decode_"):]
    if n.endswith("_created"):
        return None
    n = n.removesuffix("_total")
    return n if n in _VLLM_COUNTERS else None


def _vllm_counters_snapshot(vals: dict, per_pos: dict, label: str, gamma, have_note: str,
                            fmt: str) -> Snapshot:
    """A snapshot from summed vLLM counters (``per_pos``: position -> count)."""
    prefix = "vllm:spec_decode_" if fmt.startswith("prometheus") else ""
    suffix = "_total" if fmt.startswith("prometheus") else ""

    def nm(k):
        return f"{prefix}{k}{suffix}"

    if "num_drafts" not in vals:
        raise PolyspecInputError(nm("num_drafts"), f"missing: the number of verification "
                                 f"rounds is unknown{have_note}")
    n = _count(vals["num_drafts"], nm("num_drafts"))
    gaps = [p for p in range(max(per_pos) + 1) if p not in per_pos] if per_pos else []
    pos_complete = bool(per_pos) and not gaps
    if "num_accepted_tokens" in vals:
        acc = _count(vals["num_accepted_tokens"], nm("num_accepted_tokens"))
    elif pos_complete:
        acc = int(sum(per_pos.values()))
    else:
        extra = (f", and {nm('num_accepted_tokens_per_pos')} lacks position(s) "
                 f"{', '.join(map(str, gaps))}" if gaps else
                 f" and there is no {nm('num_accepted_tokens_per_pos')}")
        raise PolyspecInputError(nm("num_accepted_tokens"),
                                 f"missing{extra}: the accepted tokens cannot be "
                                 f"counted{have_note}")
    drafted = (_count(vals["num_draft_tokens"], nm("num_draft_tokens"))
               if "num_draft_tokens" in vals else None)
    k = None
    if pos_complete:
        k = max(per_pos) + 1
    if vals.get("num_spec_tokens") is not None:
        ks = as_int(vals["num_spec_tokens"], "num_spec_tokens", low=1)
        if k is not None and ks < k:
            raise PolyspecInputError("num_spec_tokens", f"{ks} < the {k} positions counted")
        k = ks
    if k is None and drafted is not None and n and drafted % n == 0:
        k = drafted // n
    if gamma is not None:
        if k is not None and k != gamma:
            raise PolyspecInputError("--gamma", f"the counters imply gamma = {k}, not {gamma}")
        k = gamma
    if k is None:
        raise PolyspecInputError(nm("num_draft_tokens"), "missing (or not a multiple of "
                                 f"num_drafts): the draft length is unknown; pass --gamma"
                                 f"{have_note}")
    if n == 0:
        raise PolyspecInputError(nm("num_drafts"), "is 0: no speculative round was recorded")
    if acc > n * k:
        raise PolyspecInputError(nm("num_accepted_tokens"),
                                 f"{acc} accepted tokens exceed {n} rounds x {k} drafts")
    counts, src = None, "none (totals only)"
    if pos_complete:
        surv = [int(per_pos[p]) for p in range(max(per_pos) + 1)]
        if sum(surv) != acc:
            raise PolyspecInputError(nm("num_accepted_tokens_per_pos"),
                                     f"adds up to {sum(surv)}, but {nm('num_accepted_tokens')}"
                                     f" is {acc} (counters scraped at different instants?)")
        counts = _counts_from_survival(n, surv, k, label)
        src = "exact (per-position counters)"
    return Snapshot(label, n, acc, drafted, k, counts, src)


def _counters_from_samples(samples, gamma, fmt: str) -> EngineOutput:
    """Sum spec-decode samples over label sets (engines, instances); a series seen twice
    starts a new (cumulative) scrape."""
    models = sorted({lb.get("model_name") for name, lb, _ in samples
                     if _canonical(name) and "model_name" in lb})
    if len(models) > 1:
        raise PolyspecInputError("model_name", f"counters of several models "
                                 f"({', '.join(models)}): keep one model's lines")
    scrapes, seen = [[]], set()
    for name, lb, v in samples:
        key = _canonical(name)
        if key is None:
            continue
        ident = (name, tuple(sorted(lb.items())))
        if ident in seen:
            scrapes.append([])
            seen = set()
        seen.add(ident)
        scrapes[-1].append((key, lb, v))
    if not scrapes[0]:
        raise PolyspecInputError("vllm:spec_decode_num_drafts_total",
                                 "no vLLM spec-decode counters in the file")
    rows, engines = [], set()
    for sc in scrapes:
        vals, per_pos = {}, {}
        for key, lb, v in sc:
            engines.add(tuple(sorted((k, x) for k, x in lb.items() if k != "position")))
            if key == "num_accepted_tokens_per_pos":
                if "position" not in lb:
                    raise PolyspecInputError("num_accepted_tokens_per_pos",
                                             "sample without a position label")
                p = as_int(int(lb["position"]) if lb["position"].isdigit() else -1,
                           "position", low=0)
                per_pos[p] = per_pos.get(p, 0) + _count(v, "num_accepted_tokens_per_pos")
            else:
                vals[key] = vals.get(key, 0) + _count(v, key)
        rows.append((vals, per_pos))
    have = []
    vals0, pp0 = rows[-1]
    for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        if k in vals0:
            have.append(f"{k}_total")
    if pp0:
        have.append("per-position counters for position(s) "
                    + ", ".join(map(str, sorted(pp0))))
    note = f" (the file has {'; '.join(have) or 'no spec-decode counter'})"
    cum = [_vllm_counters_snapshot(v, p, f"scrape {i + 1}", gamma, note, fmt)
           for i, (v, p) in enumerate(rows)]
    warnings = []
    snaps = [cum[0]]
    for prev, cur in zip(cum[:-1], cum[1:], strict=True):
        if cur.rounds < prev.rounds or cur.accepted < prev.accepted:
            warnings.append(f"{cur.label}: counters decreased (restart): new segment")
            snaps.append(cur)
            continue
        if cur.rounds == prev.rounds:
            continue
        counts = None
        if cur.counts is not None and prev.counts is not None and cur.cap == prev.cap:
            h = cur.counts.histogram(cur.cap) - prev.counts.histogram(prev.cap)
            if (h >= 0).all():
                counts = AcceptanceCounts.from_histogram(h, cur.cap, cur.label)
        snaps.append(Snapshot(f"{prev.label}..{cur.label}", cur.rounds - prev.rounds,
                              cur.accepted - prev.accepted,
                              None if cur.drafted is None or prev.drafted is None
                              else cur.drafted - prev.drafted,
                              cur.cap, counts, cur.histogram_source if counts else "none"))
    if len(engines) > 1:
        warnings.append(f"counters of {len(engines)} label sets (engines / instances) were "
                        "summed: acceptance is pooled; timings are not single-stream")
    return EngineOutput(fmt, tuple(snaps), "cumulative" if len(cum) > 1 else "single",
                        warnings=tuple(warnings), concurrency=None)


def _parse_prometheus_text(text: str, gamma) -> EngineOutput:
    return _counters_from_samples(_prom_samples(text, ui=False), gamma, "prometheus-text")


def _parse_prometheus_ui(text: str, gamma) -> EngineOutput:
    return _counters_from_samples(_prom_samples(text, ui=True), gamma, "prometheus-ui")


def _parse_vllm_json(text: str, gamma) -> EngineOutput:
    obj = _strip_meta(_json_or_none(text))
    samples = []
    if isinstance(obj, list):
        for i, rec in enumerate(obj):
            if not isinstance(rec, dict) or "name" not in rec:
                continue
            key = _canonical(str(rec["name"]))
            if key is None:
                continue
            lb = {str(k): str(v) for k, v in (rec.get("labels") or {}).items()}
            if key == "num_accepted_tokens_per_pos":
                if "values" not in rec:
                    raise PolyspecInputError(f"metrics[{i}].values", "missing required field")
                for p, v in enumerate(rec["values"]):
                    samples.append((str(rec["name"]), {**lb, "position": str(p)}, v))
            else:
                if "value" not in rec:
                    raise PolyspecInputError(f"metrics[{i}].value", "missing required field")
                samples.append((str(rec["name"]), lb, rec["value"]))
        return _counters_from_samples(samples, gamma, "vllm-json")
    stats = next((d for d in _walk(obj) if any(_canonical(k) for k in d)), None)
    if stats is None:
        raise PolyspecInputError("num_drafts", "no vLLM spec-decode fields in the JSON")
    vals, per_pos = {}, {}
    for k, v in stats.items():
        key = _canonical(k)
        if key == "num_accepted_tokens_per_pos":
            if not isinstance(v, list):
                raise PolyspecInputError(str(k), "must be a list of counts")
            per_pos = {p: _count(x, f"{k}[{p}]") for p, x in enumerate(v)}
        elif key is not None:
            vals[key] = v
    if "num_spec_tokens" in stats:
        vals["num_spec_tokens"] = stats["num_spec_tokens"]
    snap = _vllm_counters_snapshot(vals, per_pos, "stats", gamma, "", "vllm-json")
    return EngineOutput("vllm-json", (snap,), "single")


# ------------------------------------------------------------------------------------------
# vLLM per-request metrics
# ------------------------------------------------------------------------------------------
def _parse_vllm_per_request(text: str, gamma) -> EngineOutput:
    obj = _strip_meta(_json_or_none(text))
    recs = [d["speculative_decoding"] for d in _walk(obj)
            if isinstance(d.get("speculative_decoding"), dict)]
    snaps, checks, warnings = [], [], []
    for j, sd in enumerate(recs, 1):
        label = f"request {j}"
        f = f"speculative_decoding[{j - 1}]" if len(recs) > 1 else "speculative_decoding"
        if "num_spec_steps" not in sd:
            raise PolyspecInputError(f"{f}.num_spec_steps", "missing: the number of rounds is "
                                     "unknown")
        n = _count(sd["num_spec_steps"], f"{f}.num_spec_steps")
        hist = sd.get("acceptance_histogram")
        acc = sd.get("num_accepted_draft_tokens")
        k = sd.get("num_spec_tokens")
        if k is not None:
            k = as_int(k, f"{f}.num_spec_tokens", low=1)
        elif hist is not None:
            k = len(hist) - 1
        elif gamma is not None:
            k = gamma
        if gamma is not None and k != gamma:
            raise PolyspecInputError("--gamma", f"{label} states {k} speculative tokens")
        if k is None:
            raise PolyspecInputError(f"{f}.num_spec_tokens", "missing: pass --gamma")
        if n == 0:
            continue
        counts, src = None, "none (totals only)"
        if hist is not None:
            counts = AcceptanceCounts.from_histogram(hist, k, label)
            if counts.n_rounds != n:
                raise PolyspecInputError(f"{f}.acceptance_histogram", f"counts "
                                         f"{counts.n_rounds} rounds but num_spec_steps is {n}")
            tot = int(np.dot(counts.accepted, counts.counts))
            if acc is not None and tot != _count(acc, f"{f}.num_accepted_draft_tokens"):
                raise PolyspecInputError(f"{f}.acceptance_histogram", f"implies {tot} accepted "
                                         f"tokens, but num_accepted_draft_tokens is {acc}")
            acc = tot
            src = "exact (acceptance_histogram)"
        if acc is None:
            raise PolyspecInputError(f"{f}.num_accepted_draft_tokens", "missing (and no "
                                     "acceptance_histogram)")
        acc = _count(acc, f"{f}.num_accepted_draft_tokens")
        drafted = sd.get("num_draft_tokens")
        drafted = None if drafted is None else _count(drafted, f"{f}.num_draft_tokens")
        engine = {}
        for key in ("mean_acceptance_length", "draft_acceptance_rate"):
            if key in sd:
                engine[key] = repr(float(sd[key]))
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if "mean_acceptance_length" in sd:
            checks.append(_check(label, "mean acceptance length", s.mean_acceptance_length,
                                 repr(float(sd["mean_acceptance_length"]))))
        if "draft_acceptance_rate" in sd and drafted:
            checks.append(_check(label, "draft acceptance rate (accepted / drafted)",
                                 acc / drafted, repr(float(sd["draft_acceptance_rate"]))))
    if not recs:
        raise PolyspecInputError("speculative_decoding", "no per-request object found")
    if any(c["figure"].startswith("draft acceptance rate") for c in checks):
        warnings.append("draft_acceptance_rate is accepted / drafted tokens, not alpha")
    return EngineOutput("vllm-per-request", tuple(snaps), "per-request",
                        warnings=tuple(warnings), checks=tuple(checks))


# ------------------------------------------------------------------------------------------
# SGLang
# ------------------------------------------------------------------------------------------
_SGLANG_SCHEMAS = (
    # (name, accepted key, proposed key)
    (">=0.5.12", "spec_num_correct_drafts", "spec_num_proposed_drafts"),
    ("0.5.11", "spec_accepted_drafts", "spec_proposed_drafts"),
    ("<=0.5.10", "spec_accept_token_num", "spec_draft_token_num"),
)
_SGLANG_HIST = ("spec_correct_drafts_histogram", "spec_accepted_drafts_histogram",
                "spec_accept_histogram")


def _parse_sglang_meta(text: str, gamma) -> EngineOutput:
    obj = _strip_meta(_json_or_none(text))
    metas = [d for d in _walk(obj) if "spec_verify_ct" in d]
    snaps, checks, warnings, schemas = [], [], [], set()
    for j, m in enumerate(metas, 1):
        label = f"request {j}" if len(metas) > 1 else "request"
        f = f"meta_info[{j - 1}]" if len(metas) > 1 else "meta_info"
        n = _count(m["spec_verify_ct"], f"{f}.spec_verify_ct")
        schema = next((s for s in _SGLANG_SCHEMAS if s[1] in m), None)
        hkey = next((h for h in _SGLANG_HIST if h in m and m[h] is not None), None)
        if schema is None and hkey is None:
            raise PolyspecInputError(
                f"{f}.spec_num_correct_drafts", "missing (no accepted-draft count under any "
                "SGLang key schema: spec_num_correct_drafts, spec_accepted_drafts, "
                "spec_accept_token_num)")
        if schema is not None:
            schemas.add(schema[0])
        acc = _count(m[schema[1]], f"{f}.{schema[1]}") if schema else None
        proposed = (_count(m[schema[2]], f"{f}.{schema[2]}")
                    if schema and schema[2] in m else None)
        if n == 0:
            continue
        per_round = None
        if proposed is not None and proposed % n == 0:
            per_round = proposed // n
        hist = None if hkey is None else m[hkey]
        depth = len(hist) - 1 if hist is not None else None
        k = depth if depth is not None else (per_round if per_round is not None else gamma)
        if gamma is not None:
            if depth is not None and depth != gamma:
                raise PolyspecInputError("--gamma", f"{label}: the histogram has "
                                         f"{depth + 1} cells, so the cap is {depth}")
            k = gamma
        if k is None:
            raise PolyspecInputError(f"{f}.{schema[2] if schema else 'spec_num_proposed_drafts'}",
                                     "missing (or not a multiple of spec_verify_ct): the draft "
                                     "length is unknown; pass --gamma")
        if per_round is not None and per_round > k:
            warnings.append(f"{label}: {per_round} drafts proposed per round but at most {k} "
                            "accepted: tree drafting (topk > 1); the law is of the accepted "
                            f"path length capped at the depth {k}, not a chain's per-position "
                            "alpha")
        counts, src = None, "none (totals only)"
        if hist is not None:
            counts = AcceptanceCounts.from_histogram(hist, k, label)
            if counts.n_rounds != n:
                raise PolyspecInputError(f"{f}.{hkey}", f"counts {counts.n_rounds} rounds but "
                                         f"spec_verify_ct is {n}")
            tot = int(np.dot(counts.accepted, counts.counts))
            if acc is not None and tot != acc:
                raise PolyspecInputError(f"{f}.{hkey}", f"implies {tot} accepted drafts but "
                                         f"{schema[1]} is {acc}")
            acc = tot
            src = f"exact ({hkey})"
        engine = {}
        for key in ("spec_accept_length", "spec_accept_rate"):
            if key in m:
                engine[key] = repr(float(m[key]))
        s = Snapshot(label, n, acc, proposed if per_round is None or per_round <= k else None,
                     k, counts, src, engine)
        snaps.append(s)
        if "spec_accept_length" in m:
            checks.append(_check(label, "mean acceptance length (spec_accept_length)",
                                 s.mean_acceptance_length, repr(float(m["spec_accept_length"]))))
        if "spec_accept_rate" in m and proposed:
            checks.append(_check(label, "acceptance rate (accepted / proposed drafts)",
                                 acc / proposed, repr(float(m["spec_accept_rate"]))))
    if not metas:
        raise PolyspecInputError("spec_verify_ct", "no SGLang meta_info found")
    if len(schemas) > 1:
        warnings.append(f"requests use several SGLang key schemas ({', '.join(sorted(schemas))})")
    if any(c["figure"].startswith("acceptance rate") for c in checks):
        warnings.append("spec_accept_rate is accepted / proposed drafts, not alpha")
    return EngineOutput("sglang-meta", tuple(snaps), "per-request", warnings=tuple(warnings),
                        checks=tuple(checks))


def _integer_in(lo: float, hi: float) -> list[int]:
    return list(range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1))


def _parse_sglang_log(text: str, gamma) -> EngineOutput:
    rows, prefills = [], 0
    for line in text.splitlines():
        if "Prefill batch." in line:
            m = re.search(r"#new-token:\s*(\d+)", line)
            prefills += int(m.group(1)) if m else 0
            rows.append(("prefill", int(m.group(1)) if m else None, line))
            continue
        if "Decode batch." not in line or "accept len" not in line:
            continue
        d = {
            "running": int(_field(r"#running-req:\s*(\d+)", line, "#running-req")),
            "token": int(_field(r"#token:\s*(\d+)", line, "#token")),
            "al": _field(r"accept len:\s*(" + _NUM + ")", line, "accept len"),
            "rate": _field(r"accept rate:\s*(" + _NUM + ")", line, "accept rate", required=False),
            "tps": _field(r"gen throughput \(token/s\):\s*(" + _NUM + ")", line, "gen",
                          required=False),
        }
        rows.append(("decode", d, line))
    decodes = [r[1] for r in rows if r[0] == "decode"]
    if not decodes:
        raise PolyspecInputError("accept len", "no 'Decode batch.' line with accept len")
    warnings, checks, skipped = [], [], []
    conc = max(d["running"] for d in decodes)
    # draft length: SGLang's log 'accept rate' is accept len / num_draft_tokens (draft tokens
    # incl. the verified root, gamma + 1) in the versions with this wording, and
    # (accept len - 1) / gamma in later ones: take the convention the printed pairs agree on
    conv = {}
    for name, num in (("accept len / (gamma + 1)", lambda al: al),
                      ("(accept len - 1) / gamma", lambda al: al - 1.0)):
        common = None
        for d in decodes:
            if d["rate"] is None or float(d["rate"]) <= _half_unit(d["rate"]):
                common = set()
                break
            al, hal = float(d["al"]), _half_unit(d["al"])
            r, hr = float(d["rate"]), _half_unit(d["rate"])
            lo = num(al - hal) / (r + hr)
            hi = num(al + hal) / (r - hr)
            c = set(_integer_in(lo, hi))
            common = c if common is None else common & c
        conv[name] = common or set()
    cands = {}
    for name, c in conv.items():
        for v in c:
            g = v - 1 if name.startswith("accept len /") else v
            if g >= 1:
                cands.setdefault(g, name)
    if gamma is not None:
        k = gamma
        if cands and gamma not in cands:
            warnings.append(f"--gamma {gamma} disagrees with the printed accept rates "
                            f"(they imply {sorted(cands)})")
    elif len(cands) == 1:
        k = next(iter(cands))
        warnings.append(f"draft length gamma = {k} inferred from accept len / accept rate "
                        f"(rate = {cands[k]}); pass --gamma to override")
    else:
        raise PolyspecInputError("--gamma", "the draft length is not printed and the accept "
                                 "rates do not determine it"
                                 + (f" (candidates {sorted(cands)})" if cands else "")
                                 + "; pass --gamma (speculative_num_steps)")
    snaps = []
    prev_token, pending_prefill, j = None, 0, 0
    for kind, d, _line in rows:
        if kind == "prefill":
            pending_prefill += d or 0
            continue
        j += 1
        label = f"interval {j}"
        if prev_token is None:
            base = pending_prefill if pending_prefill else None
        else:
            base = prev_token + pending_prefill
        prev_token, pending_prefill = d["token"], 0
        if d["running"] != 1:
            skipped.append(f"{label}: {d['running']} running requests (the token count does not "
                           "give the rounds)")
            continue
        if base is None:
            skipped.append(f"{label}: no earlier line to count the tokens from")
            continue
        delta = d["token"] - base
        al, h = float(d["al"]), _half_unit(d["al"])
        if delta <= 0 or al <= 1.0 - h:
            skipped.append(f"{label}: no tokens counted")
            continue
        ns = _integer_in(delta / (al + h), delta / max(al - h, 1e-12))
        if len(ns) != 1:
            skipped.append(f"{label}: {delta} new tokens at accept len {d['al']} is not a whole "
                           "number of rounds (counters from before this log, e.g. warm-up?)")
            continue
        n = ns[0]
        acc = delta - n  # every round emits its accepted drafts + 1
        if not (al - h - 1.0) * n - 1e-9 <= acc <= (al + h - 1.0) * n + 1e-9:
            skipped.append(f"{label}: token count {delta} and accept len {d['al']} disagree")
            continue
        if acc > n * k:
            raise PolyspecInputError("accept len", f"{label}: {d['al']} exceeds 1 + gamma = "
                                     f"{k + 1}; pass the right --gamma")
        engine = {"accept len": d["al"]}
        if d["rate"] is not None:
            engine["accept rate"] = d["rate"]
        s = Snapshot(label, n, acc, n * k, k, None, "none (interval means only)", engine,
                     ("drafted = gamma x rounds: the log does not print drafted tokens",))
        snaps.append(s)
        checks.append(_check(label, "mean acceptance length (accept len)",
                             s.mean_acceptance_length, d["al"]))
    if skipped:
        warnings.append("skipped " + "; ".join(skipped))
    if conc > 1:
        warnings.append(f"up to {conc} running requests: timing is not single-stream")
    tps = [float(d["tps"]) for d in decodes if d["tps"] is not None]
    timing = {"gen_throughput_tokens_per_s": tps} if tps else {}
    return EngineOutput("sglang-log", tuple(snaps), "per-interval", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=conc, timing=timing,
                        skipped=tuple(skipped))


# ------------------------------------------------------------------------------------------
# llama.cpp
# ------------------------------------------------------------------------------------------
def _parse_llamacpp_speculative(text: str, gamma) -> EngineOutput:
    kv = {}
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        m = re.search(r"^\s*" + key + r"\s*=\s*(\d+)", text, re.M)
        if not m:
            raise PolyspecInputError(key, "missing in the llama-speculative statistics")
        kv[key] = int(m.group(1))
    acc_pct = re.search(r"^\s*accept\s*=\s*(" + _NUM + ")%", text, re.M)
    k, n_pred, n_dft, n_acc = kv["n_draft"], kv["n_predict"], kv["n_drafted"], kv["n_accept"]
    if gamma is not None and gamma != k:
        raise PolyspecInputError("--gamma", f"the statistics state n_draft = {k}")
    warnings, checks, timing = [], [], {}
    for pat, name in ((r"decoded\s+(\d+)\s+tokens in\s+(" + _NUM + r")\s+seconds", "decoded"),
                      (r"generated\s+(\d+)\s+tokens in\s+(" + _NUM + r")\s+seconds",
                       "generated")):
        m = re.search(pat, text)
        if m:
            timing[f"{name}_tokens"] = int(m.group(1))
            timing[f"{name}_seconds"] = float(m.group(2))
            timing["tokens_per_s"] = int(m.group(1)) / float(m.group(2))
    # every target sampling emits one token; each accepted draft one more: n_predict - n_accept
    # samplings, the first of which follows the prompt and verifies no draft
    samplings = n_pred - n_acc
    if samplings < 2:
        raise PolyspecInputError("n_predict", f"n_predict - n_accept = {samplings}: no "
                                 "verification round")
    n = samplings - 1
    if acc_pct is not None and n_dft:
        checks.append(_check("statistics", "accept (n_accept / n_drafted, %)", n_acc / n_dft,
                             acc_pct.group(1), 100.0))
        warnings.append("llama.cpp's 'accept' percentage is n_accept / n_drafted, not alpha")
    s = Snapshot("statistics", n, n_acc, n_dft, k, None, "none (totals only)",
                 {"accept": acc_pct.group(1) + "%"} if acc_pct else {},
                 (f"rounds = n_predict - n_accept - 1 = {n} (n_predict - n_accept = {samplings} "
                  "target samplings, the first after the prompt verifies no draft)",))
    if n_dft != n * k:
        per = n_dft / n
        warnings.append(
            f"draft length varies by round: {n_dft} drafted tokens over {n} rounds "
            f"({per:.2f} per round) with n_draft = {k} (the drafter stops early when unsure); "
            "the rounds' caps are unknown, so no chain law is fitted; modelled instead as "
            "the confidence cut-off that reproduces the drafted and accepted counts "
            "(variable_length)")
        s = replace(s, cap=None, draft_cap=k)
    if re.search(r"st_tg|sd_tg|llama-bench|\|\s*tg\s*\d+", text):
        rows = re.findall(r"\|\s*(pp|tg)\s*(\d+)\s*\|\s*(" + _NUM + r")\s*±", text)
        if rows:
            timing["llama_bench"] = [{"test": f"{a} {b}", "tokens_per_s": float(c)}
                                     for a, b, c in rows]
    return EngineOutput("llamacpp-speculative", (s,), "single", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=1, timing=timing)


def _parse_llamacpp_server(text: str, gamma) -> EngineOutput:
    line = next((ln for ln in text.splitlines() if "#gen drafts" in ln), None)
    slot = next((ln for ln in text.splitlines() if "draft acceptance =" in ln), None)
    warnings, checks, timing = [], [], {}
    m = re.search(r"eval time\s*=\s*(" + _NUM + r")\s*ms\s*/\s*(\d+)\s*tokens", text)
    if m:
        timing = {"eval_ms": float(m.group(1)), "eval_tokens": int(m.group(2)),
                  "ms_per_token": float(m.group(1)) / int(m.group(2))}
    if line is not None:
        n = int(_field(r"#gen drafts\s*=\s*(\d+)", line, "#gen drafts"))
        acc = int(_field(r"#acc tokens\s*=\s*(\d+)", line, "#acc tokens"))
        drafted = int(_field(r"#gen tokens\s*=\s*(\d+)", line, "#gen tokens"))
        acc_drafts = _field(r"#acc drafts\s*=\s*(\d+)", line, "#acc drafts", required=False)
        mal = _field(r"#mean acc len\s*=\s*(" + _NUM + ")", line, "mal", required=False)
        pos = _field(r"#acc rate/pos\s*=\s*\(([^)]*)\)", line, "pos", required=False)
    elif slot is not None:
        acc = int(_field(r"\(\s*(\d+)\s*accepted", slot, "accepted"))
        drafted = int(_field(r"(\d+)\s*generated\s*\)", slot, "generated"))
        mal = _field(r"mean acceptance length\s*=\s*(" + _NUM + ")", slot, "mal",
                     required=False)
        pos = _field(r"acceptance rate per position\s*=\s*\(([^)]*)\)", slot, "pos",
                     required=False)
        acc_drafts = None
        if mal is None:
            raise PolyspecInputError("#gen drafts", "missing (and no mean acceptance length): "
                                     "the number of rounds is unknown")
        lo, hi = _rounds_from_mal(acc, mal)
        ns = _integer_in(lo, hi)
        if len(ns) != 1:
            raise PolyspecInputError("#gen drafts", f"missing; the mean acceptance length {mal}"
                                     f" allows {len(ns)} round counts")
        n = ns[0]
        warnings.append(f"rounds = {n} derived from the mean acceptance length {mal}")
    else:
        raise PolyspecInputError("#gen drafts", "no llama-server draft statistics line")
    rates = [x.strip() for x in pos.split(",")] if pos else []
    k = len(rates) if rates else gamma
    if rates and gamma is not None and gamma != len(rates):
        raise PolyspecInputError("--gamma", f"the statistics have {len(rates)} positions")
    if k is None:
        if drafted % n:
            raise PolyspecInputError("#acc rate/pos", "missing, and #gen tokens is not a "
                                     "multiple of #gen drafts: pass --gamma")
        k = drafted // n
    counts, src = None, "none (totals only)"
    if rates:
        surv = survival_from_rates([float(x) for x in rates], n, acc,
                                   [_half_unit(x) for x in rates], "#acc rate/pos")
        if acc_drafts is not None and int(acc_drafts) != surv[0]:
            raise PolyspecInputError("#acc drafts", f"{acc_drafts} drafts with an accepted "
                                     f"token, but the position-0 rate gives {surv[0]}")
        counts = _counts_from_survival(n, surv, k, "statistics")
        exact = all(_half_unit(x) * n < 0.5 for x in rates)
        src = "exact (per-position rates x drafts)" if exact else (
            f"reconstructed from per-position rates printed with {_decimals(rates[0])} decimals")
    s = Snapshot("statistics", n, acc, drafted, k, counts, src,
                 {"mean acc len": mal} if mal else {})
    if mal is not None:
        checks.append(_check("statistics", "mean acceptance length", s.mean_acceptance_length,
                             mal))
    if slot is not None:
        da = _field(r"draft acceptance\s*=\s*(" + _NUM + ")", slot, "da", required=False)
        if da is not None and drafted:
            checks.append(_check("statistics", "draft acceptance (accepted / generated)",
                                 acc / drafted, da))
            warnings.append("llama-server's 'draft acceptance' is accepted / generated draft "
                            "tokens, not alpha")
    return EngineOutput("llamacpp-server", (s,), "single", warnings=tuple(warnings),
                        checks=tuple(checks), timing=timing)


# ------------------------------------------------------------------------------------------
# TensorRT-LLM trtllm-bench
# ------------------------------------------------------------------------------------------
def _parse_trtllm(text: str, gamma) -> EngineOutput:
    def num(pat, name, required=True):
        m = re.search(pat, text, re.M)
        if not m:
            if required:
                raise PolyspecInputError(name, "missing in the trtllm-bench report")
            return None
        return m.group(1)

    n_req = int(float(num(r"Number of requests:\s*(" + _NUM + ")", "Number of requests")))
    out_len = num(r"Average Output Length \(tokens\):\s*(" + _NUM + ")",
                  "Average Output Length (tokens)")
    adt = num(r"^\[ADT\]\s*AVERAGE\s*:\s*(" + _NUM + ")", "[ADT] AVERAGE")
    dt = num(r"^\[DT\]\s*AVERAGE\s*:\s*(" + _NUM + ")", "[DT] AVERAGE", required=False)
    al = num(r"^\[AL\]\s*AVERAGE\s*:\s*(" + _NUM + ")", "[AL] AVERAGE", required=False)
    conc = num(r"Number of concurrent requests:\s*(" + _NUM + ")", "concurrent", required=False)
    mode = num(r"DECODING STATISTICS \(([^)]*)\)", "mode", required=False)
    # per request: output = iterations + accepted; draft tokens = k * iterations, where the
    # iterations include the context step that produced the first token (no draft)
    total_out = n_req * float(out_len)
    total_acc = n_req * float(adt)
    iters = total_out - total_acc
    tol = n_req * (_half_unit(out_len) + _half_unit(adt))
    it_int = round(iters)
    if abs(iters - it_int) > tol + 1e-9 or it_int <= n_req:
        raise PolyspecInputError("[ADT] AVERAGE", "the averages do not give a whole number of "
                                 "decoding iterations")
    acc = round(total_out) - it_int
    n = it_int - n_req  # generation iterations: the rounds that verified a draft
    k = gamma
    if dt is not None:
        kk = n_req * float(dt) / it_int
        if k is None:
            if abs(kk - round(kk)) > 0.01 * kk:
                raise PolyspecInputError("[DT] AVERAGE", f"gives {kk:.3f} draft tokens per "
                                         "iteration; pass --gamma")
            k = round(kk)
    if k is None:
        raise PolyspecInputError("[DT] AVERAGE", "missing: the draft length is unknown; pass "
                                 "--gamma (max_draft_len)")
    warnings = [f"totals reconstructed from per-request averages printed with 2-4 decimals "
                f"over {n_req} requests (±{tol:.2f} tokens)",
                f"rounds = decoding iterations - requests = {n} (the first iteration of each "
                "request is the context step, which verifies no draft)"]
    if al is not None:
        warnings.append(f"the engine's [AL] AVERAGE {al} is the mean over requests of each "
                        "request's output tokens / iterations (first token included); the pooled "
                        "mean acceptance length below is 1 + accepted / rounds")
    c = None if conc is None else float(conc)
    if c is not None and c > 1.0 + 1e-9:
        warnings.append(f"{c:g} concurrent requests on average: acceptance usable, timing not "
                        "single-stream")
    if acc > n * k:
        raise PolyspecInputError("[ADT] AVERAGE", "more accepted tokens than drafted")
    engine = {"[AL] AVERAGE": al} if al else {}
    if mode:
        engine["mode"] = mode
    s = Snapshot("report", n, acc, n * k, k, None, "none (per-request averages only)", engine)
    return EngineOutput("trtllm-bench", (s,), "single", warnings=tuple(warnings),
                        concurrency=c)


_PARSERS = {
    "vllm-v0-log": _parse_vllm_v0,
    "vllm-v1-log": _parse_vllm_v1,
    "vllm-offline-example": _parse_vllm_offline,
    "prometheus-text": _parse_prometheus_text,
    "prometheus-ui": _parse_prometheus_ui,
    "vllm-json": _parse_vllm_json,
    "vllm-per-request": _parse_vllm_per_request,
    "sglang-log": _parse_sglang_log,
    "sglang-meta": _parse_sglang_meta,
    "llamacpp-speculative": _parse_llamacpp_speculative,
    "llamacpp-server": _parse_llamacpp_server,
    "trtllm-bench": _parse_trtllm,
}


# ------------------------------------------------------------------------------------------
# the fit report (what `polyspec fit --json` prints)
# ------------------------------------------------------------------------------------------
def _finite(x):
    return None if x is None or not math.isfinite(x) else float(x)


def _solve_geometric_mean(mean: float, cap: int) -> float:
    """The ``x`` in [0, 1] with ``sum_{j=1}^{cap} x^j = mean`` (increasing in ``x``)."""
    from scipy import optimize

    if mean <= 0.0:
        return 0.0
    if mean >= cap:
        return 1.0

    def f(x):
        return float(np.sum(x ** np.arange(1, cap + 1))) - mean

    return float(optimize.brentq(f, 0.0, 1.0, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def variable_length_model(snap: Snapshot, cap: int, eta: float | None = None) -> dict:
    """Drafts of varying length (llama.cpp stops drafting when the drafter's top probability
    falls below ``p_min``) as the confidence cut-off of docs/theory.md Part III-D A2: per position
    the drafter stops with probability ``1 - q``, drafts a token that is accepted with
    probability ``r`` and one that is rejected with ``q - r``, at most ``cap`` tokens.

    What the engine's totals identify: with ``n`` rounds, ``D`` drafted and ``A`` accepted
    tokens, exactly the two numbers ``q = P(C >= eta)`` and ``r = P(C >= eta, accepted)`` at
    the engine's own ``eta``, from ``E[G] = sum_{g=1}^{cap} q^g = D / n`` and
    ``E[A] = sum_{j=1}^{cap} r^j = A / n`` (method of moments; with a histogram of ``A``,
    whose law is capped geometric in ``r``, ``r`` is its maximum-likelihood estimate
    ``sum A / (sum A + #{A < cap})``). Nothing else is: the law of the confidence ``C``, the
    acceptance curve and ``eta`` itself are not identified, and every joint law with these
    ``(q, r)`` gives the same prediction at this ``eta`` and cap (A2 depends on them only),
    none at another ``eta``. ``representative`` is one such law written in the config format
    (``C ~ Beta(a, 1)`` with ``1 - eta^a = q``, acceptance flat at ``r / q``), with the
    schedule, at ``eta`` (default 0.5, an arbitrary label: pass the engine's ``p_min``)."""
    from polyspec_theory.errors import as_probability
    from polyspec_theory.structures.schedule import ConfidenceLaw
    from polyspec_theory.structures.schedule_models import confidence_round

    n, cap = snap.rounds, as_int(cap, "cap", low=1)
    if snap.drafted is None:
        raise PolyspecInputError("drafted", "the drafted token count is needed to model drafts "
                                 "of varying length")
    eta = 0.5 if eta is None else as_probability(eta, "--eta")
    if not 0.0 < eta < 1.0:
        raise PolyspecInputError("--eta", f"must be in (0, 1), got {eta}")
    mean_g = snap.drafted / n
    mean_a = snap.accepted / n
    q = _solve_geometric_mean(mean_g, cap)
    hist = snap.counts.histogram(cap) if snap.counts is not None else None
    if hist is not None and len(hist) == cap + 1:
        k = np.arange(cap + 1)
        total_a = float(np.dot(k, hist))
        short = float(hist[:cap].sum())
        r = total_a / (total_a + short) if total_a + short > 0 else 0.0
        method = ("q: moments (E[G] = drafted / rounds); r: maximum likelihood on the "
                  "histogram of accepted drafts (capped geometric)")
    else:
        r = _solve_geometric_mean(mean_a, cap)
        method = ("moments: E[G] = drafted / rounds and E[A] = accepted / rounds under the "
                  "cut-off (A2)")
    notes = []
    if r > q:
        notes.append(f"r = {r:.4g} > q = {q:.4g}: more accepted than the cut-off model allows "
                     "(the drafts are not stopped by confidence alone); r set to q")
        r = q
    rep = None
    if 0.0 < q < 1.0:
        a = math.log1p(-q) / math.log(eta)
        ratio = min(max(r / q, 1e-12), 1.0 - 1e-12)
        b0 = math.log(ratio) - math.log1p(-ratio)
        law = ConfidenceLaw([a, 1.0], [b0, 0.0])
        rd = confidence_round(law, eta, cap)
        rep = {"acceptance": law.to_config(),
               "schedule": {"kind": "confidence", "eta": eta, "max": cap},
               "check": {"q": rd.q, "r": rd.r, "mean_drafted": rd.mean_block,
                         "mean_accepted": rd.mean_emitted - 1.0}}
    else:
        notes.append(f"q = {q:g}: every round drafts {'all' if q >= 1 else 'none'} of its "
                     "slots; no cut-off law represents it")
    g_pmf = np.concatenate([q ** np.arange(cap) * (1 - q), [q ** cap]])
    return {
        "model": "confidence cut-off (docs/theory.md Part III-D A2)",
        "cap": cap, "rounds": n, "mean_drafted": mean_g, "mean_accepted": mean_a,
        "q": q, "r": r, "method": method,
        "drafter_forwards_per_round": mean_g + float(1.0 - g_pmf[-1]),
        "identified": "q = P(draft a position) and r = P(draft it and accept it) at the "
                      "engine's own cut-off; not the confidence law, the acceptance curve or "
                      "the cut-off value (predictions hold at this cut-off and cap only)",
        "representative": rep,
        "notes": notes,
    }


def acceptance_report(out: EngineOutput, eta: float | None = None) -> dict:
    """Fitted laws for the pooled snapshot of ``out`` (and a summary per snapshot).

    With a histogram: every family by censored maximum likelihood (log-likelihood, AIC,
    G-test), ``best`` = AIC-best outside the Gaussian baseline. With totals only (rounds,
    accepted, one draft length): the iid law by the method of moments (no likelihood).
    Drafts of varying length (more than :data:`SHORT_DRAFT_TOLERANCE` of the slots missing,
    or unknown caps): no chain law, a warning saying why, and, where the drafted count and the
    maximum draft length are known, ``variable_length``: the confidence cut-off that
    reproduces them (:func:`variable_length_model`; ``eta`` labels its representative)."""
    from polyspec_theory.core.laws import IIDGeometric, best_fit, fit_laws

    if not isinstance(out, EngineOutput):
        raise PolyspecInputError("output", "must be an EngineOutput (load_engine_output)")
    warnings = list(out.warnings)
    pooled = out.pooled
    caps = {s.cap for s in out.snapshots}
    # several known draft lengths with histograms: one law, each snapshot censored at its own
    mixed = len(caps) > 1 and None not in caps and pooled.counts is not None
    laws, best, method = [], None, None
    short = sum(s.short_slots for s in out.snapshots)
    slots = sum((s.cap or 0) * s.rounds for s in out.snapshots)
    for s in out.snapshots:
        note = _short_draft_note(s)
        if note:
            warnings.append(note)
    variable = None
    if pooled.cap is None and not mixed:
        if not any("varies" in w or "differ in draft length" in w for w in warnings):
            warnings.append("the draft length is not the same in every round: no law fitted")
        if pooled.draft_cap is not None and pooled.drafted is not None:
            variable = variable_length_model(pooled, pooled.draft_cap, eta)
    elif slots and short > SHORT_DRAFT_TOLERANCE * slots:
        warnings.append(f"{short} of {slots} draft slots were not drafted (> "
                        f"{100 * SHORT_DRAFT_TOLERANCE:g} %): draft length varies by round, "
                        "no chain law fitted; modelled as a confidence cut-off "
                        "(variable_length)")
        if pooled.cap is not None and pooled.drafted is not None:
            variable = variable_length_model(pooled, pooled.cap, eta)
    elif pooled.counts is not None:
        fits = fit_laws(pooled.counts)
        for f in fits:
            d = f.to_dict()
            laws.append({k: _finite(v) if isinstance(v, float) else v for k, v in d.items()})
        best = best_fit(fits).law.to_config()
        method = "censored maximum likelihood on the acceptance histogram" + (
            f" (draft lengths {sorted(caps)}, each round censored at its own)" if mixed else "")
    else:
        law = IIDGeometric.from_mean(pooled.mean_accepted, pooled.cap)
        laws.append({"law": "iid", "params": law.to_config(), "loglik": None, "aic": None,
                     "n_params": 1, "n": pooled.rounds, "method": "moments (mean only)"})
        best = law.to_config()
        method = ("method of moments: the iid alpha whose capped mean E[A | gamma] equals the "
                  "observed mean (the output has totals only, no histogram: no likelihood)")
    snaps = []
    for s in out.snapshots:
        d = s.to_dict()
        if s.cap is not None:
            d["iid_alpha_moments"] = IIDGeometric.from_mean(min(s.mean_accepted, s.cap),
                                                            s.cap).alpha
        snaps.append(d)
    bad = [c for c in out.checks if not c["agree"]]
    for c in bad:
        warnings.append(f"{c['snapshot']}: the engine printed {c['figure']} = {c['engine']}, "
                        f"the counters give {c['ours']:.6g}")
    engine_mal = next((c["engine"] for c in out.checks
                       if c["figure"].startswith("mean acceptance length")
                       and len(out.snapshots) == 1), None)
    return {
        "format": out.format,
        "format_description": FORMATS[out.format],
        "source": out.source,
        "counters": out.counters,
        "rounds": pooled.rounds,
        "accepted": pooled.accepted,
        "drafted": pooled.drafted,
        "drafted_per_round": pooled.drafted_per_round,
        "cap": pooled.cap,
        "mean_accepted": pooled.mean_accepted,
        "mean_acceptance_length": pooled.mean_acceptance_length,
        "engine_mean_acceptance_length": engine_mal,
        "histogram": (None if pooled.counts is None or pooled.cap is None
                      else [int(x) for x in pooled.counts.histogram(pooled.cap)]),
        "caps": sorted(c for c in caps if c is not None),
        "histogram_source": pooled.histogram_source,
        "fit_method": method,
        "laws": laws,
        "best": best,
        "snapshots": snaps,
        "checks": list(out.checks),
        "concurrency": out.concurrency,
        "timing": out.timing,
        "variable_length": variable,
        "warnings": list(dict.fromkeys(warnings)),
    }


# ------------------------------------------------------------------------------------------
# sweep tables (calibration data)
# ------------------------------------------------------------------------------------------
def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def load_sweep(path) -> SweepTable:
    """A sweep table like ``vllm_eagle_sweep_issue20780.txt``: a table ``K | method... ``
    of mean acceptance lengths (AL) and a table ``BS b | vanilla | method... `` of time per
    output token (TPOT, ms) with rows ``K=k``."""
    text, source = read_engine_text(path)
    return parse_sweep(text, source)


def parse_sweep(text: str, source: str = "") -> SweepTable:
    tables, cur = [], None
    for raw in text.splitlines():
        if "|" not in raw:
            cur = None
            continue
        cells = [c.strip() for c in raw.split("|")]
        if all(set(c) <= {"-", ""} for c in cells):
            continue
        if cur is None:
            cur = []
            tables.append(cur)
        cur.append(cells)
    al_tab = tpot_tab = None
    for t in tables:
        hdr = next((r for r in t if r and r[0].upper() == "K"), None)
        if hdr is not None:
            al_tab = (hdr, [r for r in t if r and r[0].isdigit()])
        hdr2 = next((r for r in t if r and re.match(r"BS\s*\d+", r[0])), None)
        if hdr2 is not None:
            tpot_tab = (hdr2, [r for r in t if r and re.match(r"K\s*=\s*\d+", r[0])],
                        [r for r in t if r and r[0].lower().startswith("best k")])
    if al_tab is None:
        raise PolyspecInputError("AL", "no table with a 'K' column of mean acceptance lengths")
    if tpot_tab is None:
        raise PolyspecInputError("TPOT", "no table 'BS b | vanilla | ...' of times per token "
                                 "with rows K=k")
    hdr, rows = al_tab
    methods, al_dec = {}, []
    for j, name in enumerate(hdr[1:], 1):
        if not name or "gain" in name.lower():
            continue
        col = {}
        for r in rows:
            if j < len(r) and r[j]:
                col[int(r[0])] = float(r[j])
                al_dec.append(_half_unit(r[j]))
        methods[name] = {"al": col}
    hdr2, rows2, best_rows = tpot_tab
    bs = int(re.match(r"BS\s*(\d+)", hdr2[0]).group(1))
    vanilla, tp_dec = {}, []
    colmap = {}
    for j, name in enumerate(hdr2[1:], 1):
        if name.lower() == "vanilla":
            colmap["vanilla"] = j
        else:
            for m in methods:
                if _norm(m) == _norm(name):
                    colmap[m] = j
    if "vanilla" not in colmap:
        raise PolyspecInputError("vanilla", "no autoregressive (vanilla) TPOT column")
    for m in methods:
        if m not in colmap:
            raise PolyspecInputError("TPOT", f"no TPOT column for method {m!r}")
        methods[m]["tpot"] = {}
    for r in rows2:
        k = int(re.match(r"K\s*=\s*(\d+)", r[0]).group(1))
        vanilla[k] = float(r[colmap["vanilla"]])
        for m in methods:
            cell = r[colmap[m]]
            methods[m]["tpot"][k] = float(cell)
            tp_dec.append(_half_unit(cell))
    best = {}
    for r in best_rows:
        for m in methods:
            j = colmap[m]
            if j < len(r) and r[j].strip().isdigit():
                best[m] = int(r[j])
    # resolution: the step of the printed values (the median over the column: a spreadsheet
    # drops trailing zeros, so "2.1" in a column of 2-decimal values is 2.10)
    return SweepTable(methods, vanilla, bs, "ms", 2 * float(np.median(al_dec)),
                      2 * float(np.median(tp_dec)), best, source)


def sweep_runs(table: SweepTable, method: str, fit_on=None) -> dict:
    """A ``polyspec calibrate`` runs mapping for one method of a sweep: two models (target and
    drafter), per-round overhead of the target and the drafter's cost per forward unknown, the
    target's ``T_1(1)`` = the autoregressive TPOT; one run per K with acceptance ``{"tau":
    AL(K)}``; runs not in ``fit_on`` (Ks) are held out (predicted, then compared)."""
    if not isinstance(table, SweepTable):
        raise PolyspecInputError("table", "must be a SweepTable (load_sweep)")
    if not isinstance(method, str):
        raise PolyspecInputError("--method", f"must be a method name, got {method!r}")
    names = {_norm(m): m for m in table.methods}
    key = names.get(_norm(method))
    if key is None:
        raise PolyspecInputError("--method", f"unknown method {method!r}; the table has "
                                 f"{', '.join(table.methods)}")
    data = table.methods[key]
    ks = sorted(set(data["al"]) & set(data["tpot"]))
    if fit_on is not None:
        fit_on = [as_int(k, "--fit-on", low=1) for k in fit_on]
        for k in fit_on:
            if k not in ks:
                raise PolyspecInputError("--fit-on", f"K = {k} is not in the table ({ks})")
    van = {table.vanilla[k] for k in ks}
    if len(van) != 1:
        raise PolyspecInputError("vanilla", f"the autoregressive TPOT differs between rows "
                                 f"({sorted(van)})")
    runs = []
    for k in ks:
        run = {"name": f"K={k}", "thresholds": [k], "acceptance": [{"tau": data["al"][k]}],
               "time_per_token": data["tpot"][k]}
        if fit_on is not None and k not in fit_on:
            run["holdout"] = True
        runs.append(run)
    return {
        "name": f"{key} (batch size {table.batch_size})",
        "description": table.source,
        "time_unit": table.time_unit,
        "models": [{"name": "target", "cost": {"base": van.pop()}, "overhead": "fit"},
                   {"name": "drafter", "cost": "fit"}],
        "runs": runs,
        "resolution": {"time_per_token": table.tpot_resolution, "tau": table.al_resolution},
        "engine_best": table.engine_best.get(key),
    }
