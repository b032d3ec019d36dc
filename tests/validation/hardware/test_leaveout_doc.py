"""The leave-out numbers of docs/validation.md ("GPU forecasts before the run") are what
:mod:`validation.hardware.leaveout` computes now, and the committed interval is its
calibration. Needs the optional extra; slow (refits the correction seven times)."""

from __future__ import annotations

import json
import re

import pytest

from tests._optional import optional_import

optional_import("aiconfigurator_core")

from validation.hardware import leaveout  # noqa: E402
from validation.hardware.forecast import INTERVAL_FILE  # noqa: E402

from .tables import ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gpu_fit")]


def _doc_block() -> list[str]:
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    m = re.search(r"\$ \.venv/bin/python -m validation\.hardware\.leaveout\n(.*?)\n```", text, re.S)
    assert m, "the leave-out block is missing from docs/validation.md"
    return m.group(1).splitlines()


def test_docs_numbers_are_the_computed_ones():
    res, interval, summ = leaveout.run_all()
    assert leaveout.report_lines(summ, interval) == _doc_block()
    committed = json.loads(INTERVAL_FILE.read_text())
    for m, w in interval.log_half_width.items():
        assert committed["log_half_width"][m] == pytest.approx(w, rel=1e-9)
    # the targets the held-out rows are scored on, here on the shared tables
    for kind in ("batch", "family"):
        assert summ[kind]["median_abs_error"] <= 0.10
        assert summ[kind]["max_abs_error"] <= 0.25
        assert summ[kind]["coverage"] >= 0.85
        assert summ[kind]["false_stops_paying"] == 0
