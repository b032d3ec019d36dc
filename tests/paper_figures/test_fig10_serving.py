"""Figure 10 (serving batches): the plotted data equal independent recomputations — a loop
over every threshold vector with predict_batch / P1 — and the marked crossovers are
crossings."""

from __future__ import annotations

import itertools

import pytest

from paper_figures import fig10_serving_batch as fig
from polyspec_theory import predict
from polyspec_theory.serving.batch import batch_cascade, optimize_batch_thresholds, predict_batch

from .layout import assert_clear, recording

# one xdist worker computes the figures' data once (conftest.py)
pytestmark = pytest.mark.xdist_group("paper_figures")


@pytest.fixture(scope="module")
def data(quick_figure):
    return quick_figure(10)  # computed once per run (conftest.py)


def test_fig10_matches_b1_b2_b6(data):
    pool = fig._pool()
    two = pool.cascade(fig.TWO, (fig.FIXED_GAMMA,))
    three = pool.cascade(fig.THREE, (4, 2))
    mt = data["max_threshold"]
    for j in (0, len(data["batches"]) - 1):
        b = int(data["batches"][j])
        assert data["two_fixed"][j] == pytest.approx(predict_batch(two, b).speedup, rel=1e-12)
        s2 = [predict_batch(two.with_thresholds((g,)), b).speedup for g in range(1, mt + 1)]
        assert data["two_opt"][j] == pytest.approx(max(s2), rel=1e-12)
        assert data["two_gamma"][j] == 1 + s2.index(max(s2))
        grid = list(itertools.product(range(1, mt + 1), repeat=2))
        s3 = [predict_batch(three.with_thresholds(t), b).speedup for t in grid]
        assert data["three_opt"][j] == pytest.approx(max(s3), rel=1e-11)
        u3 = [predict(batch_cascade(three, b).with_thresholds(t)).speedup for t in grid]
        assert data["three_unsync"][j] == pytest.approx(max(u3), rel=1e-11)
        assert data["three_opt"][j] <= data["three_unsync"][j] * (1 + 1e-12)
    for key, cas, opt in (("crossover_two", two, True), ("crossover_three", three, True),
                          ("crossover_two_fixed", two, False)):
        bx = data[key]
        mt_c = mt if opt else None

        def s(b, cas=cas, opt=opt, mt_c=mt_c):
            return (optimize_batch_thresholds(cas, b, mt_c).speedup if opt
                    else predict_batch(cas, b).speedup)

        assert s(bx - 1) > 1.0 >= s(bx)


def test_fig10_measured_points_from_batched_traces(tmp_path, monkeypatch):
    # with batched traces the figure gains panel (c): the measured speedups and predictions
    # are validate_batches' numbers; without them the figure is theory only
    from tests.validation.batch_fakes import write_fake_traces
    from validation.analysis import batch_validate
    from validation.traces.batch import read_batch_traces

    assert fig.measured(tmp_path) is None
    write_fake_traces(tmp_path, cascades=((3, (3, 2)),), batches=(1, 2, 4),
                      prompts_per_batch=lambda b: 4 * b, tokens=30)
    # validate_batches is deterministic: the figure's own call (on the captures of the
    # folder, no profile) is the one the numbers are checked against, not a second run
    calls = []
    real = batch_validate.validate_batches

    def spy(caps, **kw):
        calls.append((caps, kw, real(caps, **kw)))
        return calls[-1][2]

    monkeypatch.setattr(batch_validate, "validate_batches", spy)
    data = fig.compute(quick=True, traces_dir=tmp_path)
    m = data["measured"]
    ((caps, kw, res),) = calls
    assert kw == {"profile": None}
    assert [(c.path, c.header) for c in caps] == [
        (c.path, c.header) for c in read_batch_traces(tmp_path)]
    (x,) = res.crossovers
    (c,) = m["cascades"]
    assert c["batches"] == [1, 2, 4] and c["speedup"] == list(x.measured_speedup)
    # no profile.json: m2 has no cost source outside its own captures -> in-sample shown
    assert c["variant"] == "in_sample"
    assert c["predicted"] == x.predicted["in_sample"]["speedup"]
    assert c["curve_batches"] == [1, 2, 3, 4]
    assert c["curve_speedup"][0] == c["predicted"][0] and c["curve_speedup"][3] == c["predicted"][2]
    with recording() as layout:
        paths = fig.draw(data, tmp_path / "out")
    assert all(p.stat().st_size > 1000 for p in paths)
    assert_clear(layout, fig.NAME)
