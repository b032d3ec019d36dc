"""Distilled drafters: the KL losses, per-pair acceptance, batched greedy continuations,
initialisation from a published model, determinism and resume of a distillation run, and
the `polyspec zoo train` path for a distilled spec."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from polyspec.cli import main
from validation.capture.models import ZooModel
from validation.schemes.chain import autoregressive
from validation.zoo import train as train_mod
from validation.zoo.distill import (
    agreement_hazards,
    distill_loss,
    eval_windows,
    greedy_continuations,
    next_byte_laws,
    pair_acceptance,
    parse_kl,
)
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.ngram import NGramModel
from validation.zoo.train import TrainRun, TrainSpec, train_zoo
from validation.zoo.weights import load_gpt, read_record, save_model

torch.set_num_threads(1)


def _tiny(seed, n_layer=1, d=16, scale=1.0):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(n_layer, 2, d, block_size=64)).eval()
    if scale != 1.0:
        with torch.no_grad():
            m.tok.weight.mul_(scale)
    return m


def _np_log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


# ------------------------------------------------------------------------------ the loss
@pytest.mark.parametrize("kind", ["forward", "reverse", "mix:0.3"])
def test_distill_loss_equals_an_independent_float64_kl(kind):
    teacher, student = _tiny(0, scale=20.0), _tiny(1, n_layer=2, scale=20.0)
    x = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        tl, sl = teacher(x), student(x)
    got = float(distill_loss(sl, tl, kind))
    lp, lq = _np_log_softmax(tl.numpy()), _np_log_softmax(sl.numpy())
    p, q = np.exp(lp), np.exp(lq)
    fwd = np.mean([sum(p[b, t, v] * (lp[b, t, v] - lq[b, t, v]) for v in range(256))
                   for b in range(3) for t in range(40)])
    rev = np.mean([sum(q[b, t, v] * (lq[b, t, v] - lp[b, t, v]) for v in range(256))
                   for b in range(3) for t in range(40)])
    w = {"forward": 1.0, "reverse": 0.0, "mix:0.3": 0.3}[kind]
    ref = w * fwd + (1 - w) * rev
    assert fwd > 0.05 and rev > 0.05 and abs(fwd - rev) > 1e-3  # the two KLs differ here
    assert got == pytest.approx(ref, rel=2e-5, abs=1e-7)


def test_distill_loss_is_zero_at_the_teacher_and_its_gradient_is_q_minus_p():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(5, 256, generator=g, dtype=torch.float64) * 3
    assert float(distill_loss(t.clone(), t, "forward")) == pytest.approx(0.0, abs=1e-6)
    assert float(distill_loss(t.clone(), t, "reverse")) == pytest.approx(0.0, abs=1e-6)
    s = torch.randn(5, 256, generator=g, dtype=torch.float64).requires_grad_(True)
    distill_loss(s, t, "forward").backward()
    p, q = torch.softmax(t, -1), torch.softmax(s.detach(), -1)
    # d/ds mean_n KL(p_n || softmax(s_n)) = (q - p) / N
    torch.testing.assert_close(s.grad.double(), (q - p) / 5, rtol=1e-4, atol=1e-7)
    assert t.grad is None  # the teacher is a constant


def test_parse_kl():
    assert parse_kl("forward") == ("forward", 1.0)
    assert parse_kl("reverse") == ("reverse", 0.0)
    assert parse_kl("mix:0.25") == ("mix", 0.25)
    for bad in ("mix:1", "mix:0", "mix:x", "kl", "", None):
        with pytest.raises(ValueError, match="kl"):
            parse_kl(bad)


# ------------------------------------------------------------------------- acceptance
def test_pair_acceptance_equals_brute_force():
    ver, dra = _tiny(0, scale=10.0), _tiny(3, scale=10.0)
    data = np.random.default_rng(0).integers(0, 256, size=3000).astype(np.uint8)
    w = eval_windows(data, 4, 48)
    a = pair_acceptance(ver, dra, w, min_context=16)
    agree, ov = [], []
    with torch.no_grad():
        for row in w:
            for t in range(16, 49):  # law of the byte after each prefix of length >= 16
                ctx = torch.from_numpy(row[:t].astype(np.int64))[None]
                p = torch.softmax(ver(ctx)[0, -1].double(), -1).numpy()
                q = torch.softmax(dra(ctx)[0, -1].double(), -1).numpy()
                agree.append(p.argmax() == q.argmax())
                ov.append(sum(min(x, y) for x, y in zip(p, q, strict=True)))
    assert a.positions == len(agree) == 4 * 33
    assert a.greedy == pytest.approx(np.mean(agree), abs=1e-12)
    assert a.one_minus_tv == pytest.approx(np.mean(ov), rel=1e-5)
    assert 0.0 < a.one_minus_tv < 1.0
    # a model against itself: everything is accepted
    same = pair_acceptance(ver, ver, w, min_context=16)
    assert same.greedy == 1.0 and same.one_minus_tv == pytest.approx(1.0, abs=1e-12)


def test_pair_acceptance_with_an_ngram_drafter_uses_its_law_per_context():
    data = np.frombuffer(b"def f(x):\n    return x + 1\n" * 40, dtype=np.uint8)
    ng = NGramModel(data, order=2, min_count=1)
    ver = _tiny(0, scale=10.0)
    w = eval_windows(data, 3, 40)
    q = next_byte_laws(ng, w, 10)
    assert q.shape == (3 * 31, 256)
    np.testing.assert_allclose(q[0], ng.probs(w[0][8:10]))
    np.testing.assert_allclose(q[30], ng.probs(w[0][38:40]))
    a = pair_acceptance(ver, ng, w, min_context=10)
    p = next_byte_laws(ver, w, 10)
    assert a.greedy == pytest.approx(np.mean(p.argmax(-1) == q.argmax(-1)))
    assert a.one_minus_tv == pytest.approx(np.minimum(p, q).sum(-1).mean())


def test_agreement_hazards_equal_enumeration_of_runs():
    rng = np.random.default_rng(1)
    agree = rng.random((5, 30)) < 0.7
    kmax = 8
    got = agreement_hazards(agree, kmax)
    for k in range(1, kmax + 1):
        num = den = 0
        for row in agree:
            for t in range(0, 30 - k + 1):  # starts whose k-th position lies in the window
                if row[t : t + k - 1].all():
                    den += 1
                    num += bool(row[t + k - 1])
        assert got[k - 1] == pytest.approx(num / den, abs=1e-15)
    assert agreement_hazards(np.ones((2, 5), bool), 3).tolist() == [1.0, 1.0, 1.0]


def test_greedy_continuations_equal_the_decoders_autoregressive_tokens():
    m = _tiny(4, n_layer=2, scale=8.0)
    data = np.random.default_rng(3).integers(0, 256, size=500)
    prompts = torch.from_numpy(np.stack([data[i * 50 : i * 50 + 12] for i in range(3)]))
    toks, logits = greedy_continuations(m, prompts, 20)
    assert toks.shape == (3, 32) and logits.shape == (3, 32, 256)
    for b in range(3):
        ref = autoregressive(ZooModel(m, "m"), prompts[b].tolist(), 20).tokens
        assert toks[b, 12:].tolist() == ref
        with torch.no_grad():
            full = m(toks[b : b + 1])[0]
        torch.testing.assert_close(logits[b], full, rtol=1e-4, atol=1e-4)
    # a window that fills the whole context
    toks, logits = greedy_continuations(m, prompts[:1, :4], 60)
    with torch.no_grad():
        torch.testing.assert_close(logits[0], m(toks)[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="block_size"):
        greedy_continuations(m, prompts, 60)


# ------------------------------------------------------------------ training a drafter
TINY = dict(batch_size=2, seq_len=32, warmup=1, lr=3e-3, eval_windows=2, eval_prompts=2,
            eval_new_tokens=8)


def _publish_teacher(out, name="teach", n_layer=2, seed=0):
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    t = GPT(GPTConfig(n_layer, 2, 16, block_size=128))
    with torch.no_grad():
        t.tok.weight.mul_(20.0)  # peaked laws, so that acceptance is far from 1
    save_model(t, out / f"{name}.safetensors", {"name": name})
    return load_gpt(out / f"{name}.safetensors")


def _student_spec(**kw):
    args = dict(name="stud", config=GPTConfig(1, 2, 16, block_size=128), steps=6,
                teacher="teach", kl="forward", **TINY)
    args.update(kw)
    return TrainSpec(**args)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def test_init_from_copies_the_chosen_layers(tmp_path):
    teacher = _publish_teacher(tmp_path, n_layer=3)
    spec = _student_spec(config=GPTConfig(2, 2, 16, block_size=64), init_from="teach",
                         init_layers=(2, 0))
    st = train_mod._init_state(spec, tmp_path)
    ts = teacher.state_dict()
    assert torch.equal(st["blocks.0.qkv.weight"], ts["blocks.2.qkv.weight"])
    assert torch.equal(st["blocks.1.out.weight"], ts["blocks.0.out.weight"])
    assert torch.equal(st["tok.weight"], ts["tok.weight"])
    assert st["pos.weight"].shape == (64, 16)
    # all layers in order: the student computes the teacher's function
    full = _student_spec(config=GPTConfig(3, 2, 16, block_size=128), init_from="teach")
    m = GPT(full.config).eval()
    m.load_state_dict(train_mod._init_state(full, tmp_path))
    x = torch.randint(0, 256, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(m(x), teacher(x))
    with pytest.raises(ValueError, match="init_layers"):
        train_mod._init_state(_student_spec(init_from="teach", init_layers=(5,)), tmp_path)
    with pytest.raises(ValueError, match="cannot initialise"):
        train_mod._init_state(_student_spec(config=GPTConfig(1, 2, 32), init_from="teach"),
                              tmp_path)


def test_distillation_lowers_the_kl_and_records_acceptance(tmp_path):
    _publish_teacher(tmp_path)
    spec = _student_spec(steps=60, lr=1e-2, init_from=None)
    logs = []
    (rec,) = train_zoo(0, tmp_path, (spec,), TrainRun(log=logs.append))
    assert any(m.startswith("expected run time:") for m in logs)
    curve = [v for _, v in rec["train_curve_kl_bits"]]
    assert len(curve) == 1 and rec["teacher"] == "teach" and rec["kl"] == "forward"
    acc = rec["acceptance"]
    for phase in ("before", "after"):
        for where in ("heldout", "teacher_greedy"):
            a = acc[phase][where]
            assert 0.0 <= a["greedy"] <= 1.0 and 0.0 < a["one_minus_tv"] <= 1.0
    # 60 steps at lr 1e-2 pull a random student towards a random teacher's laws
    assert acc["after"]["heldout"]["one_minus_tv"] > acc["before"]["heldout"]["one_minus_tv"]
    assert read_record(tmp_path / "stud.safetensors")["acceptance"] == json.loads(
        json.dumps(acc))
    man = json.loads((tmp_path / "zoo.json").read_text())
    assert [r["name"] for r in man["models"]] == ["stud"]
    text = train_mod.write_training_record(tmp_path, "polyspec zoo train ...")
    b, a = acc["before"]["teacher_greedy"], acc["after"]["teacher_greedy"]
    assert f"| teach ← stud | {b['greedy']:.3f} → {a['greedy']:.3f} |" in text
    assert "stud (distilled from teach)" in text and "forward KL to teach" in text


def test_distillation_is_deterministic(tmp_path):
    for d in ("a", "b"):
        _publish_teacher(tmp_path / d)
        train_zoo(3, tmp_path / d, (_student_spec(kl="mix:0.5"),),
                TrainRun(log=lambda m: None, estimate=False))
    wa, wb = _weights(tmp_path / "a" / "stud.safetensors"), _weights(
        tmp_path / "b" / "stud.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # another seed gives other weights
    _publish_teacher(tmp_path / "c")
    train_zoo(4, tmp_path / "c", (_student_spec(kl="mix:0.5"),),
            TrainRun(log=lambda m: None, estimate=False))
    wc = _weights(tmp_path / "c" / "stud.safetensors")
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


@pytest.mark.parametrize("kl", ["forward", "reverse"])
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, monkeypatch, kl):
    spec = _student_spec(steps=7, kl=kl, init_from="teach", init_layers=(1,))
    _publish_teacher(tmp_path / "full")
    (full,) = train_zoo(0, tmp_path / "full", (spec,),
            TrainRun(log=lambda m: None, ckpt_every=3, estimate=False))

    _publish_teacher(tmp_path / "cut")
    real_save = train_mod.save_checkpoint
    saves = []

    def save_then_die(state, path):
        real_save(state, path)
        saves.append(state["step"])
        if state["step"] == 3:
            raise KeyboardInterrupt  # killed right after the step-3 checkpoint

    monkeypatch.setattr(train_mod, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_zoo(0, tmp_path / "cut", (spec,),
                TrainRun(log=lambda m: None, ckpt_every=3, estimate=False))
    assert saves == [3] and not (tmp_path / "cut" / "stud.safetensors").exists()
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    logs = []
    (res,) = train_zoo(0, tmp_path / "cut", (spec,),
            TrainRun(log=logs.append, ckpt_every=3, resume=True, estimate=False))
    assert "[stud] resumed at step 3" in logs
    wf = _weights(tmp_path / "full" / "stud.safetensors")
    wr = _weights(tmp_path / "cut" / "stud.safetensors")
    assert all(torch.equal(wf[k], wr[k]) for k in wf)
    ck_full = torch.load(tmp_path / "full" / "ckpt" / "stud.pt", weights_only=True)
    ck_cut = torch.load(tmp_path / "cut" / "ckpt" / "stud.pt", weights_only=True)
    assert all(torch.equal(ck_full["model"][k], ck_cut["model"][k]) for k in ck_full["model"])
    for key in ("acceptance", "val_bits_per_byte", "train_curve_kl_bits",
                "train_curve_bits_per_byte", "steps"):
        assert res[key] == full[key], key


def test_checkpoints_hold_no_pickled_objects(tmp_path):
    _publish_teacher(tmp_path)
    train_zoo(0, tmp_path, (_student_spec(steps=2),), TrainRun(log=lambda m: None, estimate=False))
    state = torch.load(tmp_path / "ckpt" / "stud.pt", weights_only=True)
    assert state["step"] == 2 and set(state) >= {"model", "opt", "history", "kl_history"}


def test_missing_teacher_or_init_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="teacher teach is not published"):
        train_zoo(0, tmp_path, (_student_spec(),), TrainRun(log=lambda m: None, estimate=False))
    _publish_teacher(tmp_path)
    with pytest.raises(FileNotFoundError, match="initialisation nope is not published"):
        train_zoo(0, tmp_path, (_student_spec(init_from="nope"),),
                TrainRun(log=lambda m: None, estimate=False))


def test_estimate_counts_remaining_steps_and_the_teacher(tmp_path):
    _publish_teacher(tmp_path)
    plain = TrainSpec("plain", GPTConfig(1, 2, 16, block_size=128), steps=40, **{
        k: v for k, v in TINY.items() if not k.startswith("eval")})
    est = train_mod.estimate_seconds((plain, _student_spec(steps=40)), tmp_path)
    assert set(est) == {"plain", "stud"} and all(v > 0 for v in est.values())
    # a published teacher's config is read from its file; an unknown one is named
    with pytest.raises(FileNotFoundError, match="teacher ghost"):
        train_mod.estimate_seconds((_student_spec(teacher="ghost"),), tmp_path)


# ---------------------------------------------------------------- the zoo's distilled specs
def test_default_distilled_specs_are_well_formed():
    from validation.zoo.train import DEFAULT_SPECS, spec_index

    names = [s.name for s in DEFAULT_SPECS]
    assert names[:4] == ["small", "mid", "target_base", "target"]  # seed offsets unchanged
    for s in DEFAULT_SPECS:
        if s.distilled:
            assert names.index(s.teacher) < names.index(s.name)
            if s.init_from:
                assert names.index(s.init_from) < names.index(s.name)
            parse_kl(s.kl)
    assert spec_index("small") == 0 and spec_index("not-a-model") == len(names)


def test_cli_trains_a_distilled_drafter_from_the_committed_teacher(tmp_path, capsys):
    from validation.paths import zoo_dir
    from validation.zoo.train import DEFAULT_SPECS

    spec = next(s for s in DEFAULT_SPECS if s.distilled)
    for n in {spec.teacher, spec.init_from} - {None}:
        shutil.copy(zoo_dir() / f"{n}.safetensors", tmp_path / f"{n}.safetensors")
    # a smoke run: one optimiser step (1500 steps scaled by 0.0005, warm-up cut to it: a full
    # learning rate), evaluations scaled by 0.05 (the acceptance on 3 held-out windows and on
    # the teacher's 6-byte continuations of 3 prompts)
    assert main(["zoo", "train", "--seed", "0", "--out", str(tmp_path), "--only", spec.name,
                 "--steps-scale", "0.0005", "--eval-scale", "0.05", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "expected run time:" in out and f"acceptance by {spec.teacher}" in out
    assert spec.name in out.splitlines()[-1]
    rec = read_record(tmp_path / f"{spec.name}.safetensors")
    assert rec["teacher"] == spec.teacher
    assert rec["steps"] == max(1, round(spec.steps * 0.0005)) == 1
    assert "before" in rec["acceptance"] and "after" in rec["acceptance"]
    n_held, n_prompts, new = (max(1, round(n * 0.05)) for n in (
        spec.eval_windows, spec.eval_prompts, spec.eval_new_tokens))
    assert rec["val_windows"] == max(1, round(spec.val_windows * 0.05))
    for when in ("before", "after"):
        acc = rec["acceptance"][when]
        assert acc["heldout"]["positions"] == n_held * (256 - 64 + 1)
        assert acc["teacher_greedy"]["positions"] == n_prompts * (new + 1)
    # without its teacher in --out the command fails naming it
    empty = tmp_path / "empty"
    assert main(["zoo", "train", "--out", str(empty), "--only", spec.name,
                 "--steps-scale", "0.004", "--no-progress"]) == 2
    assert f"teacher {spec.teacher} is not published" in capsys.readouterr().err
