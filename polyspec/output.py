"""The command line's one door to :mod:`validation.files` (issue 37, one rule one place):
every command checks its output paths and devices, writes its files and prints its JSON
through these names, so the rules for writes (atomic; never over a file the command read,
recorded since :func:`reset_reads`; strict JSON, a non-finite number written as ``null`` and
noted) are the validation wing's, reached by one import. Only this module and
:mod:`polyspec.configs` (the bytes of a config file) import ``validation.files``
(tests/test_rooms.py)."""

from __future__ import annotations

from validation.files import (
    atomic_write_text,
    check_device,
    check_output,
    check_output_dir,
    dump_json,
    reset_reads,
    write_output,
)

__all__ = ["atomic_write_text", "check_device", "check_output", "check_output_dir",
           "dump_json", "reset_reads", "write_output"]
