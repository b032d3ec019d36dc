"""The model zoo: corpus split, tokenizer, model cache, weights, n-gram, committed zoo, CLI."""

from __future__ import annotations

import collections
import json
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec.cli import main
from validation.capture.model_specs import model_name
from validation.capture.models import load_model
from validation.paths import zoo_dir
from validation.schemes.chain import PolybasicDecoder, autoregressive
from validation.zoo import decode, encode, zoo_info
from validation.zoo.data import EXCLUDED_DIRS, load_split, split_files
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.ngram import NGramModel
from validation.zoo.weights import load_gpt, read_record, save_model

torch.set_num_threads(1)


def test_corpus_split_is_deterministic_and_disjoint():
    tr, va = split_files("train"), split_files("val")
    assert len(tr) > 500 and len(va) > 5
    assert not set(tr) & set(va)
    assert list(tr) == sorted(tr) and list(va) == sorted(va)
    for rel in tr + va:
        assert not set(rel.split("/")[:-1]) & EXCLUDED_DIRS and rel.endswith(".py")
    a, b = load_split("train"), load_split("val")
    assert a.dtype == np.uint8 and len(a) > 5_000_000 and len(b) > 100_000
    assert (b == 0).sum() == len(va) - 1  # separators only between files
    with pytest.raises(ValueError, match="split"):
        load_split("test")


def test_byte_tokenizer_round_trip():
    s = "def f(x):\n    return 'é' + x\n"
    assert decode(encode(s)) == s and max(encode(s)) < 256


def test_cached_forward_matches_full_forward():
    torch.manual_seed(0)
    m = GPT(GPTConfig(2, 2, 32, block_size=64)).eval()
    x = torch.randint(0, 256, (1, 40))
    with torch.no_grad():
        full = m(x)[0]
        cache = m.new_cache()
        parts = [m.forward_cached(x[:, :10], 0, cache), m.forward_cached(x[:, 10:11], 10, cache)]
        # write garbage at 11..19, then roll back to 11 (index move) and continue
        m.forward_cached(torch.randint(0, 256, (1, 9)), 11, cache)
        parts.append(m.forward_cached(x[:, 11:40], 11, cache))
    assert torch.allclose(torch.cat(parts), full, atol=1e-4)
    with pytest.raises(ValueError, match="block_size"):
        m.forward_cached(x[:, :30], 40, m.new_cache())


def test_weights_round_trip(tmp_path):
    torch.manual_seed(1)
    m = GPT(GPTConfig(1, 2, 16, block_size=32))
    save_model(m, tmp_path / "m.safetensors", {"name": "m", "steps": 3})
    back = load_gpt(tmp_path / "m.safetensors")
    assert back.cfg == m.cfg and read_record(tmp_path / "m.safetensors")["steps"] == 3
    for (k, a), (_, b) in zip(m.state_dict().items(), back.state_dict().items(), strict=True):
        assert b.dtype == torch.float32
        assert torch.allclose(a.half().float(), b), k
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a polyspec zoo weight file"):
        load_gpt(tmp_path / "other.safetensors")


def _corrupt_weight_files(tmp_path):
    """An empty file, random bytes, a truncated zoo file, and a zoo-tagged file whose tensors
    are not a GPT's."""
    from safetensors.torch import save_file

    torch.manual_seed(1)
    good = tmp_path / "good.safetensors"
    save_model(GPT(GPTConfig(1, 2, 16, block_size=32)), good, {"name": "g"})
    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "junk.safetensors").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "trunc.safetensors").write_bytes(good.read_bytes()[:2000])
    save_file({"x": torch.zeros(2)}, str(tmp_path / "tensors.safetensors"),
              metadata={"format": "polyspec-zoo-1", "record": "{}",
                        "config": json.dumps(GPT(GPTConfig(1, 2, 16, block_size=32)).cfg
                                             .to_dict())})
    return [tmp_path / f"{n}.safetensors" for n in ("empty", "junk", "trunc", "tensors")]


def test_corrupt_or_empty_weight_files_are_one_line_errors(tmp_path, capsys):
    """A corrupt or empty .safetensors given as a model: one line naming the file, not an
    internal error (it used to leak safetensors' SafetensorError)."""
    from polyspec_theory.errors import PolyspecInputError

    for f in _corrupt_weight_files(tmp_path):
        with pytest.raises(PolyspecInputError, match=f"models: {f}: "):
            load_gpt(f)
        with pytest.raises(PolyspecInputError, match=f"models: {f}: "):
            load_model(str(f))
        assert main(["profile", str(f), "--max-m", "1", "--repeats", "1"]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and str(f) in err and "internal error" not in err, err


def test_ngram_counts_and_law():
    data = np.frombuffer(b"abcabcabcabd" * 20, dtype=np.uint8)
    ng = NGramModel(data, order=2, min_count=1)
    p = ng.probs(list(b"ab"))
    assert p.shape == (256,) and abs(p.sum() - 1) < 1e-12 and (p > 0).all()
    assert p[ord("c")] > 0.6 and p[ord("c")] > 2 * p[ord("d")] > 0
    # Witten–Bell by hand for the order-0 context: 240 bytes, 4 distinct continuations
    p0 = ng.probs([])
    counts = {ord("a"): 80, ord("b"): 80, ord("c"): 60, ord("d"): 20}
    assert p0[ord("d")] == pytest.approx((20 + 4 / 256) / (240 + 4))
    assert p0[ord("z")] == pytest.approx((4 / 256) / (240 + 4))
    assert sum(counts.values()) == 240
    with pytest.raises(ValueError, match="order"):
        NGramModel(data, order=9)


@pytest.mark.parametrize("n", [4, 5, 9, 3000])
def test_ngram_counts_are_the_counted_pairs(n):
    """The stored (context, next) keys and counts of every order (the in-place counting of
    orders 0..2, the counting over the ranks of the order below's keys, and the sorted path)
    equal a count by hand of every window."""
    from collections import Counter

    data = np.random.default_rng(n).integers(0, 7, n).astype(np.uint8)
    ng = NGramModel(data, order=4, min_count=1)
    for k in range(5):
        want = Counter(int.from_bytes(bytes(data[i: i + k + 1]), "big")
                       for i in range(n - k))
        assert ng.keys[k].dtype == np.uint64 and ng.counts[k].dtype == np.float64
        assert ng.keys[k].tolist() == sorted(want)
        assert ng.counts[k].tolist() == [float(want[x]) for x in sorted(want)]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(0, 5),
       min_count=st.integers(1, 3), alphabet=st.integers(1, 40))
def test_ngram_probs_of_next_are_probs_at_the_observed_byte(seed, order, min_count, alphabet):
    """The vectorised law at the observed byte equals :meth:`NGramModel.probs` at every
    position, to the last bit (unseen and pruned contexts included), and eval_bpb is their
    mean -log2."""
    import math

    rng = np.random.default_rng(seed)
    data = rng.integers(97, 97 + alphabet, size=int(rng.integers(order + 2, 400)))
    data = data.astype(np.uint8)
    train = data[: len(data) // 2 + 1]
    ng = NGramModel(train, order=order, min_count=min_count)
    # the count tables against a direct count of (context, next byte)
    for k in range(order + 1):
        seen = collections.Counter(tuple(train[t - k : t + 1]) for t in range(k, len(train)))
        if k >= 3:
            seen = {key: c for key, c in seen.items() if c >= min_count}
        got = {tuple(int(key) >> (8 * j) & 255 for j in range(k, -1, -1)): c
               for key, c in zip(ng.keys[k].tolist(), ng.counts[k].tolist(), strict=True)}
        assert got == seen and list(ng.keys[k]) == sorted(ng.keys[k])
    pos = np.arange(order, len(data))
    want = np.array([ng.probs(data[t - order : t])[data[t]] for t in pos])
    assert np.array_equal(ng.probs_of_next(data, pos), want)
    n = min(50, len(pos))
    grid = np.linspace(order, len(data) - 1, n).astype(np.int64)
    assert ng.eval_bpb(data, n) == pytest.approx(
        -sum(math.log2(ng.probs(data[t - order : t])[data[t]]) for t in grid) / n, rel=1e-15)
    with pytest.raises(ValueError, match="positions"):
        ng.probs_of_next(data, [order - 1] if order else [len(data)])


def test_ngram_levels_by_name():
    from polyspec_theory.errors import PolyspecInputError

    lv = load_model("ngram:0")
    assert lv.name == "ngram0" and lv.ngram.order == 0 and lv.describe()["order"] == 0
    assert load_model("ngram").ngram.order == 1
    for bad in ("ngram:x", "ngram:9"):
        with pytest.raises(PolyspecInputError, match="^models"):
            load_model(bad)


# ---------------------------------------------------------------- the committed zoo
def test_committed_zoo_sizes_quality_and_size_budget():
    man = json.loads((zoo_dir() / "zoo.json").read_text())
    recs = {r["name"]: r for r in man["models"]}
    assert set(recs) == {"small", "mid", "target", "draft-t"}
    assert recs["small"]["params"] < recs["mid"]["params"] < recs["target"]["params"]
    bpb = [recs[n]["val_bits_per_byte"] for n in ("small", "mid", "target")]
    assert bpb[0] > bpb[1] > bpb[2]  # quality strictly improves with size
    total = sum((zoo_dir() / f"{n}.safetensors").stat().st_size for n in recs)
    assert total <= 40e6
    # the distilled drafter: recorded against its teacher, and distillation raised acceptance
    d = recs["draft-t"]
    assert d["teacher"] == "target" and d["kl"] == "forward" and d["init_from"] == "target"
    assert d["params"] < recs["small"]["params"] * 3 and bpb[2] < d["val_bits_per_byte"]
    for where in ("teacher_greedy", "heldout"):
        for k in ("greedy", "one_minus_tv"):
            assert d["acceptance"]["after"][where][k] > d["acceptance"]["before"][where][k] + 0.05
    info = zoo_info()
    ng = [m for m in info["models"] if m["name"] == "ngram"][0]
    assert ng["val_bits_per_byte"] > bpb[0]  # the n-gram is the weakest level
    assert info["corpus_digest"] == info["current_corpus_digest"]


def test_committed_zoo_4_level_greedy_is_lossless():
    levels = [load_model(n) for n in ("target", "mid", "small", "ngram")]
    data = load_split("val")
    rnd = random.Random(0)
    for _ in range(2):
        s = rnd.randrange(len(data) - 100)
        prompt = data[s : s + 48].tolist()
        r = PolybasicDecoder(levels, [6, 3, 2]).generate(prompt, 40)
        assert r.tokens == autoregressive(levels[0], prompt, r.n_generated).tokens


def test_committed_zoo_3_level_with_the_distilled_drafter_is_lossless():
    levels = [load_model(n) for n in ("target", "draft-t", "ngram:2")]
    data = load_split("val")
    rnd = random.Random(1)
    for _ in range(2):
        s = rnd.randrange(len(data) - 100)
        prompt = data[s : s + 48].tolist()
        r = PolybasicDecoder(levels, [7, 2]).generate(prompt, 40)
        assert r.tokens == autoregressive(levels[0], prompt, r.n_generated).tokens


def _one_row_batches(monkeypatch):
    """The default specs (their models, steps, evaluations and growth) training on batches of
    one 16-byte row: what the CLI tests check (names, steps, windows, depths, checkpoints,
    the output) does not need full 16 x 256 batches."""
    import dataclasses

    from validation.zoo import train as train_mod

    monkeypatch.setattr(train_mod, "DEFAULT_SPECS", tuple(
        dataclasses.replace(s, batch_size=1, seq_len=16) for s in train_mod.DEFAULT_SPECS))


def test_cli_zoo_info_and_train_smoke(tmp_path, capsys, monkeypatch):
    from validation.zoo import train as train_mod

    _one_row_batches(monkeypatch)

    assert main(["zoo", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in info["models"]] == ["target", "mid", "draft-t", "small", "ngram"]
    windows = []  # the validation windows each bits/byte evaluation uses

    def eval_bpb(model, data, n_windows=64, seq_len=256):
        windows.append(n_windows)
        return real_eval_bpb(model, data, n_windows, seq_len)

    real_eval_bpb = train_mod.eval_bpb
    monkeypatch.setattr(train_mod, "eval_bpb", eval_bpb)
    assert main(["zoo", "train", "--seed", "1", "--out", str(tmp_path), "--only", "small",
                 "--steps-scale", "0.005", "--eval-scale", "0.05"]) == 0
    cap = capsys.readouterr()
    assert "val bits/byte" in cap.out and "small" in cap.out
    assert "ngram" not in cap.out  # --only: the models trained, not the whole zoo
    assert "expected run time:" in cap.out.splitlines()[0]
    assert "small: 100%" in cap.err and "2/2" in cap.err  # the progress bar (stderr)
    assert (tmp_path / "small.safetensors").exists()
    assert json.loads((tmp_path / "zoo.json").read_text())["models"][0]["val_windows"] == 3
    assert windows == [3]  # --eval-scale 0.05 of 64
    assert main(["zoo", "train", "--out", str(tmp_path), "--only", "huge"]) == 2
    assert "error: only" in capsys.readouterr().err
    assert main(["zoo", "train", "--out", str(tmp_path), "--eval-scale", "0"]) == 2
    assert "error: eval_scale" in capsys.readouterr().err
    assert main(["zoo"]) == 2


@pytest.mark.parametrize("factor", [2, 3])
def test_grow_depth_preserves_the_function(factor):
    from validation.zoo.train import grow_depth

    torch.manual_seed(0)
    base = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, block_size=32)).eval()
    deep = GPT(GPTConfig(n_layer=2 * factor, n_head=2, d_model=16, block_size=32)).eval()
    deep.load_state_dict(grow_depth(base.state_dict(), 2, 2 * factor))
    x = torch.randint(0, 256, (3, 20))
    with torch.no_grad():
        torch.testing.assert_close(deep(x), base(x), rtol=1e-5, atol=1e-5)
        # the cached decode path too
        cb, cd = base.new_cache(), deep.new_cache()
        torch.testing.assert_close(deep.forward_cached(x[:1, :7], 0, cd),
                                   base.forward_cached(x[:1, :7], 0, cb))
    # the copies that are not first in their group have zero output projections
    sd = deep.state_dict()
    assert float(sd["blocks.1.proj.weight"].abs().sum()) == 0.0
    assert float(sd["blocks.0.proj.weight"].abs().sum()) > 0.0
    with pytest.raises(ValueError, match="multiple"):
        grow_depth(base.state_dict(), 2, 3)


def test_grown_spec_trains_from_its_base_and_stays_unpublished(tmp_path):
    from validation.zoo.train import TrainRun, TrainSpec, train_zoo

    tiny = dict(batch_size=2, seq_len=32, warmup=1, lr=1e-3)
    specs = (TrainSpec("base", GPTConfig(n_layer=1, n_head=2, d_model=16), steps=2,
                       publish=False, **tiny),
             TrainSpec("deep", GPTConfig(n_layer=2, n_head=2, d_model=16), steps=2,
                       grow_from="base", **tiny))
    logs = []
    train_zoo(0, tmp_path, specs, TrainRun(log=logs.append))
    assert any("grown from base (1 -> 2 layers)" in m for m in logs)
    assert (tmp_path / "deep.safetensors").exists()
    assert not (tmp_path / "base.safetensors").exists()  # an intermediate stays in ckpt/
    man = json.loads((tmp_path / "zoo.json").read_text())
    assert [r["name"] for r in man["models"]] == ["deep"]
    assert [r["name"] for r in man["intermediate"]] == ["base"]
    assert man["models"][0]["grown_from"] == "base"
    with pytest.raises(FileNotFoundError, match="train it first"):
        train_zoo(0, tmp_path / "other", specs[1:], TrainRun(log=logs.append))


def test_cli_zoo_train_grows_the_target_from_its_base(tmp_path, capsys, monkeypatch):
    _one_row_batches(monkeypatch)
    assert main(["zoo", "train", "--seed", "1", "--out", str(tmp_path), "--only",
                 "target_base,target", "--steps-scale", "0.001", "--eval-scale", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "target" in out
    man = json.loads((tmp_path / "zoo.json").read_text())
    assert [r["name"] for r in man["models"]] == ["target"]
    assert [r["name"] for r in man["intermediate"]] == ["target_base"]
    assert man["models"][0]["config"]["n_layer"] == 2 * man["intermediate"][0]["config"][
        "n_layer"]
    assert man["models"][0]["grown_from"] == "target_base"
    assert [r["steps"] for r in man["models"] + man["intermediate"]] == [1, 1]
    assert (tmp_path / "ckpt" / "target_base.pt").exists()


@pytest.mark.parametrize("spec", ["ngram", "ngram:2", "ngram:0", "small", "target",
                                  str(zoo_dir() / "draft-t.safetensors")])
def test_model_name_is_the_name_a_spec_loads_under(spec):
    assert model_name(spec) == load_model(spec).name
    assert model_name("ngram:3") == "ngram3" and model_name("/x/ckpt-dir") == "ckpt-dir"
