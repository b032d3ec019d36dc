"""The registry's answers that replace the mode and scheme-name tests of the analyses
(issue 37): which schemes are synchronous, where threshold 0 means "verify what is ready",
which captures a scheme wrote, and the async forecast's "already captured" check.

Independent values: a scheme is synchronous exactly when a config of it needs no ``"mode"``
(its cascade's mode is the one a config without ``"mode"`` gets); a capture was written by
the async pipeline exactly when its header says ``"mode": "async"`` (the trace schema); the
committed idle folder holds the async captures at θ 0 and 4 (queue 48) of ``target <-
draft-t`` and one synchronous capture of the same pair."""

from __future__ import annotations

from pathlib import Path

import pytest

import polyspec
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import (
    DEFAULT_MODE,
    registry,
    synchronous,
    threshold_floor,
    verifies_what_is_ready,
)
from validation.analysis.async_forecast import already_captured
from validation.formats.pipespec import lookahead_of
from validation.schemes import captures_of, synchronous_captures
from validation.traces.batch import read_batch_trace
from validation.traces.records import read_traces

ROOT = Path(__file__).resolve().parents[2]
IDLE = ROOT / "data" / "traces" / "cpu-async" / "idle"
BATCH = ROOT / "data" / "traces" / "cpu-batch" / "target-ngram_th2_T0_b2.jsonl"
BASE = {"models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.05}],
        "acceptance": [{"alpha": 0.8}], "thresholds": [2]}


def test_synchronous_schemes_are_those_of_a_config_without_mode():
    default = polyspec.load_cascade(BASE).mode
    assert DEFAULT_MODE == default == "sync"
    got = {name: synchronous(name) for name in registry()}
    assert got == {name: s.mode == default for name, s in registry().items()}
    # pinned: the four built-in synchronous ones and the two that are not
    assert got == {"batch": True, "structured": True, "chain": True, "async": False,
                   "pearl": False}
    with pytest.raises(PolyspecInputError, match="scheme"):
        synchronous("nope")


def test_threshold_zero_verifies_what_is_ready_only_where_the_floor_is_zero():
    for name in registry():
        zero_allowed = threshold_floor(registry()[name].mode) == 0
        assert verifies_what_is_ready(name, 0) is zero_allowed
        assert not verifies_what_is_ready(name, 1) and not verifies_what_is_ready(name, 5)
    assert verifies_what_is_ready("async", 0) and not verifies_what_is_ready("chain", 0)
    # PipeSpec's lookahead: θ + 1, but the pipeline's θ = 0 is lookahead 0 (AS0)
    assert [lookahead_of(t, "async") for t in (0, 1, 4)] == [0, 2, 5]
    assert [lookahead_of(t, "chain") for t in (0, 1, 4)] == [1, 2, 5]


@pytest.fixture(scope="module")
def idle():
    return read_traces(IDLE)


def test_captures_of_a_scheme_are_those_its_header_says(idle):
    by_header = [c.name for c in idle if c.header.get("mode") == "async"]
    assert len(by_header) == 2 and len(idle) == 3
    assert [c.name for c in captures_of(idle, "async")] == by_header
    assert [c.name for c in synchronous_captures(idle)] == [
        c.name for c in idle if c.header.get("mode", "sync") == "sync"]
    assert captures_of(idle, "batch") == []
    with pytest.raises(PolyspecInputError, match="scheme"):
        captures_of(idle, "nope")
    batch = read_batch_trace(BATCH)
    assert synchronous_captures([batch, *idle])[0] is batch  # a serving batch is synchronous
    assert captures_of([batch, *idle], "batch") == [batch]


def test_already_captured_is_the_async_configuration_itself(idle):
    models = ("target", "draft-t")
    async_caps = [c for c in idle if c.header.get("mode") == "async"]
    assert sorted((tuple(c.models), c.thresholds[0], c.header["async"]["queue"])
                  for c in async_caps) == [(models, 0, 48), (models, 4, 48)]
    assert already_captured(idle, models, 0, 48) and already_captured(idle, models, 4, 48)
    assert not already_captured(idle, models, 4, None)  # another queue
    assert not already_captured(idle, models, 2, 48)  # another threshold
    assert not already_captured(idle, ("draft-t", "target"), 4, 48)  # other roles
    # the synchronous capture of the pair at θ 4 is not the async configuration
    sync = [c for c in idle if c.header.get("mode") != "async"]
    assert sync[0].thresholds == (4,) and not already_captured(sync, models, 4, 48)
