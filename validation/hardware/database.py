"""``T_b(m)`` from a measured per-operation database (docs/theory.md HW1).

A forward over ``m`` new tokens for each of ``b`` sequences whose KV caches hold ``s`` tokens
is priced operation by operation from aiconfigurator-core's database of kernel latencies
measured on the named GPU under the named engine:

* every operation but attention (embedding, norms, the GEMMs, activation, the TP all-reduces)
  at ``x = b*m`` tokens -- the database's own decode shape with ``x`` tokens;
* the LM head at ``b*m`` positions (a verify needs every position's logits; a prefill only the
  last: ``b``);
* attention, one of two kernel shapes:

  - ``"multi"``: each sequence's ``m`` queries read its KV cache once (a decode kernel with
    ``m`` query tokens): the database's decode attention at batch ``b``, KV length ``s + m``,
    with ``m*H`` query heads over the same ``H_kv`` KV heads -- the tile a grouped-query decode
    kernel runs for ``m`` query tokens;
  - ``"packed"``: the ``b*m`` tokens are independent decode samples, each reading its
    sequence's cache (nano-PEARL's target forward): decode attention at batch ``b*m``, KV
    length ``s + (m+1)//2``.

At ``m = 1`` both are the database's decode step exactly (:meth:`ModelCosts.forward` equals
``decode_step_latency(b, s, 1)``); the prefill of ``s`` tokens (``cached`` of them already in
the cache) is the database's own prefill (:meth:`ModelCosts.prefill`). Heads (EAGLE-3, MTP) are
their own shape (:func:`head_ops`). Nothing is fitted here.

The database is the optional extra ``polyspec[gpu]`` (``aiconfigurator-core``); without it
:func:`require_database` refuses in one line.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.hardware.names import Engine, gpu_system, model_source

__all__ = ["require_database", "database_version", "ModelCosts", "Forward", "model_costs",
           "head_ops", "HEAD_KINDS", "MAX_TOKENS", "MAX_KV"]

EXTRA = "pip install 'polyspec[gpu]' (aiconfigurator-core==0.12.0)"
HEAD_KINDS = ("eagle3", "mtp")
MAX_TOKENS = 1 << 17  # tokens in one forward
MAX_KV = 1 << 20      # KV length


def require_database(field: str = "--gpu"):
    """The ``aiconfigurator_core`` module, or a one-line refusal naming the extra."""
    try:
        import aiconfigurator_core
    except ImportError:
        raise PolyspecInputError(field, f"needs the GPU cost database: {EXTRA}") from None
    return aiconfigurator_core


def database_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("aiconfigurator-core")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - an odd install
        return "unknown"


@contextlib.contextmanager
def _quiet():
    """The database logs a line per fallback table it loads; a user sees none of them.
    Nested (already quiet): changes nothing (a level set clears every logger's cache)."""
    log = logging.getLogger("aiconfigurator_core")
    old = log.level
    if old == logging.ERROR:
        yield
        return
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


@dataclass
class Forward:
    """One priced forward: ``ms`` and each operation's share (ms) and database tier."""

    ms: float
    ops: dict = field(default_factory=dict)
    tiers: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"ms": self.ms, "ops": dict(self.ops), "tiers": dict(self.tiers)}


def _kind(op: dict) -> str:
    return next(iter(op))


def _with(op: dict, **changes) -> dict:
    out = copy.deepcopy(op)
    out[_kind(out)].update(changes)
    return out


class ModelCosts:
    """Per-operation costs of one model (or head) on one GPU, engine backend and TP size."""

    def __init__(self, model: str, gpu: str, backend: str, tp: int = 1, *, head: dict | None = None,
                 field_prefix: str = "model"):
        require_database()
        from aiconfigurator_core.sdk.config_builders import build_model_config
        from aiconfigurator_core.sdk.engine import (
            EngineHandle,
            _literal_backend_version,
            build_ops_json,
        )
        from aiconfigurator_core.sdk.models import get_model

        self.system = gpu_system(gpu, "gpu")
        if backend not in ("vllm", "sglang", "trtllm"):
            raise PolyspecInputError("engine", f"backend must be vllm, sglang or trtllm, got "
                                     f"{backend!r}")
        self.backend = backend
        self.tp = as_int(tp, "tp", low=1, high=64)
        path, origin = model_source(model, field_prefix)
        kw = dict(tp_size=self.tp, pp_size=1, attention_dp_size=1, moe_tp_size=1,
                  moe_ep_size=1, gemm_quant_mode=None, kvcache_quant_mode=None,
                  fmha_quant_mode=None, moe_quant_mode=None, comm_quant_mode=None,
                  forward_model=None, attention_backend=None)
        try:
            with _quiet():
                mc = build_model_config(**kw)
                net = get_model(path, mc, backend)
                self._handle = EngineHandle.compile(path, self.system, backend, tp_size=self.tp)
                self.version = _literal_backend_version(self.system, backend, None, None, None)
        except PolyspecInputError:
            raise
        except Exception as e:  # the database's own refusal (an unknown shape, no table)
            raise PolyspecInputError(field_prefix, f"the cost database cannot build {model!r} "
                                     f"on {self.system}/{backend} TP {self.tp}: "
                                     f"{' '.join(str(e).split())[:200]}") from None
        self.layers = int(net._num_layers)
        self.hidden = int(net._hidden_size)
        self.heads = int(net._num_heads)
        self.kv_heads = int(net._num_kv_heads)
        self.head_dim = int(net._head_size)
        self.inter = int(net._inter_size)
        self.vocab = int(net._vocab_size)
        gen = json.loads(build_ops_json(net.generation_ops))
        ctx = json.loads(build_ops_json(net.context_ops))
        name = f"{model}"
        if head is not None:
            gen, ctx = head_ops(gen, ctx, head, hidden=self.hidden, tp=self.tp)
            name = f"{head['kind']} head of {model}"
        bad = [_kind(o) for o in gen if "Attention" in _kind(o) or "MLA" in _kind(o)
               or "DSA" in _kind(o)]
        if any(k != "GenerationAttention" for k in bad):
            raise PolyspecInputError(field_prefix, f"{model!r}: attention kind {bad[0]} has no "
                                     "verify construction here (dense grouped-query attention "
                                     "only)")
        self._gen = gen
        self._ctx = ctx
        self.name = name
        self.provenance = {
            "source": f"aiconfigurator-core {database_version()} per-operation database",
            "system": self.system, "backend": backend, "backend_version": self.version,
            "model": name, "architecture": origin, "tp": self.tp,
        }

    # -- evaluation ---------------------------------------------------------------------------
    def _eval(self, ops: list, *, context: bool, batch: int, s: int, prefix: int = 0):
        if not ops:
            return []
        with _quiet():
            return self._handle.evaluate_ops_json(json.dumps(ops), is_context=context,
                                                  batch_size=int(batch), s=int(s),
                                                  prefix=int(prefix))

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one instance per model, kept for a run
    def _forward(self, batch: int, m: int, kv: int, attention: str, logits: str,
                 gemm_tokens: int) -> Forward:
        x = batch * m
        xg = max(gemm_tokens, x)
        attn = [o for o in self._gen if _kind(o) == "GenerationAttention"]
        lm = [o for o in self._gen
              if _kind(o) == "Gemm" and o["Gemm"]["name"].endswith("logits_gemm")]
        rest = [o for o in self._gen if o not in attn and o not in lm]
        with _quiet():  # once for the forward's evaluations
            vals = list(self._eval(rest, context=False, batch=xg, s=kv + 1))
            vals += self._eval(lm, context=False, batch=x if logits == "all" else batch, s=kv + 1)
            for op in attn:
                body = op["GenerationAttention"]
                if attention == "multi":
                    shaped = _with(op, n=body["n"] * m)
                    vals += self._eval([shaped], context=False, batch=batch, s=kv + m)
                else:
                    vals += self._eval([op], context=False, batch=x, s=kv + (m + 1) // 2)
        out = Forward(0.0)
        for name, ms, _energy, tier in vals:
            out.ops[name] = out.ops.get(name, 0.0) + float(ms)
            out.tiers[name] = tier
        out.ms = float(sum(out.ops.values()))
        return out

    def forward(self, batch, m, kv, *, attention: str = "multi", logits: str = "all",
                gemm_tokens: int | None = None) -> Forward:
        """A forward over ``m`` new tokens for each of ``batch`` sequences with ``kv`` tokens
        cached. ``gemm_tokens`` (>= batch*m): the token count the GEMMs run at (a CUDA graph
        padded to its captured size)."""
        b = as_int(batch, "batch", low=1, high=MAX_TOKENS)
        m = as_int(m, "m", low=1, high=MAX_TOKENS)
        kv = as_int(kv, "kv", low=0, high=MAX_KV)
        if b * m > MAX_TOKENS:
            raise PolyspecInputError("batch", f"batch*m = {b * m} tokens exceeds {MAX_TOKENS}")
        if attention not in ("multi", "packed"):
            raise PolyspecInputError("attention", f"must be multi or packed, got {attention!r}")
        if logits not in ("all", "last"):
            raise PolyspecInputError("logits", f"must be all or last, got {logits!r}")
        g = b * m if gemm_tokens is None else as_int(gemm_tokens, "gemm_tokens", low=b * m,
                                                      high=MAX_TOKENS)
        return self._forward(b, m, kv, attention, logits, g)

    def decode(self, batch, kv, *, gemm_tokens: int | None = None) -> float:
        """One decode step (one token per sequence), ms."""
        return self.forward(batch, 1, kv, gemm_tokens=gemm_tokens).ms

    @functools.lru_cache(maxsize=16384)  # noqa: B019
    def _prefill(self, batch: int, new: int, cached: int) -> Forward:
        out = Forward(0.0)
        for name, ms, _energy, tier in self._eval(self._ctx, context=True, batch=batch, s=new,
                                                  prefix=cached):
            out.ops[name] = out.ops.get(name, 0.0) + float(ms)
            out.tiers[name] = tier
        out.ms = float(sum(out.ops.values()))
        return out

    def prefill(self, batch, prompt, cached: int = 0) -> Forward:
        """The prefill of ``prompt`` tokens for each of ``batch`` sequences, ``cached`` of them
        already in the cache (a prefix-cache hit): the database's prefill, logits for the last
        position only."""
        b = as_int(batch, "batch", low=1, high=MAX_TOKENS)
        p = as_int(prompt, "prompt", low=1, high=MAX_KV)
        c = as_int(cached, "cached", low=0, high=p - 1)
        if b * (p - c) > 4 * MAX_TOKENS:
            raise PolyspecInputError("batch", f"a prefill of {b}x{p - c} tokens is beyond "
                                     "what is priced here")
        return self._prefill(b, p - c, c)

    def decode_reference(self, batch: int, kv: int) -> float:
        """The database's own decode step (its whole-model call), for the tests of HW1."""
        with _quiet():
            return float(self._handle.decode_step_latency(int(batch), int(kv), 1))

    def prefill_reference(self, batch: int, prompt: int, cached: int = 0) -> float:
        """The database's own prefill (its whole-model call)."""
        with _quiet():
            return float(self._handle.predict_prefill_latency(int(batch), int(prompt),
                                                              int(cached)))


def head_ops(gen: list, ctx: list, head: dict, *, hidden: int, tp: int) -> tuple[list, list]:
    """The operations of a one-layer draft head built on its target's layer shape.

    ``head``: ``{"kind": "eagle3" | "mtp", "draft_vocab_size": V (eagle3; default the target's
    vocabulary), "layers": 1}``. EAGLE-3: the layer's QKV projection reads ``2h`` inputs (the
    token embedding joined to the fused hidden state), an ``fc`` GEMM maps the target's three
    hidden states ``3h -> h`` (in the extend forward over verified tokens only: later draft
    steps feed the head's own state back), the LM head covers the draft vocabulary. MTP: an
    ``eh_proj`` GEMM ``2h -> h``
    and the target's full LM head. Each per-layer operation runs ``layers`` times, not the
    target's layer count."""
    kind = head.get("kind")
    if kind not in HEAD_KINDS:
        raise PolyspecInputError("head.kind", f"must be one of {', '.join(HEAD_KINDS)}, got "
                                 f"{kind!r}")
    layers = as_int(head.get("layers", 1), "head.layers", low=1, high=8)
    out = []
    for phase, ops in (("draft", gen), ("extend", ctx)):
        new = []
        lm = None
        for op in ops:
            k = _kind(op)
            body = op[k]
            per_layer = body.get("scale_factor", 1.0) not in (0.0, 1.0)
            o = _with(op, scale_factor=float(layers)) if per_layer else copy.deepcopy(op)
            if k == "Gemm" and body["name"].endswith("qkv_gemm"):
                o = _with(o, k=2 * hidden)
            if k == "Gemm" and body["name"].endswith("logits_gemm"):
                lm = o
                continue
            if k == "Embedding":
                continue  # the head shares the target's embedding lookup
            new.append(o)
        if lm is None:
            raise PolyspecInputError("head", "the target has no LM head operation to reshape")
        proj = _with(lm, name=lm["Gemm"]["name"].replace("logits_gemm", "fc_gemm"),
                     n=hidden, k=(3 if kind == "eagle3" else 2) * hidden, scale_factor=1.0)
        if kind == "eagle3":
            vocab = as_int(head.get("draft_vocab_size", lm["Gemm"]["n"] * tp),
                           "head.draft_vocab_size", low=1, high=1 << 22)
            lm = _with(lm, n=max(1, vocab // tp))
        with_proj = kind == "mtp" or phase == "extend"
        out.append([proj, *new, lm] if with_proj else [*new, lm])
    return out[0], out[1]


@functools.lru_cache(maxsize=256)
def _cached(model: str, system: str, backend: str, tp: int, head_json: str | None):
    head = None if head_json is None else json.loads(head_json)
    return ModelCosts(model, system, backend, tp, head=head)


def model_costs(model: str, gpu: str, engine: Engine | str, tp: int = 1,
                head: dict | None = None) -> ModelCosts:
    """A cached :class:`ModelCosts` (one per model, GPU, backend, TP and head shape)."""
    backend = engine.backend if isinstance(engine, Engine) else engine
    head_json = None if head is None else json.dumps(head, sort_keys=True)
    path = str(Path(model)) if "/" in model and Path(model).exists() else model
    return _cached(path, gpu_system(gpu), backend, int(tp), head_json)
