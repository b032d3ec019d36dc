"""Shared by the figure tests: each figure's quick data is computed once per test run
(``quick_figure``), not once per test module that checks it: ``test_figures.py`` builds every
figure and ``test_fig10_serving.py``, ``test_fig11_trees.py`` and ``test_fig12_gpu_traces.py``
check figures 10-12 on the same data. Each figure's quick data is also drawn once per run
(``quick_drawn``: the files ``test_figures.py`` checks, the text layout and the saved
matplotlib figure that ``test_figures_say_what_they_show.py`` and
``test_fig12_gpu_traces.py`` read), not once per module that looks at the drawing. Every
module here also sets ``pytestmark = pytest.mark.xdist_group("paper_figures")`` (``make test``
runs ``--dist loadgroup``), so the figure tests run on one xdist worker and a module-scoped
build is not repeated on each worker that draws one of its tests. ``compute`` is
deterministic (``test_compute_is_deterministic`` recomputes one figure to check it) and
``draw`` is too (``test_redraw_is_byte_identical``), so sharing the data and the drawing
changes no assertion."""

from __future__ import annotations

import pytest

_DATA: dict = {}
_DRAWN: dict = {}


@pytest.fixture(scope="session")
def quick_figure():
    """``quick_figure(n)``: ``compute(quick=True)`` of figure ``n``, computed once per run
    (:class:`paper_figures.registry.FigureUnavailable` raised each time when its data source
    is missing)."""
    from paper_figures.registry import figure_module

    def get(n: int):
        if n not in _DATA:
            _DATA[n] = figure_module(n).compute(quick=True)
        return _DATA[n]

    return get


@pytest.fixture(scope="session")
def quick_drawn(quick_figure, tmp_path_factory):
    """``quick_drawn(n)``: figure ``n``'s quick data drawn once per run into one temporary
    folder, as a :class:`tests.paper_figures.layout.Drawn` (data, paths, text collisions,
    saved figure); :class:`paper_figures.registry.FigureUnavailable` as ``quick_figure``."""
    from paper_figures.registry import figure_module

    from .layout import draw_recorded

    out = tmp_path_factory.mktemp("figures")

    def get(n: int):
        if n not in _DRAWN:
            _DRAWN[n] = draw_recorded(figure_module(n), quick_figure(n), out)
        return _DRAWN[n]

    return get
