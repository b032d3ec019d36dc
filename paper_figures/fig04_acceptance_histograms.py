"""Figure 4 — acceptance histograms from real traces with the four fitted laws overlaid.

Data: the committed CPU traces (``data/traces/cpu/*.jsonl``) read by
:func:`validation.traces.records.read_traces`; rounds pooled per (verifier, drafter,
temperature) and every law family (iid, positional, Beta-mixed, Gaussian baseline) fitted by
censored maximum likelihood (:func:`validation.analysis.fits.fit_pairs`); each law's expected
histogram given the observed caps from
:func:`validation.analysis.report.expected_histogram`. The pairs with the most rounds are
shown (``N_PAIRS``; ranked on the pooled rounds of :func:`validation.analysis.fits.pool_pairs`,
only the shown pairs are fitted), observed fractions as bars. The four curves are drawn side
by side (each family's markers a little left or right of the bar) so that none hides
another, and fits that give the same histogram are named in the panel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from polyspec_theory.core.laws import FAMILIES
from validation.analysis.fits import fit_pairs, pool_pairs
from validation.analysis.report import expected_histogram
from validation.paths import shown_path

from . import style, trace_sources

NAME = "fig04_acceptance_histograms"
TITLE = "Acceptance histograms of real traces with fitted laws"
SOURCES = ("data/traces/cpu", "validation.analysis.fits")

N_PAIRS = 4
FAMILY_LABELS = {"iid": "iid (Leviathan)", "positional": "positional",
                 "beta": "Beta-mixed", "gaussian": "Gaussian (paper)"}
FAMILY_STYLE = {"iid": (0, "-", "o"), "positional": (2, "-", "s"),
                "beta": (1, "-", "^"), "gaussian": (3, "--", "x")}
DODGE = 0.12  # x offset between the families' markers (bars are 0.8 wide)
SAME = 1e-3  # two fits whose expected fractions differ by less than this are "the same"


def coincident(expected: dict, n: int) -> list[list[str]]:
    """Groups (>= 2) of families whose expected histograms agree within ``SAME`` of the
    rounds at every count: drawn side by side they would still read as one curve."""
    fams = list(expected)
    groups, used = [], set()
    for i, a in enumerate(fams):
        if a in used:
            continue
        g = [a] + [b for b in fams[i + 1:] if b not in used and np.max(np.abs(
            np.asarray(expected[a]) - np.asarray(expected[b]))) / n < SAME]
        if len(g) > 1:
            groups.append(g)
            used.update(g)
    return groups


def compute(quick: bool = False, traces_dir=None) -> dict:
    """Observed and expected histograms of accepted counts ``A`` for the pairs with the most
    rounds (quick: 2 pairs). ``traces_dir`` defaults to the committed CPU traces."""
    d = Path(traces_dir) if traces_dir is not None else trace_sources.default_traces_dir("cpu")
    captures, notes = trace_sources.load(d)
    # rank the pairs by their pooled rounds, then fit only the pairs shown (a pair's fit
    # depends on its own rounds only: the same fit as among all pairs)
    pooled = pool_pairs(captures)
    keys = sorted(pooled, key=lambda k: (-pooled[k][0].n_rounds, k))[: 2 if quick else N_PAIRS]
    fits = fit_pairs(captures, FAMILIES, keys=keys)
    pairs = []
    for key in keys:
        p = fits[key]
        c = p.counts
        obs = np.bincount(c.accepted, weights=c.counts, minlength=int(c.caps.max()) + 1)
        by_family = {f.law.family: f for f in p.fits}
        pairs.append({
            "verifier": key[0],
            "drafter": key[1],
            "temperature": key[2],
            "top_k": key[3],
            "n_rounds": c.n_rounds,
            "mean_cap": float(np.dot(c.counts, c.caps) / c.n_rounds),
            "caps": np.unique(c.caps),
            "observed": obs,  # rounds with A = k
            "expected": {fam: expected_histogram(by_family[fam].law, c) for fam in FAMILIES},
            "aic": {fam: float(by_family[fam].aic) for fam in FAMILIES},
            "laws": {fam: by_family[fam].law.to_config() for fam in FAMILIES},
            "best": p.best.law.family,
        })
    return {"traces_dir": shown_path(d), "n_configs": len(captures), "families": FAMILIES,
            "pairs": pairs, "notes": list(notes)}


def _pair_title(p) -> str:
    t = "greedy" if p["temperature"] == 0 else f"T = {p['temperature']:g}"
    return f"{p['verifier']} ← {p['drafter']}, {t}"


def draw(data: dict, out_dir) -> list[Path]:
    pairs = data["pairs"]
    ncols = 2 if len(pairs) > 1 else 1
    nrows = -(-len(pairs) // ncols)
    fig, axes = style.figure(nrows, ncols, height=1.75 * nrows + 0.55, squeeze=False)
    for idx, ax in enumerate(axes.flat):
        if idx >= len(pairs):
            ax.set_visible(False)
            continue
        p = pairs[idx]
        n = p["n_rounds"]
        obs = p["observed"] / n
        ks = np.arange(obs.size)
        ax.bar(ks, obs, width=0.8, color="0.78", label="observed")
        fams = list(data["families"])
        for j, fam in enumerate(fams):
            ci, ls, mk = FAMILY_STYLE.get(fam, (6, "-", "."))
            dx = (j - (len(fams) - 1) / 2) * DODGE
            ax.plot(ks + dx, p["expected"][fam] / n, color=style.color(ci), linestyle=ls,
                    marker=mk, markersize=2.2, linewidth=0.9, label=FAMILY_LABELS.get(fam, fam))
        ax.set_title(_pair_title(p), fontsize=7, pad=2)
        caps = p["caps"]
        cap_txt = f"cap {caps[0]}" if len(caps) == 1 else f"caps {caps[0]}–{caps[-1]}"
        groups = coincident(p["expected"], n)
        same = "".join("\n" + " = ".join(g) + " (same fit)" for g in groups)
        ax.text(0.97, 0.96, f"{n:,} rounds, {cap_txt}\nbest AIC: {p['best']}{same}",
                transform=ax.transAxes,
                ha="right", va="top", fontsize=5.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.tick_params(labelsize=6)
        top = max(float(obs.max()), max(float(np.max(e)) for e in p["expected"].values()) / n)
        ax.set_ylim(0.0, (1.3 + 0.16 * len(groups)) * top)  # headroom for the panel's text
        if idx % ncols == 0:
            ax.set_ylabel("fraction of rounds")
        if idx // ncols == nrows - 1:
            ax.set_xlabel("accepted tokens A")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=3)
    return style.save(fig, out_dir, NAME)


def main(argv=None) -> int:
    return style.script_main(TITLE, compute, draw, argv, traces=True)


if __name__ == "__main__":
    raise SystemExit(main())
