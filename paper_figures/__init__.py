"""Paper figures, regenerated from the package.

Each ``figNN_*.py`` module exposes ``compute(quick=False) -> dict`` (the data, deterministic,
computed only through the package's public functions), ``draw(data, out_dir) -> list[Path]``
(writes ``NAME.png`` and ``NAME.pdf``) and ``main()``. :data:`FIGURES` lists them in the
paper's order; :func:`build_all` builds any subset (``polyspec figures`` is its CLI).
"""

from .registry import (
    FIGURES,
    BuildResult,
    FigureUnavailable,
    build_all,
    build_figure,
    figure_module,
    parse_subset,
)

__all__ = ["FIGURES", "BuildResult", "FigureUnavailable", "build_all", "build_figure",
           "figure_module", "parse_subset"]
