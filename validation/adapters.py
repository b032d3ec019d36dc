"""Engine metrics -> acceptance data for the law fits (:class:`AcceptanceCounts`).

**vLLM** (v1 spec-decode counters; ``vllm/v1/spec_decode/metrics.py``):
``num_drafts`` (verification rounds), ``num_draft_tokens`` (drafted tokens),
``num_accepted_tokens`` and ``num_accepted_tokens_per_pos[k]`` = rounds whose token at draft
position ``k`` (0-based) was accepted, i.e. ``#{A >= k+1}``. So ``per_pos[k] / num_drafts``
estimates ``P(A >= k+1)`` and, when every draft has the configured length ``gamma =
len(per_pos)``, the histogram ``#{A = k} = per_pos[k-1] - per_pos[k]`` is exact. vLLM's "mean
acceptance length" counts the bonus token: ``1 + num_accepted_tokens / num_drafts``. Accepted
as Prometheus text (``vllm:spec_decode_num_drafts_total ...``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} ...``; counters of several
engines are summed) or JSON (the ``SpecDecodingStats`` field names, a ``{metric name: value}``
mapping, or ``LLM.get_metrics()`` records ``{"name", "labels", "value" | "values"}``).

**SGLang** (per-request ``meta_info``): ``spec_verify_ct`` (verification rounds),
``spec_accept_token_num`` (accepted draft tokens), ``spec_draft_token_num`` (=
``spec_verify_ct x (speculative_num_draft_tokens - 1)``, so the per-round cap is their ratio)
and ``spec_accept_histogram[n]`` = rounds that accepted exactly ``n`` draft tokens. With the
histogram the sample is exact; with totals only, :func:`sglang_iid_alpha` matches the mean.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory._input import PolyspecInputError, as_int, as_int_array
from polyspec_theory.counts import AcceptanceCounts
from polyspec_theory.laws import IIDGeometric

__all__ = [
    "VllmSpecDecodeCounters",
    "parse_prometheus_text",
    "vllm_counters_from_prometheus",
    "vllm_counters_from_json",
    "load_vllm_metrics",
    "SglangRequestStats",
    "sglang_stats_from_meta",
    "load_sglang_requests",
    "sglang_acceptance_counts",
    "sglang_iid_alpha",
]

_VLLM_FIELDS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                "num_accepted_tokens_per_pos")
_PREFIX = "vllm:spec_decode_"


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VllmSpecDecodeCounters:
    """vLLM's cumulative spec-decode counters (sum over engines)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: tuple[int, ...]
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def create(cls, num_drafts, num_draft_tokens, num_accepted_tokens,
               num_accepted_tokens_per_pos, *, strict: bool = True) -> VllmSpecDecodeCounters:
        """Validate the counters. ``strict``: the per-position counts must add up to
        ``num_accepted_tokens`` (vLLM increments both together); otherwise a note is kept."""
        n = as_int(num_drafts, "num_drafts", low=1)
        nd = as_int(num_draft_tokens, "num_draft_tokens", low=0)
        na = as_int(num_accepted_tokens, "num_accepted_tokens", low=0)
        pos = as_int_array(num_accepted_tokens_per_pos, "num_accepted_tokens_per_pos", low=0)
        gamma = pos.size
        notes = []
        if nd > gamma * n:
            raise PolyspecInputError(
                "num_draft_tokens",
                f"{nd} drafted tokens exceed num_drafts x positions = {n} x {gamma}",
            )
        if na > nd:
            raise PolyspecInputError(
                "num_accepted_tokens", f"{na} accepted tokens exceed the {nd} drafted tokens"
            )
        if int(pos.sum()) != na:
            msg = (f"per-position counts add up to {int(pos.sum())}, "
                   f"but num_accepted_tokens is {na}")
            if strict:
                raise PolyspecInputError("num_accepted_tokens_per_pos", msg)
            notes.append(msg + " (counters scraped at different instants?)")
        if nd < gamma * n:
            notes.append(
                f"{gamma * n - nd} of {gamma * n} draft slots were not drafted (some drafts "
                f"were shorter than {gamma}); treating every draft as capped at {gamma}, the "
                "positional hazards past a short draft are biased low"
            )
        # validates monotonicity and per_pos[0] <= num_drafts
        AcceptanceCounts.from_survival_counts(n, pos, gamma)
        return cls(n, nd, na, tuple(int(x) for x in pos), tuple(notes))

    @property
    def num_spec_tokens(self) -> int:
        """``gamma``: the number of draft positions."""
        return len(self.num_accepted_tokens_per_pos)

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's convention, bonus token included: ``1 + accepted / drafts`` (= ``E[L]``)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def draft_acceptance_rate(self) -> float:
        """``accepted / drafted`` tokens (NaN if nothing was drafted)."""
        if self.num_draft_tokens == 0:
            return math.nan
        return self.num_accepted_tokens / self.num_draft_tokens

    def per_position_rates(self) -> np.ndarray:
        """``per_pos[k] / num_drafts`` = estimate of ``P(A >= k+1)``, k = 0..gamma-1."""
        return np.asarray(self.num_accepted_tokens_per_pos, dtype=np.float64) / self.num_drafts

    def survival(self) -> np.ndarray:
        """``P(A >= k)`` for k = 0..gamma (``S_0 = 1``)."""
        return np.concatenate([[1.0], self.per_position_rates()])

    def to_acceptance_counts(self, source: str = "vllm") -> AcceptanceCounts:
        """The exact histogram of ``A`` over ``num_drafts`` rounds capped at ``gamma``."""
        return AcceptanceCounts.from_survival_counts(
            self.num_drafts, self.num_accepted_tokens_per_pos, self.num_spec_tokens,
            source, self.notes,
        )

    def to_dict(self) -> dict:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
            "num_spec_tokens": self.num_spec_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "notes": list(self.notes),
        }


_SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"
    r"\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _unescape(v: str) -> str:
    return v.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def parse_prometheus_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples ``(name, labels, value)`` of a Prometheus text exposition (comments skipped).

    Errors name the offending line.
    """
    if not isinstance(text, str):
        raise PolyspecInputError("metrics", "must be the text of a Prometheus exposition")
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise PolyspecInputError("metrics", f"line {lineno}: not a Prometheus sample: {raw!r}")
        labels = {}
        body = m.group("labels")
        if body:
            pos = 0
            body = body.strip()
            while pos < len(body):
                lm = _LABEL_RE.match(body, pos)
                if not lm:
                    raise PolyspecInputError(
                        "metrics", f"line {lineno}: malformed labels {{{body}}}"
                    )
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        vs = m.group("value")
        try:
            value = float(vs)
        except ValueError:
            raise PolyspecInputError(
                "metrics", f"line {lineno}: value {vs!r} is not a number"
            ) from None
        out.append((m.group("name"), labels, value))
    return out


def _canonical(name: str) -> str | None:
    """Map a metric / field name to one of :data:`_VLLM_FIELDS` (None if unrelated)."""
    n = name
    if n.startswith(_PREFIX):
        n = n[len(_PREFIX):]
    elif n.startswith("vllm:"):
        return None
    if n.endswith("_created"):
        return None
    if n.endswith("_total"):
        n = n[: -len("_total")]
    return n if n in _VLLM_FIELDS else None


def _select(labels: dict, match: dict | None) -> bool:
    return all(labels.get(k) == str(v) for k, v in (match or {}).items())


def _count(value, field_name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return as_int(value, field_name, low=0)


def vllm_counters_from_prometheus(text: str, match: dict | None = None, *,
                                  strict: bool = True) -> VllmSpecDecodeCounters:
    """Read the spec-decode counters from Prometheus text; samples of several engines (label
    sets differing in anything but ``position``) are summed. ``match`` keeps only samples whose
    labels have the given values (e.g. ``{"model_name": "llama"}``)."""
    totals = {k: 0 for k in _VLLM_FIELDS[:3]}
    seen = set()
    per_pos: dict[int, int] = {}
    models = set()
    for name, labels, value in parse_prometheus_text(text):
        key = _canonical(name)
        if key is None or not _select(labels, match):
            continue
        if "model_name" in labels:
            models.add(labels["model_name"])
        seen.add(key)
        if key == "num_accepted_tokens_per_pos":
            if "position" not in labels:
                raise PolyspecInputError(
                    "num_accepted_tokens_per_pos", f"sample of {name} has no position label"
                )
            p = as_int(int(labels["position"]) if labels["position"].isdigit()
                          else labels["position"], "position", low=0)
            per_pos[p] = per_pos.get(p, 0) + _count(value, name)
        else:
            totals[key] += _count(value, name)
    if len(models) > 1:
        raise PolyspecInputError(
            "model_name", f"samples of several models ({', '.join(sorted(models))}); "
            "select one with match={'model_name': ...}"
        )
    missing = [k for k in _VLLM_FIELDS if k not in seen]
    if missing:
        raise PolyspecInputError(
            missing[0], f"no vllm:spec_decode_{missing[0]} samples in the metrics text"
        )
    gamma = max(per_pos) + 1
    gaps = [p for p in range(gamma) if p not in per_pos]
    if gaps:
        raise PolyspecInputError("num_accepted_tokens_per_pos", f"missing position {gaps[0]}")
    return VllmSpecDecodeCounters.create(
        totals["num_drafts"], totals["num_draft_tokens"], totals["num_accepted_tokens"],
        [per_pos[p] for p in range(gamma)], strict=strict,
    )


def vllm_counters_from_json(obj, *, strict: bool = True) -> VllmSpecDecodeCounters:
    """From ``{"num_drafts": .., "num_draft_tokens": .., "num_accepted_tokens": ..,
    "num_accepted_tokens_per_pos": [..]}`` (names may carry the ``vllm:spec_decode_`` prefix /
    ``_total`` suffix) or a list of ``LLM.get_metrics()`` records (summed over label sets)."""
    vals: dict[str, object] = {}
    if isinstance(obj, list):
        for i, rec in enumerate(obj):
            if not isinstance(rec, dict) or "name" not in rec:
                raise PolyspecInputError(f"metrics[{i}]", "must be an object with a 'name'")
            key = _canonical(str(rec["name"]))
            if key is None:
                continue
            if key == "num_accepted_tokens_per_pos":
                if "values" not in rec:
                    raise PolyspecInputError(f"metrics[{i}].values", "missing required field")
                v = as_int_array(rec["values"], f"metrics[{i}].values", low=0)
                prev = vals.get(key)
                if prev is not None and len(prev) != v.size:
                    raise PolyspecInputError(f"metrics[{i}].values",
                                             "per-position vectors differ in length")
                vals[key] = v if prev is None else prev + v
            else:
                if "value" not in rec:
                    raise PolyspecInputError(f"metrics[{i}].value", "missing required field")
                vals[key] = vals.get(key, 0) + _count(rec["value"], f"metrics[{i}].value")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            key = _canonical(str(k))
            if key is not None:
                if key in vals:
                    raise PolyspecInputError(str(k), f"{key} given twice")
                vals[key] = v
    else:
        raise PolyspecInputError("metrics", "must be a JSON object or a list of metric records")
    for k in _VLLM_FIELDS:
        if k not in vals:
            raise PolyspecInputError(k, "missing required field")
    return VllmSpecDecodeCounters.create(*(vals[k] for k in _VLLM_FIELDS), strict=strict)


def load_vllm_metrics(path, match: dict | None = None, *,
                      strict: bool = True) -> VllmSpecDecodeCounters:
    """Read a vLLM metrics file: JSON (by content) or Prometheus text."""
    p = Path(path)
    if not p.is_file():
        raise PolyspecInputError("metrics", f"file not found: {p}")
    text = p.read_text(encoding="utf-8")
    if text.lstrip()[:1] in ("{", "["):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise PolyspecInputError(
                "metrics", f"invalid JSON in {p} (line {e.lineno}): {e.msg}"
            ) from None
        if match:
            raise PolyspecInputError("match", "label matching applies to Prometheus text only")
        return vllm_counters_from_json(obj, strict=strict)
    return vllm_counters_from_prometheus(text, match, strict=strict)


# --------------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SglangRequestStats:
    """One request's speculative-decoding ``meta_info``; ``cap`` = draft tokens per round."""

    request_id: str
    verify_ct: int
    accept_token_num: int
    draft_token_num: int
    cap: int
    histogram: tuple[int, ...] | None

    @property
    def mean_accepted(self) -> float:
        return self.accept_token_num / self.verify_ct

    @property
    def acceptance_rate(self) -> float:
        return self.accept_token_num / self.draft_token_num


def sglang_stats_from_meta(meta: dict, field: str = "meta_info",
                           cap: int | None = None) -> SglangRequestStats:
    """Validate one ``meta_info`` (or a whole response ``{"meta_info": {...}}``).

    ``cap`` overrides the per-round draft length (``spec_draft_token_num / spec_verify_ct``
    otherwise; give it for tree drafting, where the accepted path is at most the tree depth).
    """
    if isinstance(meta, dict) and "meta_info" in meta and isinstance(meta["meta_info"], dict):
        meta = meta["meta_info"]
        field = f"{field}.meta_info" if field != "meta_info" else field
    if not isinstance(meta, dict):
        raise PolyspecInputError(field, "must be an object")
    for k in ("spec_verify_ct", "spec_accept_token_num", "spec_draft_token_num"):
        if k not in meta:
            raise PolyspecInputError(f"{field}.{k}", "missing required field")
    v = as_int(meta["spec_verify_ct"], f"{field}.spec_verify_ct", low=1)
    acc = as_int(meta["spec_accept_token_num"], f"{field}.spec_accept_token_num", low=0)
    drafted = as_int(meta["spec_draft_token_num"], f"{field}.spec_draft_token_num", low=1)
    if cap is None:
        if drafted % v:
            raise PolyspecInputError(
                f"{field}.spec_draft_token_num",
                f"{drafted} is not a multiple of spec_verify_ct = {v}; pass the cap explicitly",
            )
        cap = drafted // v
    else:
        cap = as_int(cap, "cap", low=1)
    if acc > v * cap:
        raise PolyspecInputError(
            f"{field}.spec_accept_token_num",
            f"{acc} accepted tokens exceed spec_verify_ct x cap = {v} x {cap}",
        )
    hist = None
    if meta.get("spec_accept_histogram") is not None:
        h = as_int_array(meta["spec_accept_histogram"], f"{field}.spec_accept_histogram",
                            low=0)
        if h.size > cap + 1 and h[cap + 1:].any():
            raise PolyspecInputError(
                f"{field}.spec_accept_histogram",
                f"has rounds with more than cap = {cap} accepted tokens",
            )
        if int(h.sum()) != v:
            raise PolyspecInputError(
                f"{field}.spec_accept_histogram",
                f"counts {int(h.sum())} rounds but spec_verify_ct is {v}",
            )
        total = int(np.dot(np.arange(h.size), h))
        if total != acc:
            raise PolyspecInputError(
                f"{field}.spec_accept_histogram",
                f"implies {total} accepted tokens but spec_accept_token_num is {acc}",
            )
        hist = tuple(int(x) for x in h[: cap + 1])
    rid = meta.get("id", "")
    return SglangRequestStats(str(rid), v, acc, drafted, cap, hist)


def load_sglang_requests(path_or_obj, cap: int | None = None) -> list[SglangRequestStats]:
    """Per-request stats from a file (JSON response / list of responses, or JSON lines) or an
    already-parsed object. Requests without speculative fields are rejected by name."""
    obj = path_or_obj
    src = "requests"
    if isinstance(path_or_obj, (str, Path)):
        p = Path(path_or_obj)
        if not p.is_file():
            raise PolyspecInputError("requests", f"file not found: {p}")
        text = p.read_text(encoding="utf-8")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    obj.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise PolyspecInputError(
                        "requests", f"{p} line {lineno}: invalid JSON ({e.msg})"
                    ) from None
    if isinstance(obj, dict):
        obj = [obj]
    if not isinstance(obj, list) or not obj:
        raise PolyspecInputError(src, "must be a request object or a non-empty list of them")
    return [sglang_stats_from_meta(r, f"{src}[{i}]", cap) for i, r in enumerate(obj)]


def sglang_acceptance_counts(requests, cap: int | None = None) -> AcceptanceCounts:
    """Exact acceptance histogram pooled over requests (each needs ``spec_accept_histogram``)."""
    reqs = requests if _is_stats_list(requests) else load_sglang_requests(requests, cap)
    out = None
    for i, r in enumerate(reqs):
        if r.histogram is None:
            raise PolyspecInputError(
                f"requests[{i}].spec_accept_histogram",
                "missing; without histograms only the mean is known (use sglang_iid_alpha)",
            )
        c = AcceptanceCounts.from_histogram(r.histogram, r.cap, "sglang")
        out = c if out is None else out.merge(c)
    return out


def sglang_iid_alpha(requests, cap: int | None = None) -> float:
    """iid ``alpha`` matching the pooled mean accepted count (all requests must share a cap)."""
    reqs = requests if _is_stats_list(requests) else load_sglang_requests(requests, cap)
    caps = {r.cap for r in reqs}
    if len(caps) != 1:
        raise PolyspecInputError("cap", f"requests have different caps {sorted(caps)}")
    rounds = sum(r.verify_ct for r in reqs)
    acc = sum(r.accept_token_num for r in reqs)
    return IIDGeometric.from_mean(acc / rounds, caps.pop()).alpha


def _is_stats_list(x) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(r, SglangRequestStats) for r in x)
