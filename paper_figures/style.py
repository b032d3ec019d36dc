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
    """Write ``name.png`` (300 dpi) and ``name.pdf`` into ``out_dir`` deterministically, close
    ``fig`` and return the two paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    try:
        fig.savefig(paths[0], metadata={"Software": None})
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
