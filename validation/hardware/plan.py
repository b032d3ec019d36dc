"""The decision before renting a GPU (docs/theory.md HW6): per batch size, the best way to
decode -- no speculation, a draft-then-verify chain or cascade with its draft lengths (the
synchronised lockstep theory B0-B6 on the database's engine-corrected costs ``T(b, m)``), or
the parallel draft-verify scheme (PEARL, PL2's long-run rate) -- and the batch from which
speculation stops paying, with an interval.

A GPU pool (JSON or YAML) names the models and where their acceptance comes from::

    {"target": {"name": "Qwen/Qwen3-32B", "tp": 2},
     "drafters": [{"name": "Qwen/Qwen3-0.6B"}, {"name": "Qwen/Qwen3-1.7B"}],
     "acceptance_from": "data/gpu-tables/nanopearl_h200.json", "dataset": "GSM8K",
     "acceptance": {"Qwen/Qwen3-1.7B|Qwen/Qwen3-0.6B": 0.8},
     "prompt_len": 600, "output_len": 256, "batch": [1, 8, 32, 128],
     "max_draft": 8, "methods": ["chain", "pearl"]}

``acceptance`` (iid rates per ``verifier|drafter``) adds or overrides pairs; a pair with no
acceptance cannot be adjacent in a chain. Speedups are decode throughput over the target's
own decode at the same batch (prefill is the same on both sides and left out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError, as_int, require_keys
from polyspec_theory.schemes.pearl import RunAcceptance, pearl_step_costs, predict_pearl
from validation.hardware import methods
from validation.hardware.acceptance import AcceptanceLog
from validation.hardware.engines import Corrections, EngineModel, engine_model
from validation.hardware.forecast import Interval

__all__ = ["GpuPool", "read_pool", "plan_gpu", "Candidate", "crossover", "DEFAULT_BATCHES"]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
METHODS = ("chain", "pearl")
MAX_DRAFT = 32


@dataclass
class GpuPool:
    target: dict
    drafters: list
    acceptance: dict
    dataset: str | None
    prompt_len: int
    output_len: int
    batches: list
    max_draft: int
    methods: tuple
    origin: str = "pool"


def _model_entry(d, where: str) -> dict:
    if isinstance(d, str):
        d = {"name": d}
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"].strip():
        raise PolyspecInputError(where, "must be a model name or {\"name\": ..., \"tp\": N}")
    tp = as_int(d.get("tp", 1), f"{where}.tp", low=1, high=64)
    return {"name": d["name"].strip(), "tp": tp}


def read_pool(cfg: dict, base: Path, *, gamma_of, origin: str = "pool") -> GpuPool:
    """A :class:`GpuPool` from a parsed file; ``acceptance_from`` is read relative to the
    file's folder; ``gamma_of(row)``: the draft length a log row ran with."""
    if not isinstance(cfg, dict):
        raise PolyspecInputError("pool", "must be an object")
    require_keys(cfg, "pool", ["target", "drafters"],
                 ["acceptance_from", "acceptance", "dataset", "prompt_len", "output_len",
                  "batch", "max_draft", "methods", "name", "description"])
    target = _model_entry(cfg["target"], "pool.target")
    ds = cfg["drafters"]
    if not isinstance(ds, list) or not ds:
        raise PolyspecInputError("pool.drafters", "must be a non-empty list")
    drafters = [_model_entry(d, f"pool.drafters[{i}]") for i, d in enumerate(ds)]
    names = [target["name"], *(d["name"] for d in drafters)]
    if len(set(names)) != len(names):
        raise PolyspecInputError("pool.drafters", "names a model twice")
    dataset = cfg.get("dataset")
    acc = {}
    if cfg.get("acceptance_from"):
        p = Path(cfg["acceptance_from"])
        p = p if p.is_absolute() else base / p
        log = AcceptanceLog.read(p, "pool.acceptance_from")
        for d in drafters:
            est = log.alpha(target["name"], d["name"], dataset, gamma_of=gamma_of)
            if est is not None:
                acc[(target["name"], d["name"])] = (est.alpha, f"{p.name}: "
                                                    f"{len(est.sources)} row(s)")
    extra = cfg.get("acceptance", {})
    if not isinstance(extra, dict):
        raise PolyspecInputError("pool.acceptance", "must map \"verifier|drafter\" to a rate")
    for key, a in extra.items():
        parts = str(key).split("|")
        if len(parts) != 2 or not all(x in names for x in parts):
            raise PolyspecInputError(f"pool.acceptance.{key}", "must be \"verifier|drafter\" "
                                     "with both in the pool")
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a < 1:
            raise PolyspecInputError(f"pool.acceptance.{key}", f"must be a rate in [0, 1), "
                                     f"got {a!r}")
        acc[tuple(parts)] = (float(a), "the pool file")
    if not any(k[0] == target["name"] for k in acc):
        raise PolyspecInputError("pool.acceptance", "no drafter of the target has an "
                                 "acceptance (acceptance_from has none of the pairs on "
                                 f"{dataset}, and acceptance gives none)")
    batches = cfg.get("batch", list(DEFAULT_BATCHES))
    if not isinstance(batches, list) or not batches:
        raise PolyspecInputError("pool.batch", "must be a non-empty list of batch sizes")
    batches = sorted({as_int(b, "pool.batch", low=1, high=4096) for b in batches})
    ms = cfg.get("methods", list(METHODS))
    if not isinstance(ms, list) or not ms or any(m not in METHODS for m in ms):
        raise PolyspecInputError("pool.methods", f"must be a list from {list(METHODS)}, got "
                                 f"{ms!r}")
    return GpuPool(target, drafters, acc, dataset,
                   as_int(cfg.get("prompt_len", 512), "pool.prompt_len", low=1, high=1 << 20),
                   as_int(cfg.get("output_len", 256), "pool.output_len", low=2, high=1 << 20),
                   batches, as_int(cfg.get("max_draft", 8), "pool.max_draft", low=1,
                                   high=MAX_DRAFT), tuple(ms), origin)


@dataclass
class Candidate:
    """One way to decode: its speedup per batch size with 95 % bounds."""

    name: str
    kind: str
    speedup: list = field(default_factory=list)
    lo: list = field(default_factory=list)
    hi: list = field(default_factory=list)
    setting: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "speedup": self.speedup,
                "interval95": [[a, b] for a, b in zip(self.lo, self.hi, strict=True)],
                "setting": self.setting}


def _pool_config(pool: GpuPool, models: dict[str, EngineModel], kv: int) -> dict:
    """The house planner's pool config: ``batch_table`` costs ``T(b, m)``, m = 1..M."""
    mmax = pool.max_draft * len(models) + 2
    out = []
    for name, em in models.items():
        table = {str(b): [em.verify(b, m, kv) for m in range(1, mmax + 1)]
                 for b in pool.batches}
        if "1" not in table:
            table["1"] = [em.verify(1, m, kv) for m in range(1, mmax + 1)]
        out.append({"name": name, "cost": {"batch_table": table}})
    acc = {f"{v}|{d}": {"alpha": a} for (v, d), (a, _src) in pool.acceptance.items()}
    return {"name": pool.origin, "models": out, "acceptance": acc,
            "max_threshold": pool.max_draft, "time_unit": "ms"}


def crossover(batches, values) -> float | None:
    """The batch size (interpolated in log batch) where ``values`` first falls to 1 or below;
    ``None`` when it never does on the grid."""
    prev = None
    for b, v in zip(batches, values, strict=True):
        if v <= 1.0:
            if prev is None:
                return float(b)
            b0, v0 = prev
            t = (math.log(v0)) / (math.log(v0) - math.log(v)) if v0 != v else 0.0
            return float(math.exp(math.log(b0) + t * (math.log(b) - math.log(b0))))
        prev = (b, v)
    return None


def plan_gpu(pool: GpuPool, gpu: str, engine: str, c: Corrections, interval: Interval) -> dict:
    """Every candidate's speedup per batch, the best per batch, and where speculation stops
    paying (point and 95 % interval)."""
    from polyspec_theory.planning.pool import Pool
    from polyspec_theory.serving.batch import optimize_batch_thresholds
    from polyspec_theory.serving.plan import plan_batch

    kv = pool.prompt_len + pool.output_len // 2
    t = engine_model(pool.target["name"], gpu, engine, pool.target["tp"], c,
                     field_name="pool.target")
    models = {pool.target["name"]: t}
    for i, d in enumerate(pool.drafters):
        models[d["name"]] = engine_model(d["name"], gpu, engine, d["tp"], c,
                                         field_name=f"pool.drafters[{i}]")
    cands = [Candidate("no speculation", "none", [1.0] * len(pool.batches),
                       [1.0] * len(pool.batches), [1.0] * len(pool.batches),
                       [{}] * len(pool.batches))]
    best_rows = []
    q_chain = interval.half_width("sd-sync")
    if "chain" in pool.methods:
        hp = Pool.from_config(_pool_config(pool, models, kv))
        two = [(v, d) for (v, d) in pool.acceptance if v == pool.target["name"]]
        for v, d in two:
            cand = Candidate(f"{d.split('/')[-1]} -> {v.split('/')[-1]}", "chain")
            cas = hp.cascade((v, d), (1,))
            for b in pool.batches:
                opt = optimize_batch_thresholds(cas, b, pool.max_draft)
                cand.speedup.append(float(opt.speedup))
                cand.setting.append({"chain": [v, d], "thresholds": list(opt.thresholds),
                                     "gpus": pool.target["tp"]})
            cands.append(cand)
        casc = Candidate("best chain or cascade", "chain")
        for b in pool.batches:
            bp = plan_batch(hp, b)
            casc.speedup.append(float(bp.speedup))
            casc.setting.append({"chain": list(bp.chain), "thresholds": list(bp.thresholds),
                                 "certified": bp.certified, "gpus": pool.target["tp"]})
        if any(len(s["chain"]) > 2 for s in casc.setting):
            cands.append(casc)
        for cand in cands[1:]:
            cand.lo = [s * math.exp(-q_chain) for s in cand.speedup]
            cand.hi = [s * math.exp(q_chain) for s in cand.speedup]
    if "pearl" in pool.methods:  # the drafter on GPUs of its own
        q = interval.half_width("pearl")
        drafter_tp = {d["name"]: d["tp"] for d in pool.drafters}
        for (v, d), (alpha, _src) in pool.acceptance.items():
            if v != pool.target["name"]:
                continue
            dm = models[d]
            g = methods.pearl_gamma(t, dm)
            cand = Candidate(f"PEARL {d.split('/')[-1]} -> {v.split('/')[-1]}", "pearl")
            for b in pool.batches:
                costs = pearl_step_costs(dm.decode(b, kv),
                                         lambda n, b=b: t.packed(n, kv, b), g, b,
                                         t.c.handshake_ms)
                s = predict_pearl(RunAcceptance((), alpha), g, costs, t.decode(b, kv)).speedup
                cand.speedup.append(float(s))
                cand.lo.append(s * math.exp(-q))
                cand.hi.append(s * math.exp(q))
                cand.setting.append({"chain": [v, d], "gamma": g,
                                     "gpus": pool.target["tp"] + drafter_tp[d]})
            cands.append(cand)
    spec = [c_ for c_ in cands if c_.kind != "none"]
    for j, b in enumerate(pool.batches):
        top = max(cands, key=lambda c_, j=j: c_.speedup[j])
        best_rows.append({"batch": b, "best": top.name, "speedup": top.speedup[j],
                          "interval95": [top.lo[j], top.hi[j]], "setting": top.setting[j]})
    best_spec = [max(c_.speedup[j] for c_ in spec) for j in range(len(pool.batches))] \
        if spec else None
    out = {"gpu": gpu, "engine": engine, "target": pool.target, "kv_length": kv,
           "batches": pool.batches, "candidates": [c_.to_dict() for c_ in cands],
           "best": best_rows,
           "acceptance": {f"{v}|{d}": {"alpha": a, "source": s}
                          for (v, d), (a, s) in pool.acceptance.items()},
           "sources": [t.costs.provenance["source"] + f" ({t.costs.system}, "
                       f"{t.costs.backend} {t.costs.version})",
                       f"engine correction: {c.fitted_on}",
                       f"interval: {interval.calibrated_on}"]}
    if best_spec is not None:
        lo = [max(c_.lo[j] for c_ in spec) for j in range(len(pool.batches))]
        hi = [max(c_.hi[j] for c_ in spec) for j in range(len(pool.batches))]
        out["stops_paying"] = {
            "batch": crossover(pool.batches, best_spec),
            # the interval: from where its optimistic bound fails to where its cautious one does
            "interval95": [crossover(pool.batches, lo), crossover(pool.batches, hi)],
            "confident_from": next((b for b, h in zip(pool.batches, hi, strict=True)
                                    if h < 1.0), None),
        }
    return out

