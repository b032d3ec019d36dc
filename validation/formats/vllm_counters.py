"""vLLM spec-decode counters: Prometheus text exposition, the Prometheus UI table
(``series | value``), and ``SpecDecodingStats`` / ``LLM.get_metrics()`` JSON."""

from __future__ import annotations

import re

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.formats.engine import engine_format, json_dicts, not_json
from validation.formats.engine_common import (
    EngineOutput,
    Snapshot,
    count,
    counts_from_survival,
    json_or_none,
    strip_meta,
    walk_mappings,
)

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
    n = count(vals["num_drafts"], nm("num_drafts"))
    gaps = [p for p in range(max(per_pos) + 1) if p not in per_pos] if per_pos else []
    pos_complete = bool(per_pos) and not gaps
    if "num_accepted_tokens" in vals:
        acc = count(vals["num_accepted_tokens"], nm("num_accepted_tokens"))
    elif pos_complete:
        acc = int(sum(per_pos.values()))
    else:
        extra = (f", and {nm('num_accepted_tokens_per_pos')} lacks position(s) "
                 f"{', '.join(map(str, gaps))}" if gaps else
                 f" and there is no {nm('num_accepted_tokens_per_pos')}")
        raise PolyspecInputError(nm("num_accepted_tokens"),
                                 f"missing{extra}: the accepted tokens cannot be "
                                 f"counted{have_note}")
    drafted = (count(vals["num_draft_tokens"], nm("num_draft_tokens"))
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
        counts = counts_from_survival(n, surv, k, label)
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
                per_pos[p] = per_pos.get(p, 0) + count(v, "num_accepted_tokens_per_pos")
            else:
                vals[key] = vals.get(key, 0) + count(v, key)
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


def parse_prometheus_text(text: str, gamma) -> EngineOutput:
    return _counters_from_samples(_prom_samples(text, ui=False), gamma, "prometheus-text")


def parse_prometheus_ui(text: str, gamma) -> EngineOutput:
    return _counters_from_samples(_prom_samples(text, ui=True), gamma, "prometheus-ui")


def parse_vllm_json(text: str, gamma) -> EngineOutput:
    obj = strip_meta(json_or_none(text))
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
    stats = next((d for d in walk_mappings(obj) if any(_canonical(k) for k in d)), None)
    if stats is None:
        raise PolyspecInputError("num_drafts", "no vLLM spec-decode fields in the JSON")
    vals, per_pos = {}, {}
    for k, v in stats.items():
        key = _canonical(k)
        if key == "num_accepted_tokens_per_pos":
            if not isinstance(v, list):
                raise PolyspecInputError(str(k), "must be a list of counts")
            per_pos = {p: count(x, f"{k}[{p}]") for p, x in enumerate(v)}
        elif key is not None:
            vals[key] = v
    if "num_spec_tokens" in stats:
        vals["num_spec_tokens"] = stats["num_spec_tokens"]
    snap = _vllm_counters_snapshot(vals, per_pos, "stats", gamma, "", "vllm-json")
    return EngineOutput("vllm-json", (snap,), "single")


_VLLM_JSON_KEYS = ("num_drafts", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def _is_vllm_json(src) -> bool:
    dicts = json_dicts(src)
    return dicts is not None and (any(any(str(k).replace("vllm:spec_decode_", "").removesuffix(
        "_total") in _VLLM_JSON_KEYS for k in d) for d in dicts) or any(
        str(d.get("name", "")).startswith("vllm:spec_decode") for d in dicts))


def _is_prometheus_ui(src) -> bool:
    if not not_json(src) or "vllm:spec_decode" not in src.body:
        return False
    rows = [ln for ln in src.body.splitlines() if "vllm:spec_decode" in ln]
    return any("|" in ln.split("}")[-1] for ln in rows)


FORMATS = (
    engine_format("prometheus-ui", "vLLM spec-decode counters pasted from the Prometheus UI "
                  "(series | value)", parse_prometheus_ui, _is_prometheus_ui, order=60),
    engine_format("prometheus-text", "vLLM spec-decode counters, Prometheus text exposition",
                  parse_prometheus_text,
                  lambda s: not_json(s) and "vllm:spec_decode" in s.body, order=61),
    engine_format("vllm-json", "vLLM SpecDecodingStats / LLM.get_metrics() as JSON",
                  parse_vllm_json, _is_vllm_json, order=42),
)
