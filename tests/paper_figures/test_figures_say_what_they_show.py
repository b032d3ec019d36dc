"""Figures a newcomer can read without the source (issue 39): figure 2 states the cascade its
surface is of; figure 4 shows all four fitted laws in every panel (none drawn under another)
and names the fits that coincide."""

import numpy as np
import pytest

from paper_figures import fig02_polybasic_surface as fig2
from paper_figures import fig04_acceptance_histograms as fig4

from .layout import assert_clear

pytestmark = pytest.mark.xdist_group("paper_figures")


def _drawn(quick_drawn, n, module):
    """The matplotlib figure that ``module`` (figure ``n``) saved for its quick data (drawn
    once per run, conftest.py), and that data; its text is clear."""
    drawn = quick_drawn(n)
    assert_clear(drawn.layout, module.NAME)
    return drawn.figure, drawn.data


def test_fig2_states_its_cascade(quick_drawn):
    fig, data = _drawn(quick_drawn, 2, fig2)
    title = fig.get_suptitle()
    for m in data["cascade"]["models"]:
        assert m["name"] in title
    for law in data["cascade"]["acceptance"]:
        assert f"α = {law['alpha']:g}" in title
    assert "T(m) = 1 + 0.03(m−1), 0.25 + 0.01(m−1), 0.02" in title


def test_fig4_every_law_visible(quick_drawn):
    fig, data = _drawn(quick_drawn, 4, fig4)
    fams = list(data["families"])
    for ax, p in zip(fig.axes, data["pairs"], strict=False):
        lines = [ln for ln in ax.get_lines() if ln.get_label() in
                 {fig4.FAMILY_LABELS[f] for f in fams}]
        assert len(lines) == len(fams)
        # no two curves on the same points: every family's markers are its own
        pts = [np.column_stack([ln.get_xdata(), ln.get_ydata()]) for ln in lines]
        for i in range(len(pts)):
            for j in range(i + 1, len(pts)):
                assert not np.allclose(pts[i], pts[j]), (p["verifier"], p["drafter"])
        # fits that give the same histogram are named in the panel
        text = " ".join(t.get_text() for t in ax.texts)
        for group in fig4.coincident(p["expected"], p["n_rounds"]):
            assert " = ".join(group) + " (same fit)" in text


def test_coincident_groups_by_hand():
    e = {"iid": np.array([10.0, 20.0]), "positional": np.array([10.0, 20.005]),
         "beta": np.array([12.0, 18.0]), "gaussian": np.array([12.0, 18.0])}
    assert fig4.coincident(e, 100) == [["iid", "positional"], ["beta", "gaussian"]]
    assert fig4.coincident(e, 1) == [["beta", "gaussian"]]  # 0.005 of 1 round: not the same
    e["positional"] = np.array([10.0, 21.0])
    assert fig4.coincident(e, 100) == [["beta", "gaussian"]]
