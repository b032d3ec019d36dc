"""Engine adapters parse the committed fixtures exactly (fixtures written from vLLM's and
SGLang's documented counter / meta_info names)."""

import json
from pathlib import Path

import numpy as np
import pytest

from polyspec_theory._input import PolyspecInputError
from polyspec_theory.laws import IIDGeometric, fit_laws
from validation.adapters import (
    VllmSpecDecodeCounters,
    load_sglang_requests,
    load_vllm_metrics,
    parse_prometheus_text,
    sglang_acceptance_counts,
    sglang_iid_alpha,
    sglang_stats_from_meta,
    vllm_counters_from_json,
    vllm_counters_from_prometheus,
)

FIX = Path(__file__).parent / "fixtures" / "engines"

# Both vLLM fixtures hold two engines: (1000 drafts, per-pos 700/450/250, 1400 accepted,
# 3000 drafted) and (500, 300/180/90, 570, 1500); their sums are what the adapter returns.
TOTAL = dict(num_drafts=1500, num_draft_tokens=4500, num_accepted_tokens=1970,
             num_accepted_tokens_per_pos=(1000, 630, 340))
HIST = [1500 - 1000, 1000 - 630, 630 - 340, 340]  # #{A = k}, k = 0..3


def _check_total(c: VllmSpecDecodeCounters):
    for k, v in TOTAL.items():
        assert getattr(c, k) == v, k
    assert c.num_spec_tokens == 3
    assert c.notes == ()


def test_prometheus_text_sums_engines_and_skips_other_metrics():
    c = load_vllm_metrics(FIX / "vllm_metrics.prom")
    _check_total(c)
    # the bonus token is counted in vLLM's mean acceptance length
    assert c.mean_acceptance_length == pytest.approx(1 + 1970 / 1500, rel=1e-15)
    assert c.draft_acceptance_rate == pytest.approx(1970 / 4500, rel=1e-15)
    np.testing.assert_allclose(c.survival(), [1, 1000 / 1500, 630 / 1500, 340 / 1500])


def test_prometheus_label_filter_selects_one_engine():
    text = (FIX / "vllm_metrics.prom").read_text()
    c = vllm_counters_from_prometheus(text, match={"engine": "1"})
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (500, 1500, 570)
    assert c.num_accepted_tokens_per_pos == (300, 180, 90)


def test_json_forms_agree_with_prometheus():
    _check_total(load_vllm_metrics(FIX / "vllm_stats.json"))
    _check_total(load_vllm_metrics(FIX / "vllm_get_metrics.json"))
    prefixed = {f"vllm:spec_decode_{k}_total": v for k, v in TOTAL.items()}
    _check_total(vllm_counters_from_json(prefixed))


def test_vllm_histogram_is_exact_and_feeds_the_fits():
    d = load_vllm_metrics(FIX / "vllm_metrics.prom").to_acceptance_counts()
    np.testing.assert_array_equal(d.histogram(3), HIST)
    assert d.n_rounds == 1500
    assert d.mean_emitted() == pytest.approx(1 + 1970 / 1500, rel=1e-14)
    np.testing.assert_allclose(d.survival(), [1, 1000 / 1500, 630 / 1500, 340 / 1500])
    fits = {f.law.family: f for f in fit_laws(d)}
    # positional hazards are the ratios of consecutive per-position counters
    np.testing.assert_allclose(fits["positional"].law.alphas,
                               [1000 / 1500, 630 / 1000, 340 / 630], rtol=1e-14)
    # iid MLE: accepted / (accepted + rounds that stopped before the cap)
    assert fits["iid"].law.alpha == pytest.approx(1970 / (1970 + 1500 - 340), rel=1e-14)
    assert fits["iid"].n == 1500


def test_two_models_need_a_filter():
    text = (FIX / "vllm_two_models.prom").read_text()
    with pytest.raises(PolyspecInputError, match="model_name: samples of several models"):
        vllm_counters_from_prometheus(text)
    b = vllm_counters_from_prometheus(text, match={"model_name": "model-b"})
    assert (b.num_drafts, b.num_accepted_tokens, b.num_accepted_tokens_per_pos) == (20, 30,
                                                                                      (18, 12))


def test_prometheus_parser_details():
    s = parse_prometheus_text('a_b{x="q\\"uote",y="2"} 3.5 1700000000\n# c\n\nz 1e3\n')
    assert s == [("a_b", {"x": 'q"uote', "y": "2"}, 3.5), ("z", {}, 1000.0)]
    with pytest.raises(PolyspecInputError, match="line 2: not a Prometheus sample"):
        parse_prometheus_text("ok 1\nthis is not { a sample\n")
    with pytest.raises(PolyspecInputError, match="line 1: value 'abc' is not a number"):
        parse_prometheus_text("x abc\n")


@pytest.mark.parametrize(
    "change, field, message",
    [
        (dict(num_accepted_tokens=1969), "num_accepted_tokens_per_pos", "add up to 1970"),
        (dict(num_accepted_tokens_per_pos=[600, 630, 740]), "num_accepted_tokens_per_pos",
         "non-increasing"),
        (dict(num_accepted_tokens_per_pos=[1600, 30, 340]), "num_accepted_tokens_per_pos",
         "only 1500 drafts"),
        (dict(num_draft_tokens=4501), "num_draft_tokens", "exceed num_drafts x positions"),
        (dict(num_drafts=0), "num_drafts", "must be >= 1"),
        (dict(num_drafts=1.5), "num_drafts", "must be an integer"),
    ],
)
def test_vllm_inconsistent_counters_are_named(change, field, message):
    d = {k: list(v) if isinstance(v, tuple) else v for k, v in TOTAL.items()}
    d.update(change)
    with pytest.raises(PolyspecInputError, match=message) as e:
        vllm_counters_from_json(d)
    assert e.value.field == field


def test_vllm_missing_counter_and_nonstrict_mode():
    d = dict(TOTAL)
    del d["num_drafts"]
    with pytest.raises(PolyspecInputError, match="num_drafts: missing required field"):
        vllm_counters_from_json(d)
    text = (FIX / "vllm_metrics.prom").read_text()
    no_pos = "\n".join(x for x in text.splitlines() if "per_pos" not in x)
    with pytest.raises(PolyspecInputError, match="no vllm:spec_decode_num_accepted_tokens_per_pos"):
        vllm_counters_from_prometheus(no_pos)
    loose = dict(TOTAL, num_accepted_tokens=1969)
    c = vllm_counters_from_json(loose, strict=False)
    assert "add up to 1970" in c.notes[0]
    short = dict(TOTAL, num_draft_tokens=4400)
    c = vllm_counters_from_json(short)
    assert "100 of 4500 draft slots" in c.notes[0]
    assert c.to_acceptance_counts().notes == c.notes


def test_sglang_requests_pool_histograms_exactly():
    reqs = load_sglang_requests(FIX / "sglang_responses.jsonl")
    assert [(r.request_id, r.verify_ct, r.accept_token_num, r.draft_token_num, r.cap)
            for r in reqs] == [("req-a", 10, 19, 40, 4), ("req-b", 8, 19, 32, 4)]
    assert reqs[0].histogram == (2, 3, 1, 2, 2)
    assert reqs[0].acceptance_rate == 19 / 40
    d = sglang_acceptance_counts(reqs)
    np.testing.assert_array_equal(d.histogram(4), [3, 4, 3, 4, 4])
    assert d.n_rounds == 18 and d.mean_accepted() == 38 / 18
    # SGLang's own spec_accept_length = completion_tokens / verify_ct = 1 + accepted / verify_ct
    # in these fixtures (every round emits A + 1 tokens)
    for r, raw in zip(reqs, (FIX / "sglang_responses.jsonl").read_text().splitlines(),
                      strict=True):
        meta = json.loads(raw)["meta_info"]
        assert 1 + r.mean_accepted == pytest.approx(meta["spec_accept_length"], rel=1e-15)


def test_sglang_totals_only_gives_moment_matched_iid():
    reqs = load_sglang_requests(FIX / "sglang_totals_only.json")
    with pytest.raises(PolyspecInputError, match="spec_accept_histogram: missing"):
        sglang_acceptance_counts(reqs)
    a = sglang_iid_alpha(reqs)
    assert IIDGeometric(a).mean(4) == pytest.approx(9 / 5, rel=1e-12)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(spec_accept_histogram=[2, 3, 1, 2, 1]), "counts 9 rounds but spec_verify_ct is 10"),
        (dict(spec_accept_histogram=[2, 4, 0, 2, 2]), "implies 18 accepted tokens"),
        (dict(spec_accept_histogram=[2, 3, 1, 2, 1, 1]), "more than cap = 4"),
        (dict(spec_draft_token_num=41), "not a multiple of spec_verify_ct"),
        (dict(spec_accept_token_num=41), "exceed spec_verify_ct x cap"),
        (dict(spec_verify_ct=0), "must be >= 1"),
    ],
)
def test_sglang_inconsistent_meta_is_named(change, message):
    meta = json.loads((FIX / "sglang_responses.jsonl").read_text().splitlines()[0])["meta_info"]
    meta.update(change)
    with pytest.raises(PolyspecInputError, match=message):
        sglang_stats_from_meta(meta)


def test_sglang_missing_field_and_explicit_cap():
    with pytest.raises(PolyspecInputError,
                       match=r"requests\[0\]\.meta_info\.spec_verify_ct: missing"):
        load_sglang_requests([{"meta_info": {"spec_accept_token_num": 1}}])
    # tree drafting: 5 verify steps of a 7-node tree, accepted paths at most 3 deep
    meta = {"spec_verify_ct": 5, "spec_accept_token_num": 8, "spec_draft_token_num": 30,
            "spec_accept_histogram": [1, 1, 2, 1]}
    r = sglang_stats_from_meta(meta, cap=3)
    assert r.cap == 3 and r.histogram == (1, 1, 2, 1)
