"""Distillation of a drafter from the next larger model, and per-pair acceptance.

**Loss** (DistillSpec-style, token level): at every position of a training window the
student's next-byte law ``q`` is pulled towards the teacher's ``p`` (both at temperature 1,
the teacher frozen) by

- forward KL, ``KL(p || q) = sum_v p_v (log p_v - log q_v)`` (mass-covering),
- reverse KL, ``KL(q || p) = sum_v q_v (log q_v - log p_v)`` (mode-seeking),
- or the mixture ``w KL(p || q) + (1 - w) KL(q || p)``,

averaged over positions, in nats (:func:`distill_loss`). The teacher's logits are computed
on the fly from its published weights (fp16 safetensors upcast to fp32, exactly what the
decoder runs), so nothing is cached on disk.

**Acceptance of a pair** (verifier ``p``, drafter ``q``), measured teacher-forced on text
(held-out text, or the verifier's own greedy continuations) at every scored position:

- greedy (T = 0): ``1[argmax p = argmax q]`` — the probability that a greedy drafter's token
  is accepted by a greedy verifier;
- T = 1: ``sum_v min(p_v, q_v) = 1 - TV(p, q)`` — speculative sampling's per-token acceptance
  probability (docs/theory.md F2).

Both are averaged over positions in float64 (:func:`pair_acceptance`). Positions whose
context is shorter than ``min_context`` bytes are not scored (the decoder's prompts are 64
bytes long, so short contexts never occur there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["KL_KINDS", "parse_kl", "distill_loss", "next_byte_laws", "pair_acceptance",
           "greedy_texts", "greedy_continuations", "eval_windows", "PairAcceptance",
           "agreement_hazards"]

KL_KINDS = ("forward", "reverse", "mix")


def parse_kl(kind: str) -> tuple[str, float]:
    """``"forward"``, ``"reverse"`` or ``"mix:W"`` (weight W of the forward KL, 0 < W < 1)
    -> (kind, forward weight)."""
    if kind == "forward":
        return "forward", 1.0
    if kind == "reverse":
        return "reverse", 0.0
    if isinstance(kind, str) and kind.startswith("mix:"):
        try:
            w = float(kind.split(":", 1)[1])
        except ValueError:
            w = float("nan")
        if 0.0 < w < 1.0:
            return "mix", w
    raise ValueError(f"kl: must be 'forward', 'reverse' or 'mix:W' with 0 < W < 1, got {kind!r}")


def distill_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                 kind: str = "forward") -> torch.Tensor:
    """Mean over positions of the chosen KL between the teacher's and the student's
    next-token laws (nats). Logits of shape (..., V); the teacher is treated as a constant."""
    name, w = parse_kl(kind)
    s = F.log_softmax(student_logits.float(), dim=-1)
    t = F.log_softmax(teacher_logits.detach().float(), dim=-1)
    s, t = s.reshape(-1, s.shape[-1]), t.reshape(-1, t.shape[-1])
    total = s.new_zeros(())
    if w > 0.0:
        fwd = (t.exp() * (t - s)).sum(-1).mean()
        total = total + w * fwd
    if w < 1.0:
        rev = (s.exp() * (s - t)).sum(-1).mean()
        total = total + (1.0 - w) * rev
    return total


# ------------------------------------------------------------------------- acceptance
def eval_windows(data: np.ndarray, n_windows: int, seq_len: int) -> np.ndarray:
    """``n_windows`` evenly spaced windows of ``seq_len`` bytes of ``data``, (n, seq_len)."""
    data = np.asarray(data, dtype=np.uint8)
    if len(data) < seq_len:
        raise ValueError(f"data shorter ({len(data)}) than one window ({seq_len})")
    starts = np.linspace(0, len(data) - seq_len, n_windows).astype(np.int64)
    return data[starts[:, None] + np.arange(seq_len)[None, :]]


@torch.no_grad()
def next_byte_laws(model, windows: np.ndarray, min_context: int) -> np.ndarray:
    """float64 laws (n_windows * (seq_len - min_context + 1), V) of the byte after every
    prefix of length ``min_context..seq_len`` of each window (row-major: window, then
    position). ``model``: a zoo :class:`~validation.zoo.model.GPT` (one full forward per
    window; fp32 logits, softmax in float64) or an :class:`~validation.zoo.ngram.NGramModel`."""
    from validation.zoo.ngram import NGramModel

    windows = np.asarray(windows)
    n, L = windows.shape
    if not 1 <= min_context <= L:
        raise ValueError(f"min_context: must be in 1..{L}, got {min_context}")
    if isinstance(model, NGramModel):
        rows = []
        for w in windows:
            for t in range(min_context, L + 1):
                rows.append(model.probs(w[max(0, t - model.order) : t]))
        return np.stack(rows).astype(np.float64)
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    for i in range(0, n, 8):
        x = torch.from_numpy(windows[i : i + 8].astype(np.int64)).to(dev)
        lg = model(x)[:, min_context - 1 :].float()  # row t-1 = law of byte t
        out.append(torch.softmax(lg.double(), dim=-1).cpu().numpy())
    if was_training:
        model.train()
    return np.concatenate(out).reshape(-1, out[0].shape[-1])


@dataclass(frozen=True)
class PairAcceptance:
    """Acceptance of a drafter by a verifier, averaged over ``positions`` scored positions."""

    greedy: float  # P(argmax p = argmax q)
    one_minus_tv: float  # E[sum min(p, q)] = speculative sampling's acceptance at T = 1
    positions: int
    greedy_se: float  # standard errors of the means (positions treated as independent)
    one_minus_tv_se: float
    hazards: tuple[float, ...] | None = None  # greedy positional law (agreement_hazards)

    def to_dict(self) -> dict:
        d = {"greedy": round(self.greedy, 4), "one_minus_tv": round(self.one_minus_tv, 4),
             "positions": self.positions}
        if self.hazards is not None:
            d["greedy_positional"] = [round(h, 4) for h in self.hazards]
        return d


def pair_acceptance(verifier, drafter, windows: np.ndarray, min_context: int = 64,
                    verifier_laws: np.ndarray | None = None,
                    hazards_kmax: int = 0) -> PairAcceptance:
    """Greedy agreement and 1 - TV of ``drafter`` against ``verifier`` on ``windows``
    (see the module docstring); ``verifier_laws`` reuses precomputed verifier laws. With
    ``hazards_kmax > 0`` also the greedy positional law (:func:`agreement_hazards`; meaningful
    on the verifier's own greedy text)."""
    p = verifier_laws if verifier_laws is not None else next_byte_laws(verifier, windows,
                                                                       min_context)
    q = next_byte_laws(drafter, windows, min_context)
    if p.shape != q.shape:
        raise ValueError(f"verifier laws {p.shape} and drafter laws {q.shape} differ in shape")
    agree = (p.argmax(-1) == q.argmax(-1)).astype(np.float64)
    ov = np.minimum(p, q).sum(-1)
    n = len(agree)
    haz = None
    if hazards_kmax > 0:
        per = np.asarray(windows).shape[1] - min_context + 1
        haz = tuple(float(h) for h in agreement_hazards(agree.reshape(-1, per), hazards_kmax))
    return PairAcceptance(float(agree.mean()), float(ov.mean()), n,
                          float(agree.std() / math.sqrt(n)), float(ov.std() / math.sqrt(n)),
                          haz)


@torch.no_grad()
def greedy_continuations(model, prompts: torch.Tensor, new_tokens: int):
    """Greedy continuation of a batch of prompts by a zoo GPT in one batched, KV-cached pass.

    ``prompts``: int64 (B, P). Returns ``(tokens, logits)``: tokens (B, P + new_tokens) — the
    prompts followed by the model's greedy continuations — and fp32 logits
    (B, P + new_tokens, V) of the model at every position (row ``t`` is its law of token
    ``t + 1``; the last row, past the window, from one more cached step), through
    :meth:`~validation.zoo.model.GPT.forward_batched`. The tokens are
    what :func:`validation.schemes.chain.autoregressive` produces prompt by prompt (up to exact ties
    of the arg max in float rounding)."""
    was_training = model.training
    model.eval()
    cfg = model.cfg
    b, p = prompts.shape
    total = p + int(new_tokens)
    if total > cfg.block_size:
        raise ValueError(f"prompt + new tokens {total} exceeds block_size {cfg.block_size}")
    dev = model.tok.weight.device
    cache = model.new_batch_cache(b)
    toks = torch.empty((b, total), dtype=torch.long, device=dev)
    toks[:, :p] = prompts.to(dev)
    logits = torch.empty((b, total, cfg.vocab_size), dtype=torch.float32, device=dev)
    zeros = torch.zeros(b, dtype=torch.long, device=dev)
    logits[:, :p] = model.forward_batched(toks[:, :p], zeros, cache).float()
    for t in range(p, total):  # position t < block_size: its token goes through the cache
        toks[:, t] = logits[:, t - 1].argmax(-1)
        logits[:, t] = model.forward_batched(toks[:, t : t + 1], zeros + t, cache)[:, 0]
    if was_training:
        model.train()
    return toks, logits


def greedy_texts(model, data: np.ndarray, n_prompts: int, prompt_len: int, new_tokens: int,
                 batch: int = 16) -> np.ndarray:
    """Windows (n_prompts, prompt_len + new_tokens) of uint8: ``prompt_len`` bytes of ``data``
    at evenly spaced offsets followed by ``model``'s greedy continuation — the contexts a
    cascade sees at T = 0 (score them with ``min_context = prompt_len``)."""
    starts = np.linspace(0, len(data) - prompt_len - 1, n_prompts).astype(np.int64)
    out = []
    for i in range(0, n_prompts, batch):
        idx = starts[i : i + batch, None] + np.arange(prompt_len)[None, :]
        prompts = torch.from_numpy(np.asarray(data)[idx].astype(np.int64))
        toks, _ = greedy_continuations(model, prompts, new_tokens)
        out.append(toks.cpu().numpy().astype(np.uint8))
    return np.concatenate(out)


def agreement_hazards(agree: np.ndarray, kmax: int) -> np.ndarray:
    """Positional acceptance law of a greedy pair from teacher-forced agreement indicators
    ``agree`` (n_windows, n_positions) measured on the verifier's own greedy text:
    ``a_k = P(agree at t+k-1 | agree at t..t+k-2)`` over every start ``t`` whose run is
    observed that far inside its window (censoring-aware), k = 1..kmax, float64.

    On the verifier's greedy text a drafted token that agrees leaves the context equal to that
    text, so the accepted count of a greedy round starting at ``t`` is exactly the run of
    agreements from ``t``: this is the round's acceptance law (``{"positional": [...]}``)."""
    a = np.asarray(agree, dtype=bool)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError("agree: expected (n_windows, n_positions)")
    kmax = int(kmax)
    n = a.shape[1]
    out = np.empty(kmax, dtype=np.float64)
    prev = np.ones_like(a)  # R_0
    run = a  # R_k[:, t] = agree at t..t+k-1, defined for t = 0..n-k
    for k in range(1, kmax + 1):
        m = n - k + 1
        if m <= 0:
            out[k - 1 :] = out[k - 2]
            break
        if k > 1:
            run = run[:, :m] & a[:, k - 1 :]
        den = float(prev[:, :m].sum())
        out[k - 1] = float(run.sum()) / den if den > 0 else (out[k - 2] if k > 1 else 0.0)
        prev = run
    return out
