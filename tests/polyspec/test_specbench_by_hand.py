"""``polyspec validate`` on a Spec-Bench folder against computations written here from its
documented rules (validation/gpu_traces/specbench.py's docstring), on the shared answers
(tests/fixtures/gpu-traces/specbench-vicuna7b, read here with ``json``):

* the cost model ``wall = f turns + R (u + w t_c) + v N`` fitted on the other categories by
  least squares in RELATIVE error: the minimiser of sum((pred / wall - 1)^2), found here by
  scipy's least_squares on those residuals (not the code's closed form);
* the measured speedup's 95 % interval is the percentile interval of the bootstrap over the
  category's questions drawn WITH replacement (a question drawn twice counts twice): with 6
  questions the bootstrap law has 462 outcomes (multinomial counts), enumerated here; with
  20 000 draws the reported 2.5 % / 97.5 % quantiles lie between the exact law's 2 % and 3 %
  (97 % and 98 %) quantiles except with probability < 1e-4 per end (binomial counts at
  4 standard deviations; 10 ends: < 1e-3 per run)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import least_squares

from polyspec.cli import main
from tests.cli_checks import run_checked

ROOT = Path(__file__).resolve().parents[2]
SB = ROOT / "tests" / "fixtures" / "gpu-traces" / "specbench-vicuna7b"
BASE = "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"
SPS = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"
EAGLE = "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl"


def _answers(name):
    out = {}
    for line in (SB / name).read_text().splitlines():
        o = json.loads(line)
        c = o["choices"][0]
        out[o["question_id"]] = (o["category"], len(c["new_tokens"]), sum(c["decoding_steps"]),
                                 sum(c["new_tokens"]), sum(c["wall_time"]))
    return out


def _features(base, meth, cat):
    qs = [q for q, a in meth.items() if a[0] == cat]
    bn = sum(base[q][3] for q in base if base[q][0] == cat)
    bw = sum(base[q][4] for q in base if base[q][0] == cat)
    t_c = bw / bn  # the category's own AR step (all its baseline questions)
    turns = sum(meth[q][1] for q in qs)
    rounds = sum(meth[q][2] for q in qs)
    tokens = sum(meth[q][3] for q in qs)
    wall = sum(meth[q][4] for q in qs)
    return np.array([turns, rounds, rounds * t_c, tokens], float), wall, tokens, qs


def test_cost_model_is_the_relative_error_least_squares_on_the_other_categories(capsys):
    rc, _, err, data = run_checked(capsys, ["validate", SB, "--json"])
    assert rc == 0, err
    base = _answers(BASE)
    rows = {r["name"]: r for r in data["configs"]}
    for name, label in ((SPS, "sps-68m"), (EAGLE, "eagle")):
        meth = _answers(name)
        cats = sorted({a[0] for a in meth.values()})
        feats = {c: _features(base, meth, c) for c in cats}
        for c in cats:
            train = [d for d in cats if d != c]
            X = np.array([feats[d][0] for d in train])
            y = np.array([feats[d][1] for d in train])
            coef = least_squares(lambda b, X=X, y=y: X @ b / y - 1.0, np.zeros(4),
                                 xtol=1e-15, ftol=1e-15, gtol=1e-15).x
            x, _, tokens, qs = feats[c]
            pred_wall = float(x @ coef)
            bw = sum(base[q][4] for q in qs)
            bn = sum(base[q][3] for q in qs)
            want = (bw / bn) / (pred_wall / tokens)
            assert rows[f"{label}/{c}"]["predicted_speedup"] == pytest.approx(want, rel=1e-6)


def _speed(base, meth, counts):
    bw = sum(k * base[q][4] for q, k in counts.items())
    bn = sum(k * base[q][3] for q, k in counts.items())
    w = sum(k * meth[q][4] for q, k in counts.items())
    n = sum(k * meth[q][3] for q, k in counts.items())
    return (bw / bn) / (w / n)


def _quantile(values, probs, p):
    """The exact law's p-quantile (the least value whose CDF reaches p)."""
    order = np.argsort(values)
    cdf = np.cumsum(np.asarray(probs)[order])
    return float(np.asarray(values)[order][np.searchsorted(cdf, p - 1e-12)])


def _compositions(n, k):
    """Every way to draw n questions of k with replacement, as counts, with its probability."""
    from math import factorial

    for cut in itertools.combinations(range(n + k - 1), k - 1):
        counts = np.diff((-1, *cut, n + k - 1)) - 1
        p = factorial(n) / np.prod([factorial(int(c)) for c in counts]) / k ** n
        yield counts, p


def test_measured_interval_is_the_95_percent_bootstrap_with_replacement(tmp_path):
    """Ten categories of the shared answers merged pairwise into five of 6 questions each
    (category hold-out needs five), 20 000 bootstrap draws; each reported interval against
    the exact bootstrap law of its 6 questions (462 outcomes: a question drawn k times
    weighs k)."""
    from validation.analysis.specbench import validate_specbench

    base = _answers(BASE)
    cats = sorted({a[0] for a in base.values()})[:10]
    merged = {c: f"pair{i // 2}" for i, c in enumerate(cats)}
    for name in (BASE, SPS):
        rows = [json.loads(ln) for ln in (SB / name).read_text().splitlines()]
        rows = [{**r, "category": merged[r["category"]]} for r in rows if r["category"] in merged]
        (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rep = validate_specbench(tmp_path, n_boot=20_000, seed=1)
    meth = _answers(SPS)
    for row in rep["configs"]:
        qs = sorted(q for q, a in meth.items() if merged.get(a[0]) == row["category"])
        assert len(qs) == 6
        vals, probs = [], []
        for counts, p in _compositions(len(qs), len(qs)):
            drawn = {q: int(k) for q, k in zip(qs, counts, strict=True) if k}
            vals.append(_speed(base, meth, drawn))
            probs.append(p)
        assert sum(probs) == pytest.approx(1.0)
        lo, hi = row["measured_ci95"]
        assert _quantile(vals, probs, 0.02) <= lo <= _quantile(vals, probs, 0.03), row
        assert _quantile(vals, probs, 0.97) <= hi <= _quantile(vals, probs, 0.98), row
        # and the point is the speedup over the category's questions, each once
        assert row["measured_speedup"] == pytest.approx(_speed(base, meth, dict.fromkeys(qs, 1)))


def test_costs_from_the_same_answers_is_labelled_in_sample(capsys, tmp_path):
    """``--costs-from`` a folder holding the very answers validated (the folder itself, or a
    copy) fits the costs on what it predicts: an in-sample diagnostic, never labelled held
    out."""
    d = tmp_path / "sb"
    shutil.copytree(SB, d)
    for other in (SB, d):
        rc, out, err, data = run_checked(capsys, ["validate", SB, "--costs-from", other,
                                                  "--json"])
        assert rc == 0 and data["headline"].startswith("in-sample"), data["headline"]
        assert all(v.startswith("in-sample") for v in data["held_out"].values())
        assert {c["held_out"] for c in data["configs"]} == {"in-sample"}
        assert main(["validate", str(SB), "--costs-from", str(other)]) == 0
        out = capsys.readouterr().out
        assert "[in-sample" in out and "held out by" not in out
