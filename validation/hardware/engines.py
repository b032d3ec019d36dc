"""How an engine runs a forward on top of the database's kernels (docs/theory.md HW2).

A real engine is slower than the sum of its kernels: the host builds each forward's inputs,
launches (or replays) a CUDA graph, samples and copies the sampled ids back (a device sync per
forward), and a TP group signals its ranks. The correction has six parameters, fitted on the
shared GPU tables (:mod:`validation.hardware.fit`) and carried to any GPU through that GPU's
own database entries:

``T_engine = kernel_scale * T_db(gemm tokens padded to the graph size) + per_forward_ms
+ per_forward_tp_ms [TP > 1] + per_sequence_ms * sequences``

plus ``per_sample_ms`` per token of a packed forward (nano-PEARL's target builds each verified
token's decode metadata on the host), and ``handshake_ms`` per step of a parallel draft-verify
method (two small broadcasts and the host bookkeeping between the drafter and the target
group). Decode forwards with at most the
largest graph size of tokens replay the graph captured for the next size up, so their GEMMs
run at the padded size (attention at the real one: padded slots have no cache); prefill runs
eagerly.

SSD's asynchronous drafter has its own host work (the speculation cache: per forward
``spec_forward_ms``, per branch token ``spec_branch_ms``) and its cache hits depend on how
often the target's token is among the drafter's next ``f - 1`` choices after its first
(``rank_coverage`` per rank); these three are fitted on the SSD table.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field

from polyspec_theory.errors import PolyspecInputError, as_real
from validation.hardware.database import ModelCosts

__all__ = ["Corrections", "EngineModel", "GRAPH_SIZES", "graph_padded", "PARAMETERS"]

# captured CUDA-graph batch sizes per engine family (tokens per decode forward)
GRAPH_SIZES = {
    "nano-vllm": (1, 2, 4, 8, *range(16, 513, 16)),
    "vllm": (1, 2, 4, *range(8, 513, 8)),
    "sglang": (1, 2, 4, 8, 12, 16, 24, *range(32, 161, 8)),
    "trtllm": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
}

PARAMETERS = ("kernel_scale", "per_forward_ms", "per_forward_tp_ms", "per_sequence_ms",
              "per_sample_ms", "handshake_ms")
# SSD's asynchronous speculation (fitted on the SSD table, docs/theory.md HW2)
ASYNC_PARAMETERS = ("spec_forward_ms", "spec_branch_ms", "rank_coverage")


def graph_padded(tokens: int, family: str) -> int:
    """The captured graph size a decode forward of ``tokens`` tokens replays (itself beyond
    the largest: eager)."""
    sizes = GRAPH_SIZES[family]
    if tokens > sizes[-1]:
        return tokens
    return sizes[bisect.bisect_left(sizes, tokens)]


@dataclass(frozen=True)
class Corrections:
    """The engine correction's parameters, each with its standard error and where it was
    fitted (``fitted_on``); :meth:`none` is the bare database."""

    kernel_scale: float = 1.0
    per_forward_ms: float = 0.0
    per_forward_tp_ms: float = 0.0
    per_sequence_ms: float = 0.0
    per_sample_ms: float = 0.0
    handshake_ms: float = 0.0
    spec_forward_ms: float = 0.0
    spec_branch_ms: float = 0.0
    rank_coverage: float = 1.0
    stderr: dict = field(default_factory=dict)
    fitted_on: str = "nothing (the bare database)"

    def __post_init__(self):
        for name in PARAMETERS + ASYNC_PARAMETERS:
            as_real(getattr(self, name), f"corrections.{name}",
                    low=0.0 if name != "kernel_scale" else 1e-3,
                    high=1.0 if name == "rank_coverage" else None)

    @classmethod
    def none(cls) -> Corrections:
        return cls()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, field_name: str = "corrections") -> Corrections:
        if not isinstance(d, dict):
            raise PolyspecInputError(field_name, "must be an object")
        unknown = set(d) - set(PARAMETERS) - set(ASYNC_PARAMETERS) - {"stderr", "fitted_on"}
        if unknown:
            raise PolyspecInputError(field_name, f"unknown field(s) {sorted(unknown)}")
        return cls(**{k: d[k] for k in d})


class EngineModel:
    """One model (or head) as an engine runs it: database kernels + :class:`Corrections`."""

    def __init__(self, costs: ModelCosts, family: str, corrections: Corrections):
        if family not in GRAPH_SIZES:
            raise PolyspecInputError("engine", f"unknown engine family {family!r}")
        self.costs = costs
        self.family = family
        self.c = corrections

    @property
    def tp(self) -> int:
        return self.costs.tp

    def host_ms(self, sequences: int) -> float:
        """The host's share of one forward over ``sequences`` sequences."""
        c = self.c
        if self.tp == 1:
            return c.per_forward_ms
        return c.per_forward_ms + c.per_forward_tp_ms + c.per_sequence_ms * sequences

    def kernels_ms(self, batch: int, m: int, kv: int, attention: str = "multi") -> float:
        """The database part, ``kernel_scale`` applied, GEMMs at the graph-padded size."""
        x = batch * m
        g = graph_padded(x, self.family)
        return self.c.kernel_scale * self.costs.forward(batch, m, kv, attention=attention,
                                                        gemm_tokens=g).ms

    def decode(self, batch: int, kv: int) -> float:
        """One decode step of ``batch`` sequences at KV length ``kv``, ms."""
        return self.kernels_ms(batch, 1, kv) + self.host_ms(batch)

    def verify(self, batch: int, m: int, kv: int, attention: str = "multi") -> float:
        """One forward over ``m`` tokens per sequence (a verify or a tree step), ms."""
        return self.kernels_ms(batch, m, kv, attention) + self.host_ms(batch)

    def packed(self, tokens: int, kv: int, sequences: int) -> float:
        """One forward over ``tokens`` independent decode samples of ``sequences`` sequences
        (nano-PEARL's target), ms."""
        return (self.kernels_ms(tokens, 1, kv, "packed") + self.host_ms(sequences)
                + self.c.per_sample_ms * tokens)

    def speculate(self, batch: int, branches: int, kv: int) -> float:
        """One forward of SSD's asynchronous drafter extending ``branches`` speculation
        branches of each of ``batch`` sequences by one token (packed decode samples), its host
        work per forward and per branch (``spec_forward_ms``, ``spec_branch_ms``), ms."""
        x = batch * branches
        return (self.kernels_ms(x, 1, kv, "packed") + self.c.spec_forward_ms
                + self.c.spec_branch_ms * x)

    def prefill(self, batch: int, prompt: int, cached: int = 0) -> float:
        """The eager prefill of ``batch`` prompts of ``prompt`` tokens, ``cached`` of each
        already in the prefix cache, ms."""
        return (self.c.kernel_scale * self.costs.prefill(batch, prompt, cached).ms
                + self.host_ms(batch))


def engine_model(model: str, gpu: str, engine: str, tp: int | None, corrections: Corrections,
                 *, head: dict | None = None, field_name: str = "model") -> EngineModel:
    """``model`` on ``gpu`` as ``engine`` runs it with ``tp``-way tensor parallelism (1 when
    not given)."""
    from validation.hardware.database import model_costs
    from validation.hardware.names import engine_named, gpu_system

    gpu_system(gpu, "gpu")
    e = engine_named(engine)
    try:
        costs = model_costs(model, gpu, e, tp or 1, head=head)
    except PolyspecInputError as err:
        msg = str(err).removeprefix(f"{err.field}: ")
        raise PolyspecInputError(field_name, msg) from None
    return EngineModel(costs, e.family, corrections)
