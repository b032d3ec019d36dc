"""Engine parsers (validation.formats) on the real engine outputs in tests/fixtures/engine-samples
and on variants written here for the edge cases (cumulative vs per-interval counters, 2-3
decimal rounding, the three SGLang key schemas, Prometheus text and JSON, trtllm-bench).

Expected values are computed here from the numbers printed in each sample (independent
arithmetic, not the parser): e.g. vLLM V0 rounds = draft tokens / k and accepted prefix =
emitted - rounds; vLLM V1 rounds = Drafted / gamma.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.errors import PolyspecInputError
from tests._samples import SAMPLES, sample
from validation import formats
from validation.formats.engine import acceptance_report
from validation.formats.engine_common import survival_from_rates
from validation.formats.vllm_sweep import load_sweep, sweep_runs

# one entry per shared sample: format, rounds, accepted prefix, cap (None: varying),
# the engine's printed mean acceptance length(s) (None: not printed)
EXPECTED = {
    "vllm_v0_log_issue9539.txt": dict(
        format="vllm-v0-log", rounds=13311 // 3, accepted=10616 - 13311 // 3, cap=3,
        printed=None),
    "vllm_v1_log_issue19254.txt": dict(
        format="vllm-v1-log", rounds=387 // 3 + 1488 // 3, accepted=150 + 725, cap=3,
        printed=["2.16", "2.46"]),
    "vllm_v1_specdecode_py_pr24344.txt": dict(
        format="vllm-offline-example", rounds=2189 + 993, accepted=3187 + 3562, cap=None,
        printed=["2.46", "4.59"]),
    "vllm_per_request_metrics_llamaswap1032.json": dict(
        format="vllm-per-request", rounds=43, accepted=1 * 1 + 3 * 3, cap=3,
        printed=["1.2325581395348837"]),
    "sglang_log_issue11948.txt": dict(
        # intervals 2-5: 40 rounds each (token deltas 78, 72, 82, 72 at accept len 1.95,
        # 1.80, 2.05, 1.80); interval 1 includes tokens from before the log
        format="sglang-log", rounds=160, accepted=(186 - 108) + (258 - 186) + (340 - 258)
        + (412 - 340) - 160, cap=3, printed=["1.95", "1.80", "2.05", "1.80"]),
    "sglang_meta_info_pr33518.json": dict(
        format="sglang-meta", rounds=43, accepted=63, cap=5, printed=["2.4651162790697674"]),
    "llamacpp_speculative_issue3649_v100.txt": dict(
        # n_predict - n_accept = 53 target samplings; the first follows the prompt
        format="llamacpp-speculative", rounds=261 - 208 - 1, accepted=208, cap=5, printed=None),
    "llamacpp_speculative_pr2926_cpu.txt": dict(
        format="llamacpp-speculative", rounds=129 - 47 - 1, accepted=47, cap=None, printed=None),
    "llamacpp_server_pr24536.txt": dict(
        format="llamacpp-server", rounds=87, accepted=167, cap=3, printed=["2.92"]),
}
FAILING = {
    "vllm_v1_prometheus_ui_pr24049.txt": ("prometheus-ui", "num_accepted_tokens_total",
                                          "0, 1, 2"),
    "vllm_eagle_sweep_issue20780.txt": ("vllm-sweep", "rounds", "calibrate"),
}


def test_every_shared_sample_is_covered():
    files = {p.name for p in SAMPLES.iterdir() if p.name != "README.md"}
    assert files, f"no samples in {SAMPLES}"
    assert files == set(EXPECTED) | set(FAILING)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_sample_loads(name):
    exp = EXPECTED[name]
    text = sample(name).read_text()
    out = formats.open(sample(name)).data
    assert out.format == exp["format"]
    assert formats.detect(formats.Source(text=text.split("\n---\n", 1)[-1])).name == exp["format"]
    pooled = out.pooled
    assert pooled.rounds == exp["rounds"]
    assert pooled.accepted == exp["accepted"]
    rep = acceptance_report(out)
    assert rep["cap"] == exp["cap"]
    assert rep["mean_acceptance_length"] == pytest.approx(1 + exp["accepted"] / exp["rounds"],
                                                          rel=1e-12)
    # every figure the engine printed is reproduced at its printed precision
    assert out.checks and all(c["agree"] for c in out.checks), out.checks
    mal = [c for c in out.checks if c["figure"].startswith("mean acceptance length")]
    if exp["printed"] is None:
        assert not mal
    else:
        assert [c["engine"] for c in mal] == exp["printed"]
        for c in mal:
            dec = len(c["engine"].split(".")[1])
            assert round(c["ours"], dec) == pytest.approx(float(c["engine"]), abs=1e-12)
    if exp["cap"] is None and name.startswith("llamacpp"):
        assert rep["best"] is None and any("varies by round" in w for w in rep["warnings"])
    elif exp["cap"] is not None:
        assert rep["best"] is not None and rep["laws"]


@pytest.mark.parametrize("name", sorted(FAILING))
def test_shared_sample_fails_with_one_line_naming_what_is_missing(name):
    fmt, field, hint = FAILING[name]
    text = sample(name).read_text()
    assert formats.detect(formats.Source(text=text.split("\n---\n", 1)[-1])).name == fmt
    with pytest.raises(PolyspecInputError) as e:
        formats.fit_report(sample(name))
    msg = str(e.value)
    assert "\n" not in msg and field in msg and hint in msg


def test_v0_log_accepted_any_position_is_not_the_prefix():
    rep = acceptance_report(formats.open(sample("vllm_v0_log_issue9539.txt")).data)
    assert rep["accepted"] == 6179 and any("ANY position" in w for w in rep["warnings"])
    # system efficiency 0.598 = emitted / (rounds (k + 1)) is reproduced
    eff = next(c for c in rep["checks"] if c["figure"].startswith("system efficiency"))
    assert eff["ours"] == pytest.approx(10616 / (4437 * 4)) and eff["agree"]


def test_v1_log_per_interval_histograms_are_exact():
    out = formats.open(sample("vllm_v1_log_issue19254.txt")).data
    assert out.counters == "per-interval" and len(out.snapshots) == 2
    s1, s2 = out.snapshots
    # per-position rates x rounds, rounded, add up to Accepted exactly
    assert s1.counts.survival(3)[1:] * 129 == pytest.approx([70, 46, 34])
    assert s2.counts.survival(3)[1:] * 496 == pytest.approx([305, 230, 190])
    assert out.concurrency == 629
    rep = acceptance_report(out)
    assert any("not single-stream" in w for w in rep["warnings"])
    assert rep["histogram"] == [int(x) for x in
                                s1.counts.histogram(3) + s2.counts.histogram(3)]


def test_offline_printout_two_runs_and_snapshot_selection():
    out = formats.open(sample("vllm_v1_specdecode_py_pr24344.txt")).data
    assert [s.cap for s in out.snapshots] == [3, 5]
    run2 = acceptance_report(out.select(2))
    assert run2["rounds"] == 993 and run2["cap"] == 5
    assert any("5 draft slots not drafted" in w for w in run2["warnings"])
    assert run2["best"] is not None  # 5 of 4965 slots short: fitted with a warning
    with pytest.raises(PolyspecInputError, match="--snapshot"):
        out.select(3)


def test_sglang_log_skips_the_inconsistent_first_interval():
    out = formats.open(sample("sglang_log_issue11948.txt")).data
    assert [s.rounds for s in out.snapshots] == [40, 40, 40, 40]
    assert len(out.skipped) == 1 and "interval 1" in out.skipped[0]
    # gamma 3 from accept len / accept rate = 4 = gamma + 1 draft tokens incl. the root
    assert out.pooled.cap == 3
    # an explicit --gamma that contradicts the rates is reported
    out5 = formats.open(sample("sglang_log_issue11948.txt"), gamma=5).data
    assert any("disagrees" in w for w in out5.warnings)


def test_llamacpp_v100_timing_and_bench_rows():
    out = formats.open(sample("llamacpp_speculative_issue3649_v100.txt")).data
    assert out.timing["tokens_per_s"] == pytest.approx(261 / 2.967)
    assert [r["test"] for r in out.timing["llama_bench"]] == ["tg 128", "pp 1", "pp 2", "pp 3"]


def test_sweep_table_values():
    t = load_sweep(sample("vllm_eagle_sweep_issue20780.txt"))
    assert set(t.methods) == {"Eagle 1", "Eagle 3"}
    assert t.methods["Eagle 1"]["al"] == {2: 2.1, 3: 2.29, 4: 2.39, 5: 2.43, 6: 2.45, 7: 2.47}
    assert t.methods["Eagle 3"]["tpot"] == {2: 4.32, 3: 4.09, 4: 4.05, 5: 4.13, 6: 4.2,
                                            7: 4.29}
    assert set(t.vanilla.values()) == {7.07} and t.batch_size == 1
    assert t.engine_best == {"Eagle 1": 3, "Eagle 3": 4}
    assert t.al_resolution == pytest.approx(0.01) and t.tpot_resolution == pytest.approx(0.01)
    runs = sweep_runs(t, "EAGLE 3", [2, 7])
    assert [r.get("holdout", False) for r in runs["runs"]] == [False, True, True, True, True,
                                                              False]
    with pytest.raises(PolyspecInputError, match="--method"):
        sweep_runs(t, "medusa")
    with pytest.raises(PolyspecInputError, match="--fit-on"):
        sweep_runs(t, "EAGLE 1", [9])


# ------------------------------------------------------------------------------------------
# variants written here
# ------------------------------------------------------------------------------------------
V0_LINE = ("INFO 10-16 19:05:{s:02d} metrics.py:367] Speculative metrics: Draft acceptance rate: "
           "{rate:.3f}, System efficiency: {eff:.3f}, Number of speculative tokens: 3, Number of "
           "accepted tokens: {a}, Number of draft tokens: {d}, Number of emitted tokens: {e}.")


def _v0(rows):
    return "\n".join(V0_LINE.format(s=i, rate=a / d, eff=e / (d / 3 * 4), a=a, d=d, e=e)
                     for i, (a, d, e) in enumerate(rows))


def test_v0_cumulative_counters_are_differenced():
    rows = [(100, 300, 250), (400, 900, 700), (1000, 1800, 1500)]
    out = formats.parse(_v0(rows)).data
    assert out.counters == "cumulative"
    assert [s.rounds for s in out.snapshots] == [100, 200, 300]
    assert [s.accepted for s in out.snapshots] == [250 - 100, (700 - 250) - 200, (1500 - 700) - 300]
    assert out.pooled.rounds == 600 and out.pooled.accepted == 1500 - 600
    assert all(c["agree"] for c in out.checks)


def test_v0_counter_reset_starts_a_new_segment():
    rows = [(100, 300, 250), (400, 900, 700), (30, 60, 50)]
    out = formats.parse(_v0(rows)).data
    assert [s.rounds for s in out.snapshots] == [100, 200, 20]
    assert out.pooled.rounds == 320 and any("restart" in w for w in out.warnings)


V1_NEW = ("INFO 07-01 10:00:{s:02d} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: "
          "{mal}, Accepted throughput: 12.30 tokens/s, Drafted throughput: 30.00 tokens/s, "
          "Accepted: {a} tokens, Drafted: {d} tokens, Per-position acceptance rate: {rates}, "
          "Avg Draft acceptance rate: {rate:.1f}%")


def _v1_line(s, surv, n, gamma, decimals=3, drafted=None):
    a = int(sum(surv))
    d = n * gamma if drafted is None else drafted
    rates = ", ".join(f"{c / n:.{decimals}f}" for c in surv)
    return V1_NEW.format(s=s, mal=f"{1 + a / n:.2f}", a=a, d=d, rates=rates,
                         rate=100 * a / d)


def test_v1_log_newest_wording_per_interval_counters_are_summed():
    text = "\n".join([_v1_line(0, [700, 450, 250], 1000, 3), _v1_line(10, [80, 40, 10], 100, 3)])
    out = formats.parse(text).data
    assert out.format == "vllm-v1-log" and out.counters == "per-interval"
    assert out.pooled.rounds == 1100 and out.pooled.accepted == 1530
    assert list(out.pooled.counts.histogram(3)) == [300 + 20, 250 + 40, 200 + 30, 250 + 10]
    assert all(c["agree"] for c in out.checks)


def test_v1_log_without_positions_needs_gamma():
    text = ("INFO [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 50.0%, "
            "Accepted: 300 tokens, Drafted: 600 tokens")
    with pytest.raises(PolyspecInputError, match="--gamma"):
        formats.parse(text)
    out = formats.parse(text, gamma=4).data
    assert out.pooled.rounds == 150 and out.pooled.cap == 4 and out.pooled.counts is None
    rep = acceptance_report(out)
    assert rep["laws"][0]["method"].startswith("moments") and rep["laws"][0]["loglik"] is None
    assert rep["best"]["alpha"] > 0


def test_v1_log_short_drafts_rounds_from_the_mean_length():
    # 200 rounds of gamma 3 but 590 drafted tokens: rounds from 1 + 300/N = 2.50
    line = _v1_line(0, [150, 100, 50], 200, 3, drafted=590)
    out = formats.parse(line).data
    assert out.pooled.rounds == 200 and out.pooled.short_slots == 10
    rep = acceptance_report(out)
    assert rep["best"] is not None and any("not drafted" in w for w in rep["warnings"])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
       st.sampled_from([2, 3]))
def test_survival_reconstruction_from_rounded_rates(n, hazards, decimals):
    """Counts c_k = #{A >= k} printed as rates c_k / n with 2-3 decimals: the reconstruction
    lies in every rounding interval, is non-increasing and adds up to the accepted total; it is
    the truth whenever the rounding cannot hide a count (half a unit x n < 1/2)."""
    surv, alive = [], n
    for h in hazards:
        alive = int(math.floor(alive * h))
        surv.append(alive)
    rates = [float(f"{c / n:.{decimals}f}") for c in surv]
    half = 0.5 * 10.0 ** -decimals
    c = survival_from_rates(rates, n, sum(surv), [half] * len(rates))
    assert int(c.sum()) == sum(surv)
    assert (np.diff(c) <= 0).all()
    assert ((c >= (np.array(rates) - half) * n - 1e-6) & (c <= (np.array(rates) + half) * n
                                                           + 1e-6)).all()
    if half * n < 0.5:
        assert list(c) == surv


def test_survival_reconstruction_rejects_inconsistent_totals():
    with pytest.raises(PolyspecInputError, match="add up"):
        survival_from_rates([0.50, 0.25], 100, 90, [0.005, 0.005])
    with pytest.raises(PolyspecInputError, match="increase"):
        survival_from_rates([0.2, 0.5], 100, None, [0.0, 0.0])


HIST = [5, 4, 3, 2, 1]  # 15 rounds, cap 4, accepted 0*5 + 4 + 6 + 6 + 4 = 20
SCHEMAS = {
    "<=0.5.10": {"spec_accept_token_num": 20, "spec_draft_token_num": 60,
                 "spec_accept_histogram": HIST},
    "0.5.11": {"spec_accepted_drafts": 20, "spec_proposed_drafts": 60,
               "spec_accepted_drafts_histogram": HIST},
    ">=0.5.12": {"spec_num_correct_drafts": 20, "spec_num_proposed_drafts": 60,
                 "spec_correct_drafts_histogram": HIST},
}


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_sglang_three_key_schemas_give_the_same_data(schema):
    import json

    meta = {"spec_verify_ct": 15, "spec_accept_length": 1 + 20 / 15, **SCHEMAS[schema]}
    out = formats.parse(json.dumps({"text": "x", "meta_info": meta})).data
    assert out.format == "sglang-meta"
    s = out.pooled
    assert (s.rounds, s.accepted, s.cap) == (15, 20, 4)
    assert list(s.counts.histogram(4)) == HIST
    assert all(c["agree"] for c in out.checks)
    # without the histogram: totals only, cap = proposed / verify_ct
    meta2 = {k: v for k, v in meta.items() if "histogram" not in k}
    out2 = formats.parse(json.dumps(meta2)).data
    assert out2.pooled.cap == 4 and out2.pooled.counts is None


def test_sglang_meta_jsonl_requests_pool_and_tree_drafting_warns():
    import json

    a = {"meta_info": {"spec_verify_ct": 10, "spec_num_correct_drafts": 17,
                       "spec_num_proposed_drafts": 40,
                       "spec_correct_drafts_histogram": [3, 2, 2, 1, 2]}}
    b = {"meta_info": {"spec_verify_ct": 5, "spec_num_correct_drafts": 7,
                       "spec_num_proposed_drafts": 40,  # 8 per round, path depth 4: a tree
                       "spec_correct_drafts_histogram": [2, 1, 1, 0, 1]}}
    out = formats.parse(json.dumps(a) + "\n" + json.dumps(b) + "\n").data
    assert out.counters == "per-request" and out.pooled.rounds == 15
    assert list(out.pooled.counts.histogram(4)) == [5, 3, 3, 1, 3]
    assert any("tree drafting" in w for w in out.warnings)
    bad = {"meta_info": {"spec_verify_ct": 5, "spec_num_correct_drafts": 9,
                         "spec_correct_drafts_histogram": [2, 1, 1, 0, 1]}}
    with pytest.raises(PolyspecInputError, match="spec_correct_drafts_histogram"):
        formats.parse(json.dumps(bad))
    with pytest.raises(PolyspecInputError, match="spec_num_correct_drafts"):
        formats.parse(json.dumps({"spec_verify_ct": 4}))


def test_sglang_log_newer_rate_convention():
    # accept rate = (accept len - 1) / gamma with gamma = 4; 40 rounds per interval emit
    # 40 + 60 and 40 + 50 tokens after a prefill of 20 prompt tokens
    lines = ["[TP0] Prefill batch. #new-seq: 1, #new-token: 20, #cached-token: 0,",
             "[TP0] Decode batch. #running-req: 1, #token: 120, accept len: 2.50, "
             "accept rate: 0.38, gen throughput (token/s): 150.0,",
             "[TP0] Decode batch. #running-req: 1, #token: 210, accept len: 2.25, "
             "accept rate: 0.31, gen throughput (token/s): 140.0,"]
    out = formats.parse("\n".join(lines)).data
    assert [s.rounds for s in out.snapshots] == [40, 40]
    assert out.pooled.cap == 4 and out.pooled.accepted == 60 + 50
    assert out.timing["gen_throughput_tokens_per_s"] == [150.0, 140.0]
    # two running requests: the token count no longer gives the rounds
    busy = "\n".join(lines).replace("#running-req: 1, #token: 210", "#running-req: 2, #token: 210")
    out2 = formats.parse(busy).data
    assert [s.rounds for s in out2.snapshots] == [40]
    assert any("2 running requests" in w for w in out2.warnings)


def _sg_decode(token, al="2.00", running=1):
    return (f"[TP0] Decode batch. #running-req: {running}, #token: {token}, accept len: {al}, "
            "gen throughput (token/s): 100.0,")


def test_sglang_log_interval_after_a_cached_prefix_is_not_counted():
    # 20 new + 100 cached prompt tokens: whether #token holds the cached prefix is not printed
    # (220 would be 40 rounds at 2.50 if it does, 80 if it does not): that interval is skipped,
    # the next one (from the previous decode line) is 40 rounds (issue 39: 2.25 vs 2.5)
    lines = ["[TP0] Prefill batch. #new-seq: 1, #new-token: 20, #cached-token: 100, "
             "#running-req: 0,", _sg_decode(220, "2.50"), _sg_decode(320, "2.50")]
    out = formats.parse("\n".join(lines), gamma=3).data
    assert [s.rounds for s in out.snapshots] == [40]
    assert out.pooled.accepted == 60
    assert any("100 cached tokens" in x for x in out.skipped)


def test_sglang_log_prefill_between_decodes_is_a_request_switch():
    # request 1 decodes to #token 340; request 2 (300 new + 100 cached prompt tokens) starts
    # in the next interval: that interval's count mixes the two requests and is skipped
    # (#token - 340 = 140 would pass for 70 rounds at 2.00); the one after is 40 rounds
    lines = ["[TP0] Prefill batch. #new-seq: 1, #new-token: 20, #cached-token: 0, "
             "#running-req: 0,", _sg_decode(100), _sg_decode(180), _sg_decode(260),
             "[TP0] Prefill batch. #new-seq: 1, #new-token: 300, #cached-token: 100, "
             "#running-req: 0,", _sg_decode(480), _sg_decode(560)]
    out = formats.parse("\n".join(lines), gamma=3).data
    assert [s.rounds for s in out.snapshots] == [40, 40, 40, 40]
    assert [s.label for s in out.snapshots] == ["interval 1", "interval 2", "interval 3",
                                                "interval 5"]
    assert any("interval 4: a request ended" in x for x in out.skipped)
    assert out.pooled.accepted == 4 * 40


PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d0}
vllm:spec_decode_num_drafts_total{{engine="1",model_name="m"}} {d1}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t0}
vllm:spec_decode_num_draft_tokens_total{{engine="1",model_name="m"}} {t1}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a0}
vllm:spec_decode_num_accepted_tokens_total{{engine="1",model_name="m"}} {a1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p00}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p01}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",model_name="m",position="0"}} {p10}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",model_name="m",position="1"}} {p11}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
"""


def _prom(d0, d1, p00, p01, p10, p11):
    return PROM.format(d0=f"{d0}.0", d1=float(d1), t0=2 * d0, t1=2 * d1, a0=p00 + p01,
                       a1=p10 + p11, p00=p00, p01=p01, p10=p10, p11=p11)


def test_prometheus_text_engines_summed_and_scrapes_differenced():
    one = _prom(100, 50, 60, 30, 20, 10)
    out = formats.parse(one).data
    assert out.format == "prometheus-text" and out.counters == "single"
    assert out.pooled.rounds == 150 and out.pooled.accepted == 120
    assert list(out.pooled.counts.histogram(2)) == [150 - 80, 80 - 40, 40]
    assert any("2 label sets" in w for w in out.warnings)
    two = one + _prom(300, 100, 200, 120, 40, 25)
    out2 = formats.parse(two).data
    assert out2.counters == "cumulative"
    assert [s.rounds for s in out2.snapshots] == [150, 250]
    assert out2.pooled.rounds == 400 and out2.pooled.accepted == 385
    assert list(out2.snapshots[1].counts.histogram(2)) == [250 - 160, 160 - 105, 105]


def test_prometheus_text_two_models_and_missing_counters():
    text = _prom(10, 10, 5, 2, 5, 2).replace('engine="1",model_name="m"',
                                             'engine="1",model_name="other"')
    with pytest.raises(PolyspecInputError, match="model_name"):
        formats.parse(text)
    only = "\n".join(ln for ln in _prom(10, 10, 5, 2, 5, 2).splitlines()
                     if "accepted" not in ln)
    with pytest.raises(PolyspecInputError, match="num_accepted_tokens_total"):
        formats.parse(only)


def test_vllm_json_stats_and_get_metrics():
    import json

    stats = {"num_spec_tokens": 3, "num_drafts": 1500, "num_draft_tokens": 4500,
             "num_accepted_tokens": 1970, "num_accepted_tokens_per_pos": [1000, 630, 340]}
    out = formats.parse(json.dumps(stats)).data
    assert out.format == "vllm-json"
    assert list(out.pooled.counts.histogram(3)) == [500, 370, 290, 340]
    recs = [{"name": "vllm:num_requests_running", "value": 0.0},
            {"name": "vllm:spec_decode_num_drafts", "labels": {"engine": "0"}, "value": 1000},
            {"name": "vllm:spec_decode_num_drafts", "labels": {"engine": "1"}, "value": 500},
            {"name": "vllm:spec_decode_num_draft_tokens", "value": 4500},
            {"name": "vllm:spec_decode_num_accepted_tokens", "value": 1970},
            {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {"engine": "0"},
             "values": [700, 450, 250]},
            {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {"engine": "1"},
             "values": [300, 180, 90]}]
    out2 = formats.parse(json.dumps(recs)).data
    assert list(out2.pooled.counts.histogram(3)) == [500, 370, 290, 340]
    bad = dict(stats, num_accepted_tokens_per_pos=[1000, 630, 341])
    with pytest.raises(PolyspecInputError, match="adds up"):
        formats.parse(json.dumps(bad))


def test_vllm_per_request_jsonl_pools_histograms():
    import json

    def req(h):
        k = len(h) - 1
        acc = sum(i * c for i, c in enumerate(h))
        return {"metrics": {"speculative_decoding": {
            "mean_acceptance_length": 1 + acc / sum(h), "acceptance_histogram": h,
            "num_spec_steps": sum(h), "num_accepted_draft_tokens": acc,
            "num_draft_tokens": k * sum(h), "num_spec_tokens": k}}}

    text = json.dumps(req([3, 2, 1, 4])) + "\n" + json.dumps(req([1, 1, 1, 1])) + "\n"
    out = formats.parse(text).data
    assert out.counters == "per-request" and len(out.snapshots) == 2
    assert list(out.pooled.counts.histogram(3)) == [4, 3, 2, 5]
    assert all(c["agree"] for c in out.checks)


TRT = """===========================================================
= REQUEST DETAILS
===========================================================
Number of requests:             4
Number of concurrent requests:  1.0000
Average Input Length (tokens):  128.0000
Average Output Length (tokens): 100.0000
===========================================================
= DECODING STATISTICS (Eagle)
===========================================================

-- Number of Draft Tokens Details --------------------------------


[DT] MINIMUM: 120.00
[DT] MAXIMUM: 165.00
[DT] AVERAGE: 142.50
[DT] P50    : 141.00
-- Number of Accepted Draft Tokens Details --------------------------------

[ADT] MINIMUM: 40.00
[ADT] MAXIMUM: 60.00
[ADT] AVERAGE: 52.50
-- Acceptance Length Details --------------------------------

[AL] MINIMUM: 1.67
[AL] MAXIMUM: 2.50
[AL] AVERAGE: 2.12
"""


def test_trtllm_bench_report_variant():
    # 4 requests x 100 output tokens, 4 x 52.5 = 210 accepted: 190 iterations (incl. the 4
    # context steps), 142.5 x 4 / 190 = 3 draft tokens per iteration; rounds = 186
    out = formats.parse(TRT).data
    assert out.format == "trtllm-bench"
    s = out.pooled
    assert (s.rounds, s.accepted, s.cap) == (186, 210, 3)
    assert any("[AL] AVERAGE 2.12" in w for w in out.warnings)
    with pytest.raises(PolyspecInputError, match=r"\[ADT\] AVERAGE"):
        formats.parse(TRT.replace("[ADT] AVERAGE: 52.50", ""))


def test_llama_server_slot_line_only():
    line = ("slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 (  167 accepted /"
            "   259 generated), mean acceptance length =  2.92, acceptance rate per position "
            "= (0.805, 0.632, 0.483)")
    out = formats.parse(line).data
    assert out.format == "llamacpp-server" and out.pooled.rounds == 87
    assert all(c["agree"] for c in out.checks)


@pytest.mark.parametrize("text,field", [
    ("", "file"),
    ("hello world\n", "format"),
    ('{"a": 1}', "format"),
    ("n_draft = 5\nn_predict = 10\nn_drafted = 10\n", "n_accept"),
    ("n_draft = 5\nn_predict = 10\nn_drafted = 10\nn_accept = 9\n", "n_predict"),
])
def test_bad_inputs_one_line_errors(text, field):
    with pytest.raises(PolyspecInputError) as e:
        formats.parse(text)
    assert e.value.field == field and "\n" not in str(e.value)


def test_format_override_and_gamma_checks(tmp_path):
    with pytest.raises(PolyspecInputError, match="--format"):
        formats.parse("x", "nope")
    with pytest.raises(PolyspecInputError, match="--gamma"):
        formats.open(sample("vllm_v1_log_issue19254.txt"), gamma=4)
    with pytest.raises(PolyspecInputError, match="not found"):
        formats.open(tmp_path / "missing.txt")
    with pytest.raises(PolyspecInputError, match="directory"):
        formats.open(tmp_path)
    assert set(formats.names()) >= {"vllm-v0-log", "sglang-meta", "trtllm-bench"}


def test_report_and_sweep_reject_bad_input():
    with pytest.raises(PolyspecInputError) as e:
        acceptance_report({"rounds": 3})
    assert e.value.field == "output"
    with pytest.raises(PolyspecInputError) as e:
        sweep_runs("table", "EAGLE 1")
    assert e.value.field == "table"
    with pytest.raises(PolyspecInputError) as e:
        survival_from_rates([0.5, 1.5], 10)
    assert "1.5" in str(e.value)
    with pytest.raises(PolyspecInputError) as e:
        survival_from_rates([0.5, 0.2], 10, None, [0.005])
    assert e.value.field == "half_units"


# --- issue 27: inputs that must be refused with the reason, never merged or padded -----------
def _text(name):
    from validation.formats.engine_common import read_engine_text

    return read_engine_text(sample(name))[0]


def test_interleaved_engines_and_several_runs_are_refused():
    mixed = _text("vllm_v0_log_issue9539.txt") + "\n" + _text("vllm_v1_log_issue19254.txt")
    with pytest.raises(PolyspecInputError, match="several engine formats.*vllm-v0-log, "
                                                 "vllm-v1-log"):
        formats.parse(mixed)
    # --format reads one format's lines: the V1 intervals only
    v1 = formats.parse(mixed, "vllm-v1-log").data
    assert v1.pooled.rounds == formats.parse(_text("vllm_v1_log_issue19254.txt")
                                                   ).data.pooled.rounds
    two = _text("llamacpp_speculative_pr2926_cpu.txt") * 2
    with pytest.raises(PolyspecInputError, match="2 llama-speculative runs"):
        formats.parse(two)
    srv = _text("llamacpp_server_pr24536.txt")
    stat = next(ln for ln in srv.splitlines() if "#gen drafts" in ln)
    with pytest.raises(PolyspecInputError, match="2 llama-server statistics lines"):
        formats.parse(srv + "\n" + stat)


def test_impossible_or_unreadable_counts_are_refused_naming_the_field():
    srv = _text("llamacpp_server_pr24536.txt")
    cases = [
        (srv.replace("#gen drafts =     87", "#gen drafts =     0"), "#gen drafts.*is 0"),
        (srv.replace("#gen tokens =    259", "#gen tokens =    1e308"), "#gen tokens.*not a count"),
        (srv.replace("#gen tokens =    259", "#gen tokens =    150"), "exceed the 150 drafted"),
    ]
    for text, pat in cases:
        assert text != srv
        with pytest.raises(PolyspecInputError, match=pat):
            formats.parse(text, "llamacpp-server")
    pr = _text("vllm_per_request_metrics_llamaswap1032.json")
    for old, new, pat in (('"acceptance_histogram": [39, 1, 0, 3]',
                           '"acceptance_histogram": [39, 1, 3]', "must have 4 cells"),
                          ('"mean_acceptance_length": 1.2325581395348837',
                           '"mean_acceptance_length": "n/a"', "mean_acceptance_length.*finite"),
                          ('"mean_acceptance_length": 1.2325581395348837',
                           '"mean_acceptance_length": null', "mean_acceptance_length.*finite")):
        assert old in pr
        with pytest.raises(PolyspecInputError, match=pat):
            formats.parse(pr.replace(old, new))


def _sweep(**repl):
    from validation.formats.vllm_sweep import parse_sweep

    text = _text("vllm_eagle_sweep_issue20780.txt")
    for old, new in repl.values():
        assert old in text
        text = text.replace(old, new, 1)
    return parse_sweep(text)


def test_sweep_units_cells_and_duplicate_rows():
    assert _sweep().time_unit == "ms"
    assert _sweep(u=("TPOT ms", "TPOT msec")).time_unit == "ms"
    assert _sweep(u=("TPOT ms", "TPOT s")).time_unit == "s"
    for head, pat in (("TPOT tokens/s", "throughput"), ("TPOT", "missing"),
                      ("TPOT furlongs", "'furlongs'")):
        with pytest.raises(PolyspecInputError, match=pat):
            _sweep(u=("TPOT ms", head))
    for old, new, pat in (("K=3 | 7.07 | 4.29 |", "K=3 | 7.07 | N/A |", "not a number"),
                          ("K=3 | 7.07 | 4.29 |", "K=3 | 7.07 |  |", "not a number"),
                          ("K=3 | 7.07 | 4.29 |", "K=3 | 7.07 | inf |", "finite"),
                          ("3 | 2.29 | 2.79", "2 | 2.29 | 2.79", "K = 2 appears twice"),
                          ("K=3 | 7.07", "K=2 | 7.07", "K=2 appears twice")):
        with pytest.raises(PolyspecInputError, match=pat):
            _sweep(c=(old, new))
    short = _text("vllm_eagle_sweep_issue20780.txt").replace(
        "K=4 | 7.07 | 4.48 | 4.05 |   | 1.567627494 | 1.10617284", "K=4 | 7.07")
    from validation.formats.vllm_sweep import parse_sweep

    with pytest.raises(PolyspecInputError, match="line 16: the row has 2 cells"):
        parse_sweep(short)
