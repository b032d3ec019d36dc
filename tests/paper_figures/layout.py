"""Record the text layout of every figure the tests draw: :func:`recording` wraps
:func:`paper_figures.style.save` so that each figure, just before it is written, has its
overlapping or out-of-figure texts (:func:`paper_figures.style.text_collisions`) stored under
its file name."""

from __future__ import annotations

import contextlib

from paper_figures import style


@contextlib.contextmanager
def recording():
    """``with recording() as layout:`` draws figures; ``layout[name]`` is the list of text
    collisions of the figure saved as ``name`` (empty when its text is clear)."""
    layout: dict[str, list[str]] = {}
    save = style.save

    def checked_save(fig, out_dir, name):
        layout[name] = style.text_collisions(fig)
        return save(fig, out_dir, name)

    style.save = checked_save
    try:
        yield layout
    finally:
        style.save = save


def assert_clear(layout: dict, name: str) -> None:
    assert name in layout, f"{name} was not drawn through style.save"
    problems = layout[name]
    assert not problems, f"{name}: {len(problems)} text collision(s):\n  " + "\n  ".join(problems)
