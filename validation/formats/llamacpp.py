"""llama.cpp: ``llama-speculative`` statistics and llama-server draft statistics."""

from __future__ import annotations

import re
from dataclasses import replace

from polyspec_theory.errors import PolyspecInputError
from validation.formats.engine import engine_format, not_json
from validation.formats.engine_common import (
    NUM,
    EngineOutput,
    Snapshot,
    check,
    counts_from_survival,
    decimals,
    half_unit,
    integers_in,
    line_field,
    rounds_from_mal,
    survival_from_printed,
)


def parse_llamacpp_speculative(text: str, gamma) -> EngineOutput:
    runs = len(re.findall(r"^\s*n_predict\s*=", text, re.M))
    if runs > 1:
        raise PolyspecInputError("n_predict", f"{runs} llama-speculative runs in one file: "
                                 "their statistics cannot be told apart; keep one run")
    kv = {}
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        m = re.search(r"^\s*" + key + r"\s*=\s*(\d+)", text, re.M)
        if not m:
            raise PolyspecInputError(key, "missing in the llama-speculative statistics")
        kv[key] = int(m.group(1))
    acc_pct = re.search(r"^\s*accept\s*=\s*(" + NUM + ")%", text, re.M)
    k, n_pred, n_dft, n_acc = kv["n_draft"], kv["n_predict"], kv["n_drafted"], kv["n_accept"]
    if gamma is not None and gamma != k:
        raise PolyspecInputError("--gamma", f"the statistics state n_draft = {k}")
    warnings, checks, timing = [], [], {}
    for pat, name in ((r"decoded\s+(\d+)\s+tokens in\s+(" + NUM + r")\s+seconds", "decoded"),
                      (r"generated\s+(\d+)\s+tokens in\s+(" + NUM + r")\s+seconds",
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
        checks.append(check("statistics", "accept (n_accept / n_drafted, %)", n_acc / n_dft,
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
        rows = re.findall(r"\|\s*(pp|tg)\s*(\d+)\s*\|\s*(" + NUM + r")\s*±", text)
        if rows:
            timing["llama_bench"] = [{"test": f"{a} {b}", "tokens_per_s": float(c)}
                                     for a, b, c in rows]
    return EngineOutput("llamacpp-speculative", (s,), "single", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=1, timing=timing)


def parse_llamacpp_server(text: str, gamma) -> EngineOutput:
    stats = [ln for ln in text.splitlines() if "#gen drafts" in ln]
    slots = [ln for ln in text.splitlines() if "draft acceptance =" in ln]
    if len(stats) > 1 or (not stats and len(slots) > 1):
        raise PolyspecInputError("#gen drafts", f"{max(len(stats), len(slots))} llama-server "
                                 "statistics lines (several runs or slots in one file): keep "
                                 "the one run you mean")
    line = stats[0] if stats else None
    slot = slots[0] if slots else None
    warnings, checks, timing = [], [], {}
    m = re.search(r"eval time\s*=\s*(" + NUM + r")\s*ms\s*/\s*(\d+)\s*tokens", text)
    if m:
        timing = {"eval_ms": float(m.group(1)), "eval_tokens": int(m.group(2)),
                  "ms_per_token": float(m.group(1)) / int(m.group(2))}
    if line is not None:
        n = int(line_field(r"#gen drafts\s*=\s*(\d+)", line, "#gen drafts"))
        acc = int(line_field(r"#acc tokens\s*=\s*(\d+)", line, "#acc tokens"))
        drafted = int(line_field(r"#gen tokens\s*=\s*(\d+)", line, "#gen tokens"))
        acc_drafts = line_field(r"#acc drafts\s*=\s*(\d+)", line, "#acc drafts", required=False)
        mal = line_field(r"#mean acc len\s*=\s*(" + NUM + ")", line, "mal", required=False)
        pos = line_field(r"#acc rate/pos\s*=\s*\(([^)]*)\)", line, "pos", required=False)
    elif slot is not None:
        acc = int(line_field(r"\(\s*(\d+)\s*accepted", slot, "accepted"))
        drafted = int(line_field(r"(\d+)\s*generated\s*\)", slot, "generated"))
        mal = line_field(r"mean acceptance length\s*=\s*(" + NUM + ")", slot, "mal",
                     required=False)
        pos = line_field(r"acceptance rate per position\s*=\s*\(([^)]*)\)", slot, "pos",
                     required=False)
        acc_drafts = None
        if mal is None:
            raise PolyspecInputError("#gen drafts", "missing (and no mean acceptance length): "
                                     "the number of rounds is unknown")
        lo, hi = rounds_from_mal(acc, mal)
        ns = integers_in(lo, hi)
        if len(ns) != 1:
            raise PolyspecInputError("#gen drafts", f"missing; the mean acceptance length {mal}"
                                     f" allows {len(ns)} round counts")
        n = ns[0]
        warnings.append(f"rounds = {n} derived from the mean acceptance length {mal}")
    else:
        raise PolyspecInputError("#gen drafts", "no llama-server draft statistics line")
    if n == 0:
        raise PolyspecInputError("#gen drafts", "is 0: no speculative round was recorded")
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
        surv = survival_from_printed(rates, n, acc, "#acc rate/pos")
        if acc_drafts is not None and int(acc_drafts) != surv[0]:
            raise PolyspecInputError("#acc drafts", f"{acc_drafts} drafts with an accepted "
                                     f"token, but the position-0 rate gives {surv[0]}")
        counts = counts_from_survival(n, surv, k, "statistics")
        exact = all(half_unit(x) * n < 0.5 for x in rates)
        src = "exact (per-position rates x drafts)" if exact else (
            f"reconstructed from per-position rates printed with {decimals(rates[0])} decimals")
    s = Snapshot("statistics", n, acc, drafted, k, counts, src,
                 {"mean acc len": mal} if mal else {})
    if mal is not None:
        checks.append(check("statistics", "mean acceptance length", s.mean_acceptance_length,
                             mal))
    if slot is not None:
        da = line_field(r"draft acceptance\s*=\s*(" + NUM + ")", slot, "da", required=False)
        if da is not None and drafted:
            checks.append(check("statistics", "draft acceptance (accepted / generated)",
                                 acc / drafted, da))
            warnings.append("llama-server's 'draft acceptance' is accepted / generated draft "
                            "tokens, not alpha")
    return EngineOutput("llamacpp-server", (s,), "single", warnings=tuple(warnings),
                        checks=tuple(checks), timing=timing)


def _is_speculative(src) -> bool:
    t = src.body
    return (not_json(src) and re.search(r"^\s*n_predict\s*=", t, re.M) is not None
            and re.search(r"^\s*n_(drafted|accept|draft)\s*=", t, re.M) is not None)


FORMATS = (
    engine_format("llamacpp-speculative", "llama.cpp llama-speculative statistics",
                  parse_llamacpp_speculative, _is_speculative, order=53, group="engine-log"),
    engine_format("llamacpp-server", "llama-server draft statistics", parse_llamacpp_server,
                  lambda s: not_json(s) and ("#gen drafts" in s.body
                                             or "draft acceptance =" in s.body),
                  order=54, group="engine-log"),
)
