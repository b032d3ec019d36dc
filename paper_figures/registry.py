"""The figure registry and :func:`build_all` (re-exported by :mod:`paper_figures`).

Kept in a submodule so that ``from paper_figures.registry import build_all`` works even where
``paper_figures`` is imported as a namespace package (a stale editable install)."""

from __future__ import annotations

import importlib
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError

__all__ = ["FIGURES", "BuildResult", "FigureUnavailable", "build_all", "build_figure",
           "figure_module", "parse_subset"]

# number -> module name; the order is the paper's
FIGURES = {
    1: "fig01_dualistic_speedup",
    2: "fig02_polybasic_surface",
    3: "fig03_phi_bounds",
    4: "fig04_acceptance_histograms",
    5: "fig05_stability",
    6: "fig06_yin",
    7: "fig07_predicted_vs_measured",
    8: "fig08_insertion",
    9: "fig09_mc_convergence",
    10: "fig10_serving_batch",
    11: "fig11_trees",
    12: "fig12_gpu_traces",
}


class FigureUnavailable(RuntimeError):
    """A figure's data source (module, traces) is not present in this checkout."""


class BuildResult(dict):
    """``{number: [png, pdf]}`` of the figures built; ``skipped`` maps the numbers left out
    (``skip_unavailable=True``) to the reason."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.skipped: dict[int, str] = {}


def figure_module(number: int):
    """Import and return the module of figure ``number`` (:class:`FigureUnavailable` when a
    package module it needs is not in this checkout)."""
    if number not in FIGURES:
        raise PolyspecInputError("figure", f"unknown figure {number!r}; known: {list(FIGURES)}")
    try:
        return importlib.import_module(f"paper_figures.{FIGURES[number]}")
    except ModuleNotFoundError as e:
        roots = ("polyspec_theory", "simulators", "validation", "paper_figures")
        if e.name and e.name.split(".")[0] in roots:
            raise FigureUnavailable(
                f"figure {number} ({FIGURES[number]}) needs {e.name}, not in this checkout"
            ) from e
        raise


def parse_subset(subset) -> list[int]:
    """``None`` (all), an iterable of ints, or a string such as ``"1,3,5"`` -> sorted numbers."""
    if subset is None:
        return list(FIGURES)
    if isinstance(subset, str):
        parts = [s.strip() for s in subset.split(",") if s.strip()]
        try:
            nums = [int(s) for s in parts]
        except ValueError:
            raise PolyspecInputError(
                "only", f"must be comma-separated figure numbers, got {subset!r}"
            ) from None
    else:
        try:
            nums = [int(s) for s in subset]
        except (TypeError, ValueError):
            raise PolyspecInputError("only", f"must be figure numbers, got {subset!r}") from None
    if not nums:
        raise PolyspecInputError("only", "select at least one figure")
    bad = [n for n in nums if n not in FIGURES]
    if bad:
        raise PolyspecInputError("only", f"unknown figure(s) {bad}; known: {list(FIGURES)}")
    return sorted(set(nums))


def build_figure(number: int, out_dir, quick: bool = False, progress=None) -> list[Path]:
    """Compute and draw one figure into ``out_dir``; returns the written paths.
    ``progress(done, total)``: called as a long figure's computation advances (the figures
    whose ``compute`` takes ``progress``, e.g. figure 7's validate of every capture)."""
    import inspect

    mod = figure_module(number)
    kw = {"progress": progress} if (progress is not None and "progress" in
                                    inspect.signature(mod.compute).parameters) else {}
    return mod.draw(mod.compute(quick=quick, **kw), out_dir)


def build_all(out_dir, subset=None, progress: bool = True, quick: bool = False,
              skip_unavailable: bool = False) -> BuildResult:
    """Build the figures in ``subset`` (default all) into ``out_dir`` with a tqdm progress bar.

    Returns ``{number: [png, pdf]}`` (a :class:`BuildResult`). A figure whose data source is
    missing raises :class:`FigureUnavailable`, or, with ``skip_unavailable``, is left out and
    listed in ``result.skipped`` with its reason."""
    nums = parse_subset(subset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = BuildResult()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(nums), desc="figures", unit="fig")
    try:
        for n in nums:
            step = None
            if bar is not None:
                bar.set_postfix_str(FIGURES[n])

                def step(done, total, n=n):  # a long figure shows its own progress
                    bar.set_postfix_str(f"{FIGURES[n]}: {done}/{total}")
            try:
                results[n] = build_figure(n, out, quick=quick, progress=step)
            except FigureUnavailable as e:
                if not skip_unavailable:
                    raise
                results.skipped[n] = str(e)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return results
