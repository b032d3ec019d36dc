"""Spec-Bench answer files (``data/spec_bench/model_answer/*.jsonl``): reader and a per-category
cost model validated leave-one-category-out.

One JSON object per line: ``question_id``, ``category``, ``model_id``, ``choices[0]``:
``turns`` (texts), ``decoding_steps`` (rounds per turn), ``new_tokens`` (per turn),
``wall_time`` (per turn, s, prefill included), ``accept_lengths`` (one integer per round, all
turns concatenated, bonus token included; all 1 for the autoregressive baseline ``vanilla``).

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

import json
import os
from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError

from .pipespec import MAX_TIME_S, MIN_TIME_S

BASELINE_METHODS = ("vanilla", "baseline", "ar")


@dataclass(frozen=True)
class Answer:
    question_id: int
    category: str
    steps: tuple[int, ...]
    tokens: tuple[int, ...]
    wall: tuple[float, ...]
    accept_lengths: np.ndarray


@dataclass(frozen=True)
class AnswerFile:
    path: str
    model_id: str
    answers: tuple[Answer, ...]

    @property
    def method(self) -> str:
        """Method label from ``model_id`` (e.g. ``vicuna-7b-v1.3-sps-68m-...`` -> ``sps-68m``)."""
        mid = self.model_id
        for tag in ("-float16", "-float32", "-bfloat16", "-temp"):
            mid = mid.split(tag)[0]
        parts = mid.split("-")
        i = next((j for j, p in enumerate(parts) if p.startswith("v1") or p.startswith("v0")),
                 None)
        return "-".join(parts[i + 1:]) if i is not None and i + 1 < len(parts) else mid

    @property
    def is_baseline(self) -> bool:
        return self.method in BASELINE_METHODS or all(
            (a.accept_lengths == 1).all() for a in self.answers)

    def categories(self) -> list[str]:
        return sorted({a.category for a in self.answers})


def looks_like_specbench_line(obj) -> bool:
    return (isinstance(obj, dict) and "question_id" in obj and isinstance(obj.get("choices"),
                                                                          list)
            and obj["choices"] and isinstance(obj["choices"][0], dict)
            and "accept_lengths" in obj["choices"][0])


def _ints(x, path, where, low):
    if not isinstance(x, list) or not x:
        raise PolyspecInputError(f"{path}: {where}", "must be a non-empty list")
    for i, v in enumerate(x):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v \
                or abs(v) > 2**53 or v != int(v) or v < low:
            raise PolyspecInputError(f"{path}: {where}[{i}]", f"must be an integer >= {low}, "
                                     f"got {v!r}")
    return tuple(int(v) for v in x)


def parse_answer(obj, path, line: int) -> tuple[str, Answer]:
    where = f"line {line}"
    if not looks_like_specbench_line(obj):
        raise PolyspecInputError(f"{path}: {where}", "not a Spec-Bench answer (needs "
                                 "question_id, choices[0].accept_lengths)")
    qid = obj["question_id"]
    if isinstance(qid, bool) or not isinstance(qid, int):
        raise PolyspecInputError(f"{path}: {where}.question_id", f"must be an integer, got "
                                 f"{qid!r}")
    cat = obj.get("category")
    if not isinstance(cat, str) or not cat:
        raise PolyspecInputError(f"{path}: {where}.category", f"must be a name, got {cat!r}")
    c = obj["choices"][0]
    w = f"{where}.choices[0]"
    for k in ("decoding_steps", "new_tokens", "wall_time", "accept_lengths"):
        if k not in c:
            raise PolyspecInputError(f"{path}: {w}.{k}", "missing required field")
    steps = _ints(c["decoding_steps"], path, f"{w}.decoding_steps", 0)
    tokens = _ints(c["new_tokens"], path, f"{w}.new_tokens", 0)
    acc = np.asarray(_ints(c["accept_lengths"], path, f"{w}.accept_lengths", 1), dtype=np.int64)
    wall = c["wall_time"]
    if not isinstance(wall, list) or len(wall) != len(steps):
        raise PolyspecInputError(f"{path}: {w}.wall_time", "must be a list with one entry "
                                 "per turn")
    for i, v in enumerate(wall):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > 2**53 \
                or not np.isfinite(v) or not MIN_TIME_S <= v <= MAX_TIME_S:
            raise PolyspecInputError(f"{path}: {w}.wall_time[{i}]", f"must be a plausible "
                                     f"measured time ({MIN_TIME_S:g} s to {MAX_TIME_S:g} s), "
                                     f"got {v!r}")
    if len(tokens) != len(steps):
        raise PolyspecInputError(f"{path}: {w}.new_tokens", f"{len(tokens)} turns, "
                                 f"decoding_steps has {len(steps)}")
    if len(acc) != sum(steps):
        raise PolyspecInputError(f"{path}: {w}.accept_lengths", f"{len(acc)} rounds, "
                                 f"decoding_steps add up to {sum(steps)}")
    if int(acc.sum()) != sum(tokens):
        raise PolyspecInputError(f"{path}: {w}.accept_lengths", f"add up to {int(acc.sum())} "
                                 f"tokens, new_tokens add up to {sum(tokens)}")
    return str(obj.get("model_id", "")), Answer(qid, cat, steps, tokens,
                                                 tuple(float(v) for v in wall), acc)


def read_answers(path) -> AnswerFile:
    """Read and check one Spec-Bench answer file (errors name file, line and field)."""
    from validation.files import read_regular_bytes

    raw = read_regular_bytes(path, MAX_FILE_BYTES, str(path), "Spec-Bench answer file")
    try:
        lines = raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise PolyspecInputError(f"{path}: line {line}", "not UTF-8 text") from None
    answers, mids, seen = [], set(), set()
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise PolyspecInputError(f"{path}: line {n}", f"malformed JSON (truncated?): "
                                     f"{e.msg} at column {e.colno}") from None
        mid, a = parse_answer(obj, path, n)
        if a.question_id in seen:
            raise PolyspecInputError(f"{path}: line {n}.question_id",
                                     f"duplicate question_id {a.question_id}")
        seen.add(a.question_id)
        mids.add(mid)
        answers.append(a)
    if not answers:
        raise PolyspecInputError(str(path), "no answers in it")
    if len(mids) > 1:
        raise PolyspecInputError(f"{path}: model_id", f"mixes {sorted(mids)}")
    return AnswerFile(str(path), mids.pop(), tuple(answers))


MAX_FILE_BYTES = 2**30  # an answer file (the shared ones are a few MB); bounds the read
MAX_FIRST_LINE = 2**24  # the first answer (its turns' text included)


def is_specbench_file(path) -> bool:
    """Whether ``path`` is a Spec-Bench answer file (its first line is an answer); never
    opens anything but a regular file (a FIFO would block, a device never ends)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline(MAX_FIRST_LINE)
        return looks_like_specbench_line(json.loads(first))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


_PRECISIONS = ("bfloat16", "float16", "float32", "bf16", "fp16", "fp32", "int8", "int4")


def model_parts(model_id: str, method: str | None = None) -> dict:
    """What a Spec-Bench ``model_id`` says of the run (``<target>-<method>-<dtype>-
    temperature-<T>``): ``target`` (the text before the method, when the method is known),
    ``precision`` and ``temperature`` (None where not written)."""
    import re

    low = model_id.lower()
    prec = next((p for p in _PRECISIONS if re.search(rf"(^|-){p}(-|$)", low)), None)
    m = re.search(r"temp(?:erature)?-([0-9]+(?:\.[0-9]+)?)", low)
    target = None
    if method:
        i = low.find(f"-{method.lower()}")
        target = low[:i] if i > 0 else None
    return {"target": target, "precision": prec,
            "temperature": float(m.group(1)) if m else None}


def check_same_target(base: AnswerFile, files) -> None:
    """Every method file of a folder is of the baseline's target model, precision and
    temperature as their ``model_id`` write them: a baseline of another model or precision
    (or a method file of another target) is refused, naming the file."""
    b = model_parts(base.model_id, base.method)
    for f in files:
        if f is base:
            continue
        m = model_parts(f.model_id, f.method)
        for key, what in (("target", "target model"), ("precision", "precision"),
                          ("temperature", "temperature")):
            if b[key] is not None and m[key] is not None and b[key] != m[key]:
                raise PolyspecInputError(f"{f.path}: model_id", f"{f.model_id!r} is of "
                                         f"{what} {m[key]!r}, the baseline {base.path} of "
                                         f"{b[key]!r} ({base.model_id!r}): compare runs of one "
                                         "target, precision and temperature")
        if b["target"] is not None and m["target"] is None and \
                not f.model_id.lower().startswith(b["target"] + "-"):
            raise PolyspecInputError(f"{f.path}: model_id", f"{f.model_id!r} is not of the "
                                     f"baseline's target model {b['target']!r} ({base.path})")


def read_dir(directory) -> tuple[AnswerFile, list[AnswerFile]]:
    """(baseline, method files) of a Spec-Bench answer folder; exactly one baseline, at least
    one method, all of one target model, precision and temperature (``model_id``)."""
    files = [read_answers(os.path.join(directory, n)) for n in sorted(os.listdir(directory))
             if n.endswith(".jsonl") and is_specbench_file(os.path.join(directory, n))]
    if not files:
        raise PolyspecInputError(str(directory), "no Spec-Bench answer file (.jsonl) in it")
    base = [f for f in files if f.is_baseline]
    if len(base) != 1:
        raise PolyspecInputError(str(directory), f"needs exactly one baseline (vanilla) file, "
                                 f"found {len(base)}")
    b = base[0]
    if len(files) == 1:
        raise PolyspecInputError(str(directory), f"holds only the baseline {b.path}: no "
                                 "method answers to validate against it")
    check_same_target(b, files)
    bq = {a.question_id: a.category for a in b.answers}
    for f in files:
        if f is b:
            continue
        for a in f.answers:
            if a.question_id not in bq:
                raise PolyspecInputError(f"{f.path}: question_id {a.question_id}",
                                         f"not in the baseline {b.path}")
            if bq[a.question_id] != a.category:
                raise PolyspecInputError(f"{f.path}: question_id {a.question_id}.category",
                                         f"{a.category!r} but {bq[a.question_id]!r} in the "
                                         "baseline")
    return b, [f for f in files if f is not b]


def fit_report(f: AnswerFile) -> dict:
    """Pooled acceptance of an answer file (``fit`` on a Spec-Bench file)."""
    acc = np.concatenate([a.accept_lengths for a in f.answers])
    warnings = []
    if acc.max() > 1 and len(set(acc.tolist())) > 1:
        warnings.append(f"draft length varies by round or is not recorded (accept lengths up "
                        f"to {int(acc.max())}): the acceptance laws assume a fixed draft "
                        "length; read the mean acceptance length, not the law, for such runs")
    per_cat = {}
    for c in f.categories():
        a = np.concatenate([x.accept_lengths for x in f.answers if x.category == c])
        per_cat[c] = {"rounds": int(a.size), "tokens": int(a.sum()),
                      "mean_acceptance_length": float(a.mean())}
    hist = np.bincount(acc)
    return {"format": "specbench-answers", "format_description": "Spec-Bench answer file "
            "(one answer per line, per-round accept lengths)", "source": f.model_id,
            "method": f.method, "rounds": int(acc.size), "accepted": int((acc - 1).sum()),
            "tokens": int(acc.sum()), "mean_acceptance_length": float(acc.mean()),
            "max_acceptance_length": int(acc.max()),
            "histogram_accept_lengths": hist.tolist(), "categories": per_cat,
            "cap": None, "warnings": warnings}


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
