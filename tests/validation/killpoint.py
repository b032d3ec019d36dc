"""A real ``polyspec capture`` run in a process of its own that SIGKILLs itself as it is about
to write its N-th trace record (header and resume records count), after writing the first
half of that record's line when ``partial`` (tests/validation/test_capture_kill.py).

The processes are forked from one ``forkserver`` that has imported torch and the capture
once (:func:`killed_capture`), so each killed run pays its own model loads and records but
not a fresh interpreter's imports; nothing else changes: the child runs the CLI's ``main``
on the command's arguments, as ``python -m polyspec`` does."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys

PRELOAD = ["torch", "polyspec.cli", "polyspec.commands.capture", "validation.capture.single",
           "validation.capture.models", "validation.traces.records"]


def arm(n: int, partial: bool) -> None:
    """From now on this process SIGKILLs itself as it is about to write its ``n``-th trace
    record (after half of its line when ``partial``)."""
    import validation.traces.records as traces

    orig = traces.TraceWriter.write
    count = [0]

    def write(self, record):
        count[0] += 1
        if count[0] == n:
            if partial:
                rec = record if isinstance(record, dict) else record.to_record()
                line = json.dumps(rec, separators=(",", ":"))
                self._f.write(line[: len(line) // 2])
                self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        orig(self, record)

    traces.TraceWriter.write = write


def _child(argv, n, partial, log, env):
    os.environ.clear()  # the caller's environment, not the server's from its start
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    arm(n, partial)
    from polyspec.cli import main

    sys.exit(main(argv))


def killed_capture(argv, n: int, partial: bool, log) -> int:
    """Run ``polyspec capture`` with the arguments ``argv`` (after ``capture``) in a forked
    process armed with :func:`arm`, in this process's environment (the server may have been
    started by another test, in another one); its stdout and stderr go to the file ``log``.
    Returns its exit code (``-SIGKILL`` when the kill fired)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    p = ctx.Process(target=_child, args=(["capture", *argv], n, partial, str(log),
                                         dict(os.environ)))
    p.start()
    p.join(120)
    if p.exitcode is None:
        p.kill()
        p.join()
    return p.exitcode
