"""The registry of engine formats: names, detection from the content, and the parser of
each (one module per engine)."""

from __future__ import annotations

import re
from dataclasses import replace

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.engines.common import (
    EngineOutput,
    check_counts,
    json_or_none,
    read_engine_text,
    strip_meta,
    walk_mappings,
)
from validation.engines.llamacpp import parse_llamacpp_server, parse_llamacpp_speculative
from validation.engines.sglang import parse_sglang_log, parse_sglang_meta
from validation.engines.trtllm import parse_trtllm
from validation.engines.vllm_counters import (
    parse_prometheus_text,
    parse_prometheus_ui,
    parse_vllm_json,
)
from validation.engines.vllm_logs import parse_vllm_v0, parse_vllm_v1
from validation.engines.vllm_offline import parse_vllm_offline
from validation.engines.vllm_per_request import parse_vllm_per_request

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


_PARSERS = {
    "vllm-v0-log": parse_vllm_v0,
    "vllm-v1-log": parse_vllm_v1,
    "vllm-offline-example": parse_vllm_offline,
    "prometheus-text": parse_prometheus_text,
    "prometheus-ui": parse_prometheus_ui,
    "vllm-json": parse_vllm_json,
    "vllm-per-request": parse_vllm_per_request,
    "sglang-log": parse_sglang_log,
    "sglang-meta": parse_sglang_meta,
    "llamacpp-speculative": parse_llamacpp_speculative,
    "llamacpp-server": parse_llamacpp_server,
    "trtllm-bench": parse_trtllm,
}


_SGLANG_KEYS = ("spec_verify_ct",)
_VLLM_JSON_KEYS = ("num_drafts", "num_accepted_tokens", "num_accepted_tokens_per_pos")


# the log formats, each with the one test that recognises it; their lines can sit in one
# file next to another's (a log of two engines), which is refused
_LOG_MARKERS = (
    ("vllm-v0-log", lambda t: "Speculative metrics:" in t),
    ("vllm-v1-log", lambda t: "SpecDecoding metrics:" in t),
    ("sglang-log", lambda t: "Decode batch." in t and "accept len" in t),
    ("llamacpp-speculative", lambda t: re.search(r"^\s*n_predict\s*=", t, re.M) is not None
     and re.search(r"^\s*n_(drafted|accept|draft)\s*=", t, re.M) is not None),
    ("llamacpp-server", lambda t: "#gen drafts" in t or "draft acceptance =" in t),
    ("trtllm-bench", lambda t: "DECODING STATISTICS" in t
     or re.search(r"^\[AL\]", t, re.M) is not None),
)


def detect_format(text: str) -> str:
    """The format of an engine output (see the module docstring); a one-line error when
    nothing is recognised."""
    obj = json_or_none(text)
    if obj is not None:
        dicts = list(walk_mappings(strip_meta(obj)))
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
    found = [name for name, hit in _LOG_MARKERS if hit(text)]
    if len(found) > 1:
        raise PolyspecInputError(
            "format", f"lines of several engine formats in one file ({', '.join(found)}): "
            "interleaved logs cannot be told apart by run; split the file, or pass --format "
            "to read one format's lines only")
    if found:
        return found[0]
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
    if not text.strip():
        raise PolyspecInputError("file", f"is empty: {path}")
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
        why = f": every one skipped ({'; '.join(out.skipped)})" if out.skipped else ""
        raise PolyspecInputError("rounds", f"no usable {FORMATS[fmt]} snapshot found{why}"[:600])
    for s in out.snapshots:
        check_counts(s)
    return replace(out, source=source)
