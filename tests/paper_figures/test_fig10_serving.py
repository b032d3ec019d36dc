"""Figure 10 (serving batches): the plotted data equal independent recomputations — a loop
over every threshold vector with predict_batch / P1 — and the marked crossovers are
crossings."""

from __future__ import annotations

import itertools

import pytest

from paper_figures import fig10_serving_batch as fig
from polyspec_theory import predict
from polyspec_theory.serving import batch_cascade, optimize_batch_thresholds, predict_batch


@pytest.fixture(scope="module")
def data():
    return fig.compute(quick=True)


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
