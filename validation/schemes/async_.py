"""Asynchronous pipelined two-level decoder (PipeSpec's ``AsyncChainSpeculativeDecoder``
rules, greedy): the target and one drafter each run in their own process pinned to their own
core, the drafter drafting continuously while the target verifies.

Protocol (``models[0]`` = target M_1, ``models[1]`` = drafter M_2; shared arrays hold the
drafter's text ``dtok[:DLEN]`` and the verified text ``vtok[:VLEN]``, both starting with the
prompt):

* drafter: repeat — if a sync is requested (``REQ > RESP``), find the first position where
  its text and the verified text differ (:func:`first_divergence`); if that is before the
  end of the verified text, drop its text from there (the drafted tokens are *discarded*),
  roll its cache back to it, adopt the verified tokens, and answer (``RESP = REQ``); then,
  unless it already holds ``queue`` undecided drafts (``None``: no bound, as PipeSpec), draft
  one token (one forward; after a rollback the forward also catches up the adopted tokens).
* target: wait until the drafter has answered the last sync and holds at least ``threshold``
  undecided drafts, take the G = min(undecided, W) first of them, score the last verified
  token and the block in ONE forward (m = G + 1), accept the longest prefix equal to its
  argmax (A), append A tokens and its own next token (L = A + 1), and request a sync (after
  every verify, as PipeSpec does).

``threshold`` and ``queue`` mean what a config's ``thresholds`` and ``queue`` mean in
``"mode": "async"`` (docs/theory.md AS0, :func:`polyspec_theory.async_pair`, the one
definition): wait for θ ready drafts (PipeSpec lookahead k = θ + 1; θ = 0: lookahead 0 or 1,
never wait), then check every ready draft up to W = 99 = ``MAX_VERIFY_TOKENS`` − 1, or
``queue`` if smaller. At θ = 0 an empty queue makes the verify a plain autoregressive step
(G = 0).

Output = the target's greedy text, token for token: every emitted token is the target's
argmax given the verified prefix. The target checks at every verify that the drafter's text
extends the verified text (the rollback invariant) and fails loudly if not.

Timing (``time.perf_counter``, CLOCK_MONOTONIC, one clock for both processes): prefill is
excluded; a prompt's ``wall_s`` runs from the moment both processes finished their prefill
to the target's last emitted token. Per verify round: ``verify_s`` (the target's forward),
``draft_s`` (the target's wait for the sync and the lookahead before it), ``round_s``.
Every drafter forward is recorded (positions scored, seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory import async_pair
from polyspec_theory.errors import PolyspecInputError, as_int
from validation.schemes import torch
from validation.schemes._two_process import (
    FIRST_SLOT,
    POLL_S,
    STOP,
    Aborted,
    TwoProcessDecoder,
    barrier,
    check_pair,
    pick_cores,
    views,
)
from validation.schemes.chain import check_prompt
from validation.traces.schema import (
    STREAM_RECORD_TYPES,
    FieldError,
    RecordError,
    Round,
    check_int,
    check_list,
    check_object,
    check_reals,
    shown,
)

name = "async"  # the theory registry's scheme (polyspec_theory.schemes)

__all__ = ["AsyncDecoder", "AsyncResult", "first_divergence", "check_async_args", "accept_block",
           "pick_cores", "ROLLBACK", "RollbackError"]

ROLLBACK = "pipespec"  # the rollback / sync rule above, recorded in trace headers
DLEN, VLEN, REQ, RESP = range(FIRST_SLOT, FIRST_SLOT + 4)  # control slots (_two_process)


class RollbackError(RuntimeError):
    """The drafter's text does not extend the verified text after a sync."""

    answer = "rollback"  # what the worker answers (_two_process)


def first_divergence(a, b) -> int:
    """The first index where sequences ``a`` and ``b`` differ, or the shorter length."""
    n = min(len(a), len(b))
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(x.argmax()) if x.any() else n


def check_async_args(models, threshold, queue, temperature=0.0):
    """The async decoder's settings, checked; returns ``(threshold, queue, window)``
    (``window`` = the most drafts one verify checks, docs/theory.md AS0)."""
    check_pair(models, temperature, "the async decoder", "PipeSpec's")
    threshold = as_int(threshold, "threshold", low=0, high=4096)
    if queue is not None:
        queue = as_int(queue, "queue", low=max(1, threshold), high=4096)
    return threshold, queue, async_pair(threshold, queue).window


@dataclass
class AsyncResult:
    """One prompt decoded by the pipeline. Times in seconds, prefill excluded.
    ``forward_s`` / ``forward_count``: per model, target first; ``draft_m`` / ``draft_fwd_s``:
    every drafter forward; ``discarded``: drafted tokens thrown away by rollbacks;
    ``blocks``: the drafted block of each round (only with ``record_blocks``)."""

    tokens: list[int]
    n_generated: int
    wall_s: float
    prefill_s: float
    forward_s: list[float]
    forward_count: list[int]
    rounds: list[Round]
    draft_m: list[int]
    draft_fwd_s: list[float]
    discarded: int
    rollbacks: int
    pids: list[int]
    cores: list[int]
    blocks: list[list[int]] = field(default_factory=list)

    @property
    def overhead_s(self) -> float:
        """Decode wall time the target spent outside its forwards (waiting included)."""
        return self.wall_s - self.forward_s[0]


def _prefill(model, seq):
    t0 = time.perf_counter()
    model.reset()
    if len(seq) > 1:
        model.logits(seq, len(seq) - 1)
    return time.perf_counter() - t0


def accept_block(lg, block) -> tuple[int, list[int]]:
    """The verify's decision on the logits ``lg`` of its forward (the last ``len(block) + 1``
    rows score the last verified token and the block): ``(A, argmaxes)``, ``A`` = the longest
    prefix of ``block`` equal to the target's argmaxes."""
    g = len(block)
    am = torch.argmax(lg[-(g + 1):], dim=-1).tolist()
    a = 0
    while a < g and block[a] == am[a]:
        a += 1
    return a, am


def _verify_loop(model, shared, lock, job):
    ctrl, dtok, vtok = views(shared)
    plen, max_new, need, maxv = job["plen"], job["max_new"], job["threshold"], job["window"]
    seq = vtok[:plen].tolist()
    prefill_s = _prefill(model, seq)
    barrier(ctrl, lock, 2)
    rounds, blocks, fwd_s = [], [], 0.0
    t_start = t_prev = time.perf_counter()
    while len(seq) - plen < max_new:
        vlen = len(seq)
        while ctrl[RESP] != ctrl[REQ] or ctrl[DLEN] - vlen < need:
            if ctrl[STOP]:
                raise Aborted
            time.sleep(POLL_S)
        with lock:
            d = int(ctrl[DLEN])
            if not np.array_equal(dtok[:vlen], vtok[:vlen]):
                j = first_divergence(dtok[:vlen], vtok[:vlen])
                raise RollbackError(f"the drafter's text differs from the verified text at "
                                    f"position {j} after its sync (verified length {vlen}): "
                                    "rollback bug")
            block = dtok[vlen:min(d, vlen + maxv)].tolist()
        g = len(block)
        t1 = time.perf_counter()
        lg = model.logits(seq + block, vlen + g)
        t2 = time.perf_counter()
        a, am = accept_block(lg, block)
        model.rollback(vlen + a)
        new = block[:a] + [am[a]]
        seq.extend(new)
        with lock:
            vtok[vlen:vlen + a + 1] = new
            ctrl[VLEN] = vlen + a + 1
            ctrl[REQ] += 1
        t3 = time.perf_counter()
        fwd_s += t2 - t1
        rounds.append(tuple(Round(prompt=job["prompt_index"], level=1, ctx=vlen, G=g, A=a,
                                  L=a + 1, m=g + 1, verify_s=t2 - t1, draft_s=t1 - t_prev,
                                  round_s=t3 - t_prev)))
        if job["record_blocks"]:
            blocks.append(block)
        t_prev = t3
    ctrl[STOP] = 1
    return {"tokens": seq[plen:], "wall_s": t_prev - t_start, "prefill_s": prefill_s,
            "forward_s": fwd_s, "forward_count": len(rounds), "rounds": rounds,
            "blocks": blocks}


def _draft_loop(model, shared, lock, job):
    ctrl, dtok, vtok = views(shared)
    plen, max_new, queue = job["plen"], job["max_new"], job["queue"]
    seq = dtok[:plen].tolist()
    prefill_s = _prefill(model, seq)
    barrier(ctrl, lock, 2)
    cap = plen + max_new + job["window"] - 1  # the verifier never checks a token beyond
    queue = cap if queue is None else queue
    fm, fs = [], []
    discarded = rollbacks = 0
    while not ctrl[STOP]:
        req = int(ctrl[REQ])
        if req != ctrl[RESP]:
            with lock:
                vlen = int(ctrl[VLEN])
                ver = vtok[:vlen].tolist()
            j = first_divergence(seq, ver)
            if j < vlen:
                if j < len(seq):
                    discarded += len(seq) - j
                    rollbacks += 1
                    model.rollback(j)
                del seq[j:]
                seq.extend(ver[j:])
                with lock:
                    dtok[j:vlen] = ver[j:]
                    ctrl[DLEN] = vlen
            ctrl[RESP] = req
        n = len(seq)
        if n - ctrl[VLEN] >= queue or n >= cap:
            time.sleep(POLL_S)
            continue
        t0 = time.perf_counter()
        m = n - model.pos
        lg = model.logits(seq, n)
        t1 = time.perf_counter()
        tok = int(torch.argmax(lg[-1]).item())
        seq.append(tok)
        with lock:
            dtok[n] = tok
            ctrl[DLEN] = n + 1
        fm.append(m)
        fs.append(t1 - t0)
    return {"prefill_s": prefill_s, "forward_s": float(sum(fs)), "forward_count": len(fm),
            "draft_m": fm, "draft_fwd_s": fs, "discarded": discarded, "rollbacks": rollbacks}


class AsyncDecoder(TwoProcessDecoder):
    """The two-process pipeline over ``models`` (target first) — see the module docstring.
    Start it with ``with AsyncDecoder(...) as dec:`` (or :meth:`start` / :meth:`close`);
    the worker processes live until closed and decode one prompt per :meth:`generate`.
    ``LOOPS``: what each process runs on a job (target, drafter); a subclass with other
    loops runs other work on the same processes, pinning and threads
    (:mod:`validation.capture.async_profile`)."""

    NAME, ROLE, LOOPS = "async", "async level", (_verify_loop, _draft_loop)

    def __init__(self, models, *, threshold=0, queue=None, cores=None, temperature=0.0,
                 threads=1, capacity=None, timeout_s=600.0):
        self.threshold, self.queue, self.window = check_async_args(models, threshold, queue,
                                                                   temperature)
        self._setup(models, cores, threads, timeout_s)
        lens = [lv.max_len for lv in models if lv.max_len is not None]
        self.capacity = as_int(capacity if capacity is not None else min(lens, default=8192),
                               "capacity", low=2)

    def headroom(self) -> int:
        """Positions beyond prompt + tokens the last verify may check (the window)."""
        return self.window

    def _arrays(self, ctx) -> tuple:
        return (ctx.RawArray("q", FIRST_SLOT + 4), ctx.RawArray("q", self.capacity),
                ctx.RawArray("q", self.capacity))

    def _failed(self, role: int, kind: str, body: str):
        if kind == "rollback":
            raise RollbackError(f"async level {role}: {body.strip().splitlines()[-1]}")
        super()._failed(role, kind, body)

    def run_job(self, job: dict, text=(), roles=(0, 1)) -> list[dict]:
        """Reset the shared state (both texts = ``text``), send ``job`` to the processes of
        ``roles`` (the others stay blocked, using no CPU) and return their answers in that
        order; a failure in either is raised here."""
        if not self._procs:
            raise RuntimeError("AsyncDecoder not started (use it in a with block)")
        ctrl, dtok, vtok = views(self._shared)
        ctrl[:] = 0
        plen = len(text)
        dtok[:plen] = text
        vtok[:plen] = text
        ctrl[DLEN] = ctrl[VLEN] = plen
        return self._run(job, roles)

    def generate(self, prompt, max_new_tokens, prompt_index=0, *,
                 record_blocks=False) -> AsyncResult:
        """Decode ≥ ``max_new_tokens`` tokens after ``prompt`` (the last verify may overshoot;
        ``n_generated`` is the exact count)."""
        prompt, max_new = check_prompt(prompt, max_new_tokens, self.vocab)
        need = len(prompt) + max_new + self.headroom()
        for lv in self.models:
            lim = self.capacity if lv.max_len is None else min(lv.max_len, self.capacity)
            if need > lim:
                raise PolyspecInputError(
                    "max_new_tokens", f"prompt ({len(prompt)}) + tokens ({max_new}) + "
                    f"window ({self.window}) = {need} exceeds {lv.name}'s context {lim}; "
                    "fewer tokens or a queue bound (the window is min(99, queue))")
        plen = len(prompt)
        job = {"plen": plen, "max_new": max_new, "threshold": self.threshold,
               "window": self.window, "queue": self.queue, "record_blocks": bool(record_blocks),
               "prompt_index": as_int(prompt_index, "prompt_index", low=0)}
        v, d = self.run_job(job, prompt)
        return AsyncResult(
            tokens=v["tokens"], n_generated=len(v["tokens"]), wall_s=v["wall_s"],
            prefill_s=max(v["prefill_s"], d["prefill_s"]),
            forward_s=[v["forward_s"], d["forward_s"]],
            forward_count=[v["forward_count"], d["forward_count"]],
            rounds=[Round(*r) for r in v["rounds"]], draft_m=d["draft_m"],
            draft_fwd_s=d["draft_fwd_s"], discarded=d["discarded"], rollbacks=d["rollbacks"],
            pids=list(self.pids), cores=list(self.cores), blocks=v["blocks"])


# ------------------------------------------------------------------------------------------
# its traces (validation.traces.checks; the fields: validation.traces.schema, async traces)
# ------------------------------------------------------------------------------------------
RECORDS = {"dforwards": ("prompt", "model", "m", "wall_s")}
RECORD_TYPES = STREAM_RECORD_TYPES + tuple(RECORDS)


def check_header(h: dict, checker) -> None:
    """Two levels, no trees or schedules, ``cascade.mode`` = "async", and ``async`` =
    ``{threshold, queue, window, ...}`` agreeing with the cascade and AS0's window; keeps
    ``checker.window``."""
    names, th = checker.names, checker.thresholds
    if len(names) != 2:
        raise FieldError("cascade.models", f"an async trace has two levels, got "
                         f"{len(names)}")
    c = h["cascade"]
    for key in ("trees", "schedules"):
        if c.get(key) is not None:
            raise FieldError(f"cascade.{key}", "an async pipeline has no trees or "
                             "schedules")
    if c.get("mode", "async") != "async":
        raise FieldError("cascade.mode", f"must be 'async' in an async trace, got "
                         f"{shown(c.get('mode'))}")
    a = check_object(h.get("async"), "async")
    a["threshold"] = check_int(a.get("threshold"), "async.threshold")
    if a["threshold"] != th[0]:
        raise FieldError("async.threshold", f"{a['threshold']} differs from "
                         f"cascade.thresholds[0] = {th[0]}")
    q = c.get("queue", [None])
    if a.get("queue") is not None:
        a["queue"] = check_int(a["queue"], "async.queue", low=max(1, th[0]))
    if q != [a.get("queue")]:
        raise FieldError("async.queue", f"{shown(a.get('queue'))} differs from "
                         f"cascade.queue {shown(q)}")
    a["window"] = check_int(a.get("window"), "async.window", low=max(1, th[0]))
    rule = async_pair(th[0], a.get("queue")).window
    # captures made before AS0 took PipeSpec's window (every ready draft up to the cap)
    # checked exactly theta drafts: they are read as recorded
    if a["window"] != rule and not (th[0] and a["window"] == th[0]):
        raise FieldError("async.window", f"must be {rule} (AS0: every ready draft up to "
                         f"min(99, queue)), got {a['window']}")
    checker.window = a["window"]


def check_round(checker, r: dict) -> None:
    """A verify checks θ to ``window`` ready drafts and scores G + 1 positions."""
    g, th = r["G"], checker.thresholds[r["level"] - 1]
    if not th <= g <= checker.window:
        raise FieldError("G", f"an async verify checks threshold = {th} to window "
                         f"= {checker.window} drafts, got G = {g}")
    if r["m"] != g + 1:
        raise FieldError("m", f"an async verify scores G + 1 = {g + 1} positions, "
                         f"got m = {r['m']}")


def rounds_pass(checker, lv, g, m):
    """:func:`check_round` on columns (levels ``lv`` in range, blocks ``g``, positions
    ``m``): where each round passes it."""
    th = np.asarray(checker.thresholds)[lv - 1]
    return (th <= g) & (g <= checker.window) & (m == g + 1)


def check_record(checker, r: dict) -> None:
    """``dforwards``: every drafter forward of a prompt, columnar."""
    r["prompt"] = check_int(r["prompt"], "prompt")
    if r["model"] != checker.names[1]:
        raise FieldError("model", f"{shown(r['model'])} is not the drafter "
                         f"{checker.names[1]!r}")
    ms = check_list(r["m"], "m")
    if not (list(map(type, ms)).count(int) == len(ms) and (not ms or min(ms) >= 1)):
        ms[:] = [check_int(x, f"m[{j}]", low=1) for j, x in enumerate(ms)]  # else all fine
    check_reals(check_list(r["wall_s"], "wall_s", length=len(ms)), "wall_s")
    for k in ("discarded", "rollbacks"):
        if k in r:
            r[k] = check_int(r[k], k)


def check_prompt_rounds(checker, s: dict, si: int, rounds) -> None:
    """One target forward per verify round."""
    n1 = sum(1 for _, r in rounds if r["level"] == 1)
    if s["forward_count"][0] != n1:
        raise RecordError(f"summary.forward_count[0]: {s['forward_count'][0]}, but prompt "
                          f"{s['prompt']} has {n1} verify rounds (one target forward each)", si)


# ------------------------------------------------------------------------------------------
# its captures (validation.capture.async_: one process per level)
# ------------------------------------------------------------------------------------------
DRIVER = "pipeline"
CAPTURE_REFUSES = {
    "--tree": "not with --mode async: the async pipeline drafts a chain; the theory of an async "
            "tree is not covered",
    "--schedule": "not with --mode async: the async pipeline's draft length follows the "
                 "lookahead and the queue; an adaptive schedule is not covered",
    "--batch": "not with --mode async: the async pipeline decodes one sequence",
    "--batches": "not with --mode async: the async pipeline decodes one sequence",
    "--top-k": "not with --mode async: the async pipeline is greedy",
}


def check_capture(spec):
    """Two levels, one threshold, 0 (lookahead 0: verify what is ready) by default."""
    if len(spec.models) != 2:
        raise PolyspecInputError("models", f"the async pipeline runs two levels (target + one "
                                 f"drafter, one core each), got {len(spec.models)} models")
    th = [0] if spec.thresholds is None else list(spec.thresholds)
    if len(th) != 1:
        raise PolyspecInputError("--thresholds", f"--mode async takes one threshold (two "
                                 f"levels), got {len(th)}")
    return spec._replace(thresholds=th)


def describe(path) -> str:
    """The line ``polyspec capture`` prints for a finished trace."""
    from validation.traces.records import read_trace

    t = read_trace(path)
    lossless = all(s.get("matches_target_ar") for s in t.summaries)
    return (f"{path}: {t.n_prompts} prompts, {t.tokens} tokens, measured speedup "
            f"{t.measured_speedup:.3f} on two cores (pipeline, one process per level) against "
            f"the single-core autoregressive target ({t.ar_time_per_token * 1e3:.3f} ms/token, "
            f"pipeline {t.time_per_token * 1e3:.3f} ms/token)"
            f"{'' if lossless else ', NOT LOSSLESS'}")
VALIDATE = "validation.analysis.async_validate:validate_part"  # how its captures are predicted
# its command hooks (validation.schemes.command_hook)
PROFILE = "validation.capture.async_profile:run_profile"  # profile --mode async: contention
FORECAST_CAPTURES = "validation.analysis.async_forecast:forecast_captures"  # forecast --mode async
FORECAST_FOLDER = "validation.analysis.pipespec_async:forecast_async_dir"  # PipeSpec async-chain
