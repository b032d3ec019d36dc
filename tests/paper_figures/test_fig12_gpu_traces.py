"""Figure 12 (GPU traces): the plotted points are the committed held-out results, and the
figure is unavailable (not wrong) without them."""

import json

import pytest

from paper_figures import fig12_gpu_traces as fig
from paper_figures.registry import FigureUnavailable

from .layout import assert_clear

# one xdist worker computes the figures' data once (conftest.py)
pytestmark = pytest.mark.xdist_group("paper_figures")


def test_points_are_the_committed_results(quick_figure):
    d = json.loads(fig.RESULTS.read_text())
    data = quick_figure(12)  # the data test_figures.py draws (computed once, conftest.py)
    loo = {c["lookahead"]: c for c in d["pipespec_sweep_loo"]["configs"]}
    for k, p, q in data["sweep"]:
        assert p == loo[k]["predicted_speedup"] and q == loo[k]["measured_speedup"]
        assert loo[k]["error"] == pytest.approx(p / q - 1)
    seen = {k for k, *_ in data["sweep"]}
    assert {k for k, *_ in data["forecasts"]} == set(range(1, 21)) - seen
    for _, s, lo, hi in data["forecasts"]:
        assert lo < s < hi
    assert len(data["specbench"]) == len(d["specbench_loco"]["configs"])


def test_missing_results_make_the_figure_unavailable(tmp_path):
    with pytest.raises(FigureUnavailable):
        fig.compute(results=tmp_path / "none.json")


def test_model_sizes_come_from_the_file():
    assert fig._size("Meta-Llama-3.1-70B-Instruct") == "70B"
    assert fig._size("sps-68m") == "sps-68m" and fig._size("JackFram/llama-68M") == "68M"
    d = json.loads(fig.RESULTS.read_text())["pipespec_sweep_loo"]["configs"][0]
    data = fig.compute()
    assert fig._chain(data["sweep_models"]) == "→".join(
        m.split("-")[-2] for m in d["models"])  # Llama-3.2-1B-Instruct -> 1B


def test_title_names_what_a_panel_shows(quick_drawn):
    """The suptitle names the configurations the panels plot (issue 39: it named the
    pre-registered three-model cascade, which no panel shows). Read from the figure drawn
    once per run (conftest.py; ``compute`` ignores ``quick``: the data are the default's)."""
    drawn = quick_drawn(12)
    data = drawn.data
    assert data == fig.compute()
    title = drawn.figure.get_suptitle()
    assert f"PipeSpec {fig._chain(data['sweep_models'])}" in title  # as panel (a)'s legend
    assert "Spec-Bench" in title and "70B" not in title


def test_draw_writes_png_and_pdf(quick_drawn):
    drawn = quick_drawn(12)  # drawn once per run (conftest.py), the default data
    assert drawn.data == fig.compute()
    assert_clear(drawn.layout, fig.NAME)
    assert sorted(p.suffix for p in drawn.paths) == [".pdf", ".png"]
