"""Missing optional dependencies skip on a developer machine but fail in CI (strict mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
from tests._optional import optional_import

def test_needs_a_missing_package():
    optional_import("polyspec_no_such_package")

def test_plain_skip():
    import pytest
    pytest.skip("not here")
'''


def _run(tmp_path, strict_env):
    probe = tmp_path / "test_probe_optional.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("POLYSPEC_STRICT", "CI")}
    env.update(strict_env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # run from the repository root so that tests/conftest.py (the strict hooks) applies
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
                           "--confcutdir", str(ROOT), "-p", "tests.conftest", str(probe)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_missing_dependency_skips_without_strict_mode(tmp_path):
    r = _run(tmp_path, {})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 skipped" in r.stdout


def test_missing_dependency_fails_in_strict_mode(tmp_path):
    for env in ({"POLYSPEC_STRICT": "1"}, {"CI": "true"}):
        r = _run(tmp_path, env)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "2 failed" in r.stdout, r.stdout
        assert "polyspec_no_such_package" in r.stdout
        assert "strict mode" in r.stdout
