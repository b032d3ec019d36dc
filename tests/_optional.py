"""Optional dependencies in tests: skip where they are missing, fail loudly in CI.

A test that needs an optional extra (``jax``, ``transformers``, ...) calls
:func:`optional_import`. On a developer machine without the extra the test is skipped; with
``POLYSPEC_STRICT=1`` (set by ``make test`` and ``.ci/run``) or ``CI=true``/``CI=1`` it fails
with a message naming the missing package, so a CI run can never pass by skipping.
``tests/conftest.py`` applies the same rule to every other skip.
"""

from __future__ import annotations

import importlib
import os

import pytest

__all__ = ["strict", "optional_import"]


def strict() -> bool:
    """True in CI: ``POLYSPEC_STRICT=1``, or ``CI`` set to ``1``/``true`` (any case)."""
    if os.environ.get("POLYSPEC_STRICT", "") == "1":
        return True
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def optional_import(name: str):
    """Import ``name``; without it skip the test, or fail in strict mode."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        msg = (f"optional dependency {name!r} is missing ({e}); install the extras with "
               "pip install -e '.[all,dev]'")
        if strict():
            pytest.fail(f"{msg} (strict mode: POLYSPEC_STRICT=1 or CI set, so a missing "
                        "dependency is a failure, not a skip)", pytrace=False)
        pytest.skip(msg, allow_module_level=True)
