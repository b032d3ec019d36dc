"""One house style for every paper figure: column width (3.4 in), 8 pt text, the Okabe–Ito
colour-blind-safe palette, and deterministic PNG + PDF output.

Use :func:`figure` to create a figure and :func:`save` to write it; both force the Agg backend,
so nothing here needs a display. ``save`` strips the PDF creation date and fixes the SVG hash
salt, so rebuilding a figure from the same data writes byte-identical files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402

__all__ = [
    "COLUMN_WIDTH",
    "PALETTE",
    "LINESTYLES",
    "MARKERS",
    "RC",
    "apply",
    "color",
    "figure",
    "panel_label",
    "save",
]

COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
DPI = 300

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
PALETTE = (
    "#0072B2",  # blue
    "#D55E00",  # vermilion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow (last: poor contrast on white)
)
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P")

RC = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 6.5,
    "legend.title_fontsize": 6.5,
    "legend.frameon": False,
    "legend.handlelength": 1.8,
    "legend.borderaxespad": 0.3,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.35,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE[:7]),
    "figure.dpi": 100,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,  # TrueType: text stays text in the PDF
    "svg.hashsalt": "polyspec",
    "path.simplify": False,
    "image.cmap": "viridis",
}


def apply() -> None:
    """Install the house style in matplotlib's rcParams (idempotent)."""
    matplotlib.rcParams.update(RC)


def color(i: int) -> str:
    """The ``i``-th palette colour (cycling)."""
    return PALETTE[i % (len(PALETTE) - 1)]  # never the yellow


def figure(nrows: int = 1, ncols: int = 1, *, height: float = 2.4, width: float = COLUMN_WIDTH,
           **kwargs):
    """A ``(fig, axes)`` pair in the house style, ``width`` x ``height`` inches (column width
    by default). ``kwargs`` go to :func:`matplotlib.pyplot.subplots`."""
    apply()
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=(width, height), **kwargs)


def panel_label(ax, text: str) -> None:
    """A bold panel tag such as ``(a)`` in the top-left corner, outside the data area."""
    ax.set_title(text, loc="left", fontweight="bold", pad=3)


def save(fig, out_dir, name: str) -> list[Path]:
    """Write ``name.png`` (300 dpi) and ``name.pdf`` (the PNG's layout) into ``out_dir``
    deterministically, close ``fig`` and return the two paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    try:
        fig.savefig(paths[0], metadata={"Software": None})
        # the PNG's save laid the figure out (constrained layout, 300 dpi): the PDF keeps
        # that layout rather than running it again with the PDF renderer
        fig.set_layout_engine("none")
        fig.savefig(paths[1], metadata={"CreationDate": None, "Creator": "polyspec",
                                        "Producer": None})
    finally:
        plt.close(fig)
    return paths


def script_main(title: str, compute, draw, argv=None, traces: bool = False,
                traces_default: str = "committed CPU") -> int:
    """Command-line entry shared by every figure script: ``--out``, ``--quick`` (and
    ``--traces`` for the figures drawn from captured traces)."""
    import argparse

    p = argparse.ArgumentParser(description=title)
    p.add_argument("--out", default="out/figures", help="output directory")
    p.add_argument("--quick", action="store_true", help="reduced-size data (for tests)")
    if traces:
        p.add_argument("--traces", default=None,
                       help=f"trace directory (default: {traces_default})")
    args = p.parse_args(argv)
    kwargs = {"traces_dir": args.traces} if traces else {}
    for path in draw(compute(quick=args.quick, **kwargs), args.out):
        print(path)
    return 0


def _drawn_texts(fig) -> list:
    """Every visible, non-empty :class:`~matplotlib.text.Text` that ``fig`` draws: titles,
    axis labels, the tick labels of the ticks inside the view, legend texts and titles,
    annotations and figure texts (tick labels of ticks outside the view limits are not drawn
    and are left out)."""
    from matplotlib.text import Text

    tick_labels, drawn_ticks = set(), set()
    for ax in fig.axes:
        for axis in ax._axis_map.values():
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            tick_labels.update(id(t) for tk in ticks for t in (tk.label1, tk.label2))
            drawn_ticks.update(id(t) for tk in axis._update_ticks()
                               for t in (tk.label1, tk.label2))
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        if id(t) in tick_labels and id(t) not in drawn_ticks:
            continue
        if any(not a.get_visible() for a in _ancestors(t)):
            continue
        out.append(t)
    return out


def _ancestors(artist):
    """The containers above ``artist`` (a legend, its axes), to skip texts of hidden ones."""
    seen = []
    a = getattr(artist, "axes", None)
    if a is not None:
        seen.append(a)
    for leg in [ax.get_legend() for ax in (artist.figure.axes if artist.figure else [])]:
        if leg is not None and artist in leg.get_texts() + [leg.get_title()]:
            seen.append(leg)
    return seen


def text_collisions(fig, tolerance: float = 0.5) -> list[str]:
    """Layout problems a reader would see: every pair of drawn texts (:func:`_drawn_texts`)
    whose boxes overlap by more than ``tolerance`` pixels in both directions, and every text
    that reaches outside the figure. Each problem is one line naming the texts; an empty
    list means the text of ``fig`` is clear. Lays the figure out without rendering pixels."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    texts = _drawn_texts(fig)
    boxes = [t.get_window_extent(renderer) for t in texts]
    fb = fig.bbox
    problems = []

    def name(t):
        s = t.get_text().replace("\n", " ")
        return repr(s if len(s) <= 40 else s[:37] + "...")

    for t, b in zip(texts, boxes, strict=True):
        if (b.x0 < fb.x0 - tolerance or b.y0 < fb.y0 - tolerance
                or b.x1 > fb.x1 + tolerance or b.y1 > fb.y1 + tolerance):
            problems.append(f"{name(t)} reaches outside the figure")
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            a, b = boxes[i], boxes[j]
            dx = min(a.x1, b.x1) - max(a.x0, b.x0)
            dy = min(a.y1, b.y1) - max(a.y0, b.y0)
            if dx > tolerance and dy > tolerance:
                problems.append(f"{name(texts[i])} overlaps {name(texts[j])}")
    return problems
