"""``polyspec forecast --traces`` on PipeSpec folders whose every cost and agreement is known
(tests/_pipespec_synth.py writes them from the decoder's rules), held against a computation
by hand: what the forecast MUST print, derived from its documented rules, not from its code.

The rules (validation/gpu_traces/forecast.py's docstring, docs/theory.md R1):
* the replay is PipeSpec's synchronous round on the agreements the other runs revealed;
* a drafter's step is the mean over runs of each run's mean single-token step, its interval
  +-1.96 x the run-to-run sd of those means; the first step after a reset adds the extra
  of such steps over that mean;
* T(1) is the measured 1-token verify call; T(m >= 2) the least-squares line in K through the
  fully accepting calls of >= 3 lookaheads; a rejecting call adds the extra a rejecting call
  costs over a fully accepting one OF THE SAME LENGTH;
* the per-prompt overhead is the unlogged time less the per-round part (the slope of a
  prompt's unlogged time on its rounds), each counted once; a third model adds half the
  unlogged time of its runs without the target (interval: none to all of it);
* the seed spread that widens interval95 is the standard error of the mean over the seeds.

Deterministic: the folders are built from fixed seeds and every position the forecast
replays is revealed by some run (asserted), so the replay draws nothing and the
forecast equals the hand computation to rounding (rel 1e-9)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests._pipespec_synth import (
    Costs,
    chain_file,
    greedy_file,
    play,
    prompt_time,
    runs_of_agreement,
)
from tests.cli_checks import run_checked

S, M, T = "Tiny-1B", "Mid-3B", "Big-8B"
RUN_KS = (2, 3, 5, 6)
K = 4  # forecast: not among the runs
# one draft step per run, smallest where a run resets its drafter most (so that the first
# step after a reset costs no more than the mean step: no reset extra)
DRAFT = {2: 0.015, 3: 0.013, 5: 0.012, 6: 0.010}
COSTS = dict(t1=0.030, a=0.036, b=0.002, reject=0.004, per_round=0.0015, overhead=0.25)
N_TOK = (120, 150, 90, 200, 130, 110)
AR_STEP, AR_PREFILL = 0.028, 0.3


def _prompts(seed=7, mean_run=3.0):
    rng = np.random.default_rng(seed)
    return [(i, runs_of_agreement(rng, n + 300, mean_run), n) for i, n in enumerate(N_TOK)]


def _forecast(capsys, folder, models, k=K):
    rc, _, err, data = run_checked(capsys, ["forecast", "--traces", folder, "--models",
                                            ",".join(models), "--thresholds", k - 1, "--json"])
    assert rc == 0, err
    return data


def _baseline_step(prompts):
    return sum(AR_PREFILL + AR_STEP * (n - 1) for *_, n in prompts) / sum(N_TOK)


def test_two_model_forecast_equals_the_replay_by_hand(capsys, tmp_path):
    prompts = _prompts()
    played = {k: chain_file(tmp_path, (S, T), k, prompts, Costs(draft=d, **COSTS))
              for k, d in DRAFT.items()}
    greedy_file(tmp_path, T, [(i, n) for i, _, n in prompts], AR_STEP, AR_PREFILL)
    # preconditions of the exact comparison: every position the K = 4 replay looks at was
    # revealed by a run, and no reset extra (the first steps after a reset are not dearer)
    for i, d, n in prompts:
        seen = set().union(*(played[k][i][1] for k in RUN_KS))
        assert play(d, K, n)[1] <= seen
    resets = {k: sum(sum(a.tokens < k for a in r[:-1]) for r, _ in played[k].values())
              for k in RUN_KS}
    step = float(np.mean(list(DRAFT.values())))
    assert sum(resets[k] * DRAFT[k] for k in RUN_KS) / sum(resets.values()) <= step

    sd = float(np.std(list(DRAFT.values()), ddof=1))

    def per_token(draft):
        c = Costs(draft=draft, **COSTS)
        return sum(prompt_time(play(d, K, n)[0], c) for _, d, n in prompts) / sum(N_TOK)

    bt = _baseline_step(prompts)
    f = _forecast(capsys, tmp_path, (T, S))
    assert f["predicted_time_per_token_s"] == pytest.approx(per_token(step), rel=1e-9)
    assert f["speedup"] == pytest.approx(bt / per_token(step), rel=1e-9)
    # the cost interval: the draft step at +-1.96 run-to-run sd (nothing else is uncertain
    # here: >= 3 lookaheads give the verify line, two models one overhead)
    lo, hi = f["cost_interval"]
    assert lo == pytest.approx(bt / per_token(step + 1.96 * sd), rel=1e-9)
    assert hi == pytest.approx(bt / per_token(step - 1.96 * sd), rel=1e-9)
    assert f["interval95"][0] <= lo and f["interval95"][1] >= hi


def test_rejecting_calls_cost_their_extra_whatever_the_lookahead_mix(capsys, tmp_path):
    """The extra of a rejecting call is the same 4 ms in every run; runs at small lookaheads
    reject more and have cheaper calls, so pooling the rejecting and the accepting calls of
    different lengths would mistake T(K)'s slope (here 6 ms per token) for a rejection
    cost: the forecast must still equal the replay by hand."""
    prompts = _prompts()
    for k, d in DRAFT.items():
        chain_file(tmp_path, (S, T), k, prompts, Costs(draft=d, **{**COSTS, "b": 0.006}))
    greedy_file(tmp_path, T, [(i, n) for i, _, n in prompts], AR_STEP, AR_PREFILL)
    f = _forecast(capsys, tmp_path, (T, S))
    c = Costs(draft=float(np.mean(list(DRAFT.values()))), **{**COSTS, "b": 0.006})
    exact = sum(prompt_time(play(d, K, n)[0], c) for _, d, n in prompts) / sum(N_TOK)
    assert f["predicted_time_per_token_s"] == pytest.approx(exact, rel=1e-9)


def _always(n):
    return [True] * (n + 300)


def test_a_third_model_adds_half_its_runs_overhead(capsys, tmp_path):
    """70B <- 8B <- 1B-like chain: the bottom pair's runs (no target) have 0.4 s of unlogged
    time per prompt; the forecast's point adds half of it, its interval none to all of it.
    Every drafter agrees everywhere (a deterministic replay), so the only difference between
    the point and the ends of the cost interval is that overhead: P prompts x 0.2 s over N
    tokens each way."""
    prompts = [(i, _always(n), n) for i, n in enumerate(N_TOK)]
    low_pair = dict(t1=0.012, a=0.014, b=0.001, overhead=0.4)
    top_pair = dict(t1=0.030, a=0.036, b=0.002, overhead=0.25)
    for k in RUN_KS:
        chain_file(tmp_path, (S, M), k, prompts, Costs(draft=0.005, **low_pair))
        chain_file(tmp_path, (M, T), k, prompts, Costs(draft=0.012, **top_pair))
    greedy_file(tmp_path, T, [(i, n) for i, _, n in prompts], AR_STEP, AR_PREFILL)
    f = _forecast(capsys, tmp_path, (T, M, S))
    bt = _baseline_step(prompts)
    t_point = f["predicted_time_per_token_s"]
    t_fast, t_slow = (bt / x for x in reversed(f["cost_interval"]))
    half = 0.5 * 0.4 * len(N_TOK) / sum(N_TOK)
    assert t_point - t_fast == pytest.approx(half, rel=1e-6)
    assert t_slow - t_point == pytest.approx(half, rel=1e-6)


def test_seed_spread_is_the_standard_error_of_the_mean(tmp_path):
    """The replay draws the agreements no run revealed (here: the whole bottom pair of a
    three-model chain) from per-prompt laws, seed by seed; interval95 is widened by the seed
    spread of the point, which averages ``SEEDS`` seeds: the spread must be the standard
    error of that mean, not one seed's sd.

    Check: R = 30 forecasts of the same folder that differ only in which replay worlds the
    prompts get (the baseline's prompt order is permuted; the data, laws and costs are
    unchanged). With costs known exactly the cost interval is one point, the replay at half
    the seeds, so ``point - half`` has sd = SE(6 seeds) / sqrt(1) (half of the mean of the
    other three minus the mean of the first three: sd sqrt(2 sigma^2 / 3) / 2 = sigma / sqrt(6)).
    Hence sum (point - half)^2 / sum se^2 ~ chi2_30 / 30 (mean 1) when se is the standard
    error, ~ 1/6 of that when it is one seed's sd. Threshold 0.4: a correct se fails when
    chi2_30 / 30 < 0.4 (with the se's own 5-df noise averaged over 30 forecasts), probability
    < 1e-3; the one-seed sd passes only when chi2_30 / 30 > 2.4, probability < 1e-4."""
    from validation.analysis.pipespec_forecast import SEEDS, forecast_chain
    from validation.formats.pipespec import read_pipespec_dir

    rng = np.random.default_rng(11)
    n_tok = [60] * 12
    low = [(i, runs_of_agreement(rng, n + 300, 2.0), n) for i, n in enumerate(n_tok)]
    top = [(i, _always(n), n) for i, n in enumerate(n_tok)]
    for k in RUN_KS:
        # no unlogged time in the bottom pair's runs: a third model adds no overhead, so the
        # cost interval is the replay at half the seeds with the point's own costs
        chain_file(tmp_path, (S, M), k, low, Costs(draft=0.005, t1=0.012, a=0.014, b=0.001))
        chain_file(tmp_path, (M, T), k, top, Costs(draft=0.012, t1=0.030, a=0.036, b=0.002,
                                                   overhead=0.25))
    greedy_file(tmp_path, T, [(i, n) for i, n in enumerate(n_tok)], AR_STEP, AR_PREFILL)
    base_path = tmp_path / f"greedy_{T}.json"
    raw = json.loads(base_path.read_text())
    num = den = 0.0
    for r in range(30):
        perm = np.random.default_rng(100 + r).permutation(len(raw["results"]))
        base_path.write_text(json.dumps({**raw, "results": [raw["results"][j] for j in perm]}))
        f = forecast_chain(read_pipespec_dir(tmp_path), (S, M, T), K, model_error=None)
        sp, (half, half2), (lo95, hi95) = f["speedup"], f["cost_interval"], f["interval95"]
        assert half == pytest.approx(half2, rel=1e-12)
        # interval95 = [min(sp, half) (1 - 1.96 se/sp), max(sp, half) (1 + 1.96 se/sp)]
        se = sp * (hi95 / max(sp, half) - 1) / 1.96
        assert se == pytest.approx(sp * (1 - lo95 / min(sp, half)) / 1.96, rel=1e-9)
        num += (sp - half) ** 2
        den += se ** 2
    assert SEEDS == 6
    assert num / den > 0.4, (num, den)
    assert math.isfinite(num / den) and num / den < 3.0, (num, den)
