"""Strict mode (``POLYSPEC_STRICT=1`` or ``CI`` set, see ``tests/_optional.py``): a skipped
test or module is reported as a failure, so that CI cannot pass by skipping."""

from __future__ import annotations

import pytest

from tests._optional import strict


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
