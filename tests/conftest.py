"""Strict mode (``POLYSPEC_STRICT=1`` or ``CI`` set, see ``tests/_optional.py``): a skipped
test or module is reported as a failure, so that CI cannot pass by skipping.

Hypothesis: in strict mode every property test draws the same examples on every run
(``derandomize``: a CI verdict is reproducible and cannot flip on a fresh draw);
``POLYSPEC_HYPOTHESIS=explore`` draws fresh random examples (five times the default count
where a test does not set its own) to hunt for counterexamples; pin any it finds as an
explicit case.

Load: the suite captures and profiles on tiny models only to test the code, on a machine the
suite itself keeps busy (``-n 2``), so the load refusal of ``polyspec capture`` / ``profile``
(:mod:`validation.capture.machine`, docs/measuring.md) is lifted here by a high
``POLYSPEC_MAX_LOAD``
(subprocesses inherit it); tests/validation/test_machine.py tests the refusal itself."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests._optional import strict

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True,
                          max_examples=5 * settings.default.max_examples)
os.environ["POLYSPEC_MAX_LOAD"] = "1000000"

if os.environ.get("POLYSPEC_HYPOTHESIS") == "explore":
    settings.load_profile("explore")
elif strict():
    settings.load_profile("ci")


def _fail_skip(report, what: str) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
    report.outcome = "failed"
    report.longrepr = (f"{what} skipped in strict mode (POLYSPEC_STRICT=1 or CI set): "
                       f"{reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if strict() and report.skipped and not hasattr(report, "wasxfail"):
        _fail_skip(report, f"test {item.nodeid}")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if strict() and report.skipped:
        _fail_skip(report, f"module {collector.nodeid}")
