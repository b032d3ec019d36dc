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

import multiprocessing as mp
import os
import pickle
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_real

NAME = "pearl"  # the theory registry's scheme

__all__ = ["NAME", "PearlDecoder", "PearlResult", "PearlStep", "check_pearl_args",
           "run_lists", "counted_tokens"]

POLL_S = 2e-5
DRAFTED, VERDICT, STOP, READY = range(4)


def _torch():
    import torch

    return torch


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
    if len(models) != 2:
        raise PolyspecInputError("models", f"parallel draft-verify runs a target and one "
                                 f"drafter (one process and one core each), got {len(models)} "
                                 "models")
    if len({lv.vocab_size for lv in models}) != 1:
        raise PolyspecInputError("models", "models must share one vocabulary, got sizes "
                                 f"{[lv.vocab_size for lv in models]}")
    t = as_real(temperature, "temperature", low=0.0, high=100.0)
    if t != 0.0:
        raise PolyspecInputError("temperature", f"the parallel draft-verify decoder is greedy "
                                 f"(temperature 0, as nano-PEARL's benchmark), got {t:g}")
    return as_int(gamma, "gamma", low=1, high=4096)


def _views(shared):
    ctrl, blk, cut, corr = shared
    return tuple(np.frombuffer(x, dtype=np.int64) for x in (ctrl, blk, cut, corr))


class _Aborted(Exception):
    """The other process failed: stop quietly (it reports the error)."""


def _wait(ctrl, idx, value):
    while ctrl[idx] < value:
        if ctrl[STOP]:
            raise _Aborted
        time.sleep(POLL_S)


def _barrier(ctrl, lock, n):
    with lock:
        ctrl[READY] += 1
    _wait(ctrl, READY, n)


def _prefill(level, seqs):
    t0 = time.perf_counter()
    ends = [len(s) - 1 for s in seqs]
    if max(ends) > 0:
        level.logits(seqs, ends)
    return time.perf_counter() - t0


def _target_loop(level, shared, lock, job):
    torch = _torch()
    ctrl, blk_a, cut_a, corr_a = _views(shared)
    gamma, b = job["gamma"], len(job["prompts"])
    ver = [list(p) for p in job["prompts"]]
    pend = [[] for _ in range(b)]
    post = [False] * b
    level.reset(b, job["slack"])
    prefill_s = _prefill(level, ver)
    _barrier(ctrl, lock, 2)
    steps, blocks = [], []
    t_start = t_prev = time.perf_counter()
    for s in range(job["steps"]):
        seqs = [ver[j] + pend[j] for j in range(b)]
        t0 = time.perf_counter()
        lg, _mj = level.logits(seqs, [len(x) for x in seqs])
        t1 = time.perf_counter()
        am = torch.argmax(lg, dim=-1).tolist()
        _wait(ctrl, DRAFTED, s + 1)
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
    torch = _torch()
    ctrl, blk_a, cut_a, corr_a = _views(shared)
    gamma, b = job["gamma"], len(job["prompts"])
    seq = [list(p) for p in job["prompts"]]
    level.reset(b, job["slack"])
    prefill_s = _prefill(level, seq)
    _barrier(ctrl, lock, 2)
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
        _wait(ctrl, VERDICT, s + 1)
        with lock:
            cut, corr = cut_a[:b].tolist(), corr_a[:b].tolist()
        for j in range(b):
            if corr[j] >= 0:  # rejected: cut to the accepted drafts, adopt the correction
                level.rollback(j, cut[j])
                del seq[j][cut[j]:]
                seq[j].append(int(corr[j]))
    return {"draft_s": draft_s, "prefill_s": prefill_s, "forwards": gamma * job["steps"]}


def _worker(role, blob, shared, lock, conn, core, threads):
    """One model's process: pin to ``core``, load the pickled model, serve ``run`` jobs."""
    try:
        from validation.batch.levels import batch_level

        torch = _torch()
        os.sched_setaffinity(0, {core})
        torch.set_num_threads(threads)
        level = batch_level(pickle.loads(blob))
        del blob
        conn.send(("ready", os.getpid(), sorted(os.sched_getaffinity(0))))
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send(("error", traceback.format_exc()))
        return
    loop = _target_loop if role == 0 else _draft_loop
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            return
        ctrl = _views(shared)[0]
        try:
            with torch.inference_mode():
                conn.send(("ok", loop(level, shared, lock, msg[1])))
        except _Aborted:
            conn.send(("aborted", None))
        except BaseException:  # noqa: BLE001 - reported to the parent
            ctrl[STOP] = 1
            conn.send(("error", traceback.format_exc()))


class PearlDecoder:
    """The two-process parallel draft-verify decoder over ``models`` (target first) with
    draft length ``gamma`` (module docstring). Use it as ``with PearlDecoder(...) as dec:``;
    the worker processes live until closed and decode one batch per :meth:`generate`."""

    def __init__(self, models, *, gamma, cores=None, temperature=0.0, threads=1,
                 max_batch=64, timeout_s=600.0):
        from validation.async_decoder import pick_cores

        self.gamma = check_pearl_args(models, gamma, temperature)
        self.models = list(models)
        self.vocab = models[0].vocab_size
        self.cores = pick_cores(2, cores)
        self.threads = as_int(threads, "threads", low=1, high=1024)
        self.max_batch = as_int(max_batch, "max_batch", low=1, high=4096)
        self.timeout_s = as_real(timeout_s, "timeout_s", low=1.0)
        self._procs = []

    def start(self) -> PearlDecoder:
        if self._procs:
            return self
        ctx = mp.get_context("spawn")
        b, g = self.max_batch, self.gamma
        self._shared = (ctx.RawArray("q", 4), ctx.RawArray("q", b * g), ctx.RawArray("q", b),
                        ctx.RawArray("q", b))
        self._lock = ctx.Lock()
        self._conns, self.pids = [], []
        for role, (lv, core) in enumerate(zip(self.models, self.cores, strict=True)):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, name=f"polyspec-pearl-{role}", daemon=True,
                            args=(role, pickle.dumps(lv), self._shared, self._lock, theirs,
                                  core, self.threads))
            p.start()
            theirs.close()
            self._procs.append(p)
            self._conns.append(mine)
        for role in range(2):
            kind, *rest = self._recv(role)
            if kind != "ready":
                self.close()
                raise RuntimeError(f"pearl process {role} failed to start:\n{rest[0]}")
            self.pids.append(rest[0])
        return self

    def _recv(self, role):
        conn, proc = self._conns[role], self._procs[role]
        deadline = time.monotonic() + self.timeout_s
        while not conn.poll(0.2):
            if not proc.is_alive():
                raise RuntimeError(f"pearl process {role} (pid {proc.pid}) died (exit code "
                                   f"{proc.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"pearl process {role} gave no answer in "
                                   f"{self.timeout_s:g} s")
        return conn.recv()

    def close(self) -> None:
        for conn, p in zip(getattr(self, "_conns", []), self._procs, strict=False):
            try:
                conn.send(("close",))
            except (OSError, BrokenPipeError):
                pass
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
        self._procs = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

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
        ctrl = _views(self._shared)[0]
        ctrl[:] = 0
        job = {"prompts": prompts, "steps": steps, "gamma": self.gamma,
               "slack": self.gamma + 1, "record_blocks": bool(record_blocks)}
        for conn in self._conns:
            conn.send(("run", job))
        answers = [self._recv(0), self._recv(1)]
        for role, (kind, body) in enumerate(answers):
            if kind == "error":
                raise RuntimeError(f"pearl process {role} failed:\n{body}")
        if any(kind != "ok" for kind, _ in answers):
            raise RuntimeError("pearl decode aborted")
        t, d = answers[0][1], answers[1][1]
        recs = [PearlStep(*s[:7], step_s=s[7], draft_s=d["draft_s"][s[0]])
                for s in t["steps"]]
        return PearlResult(prompts=prompts, tokens=t["tokens"], pending=t["pending"],
                           steps=recs, gamma=self.gamma, wall_s=t["wall_s"],
                           prefill_s=max(t["prefill_s"], d["prefill_s"]),
                           draft_forwards=d["forwards"], pids=list(self.pids),
                           cores=list(self.cores), blocks=t["blocks"])
