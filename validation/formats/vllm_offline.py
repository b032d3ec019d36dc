"""vLLM V1 ``examples/offline_inference/spec_decode.py`` printout (``LLM.get_metrics()``)."""

from __future__ import annotations

import re

from polyspec_theory.errors import PolyspecInputError
from validation.formats.engine import engine_format, not_json
from validation.formats.engine_common import (
    NUM,
    EngineOutput,
    Snapshot,
    check,
    count,
    counts_from_survival,
    decimals,
    survival_from_printed,
)


def parse_vllm_offline(text: str, gamma) -> EngineOutput:
    runs, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or set(s) <= {"-"}:
            continue
        m = re.match(r"acceptance at token (\d+):\s*(" + NUM + ")$", s)
        if m:
            if cur is None:
                raise PolyspecInputError("num_drafts", "per-position rates before the totals")
            cur["rates"].append((int(m.group(1)), m.group(2)))
            continue
        m = re.match(r"([A-Za-z_ ]+):\s*(" + NUM + ")$", s)
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
        n = count(kv["num_drafts"], "num_drafts")
        acc = count(kv["num_accepted_tokens"], "num_accepted_tokens")
        drafted = count(kv["num_draft_tokens"], "num_draft_tokens") if (
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
            surv = survival_from_printed(rates, n, acc, f"{label}.acceptance at token")
            counts = counts_from_survival(n, surv, k, label)
            src = (f"reconstructed from per-position rates printed with "
                   f"{decimals(rates[0])} decimals (each count within the rounding)")
        engine = {}
        if "mean acceptance length" in kv:
            engine["mean_acceptance_length"] = kv["mean acceptance length"]
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if "mean acceptance length" in kv:
            checks.append(check(label, "mean acceptance length", s.mean_acceptance_length,
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


FORMATS = (
    engine_format("vllm-offline-example", "vLLM V1 offline spec_decode.py printout "
                  "(LLM.get_metrics())", parse_vllm_offline,
                  lambda s: not_json(s) and re.search(r"^\s*num_drafts:\s*\d", s.body, re.M)
                  is not None, order=62),
)
