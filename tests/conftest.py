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
schedules groups, largest first, before the single tests that even out the end).

JAX compilations: one persistent compilation cache per run (``JAX_COMPILATION_CACHE_DIR``, a
fresh temporary folder made by the process that starts the run and removed when it ends;
every compilation cached, ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0``). xdist workers and
the subprocesses of the CLI and doc-block tests inherit it, so a simulator kernel compiled by
one of them is loaded, not recompiled, by the others. `polyspec verify --quick` runs once: the
doc block of docs/validation.md that prints it (tests/doc_blocks.py runs a block once per
process) also gives tests/polyspec/test_simulate_verify_cli.py its rows; both run on one worker
(xdist group ``verify_quick``). A clean clone starts empty, so nothing outlives the run; a
cached executable gives the same numbers as a fresh compilation
(tests/simulators/test_compilation_cache.py). ``JAX_COMPILATION_CACHE_DIR`` set beforehand is
used as it is (not removed); ``JAX_ENABLE_COMPILATION_CACHE=false`` turns the cache off."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from tests._optional import strict

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True,
                          max_examples=5 * settings.default.max_examples)
os.environ["POLYSPEC_MAX_LOAD"] = "1000000"

# before jax is imported (its flags read these at import); workers and subprocesses inherit them
_JAX_CACHE_MADE = None
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _JAX_CACHE_MADE = tempfile.mkdtemp(prefix="polyspec-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE_MADE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

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


def pytest_unconfigure(config):
    if _JAX_CACHE_MADE is not None:  # only the process that made it (not an xdist worker)
        shutil.rmtree(_JAX_CACHE_MADE, ignore_errors=True)


def _runs_verify(item) -> bool:
    """A doc block (tests/test_docs.py) that runs `polyspec verify`."""
    block = getattr(getattr(item, "callspec", None), "params", {}).get("block")
    return any(c.split()[:2] == ["polyspec", "verify"] for c in getattr(block, "commands", ()))


def pytest_itemcollected(item):
    module = item.nodeid.split("::", 1)[0]
    # the verify rows' tests and the doc block that runs `polyspec verify --quick` for them
    if module == "tests/polyspec/test_simulate_verify_cli.py" or (
            module == "tests/test_docs.py" and _runs_verify(item)):
        item.add_marker(pytest.mark.xdist_group("verify_quick"))
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
