"""Context-free levels on a fake clock for the batched decoder: every forward charges a known
``T(b, m)`` to the clock and returns the same law at every position, so acceptance at pair
``i`` is iid with ``alpha_i = sum_x min(p_i(x), p_{i+1}(x))`` and the decoder's measured
throughput can be compared with B2 exactly (no timing noise, no orchestration time)."""

from __future__ import annotations

import numpy as np
import torch

from polyspec_theory.core.costs import RooflineCost
from validation.capture.batch_models import BatchLevel


class FakeClock:
    """Seconds advanced only by :meth:`advance` (the levels' forwards)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += float(dt)


class ConstantLevel(BatchLevel):
    """A level whose law is ``probs`` at every position and whose forward costs
    ``cost(b, m)`` seconds of ``clock``."""

    kind = "constant"

    def __init__(self, name, probs, cost, clock: FakeClock, max_len=512):
        p = np.asarray(probs, dtype=np.float64)
        self.logp = torch.log(torch.from_numpy(p / p.sum()).to(torch.float32))
        self.name = name
        self.params = 0
        self.vocab_size = p.size
        self.max_len = max_len
        self.device = torch.device("cpu")
        self.cost = cost
        self.clock = clock

    def logits(self, seqs, ends):
        mj = self._counts(seqs, ends)
        m = max(int(mj.max()), 1)
        self.clock.advance(self.cost(self.batch, m))
        self.pos = np.asarray(ends, dtype=np.int64).copy()
        return self.logp.expand(self.batch, m, self.vocab_size), mj


def roofline(**kw):
    """``cost(b, m)`` of a :class:`RooflineCost` with these parameters, and its config."""
    rc = RooflineCost(**kw)
    return (lambda b, m: float(rc.exact(b, m))), rc.to_config()


# pair l compares factor l of the token: the verifier side A_l, the drafter side B_l
PAIR_FACTORS = ((np.array([0.55, 0.3, 0.15]), np.array([0.35, 0.35, 0.3])),
                (np.array([0.5, 0.3, 0.2]), np.array([0.3, 0.3, 0.4])),
                (np.array([0.6, 0.3, 0.1]), np.array([0.4, 0.3, 0.3])))


def product_laws(n: int, factors=PAIR_FACTORS):
    """Laws of ``n`` levels over tokens ``x = (u_0, .., u_{n-2})``: ``p_k = prod_l f_{k,l}``
    with ``f_{k,l} = A_l`` if ``k <= l`` else ``B_l``. Pair ``l`` (``p_l`` vs ``p_{l+1}``)
    differs only in factor ``l``, and every token the levels below emit has factor ``l``
    distributed as ``B_l`` whatever happened below (accepted, corrected, bonus), so the
    acceptance of pair ``l`` is iid Bernoulli ``sum min(A_l, B_l)`` per token — exactly the
    iid law of the theory. Returns ``(laws, alphas)``."""
    laws = []
    for k in range(n):
        p = np.ones(1)
        for lv in range(n - 1):
            f = factors[lv][0] if k <= lv else factors[lv][1]
            p = np.outer(p, f).ravel()
        laws.append(p)
    alphas = [float(np.minimum(*factors[lv]).sum()) for lv in range(n - 1)]
    return laws, alphas


COSTS = (dict(overhead=0.2, weight_time=1.0, compute_time=0.08),
         dict(overhead=0.02, weight_time=0.12, compute_time=0.01),
         dict(overhead=0.01, weight_time=0.02, compute_time=0.001),
         dict(overhead=0.005, weight_time=0.005, compute_time=0.0005))


def fake_cascade(n: int, clock: FakeClock, costs=COSTS, max_len=512):
    """``n`` constant levels (target first) with :func:`product_laws` and roofline costs,
    and their cascade config (iid laws, roofline costs; thresholds to be added)."""
    laws, alphas = product_laws(n)
    levels, models = [], []
    for i in range(n):
        fn, cfg = roofline(**costs[i])
        levels.append(ConstantLevel(f"m{i}", laws[i], fn, clock, max_len))
        models.append({"name": f"m{i}", "cost": cfg})
    return levels, {"models": models, "acceptance": [{"alpha": a} for a in alphas]}


def write_fake_traces(directory, cascades=((2, (3,)), (3, (3, 2))), batches=(1, 2, 4, 8),
                      prompts_per_batch=None, tokens=60, seed=0, cost_contexts=(8,)):
    """Batched traces of :func:`fake_cascade` levels on a fake clock (temperature 1), one per
    cascade and batch size, named ``fake<n>_b<b>.jsonl``; returns the paths."""
    from pathlib import Path

    from validation.capture.batch import (
        CostCells,
        batch_cost_records,
        batch_header,
        record_decodes,
    )
    from validation.capture.setup import CaptureSpec
    from validation.traces.records import TraceWriter

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for n, th in cascades:
        for b in batches:
            clock = FakeClock()
            levels, _ = fake_cascade(n, clock)
            k = prompts_per_batch(b) if prompts_per_batch else max(8 * b, 32)
            prompts = [[0, 1]] * k
            name = f"fake{n}_b{b}"
            spec = CaptureSpec([lv.name for lv in levels], list(th), temperature=1.0, seed=seed,
                               max_new_tokens=tokens, cost_repeats=1, batches=(b,))
            h = batch_header(spec, levels, name=name, prompts=prompts,
                             contexts=list(cost_contexts),
                             prompt_info={"prompt_len": 2, "max_new_tokens": tokens})
            path = d / f"{name}.jsonl"
            with TraceWriter(path, h) as w:
                for lv in levels:
                    for r in batch_cost_records(lv, b, [0, 1, 2] * 20, "start",
                                                CostCells(cost_contexts, 1), clock=clock):
                        w.write(r)
                record_decodes(spec, levels, prompts, w, clock=clock)
                w.write({"type": "end", "n_prompts": k})
            out.append(path)
    return out


def fake_profile(models=("m2",), batches=(1, 2, 4, 8), rows=16):
    """``{name: BatchTableCost}`` (seconds) of the fake levels' exact costs."""
    from polyspec_theory.core.costs import BatchTableCost

    out = {}
    for name in models:
        fn, _ = roofline(**COSTS[int(name[1:])])
        out[name] = BatchTableCost({str(b): [fn(b, m) for m in range(1, rows + 1)]
                                    for b in batches})
    return out
