"""vLLM per-request ``speculative_decoding`` metrics (``acceptance_histogram``)."""

from __future__ import annotations

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.formats.engine import engine_format, json_dicts
from validation.formats.engine_common import (
    EngineOutput,
    Snapshot,
    check,
    count,
    histogram_counts,
    json_or_none,
    printed,
    strip_meta,
    walk_mappings,
)


def parse_vllm_per_request(text: str, gamma) -> EngineOutput:
    obj = strip_meta(json_or_none(text))
    recs = [d["speculative_decoding"] for d in walk_mappings(obj)
            if isinstance(d.get("speculative_decoding"), dict)]
    snaps, checks, warnings = [], [], []
    for j, sd in enumerate(recs, 1):
        label = f"request {j}"
        f = f"speculative_decoding[{j - 1}]" if len(recs) > 1 else "speculative_decoding"
        if "num_spec_steps" not in sd:
            raise PolyspecInputError(f"{f}.num_spec_steps", "missing: the number of rounds is "
                                     "unknown")
        n = count(sd["num_spec_steps"], f"{f}.num_spec_steps")
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
        if hist is not None and (not isinstance(hist, list) or len(hist) != k + 1):
            raise PolyspecInputError(f"{f}.acceptance_histogram", f"must have {k + 1} cells "
                                     f"(0..{k} accepted of {k} drafts), got "
                                     f"{len(hist) if isinstance(hist, list) else repr(hist)}")
        if hist is not None:
            counts, tot = histogram_counts(hist, k, label, n, f"{f}.acceptance_histogram",
                                           "num_spec_steps")
            if acc is not None and tot != count(acc, f"{f}.num_accepted_draft_tokens"):
                raise PolyspecInputError(f"{f}.acceptance_histogram", f"implies {tot} accepted "
                                         f"tokens, but num_accepted_draft_tokens is {acc}")
            acc = tot
            src = "exact (acceptance_histogram)"
        if acc is None:
            raise PolyspecInputError(f"{f}.num_accepted_draft_tokens", "missing (and no "
                                     "acceptance_histogram)")
        acc = count(acc, f"{f}.num_accepted_draft_tokens")
        drafted = sd.get("num_draft_tokens")
        drafted = None if drafted is None else count(drafted, f"{f}.num_draft_tokens")
        engine = {}
        for key in ("mean_acceptance_length", "draft_acceptance_rate"):
            if key in sd:
                engine[key] = printed(sd[key], f"{f}.{key}")
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if "mean_acceptance_length" in sd:
            checks.append(check(label, "mean acceptance length", s.mean_acceptance_length,
                                 engine["mean_acceptance_length"]))
        if "draft_acceptance_rate" in sd and drafted:
            checks.append(check(label, "draft acceptance rate (accepted / drafted)",
                                 acc / drafted, engine["draft_acceptance_rate"]))
    if not recs:
        raise PolyspecInputError("speculative_decoding", "no per-request object found")
    if any(c["figure"].startswith("draft acceptance rate") for c in checks):
        warnings.append("draft_acceptance_rate is accepted / drafted tokens, not alpha")
    return EngineOutput("vllm-per-request", tuple(snaps), "per-request",
                        warnings=tuple(warnings), checks=tuple(checks))


FORMATS = (
    engine_format("vllm-per-request", "vLLM per-request speculative_decoding metrics "
                  "(acceptance_histogram)", parse_vllm_per_request,
                  lambda s: any("speculative_decoding" in d for d in json_dicts(s) or ()),
                  order=40),
)
