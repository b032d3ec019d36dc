"""Parallel draft-verify decoder (PEARL, the rules nano-PEARL's engine runs; docs/theory.md
PL0), greedy, on the project's models: the target and the drafter each run in their own
process pinned to their own core, ``b`` sequences in lockstep steps.

One step ``s`` (``models[0]`` = target, ``models[1]`` = drafter; both hold every sequence's
prompt, and a sequence starts in pre-verify):

* drafter: ``gamma`` batched single-token forwards, each appending its argmax to every
  sequence's draft text; it posts the ``gamma`` new drafts of every sequence, then waits for
  the verdict;
* target, at the same time: ONE batched forward feeding each sequence its last verified token
  (pre-verify: 1 position) or that token and its ``gamma - 1`` pending drafts (post-verify:
  ``gamma`` positions; the batch is padded to the longest, as the batch levels do); then it
  waits for the drafts and checks, per sequence, the first new draft (pre-verify) or the
  pending drafts and the first new one (post-verify) against its argmaxes;
* verdict per sequence (PL0): all checks accepted -> the target appends the new block (the
  first verified, the rest pending), post-verify; a rejection after ``n`` accepted -> the
  target keeps the ``n`` and appends its own token (the correction), the drafter cuts its
  text to the same and drops its block, pre-verify.

Every verified token is the target's argmax given the verified prefix: the output equals the
target's greedy text, token for token. Timing (``time.perf_counter``, one clock for both
processes): prefill excluded; per step the target's forward (``target_s``), its wait for the
drafts after it (``wait_s``), the step's wall time on the target's side (``step_s``, verdict
included) and the drafter's ``gamma`` forwards (``draft_s``).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.schemes import torch
from validation.schemes._two_process import (
    FIRST_SLOT,
    STOP,
    TwoProcessDecoder,
    barrier,
    check_pair,
    views,
    wait,
)

NAME = name = "pearl"  # the theory registry's scheme

__all__ = ["NAME", "PearlDecoder", "PearlResult", "PearlStep", "check_pearl_args",
           "run_lists", "counted_tokens", "RECORDS", "RECORD_TYPES", "TRACE_KIND",
           "pearl_header", "trace_records", "check_header", "check_record", "check_trace",
           "check_pearl_records", "predict_capture", "padded_step_costs", "CAPTURE_REFUSES",
           "check_capture", "trace_header", "capture_pearl", "check_round", "DRIVER",
           "describe", "name", "PearlCapture", "read_capture", "validate_capture",
           "validate_part", "VALIDATE", "check_counts", "measured_step_costs"]

DRAFTED, VERDICT = FIRST_SLOT, FIRST_SLOT + 1  # control slots (_two_process)


@dataclass(frozen=True)
class PearlStep:
    """One lockstep step: ``post`` = which sequences were in post-verify at its start,
    ``accepted[j]`` drafts accepted and ``verified[j]`` tokens verified by sequence ``j``
    (PL0: pre-verify 1; post-verify ``gamma`` if all accepted, else accepted + 1), the
    target's forward ``m`` positions per slot (padded), times in seconds."""

    step: int
    post: tuple[bool, ...]
    accepted: tuple[int, ...]
    verified: tuple[int, ...]
    m: int
    target_s: float
    wait_s: float
    step_s: float
    draft_s: float

    @property
    def n_post(self) -> int:
        return sum(self.post)

    def to_dict(self) -> dict:
        return {"step": self.step, "post": [int(x) for x in self.post],
                "accepted": list(self.accepted), "verified": list(self.verified), "m": self.m,
                "target_s": self.target_s, "wait_s": self.wait_s, "step_s": self.step_s,
                "draft_s": self.draft_s}


def rejected(step: PearlStep, gamma: int, j: int) -> bool:
    """Whether sequence ``j`` had a rejection in ``step``."""
    return step.accepted[j] < (gamma if step.post[j] else 1)


def run_lists(steps, gamma: int, batch: int) -> list[list[int]]:
    """nano-PEARL's run list per sequence (PL0): at every rejection (drafts accepted since
    the last rejection + 1), at the end the unfinished run's accepted drafts."""
    out = []
    for j in range(batch):
        runs, acc = [], 0
        for s in steps:
            if rejected(s, gamma, j):
                runs.append(acc + s.accepted[j] + 1)
                acc = 0
            else:
                acc += s.accepted[j]
        out.append(runs + [acc])
    return out


def counted_tokens(steps, gamma: int, batch: int) -> list[int]:
    """Tokens per sequence as nano-PEARL's benchmark counts them (PL0): 1 (the prefill's) +
    the verified tokens + ``gamma - 1`` pending drafts if the run ended in post-verify."""
    out = []
    for j in range(batch):
        ver = sum(s.verified[j] for s in steps)
        last = steps[-1]
        post_end = not rejected(last, gamma, j)
        out.append(1 + ver + (gamma - 1) * int(post_end))
    return out


@dataclass
class PearlResult:
    """``prompts`` decoded for ``len(steps)`` lockstep steps: per sequence the verified
    ``tokens`` (after the prompt) and the ``pending`` drafts at the end; ``blocks[s][j]``: the
    drafter's block of step ``s`` (only with ``record_blocks``)."""

    prompts: list[list[int]]
    tokens: list[list[int]]
    pending: list[list[int]]
    steps: list[PearlStep]
    gamma: int
    wall_s: float
    prefill_s: float
    draft_forwards: int
    pids: list[int]
    cores: list[int]
    blocks: list = field(default_factory=list)

    @property
    def batch(self) -> int:
        return len(self.prompts)

    def runs(self) -> list[list[int]]:
        return run_lists(self.steps, self.gamma, self.batch)

    def mat(self) -> float:
        """The benchmark's MAT: mean over sequences of each sequence's mean run."""
        return float(np.mean([np.mean(r) for r in self.runs()]))

    def counted(self) -> list[int]:
        return counted_tokens(self.steps, self.gamma, self.batch)


def check_pearl_args(models, gamma, temperature=0.0) -> int:
    """Two models sharing a vocabulary, greedy, ``gamma >= 1``; returns ``gamma``."""
    check_pair(models, temperature, "the parallel draft-verify decoder",
               "nano-PEARL's benchmark")
    return as_int(gamma, "gamma", low=1, high=4096)


def _prefill(level, seqs):
    t0 = time.perf_counter()
    ends = [len(s) - 1 for s in seqs]
    if max(ends) > 0:
        level.logits(seqs, ends)
    return time.perf_counter() - t0


def _target_loop(level, shared, lock, job):
    ctrl, blk_a, cut_a, corr_a = views(shared)
    gamma, b = job["gamma"], len(job["prompts"])
    ver = [list(p) for p in job["prompts"]]
    pend = [[] for _ in range(b)]
    post = [False] * b
    level.reset(b, job["slack"])
    prefill_s = _prefill(level, ver)
    barrier(ctrl, lock, 2)
    steps, blocks = [], []
    t_start = t_prev = time.perf_counter()
    for s in range(job["steps"]):
        seqs = [ver[j] + pend[j] for j in range(b)]
        t0 = time.perf_counter()
        lg, _mj = level.logits(seqs, [len(x) for x in seqs])
        t1 = time.perf_counter()
        am = torch.argmax(lg, dim=-1).tolist()
        wait(ctrl, DRAFTED, s + 1)
        t2 = time.perf_counter()
        with lock:
            blk = blk_a[:b * gamma].reshape(b, gamma).tolist()
        acc, verd, was_post = [], [], tuple(post)
        cut, corr = [-1] * b, [-1] * b
        for j in range(b):
            checks = pend[j] + [blk[j][0]] if post[j] else [blk[j][0]]
            n = 0
            while n < len(checks) and checks[n] == am[j][n]:
                n += 1
            if n == len(checks):  # all accepted: the block goes in, first verified
                ver[j].extend(checks)
                pend[j] = blk[j][1:]
                post[j] = True
                verd.append(len(checks))
            else:
                cut[j] = len(ver[j]) + n
                corr[j] = am[j][n]
                ver[j].extend(checks[:n] + [am[j][n]])
                pend[j] = []
                post[j] = False
                verd.append(n + 1)
            acc.append(n)
            level.rollback(j, len(ver[j]) - 1)  # the cache holds the verified text but its last
        with lock:
            cut_a[:b] = cut
            corr_a[:b] = corr
            ctrl[VERDICT] = s + 1
        t3 = time.perf_counter()
        steps.append((s, was_post, tuple(acc), tuple(verd), int(lg.shape[1]), t1 - t0,
                      t2 - t1, t3 - t_prev))
        if job["record_blocks"]:
            blocks.append(blk)
        t_prev = t3
    ctrl[STOP] = 1
    return {"tokens": [ver[j][len(p):] for j, p in enumerate(job["prompts"])],
            "pending": pend, "steps": steps, "wall_s": t_prev - t_start,
            "prefill_s": prefill_s, "blocks": blocks}


def _draft_loop(level, shared, lock, job):
    ctrl, blk_a, cut_a, corr_a = views(shared)
    gamma, b = job["gamma"], len(job["prompts"])
    seq = [list(p) for p in job["prompts"]]
    level.reset(b, job["slack"])
    prefill_s = _prefill(level, seq)
    barrier(ctrl, lock, 2)
    draft_s = []
    for s in range(job["steps"]):
        t0 = time.perf_counter()
        for _ in range(gamma):
            lg, mj = level.logits(seq, [len(x) for x in seq])
            for j in range(b):
                seq[j].append(int(torch.argmax(lg[j, int(mj[j]) - 1]).item()))
        draft_s.append(time.perf_counter() - t0)
        with lock:
            blk_a[:b * gamma] = np.array([x[-gamma:] for x in seq], dtype=np.int64).ravel()
            ctrl[DRAFTED] = s + 1
        wait(ctrl, VERDICT, s + 1)
        with lock:
            cut, corr = cut_a[:b].tolist(), corr_a[:b].tolist()
        for j in range(b):
            if corr[j] >= 0:  # rejected: cut to the accepted drafts, adopt the correction
                level.rollback(j, cut[j])
                del seq[j][cut[j]:]
                seq[j].append(int(corr[j]))
    return {"draft_s": draft_s, "prefill_s": prefill_s, "forwards": gamma * job["steps"]}


def _load(blob):
    """A worker's model as a batch level: ``blob`` is the level its parent pickled in memory
    for it (``TwoProcessDecoder``, after the worker is pinned and its threads set), never
    bytes read from a file."""
    from validation.capture.batch_models import batch_level

    return batch_level(pickle.loads(blob))


class PearlDecoder(TwoProcessDecoder):
    """The two-process parallel draft-verify decoder over ``models`` (target first) with
    draft length ``gamma`` (module docstring). Use it as ``with PearlDecoder(...) as dec:``;
    the worker processes live until closed and decode one batch per :meth:`generate`."""

    NAME, ROLE, LOOPS = "pearl", "pearl process", (_target_loop, _draft_loop)
    LOAD = staticmethod(_load)

    def __init__(self, models, *, gamma, cores=None, temperature=0.0, threads=1,
                 max_batch=64, timeout_s=600.0):
        self.gamma = check_pearl_args(models, gamma, temperature)
        self._setup(models, cores, threads, timeout_s)
        self.max_batch = as_int(max_batch, "max_batch", low=1, high=4096)

    def _arrays(self, ctx) -> tuple:
        b, g = self.max_batch, self.gamma
        return (ctx.RawArray("q", FIRST_SLOT + 2), ctx.RawArray("q", b * g),
                ctx.RawArray("q", b), ctx.RawArray("q", b))

    def _check_prompts(self, prompts, steps):
        if not isinstance(prompts, list | tuple) or not prompts:
            raise PolyspecInputError("prompts", "must be a non-empty list of prompts")
        if len(prompts) > self.max_batch:
            raise PolyspecInputError("prompts", f"{len(prompts)} prompts exceed max_batch "
                                     f"{self.max_batch}")
        out = []
        for i, p in enumerate(prompts):
            p = [int(t) for t in p]
            if not p or any(not 0 <= t < self.vocab for t in p):
                raise PolyspecInputError(f"prompts[{i}]", f"must hold >= 1 token id in "
                                         f"[0, {self.vocab})")
            out.append(p)
        steps = as_int(steps, "steps", low=1, high=1 << 20)
        need = max(len(p) for p in out) + self.gamma * (steps + 2)
        for lv in self.models:
            if lv.max_len is not None and need > lv.max_len:
                raise PolyspecInputError("steps", f"prompt + gamma x (steps + 2) = {need} "
                                         f"exceeds {lv.name}'s context {lv.max_len}")
        return out, steps

    def generate(self, prompts, steps: int, *, record_blocks=False) -> PearlResult:
        """Decode the batch ``prompts`` for ``steps`` lockstep steps."""
        prompts, steps = self._check_prompts(prompts, steps)
        if not self._procs:
            raise RuntimeError("PearlDecoder not started (use it in a with block)")
        views(self._shared)[0][:] = 0
        job = {"prompts": prompts, "steps": steps, "gamma": self.gamma,
               "slack": self.gamma + 1, "record_blocks": bool(record_blocks)}
        t, d = self._run(job)
        recs = [PearlStep(*s[:7], step_s=s[7], draft_s=d["draft_s"][s[0]])
                for s in t["steps"]]
        return PearlResult(prompts=prompts, tokens=t["tokens"], pending=t["pending"],
                           steps=recs, gamma=self.gamma, wall_s=t["wall_s"],
                           prefill_s=max(t["prefill_s"], d["prefill_s"]),
                           draft_forwards=d["forwards"], pids=list(self.pids),
                           cores=list(self.cores), blocks=t["blocks"])


# ------------------------------------------------------------------------------------------
# its traces: the header's ``pearl`` block, one ``pstep`` record per step and one ``prun`` per
# decode of a batch (checked by validation.traces.checks through this module)
# ------------------------------------------------------------------------------------------
FORWARDS = ("padded", "packed")  # how the target's forward lays out the step's tokens
RECORDS = {
    "pstep": ("run", "step", "post", "accepted", "verified", "m", "target_s", "wait_s",
              "step_s", "draft_s"),
    "prun": ("run", "prompts", "n_generated", "pending", "wall_s", "prefill_s"),
}
RECORD_TYPES = tuple(RECORDS)
TRACE_KIND = "parallel draft-verify"


def pearl_header(gamma: int, batch: int, steps: int, forward: str = "padded") -> dict:
    """The trace header's ``pearl`` block: ``gamma``, the lockstep ``batch``, ``steps`` per
    decode and the target's forward layout (this decoder pads every slot to the longest:
    ``padded``; nano-PEARL packs tokens as decode samples: ``packed``)."""
    return {"gamma": int(gamma), "batch": int(batch), "steps": int(steps), "forward": forward}


def trace_records(result: PearlResult, run: int, prompts=None) -> list[dict]:
    """The records of one decode (``run``): one ``pstep`` per step, then its ``prun``
    (``prompts``: the prompt indices of the batch, default ``0..b-1``)."""
    from validation.traces.schema import TIME_DIGITS

    r6 = lambda x: round(float(x), TIME_DIGITS)  # noqa: E731
    out = [{"type": "pstep", "run": int(run), **{k: v for k, v in s.to_dict().items()
                                                 if k not in ("target_s", "wait_s",
                                                              "step_s", "draft_s")},
            "target_s": r6(s.target_s), "wait_s": r6(s.wait_s), "step_s": r6(s.step_s),
            "draft_s": r6(s.draft_s)} for s in result.steps]
    idx = list(range(result.batch)) if prompts is None else [int(i) for i in prompts]
    out.append({"type": "prun", "run": int(run), "prompts": idx,
                "n_generated": [len(t) for t in result.tokens],
                "pending": [len(p) for p in result.pending], "wall_s": r6(result.wall_s),
                "prefill_s": r6(result.prefill_s)})
    return out


def trace_header(models, gamma: int, batch: int, steps: int, *, name: str = "pearl",
                 n_prompts: int = 0, seed: int = 0) -> dict:
    """A trace header (schema :mod:`validation.traces.schema`) for decodes of ``models``
    (target first) by :class:`PearlDecoder`: the common fields, ``"mode": "pearl"`` on the
    header and its cascade, and the ``pearl`` block (:func:`pearl_header`)."""
    from datetime import UTC, datetime

    from validation.schemes import torch
    from validation.traces.schema import SCHEMA, SCHEMA_VERSION

    return {"type": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "tool": "validation.schemes.pearl", "models": [m.describe() for m in models],
            "dtype": "float32", "device": "cpu", "torch": torch.__version__,
            "threads": torch.get_num_threads(), "mode": "pearl",
            "cascade": {"name": name, "models": [{"name": m.name} for m in models],
                        "thresholds": [int(gamma)], "acceptance": None, "mode": "pearl"},
            "temperature": 0.0, "top_k": 0, "seed": int(seed),
            "prompts": {"n_prompts": int(n_prompts)}, "time_base": "seconds",
            "prefill": "excluded", "pearl": pearl_header(gamma, batch, steps)}


def capture_pearl(models, prompts, *, gamma: int, batch: int, steps: int, out,
                  name: str = "pearl", cores=None) -> dict:
    """Decode ``prompts`` in consecutive lockstep batches of ``batch`` (an incomplete last
    batch is dropped, as nano-PEARL's benchmark does) for ``steps`` steps each and write the
    trace ``out`` (a new file: an existing one is refused, nothing is overwritten). Returns
    the header."""
    import json
    from pathlib import Path

    from validation.files import atomic_write_text, check_output

    path = check_output(out, "out")
    if path.exists():
        raise PolyspecInputError("out", f"{path} exists: choose another path")
    b = as_int(batch, "batch", low=1, high=4096)
    runs = len(prompts) // b
    if runs < 1:
        raise PolyspecInputError("prompts", f"{len(prompts)} prompts fill no batch of {b}")
    header = trace_header(models, gamma, b, steps, name=name, n_prompts=runs * b)
    lines = [header]
    with PearlDecoder(models, gamma=gamma, cores=cores, max_batch=b) as dec:
        for k in range(runs):
            idx = list(range(k * b, (k + 1) * b))
            res = dec.generate([prompts[i] for i in idx], steps)
            lines += trace_records(res, k, idx)
    lines.append({"type": "end", "n_prompts": runs * b})
    atomic_write_text(Path(path), "".join(json.dumps(x) + "\n" for x in lines))
    return header


def check_round(checker, r: dict) -> None:
    """A parallel draft-verify trace holds steps (``pstep``), not rounds."""
    from validation.traces.schema import FieldError

    raise FieldError("type", "a parallel draft-verify trace records steps (pstep), not rounds")


def check_header(h: dict, checker) -> None:
    """Two models, no trees or schedules, ``cascade.mode`` = "pearl", and ``pearl`` =
    ``{gamma, batch, steps, forward}`` agreeing with the cascade; keeps ``checker.pearl``."""
    from validation.traces.schema import FieldError, check_int, check_object, shown

    if len(checker.names) != 2:
        raise FieldError("cascade.models", f"a parallel draft-verify trace has two models, got "
                         f"{len(checker.names)}")
    c = h["cascade"]
    for key in ("trees", "schedules"):
        if c.get(key) is not None:
            raise FieldError(f"cascade.{key}", "parallel draft-verify drafts chains")
    if c.get("mode") != "pearl":
        raise FieldError("cascade.mode", f"must be 'pearl' in a parallel draft-verify trace, "
                         f"got {shown(c.get('mode'))}")
    p = check_object(h.get("pearl"), "pearl")
    p["gamma"] = check_int(p.get("gamma"), "pearl.gamma", low=1)
    if p["gamma"] != checker.thresholds[0]:
        raise FieldError("pearl.gamma", f"{p['gamma']} differs from cascade.thresholds[0] = "
                         f"{checker.thresholds[0]}")
    p["batch"] = check_int(p.get("batch"), "pearl.batch", low=1)
    p["steps"] = check_int(p.get("steps"), "pearl.steps", low=1)
    if p.get("forward") not in FORWARDS:
        raise FieldError("pearl.forward", f"must be one of {FORWARDS}, got "
                         f"{shown(p.get('forward'))}")
    checker.pearl = p


def check_record(checker, r: dict) -> None:
    """A ``pstep`` obeys PL0 on its own: per sequence ``0 <= accepted <= checks`` (1 in
    pre-verify, ``gamma`` in post-verify) and ``verified = checks`` if all were accepted, else
    ``accepted + 1``; the target's forward scored ``gamma`` positions per slot iff some
    sequence was in post-verify (a padded forward; packed: ``b + (gamma - 1) n_post``
    tokens). A ``prun`` lists one entry per sequence."""
    from validation.traces.schema import FieldError, check_int, check_list, check_real

    p = checker.pearl
    g, b = p["gamma"], p["batch"]
    r["run"] = check_int(r["run"], "run")
    if r["type"] == "prun":
        for k in ("prompts", "n_generated", "pending"):
            xs = check_list(r[k], k, length=b)
            xs[:] = [check_int(x, f"{k}[{j}]") for j, x in enumerate(xs)]
        for k in ("wall_s", "prefill_s"):
            check_real(r[k], k)
        if any(x not in (0, g - 1) for x in r["pending"]):
            raise FieldError("pending", f"a sequence ends with 0 or gamma - 1 = {g - 1} "
                             f"pending drafts, got {r['pending']}")
        return
    r["step"] = check_int(r["step"], "step", high=p["steps"] - 1)
    lists = {k: check_list(r[k], k, length=b) for k in ("post", "accepted", "verified")}
    for k, xs in lists.items():
        xs[:] = [check_int(x, f"{k}[{j}]") for j, x in enumerate(xs)]
    for j in range(b):
        post, acc, ver = lists["post"][j], lists["accepted"][j], lists["verified"][j]
        if post not in (0, 1):
            raise FieldError(f"post[{j}]", f"must be 0 or 1, got {post}")
        checks = g if post else 1
        if not acc <= checks or ver != (checks if acc == checks else acc + 1):
            raise FieldError(f"verified[{j}]", f"{'post' if post else 'pre'}-verify with "
                             f"{acc} of {checks} checks accepted verifies "
                             f"{checks if acc == checks else acc + 1} tokens, got {ver}")
    n_post = sum(lists["post"])
    want = (g if n_post else 1) if p["forward"] == "padded" else b + (g - 1) * n_post
    r["m"] = check_int(r["m"], "m", low=1)
    if r["m"] != want:
        raise FieldError("m", f"a {p['forward']} forward with {n_post} of {b} sequences in "
                         f"post-verify scores {want}, got {r['m']}")
    for k in ("target_s", "wait_s", "step_s", "draft_s"):
        check_real(r[k], k)


def check_trace(checker, kept) -> None:
    """Each decode's steps run ``0..steps-1`` in order from all-pre-verify, a sequence is in
    post-verify exactly after a step that accepted all its checks, and its ``prun`` counts
    the tokens its steps verified."""
    from validation.traces.schema import RecordError

    err = check_pearl_records([r for _, r in kept], checker.pearl)
    if err is not None:
        raise RecordError(err[1], kept[err[0]][0])


def check_pearl_records(records, pearl: dict):
    """:func:`check_trace`'s rules on ``records`` (``pstep`` and ``prun`` dicts in file order);
    ``None``, or ``(index, message)`` of the first record that breaks them."""
    g, steps = pearl["gamma"], pearl["steps"]
    state: dict[int, tuple] = {}  # run -> (next step, post, verified so far)
    for i, r in enumerate(records):
        t = r.get("type")
        if t == "pstep":
            nxt, post, ver = state.get(r["run"], (0, [0] * pearl["batch"], None))
            if r["step"] != nxt:
                return i, f"pstep: run {r['run']} step {r['step']} follows step {nxt - 1}"
            if list(r["post"]) != post:
                return i, (f"pstep: run {r['run']} step {nxt}: post-verify {r['post']}, but "
                           f"the step before leaves {post}")
            full = [int(a == (g if p else 1)) for a, p in zip(r["accepted"], r["post"],
                                                              strict=True)]
            ver = list(r["verified"]) if ver is None else [a + b for a, b in
                                                           zip(ver, r["verified"], strict=True)]
            state[r["run"]] = (nxt + 1, full, ver)
        elif t == "prun":
            nxt, post, ver = state.get(r["run"], (0, None, None))
            if nxt != steps:
                return i, f"prun: run {r['run']} has {nxt} steps, the header says {steps}"
            if list(r["n_generated"]) != ver:
                return i, (f"prun: run {r['run']} generated {r['n_generated']}, its steps "
                           f"verified {ver}")
            if [g - 1 if p else 0 for p in post] != list(r["pending"]):
                return i, f"prun: run {r['run']} pending {r['pending']} against its last step"
            state[r["run"]] = (-1, None, None)
    return None


# ------------------------------------------------------------------------------------------
# how a capture is predicted (PL3: each decode is a finite run from all-pre-verify)
# ------------------------------------------------------------------------------------------
def check_counts(steps, gamma: int) -> tuple[int, int]:
    """(accepted, rejected) checks of ``pstep`` records: the iid law's maximum-likelihood
    ``alpha`` is ``accepted / (accepted + rejected)`` (a check after a rejection is never
    made, so every check is one Bernoulli trial of the law)."""
    acc = sum(sum(r["accepted"]) for r in steps)
    rej = sum(sum(int(a < (gamma if p else 1)) for a, p in zip(r["accepted"], r["post"],
                                                              strict=True)) for r in steps)
    return acc, rej


def measured_step_costs(steps, pearl: dict) -> list[float]:
    """``c(k)``, ``k = 0..batch``, from the step times of ``pstep`` records: a padded forward
    costs alike for every ``k >= 1`` (PL5), so ``c(0)`` is the mean step time with no
    sequence in post-verify and ``c(k >= 1)`` the mean of the others; a packed forward, the
    mean at each ``k``, a ``k`` never seen interpolated linearly between the nearest seen
    (held constant beyond them)."""
    b = pearl["batch"]
    by_k: dict[int, list] = {}
    for r in steps:
        by_k.setdefault(sum(r["post"]), []).append(r["step_s"])
    if pearl["forward"] == "padded":
        pre = by_k.get(0, [])
        post = [x for k, xs in by_k.items() if k > 0 for x in xs]
        lo = float(np.mean(pre)) if pre else float(np.mean(post))
        hi = float(np.mean(post)) if post else lo
        return [lo] + [hi] * b
    ks = sorted(by_k)
    return [float(x) for x in np.interp(np.arange(b + 1), ks,
                                        [float(np.mean(by_k[k])) for k in ks])]


def predict_capture(pearl: dict, records, *, law=None, step_costs=None) -> dict:
    """PL3's prediction of a capture (``pearl``: the header block; ``records``: its ``pstep``
    records) next to what it measured: tokens per step per sequence, time per verified token,
    MAT. ``law`` (an acceptance law) and ``step_costs`` (``c(k)``, ``k = 0..batch``, in
    seconds) that come from elsewhere make a *prediction*; left ``None`` they are fitted on
    this capture (the iid law by maximum likelihood over its checks, :func:`check_counts`;
    :func:`measured_step_costs`) and the result is a *diagnostic*."""
    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.schemes.pearl import pearl_horizon

    steps = [r for r in records if r.get("type") == "pstep"]
    if not steps:
        raise PolyspecInputError("records", "no pstep records: nothing to predict")
    g, b, n = pearl["gamma"], pearl["batch"], pearl["steps"]
    acc, rej = check_counts(steps, g)
    fitted = []
    if law is None:
        law = IIDGeometric(acc / (acc + rej))
        fitted.append("law")
    if step_costs is None:
        step_costs = measured_step_costs(steps, pearl)
        fitted.append("step costs")
    h = pearl_horizon(law, g, step_costs, n)
    ver = sum(sum(r["verified"]) for r in steps)
    runs = sorted({r["run"] for r in steps})
    seconds = sum(r["step_s"] for r in steps)
    mats = []
    for run in runs:
        rs = [PearlStep(r["step"], tuple(bool(x) for x in r["post"]), tuple(r["accepted"]),
                        tuple(r["verified"]), r["m"], 0.0, 0.0, 0.0, 0.0)
              for r in steps if r["run"] == run]
        mats += [float(np.mean(x)) for x in run_lists(rs, g, b)]
    return {"kind": "diagnostic" if fitted else "prediction", "fitted_in_sample": fitted,
            "law": law.to_config(), "step_costs": [float(x) for x in step_costs],
            "predicted": {"tokens_per_step": h.verified / n, "time_per_token": h.time / h.verified,
                          "mat": h.mat},
            "measured": {"tokens_per_step": ver / (len(runs) * b * n),
                         "time_per_token": seconds * b / ver, "mat": float(np.mean(mats)),
                         "decodes": len(runs), "alpha_checks": acc / (acc + rej)}}


def padded_step_costs(draft_step: float, target_cost, gamma: int, batch: int,
                      overhead: float = 0.0) -> list[float]:
    """``c(k)`` of this decoder (PL5): the target's padded forward costs ``T_1(b, 1)`` with no
    sequence in post-verify and ``T_1(b, gamma)`` otherwise (``target_cost(m)`` at batch
    ``b``), against the drafter's ``gamma`` steps, plus the handshake."""
    lo = float(target_cost(1))
    hi = float(target_cost(gamma))
    return [max(gamma * draft_step, lo if k == 0 else hi) + overhead for k in range(batch + 1)]


# ------------------------------------------------------------------------------------------
# its captures (``polyspec capture``)
# ------------------------------------------------------------------------------------------
CAPTURE_REFUSES = {"--queue": "applies to --mode async",
                   "--tree": "applies to the structured scheme (sync)",
                   "--schedule": "applies to the structured scheme (sync)",
                   "--resume": "a parallel draft-verify trace is written whole: run it again"}


def check_capture(spec):
    """``polyspec capture --mode pearl``: a target and one drafter, greedy, on the CPU; the
    draft length is ``thresholds[0]`` (γ), one lockstep batch of ``batches[0]`` sequences
    (default 1), ``max_new_tokens`` steps per decode."""
    spec = spec.checked()
    if len(spec.models) != 2:
        raise PolyspecInputError("models", f"parallel draft-verify runs a target and one "
                                 f"drafter (one process and one core each), got "
                                 f"{len(spec.models)} models")
    if spec.temperature != 0.0:
        raise PolyspecInputError("temperature", "the parallel draft-verify decoder is greedy "
                                 f"(temperature 0), got {spec.temperature:g}")
    if spec.device != "cpu":
        raise PolyspecInputError("device", "the parallel draft-verify decoder pins each model "
                                 f"to a CPU core: device must be cpu, got {spec.device!r}")
    if spec.batches is not None and len(spec.batches) != 1:
        raise PolyspecInputError("batches", "parallel draft-verify decodes one lockstep batch "
                                 f"size per capture, got {list(spec.batches)}")
    return spec


def DRIVER(spec, *, out, name=None, resume=False, force=False, progress=True,  # noqa: N802
           argv=None):
    """The capture loop of this scheme (:func:`validation.capture.capture` calls it):
    ``n_prompts`` prompts of the zoo's validation split decoded in lockstep batches by
    :class:`PearlDecoder` and written by :func:`capture_pearl` to ``<out>/<name>.jsonl``."""
    from validation.capture.setup import (
        default_name,
        load_models,
        make_prompts,
        tokenizer_for,
        trace_path,
    )

    spec = check_capture(spec)
    if resume:
        raise PolyspecInputError("--resume", CAPTURE_REFUSES["--resume"])
    b = 1 if spec.batches is None else int(spec.batches[0])
    name = name if name is not None else (
        default_name(spec.models, spec.thresholds, spec.temperature) + f"_pearl_b{b}")
    path = trace_path(name, out, resume=False, force=force)
    if force and path.exists():
        path.unlink()
    _, loaded = load_models(spec.models, spec.device, spec.dtype, spec.zoo_dir)
    prompts, _ = make_prompts(spec.n_prompts, spec.prompt_len, spec.seed,
                              tokenizer_for(loaded, spec.models))
    prompts = [list(map(int, p)) for p in prompts]
    capture_pearl(loaded, prompts, gamma=spec.thresholds[0], batch=b,
                  steps=spec.max_new_tokens, out=path, name=name, cores=spec.cores)
    return path


def describe(path) -> str:
    """The line ``polyspec capture`` prints for a finished trace: steps and mean accepted."""
    import json

    steps, acc = 0, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "pstep":
                steps += 1
                acc += sum(r["accepted"]) if isinstance(r["accepted"], list) else r["accepted"]
    return f"{path}: {steps} parallel draft-verify steps, {acc} drafts accepted"


# ------------------------------------------------------------------------------------------
# how ``polyspec validate`` predicts its captures (PL3 per decode, nothing of the decode in
# its own prediction)
# ------------------------------------------------------------------------------------------
VALIDATE = "validation.schemes.pearl:validate_part"


@dataclass(frozen=True)
class PearlCapture:
    """One parallel draft-verify capture as ``polyspec validate`` reads it: its ``name``
    (the cascade's), the header's ``pearl`` block, the model names (target first) and its
    ``pstep`` records (checked against PL0 by the trace reader)."""

    name: str
    path: str
    pearl: dict
    models: tuple
    steps: list
    notes: tuple = ()
    scheme: str = NAME

    def decodes(self) -> list[list[dict]]:
        """The ``pstep`` records of each decode (``run``), in run order."""
        runs = sorted({r["run"] for r in self.steps})
        return [[r for r in self.steps if r["run"] == k] for k in runs]

    def setting(self) -> tuple:
        """What the step costs depend on: models, ``gamma``, batch, forward layout."""
        p = self.pearl
        return self.models, p["gamma"], p["batch"], p["forward"]


def read_capture(path, *, allow_truncated: bool = False) -> PearlCapture:
    """The :class:`PearlCapture` of the trace file ``path`` (read and checked by
    :func:`validation.traces.records.read_records`)."""
    from validation.traces.records import read_records

    tr = read_records(path, allow_truncated=allow_truncated)
    if not tr.complete:
        raise PolyspecInputError("traces", f"{path}: no end record (a parallel draft-verify "
                                 "trace is written whole: capture it again)")
    h = tr.header
    return PearlCapture(name=h["cascade"]["name"], path=str(path), pearl=h["pearl"],
                        models=tuple(m["name"] for m in h["cascade"]["models"]),
                        steps=tr.of_type("pstep"), notes=tuple(tr.skipped_notes()))


def validate_capture(cap: PearlCapture, others=()) -> dict:
    """Predicted vs measured time per verified token and tokens per step of ``cap`` (PL3).
    Each decode is predicted with the iid law fitted on every OTHER check of the model pair
    (the capture's other decodes and the ``others`` captures of the same models) and the
    step costs :func:`measured_step_costs` of the other steps of the same setting (same
    models, ``gamma``, batch, forward); the capture's prediction sums the decodes'
    predicted time and tokens. A capture with no other decode of its pair or setting has no
    prediction (``predicted: None``). ``in_sample``: the whole capture fitted on itself."""
    from polyspec_theory.core.laws import IIDGeometric
    from validation.analysis.relative import inside_ci, relative_error

    g = cap.pearl["gamma"]
    decodes = cap.decodes()
    pair = [o for o in others if o.models == cap.models and o.name != cap.name]
    same = [o for o in pair if o.setting() == cap.setting()]
    time = tokens = 0.0
    predicted = None
    for k, recs in enumerate(decodes):
        rest = [r for j, d in enumerate(decodes) if j != k for r in d]
        law_recs = rest + [r for o in pair for r in o.steps]
        cost_recs = rest + [r for o in same for r in o.steps]
        if not law_recs or not cost_recs:
            break
        acc, rej = check_counts(law_recs, g)
        out = predict_capture(cap.pearl, recs, law=IIDGeometric(acc / (acc + rej)),
                              step_costs=measured_step_costs(cost_recs, cap.pearl))
        tps = out["predicted"]["tokens_per_step"]
        tokens += tps
        time += tps * out["predicted"]["time_per_token"]
    else:
        predicted = {"tokens_per_step": tokens / len(decodes), "time_per_token": time / tokens}
    diag = predict_capture(cap.pearl, cap.steps)
    meas = diag["measured"]
    tpt = []  # per decode, for the measured interval
    for recs in decodes:
        ver = sum(sum(r["verified"]) for r in recs)
        tpt.append(sum(r["step_s"] for r in recs) * cap.pearl["batch"] / ver)
    half = float("nan")
    if len(tpt) > 1:  # Student's t over the decodes (a capture has a few)
        from scipy.stats import t as student

        half = (float(student.ppf(0.975, len(tpt) - 1)) * float(np.std(tpt, ddof=1))
                / np.sqrt(len(tpt)))
    ci = [meas["time_per_token"] - half, meas["time_per_token"] + half]
    value = None if predicted is None else predicted["time_per_token"]
    return {"name": cap.name, "gamma": g, "batch": cap.pearl["batch"],
            "steps": cap.pearl["steps"], "decodes": len(decodes),
            "measured": {"time_per_token": meas["time_per_token"], "time_per_token_ci95": ci,
                         "tokens_per_step": meas["tokens_per_step"],
                         "alpha_checks": meas["alpha_checks"]},
            "predicted": predicted, "error": relative_error(value, meas["time_per_token"]),
            "inside_ci": inside_ci(value, ci),
            "in_sample": {"time_per_token": diag["predicted"]["time_per_token"],
                          "tokens_per_step": diag["predicted"]["tokens_per_step"],
                          "error": relative_error(diag["predicted"]["time_per_token"],
                                                  meas["time_per_token"])}}


def validate_text(rows) -> str:
    """The table ``polyspec validate`` prints for parallel draft-verify captures."""
    from validation.analysis.relative import error_headline

    w = max(len(r["name"]) for r in rows)
    lines = [f"{len(rows)} parallel draft-verify capture(s) (target and drafter in two "
             "processes; time per verified token, ms, 95 % CI over the decodes (Student's t); "
             "docs/theory.md PL3: law and step costs from the other decodes)",
             f"{'config':<{w}}  decodes  tok/step  measured [95 % CI]           predicted   "
             "error  inside  in-sample   error"]
    ms = 1e3
    for r in rows:
        m = r["measured"]
        lo, hi = m["time_per_token_ci95"]
        pred = "        —       —      —" if r["predicted"] is None else (
            f"{ms * r['predicted']['time_per_token']:9.3f} {100 * r['error']:+6.2f}%  "
            f"{'—' if r['inside_ci'] is None else 'yes' if r['inside_ci'] else 'no':>5}")
        lines.append(f"{r['name']:<{w}}  {r['decodes']:7d}  {m['tokens_per_step']:8.3f}  "
                     f"{ms * m['time_per_token']:8.3f} [{ms * lo:.3f}, {ms * hi:.3f}]  {pred}  "
                     f"{ms * r['in_sample']['time_per_token']:9.3f} "
                     f"{100 * r['in_sample']['error']:+6.2f}%")
    lines.append(error_headline(
        [r["error"] for r in rows], "pearl headline (law and step costs from the other "
        "decodes)", "pearl: no headline prediction (each capture has one decode and no other "
        "capture of its models and setting: capture more prompts than --batch)"))
    return "\n".join(lines)


def validate_part(captures, ctx):
    """``polyspec validate``'s part for the parallel draft-verify captures
    (:mod:`validation.analysis.traces`): :func:`validate_capture` of each against the
    others."""
    from validation.analysis.traces import Part

    if not captures:
        return None
    rows = [validate_capture(c, captures) for c in captures]
    notes = tuple(n for c in captures for n in c.notes)
    ctx.notes.extend(notes)
    text = validate_text(rows)
    return Part("pearl", rows, {"pearl": rows, "notes": list(ctx.notes)}, text, notes,
                order=3, joined=f"\n{text}")
