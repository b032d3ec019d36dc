"""Issue 40 items 1 and 5: R1 fitted on every P1 round (hidden entry ages) in the forecasts
of our greedy captures, and ``polyspec validate``'s load labels and idle A/A floor, on the
committed traces (data/traces/cpu)."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyspec_theory.core.runs import RunLaw, fit_run_law, fit_run_law_hidden, p1_exposures
from validation.analysis.load import load_label, noise_floors, start_load
from validation.analysis.run_forecast import r1_tokens_per_round, top_pair_rounds
from validation.traces.records import read_trace

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "data" / "traces" / "cpu"
IDLE = CPU / "preregistered-2-idle"


def _loglik(rounds, q):
    """Likelihood of one prompt's P1 rounds under hazards ``q`` (ages past the end: the
    last), by enumerating every hidden bonus outcome (independent of the EM)."""
    qa = lambda a: q[min(a, len(q) - 1)]  # noqa: E731
    full = [i for i, (g, a) in enumerate(rounds) if a == g]
    total = 0.0
    for bonus in itertools.product((0, 1), repeat=len(full)):  # 1: the bonus agreed
        agreed = dict(zip(full, bonus, strict=True))
        p, age = 1.0, 0
        for i, (g, a) in enumerate(rounds):
            for j in range(a):
                p *= 1 - qa(age + j)
            if a < g:
                p *= qa(age + a)
                age = 0
            else:
                b = age + g
                p *= (1 - qa(b)) if agreed[i] else qa(b)
                age = b + 1 if agreed[i] else 0
        total += p
    return math.log(total)


def test_hidden_fit_maximises_the_enumerated_likelihood():
    rounds = [(2, 2), (2, 1), (2, 2), (2, 2), (2, 0), (2, 2), (2, 1), (2, 2)]
    law = fit_run_law_hidden([rounds], max_age=4, min_at_risk=0, tol=1e-13, max_iter=5000)
    q = list(law.hazard) + [law.tail]
    best = _loglik(rounds, q)
    rng = np.random.default_rng(0)
    for _ in range(40):
        qq = np.clip(np.array(q) + rng.normal(0, 0.05, len(q)), 1e-6, 1 - 1e-6)
        assert _loglik(rounds, list(qq)) <= best + 1e-7


def _positions_rounds(law, g, n_prompts, length, rng):
    prompts = []
    for _ in range(n_prompts):
        d, age = [], 0
        for _ in range(length):
            ok = rng.random() >= law.q(age)
            d.append(ok)
            age = age + 1 if ok else 0
        pos, rounds = 0, []
        while pos + g + 1 < length:
            a = 0
            while a < g and d[pos + a]:
                a += 1
            rounds.append((g, a))
            pos += a + 1  # the bonus (or correction) position is the target's
        prompts.append(rounds)
    return prompts


def test_hidden_fit_recovers_ages_fresh_rounds_cannot_see():
    # G = 3: fresh rounds see ages 0..2 only; the age-3 hazard (the bonus position) and the
    # tail show only through what follows a full round. ~8000 rounds: 4 binomial standard
    # errors of the worst age are < 0.05.
    law = RunLaw([0.7, 0.5, 0.3, 0.2], 0.05)
    prompts = _positions_rounds(law, 3, 40, 400, np.random.default_rng(1))
    got = fit_run_law_hidden(prompts)
    q = list(got.hazard) + [got.tail]
    assert len(got.hazard) == 4
    for a, want in enumerate([0.7, 0.5, 0.3, 0.2, 0.05]):
        assert abs(q[a] - want) < 0.05, (a, q[a])
    fresh = fit_run_law(*p1_exposures(prompts))
    assert fresh.tail > 0.2  # the fresh rounds' tail extrapolates age 2's hazard


@pytest.mark.parametrize("name", ["target-ngram_th16_T0", "target-small_th6_T0",
                                  "target-ngram_th1_T0"])
def test_r1_with_own_rounds_counts_the_target_forwards(name):
    # in-sample: R1 with the run law of a capture's own rounds (per prompt) against the
    # target forwards per token counted in the trace (forward_count / tokens, per prompt
    # weighted as the forecast weighs prompts: equally); fresh rounds alone miss by > 4 %
    cap = read_trace(CPU / f"{name}.jsonl")
    key, th = cap.pair_key(0), cap.thresholds[0]
    r = cap.rounds[0]
    tok = {int(s["prompt"]): int(s["n_generated"]) for s in cap.summaries}
    meas = np.mean([(r.prompt == p).sum() / tok[p] for p in tok])
    hidden = np.mean([1 / r1_tokens_per_round(fit_run_law_hidden(top_pair_rounds([cap], key, p)),
                                              th) for p in tok])
    fresh = np.mean([1 / r1_tokens_per_round(fit_run_law(*p1_exposures(
        top_pair_rounds([cap], key, p))), th) for p in tok])
    assert abs(hidden / meas - 1) < 0.03
    assert abs(fresh / meas - 1) > 0.04


def test_load_labels_of_the_committed_traces():
    idle = read_trace(IDLE / "captures" / "target-draft-t-ngram3_th4-3_T0.jsonl")
    old = read_trace(CPU / "target-ngram_th2_T0.jsonl")
    assert start_load(idle) == 0.33 and load_label(idle) == "idle"
    assert start_load(old) is None and load_label(old) == "load not recorded"


def test_idle_floor_of_the_cpu_folder():
    floors = {f["folder"]: f for f in noise_floors(CPU)}
    assert floors["aa"]["load"] == "load not recorded"
    idle = floors["preregistered-2-idle/aa"]
    assert idle["load"] == "idle" and idle["dof"] == 2
    # the three A/A speedups of preregistered-2-idle/README.md (4 digits)
    want = np.std(np.log([1.2708, 1.3041, 1.2612]), ddof=1)
    assert idle["relative_sd"] == pytest.approx(want, rel=2e-3)


def _loaded_copy(src: Path, dst: Path, load: float) -> None:
    """A committed trace with its header's start load set to ``load`` (the field under
    test; every record after the header is the committed one)."""
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    head = json.loads(lines[0])
    head["load_check"] = {"max_load": 0.5, "allow_load": True, "load_1min": load}
    dst.write_text(json.dumps(head) + "\n" + "".join(lines[1:]), encoding="utf-8")


def test_validate_leaves_loaded_captures_out_of_the_headline(tmp_path):
    names = ["target-ngram_th2_T0", "target-ngram_th3_T0", "target-ngram_th4_T0"]
    (tmp_path / "profiles").mkdir()
    for n in names:
        shutil.copy(CPU / "profiles" / f"{n}.json", tmp_path / "profiles")
    shutil.copy(CPU / f"{names[0]}.jsonl", tmp_path)
    shutil.copy(CPU / f"{names[1]}.jsonl", tmp_path)
    _loaded_copy(CPU / f"{names[2]}.jsonl", tmp_path / f"{names[2]}.jsonl", 2.0)

    def run(*extra):
        out = subprocess.run(
            [sys.executable, "-m", "polyspec", "validate", str(tmp_path), "--json",
             "--no-plots", "--no-insertions", "--laws", "iid", "--out",
             str(tmp_path / f"out{len(extra)}"), *extra],
            capture_output=True, text=True, cwd=ROOT, check=True)
        return json.loads(out.stdout), out.stderr

    rep, _ = run()
    meas = {n: read_trace(tmp_path / f"{n}.jsonl").measured_speedup for n in names}
    pred = {c["name"]: c["predicted_speedup"] for c in rep["configs"]}
    assert set(pred) == set(names)  # the loaded capture is still forecast and listed
    errs = {n: abs(pred[n] / meas[n] - 1) for n in names}
    assert rep["summary"]["n_predicted"] == 2
    assert rep["median_abs_error"] == pytest.approx(np.median([errs[n] for n in names[:2]]))
    assert rep["max_abs_error"] == pytest.approx(max(errs[n] for n in names[:2]))
    assert rep["load"]["left_out_of_headline"] == [names[2]]
    assert rep["load"]["labels"][names[2]] == "under load"
    assert rep["load"]["labels"][names[0]] == "load not recorded"
    note = [n for n in rep["notes"] if "made under load" in n]
    assert len(note) == 1 and note[0].startswith("1 capture(s)") and names[2] in note[0]
    rep2, _ = run("--include-loaded")
    assert rep2["summary"]["n_predicted"] == 3 and rep2["load"]["left_out_of_headline"] == []
    assert rep2["median_abs_error"] == pytest.approx(np.median(list(errs.values())))
    assert rep2["max_abs_error"] == pytest.approx(max(errs.values()))


def test_load_label_on_both_sides_of_the_limit():
    """Above 0.5 at the start is "under load", 0.5 itself idle (polyspec's own refusal is
    above 0.5); the header's load_check wins over machine.load_average; neither recorded:
    "load not recorded"."""
    from types import SimpleNamespace

    from validation.analysis.load import load_label

    def cap(header):
        return SimpleNamespace(header=header)

    assert load_label(cap({"load_check": {"load_1min": 0.5}})) == "idle"
    assert load_label(cap({"load_check": {"load_1min": 0.51}})) == "under load"
    assert load_label(cap({"load_check": {"load_1min": 0.2},
                           "machine": {"load_average": [3.0, 1, 1]}})) == "idle"
    assert load_label(cap({"machine": {"load_average": [0.9, 0.1, 0.1]}})) == "under load"
    assert load_label(cap({"machine": {}})) == "load not recorded"
