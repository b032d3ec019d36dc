"""Spec-Bench answer folders (:mod:`validation.formats.specbench`): a per-category cost model
validated leave-one-category-out.

Cost model (a method m in category c, summed over the category's turns):
``wall = f_m * turns + R * (u_m + w_m * t_c) + v_m * N``, with ``t_c`` the category's own
baseline time per token (``vanilla``: sum of wall_time / sum of new_tokens, prefill
included), R the method's rounds and N its tokens in the category (acceptance observed).
(f, u, w, v) are fitted on the other categories by least squares in relative error, signs
free: a turn has a fixed cost (prefill, set-up: f), a round a fixed part (drafting, tree
building, launches: u) plus a verify part that scales with the target's context-dependent
step (w; u < 0 where verify grows faster with the context than one AR step), and drafting
that grows with the tokens a round yields (v). The comparison baseline (``proportional``) is
``wall = w * R * t_c``.
"""

from __future__ import annotations

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.formats.specbench import AnswerFile, read_dir


def _agg(f: AnswerFile, cat: str, qids=None):
    ans = [a for a in f.answers if a.category == cat and (qids is None or a.question_id in qids)]
    return (sum(len(a.tokens) for a in ans), sum(sum(a.steps) for a in ans),
            sum(sum(a.tokens) for a in ans), sum(sum(a.wall) for a in ans))


def _speed(base, f, cat, qids=None):
    """Measured speedup of ``f`` over ``base`` on the category's questions; ``qids``: a
    bootstrap draw, with repeats (a question drawn k times weighs k)."""
    from collections import Counter

    mine = {a.question_id: a for a in f.answers if a.category == cat}
    weight = (dict.fromkeys(mine, 1) if qids is None else
              {q: k for q, k in Counter(int(x) for x in qids).items() if q in mine})
    ref = {a.question_id: a for a in base.answers if a.question_id in weight}
    bn = sum(k * sum(ref[q].tokens) for q, k in weight.items())
    bw = sum(k * sum(ref[q].wall) for q, k in weight.items())
    n = sum(k * sum(mine[q].tokens) for q, k in weight.items())
    w = sum(k * sum(mine[q].wall) for q, k in weight.items())
    return (bw / bn) / (w / n)


def _features(base, f, cat):
    turns, rounds, tokens, wall = _agg(f, cat)
    _, _, bn, bw = _agg(base, cat)
    t = bw / bn
    return np.array([turns, rounds, rounds * t, tokens], dtype=np.float64), wall, tokens


MIN_CATEGORIES = 5  # leave-one-category-out from this many categories
MIN_QUESTIONS = 5  # leave-one-question-out from this many questions


def _fit(X, y):
    """Least squares in relative error: coefficients c minimising sum((X c / y - 1)^2)."""
    return np.linalg.lstsq(X / y[:, None], np.ones(len(y)), rcond=None)[0]


def ar_step(base: AnswerFile) -> float:
    """The folder's autoregressive time per token (baseline: sum wall / sum tokens)."""
    return (sum(sum(a.wall) for a in base.answers)
            / sum(sum(a.tokens) for a in base.answers))


def _question_features(base, f):
    """Per question of ``f``: (id, category, features, wall, tokens); the category's own
    baseline step ``t_c`` as in the category model."""
    tc = {}
    for c in f.categories():
        _, _, bn, bw = _agg(base, c)
        tc[c] = bw / bn
    out = []
    for a in f.answers:
        turns, rounds, tokens = len(a.tokens), sum(a.steps), sum(a.tokens)
        out.append((a.question_id, a.category,
                    np.array([turns, rounds, rounds * tc[a.category], tokens], float),
                    sum(a.wall), tokens))
    return out


def _cols(proportional):
    return [2] if proportional else [0, 1, 2, 3]


def _costs_from(other_dir, f, proportional, scale_to):
    """Coefficients fitted on every category of the same method in ``other_dir``, scaled to
    this folder: seconds (per turn, per round, per token) x the ratio of the two folders'
    autoregressive steps; the coefficient of rounds x t_c is a pure number and carries."""
    obase, omethods = read_dir(other_dir)
    g = next((m for m in omethods if m.method == f.method), None)
    if g is None:
        raise PolyspecInputError("--costs-from", f"{other_dir} has no {f.method!r} answers "
                                 f"(methods: {', '.join(m.method for m in omethods)})")
    cols = _cols(proportional)
    X = np.array([_features(obase, g, c)[0][cols] for c in g.categories()])
    y = np.array([_features(obase, g, c)[1] for c in g.categories()])
    coef = _fit(X, y)
    ratio = scale_to / ar_step(obase)
    scale = np.array([1.0 if j == 2 else ratio for j in cols])
    mine = {(a.tokens, a.wall) for a in f.answers}  # a measurement, whatever its label
    same = sum((a.tokens, a.wall) in mine for a in g.answers)
    return coef * scale, ratio, same


def validate_specbench(directory, *, proportional: bool = False, n_boot: int = 400,
                       seed: int = 0, costs_from=None) -> dict:
    """Per (method, category): predicted vs measured speedup, acceptance (rounds, tokens)
    observed in the category, the cost model's coefficients held out by one of:

    * ``category`` (>= 5 categories): fitted on the other categories;
    * ``question`` (fewer categories): each question's time from a fit on the other
      questions (>= 5), a category's prediction the sum over its questions;
    * ``costs-from`` (``costs_from`` = another folder of the same method): fitted on all of
      that folder's categories, scaled by the ratio of the two folders' autoregressive steps.

    ``proportional``: time per round = constant x the category's AR step (fitted likewise).
    """
    base, methods = read_dir(directory)
    rng = np.random.default_rng(seed)
    cols = _cols(proportional)
    configs, held = [], {}
    for f in methods:
        cats = f.categories()
        feats = {c: _features(base, f, c) for c in cats}
        pred_wall = {}
        if costs_from is not None:
            coef, ratio, same = _costs_from(costs_from, f, proportional, ar_step(base))
            held[f.method] = (f"costs-from {costs_from} (its fit scaled by the AR-step ratio "
                              f"{ratio:.4f})")
            if same:  # the costs were fitted on the very answers predicted
                held[f.method] = (f"in-sample: {costs_from} holds {same} of these answers "
                                  "(a diagnostic, not held out)")
            for c in cats:
                pred_wall[c] = float(feats[c][0][cols] @ coef)
        elif len(cats) >= MIN_CATEGORIES:
            held[f.method] = "category"
            for c in cats:
                train = [d for d in cats if d != c]
                X = np.array([feats[d][0][cols] for d in train])
                y = np.array([feats[d][1] for d in train])
                pred_wall[c] = float(feats[c][0][cols] @ _fit(X, y))
        else:
            qf = _question_features(base, f)
            if len(qf) < MIN_QUESTIONS:
                raise PolyspecInputError(f.path, f"{len(qf)} questions in {len(cats)} "
                                         f"categories: a held-out forecast needs at least "
                                         f"{MIN_CATEGORIES} categories or {MIN_QUESTIONS} "
                                         "questions (or --costs-from another folder)")
            held[f.method] = "question"
            X = np.array([q[2][cols] for q in qf])
            y = np.array([q[3] for q in qf])
            per_q = np.zeros(len(qf))
            for i in range(len(qf)):
                keep = np.arange(len(qf)) != i
                per_q[i] = float(X[i] @ _fit(X[keep], y[keep]))
            for c in cats:
                pred_wall[c] = float(sum(per_q[i] for i, q in enumerate(qf) if q[1] == c))
            configs_q = [{"question_id": q[0], "category": q[1], "predicted_wall": per_q[i],
                          "measured_wall": q[3]} for i, q in enumerate(qf)]
        for c in cats:
            _, _, bn, bw = _agg(base, c, {a.question_id for a in f.answers if a.category == c})
            pred = (bw / bn) / (pred_wall[c] / feats[c][2])
            meas = _speed(base, f, c)
            qs = np.array(sorted(a.question_id for a in f.answers if a.category == c))
            boots = [_speed(base, f, c, rng.choice(qs, size=qs.size)) for _ in range(n_boot)]
            row = {"name": f"{f.method}/{c}", "method": f.method, "category": c,
                   "held_out": held[f.method].split(" ")[0].rstrip(":"),
                   "predicted_speedup": pred, "measured_speedup": meas,
                   "error": pred / meas - 1,
                   "measured_ci95": [float(np.quantile(boots, 0.025)),
                                     float(np.quantile(boots, 0.975))]}
            if held[f.method] == "question":
                row["questions"] = [q for q in configs_q if q["category"] == c]
            configs.append(row)
    per = {}
    for m in sorted({c["method"] for c in configs}):
        e = np.abs([c["error"] for c in configs if c["method"] == m])
        per[m] = {"median_abs_error": float(np.median(e)), "max_abs_error": float(e.max()),
                  "held_out": held[m]}
    e = np.abs([c["error"] for c in configs])
    kinds = sorted({v.split(" ")[0].rstrip(":") for v in held.values()})
    return {"format": "specbench", "baseline": base.path,
            "cost_model": ("time per round proportional to the category's AR step" if
                           proportional else "f*turns + rounds*(u + w*t_c) + v*tokens"),
            "held_out": held,
            "configs": configs, "per_method": per, "median_abs_error": float(np.median(e)),
            "max_abs_error": float(e.max()),
            "headline": "in-sample (diagnostic: --costs-from holds the same answers)"
            if "in-sample" in kinds else "costs-held-out" if kinds == ["category"] else
            f"costs-held-out ({', '.join(kinds)})"}
