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
import warnings
from pathlib import Path

import numpy as np
import pytest

from polyspec_theory.core.runs import (
    RunLaw,
    fit_run_law,
    fit_run_law_hidden,
    fit_run_laws_hidden,
    p1_exposures,
)
from polyspec_theory.errors import PolyspecInputError
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
    laws = fit_run_laws_hidden([top_pair_rounds([cap], key, p) for p in tok])  # per prompt
    hidden = np.mean([1 / r1_tokens_per_round(law, th) for law in laws])
    fresh = np.mean([1 / r1_tokens_per_round(fit_run_law(*p1_exposures(
        top_pair_rounds([cap], key, p))), th) for p in tok])
    assert abs(hidden / meas - 1) < 0.03
    assert abs(fresh / meas - 1) > 0.04


def _hidden_em_one_sequence_at_a_time(prompts, tol, max_iter=500, min_at_risk=10):
    """fit_run_law_hidden as first written: a loop over prompts and rounds, one sequence at
    a time (the reference the vectorised EM must equal to the last bit)."""
    seqs = [(np.array([g for g, _ in r]), np.array([a for _, a in r])) for r in prompts if r]
    gmax = int(max(g.max() for g, _ in seqs))
    big = min(gmax + 1, 40)
    n_ext = big + gmax + 2
    ages = np.minimum(np.arange(n_ext), big)
    st = np.arange(big + 1)
    q = np.full(big + 1, 0.5)
    prev = -np.inf
    for _ in range(max_iter):
        qe = np.clip(q[ages], 1e-12, 1 - 1e-12)
        cum = np.concatenate([[0.0], np.cumsum(np.log1p(-qe))])
        risk, ev, ll = np.zeros(n_ext), np.zeros(n_ext), 0.0
        for g, a in seqs:
            n = g.size
            full = a == g
            emis = np.exp(cum[st[None, :] + a[:, None]] - cum[st][None, :])
            emis = np.where(full[:, None], emis, emis * qe[st[None, :] + a[:, None]])
            qb = qe[st[None, :] + g[:, None]]
            nxt = np.minimum(st[None, :] + g[:, None] + 1, big)
            alpha, scale = np.zeros((n, big + 1)), np.zeros(n)
            cur = np.zeros(big + 1)
            cur[0] = 1.0
            for r in range(n):
                v = cur * emis[r]
                scale[r] = v.sum()
                alpha[r] = v / scale[r]
                cur = np.zeros(big + 1)
                if full[r]:
                    cur[0] = (alpha[r] * qb[r]).sum()
                    np.add.at(cur, nxt[r], alpha[r] * (1 - qb[r]))
                else:
                    cur[0] = alpha[r].sum()
            ll += np.log(scale).sum()
            beta, bn_next = np.ones(big + 1), np.ones(big + 1)
            for r in range(n - 1, -1, -1):
                post = alpha[r] * beta
                post /= post.sum()
                np.add.at(risk, st, post)
                np.add.at(risk, st + a[r] + (0 if full[r] else 1), -post)
                if full[r]:
                    b0 = qb[r] * bn_next[0]
                    b1 = (1 - qb[r]) * bn_next[nxt[r]]
                    tot = (alpha[r] * (b0 + b1)).sum()
                    np.add.at(risk, st + g[r], alpha[r] * (b0 + b1) / tot)
                    np.add.at(risk, st + g[r] + 1, -alpha[r] * (b0 + b1) / tot)
                    np.add.at(ev, st + g[r], alpha[r] * b0 / tot)
                else:
                    np.add.at(ev, st + a[r], post)
                bn = beta * emis[r] / scale[r]
                bn_next = bn
                if r > 0:
                    beta = (qb[r - 1] * bn[0] + (1 - qb[r - 1]) * bn[nxt[r - 1]]
                            if full[r - 1] else np.full(big + 1, bn[0]))
        rk = np.bincount(ages, weights=np.cumsum(risk), minlength=big + 1)
        evk = np.bincount(ages, weights=ev, minlength=big + 1)
        q = np.where(rk > 0, evk / np.where(rk > 0, rk, 1), 0.5)
        if ll - prev < tol * max(1.0, abs(ll)):
            break
        prev = ll
    good = np.flatnonzero(rk[:big] >= min_at_risk)
    lo = int(good.max()) + 1 if good.size else 0
    while lo > 0 and rk[lo:].sum() < min_at_risk:
        lo -= 1
    tail = float(evk[lo:].sum() / rk[lo:].sum()) if rk[lo:].sum() > 0 else 0.5
    return ([float(x) for x in q[:lo]], min(max(tail, 1e-6), 1.0))


def test_hidden_fits_side_by_side_equal_the_sequence_loop_to_the_last_bit():
    # sets of prompts of uneven lengths and largest blocks (several state spaces, sets that
    # converge at different iterations), every law compared with == to the loop's
    law = RunLaw([0.6, 0.4, 0.3, 0.2], 0.1)
    rng = np.random.default_rng(7)
    sets = []
    for j in range(7):
        g = [2, 3, 3, 5, 4, 3, 8][j]
        prompts = _positions_rounds(law, g, 1 + j % 3, int(rng.integers(40, 110)), rng)
        if j == 3:
            prompts[0] = [(min(gg + 1, 6), a) for gg, a in prompts[0]]  # blocks of two sizes
            prompts.append([])  # a prompt without rounds
        sets.append(prompts)
    want = [_hidden_em_one_sequence_at_a_time(p, 1e-9) for p in sets]
    with warnings.catch_warnings():  # rows past their last round: no log(0) or 0/0 warning
        warnings.simplefilter("error")
        got = fit_run_laws_hidden(sets, tol=1e-9)
    assert [(list(x.hazard), x.tail) for x in got] == want
    one = fit_run_law_hidden(sets[3], tol=1e-9)
    assert (list(one.hazard), one.tail) == want[3]
    assert got[1].hazard != got[2].hazard  # the sets' EMs are their own


def test_hidden_fits_side_by_side_refuse_naming_the_set():
    with pytest.raises(PolyspecInputError, match=r"sets\[1\]\[0\]"):
        fit_run_laws_hidden([[[(2, 1)]], [[(2, 3)]]])
    with pytest.raises(PolyspecInputError, match=r"^prompts\[0\]"):
        fit_run_law_hidden([[(0, 0)]])
    with pytest.raises(PolyspecInputError, match="max_iter"):
        fit_run_laws_hidden([[[(2, 1)]]], max_iter=0)
    assert fit_run_laws_hidden([]) == []


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
