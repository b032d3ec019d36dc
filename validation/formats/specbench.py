"""Spec-Bench answer files (``data/spec_bench/model_answer/*.jsonl``): the reader.

One JSON object per line: ``question_id``, ``category``, ``model_id``, ``choices[0]``:
``turns`` (texts), ``decoding_steps`` (rounds per turn), ``new_tokens`` (per turn),
``wall_time`` (per turn, s, prefill included), ``accept_lengths`` (one integer per round, all
turns concatenated, bonus token included; all 1 for the autoregressive baseline ``vanilla``).

The per-category cost model validated on them is :mod:`validation.analysis.specbench`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.formats import Evidence, Format, PairEvidence
from validation.formats.pipespec import MAX_TIME_S, MIN_TIME_S

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


def fit_report(ev: Evidence) -> dict:
    """Pooled acceptance of an answer file (``fit`` on a Spec-Bench file)."""
    f = ev.data
    if f.is_baseline:
        raise PolyspecInputError(f.path, f"{f.method!r} is an autoregressive baseline "
                                 "(every round accepts 1 token): nothing to fit")
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


def evidence(f: AnswerFile) -> Evidence:
    """An answer file as :class:`Evidence`: one pair (the method's drafter and its target),
    the accept lengths of every round per answer (bonus included; the draft length is not
    recorded, so no counts), and the wall time."""
    rounds = tuple(a.accept_lengths for a in f.answers)
    return Evidence(path=f.path, format="specbench", description=DESCRIPTION, data=f,
                    pairs=(PairEvidence(verifier=None, drafter=None, rounds=rounds),),
                    timing={"wall_s": float(sum(sum(a.wall) for a in f.answers)),
                            "tokens": int(sum(sum(a.tokens) for a in f.answers))})


def _read_dir(directory) -> list[Evidence]:
    base, files = read_dir(directory)
    return [evidence(base)] + [evidence(f) for f in files]


DESCRIPTION = "Spec-Bench answer file (one answer per line, per-round accept lengths)"
FORMATS = (Format("specbench", DESCRIPTION, lambda s: s.is_file() and s.suffix == ".jsonl"
                  and is_specbench_file(s.path), lambda s: evidence(read_answers(s.path)),
                  order=11, report=fit_report, read_dir=_read_dir),)
