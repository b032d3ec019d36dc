"""Paper figures: every figure builds (reduced-size data, ``quick=True``) into a temporary
directory as a non-trivial PNG + PDF at column width, and the data behind each one matches
the theory functions it plots, recomputed here independently (other functions or other code
paths than the figure's own where the package has them)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from paper_figures.registry import (
    FIGURES,
    FigureUnavailable,
    build_all,
    figure_module,
    parse_subset,
)
from polyspec_theory.errors import PolyspecInputError

from .layout import assert_clear, draw_recorded

# one xdist worker computes the figures' data once (conftest.py)
pytestmark = pytest.mark.xdist_group("paper_figures")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


TRACE_FIGURES = (4, 7)


@pytest.fixture(scope="module")
def synthetic_traces(tmp_path_factory):
    """A small trace directory written by the synthetic decoder (known laws and costs, same
    schema as the real captures): the trace figures are always exercised, real traces or
    not."""
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import BetaMixed, IIDGeometric, Positional
    from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

    out = tmp_path_factory.mktemp("traces")
    costs = {"target": CostCurve.affine(0.02, 0.0008), "mid": CostCurve.affine(0.006, 0.0003),
             "small": CostCurve.affine(0.0015, 0.0001)}
    laws = {("target", "mid"): BetaMixed(5.0, 1.2), ("target", "small"): BetaMixed(2.5, 1.5),
            ("mid", "small"): Positional([0.85, 0.8, 0.7])}
    configs = [(("target", "small"), (3,), 0.0), (("target", "mid"), (4,), 0.0),
               (("target", "mid", "small"), (6, 3), 0.0), (("target", "small"), (5,), 1.0)]
    for k, (ms, th, temp) in enumerate(configs):
        name = "-".join(ms) + "_" + "-".join(map(str, th)) + f"_T{temp:g}"
        pair_laws = [laws[(ms[i], ms[i + 1])] for i in range(len(ms) - 1)]
        if temp:
            pair_laws = [IIDGeometric(0.5)]  # another pair key (temperature 1)
        cap, rec = simulate_capture(SyntheticSpec(name, ms, [costs[m] for m in ms], pair_laws, th,
                                    tokens_per_prompt=96, prompts=4, temperature=temp,
                                    baseline_contexts=(32, 160), baseline_reps=2,
                                    ar_tokens=48, overhead_per_forward=2e-5, seed=k))
        write_trace(out / f"{name}.jsonl", cap, rec)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory, synthetic_traces, quick_drawn):
    """``{number: (data, paths)}`` for every figure (the trace figures from the committed real
    traces, or from the synthetic traces when this checkout has none);
    ``{number: reason}`` for figures whose data source is missing. The quick figures are
    drawn once per run (``quick_drawn``, conftest.py); their text layout goes to ``LAYOUT``."""
    out = tmp_path_factory.mktemp("figures")
    done, missing = {}, {}
    for n in FIGURES:
        try:
            mod = figure_module(n)
            try:
                drawn = quick_drawn(n)  # once per run (conftest.py)
            except FigureUnavailable:
                if n not in TRACE_FIGURES:
                    raise
                drawn = draw_recorded(mod, mod.compute(quick=True, traces_dir=synthetic_traces),
                                      out)
        except FigureUnavailable as e:
            missing[n] = str(e)
            continue
        done[n] = (drawn.data, drawn.paths)
        LAYOUT.update(drawn.layout)
    return done, missing


LAYOUT: dict[str, list[str]] = {}  # figure file name -> its text collisions (``built``)


def _get(built, n):
    done, missing = built
    if n not in done:
        pytest.fail(f"figure {n}: data source missing: {missing.get(n)}")
    return done[n]


# --- files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", list(FIGURES))
def test_figure_files_exist_and_are_nontrivial(built, n):
    _, paths = _get(built, n)
    names = sorted(p.name for p in paths)
    assert names == sorted([f"{FIGURES[n]}.png", f"{FIGURES[n]}.pdf"])
    for p in paths:
        assert p.exists()
        assert p.stat().st_size > 15_000, f"{p.name} suspiciously small"
    png = next(p for p in paths if p.suffix == ".png")
    pdf = next(p for p in paths if p.suffix == ".pdf")
    w, h = _png_size(png)
    # column width 3.4 in at 300 dpi (bbox tight trims or extends a little); a figure with
    # measured columns beside its theory spans both columns of the page (7.05 in)
    two = getattr(figure_module(n), "SPANS_COLUMNS_WITH_MEASUREMENTS", False)
    assert 900 <= w <= 1080 or (two and 1900 <= w <= 2200), (
        f"{png.name}: width {w}px is neither column width (3.4 in) nor page width")
    assert 400 <= h <= 2000
    with open(pdf, "rb") as f:
        assert f.read(5) == b"%PDF-"
    assert b"CreationDate" not in pdf.read_bytes()


@pytest.mark.parametrize("n", list(FIGURES))
def test_figure_text_does_not_overlap(built, n):
    """No two drawn texts of a figure (titles, tick labels, axis labels, legend entries and
    titles, annotations, captions) overlap, and none reaches outside the figure (issue 32)."""
    _get(built, n)
    assert_clear(LAYOUT, FIGURES[n])


def test_text_collisions_finds_overlaps_and_overflow():
    from paper_figures import style

    fig, ax = style.figure()
    ax.set_xticks([0.0, 0.5, 1.0, 5.0])
    ax.set_xlim(0, 1)  # the tick at 5 is outside the view: not drawn
    ax.text(0.2, 0.5, "first label", transform=ax.transAxes)
    assert style.text_collisions(fig) == []
    shown = [t.get_text() for t in style._drawn_texts(fig)]
    assert "1.0" in shown and "5.0" not in shown
    ax.text(0.25, 0.5, "second label", transform=ax.transAxes)
    fig.text(0.99, 0.5, "runs past the right edge")
    problems = style.text_collisions(fig)
    assert problems == ["'runs past the right edge' reaches outside the figure",
                        "'first label' overlaps 'second label'"]
    ax.texts[1].set_visible(False)
    assert style.text_collisions(fig) == ["'runs past the right edge' reaches outside the figure"]
    ax.plot([0, 1], [0, 1], label="a line")
    leg = ax.legend(loc="upper left", bbox_to_anchor=(0.15, 0.56), borderaxespad=0)
    assert "'first label' overlaps 'a line'" in style.text_collisions(fig)
    leg.set_visible(False)
    assert not any("'a line'" in p for p in style.text_collisions(fig))


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _strings(v)


@pytest.mark.parametrize("n", list(FIGURES))
def test_figure_data_shows_no_machine_path(built, synthetic_traces, n):
    """A figure (its caption, its data) never shows where the checkout or the traces sit, so
    the drawn files do not depend on the directory (issue 27: figure 11's caption printed the
    absolute trace folder and grew the PNG past the page width under a long path)."""
    from validation.paths import REPO_ROOT

    data, _ = _get(built, n)
    roots = (str(REPO_ROOT), str(Path(synthetic_traces).resolve()), str(synthetic_traces))
    for text in _strings(data):
        assert not any(r in text for r in roots), (n, text)


def test_shown_path_is_relative_to_the_repository_or_short(tmp_path):
    from validation.paths import REPO_ROOT, shown_path

    assert shown_path(REPO_ROOT / "data" / "traces" / "trees") == "data/traces/trees"
    assert shown_path(tmp_path / "a" / "b") == "a/b"


def test_redraw_is_byte_identical(built, tmp_path):
    data, paths = _get(built, 1)
    again = figure_module(1).draw(data, tmp_path)
    for a, b in zip(sorted(paths), sorted(again), strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_compute_is_deterministic(built):
    data, _ = _get(built, 6)
    again = figure_module(6).compute(quick=True)
    for f0, f1 in zip(data["fronts"], again["fronts"], strict=True):
        np.testing.assert_array_equal(f0["random_points"], f1["random_points"])


# --- data behind each figure ----------------------------------------------------------------


def test_fig01_matches_d2(built):
    from polyspec_theory.closed_forms.dualistic import dualistic_speedup, optimal_gamma
    from polyspec_theory.core.laws import IIDGeometric

    d, _ = _get(built, 1)
    for ci, c in enumerate(d["cost_ratios"]):
        for ai, a in enumerate(d["alphas"]):
            for gi in (0, 3, len(d["gammas"]) - 1):
                g = int(d["gammas"][gi])
                # general D2 formula with iid law and constant costs (another code path)
                ref = dualistic_speedup(IIDGeometric(float(a)), g, 1.0, float(c))
                closed = (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))
                assert d["speedup"][ci, ai, gi] == pytest.approx(ref, rel=1e-12)
                assert d["speedup"][ci, ai, gi] == pytest.approx(closed, rel=1e-12)
            # the marked optimum is the argmax of the plotted curve and certified
            best = int(np.argmax(d["speedup"][ci, ai]))
            assert d["opt_gamma"][ci, ai] == d["gammas"][best]
            assert d["opt_speedup"][ci, ai] == pytest.approx(d["speedup"][ci, ai, best])
            assert d["opt_certified"][ci, ai]
            assert optimal_gamma(float(a), 1.0, float(c)).gamma == d["opt_gamma"][ci, ai]


def test_fig03_matches_p1_and_p2(built):
    from polyspec_theory.bounds.tails import forward_count_moments
    from polyspec_theory.core.config import Cascade
    from polyspec_theory.core.p1 import renewal_fill
    from polyspec_theory.schemes import predict

    d, _ = _get(built, 3)
    cas = Cascade.from_config(d["cascade"])
    l_pmf = predict(cas).levels[1].emitted_pmf
    mu = float(np.dot(np.arange(l_pmf.size), l_pmf))
    assert d["mu_exact"] == pytest.approx(mu, rel=1e-12)
    m2 = float(np.dot(np.arange(l_pmf.size) ** 2, l_pmf))
    for j, th in enumerate(d["thetas"]):
        th = int(th)
        # exact phi by an independent route: sum of the exact tail P(N > k)
        assert d["phi_exact"][j] == pytest.approx(forward_count_moments(l_pmf, th)["mean"],
                                                  rel=1e-10)
        assert d["phi_exact"][j] == pytest.approx(renewal_fill(l_pmf, th)[0], rel=1e-12)
        assert d["phi_lower"][j] == pytest.approx(max(1.0, th / mu), rel=1e-12)
        assert d["phi_upper"][j] == pytest.approx((th - 1 + m2 / mu) / mu, rel=1e-12)
        assert d["phi_lower"][j] - 1e-12 <= d["phi_exact"][j] <= d["phi_upper"][j] + 1e-12
    pair = cas.laws[1].mean_emitted(cas.thresholds[1])
    np.testing.assert_allclose(d["phi_paper"], d["thetas"] / pair, rtol=1e-12)


def test_fig05_matches_p6_p7(built):
    from polyspec_theory.core.laws import BetaMixed, IIDGeometric

    d, _ = _get(built, 5)
    for j, g in enumerate(d["caps"]):
        g = int(g)
        for i in (0, len(d["alphas"]) // 2, len(d["alphas"]) - 1):
            a = float(d["alphas"][i])
            law = IIDGeometric(a)
            sd = math.sqrt(law.var(g))
            assert d["cv_accepted"][j, i] == pytest.approx(sd / law.mean(g), rel=1e-10)
            assert d["cv_emitted"][j, i] == pytest.approx(sd / law.mean_emitted(g), rel=1e-10)
        assert np.all(np.diff(d["cv_accepted"][j]) < 0)  # P6: strictly decreasing
        if g >= 2:  # CV(L) rises then falls
            k = int(np.argmax(d["cv_emitted"][j]))
            assert 0 < k < len(d["alphas"]) - 1
    m, g = d["mean_alpha"], int(d["decomp_cap"])
    for i in (0, len(d["concentration"]) - 1):
        k = float(d["concentration"][i])
        ref = BetaMixed(m * k, (1 - m) * k).var(g)  # from the law's pmf, another route
        assert d["total"][i] == pytest.approx(ref, rel=1e-8)
        assert d["within"][i] + d["between"][i] == pytest.approx(d["total"][i], rel=1e-12)
        assert d["within"][i] > 0 and d["between"][i] > 0
    assert d["iid_var"] == pytest.approx(IIDGeometric(m).var(g), rel=1e-12)
    # between-round variance vanishes as contexts become homogeneous
    assert np.all(np.diff(d["between"]) < 0)


def test_fig06_matches_yin(built):
    from polyspec_theory.yin.theorems import batch_improvement, yin_demo_chain

    d, _ = _get(built, 6)
    pair = yin_demo_chain(d["chain_seed"])
    for f in d["fronts"]:
        t, q = pair.target[0, f["state"]], pair.draft[0, f["state"]]
        assert f["tv"] == pytest.approx(0.5 * np.abs(t - q).sum(), rel=1e-12)
        # Y5: every over-acceptance lies on P(reject) + Loss* = TV
        np.testing.assert_allclose(f["rejection"] + f["loss"], f["tv"], rtol=1e-10)
        np.testing.assert_allclose(f["random_points"].sum(axis=1), f["tv"], rtol=1e-10)
        assert f["rejection"][0] == pytest.approx(f["tv"], rel=1e-12)  # SD: no loss
        assert f["loss"][0] == pytest.approx(0.0, abs=1e-14)
    for mode, b in d["batch"].items():
        assert b["improvement"][0] == pytest.approx(0.0, abs=1e-9)  # M = 1 is SD
        assert np.all(np.diff(b["improvement"]) >= -1e-12)
        assert np.all(b["improvement"] <= b["limit_improvement"] + 1e-9)
        for j in (1, len(b["M"]) - 1):
            ref = batch_improvement(*pair, int(b["M"][j]), mode=mode)
            assert b["improvement"][j] == pytest.approx(ref, rel=1e-10, abs=1e-12)
    assert d["batch"]["sequences"]["limit_rejections"] > 0  # saturates (never reaches 0)


def test_fig08_matches_p5(built):
    from polyspec_theory.core.config import Cascade, Model
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.planning.insertion import insert_model
    from polyspec_theory.schemes import predict

    d, _ = _get(built, 8)
    base = Cascade.from_config(d["base"])
    up = IIDGeometric(d["upper_alpha"])
    th_up, th_low = d["thresholds"]
    l_i = base.laws[0].mean_emitted(base.thresholds[0])
    l_i_new = up.mean_emitted(th_up)
    t1 = base.costs[0].t1
    rows, cols = d["relative_gain"].shape
    for i in (0, rows // 2, rows - 1):
        low = IIDGeometric(float(d["lower_alphas"][i]))
        l_new = low.mean_emitted(th_low)
        assert d["l_new"][i] == pytest.approx(l_new, rel=1e-12)
        assert d["paper_rhs"][i] == pytest.approx(l_new * (1 / l_i - 1 / l_i_new), rel=1e-12)
        for j in (0, cols // 2, cols - 1):
            r = float(d["cost_ratios"][j])
            # exact decision recomputed from P1 directly on the two cascades
            m = Model("inserted", CostCurve.constant(r * t1))
            tau_without = predict(base).time_per_token
            tau_with = predict(insert_model(base, 0, m, up, low, (th_up, th_low))).time_per_token
            assert d["relative_gain"][i, j] == pytest.approx(tau_without / tau_with - 1,
                                                             rel=1e-10, abs=1e-12)
            assert d["exact_helps"][i, j] == (tau_with < tau_without)
            assert d["paper_helps"][i, j] == (r < l_new * (1 / l_i - 1 / l_i_new))
    # the figure's point: the two criteria disagree somewhere on this grid
    assert (d["exact_helps"] != d["paper_helps"]).any()


# --- registry and CLI -----------------------------------------------------------------------


def test_parse_subset():
    assert parse_subset(None) == list(FIGURES)
    assert parse_subset("3, 1,3") == [1, 3]
    assert parse_subset([8, 1]) == [1, 8]
    for bad in ("1,x", "0", "99", "", [1, 42]):
        with pytest.raises(PolyspecInputError, match="^only"):
            parse_subset(bad)


def test_build_all_subset(tmp_path):
    res = build_all(tmp_path, subset=[1], progress=False, quick=True)
    assert list(res) == [1]
    assert all(p.exists() for p in res[1])
    assert res.skipped == {}


def test_cli_figures(tmp_path, capsys):
    from polyspec.cli import main

    assert main(["figures", "--out", str(tmp_path), "--only", "1", "--quick",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out.split()
    assert sorted(out) == sorted(str(tmp_path / f"{FIGURES[1]}.{e}") for e in ("png", "pdf"))
    assert main(["figures", "--out", str(tmp_path), "--only", "1,nine"]) == 2
    assert "only" in capsys.readouterr().err


# Monte-Carlo figures: the simulated points must agree with P1 within their standard errors.
Z_MC = 4.5  # two-sided normal tail 6.8e-6 per estimate


def test_fig02_matches_p1_and_simulation(built):
    from polyspec_theory.core.config import Cascade
    from polyspec_theory.schemes import predict

    d, _ = _get(built, 2)
    cas = Cascade.from_config(d["cascade"])
    s = d["speedup"]
    # grid (batched P1) against the per-cascade P1 predictor at a few points
    for a, b in ((1, 1), (4, 4), (len(d["theta1"]), len(d["theta2"])), (7, 2)):
        ref = predict(cas.with_thresholds((a, b))).speedup
        assert s[a - 1, b - 1] == pytest.approx(ref, rel=1e-11)
    o1, o2, os_ = d["optimum"]
    assert os_ == pytest.approx(float(s.max())) and s[o1 - 1, o2 - 1] == os_
    sim = d["sim"]
    assert sim.shape[0] >= 4
    for a, b, est, lo, hi, se, p1 in sim:
        assert p1 == pytest.approx(predict(cas.with_thresholds((int(a), int(b)))).speedup,
                                   rel=1e-11)
        assert lo < est < hi and se > 0
        # false-failure rate: 4 estimates x 6.8e-6 = 2.7e-5 (fixed seeds: deterministic)
        assert abs(est - p1) <= Z_MC * se


def test_fig09_converges_to_p1(built):
    from polyspec_theory.core.config import Cascade
    from polyspec_theory.schemes import predict

    d, _ = _get(built, 9)
    exact = predict(Cascade.from_config(d["cascade"])).speedup
    assert d["exact"] == pytest.approx(exact, rel=1e-14)
    err = np.abs(d["estimate"] - exact)
    np.testing.assert_allclose(d["rel_error"], err / exact, rtol=1e-12)
    np.testing.assert_allclose(d["rms_rel_error"], np.sqrt((err**2).mean(axis=1)) / exact)
    # false-failure rate: 6 estimates x 6.8e-6 = 4e-5 (fixed seeds: deterministic)
    assert np.all(err <= Z_MC * d["se"])
    assert np.all(d["emitted"] >= d["tokens"][:, None])
    # standard errors shrink like 1/sqrt(n): se * sqrt(n) roughly constant across n
    c = (d["se"] * np.sqrt(d["emitted"])).mean(axis=1)
    assert np.all(c / c[-1] > 0.5) and np.all(c / c[-1] < 2.0)
    assert d["clt_constant"] == pytest.approx(c[-1] / exact, rel=0.5)


# --- trace figures: checked on the synthetic traces (always) -------------------------------


def _records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _rounds_of_file(path):
    """``{(verifier, drafter, temperature): (A, G)}`` of one trace file, parsed here with
    json alone (independent of the project's reader)."""
    recs = _records(path)
    head = recs[0]
    names = [m["name"] for m in head["cascade"]["models"]]
    out = {}
    for r in recs:
        if r["type"] == "round":
            key = (names[r["level"] - 1], names[r["level"]], float(head["temperature"]))
            out.setdefault(key, ([], []))
            out[key][0].append(r["A"])
            out[key][1].append(r["G"])
    return {k: (np.asarray(a), np.asarray(g)) for k, (a, g) in out.items()}


def _measured_speedup_of_file(path):
    """AR target time per token / cascade time per token, from the raw records."""
    recs = _records(path)
    target = recs[0]["cascade"]["models"][0]["name"]
    ar = [r for r in recs if r["type"] == "ar" and r["model"] == target]
    sm = [r for r in recs if r["type"] == "summary"]
    return (sum(r["wall_s"] for r in ar) / sum(r["n_tokens"] for r in ar)) / (
        sum(r["wall_s"] for r in sm) / sum(r["n_generated"] for r in sm))


def _pooled_rounds(traces_dir):
    """``{(verifier, drafter, temperature): (A, G)}`` over every trace file of the folder."""
    out = {}
    for f in sorted(Path(traces_dir).glob("*.jsonl")):
        for key, (a, g) in _rounds_of_file(f).items():
            a0, g0 = out.get(key, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            out[key] = (np.concatenate([a0, a]), np.concatenate([g0, g]))
    return out


def test_trace_folder_is_read_once_while_unchanged(synthetic_traces, tmp_path, monkeypatch):
    """Figures 4 and 7 share one parse of each trace file (trace_sources.load reads through
    read_traces, which keeps each unchanged file's capture), and a changed trace file is
    parsed afresh."""
    import os
    import shutil

    from paper_figures import trace_sources
    from validation.traces import records

    d = tmp_path / "traces"
    shutil.copytree(synthetic_traces, d)
    files = sorted(d.glob("*.jsonl"))
    reads = []
    real = records._digest_and_capture
    monkeypatch.setattr(records, "_digest_and_capture",
                        lambda f, t: reads.append(Path(f).name) or real(f, t))
    a, notes_a = trace_sources.load(d)
    b, notes_b = trace_sources.load(d)
    assert reads == [f.name for f in files]
    assert [c.name for c in a] == [c.name for c in b] and notes_a == notes_b
    monkeypatch.setattr(records, "_PARSED", {})
    assert [c.name for c in a] == [c.name for c in records.read_traces(d)]
    reads.clear()
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten a second later
    trace_sources.load(d)
    assert reads == [files[0].name]


def test_fig04_histograms_match_traces_and_fits(synthetic_traces):
    from polyspec_theory.core.config import law_from_config

    d = figure_module(4).compute(quick=False, traces_dir=synthetic_traces)
    pooled = _pooled_rounds(synthetic_traces)
    assert len(d["pairs"]) == min(4, len(pooled))
    sizes = [p["n_rounds"] for p in d["pairs"]]
    assert sizes == sorted(sizes, reverse=True)
    for p in d["pairs"]:
        a, g = pooled[(p["verifier"], p["drafter"], p["temperature"])]
        assert p["n_rounds"] == a.size
        np.testing.assert_array_equal(p["observed"], np.bincount(a, minlength=g.max() + 1))
        # censored MLE of the iid law in closed form: accepted / (accepted + rejections)
        alpha = a.sum() / (a.sum() + np.sum(a < g))
        assert p["laws"]["iid"]["alpha"] == pytest.approx(alpha, rel=1e-6)
        for fam, cfg in p["laws"].items():
            law = law_from_config(cfg)
            exp = sum(np.bincount(np.arange(int(c) + 1), weights=law.pmf_vector(int(c)),
                                  minlength=g.max() + 1) * np.sum(g == c) for c in np.unique(g))
            np.testing.assert_allclose(p["expected"][fam], exp, rtol=1e-9, atol=1e-9)
            if fam != "gaussian":  # proper laws: expected counts sum to the rounds
                assert p["expected"][fam].sum() == pytest.approx(a.size, rel=1e-9)
        assert p["best"] != "gaussian"
        assert p["aic"][p["best"]] == min(v for f, v in p["aic"].items() if f != "gaussian")


def test_fig07_rows_match_traces_and_formulas(synthetic_traces):
    from polyspec_theory.closed_forms.dualistic import leviathan_speedup
    from polyspec_theory.core.config import Cascade, Model
    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.schemes import predict
    from validation.analysis.fits import fit_costs
    from validation.traces.records import read_traces

    d = figure_module(7).compute(quick=False, traces_dir=synthetic_traces)
    caps = {c.name: c for c in read_traces(synthetic_traces)}
    assert len(d["rows"]) == len(caps) and {r["device"] for r in d["rows"]} == {"cpu"}
    pooled = _pooled_rounds(synthetic_traces)
    for r in d["rows"]:
        cap = caps[r["name"]]
        own = _rounds_of_file(cap.path)
        assert r["measured"] == pytest.approx(_measured_speedup_of_file(cap.path), rel=1e-12)
        costs = fit_costs(cap)
        alphas = []
        for i in range(cap.n - 1):
            if r["laws_fitted_on"] == "config":  # this configuration's own rounds
                a, g = own[(cap.models[i], cap.models[i + 1], cap.temperature)]
            else:
                a, g = pooled[(cap.models[i], cap.models[i + 1], cap.temperature)]
            alphas.append(a.sum() / (a.sum() + np.sum(a < g)))
        np.testing.assert_allclose(r["iid_alphas"], alphas, rtol=1e-6)
        iid = Cascade(tuple(Model(m, costs[m].curve()) for m in cap.models),
                      tuple(IIDGeometric(x) for x in r["iid_alphas"]), cap.thresholds)
        assert r["p1_iid"] == pytest.approx(predict(iid).speedup, rel=1e-9)
        if cap.n == 2:  # the classic formula is Leviathan's closed form
            t1, t2 = costs[cap.models[0]].curve().t1, costs[cap.models[1]].curve().t1
            ref = leviathan_speedup(r["iid_alphas"][0], cap.thresholds[0], t2 / t1)
            assert r["classic_iid"] == pytest.approx(ref, rel=1e-12)
    meas = np.array([r["measured"] for r in d["rows"]])
    pred = np.array([r["p1_predictive"] for r in d["rows"]])
    np.testing.assert_allclose(d["error_p1_predictive"], pred / meas - 1)
    np.testing.assert_allclose(d["error_p1_iid"],
                               np.array([r["p1_iid"] for r in d["rows"]]) / meas - 1)
    np.testing.assert_allclose(d["error_p1_best"],
                               np.array([r["p1_best"] for r in d["rows"]]) / meas - 1)
    # the legend's headline median is over the rows with a headline forecast only (what
    # `polyspec validate` reports), not over the slowdown_costs rows mixed in
    head = [abs(r["p1_predictive"] / r["measured"] - 1) for r in d["rows"]
            if r["predictive_kind"] == "headline"]
    assert d["n_headline"] == len(head)
    if head:
        assert d["median_abs_error_headline"] == pytest.approx(float(np.median(head)))
    else:
        assert math.isnan(d["median_abs_error_headline"])


def test_fig07_axis_clips_outliers_and_names_models():
    mod = figure_module(7)
    # one value past 1.5x the largest main value: the axis stops at the next one (+8 %)
    assert mod._clip_top([1.0, 2.0, 3.0, 3.9, 5.6], core=3.0) == pytest.approx(1.08 * 3.9)
    assert mod._clip_top([1.0, 2.0, 3.0], core=3.0) == pytest.approx(1.08 * 3.0)
    assert mod._abbrev("ngram3") == "n₃" and mod._abbrev("draft-t") == "d"
    rows = [{"models": ["target", "ngram3"]}, {"models": ["target", "ngram", "small"]}]
    assert mod.model_key(rows) == {"n": "ngram", "n₃": "ngram3", "s": "small", "t": "target"}
    assert mod._short(["target", "ngram3"], [5, 2], 1.0) == "tn₃ 5,2 T=1"
    # the headline median leaves the slowdown_costs rows out: |1.1/1 - 1|, |0.96/1.2 - 1|
    rows = [{"predictive_kind": "headline", "p1_predictive": 1.1, "measured": 1.0},
            {"predictive_kind": "slowdown_costs", "p1_predictive": 3.0, "measured": 1.0},
            {"predictive_kind": "headline", "p1_predictive": 0.96, "measured": 1.2}]
    mask, med = mod.headline_error(rows)
    assert mask.tolist() == [True, False, True]
    assert med == pytest.approx((0.1 + 0.2) / 2)
    assert math.isnan(mod.headline_error(rows[1:2])[1])
