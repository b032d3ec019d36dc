"""Record the text layout of every figure the tests draw: :func:`recording` wraps
:func:`paper_figures.style.save` so that each figure, just before it is written, has its
overlapping or out-of-figure texts (:func:`paper_figures.style.text_collisions`) stored under
its file name; :func:`draw_recorded` draws one figure that way and keeps the matplotlib figure
it saved (for tests that read what is drawn: titles, lines, panel texts)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from paper_figures import style


@contextlib.contextmanager
def recording(figures: dict | None = None):
    """``with recording() as layout:`` draws figures; ``layout[name]`` is the list of text
    collisions of the figure saved as ``name`` (empty when its text is clear). With
    ``figures`` (a dict), the saved matplotlib figure is also kept as ``figures[name]``."""
    layout: dict[str, list[str]] = {}
    save = style.save

    def checked_save(fig, out_dir, name):
        layout[name] = style.text_collisions(fig)
        if figures is not None:
            figures[name] = fig
        return save(fig, out_dir, name)

    style.save = checked_save
    try:
        yield layout
    finally:
        style.save = save


@dataclass
class Drawn:
    """One figure drawn by :func:`draw_recorded`: its data, the written paths, the text
    collisions by file name (``layout``, for :func:`assert_clear`) and the saved
    matplotlib figure (closed: its artists can be read, not shown)."""

    data: dict
    paths: list[Path]
    layout: dict[str, list[str]] = field(repr=False)
    figure: object = field(repr=False)


def draw_recorded(module, data, out_dir) -> Drawn:
    """``module.draw(data, out_dir)`` under :func:`recording`, keeping the saved figure."""
    figures: dict = {}
    with recording(figures) as layout:
        paths = module.draw(data, out_dir)
    return Drawn(data, paths, layout, figures.get(module.NAME))


def assert_clear(layout: dict, name: str) -> None:
    assert name in layout, f"{name} was not drawn through style.save"
    problems = layout[name]
    assert not problems, f"{name}: {len(problems)} text collision(s):\n  " + "\n  ".join(problems)
