"""``polyspec fit`` on drafts of varying length (llama.cpp's confidence cut-off): the cut-off
model of docs/theory.md Part III-D A2 fitted to the drafted / accepted counts, what it identifies,
and its prediction through ``predict_structured``."""

from __future__ import annotations

import numpy as np
import pytest

from polyspec.cli import main
from polyspec_theory.core.config import Cascade
from polyspec_theory.structures.schedule import ConfidenceLaw
from polyspec_theory.structures.schedule_models import confidence_round
from polyspec_theory.structures.structured import predict_structured
from tests.validation.test_engines import sample
from validation import formats
from validation.formats.engine import acceptance_report


def _cascade(v):
    rep = v["representative"]
    return Cascade.from_config({
        "models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": 0.1}],
        "acceptance": [rep["acceptance"]], "thresholds": [v["cap"]],
        "schedules": [rep["schedule"]]})


def test_llamacpp_varying_drafts_are_modelled_as_the_cutoff():
    rep = acceptance_report(formats.open(sample("llamacpp_speculative_pr2926_cpu.txt")).data)
    assert rep["best"] is None and any("varies by round" in w for w in rep["warnings"])
    v = rep["variable_length"]
    n, drafted, accepted, cap = 129 - 47 - 1, 132, 47, 8  # printed: n_predict, n_accept, ...
    assert (v["rounds"], v["cap"]) == (n, cap)
    # the moment equations, solved independently here: sum_{g<=8} q^g = 132/81 etc.
    assert sum(v["q"] ** g for g in range(1, cap + 1)) == pytest.approx(drafted / n, rel=1e-12)
    assert sum(v["r"] ** g for g in range(1, cap + 1)) == pytest.approx(accepted / n, rel=1e-12)
    # the representative law, through the A2 round and the structured P1, reproduces them
    sp = predict_structured(_cascade(v))
    assert sp.pairs[0]["mean_block"] == pytest.approx(drafted / n, rel=1e-9)
    assert sp.pairs[0]["mean_emitted"] - 1 == pytest.approx(accepted / n, rel=1e-9)
    assert sp.pairs[0]["draft_forwards"] == pytest.approx(v["drafter_forwards_per_round"])
    # independent check on the printed log: the draft model's 214 eval runs are its forwards
    # (drafted tokens + the forward that found the low confidence): 81 x 2.606 = 211
    assert abs(v["drafter_forwards_per_round"] * n / 214 - 1) < 0.03


def test_only_q_and_r_are_identified():
    # two different joint laws with the same (q, r) at their own cut-offs predict the same
    # speedup: the totals cannot tell them apart
    rep = acceptance_report(formats.open(sample("llamacpp_speculative_pr2926_cpu.txt")).data,
                            eta=0.7)
    v = rep["variable_length"]
    assert v["representative"]["schedule"]["eta"] == 0.7
    s1 = predict_structured(_cascade(v)).speedup
    from scipy import optimize, stats

    q, r = v["q"], v["r"]
    # another law: C ~ Beta(2, 3), cut-off eta2 with P(C >= eta2) = q, logistic slope 2
    eta2 = float(stats.beta.isf(q, 2.0, 3.0))

    def gap(b0):
        return ConfidenceLaw([2.0, 3.0], [b0, 2.0]).joint(eta2) - r

    b0 = optimize.brentq(gap, -30, 30, xtol=1e-14)
    law2 = ConfidenceLaw([2.0, 3.0], [b0, 2.0])
    rd = confidence_round(law2, eta2, v["cap"])
    assert rd.q == pytest.approx(q, rel=1e-9) and rd.r == pytest.approx(r, rel=1e-9)
    v2 = dict(v, representative={"acceptance": law2.to_config(), "schedule": {
        "kind": "confidence", "eta": eta2, "max": v["cap"]}})
    assert predict_structured(_cascade(v2)).speedup == pytest.approx(s1, rel=1e-8)


def test_recovers_a_known_cutoff_from_simulated_totals():
    rng = np.random.default_rng(5)
    q, r, cap, n = 0.7, 0.45, 6, 20000
    drafted = accepted = 0
    for _ in range(n):  # A2: each position stops (1 - q), accepts (r) or rejects (q - r)
        g, a, alive = 0, 0, True
        while g < cap:
            u = rng.random()
            if u >= q:
                break
            g += 1
            if alive and u < r:
                a += 1
            else:
                alive = False
        drafted += g
        accepted += a
    text = (f"n_draft   = {cap}\nn_predict = {n + accepted + 1}\nn_drafted = {drafted}\n"
            f"n_accept  = {accepted}\n")
    v = acceptance_report(formats.parse(text, "llamacpp-speculative").data)["variable_length"]
    assert v["q"] == pytest.approx(q, abs=0.01) and v["r"] == pytest.approx(r, abs=0.01)


def test_server_short_drafts_use_the_histogram_mle():
    line = ("0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     100     100, "
            "#gen drafts =    100, #acc drafts =    60, #gen tokens =    200, #acc tokens =    "
            "100, #mean acc len = 2.00, #acc rate/pos = (0.600, 0.300, 0.100), dur(b,g,a) = "
            "0.005, 325.555, 0.114 ms\n")
    rep = acceptance_report(formats.parse(line, "llamacpp-server").data)
    assert rep["best"] is None and any("draft slots were not drafted" in w
                                       for w in rep["warnings"])
    v = rep["variable_length"]
    # histogram of A: 40, 30, 20, 10 (from the exact per-position counts 60, 30, 10)
    assert v["r"] == pytest.approx(100 / (100 + 90), rel=1e-12)
    assert sum(v["q"] ** g for g in (1, 2, 3)) == pytest.approx(2.0, rel=1e-12)
    assert "maximum likelihood" in v["method"]


def test_cli_fit_prints_the_cutoff_and_rejects_bad_eta(capsys):
    path = str(sample("llamacpp_speculative_pr2926_cpu.txt"))
    assert main(["fit", path, "--eta", "0.75"]) == 0
    out = capsys.readouterr().out
    assert "confidence cut-off" in out and '"eta": 0.75' in out and "identified" in out
    assert main(["fit", path, "--eta", "1.0"]) == 2
    assert "--eta" in capsys.readouterr().err
