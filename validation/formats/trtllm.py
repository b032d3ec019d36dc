"""TensorRT-LLM ``trtllm-bench`` decoding statistics (per-request averages)."""

from __future__ import annotations

import re

from polyspec_theory.errors import PolyspecInputError
from validation.formats.engine import engine_format, not_json
from validation.formats.engine_common import NUM, EngineOutput, Snapshot, count, half_unit


def parse_trtllm(text: str, gamma) -> EngineOutput:
    def num(pat, name, required=True):
        m = re.search(pat, text, re.M)
        if not m:
            if required:
                raise PolyspecInputError(name, "missing in the trtllm-bench report")
            return None
        return m.group(1)

    n_req = count(num(r"Number of requests:\s*(" + NUM + ")", "Number of requests"),
                  "Number of requests")
    if not 1 <= n_req <= 10**9:
        raise PolyspecInputError("Number of requests", f"{n_req} is not a request count")
    out_len = num(r"Average Output Length \(tokens\):\s*(" + NUM + ")",
                  "Average Output Length (tokens)")
    adt = num(r"^\[ADT\]\s*AVERAGE\s*:\s*(" + NUM + ")", "[ADT] AVERAGE")
    dt = num(r"^\[DT\]\s*AVERAGE\s*:\s*(" + NUM + ")", "[DT] AVERAGE", required=False)
    al = num(r"^\[AL\]\s*AVERAGE\s*:\s*(" + NUM + ")", "[AL] AVERAGE", required=False)
    conc = num(r"Number of concurrent requests:\s*(" + NUM + ")", "concurrent", required=False)
    mode = num(r"DECODING STATISTICS \(([^)]*)\)", "mode", required=False)
    # per request: output = iterations + accepted; draft tokens = k * iterations, where the
    # iterations include the context step that produced the first token (no draft)
    total_out = n_req * float(out_len)
    total_acc = n_req * float(adt)
    iters = total_out - total_acc
    tol = n_req * (half_unit(out_len) + half_unit(adt))
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


FORMATS = (
    engine_format("trtllm-bench", "TensorRT-LLM trtllm-bench decoding statistics",
                  parse_trtllm,
                  lambda s: not_json(s) and ("DECODING STATISTICS" in s.body
                                             or re.search(r"^\[AL\]", s.body, re.M) is not None),
                  order=55, group="engine-log"),
)
