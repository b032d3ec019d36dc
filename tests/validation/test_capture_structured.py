"""Captures with token trees and adaptive draft lengths (``polyspec capture --tree /
--schedule``) on tiny random zoo models: trace records, the reader and ``Capture``, resume,
``validate`` (structured P1 with fitted sibling / confidence / chain laws), input errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from polyspec.cli import main
from polyspec_theory.structures.trees import Tree, fit_sibling_law
from validation.analysis.structured import confidence_qr, sibling_law_by_depth
from validation.analysis.validate import validate
from validation.capture.setup import CaptureSpec
from validation.capture.single import capture
from validation.traces.records import read_records, read_trace, read_traces
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

torch.set_num_threads(1)

TREE = [-1, 0, 0, 0, 1, 1, 2, 4]


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    # a peaked random target and noisy copies of it: acceptance and the drafter's top
    # probability are neither 0 nor 1
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, noise) in enumerate([("target", 0.0), ("mid", 0.003), ("small", 0.008)]):
        torch.manual_seed(0)
        m = GPT(GPTConfig(2, 2, 32))
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(5.0)
            torch.manual_seed(100 + i)
            for p in m.parameters():
                p.add_(torch.randn_like(p) * noise)
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


KW = dict(n_prompts=3, prompt_len=16, max_new_tokens=24, warmup=1, cost_contexts=(8, 40),
          cost_repeats=2)


def test_tree_capture_records_and_validate(zoo_dir, tmp_path):
    path = capture(CaptureSpec(["target", "ngram"], [2], zoo_dir=zoo_dir, tree=TREE, **KW),
                   out=tmp_path, progress=False)
    assert re.fullmatch(r"target-ngram_th2_T0_tree7n3d[0-9a-f]{6}\.jsonl", path.name)
    t = read_trace(path)
    assert t.structured and t.pair_kind(0) == "tree" and t.trees[0] == Tree(TREE)
    assert t.header["tree_sampling"] == "distinct"
    assert all(s["matches_target_ar"] for s in t.summaries)  # lossless on real prompts
    st = t.structure(0)
    r = t.rounds[0]
    assert (r.G == 7).all() and (st.nodes == 7).all() and len(st) == r.n
    assert [len(x) for x in st.ranks] == r.A.tolist()
    # the drafter runs one forward per depth; its forwards add up to the summaries' counts
    assert all(len(m) == 3 for m in st.draft_m)
    assert sum(len(m) for m in st.draft_m) == t.forward_count[1]
    assert t.forward_count[0] == r.n
    rk, ch = st.sibling_data()
    assert rk.size == sum(len(v) for v in st.visits) and (ch >= 1).all()
    # validate: the tree's law is the censored MLE of the visits, predictions are finite
    res = validate([t])
    assert not res.configs and len(res.structured) == 1
    c = res.structured[0]
    assert c.kinds == ("tree",) and np.isfinite(c.predicted_speedup) and c.predicted_speedup > 0
    pair = c.pairs[0]
    assert pair["one_row"] == fit_sibling_law(rk, ch).to_config()
    assert pair["law"] == sibling_law_by_depth(st).to_config()
    assert pair["mean_emitted"]["measured"] == pytest.approx(r.L.mean())
    assert sum(pair["accepted_pmf"]["predicted"]) == pytest.approx(1.0)
    assert pair["drafter_forwards_per_round"] == {"measured": 3.0, "predicted": 3.0}
    js = res.to_json()
    assert js["structured"][0]["name"] == t.name and js["median_abs_error"] is None


def test_schedules_capture_sampling_resume_and_mixed_validate(zoo_dir, tmp_path):
    kw = dict(KW, n_prompts=4)
    spec = CaptureSpec(["target", "small"], [4], temperature=1.0, zoo_dir=zoo_dir,
                       schedules=["confidence:0.3"], seed=2, **kw)
    conf = capture(spec, out=tmp_path, progress=False)
    assert conf.name == "target-small_th4_T1_conf0p3.jsonl"
    t = read_trace(conf)
    assert t.pair_kind(0) == "confidence" and t.header["cascade"]["schedules"] == [
        {"kind": "confidence", "eta": 0.3}]
    st = t.structure(0)
    r = t.rounds[0]
    assert (st.theta == 4).all() and [len(x) for x in st.conf] == r.G.tolist()
    assert all((x >= 0.3).all() for x in st.conf)
    stops = ~np.isnan(st.conf_stop)
    assert (stops == (r.G < 4)).all() and (st.conf_stop[stops] < 0.3).all()
    assert t.forward_count[1] == int(np.sum(r.G + (r.G < 4)))
    c, y = st.confidence_data(r.G, r.A)
    assert c.size == r.G.sum() + stops.sum()
    assert np.nansum(y) == r.A.sum() and np.sum(y == 0) == np.sum(r.A < r.G)
    q, rr = confidence_qr(t, 0)
    assert 0 < rr <= q <= 1
    # interrupted during prompt 2, resumed: same records as the full capture
    lines = conf.read_text().splitlines(keepends=True)
    cut = max(i for i, ln in enumerate(lines) if '"type":"round","prompt":2' in ln)
    part = tmp_path / "b" / conf.name
    part.parent.mkdir()
    part.write_text("".join(lines[:cut]))
    capture(spec, out=tmp_path / "b", resume=True, progress=False)
    tb = read_trace(part)
    assert tb.complete and [x.tolist() for x in tb.structure(0).conf] == [
        x.tolist() for x in st.conf]
    with pytest.raises(Exception, match="different settings"):
        capture(spec._replace(schedules=["confidence:0.4"]), out=tmp_path / "b", resume=True,
                name=conf.stem, progress=False)
    # an HF schedule on the upper pair with a tree below it, greedy
    hf = capture(CaptureSpec(["target", "mid", "small"], [3, 2], zoo_dir=zoo_dir,
                             schedules=["hf:2:1:6", None], tree=[-1, 0, 0, 1], **KW),
                 out=tmp_path, progress=False)
    th = read_trace(hf)
    assert [th.pair_kind(i) for i in (0, 1)] == ["hf", "tree"]
    assert all(s["matches_target_ar"] for s in th.summaries)
    assert th.header["schedule_restart"] == "prompt"
    g = th.structure(0).theta
    assert set(g) <= set(range(1, 7)) and g[0] == 2
    plain = capture(CaptureSpec(["target", "small"], [3], zoo_dir=zoo_dir, **KW), out=tmp_path,
                    progress=False)
    assert not read_trace(plain).structured and read_trace(plain).structures == (None,)
    res = validate(read_traces(tmp_path), holdout=False, insertions=False)
    assert [c.name for c in res.configs] == [plain.stem]
    assert sorted(c.name for c in res.structured) == sorted([conf.stem, hf.stem])
    h = next(c for c in res.structured if c.name == hf.stem)
    assert h.transient_speedup is not None and h.kinds == ("hf", "tree")
    assert sum(h.pairs[0]["length_distribution"]["measured"]) == pytest.approx(1.0)
    cf = next(c for c in res.structured if c.name == conf.stem)
    assert cf.pairs[0]["law"]["confidence"]["beta"][0] > 0


def test_reader_rejects_inconsistent_structure_fields(zoo_dir, tmp_path):
    path = capture(CaptureSpec(["target", "ngram"], [2], zoo_dir=zoo_dir, tree=TREE,
                               **dict(KW, n_prompts=1)), out=tmp_path, progress=False)
    lines = path.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if '"type":"round"' in ln)
    rec = json.loads(lines[i])
    for key, bad, msg in (("ranks", [1] * (rec["A"] + 1), "ranks"),
                          ("nodes", 3, "nodes"), ("visits", [[0, 0]], "visits")):
        lines2 = list(lines)
        lines2[i] = json.dumps({**rec, key: bad})
        p = tmp_path / f"bad_{key}.jsonl"
        p.write_text("\n".join(lines2) + "\n")
        with pytest.raises(Exception, match=rf"line {i + 1}: round: {msg}"):
            read_records(p)
    head = json.loads(lines[0])
    head["cascade"]["trees"] = [{"parents": [-1, 2, 0]}]
    p = tmp_path / "bad_header.jsonl"
    p.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    with pytest.raises(Exception, match=r"cascade\.trees\[0\]\.parents\[1\]"):
        read_trace(p)


def test_cli_capture_structure_errors(zoo_dir, tmp_path, capsys):
    base = ["capture", "--models", "target,small", "--thresholds", "2", "--out",
            str(tmp_path), "--zoo-dir", str(zoo_dir), "--prompts", "1", "--tokens", "8",
            "--no-progress"]
    for extra, field in ((["--tree=-1,0,5"], "tree.parents[2]"),
                         (["--schedule", "hf:2:1"], "schedules[0]"),
                         (["--schedule", "3@hf:2:1:4"], "--schedule"),
                         (["--schedule", "confidence:0.5", "--tree=-1,0"], "schedules[0]")):
        assert main(base + extra) == 2, extra
        assert field in capsys.readouterr().err
    assert not list(tmp_path.glob("*.jsonl"))  # nothing half-written
    assert main(base + ["--tree=-1,0,0", "--tree-sampling", "iid", "--temperature", "1",
                        "--warmup", "0", "--cost-contexts", "8", "--cost-repeats", "1"]) == 0
    (p,) = tmp_path.glob("*.jsonl")
    assert p.name.endswith("iid.jsonl") and read_trace(p).tree_sampling == "iid"
