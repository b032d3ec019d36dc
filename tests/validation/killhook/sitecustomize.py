"""Test hook for ``tests/validation/test_capture_kill.py`` (put this folder on PYTHONPATH):
when ``POLYSPEC_TEST_KILL_AT=N`` is set, the process SIGKILLs itself as it is about to write
its N-th trace record (header and resume records count) — after writing the first half of
that record's line when ``POLYSPEC_TEST_KILL_PARTIAL=1``. Nothing else changes: the command
is a real ``python -m polyspec capture``."""

import os

_AT = os.environ.get("POLYSPEC_TEST_KILL_AT")
if _AT:
    import json
    import signal

    import validation.traces.records as _traces

    _n = int(_AT)
    _partial = os.environ.get("POLYSPEC_TEST_KILL_PARTIAL") == "1"
    _orig = _traces.TraceWriter.write
    _count = [0]

    def _write(self, record):
        _count[0] += 1
        if _count[0] == _n:
            if _partial:
                rec = record if isinstance(record, dict) else record.to_record()
                line = json.dumps(rec, separators=(",", ":"))
                self._f.write(line[: len(line) // 2])
                self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        _orig(self, record)

    _traces.TraceWriter.write = _write
