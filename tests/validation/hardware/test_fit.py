"""HW2: the committed engine correction (validation/hardware/corrections.json) is what the fit
gives on the committed tables (point estimates; the bootstrap's standard errors are written by
``python -m validation.hardware.fit``), the fit separates the drafters' host time from the
targets' through the start-up draft lengths, and the leave-out numbers of docs/validation.md
come from :mod:`validation.hardware.leaveout`. Needs the optional extra."""

from __future__ import annotations

import json

import pytest

from tests._optional import optional_import

optional_import("aiconfigurator_core")

from validation.hardware import fit, forecast, methods  # noqa: E402
from validation.hardware.acceptance import AcceptanceLog  # noqa: E402
from validation.hardware.engines import ASYNC_PARAMETERS, PARAMETERS, engine_model  # noqa: E402
from validation.hardware.rows import read_measured  # noqa: E402

pytestmark = pytest.mark.xdist_group("gpu_fit")


@pytest.fixture(scope="module")
def refit():
    rows = fit.load_rows()
    c = fit.fit(rows)
    ssd, _ = read_measured(fit.ssd_table())
    return rows, fit.fit_async(c, ssd, AcceptanceLog(rows, "nanopearl_h200.json"))


def test_committed_fit_is_reproduced(refit):
    _rows, c = refit
    committed = fit.load_corrections()
    for name in PARAMETERS + ASYNC_PARAMETERS:
        assert getattr(c, name) == pytest.approx(getattr(committed, name), rel=1e-6, abs=1e-6)
    for name in PARAMETERS:
        if name != "handshake_ms":  # at its bound 0
            assert committed.stderr[name] > 0
        assert name in committed.stderr
    data = json.loads(fit.CORRECTIONS_FILE.read_text())
    assert data["command"] == "python -m validation.hardware.fit"


def test_start_up_draft_lengths_match_the_logs(refit):
    """The start-up rule on the fitted costs gives each pair the draft length its log implies
    within one (the rounding of a speed ratio near a half)."""
    from validation.hardware.acceptance import implied_gamma

    rows, c = refit
    for pair in sorted({r.pair for r in rows}):
        prs = [r for r in rows if r.pair == pair]
        g_log, _ = implied_gamma(prs)
        r = prs[0]
        t = engine_model(r.pair[0], r.gpu, r.engine, r.tp_target, c)
        d = engine_model(r.pair[1], r.gpu, r.engine, r.tp_drafter, c)
        assert abs(methods.pearl_gamma(t, d) - g_log) <= 1, pair


def test_interval_file_is_the_leave_out_calibration():
    iv = forecast.load_interval()
    assert 0 < iv.half_width("pearl") < 1 and iv.default >= iv.half_width("pearl")
    assert "leave-out" in iv.calibrated_on
