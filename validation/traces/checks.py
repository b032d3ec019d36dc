"""The checks of one trace (:class:`RecordChecker`): the header and each record against the
schema (:mod:`validation.traces.schema`) and the header, and the records of each finished
prompt against each other.

What every trace carries is checked here; what a scheme's traces carry beyond it is checked
by the scheme's module (:mod:`validation.schemes`), found by the theory's decision on the
header's cascade: ``check_header(header, checker)`` (its header fields; it may keep what its
other checks need on the checker), ``check_round(checker, round)``, ``check_record(checker,
record)`` (its own record types, ``RECORDS``), ``check_prompt_rounds(checker, summary,
line, rounds)`` (the rounds of one finished prompt) or, for a trace that is not prompt by prompt,
``check_trace(checker, kept)``. They raise :class:`~validation.traces.schema.FieldError`
(a bad field) or :class:`~validation.traces.schema.RecordError`.

The ``round`` records of a trace are first decided on columns
(:meth:`RecordChecker.rounds_pass`, with the scheme's ``rounds_pass``): a round it lets
through is one :meth:`RecordChecker.check` passes and leaves unchanged; every other round is
checked one by one, so a bad one is refused with the same line.
"""

from __future__ import annotations

import numpy as np

from polyspec_theory.core.config import MAX_THRESHOLD, POLICIES
from polyspec_theory.schemes import DEFAULT_MODE, modes, threshold_floor
from validation.schemes import get, registry, scheme_of_trace
from validation.traces.schema import (
    COMMON_RECORD_TYPES,
    MAX_TIME_S,
    RECORD_FIELDS,
    FieldError,
    RecordError,
    check_int,
    check_list,
    check_machine_field,
    check_object,
    check_real,
    check_reals,
    check_str,
    shown,
)

__all__ = ["RecordChecker", "all_record_fields", "record_owner"]


def all_record_fields() -> dict:
    """The required fields of every record type any scheme's traces hold."""
    out = dict(RECORD_FIELDS)
    for s in registry().values():
        out.update(getattr(s, "RECORDS", {}))
    return out


def record_owner(t: str):
    """The module of the scheme whose traces hold records of type ``t`` (``None``: every
    single-stream trace's)."""
    return next((s for s in registry().values() if t in getattr(s, "RECORDS", {})), None)


class RecordChecker:
    """Checks the header (at construction) and then each record of one trace against it:
    JSON types, ranges, and what the header implies (levels, models, the scheme's rules).
    Integral fields are normalized to ``int`` in place. Raises :class:`FieldError` /
    :class:`RecordError`. ``scheme``: the module of the trace's scheme."""

    def __init__(self, header: dict):
        h = self.header = header
        check_list(h["models"], "models")
        for k in ("dtype", "device", "torch"):
            if not isinstance(h[k], str):
                raise FieldError(k, f"must be a string, got {shown(h[k])}")
        h["threads"] = check_int(h["threads"], "threads", low=1)
        c = check_object(h["cascade"], "cascade")
        if "models" not in c:
            raise FieldError("cascade.models", "missing (the models of the cascade, target "
                             "first)")
        models = check_list(c["models"], "cascade.models", min_len=2)
        names = []
        for i, m in enumerate(models):
            check_object(m, f"cascade.models[{i}]")
            names.append(check_str(m.get("name"), f"cascade.models[{i}].name"))
        if len(set(names)) != len(names):
            raise FieldError("cascade.models", f"model names must be unique, got {names}")
        if "thresholds" not in c:
            raise FieldError("cascade.thresholds", "missing (one per adjacent pair)")
        mode = h.get("mode", DEFAULT_MODE)  # absent: a synchronous trace
        if mode not in modes():
            raise FieldError("mode", f"must be {' or '.join(map(repr, modes()))}, got "
                             f"{shown(mode)}")
        th = check_list(c["thresholds"], "cascade.thresholds", length=len(names) - 1)
        th[:] = [check_int(t, f"cascade.thresholds[{i}]", low=threshold_floor(mode),
                           high=MAX_THRESHOLD) for i, t in enumerate(th)]
        self.mode = mode
        self.names = tuple(names)
        self.thresholds = tuple(th)
        self.n = len(names)
        self.scheme = get(scheme_of_trace(h))
        policy = c.get("policy", "accumulate")
        if policy not in POLICIES:
            raise FieldError("cascade.policy", f"must be one of {POLICIES}, got {shown(policy)}")
        self.policy = policy
        if "name" in c and c["name"] is not None and not isinstance(c["name"], str):
            raise FieldError("cascade.name", f"must be a string, got {shown(c['name'])}")
        t = check_real(h["temperature"], "temperature")
        if t > 100:
            raise FieldError("temperature", f"must be <= 100, got {t!r}")
        h["top_k"] = check_int(h["top_k"], "top_k")
        h["seed"] = check_int(h["seed"], "seed")
        p = check_object(h["prompts"], "prompts")
        if p.get("max_new_tokens") is not None:
            p["max_new_tokens"] = check_int(p["max_new_tokens"], "prompts.max_new_tokens", low=1)
        self.scheme.check_header(h, self)
        for k in ("machine", "load_check"):
            check_machine_field(h, k)

    @property
    def record_fields(self) -> dict:
        """The required fields of each record type a trace of this scheme may hold."""
        own = getattr(self.scheme, "RECORDS", {})
        return {t: own[t] if t in own else RECORD_FIELDS[t]
                for t in COMMON_RECORD_TYPES + tuple(self.scheme.RECORD_TYPES)}

    @property
    def kind(self) -> str:
        """What the trace is called in a refusal (``single-stream``, ``batched``)."""
        return getattr(self.scheme, "TRACE_KIND", "single-stream")

    def check(self, rec: dict) -> None:
        t = rec["type"]
        if t in getattr(self.scheme, "RECORDS", {}):
            self.scheme.check_record(self, rec)
            return
        getattr(self, "_" + t)(rec)
        if t == "round":
            self.scheme.check_round(self, rec)

    def rounds_pass(self, recs) -> np.ndarray:
        """Per ``round`` record of ``recs`` (each holding every required field): ``True``
        where :meth:`check` is sure to pass and to change nothing, decided on columns
        (every integral field a JSON integer in range, every time a float in range, the
        round consistent, and the scheme's ``rounds_pass(checker, level, G, m)`` true);
        ``False`` where :meth:`check` must decide (and raise its error). A scheme without
        ``rounds_pass`` leaves every round to :meth:`check`."""
        ok = np.zeros(len(recs), bool)
        hook = getattr(self.scheme, "rounds_pass", None)
        if hook is None or not recs:
            return ok
        ok[:] = True
        col = {}
        for k, low in (("prompt", 0), ("ctx", 0), ("A", 0), ("G", 0), ("L", 1), ("m", 1),
                       ("level", 1)):
            good, v = _int_column([r[k] for r in recs])
            ok &= good & (v >= low)
            col[k] = v
        lv, g, a = col["level"], col["G"], col["A"]
        ok &= (lv <= self.n - 1) & (a <= g) & (col["L"] == a + 1)
        for k in ("verify_s", "draft_s", "round_s"):  # round_s is optional
            ok &= _time_column([r.get(k, 0.0) for r in recs])
        lv = np.where(ok, lv, 1)  # a level out of range is left to check()
        return ok & hook(self, lv, g, col["m"])

    def finish(self, kept) -> None:
        """The cross-record checks of the kept ``(line, record)`` pairs: the scheme's own
        (``check_trace``) or, prompt by prompt, :meth:`check_prompts`."""
        if hasattr(self.scheme, "check_trace"):
            self.scheme.check_trace(self, kept)
        else:
            self.check_prompts(kept)

    # --- the records every single-stream trace holds ---------------------------------------
    def _round(self, r):
        for k in ("prompt", "ctx", "A", "G"):  # G = 0: a confidence cut-off drafted nothing
            r[k] = check_int(r[k], k)
        for k in ("L", "m"):
            r[k] = check_int(r[k], k, low=1)
        r["level"] = check_int(r["level"], "level", low=1, high=self.n - 1)
        for k in ("verify_s", "draft_s", "round_s"):
            if k in r:
                check_real(r[k], k)
        g, a = r["G"], r["A"]
        if a > g or r["L"] != a + 1:
            raise FieldError("A", f"inconsistent round (G={g}, A={a}, L={r['L']}): need "
                             "0 <= A <= G and L = A + 1")

    def _model(self, r):
        name = r["model"]
        if name not in self.names:
            raise FieldError("model", f"{shown(name)} is not a model of the cascade "
                             f"({', '.join(self.names)})")

    def _ar(self, r):
        r["prompt"] = check_int(r["prompt"], "prompt")
        self._model(r)
        n = r["n_tokens"] = check_int(r["n_tokens"], "n_tokens", low=1)
        for k in ("wall_s", "forward_s", "prefill_s"):
            if k in r:
                check_real(r[k], k)
        if "ctx0" in r:
            r["ctx0"] = check_int(r["ctx0"], "ctx0")
        check_reals(check_list(r["step_s"], "step_s", length=n), "step_s")

    def _cost(self, r):
        self._model(r)
        if "phase" in r and r["phase"] not in ("start", "end"):
            raise FieldError("phase", f"must be 'start' or 'end', got {shown(r['phase'])}")
        r["ctx"] = check_int(r["ctx"], "ctx")
        r["m"] = check_int(r["m"], "m", low=1)
        times = check_list(r["times_s"], "times_s", min_len=1)
        check_reals(times, "times_s", positive=True)  # a cost of 0: every ratio infinite
        check_real(r["median_s"], "median_s", positive=True)

    def _summary(self, r):
        n = self.n
        r["prompt"] = check_int(r["prompt"], "prompt")
        r["n_generated"] = check_int(r["n_generated"], "n_generated", low=1)
        if "n_prompt_tokens" in r:
            r["n_prompt_tokens"] = check_int(r["n_prompt_tokens"], "n_prompt_tokens", low=1)
        for k in ("wall_s", "prefill_s"):
            if k in r:
                check_real(r[k], k)
        if "overhead_s" in r:
            check_real(r["overhead_s"], "overhead_s", low=None)
        for j, x in enumerate(check_list(r["forward_s"], "forward_s", length=n)):
            check_real(x, f"forward_s[{j}]")
        fc = check_list(r["forward_count"], "forward_count", length=n)
        fc[:] = [check_int(x, f"forward_count[{j}]") for j, x in enumerate(fc)]
        if "n_rounds" in r:
            nr = check_list(r["n_rounds"], "n_rounds", length=n - 1)
            nr[:] = [check_int(x, f"n_rounds[{j}]") for j, x in enumerate(nr)]
        if r.get("matches_target_ar") not in (None, True, False):
            raise FieldError("matches_target_ar", "must be true, false or null, got "
                             f"{shown(r['matches_target_ar'])}")

    def _resume(self, r):
        r["next_prompt"] = check_int(r["next_prompt"], "next_prompt")
        check_machine_field(r, "machine")
        check_machine_field(r, "load_check")

    def _end(self, r):
        r["n_prompts"] = check_int(r["n_prompts"], "n_prompts")
        if "wall_s" in r:
            check_real(r["wall_s"], "wall_s", high=30 * MAX_TIME_S)  # whole capture
        check_machine_field(r, "machine")

    # --- cross-record checks of a single-stream trace ----------------------------------------
    def check_prompts(self, kept) -> None:
        """No summary, AR run or cost cell twice, no round record repeated; and for every
        prompt with a summary, its rounds (in file order): level-1 rounds continue the text
        and emit ``n_generated`` tokens in ``n_rounds`` rounds, and the scheme's own rules
        hold (``check_prompt_rounds``: e.g. the blocks of the accumulate policy)."""
        summaries, ar_seen, cost_seen = {}, {}, {}
        rounds: dict[int, list] = {}
        prev = None
        for i, r in kept:
            t = r["type"]
            if t == "summary":
                if r["prompt"] in summaries:
                    raise RecordError(f"summary.prompt: a second summary of prompt "
                                      f"{r['prompt']} (the first is line "
                                      f"{summaries[r['prompt']][0]})", i)
                summaries[r["prompt"]] = (i, r)
            elif t == "ar":
                key = (r["prompt"], r["model"])
                if key in ar_seen:
                    raise RecordError(f"ar: a second autoregressive run of {r['model']!r} on "
                                      f"prompt {r['prompt']} (the first is line "
                                      f"{ar_seen[key]})", i)
                ar_seen[key] = i
            elif t == "cost":
                key = (r["model"], r.get("phase", ""), r["ctx"], r["m"])
                if key in cost_seen:
                    raise RecordError(f"cost: cell (model {r['model']!r}, phase "
                                      f"{r.get('phase')!r}, ctx {r['ctx']}, m {r['m']}) "
                                      f"recorded twice (the first is line {cost_seen[key]})", i)
                cost_seen[key] = i
            elif t == "round":
                if prev is not None and prev[1] == r:
                    raise RecordError(f"round: duplicated round record (same as line "
                                      f"{prev[0]})", i)
                prev = (i, r)
                rounds.setdefault(r["prompt"], []).append((i, r))
        for k, (si, s) in summaries.items():
            self.scheme.check_prompt_rounds(self, s, si, rounds.get(k, []))
            self._level_one(s, si, rounds.get(k, []))

    def _level_one(self, s: dict, si: int, rounds) -> None:
        """Level-1 rounds continue the text (their contexts follow from the prompt length)
        and emit ``n_generated`` tokens; ``n_rounds`` counts the rounds per level."""
        counts = [0] * (self.n - 1)
        ctx1 = s.get("n_prompt_tokens")
        emitted = 0
        for i, r in rounds:
            counts[r["level"] - 1] += 1
            if r["level"] == 1:
                if ctx1 is not None and r["ctx"] != ctx1:
                    raise RecordError(f"round.ctx: level-1 round at ctx {r['ctx']}, expected "
                                      f"{ctx1} (prompt tokens + tokens emitted before it)", i)
                ctx1 = r["ctx"] + r["L"]
                emitted += r["L"]
        if emitted != s["n_generated"]:
            raise RecordError(f"summary.n_generated: {s['n_generated']}, but the level-1 "
                              f"rounds of prompt {s['prompt']} emitted {emitted} tokens", si)
        if "n_rounds" in s and list(s["n_rounds"]) != counts:
            raise RecordError(f"summary.n_rounds: {s['n_rounds']}, but prompt {s['prompt']} "
                              f"has {counts} round records per level", si)


def _int_column(vals):
    """``(is a JSON integer within int64, value or 0)`` per entry of ``vals``."""
    types = list(map(type, vals))
    if types.count(int) == len(types):
        try:
            return np.ones(len(vals), bool), np.asarray(vals, np.int64)
        except OverflowError:
            pass
    good = [t is int and -2**63 <= v < 2**63 for v, t in zip(vals, types, strict=True)]
    return (np.asarray(good, bool),
            np.asarray([v if g else 0 for v, g in zip(vals, good, strict=True)], np.int64))


def _time_column(vals) -> np.ndarray:
    """Per entry: a float that :func:`~validation.traces.schema.check_real` passes as a time
    (finite, 0 <= x <= MAX_TIME_S); an int, bool or anything else is ``False``."""
    types = list(map(type, vals))
    if types.count(float) == len(types):
        good = np.ones(len(vals), bool)
    else:
        good = np.fromiter((t is float for t in types), bool, len(types))
        vals = [v if t is float else 0.0 for v, t in zip(vals, types, strict=True)]
    x = np.asarray(vals, np.float64)
    with np.errstate(invalid="ignore"):
        return good & np.isfinite(x) & (x >= 0.0) & (x <= MAX_TIME_S)
