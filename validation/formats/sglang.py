"""SGLang: per-request ``meta_info`` (three key schemas) and ``Decode batch.`` log lines."""

from __future__ import annotations

from polyspec_theory.errors import PolyspecInputError
from validation.formats.engine import engine_format, json_dicts, not_json
from validation.formats.engine_common import (
    NUM,
    EngineOutput,
    Snapshot,
    check,
    count,
    half_unit,
    histogram_counts,
    integers_in,
    json_or_none,
    line_field,
    printed,
    strip_meta,
    walk_mappings,
)

_SGLANG_SCHEMAS = (
    # (name, accepted key, proposed key)
    (">=0.5.12", "spec_num_correct_drafts", "spec_num_proposed_drafts"),
    ("0.5.11", "spec_accepted_drafts", "spec_proposed_drafts"),
    ("<=0.5.10", "spec_accept_token_num", "spec_draft_token_num"),
)
_SGLANG_HIST = ("spec_correct_drafts_histogram", "spec_accepted_drafts_histogram",
                "spec_accept_histogram")


def parse_sglang_meta(text: str, gamma) -> EngineOutput:
    obj = strip_meta(json_or_none(text))
    metas = [d for d in walk_mappings(obj) if "spec_verify_ct" in d]
    snaps, checks, warnings, schemas = [], [], [], set()
    for j, m in enumerate(metas, 1):
        label = f"request {j}" if len(metas) > 1 else "request"
        f = f"meta_info[{j - 1}]" if len(metas) > 1 else "meta_info"
        n = count(m["spec_verify_ct"], f"{f}.spec_verify_ct")
        schema = next((s for s in _SGLANG_SCHEMAS if s[1] in m), None)
        hkey = next((h for h in _SGLANG_HIST if h in m and m[h] is not None), None)
        if schema is None and hkey is None:
            raise PolyspecInputError(
                f"{f}.spec_num_correct_drafts", "missing (no accepted-draft count under any "
                "SGLang key schema: spec_num_correct_drafts, spec_accepted_drafts, "
                "spec_accept_token_num)")
        if schema is not None:
            schemas.add(schema[0])
        acc = count(m[schema[1]], f"{f}.{schema[1]}") if schema else None
        proposed = (count(m[schema[2]], f"{f}.{schema[2]}")
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
            counts, tot = histogram_counts(hist, k, label, n, f"{f}.{hkey}", "spec_verify_ct")
            if acc is not None and tot != acc:
                raise PolyspecInputError(f"{f}.{hkey}", f"implies {tot} accepted drafts but "
                                         f"{schema[1]} is {acc}")
            acc = tot
            src = f"exact ({hkey})"
        engine = {}
        for key in ("spec_accept_length", "spec_accept_rate"):
            if key in m:
                engine[key] = printed(m[key], f"{f}.{key}")
        s = Snapshot(label, n, acc, proposed if per_round is None or per_round <= k else None,
                     k, counts, src, engine)
        snaps.append(s)
        if "spec_accept_length" in m:
            checks.append(check(label, "mean acceptance length (spec_accept_length)",
                                 s.mean_acceptance_length, engine["spec_accept_length"]))
        if "spec_accept_rate" in m and proposed:
            checks.append(check(label, "acceptance rate (accepted / proposed drafts)",
                                 acc / proposed, engine["spec_accept_rate"]))
    if not metas:
        raise PolyspecInputError("spec_verify_ct", "no SGLang meta_info found")
    if len(schemas) > 1:
        warnings.append(f"requests use several SGLang key schemas ({', '.join(sorted(schemas))})")
    if any(c["figure"].startswith("acceptance rate") for c in checks):
        warnings.append("spec_accept_rate is accepted / proposed drafts, not alpha")
    return EngineOutput("sglang-meta", tuple(snaps), "per-request", warnings=tuple(warnings),
                        checks=tuple(checks))


def parse_sglang_log(text: str, gamma) -> EngineOutput:
    """Per-interval acceptance from ``Decode batch.`` lines: an interval is counted when its
    rounds follow from the token count -- one running request, the previous line of the same
    request (a ``Prefill batch.`` line between them marks a switch; after a prefill only an
    uncached prompt: how much of a cached prefix ``#token`` holds is not printed) -- and they
    make one logging interval (SGLang prints every ``decode_log_interval`` steps: an
    interval of another length spans a request's end or start, e.g. lines grep'd without
    their prefill lines)."""
    rows = _log_rows(text)
    decodes = [r[1] for r in rows if r[0] == "decode"]
    if not decodes:
        raise PolyspecInputError("accept len", "no 'Decode batch.' line with accept len")
    warnings = []
    conc = max(d["running"] for d in decodes)
    if all(d["running"] != 1 for d in decodes):  # said first: no --gamma would help
        raise PolyspecInputError("#running-req", f"every 'Decode batch.' line has more than "
                                 f"one running request (up to {conc}): the token count gives "
                                 "no request's rounds; log one request at a time")
    k = _draft_length(decodes, gamma, warnings)
    snaps, checks, skipped = _intervals(rows, k)
    if skipped:
        warnings.append("skipped " + "; ".join(skipped))
    if conc > 1:
        warnings.append(f"up to {conc} running requests: timing is not single-stream")
    tps = [float(d["tps"]) for d in decodes if d["tps"] is not None]
    timing = {"gen_throughput_tokens_per_s": tps} if tps else {}
    return EngineOutput("sglang-log", tuple(snaps), "per-interval", warnings=tuple(warnings),
                        checks=tuple(checks), concurrency=conc, timing=timing,
                        skipped=tuple(skipped))


def _log_rows(text: str) -> list:
    """``(kind, fields, line)`` of every prefill and decode log line, in order."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if "Prefill batch." in line:
            # the prompt's new tokens enter the token count; a cached prefix's share of it
            # is not printed (the interval after such a prefill is not counted)
            new = line_field(r"#new-token:\s*(\d+)", line, "#new-token", required=False)
            cached = line_field(r"#cached-token:\s*(\d+)", line, "#cached-token",
                                required=False)
            before = line_field(r"#running-req:\s*(\d+)", line, "#running-req", required=False)
            rows.append(("prefill", {"tokens": None if new is None else int(new),
                                     "cached": int(cached or 0),
                                     "running": None if before is None else int(before)}, line))
            continue
        if "Decode batch." not in line or "accept len" not in line:
            continue
        d = {
            "lineno": lineno,
            "running": int(line_field(r"#running-req:\s*(\d+)", line, "#running-req")),
            "token": int(line_field(r"#token:\s*(\d+)", line, "#token")),
            "al": line_field(r"accept len:\s*(" + NUM + ")", line, "accept len"),
            "rate": line_field(r"accept rate:\s*(" + NUM + ")", line, "accept rate",
                               required=False),
            "tps": line_field(r"gen throughput \(token/s\):\s*(" + NUM + ")", line, "gen",
                          required=False),
        }
        if float(d["al"]) < 1.0 - half_unit(d["al"]):
            raise PolyspecInputError("accept len", f"line {lineno}: {d['al']} is not a mean "
                                     "acceptance length (>= 1: every round emits the bonus "
                                     "or correction token)")
        rows.append(("decode", d, line))
    return rows


def _draft_length(decodes, gamma, warnings) -> int:
    """The draft length: ``gamma`` when given, else the one the printed accept rates imply
    (a warning says which convention)."""
    # draft length: SGLang's log 'accept rate' is accept len / num_draft_tokens (draft tokens
    # incl. the verified root, gamma + 1) in the versions with this wording, and
    # (accept len - 1) / gamma in later ones: take the convention the printed pairs agree on
    conv = {}
    for name, num in (("accept len / (gamma + 1)", lambda al: al),
                      ("(accept len - 1) / gamma", lambda al: al - 1.0)):
        common = None
        for d in decodes:
            if d["rate"] is None or float(d["rate"]) <= half_unit(d["rate"]):
                common = set()
                break
            al, hal = float(d["al"]), half_unit(d["al"])
            r, hr = float(d["rate"]), half_unit(d["rate"])
            lo = num(al - hal) / (r + hr)
            hi = num(al + hal) / (r - hr)
            c = set(integers_in(lo, hi))
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
    return k


def _intervals(rows, k) -> tuple[list, list, list]:
    """(snapshots, checks, skipped) of the single-request intervals between decode lines."""
    checks, skipped = [], []
    snaps = []
    prev, pending, j = None, [], 0
    for kind, d, _line in rows:
        if kind == "prefill":
            pending.append(d)
            continue
        j += 1
        label = f"interval {j}"
        prefills = list(pending)
        prev_running_token = None if prev is None else prev["token"]
        pre = sum(p["tokens"] or 0 for p in pending)
        # a prefill after a decode line with nothing else running: that request ended inside
        # this interval (its last tokens left the count) and the next one started
        switched = prev is not None and any(p["running"] in (0, None) for p in pending)
        unknown = any(p["tokens"] is None for p in pending)
        if prev is None:
            base = pre if pending and not unknown else None
        else:
            base = prev["token"] + pre
        prev_running = None if prev is None else prev["running"]
        prev, pending = d, []
        if d["running"] != 1:
            skipped.append(f"{label}: {d['running']} running requests (the token count does not "
                           "give the rounds)")
            continue
        if switched or (prev_running is not None and prev_running != 1):
            skipped.append(f"{label}: a request ended and another started within the interval "
                           "(the finished request's last tokens are not in the token count)")
            continue
        if base is None or unknown:
            skipped.append(f"{label}: no earlier line to count the tokens from")
            continue
        cached = sum(p["cached"] for p in prefills)
        if prev_running is None and cached:
            skipped.append(f"{label}: the prompt had {cached} cached tokens (how many of them "
                           "#token holds is not printed)")
            continue
        if prev_running is not None and d["token"] < prev_running_token:
            skipped.append(f"{label}: #token fell from {prev_running_token} to {d['token']}: "
                           "another request (lines without their Prefill batch. line)")
            continue
        delta = d["token"] - base
        al, h = float(d["al"]), half_unit(d["al"])
        if delta <= 0 or al <= 1.0 - h:
            skipped.append(f"{label}: no tokens counted")
            continue
        ns = integers_in(delta / (al + h), delta / max(al - h, 1e-12))
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
        checks.append(check(label, "mean acceptance length (accept len)",
                             s.mean_acceptance_length, d["al"]))
    # one logging interval: the round count most intervals share; another count spans a
    # request's end or start that no line shows
    lengths = [s.rounds for s in snaps]
    common = max(set(lengths), key=lengths.count) if lengths else None
    if common is not None and lengths.count(common) >= 2:
        keep = [i for i, s in enumerate(snaps) if s.rounds == common]
        for s in snaps:
            if s.rounds != common:
                skipped.append(f"{s.label}: {s.rounds} rounds, not one logging interval of "
                               f"{common} (a request ended or started inside it?)")
        snaps = [snaps[i] for i in keep]
        checks = [checks[i] for i in keep]
    return snaps, checks, skipped


FORMATS = (
    engine_format("sglang-meta", "SGLang per-request meta_info (<=0.5.10, 0.5.11 and >=0.5.12 "
                  "key names)", parse_sglang_meta,
                  lambda s: any("spec_verify_ct" in d for d in json_dicts(s) or ()), order=41),
    engine_format("sglang-log", "SGLang 'Decode batch.' log lines with accept len / accept "
                  "rate", parse_sglang_log,
                  lambda s: not_json(s) and "Decode batch." in s.body and "accept len" in s.body,
                  order=52, group="engine-log"),
)
