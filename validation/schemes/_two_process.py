"""The plumbing of the two-process decoders (the asynchronous pipeline, ``async_``, and
parallel draft-verify, ``pearl``): the target and one drafter each in its own process pinned
to its own core, sharing ``int64`` arrays and a lock, answering jobs over a pipe.

A decoder subclasses :class:`TwoProcessDecoder` and gives its two loops (module-level
functions ``loop(model, shared, lock, job) -> dict``, target first), its shared arrays
(``_arrays(ctx)``: the control array first, whose slots :data:`STOP` and :data:`READY` are
this module's and the rest, from :data:`FIRST_SLOT`, the decoder's) and how a worker loads
its pickled model (``LOAD``; default ``pickle.loads``). A loop waits with :func:`wait` /
:func:`barrier`, which raise :class:`Aborted` once the other process has failed (it reports
the error); an exception with an ``answer`` attribute is answered with that kind instead of
``"error"`` (the decoder's :meth:`TwoProcessDecoder._failed` turns it back).
"""

from __future__ import annotations

import abc
import ctypes
import multiprocessing as mp
import os
import pickle
import time
import traceback

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.schemes import torch

POLL_S = 2e-5  # polling period of a waiting process (timer slack lowered to 1 µs)
STOP, READY = 0, 1  # control slots every decoder has; its own start at FIRST_SLOT
FIRST_SLOT = 2


class Aborted(Exception):
    """The other process failed: stop quietly (it reports the error)."""


def pick_cores(n_levels: int, cores=None) -> list[int]:
    """One distinct core per level: ``cores`` (checked against the cores this process may
    use) or the first ``n_levels`` of them."""
    avail = sorted(os.sched_getaffinity(0))
    if cores is None:
        if len(avail) < n_levels:
            raise PolyspecInputError(
                "cores", f"the decoder runs each level in its own process on its own core: "
                f"{n_levels} levels need {n_levels} cores, this process may use {len(avail)} "
                f"({avail})")
        return avail[:n_levels]
    cores = [as_int(c, f"cores[{i}]", low=0) for i, c in enumerate(cores)]
    if len(cores) != n_levels or len(set(cores)) != n_levels:
        raise PolyspecInputError("cores", f"need {n_levels} distinct cores (one per level), "
                                 f"got {cores}")
    bad = [c for c in cores if c not in avail]
    if bad:
        raise PolyspecInputError("cores", f"core(s) {bad} not available to this process "
                                 f"(available: {avail})")
    return cores


def check_pair(models, temperature, what: str, like: str) -> None:
    """Two models (target, drafter) sharing a vocabulary, temperature 0: what a two-process
    decoder runs (``what``: its name in errors; ``like``: whose rules it follows)."""
    if len(models) != 2:
        raise PolyspecInputError("models", f"{what} runs two levels, a target and one drafter "
                                 f"(one process and one core each), got {len(models)} models")
    if len({lv.vocab_size for lv in models}) != 1:
        raise PolyspecInputError("models", "models must share one vocabulary, got sizes "
                                 f"{[lv.vocab_size for lv in models]}")
    t = as_real(temperature, "temperature", low=0.0, high=100.0)
    if t != 0.0:
        raise PolyspecInputError("temperature", f"{what} is greedy (temperature 0, as "
                                 f"{like}), got {t:g}")


def low_timer_slack() -> None:
    """Lower this process's timer slack to 1 µs (polling sleeps of :data:`POLL_S`)."""
    try:
        ctypes.CDLL(None).prctl(29, 1000)  # PR_SET_TIMERSLACK, 1 µs
    except (OSError, AttributeError):  # pragma: no cover
        pass


def views(shared) -> tuple:
    """The shared arrays as ``int64`` numpy views (the control array first)."""
    return tuple(np.frombuffer(x, dtype=np.int64) for x in shared)


def wait(ctrl, idx: int, value: int) -> None:
    """Poll until ``ctrl[idx] >= value``; :class:`Aborted` once ``ctrl[STOP]`` is set."""
    while ctrl[idx] < value:
        if ctrl[STOP]:
            raise Aborted
        time.sleep(POLL_S)


def barrier(ctrl, lock, n: int) -> None:
    """Wait until ``n`` processes have reached this barrier."""
    with lock:
        ctrl[READY] += 1
    wait(ctrl, READY, n)


def _worker(blob, shared, lock, conn, core, threads, load, loop):
    """One model's process: pin to ``core``, load the pickled model with ``load``, serve
    ``run`` jobs with ``loop`` until ``close``."""
    try:
        os.sched_setaffinity(0, {core})
        torch.set_num_threads(threads)
        low_timer_slack()
        model = load(blob)
        del blob
        conn.send(("ready", os.getpid(), sorted(os.sched_getaffinity(0))))
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            return
        ctrl = views(shared)[0]
        try:
            with torch.inference_mode():
                conn.send(("ok", loop(model, shared, lock, msg[1])))
        except Aborted:
            conn.send(("aborted", None))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            ctrl[STOP] = 1
            conn.send((getattr(e, "answer", "error"), traceback.format_exc()))


def _context(decoder_module: str):
    """The ``forkserver`` start method: its server process imports torch, the zoo's model
    classes and the decoder's module once per parent process, and every worker is forked
    from it, so a decoder starts in a fraction of a second instead of importing torch in two
    fresh interpreters (``spawn``). The server is single-threaded (no torch op has run in
    it), so forking it is safe; each worker still takes this process's ``sys.path`` and
    working directory at its start (the environment is the server's, from its start)."""
    ctx = mp.get_context("forkserver")
    preload = ["torch", "validation.capture.models", decoder_module]
    ctx.set_forkserver_preload([m for m in preload if m != "__main__"])
    return ctx


class TwoProcessDecoder(abc.ABC):
    """The two worker processes over ``models`` (target first): start, ask, close. Use it
    as ``with Decoder(...) as dec:``; the processes live until closed. Subclasses set
    ``NAME`` (process names, ``"<NAME> decode aborted"``), ``ROLE`` (``"<ROLE> 0"`` in
    errors), ``LOOPS`` (the target's and the drafter's loop), optionally ``LOAD``, and
    ``_arrays(ctx)``."""

    NAME = "two-process"
    ROLE = "process"
    LOOPS: tuple = ()
    LOAD = staticmethod(pickle.loads)

    def _setup(self, models, cores, threads, timeout_s) -> None:
        """The common arguments, checked (errors name the field)."""
        self.models = list(models)
        self.vocab = models[0].vocab_size
        self.cores = pick_cores(2, cores)
        self.threads = as_int(threads, "threads", low=1, high=1024)
        self.timeout_s = as_real(timeout_s, "timeout_s", low=1.0)
        self._procs = []

    @abc.abstractmethod
    def _arrays(self, ctx) -> tuple:
        """The decoder's shared arrays (control first), made with ``ctx``: every decoder
        defines its own (the async and PEARL decoders do)."""

    def start(self):
        if self._procs:
            return self
        ctx = _context(type(self).__module__)
        self._shared = self._arrays(ctx)
        self._lock = ctx.Lock()
        self._conns, self.pids = [], []
        for role, (lv, core) in enumerate(zip(self.models, self.cores, strict=True)):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, name=f"polyspec-{self.NAME}-{role}", daemon=True,
                            args=(pickle.dumps(lv), self._shared, self._lock, theirs, core,
                                  self.threads, self.LOAD, self.LOOPS[role]))
            p.start()
            theirs.close()
            self._procs.append(p)
            self._conns.append(mine)
        for role in range(2):
            kind, *rest = self._recv(role)
            if kind != "ready":
                self.close()
                raise RuntimeError(f"{self.ROLE} {role} failed to start:\n{rest[0]}")
            self.pids.append(rest[0])
            if rest[1] != [self.cores[role]]:
                self.close()
                raise RuntimeError(f"{self.ROLE} {role} is not pinned to core "
                                   f"{self.cores[role]} (affinity {rest[1]})")
        return self

    def _recv(self, role):
        conn, proc = self._conns[role], self._procs[role]
        deadline = time.monotonic() + self.timeout_s
        while not conn.poll(0.2):
            if not proc.is_alive():
                raise RuntimeError(f"{self.ROLE} {role} (pid {proc.pid}) died (exit code "
                                   f"{proc.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.ROLE} {role} gave no answer in "
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

    def _failed(self, role: int, kind: str, body: str):
        """Raise the error a worker reported (``kind``: its answer, ``body``: the
        traceback)."""
        raise RuntimeError(f"{self.ROLE} {role} failed:\n{body}")

    def _run(self, job: dict, roles=(0, 1)) -> list[dict]:
        """Send ``job`` to the processes of ``roles`` (the others stay blocked, using no CPU);
        their answers in that order (the target's and the drafter's by default)."""
        if not self._procs:
            raise RuntimeError(f"{type(self).__name__} not started (use it in a with block)")
        for role in roles:
            self._conns[role].send(("run", job))
        answers = [self._recv(role) for role in roles]
        for role, (kind, body) in zip(roles, answers, strict=True):
            if kind not in ("ok", "aborted"):
                self._failed(role, kind, body)
        if any(kind != "ok" for kind, _ in answers):
            raise RuntimeError(f"{self.NAME} decode aborted")
        return [body for _, body in answers]
