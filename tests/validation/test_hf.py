"""Hugging Face checkpoint directories as decoder levels (tiny models built from a config)."""

from __future__ import annotations

import random

import pytest
import torch

from tests._optional import optional_import

transformers = optional_import("transformers")

from tests.validation.tiny_zoo import tiny_family  # noqa: E402
from validation.capture.models import HFModel, load_model  # noqa: E402
from validation.schemes.chain import PolybasicDecoder, autoregressive  # noqa: E402

torch.set_num_threads(1)


def _save_gpt2(path, seed, n_layer=1, n_embd=32):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=16, n_positions=128, n_embd=n_embd,
                                  n_layer=n_layer, n_head=2)
    m = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(6.0)
    m.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    return [_save_gpt2(d / f"gpt2_{i}", seed=i, n_layer=2 - (i > 0)) for i in range(2)]


def test_load_level_detects_hf_dir(hf_dirs):
    lv = load_model(str(hf_dirs[0]))
    assert isinstance(lv, HFModel) and lv.vocab_size == 16 and lv.max_len == 128
    assert lv.describe()["model_type"] == "gpt2"


def test_cached_logits_match_full_forward_after_rollback(hf_dirs):
    lv = load_model(str(hf_dirs[0]))
    seq = [random.Random(0).randrange(16) for _ in range(20)]
    with torch.no_grad():
        full = lv.model(torch.tensor([seq])).logits[0]
    lv.reset()
    a = lv.logits(seq, 12)
    lv.rollback(7)
    b = lv.logits(seq, 20)
    assert torch.allclose(a, full[:12], atol=1e-4)
    assert torch.allclose(b, full[7:20], atol=1e-4)


def test_hf_levels_in_greedy_cascades_are_lossless(hf_dirs):
    zoo = tiny_family(2, vocab=16, seed=9)
    hf = [load_model(str(p)) for p in hf_dirs]
    rnd = random.Random(1)
    for levels, th in [(hf, [3]), ([hf[0], zoo[0], zoo[1]], [4, 2]),
                       ([zoo[0], hf[1]], [2]), ([hf[0], hf[1], zoo[1]], [3, 1])]:
        for _ in range(4):
            prompt = [rnd.randrange(16) for _ in range(rnd.randrange(1, 9))]
            r = PolybasicDecoder(levels, th).generate(prompt, 20)
            assert r.tokens == autoregressive(levels[0], prompt, r.n_generated).tokens
