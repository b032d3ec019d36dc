"""The CLI contract the fuzz tests hold every run to: exit 0 or 2, never a traceback or an
internal error, a refusal on exactly one line, and strict JSON (no bare NaN/Infinity) on
success."""

from __future__ import annotations

import json

from polyspec.cli import main


def strict_json(text):
    """``json.loads`` that refuses the bare constants NaN, Infinity and -Infinity."""
    def refuse(c):
        raise AssertionError(f"not JSON: bare {c} in the output")

    return json.loads(text, parse_constant=refuse)


def run_checked(capsys, argv):
    """Run ``polyspec ARGV`` in-process and check the contract; returns ``(rc, out, err,
    data)`` with ``data`` the parsed JSON output on exit 0 and ``None`` on exit 2."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if rc == 2:
        assert err.count("\n") == 1 and err.startswith(f"polyspec {argv[0]}: error: "), err
        return rc, out, err, None
    return rc, out, err, strict_json(out)
