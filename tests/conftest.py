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
(subprocesses inherit it); tests/validation/test_machine.py tests the refusal itself.

One worker per module (``ONE_WORKER``): ``make test`` runs ``-n 2 --dist loadgroup``, which
hands out ungrouped tests one by one, so a module's module-scoped fixture (a capture, a decode,
a validate run) is computed on each worker that draws one of its tests. The modules listed
get an ``xdist_group`` mark of their own, so their fixtures are computed once per run (xdist
schedules groups, largest first, before the single tests that even out the end)."""

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


ONE_WORKER = (
    "tests/polyspec/test_validate_cli.py",  # a validate run
    "tests/polyspec_theory/test_planner.py",  # the example pool's plan
    "tests/simulators/test_verify_rows.py",  # the verify context's cached simulations
    "tests/validation/test_analysis.py",  # the leave-one-out captures
    "tests/validation/test_async_decoder.py",  # pipeline decodes, an async capture
    "tests/validation/test_batch_capture.py",  # a batch sweep capture
    "tests/validation/test_batch_validate.py",  # batch validation
    "tests/validation/test_decisions.py",  # synthetic captures
    "tests/validation/test_hf.py",  # two saved GPT-2 models
    "tests/validation/test_pearl_decoder.py",  # PEARL decodes
    "tests/validation/test_resume.py",  # a trace, a zoo
    "tests/validation/test_verify_path_costs.py",  # the committed tree captures
)


def pytest_itemcollected(item):
    module = item.nodeid.split("::", 1)[0]
    if module in ONE_WORKER and not any(item.iter_markers("xdist_group")):
        item.add_marker(pytest.mark.xdist_group(module.rsplit("/", 1)[-1][:-3]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make ``--dist loadgroup`` group: xdist (3.8) tells the scheduler a test's group by
    renaming it ``nodeid@group`` through ``item._nodeid``, which pytest 9 no longer reads
    (``item.nodeid`` is ``str(item._id)``), so every ``xdist_group`` mark was ignored and
    each worker drawing a test of a group recomputed its shared fixtures. The same rename,
    through ``item._id``."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


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
