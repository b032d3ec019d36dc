"""vLLM log lines: V0 ``Speculative metrics:`` (cumulative counters) and V1
``SpecDecoding metrics:`` (per-interval counters)."""

from __future__ import annotations

import math
import re

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
    line_field,
    rounds_from_mal,
    survival_from_printed,
)


# ------------------------------------------------------------------------------------------
# vLLM V0 log (cumulative counters)
# ------------------------------------------------------------------------------------------
def _cumulative_to_intervals(rows, keys):
    """Per-interval differences of cumulative rows (dicts of ints); a decrease of any counter
    is an engine restart: that row starts a new segment. Returns (intervals, n_restarts).

    A row that could continue more than one segment (a later row at or above the last row of
    an earlier segment as well as of the current one) cannot be told apart: two engines'
    lines interleaved, or a restarted engine grown past the old counts. Refused, naming the
    line: differencing it against either would mix two engines' counts."""
    def above(r, last):
        return all(r[k] >= last[k] for k in keys)

    out, prev, restarts, ended = [], None, 0, []
    for r in rows:
        if prev is not None and not above(r, prev):
            restarts += 1
            ended.append(prev)
            prev = None
        if ended and any(above(r, last) for last in ended) and (prev is None
                                                                or above(r, prev)):
            raise PolyspecInputError(
                "Speculative metrics", f"{r['label']}: the cumulative counters went down "
                f"before and this line is at or above an earlier run's last counts: two "
                "engines' lines interleaved (or a restarted engine grown past the old one), "
                "whose rounds cannot be told apart; give one engine's lines")
        d = dict(r) if prev is None else {**r, **{k: r[k] - prev[k] for k in keys}}
        out.append(d)
        prev = r
    return out, restarts


def parse_vllm_v0(text: str, gamma) -> EngineOutput:
    rows, checks, warnings = [], [], []
    lines = [ln for ln in text.splitlines() if "Speculative metrics:" in ln]
    for j, line in enumerate(lines, 1):
        label = f"line {j}"
        k = int(line_field(r"Number of speculative tokens:\s*(\d+)", line,
                       "Number of speculative tokens"))
        acc_any = int(line_field(r"Number of accepted tokens:\s*(\d+)", line,
                             "Number of accepted tokens"))
        drafted = int(line_field(r"Number of draft tokens:\s*(\d+)", line,
                                 "Number of draft tokens"))
        emitted = int(line_field(r"Number of emitted tokens:\s*(\d+)", line,
                             "Number of emitted tokens"))
        rate = line_field(r"Draft acceptance rate:\s*(" + NUM + ")", line, "rate", required=False)
        eff = line_field(r"System efficiency:\s*(" + NUM + ")", line, "eff", required=False)
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
            checks.append(check(raw["label"], "draft acceptance rate (accepted at any "
                                 "position / drafted)", raw["acc_any"] / raw["drafted"],
                                 raw["rate"]))
        if raw["eff"] is not None and n_cum:
            checks.append(check(raw["label"], "system efficiency (emitted / (rounds (k+1)))",
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
def parse_vllm_v1(text: str, gamma) -> EngineOutput:
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
        acc = line_field(r"Accepted:\s*(\d+)\s*tokens", line, "Accepted")
        drafted = line_field(r"Drafted:\s*(\d+)\s*tokens", line, "Drafted")
        acc, drafted = int(acc), int(drafted)
        mal = line_field(r"Mean acceptance length:\s*(" + NUM + ")", line, "mal", required=False)
        rate = line_field(r"Draft acceptance rate:\s*(" + NUM + ")%", line, "rate", required=False)
        pp = re.search(r"Per-position acceptance rate:\s*((?:" + NUM + r"\s*,\s*)*" + NUM +
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
            lo, hi = rounds_from_mal(acc, mal)
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
            surv = survival_from_printed(rates_txt, n, acc,
                                         f"{label}.Per-position acceptance rate")
            counts = counts_from_survival(n, surv, k, label)
            exact = all(half_unit(x) * n < 0.5 for x in rates_txt)
            src = ("exact (per-position rates x rounds)" if exact else
                   f"reconstructed from per-position rates printed with "
                   f"{decimals(rates_txt[0])} decimals (each count within the rounding)")
        engine = {}
        if mal is not None:
            engine["mean_acceptance_length"] = mal
        if rate is not None:
            engine["draft_acceptance_rate"] = rate + "%"
        s = Snapshot(label, n, acc, drafted, k, counts, src, engine)
        snaps.append(s)
        if mal is not None:
            checks.append(check(label, "mean acceptance length", s.mean_acceptance_length, mal))
        if rate is not None:
            checks.append(check(label, "draft acceptance rate (accepted / drafted, %)",
                                 acc / drafted, rate, 100.0))
    if any(c["figure"].startswith("draft acceptance rate") for c in checks):
        warnings.append("the engine's 'Draft acceptance rate' is accepted / drafted tokens, "
                        "not the per-position alpha (see the fitted laws)")
    ks = sorted({s.cap for s in snaps})
    if len(ks) > 1:
        warnings.append(f"the draft length differs between intervals ({', '.join(map(str, ks))}"
                        " speculative tokens): the pooled law mixes them; fit each draft "
                        "length on its own lines")
    conc = max(running) if running else None
    if conc is not None and conc > 1:
        warnings.append(f"up to {conc} concurrent requests: acceptance counts are usable, "
                        "but timings are not single-stream")
    return EngineOutput("vllm-v1-log", tuple(snaps), "per-interval", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=conc)


FORMATS = (
    engine_format("vllm-v0-log", "vLLM V0 'Speculative metrics:' log lines (cumulative counters)",
                  parse_vllm_v0, lambda s: not_json(s) and "Speculative metrics:" in s.body,
                  order=50, group="engine-log"),
    engine_format("vllm-v1-log", "vLLM V1 'SpecDecoding metrics:' log lines (per-interval "
                  "counters)", parse_vllm_v1,
                  lambda s: not_json(s) and "SpecDecoding metrics:" in s.body,
                  order=51, group="engine-log"),
)
