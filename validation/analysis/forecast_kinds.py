"""Forecasts of token-tree, adaptive-schedule and batched captures before they are captured
(``polyspec forecast --tree / --schedule / --batch``), from committed captures only.

- **Trees and schedules** (:func:`forecast_structured`): each pair's law fitted on the
  committed captures of the same pair (:func:`validation.analysis.structured.fit_structured_laws`:
  trees from tree captures with the same child sampling, HF schedules from chain and HF
  rounds), P1 for structures (:func:`polyspec_theory.predict_structured`), costs = the
  verify-path cost tables (:func:`validation.analysis.structured.verify_path_costs`: the cost
  curves as measured, the decoder's verify path) of the committed captures with the same
  models, each in units of its target's AR forward, element-wise median; for trees, each
  model's table times its tree-decoder factor (:func:`tree_factors`: measured time per
  forward / cost-curve timing, median over the other tree captures); decoder overhead per
  forward and per round fitted on the other captures of the same sampling mode. A two-model
  HF schedule at ``T = 0`` where R3 rejects independent rounds takes A1 under R1 instead
  (docs/theory.md, after A1): the per-prompt run law (R2), restarted every prompt.
- **Batched** (:func:`forecast_batch`): the ``predictive`` variant of
  :mod:`validation.analysis.batch_validate` (laws pooled over the batched and single-stream
  captures of the same pairs, the batched profile's ``T(b, m)`` times in-cascade factors
  learned on the other batched captures of the profile's machine, orchestration from the
  captures at the same ``b`` on that machine: :func:`same_device`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from polyspec_theory import FAMILIES, CostCurve, predict_batch, predict_structured
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.analysis.batch_validate import LawFits, capture_laws, predictive_costs
from validation.analysis.fits import fit_costs
from validation.analysis.relative import relative_error
from validation.analysis.residuals import overhead_model
from validation.analysis.structured import fit_structured_laws, structured_cascade
from validation.schemes import captures_of
from validation.schemes.chain import name as CHAIN
from validation.traces.batch import BatchCapture
from validation.traces.dataset import Capture, CaptureConfig

__all__ = ["SpecConfig", "spec_config", "forecast_structured", "forecast_batch",
           "structured_costs", "tree_factors", "spec_of", "structured_loo_errors",
           "batch_loo_errors", "same_device", "cost_sources", "machine_costs", "KindRequest",
           "batch_request", "structured_request", "forecast_request"]


@dataclasses.dataclass(frozen=True)
class SpecConfig(CaptureConfig):
    """A configuration not captured yet, shaped like a capture's header (what the law fits and
    cost sources read of a capture)."""

    header: dict
    name: str
    batch: int = 1
    summaries: tuple = ()

    trees = Capture.trees
    schedules = Capture.schedules
    tree_sampling = Capture.tree_sampling
    pair_kind = Capture.pair_kind
    structured = Capture.structured
    config_key = BatchCapture.config_key
    prompt_len = BatchCapture.prompt_len
    nominal_context = BatchCapture.nominal_context
    label = BatchCapture.label


def spec_config(spec, name: str = "forecast") -> SpecConfig:
    """The :class:`SpecConfig` of a configuration given as a
    :class:`~validation.capture.setup.CaptureSpec` (the capture it forecasts): ``models``,
    ``thresholds``, ``temperature``, ``tree`` (parent indices of a tree drafted at the bottom
    pair), ``schedules`` (one entry per pair: ``None`` or a schedule config such as
    ``{"kind": "hf", "start": 4, "min": 1, "max": 8}``), ``tree_sampling``, ``batches``
    (one batch size), ``prompt_len`` and ``max_new_tokens``."""
    models, thresholds, tree, schedules = spec.models, spec.thresholds, spec.tree, spec.schedules
    models = [str(m) for m in models]
    n = len(models)
    if n < 2:
        raise PolyspecInputError("models", "need at least two models")
    th = [as_int(t, f"thresholds[{i}]", low=1) for i, t in enumerate(thresholds)]
    if len(th) != n - 1:
        raise PolyspecInputError("thresholds", f"need {n - 1} entries")
    casc = {"models": [{"name": m} for m in models], "thresholds": th,
            "policy": "accumulate"}
    if tree is not None:
        casc["trees"] = [None] * (n - 2) + [{"parents": [int(p) for p in tree]}]
    if schedules is not None:
        if len(schedules) != n - 1:
            raise PolyspecInputError("schedules", f"need one entry per pair ({n - 1})")
        casc["schedules"] = list(schedules)
    header = {"cascade": casc,
              "temperature": as_real(spec.temperature, "temperature", low=0.0), "top_k": 0,
              "tree_sampling": spec.tree_sampling if tree is not None else None,
              "prompts": {"prompt_len": as_int(spec.prompt_len, "prompt_len", low=1),
                          "max_new_tokens": as_int(spec.max_new_tokens, "tokens", low=1)}}
    batch = 1 if spec.batches is None else spec.batches[0]
    out = SpecConfig(header=header, name=name, batch=as_int(batch, "batch", low=1))
    out.trees, out.schedules  # noqa: B018 (validates the structures now)
    return out


def cost_sources(spec, captures) -> list:
    """The captures :func:`structured_costs` takes cost tables from: those holding every model
    of ``spec`` at its temperature, with a measured AR forward of the target."""
    return [c for c in captures if not set(spec.models) - set(c.models)
            and c.temperature == spec.temperature
            and c.baselines[spec.models[0]].ar_forward_per_token]


def structured_costs(spec, captures) -> tuple[dict, float, list[str]]:
    """Per model of ``spec``: the element-wise median over the captures with the same models
    of their verify-path cost tables (m = 1 .. the largest verify the spec can make + 1) in
    units of that capture's target AR forward; the median ratio AR time per token / AR
    forward (sampling work the measured speedup's numerator includes); the sources."""
    sizes = [t + 1 for t in spec.thresholds]
    sizes += [tr.n_nodes + 1 for tr in (spec.trees or ()) if tr is not None]
    sizes += [(sc.max or 0) + 1 for sc in (spec.schedules or ()) if sc is not None]
    m = np.arange(1, sum(sizes) + 2)
    tabs: dict[str, list] = {name: [] for name in spec.models}
    ratios, used = [], []
    for c in cost_sources(spec, captures):
        ar_f = c.baselines[spec.models[0]].ar_forward_per_token
        raw = fit_costs(c, calibrate=False)
        for name in spec.models:
            tabs[name].append(np.asarray(raw[name].curve()(m), dtype=np.float64) / ar_f)
        ratios.append(c.ar_time_per_token / ar_f)
        used.append(c.name)
    if not used:
        raise PolyspecInputError("traces", f"no capture with the models {spec.models} at "
                                 f"temperature {spec.temperature:g} to take costs from")
    costs = {}
    facs = tree_factors(spec, captures) if spec.trees is not None else {}
    for name, tl in tabs.items():
        t = np.maximum(np.median(np.asarray(tl), axis=0), 0.0) * facs.get(name, 1.0)
        if name == spec.models[0]:
            t[0] = 1.0
        costs[name] = CostCurve.from_table([float(x) for x in t])
    return costs, float(np.median(ratios)), used


def tree_factors(spec, captures) -> dict[str, float]:
    """Per model of a tree configuration: the median over the tree captures with the same
    models and sampling setting of its measured mean time per forward in the tree decoder /
    the capture's own verify-path cost table at the size those forwards have (the verifier:
    the tree's nodes + 1; the drafter: one position) — the tree decoder's forwards (masked
    tree attention) cost more than the cost-curve timings; learned on other captures."""
    vals: dict[str, list] = {}
    for c in captures:
        if c.trees is None or c.trees[-1] is None or c.models != spec.models \
                or c.temperature != spec.temperature:
            continue
        raw = fit_costs(c, calibrate=False)
        sizes = {c.models[0]: c.trees[-1].n_nodes + 1, c.models[-1]: 1}
        for i, name in enumerate(c.models):
            if name not in sizes or not c.forward_count[i]:
                continue
            t = float(raw[name].curve()(np.array([sizes[name]]))[0])
            if t > 0:
                vals.setdefault(name, []).append(c.forward_s[i] / c.forward_count[i] / t)
    return {name: float(np.median(v)) for name, v in vals.items()}


def forecast_structured(spec, captures, cost_captures=None, law_captures=None) -> dict:
    """Predicted speedup of the tree / schedule configuration ``spec`` (module docstring):
    laws from ``captures`` (the spec's name left out; ``law_captures``: from these instead),
    costs from ``cost_captures`` (default ``captures``) with the same models."""
    others = [c for c in captures if c.name != spec.name]
    laws, info = fit_structured_laws(spec, sources=others if law_captures is None
                                     else list(law_captures))
    if laws is None:
        raise PolyspecInputError("acceptance", "some pair of the configuration was captured "
                                 "nowhere (with this structure kind and sampling setting)")
    pool = others if cost_captures is None else [c for c in cost_captures
                                                 if c.name != spec.name]
    costs, ar_ratio, used = structured_costs(spec, pool)
    ov = overhead_model(others, like=spec)
    unit = float(np.median([c.baselines[spec.models[0]].ar_forward_per_token for c in pool
                            if c.name in used]))
    src = others if law_captures is None else list(law_captures)
    out = {"acceptance_from": sorted({c.name for c in src for j in range(c.n - 1)
                                      for i in range(spec.n - 1)
                                      if c.pair_key(j) == spec.pair_key(i)}),
           "cost_source": "verify-path cost tables of " + ", ".join(used),
           "laws": [x["law"] for x in info]}
    runs = _hf_run_law(spec, src, costs, ov, unit)
    if runs is not None:
        tau_f, ov_tok, fwd, lt, extra = runs
        tau = tau_f + ov_tok
        return {"speedup": ar_ratio / tau, "time_per_token": tau * unit,
                "forward_time_per_token": tau_f * unit, "overhead_per_token": ov_tok * unit,
                "ar_time_per_token": ar_ratio * unit, "forwards_per_token": fwd,
                "level_time_per_token": [x * unit for x in lt], **out, **extra}
    pred = predict_structured(structured_cascade(spec, laws, costs)).prediction
    ov_tok = ov.per_token(pred) / unit
    tau = 1.0 / pred.speedup + ov_tok
    return {"speedup": ar_ratio / tau, "time_per_token": tau * unit,
            "forward_time_per_token": unit / pred.speedup, "overhead_per_token": ov_tok * unit,
            "ar_time_per_token": ar_ratio * unit,
            "forwards_per_token": [lv.forwards_per_token for lv in pred.levels],
            "level_time_per_token": [lv.forwards_per_token * lv.forward_cost * unit
                                     for lv in pred.levels],
            **out, "acceptance_model": "per-round"}


def _hf_run_law(spec, sources, costs, ov, unit):
    """A1 under R1 (docs/theory.md A1-R) for a two-model HF schedule at ``T = 0`` where R3
    rejects independent rounds on the target pair's rounds of ``sources``: per prompt the
    run law fitted by R2 (:func:`validation.analysis.run_forecast.prompt_run_laws`) and
    :func:`hf_two_model_runs` with the verify-path costs (units of the target's AR forward)
    over one prompt's rounds from the schedule's start (the decoder restarts it every
    prompt: the horizon is the tokens asked); the prompts weighed equally, as the chain
    forecast does. ``None`` where it does not
    apply (other structures, T > 0, R3 accepting independence): the per-round law stays.
    Returns (forward time per token, overhead per token, forwards per token per model, time
    per token per model, extra fields)."""
    from polyspec_theory.structures.schedule_models import hf_two_model_runs
    from validation.analysis.run_forecast import prompt_run_laws, run_law_decision

    if (spec.n != 2 or spec.temperature != 0 or spec.pair_kind(0) != "hf"
            or spec.trees is not None):
        return None
    key = spec.pair_key(0)
    decision = run_law_decision(sources, key)
    if decision is None or decision["independent"]:
        return None
    prompts = sorted({int(p) for c in sources if not c.structured and c.n >= 2
                      and c.pair_key(0) == key for p in np.unique(c.rounds[0].prompt)})
    laws, notes = prompt_run_laws(sources, key, prompts)
    # the decoder restarts the schedule every prompt (schedule_restart): A1's transient
    horizon = spec.header["prompts"]["max_new_tokens"]
    tgt, dr = costs[spec.models[0]], costs[spec.models[1]]
    rows = []
    for p in prompts:
        r = hf_two_model_runs(laws[p], spec.schedules[0], dr.t1, lambda m: float(tgt(m)),
                              horizon=horizon)
        tpr = r["tokens_per_round"]
        rows.append((r["time_per_round"] / tpr, 1.0 / tpr, r["drafts_per_round"] / tpr,
                     r["verify_per_round"] / tpr, r["drafts_per_round"] * dr.t1 / tpr))
    tau_f, f1, f2, t1, t2 = (float(x) for x in np.mean(np.asarray(rows), axis=0))
    ov_tok = ov.per_token_from_forwards(np.array([f1, f2])) / unit
    return tau_f, ov_tok, [f1, f2], [t1, t2], {
        "acceptance_model": "run law (A1 under R1, R2 per prompt, restarted every prompt)",
        "independence": decision, "run_law_prompts": len(prompts), "notes": notes}


def same_device(captures, device: str | None) -> list:
    """The captures whose header ``device_name`` is ``device`` (all of them when ``device`` is
    ``None``): in-cascade factors and orchestration times are properties of the machine, so
    a profile's are learned only on captures from the machine it was taken on."""
    if device is None:
        return list(captures)
    return [c for c in captures if c.header.get("device_name") == device]


def forecast_batch(spec, batch_captures, law_captures, profile, law_sources=None,
                   device: str | None = None) -> dict:
    """Predicted speedup (and throughput) of the batched configuration ``spec`` at
    ``spec.batch`` (module docstring; ``law_sources``: the captures the laws come from
    instead, e.g. the capture itself for the bias decomposition; ``device``: the profile's
    machine, whose batched captures alone give the in-cascade factors and the
    orchestration, :func:`same_device`)."""
    if not isinstance(spec, SpecConfig):
        raise PolyspecInputError("spec", "must be a SpecConfig")
    others = [c for c in batch_captures if c.name != spec.name]
    sources = others + list(law_captures) if law_sources is None else list(law_sources)
    laws, missing = capture_laws(spec, LawFits(FAMILIES)(spec, sources))
    if laws is None:
        raise PolyspecInputError("acceptance", f"no captured rounds of pair(s) {missing}")
    cs = predictive_costs(spec, same_device(others, device), profile, True)
    pr = predict_batch(cs.cascade(spec, laws), spec.batch)
    t_ar = cs.t_ar + cs.a
    s = t_ar / pr.time_per_token
    if not math.isfinite(s) or s <= 0:
        raise PolyspecInputError("costs", "the batched prediction is not a positive speedup")
    fwd = [lv.forwards_per_token for lv in pr.levels]
    # forward part of each level (the orchestration a_b per forward, o_b per verification
    # apart): T_i(b, m) = forward_cost - a_b
    lt = [lv.forwards_per_token * (lv.forward_cost - cs.a) for lv in pr.levels]
    return {"speedup": s, "time_per_token": pr.time_per_token, "ar_time_per_token": t_ar,
            "tokens_per_second": spec.batch / pr.time_per_token,
            "level_time_per_token": lt, "overhead_per_token": pr.time_per_token - sum(lt),
            "forwards_per_token": fwd,
            "acceptance_from": sorted({c.name for c in sources for j in range(c.n - 1)
                                       for i in range(spec.n - 1)
                                       if c.pair_key(j) == spec.pair_key(i)}),
            "cost_source": "batched profile x in-cascade factors; orchestration from "
                           + str(cs.sources.get("orchestration"))}


def spec_of(capture) -> SpecConfig:
    """The :class:`SpecConfig` of a capture (to forecast it from the others)."""
    trees = capture.cascade.get("trees")
    tree = list(trees[-1]["parents"]) if trees and trees[-1] is not None else None
    sch = capture.cascade.get("schedules")
    from validation.capture.setup import CaptureSpec

    return spec_config(CaptureSpec(
        capture.models, capture.thresholds, capture.temperature, tree=tree, schedules=sch,
        tree_sampling=capture.header.get("tree_sampling") or "distinct",
        batches=(getattr(capture, "batch", 1),),
        prompt_len=capture.header.get("prompts", {}).get("prompt_len", 64),
        max_new_tokens=capture.max_new_tokens or 128), name=capture.name)


def structured_loo_errors(captures, temperature: float | None = None,
                          kind: str | None = None, nodes: int | None = None) -> dict[str, float]:
    """``{name: forecast / measured - 1}`` of every structured capture (of pair kind ``kind``
    at the bottom pair and at ``temperature`` if given; trees of ``nodes / 2 .. 2 nodes``
    drafted nodes if given: errors grow with the tree), each forecast from the others."""
    out = {}
    for c in captures:
        if not c.structured or (temperature is not None and c.temperature != temperature):
            continue
        if kind is not None and c.pair_kind(c.n - 2) != kind:
            continue
        if nodes is not None and c.trees is not None and c.trees[-1] is not None \
                and not nodes / 2 <= c.trees[-1].n_nodes <= 2 * nodes:
            continue
        try:
            f = forecast_structured(spec_of(c), captures)
        except PolyspecInputError:
            continue
        out[c.name] = relative_error(f["speedup"], c.measured_speedup)
    return out


def batch_loo_errors(batch_captures, law_captures, profile) -> dict[str, float]:
    """``{name: forecast / measured - 1}`` of every batched capture, each from the others."""
    out = {}
    for c in batch_captures:
        try:
            f = forecast_batch(spec_of(c), batch_captures, law_captures, profile)
        except PolyspecInputError:
            continue
        out[c.name] = relative_error(f["speedup"], c.measured_speedup)
    return out


def chain_loo_errors(captures, *, temperature: float, models) -> dict[str, float]:
    """``{name: forecast / measured - 1}`` of the chain captures of ``models`` (any order) at
    ``temperature``, each forecast as a structured one from the others: the errors a
    structured forecast's interval takes when no capture of its kind exists yet."""
    return {c.name: forecast_structured(spec_of(c), captures)["speedup"]
            / c.measured_speedup - 1.0
            for c in captures_of(captures, CHAIN) if c.temperature == temperature
            and set(c.models) == set(models)}


class KindRequest(NamedTuple):
    """What ``polyspec forecast --tree / --schedule / --batch`` asks for: the configuration
    (``models``, target first, ``thresholds``, ``temperature``, at most one of ``tree``
    (parent indices) / ``schedules`` (configs per pair) and ``batch``), its ``name``, the
    committed captures (``traces``) and the extra sources (``batch_profile``, ``laws_from``,
    ``costs_from``: captures of the machine the forecast is for, :func:`machine_costs`);
    ``loo_errors``: whether the leave-one-out errors the default interval takes are computed
    (not when the interval is calibrated elsewhere, ``--interval-from``)."""

    models: tuple
    thresholds: tuple
    temperature: float
    traces: str
    name: str = "forecast"
    tree: tuple | None = None
    schedules: tuple | None = None
    tree_sampling: str = "distinct"
    batch: int | None = None
    batch_profile: str | None = None
    laws_from: str | None = None
    costs_from: str | None = None
    loo_errors: bool = True


def batch_request(req: KindRequest) -> tuple[dict, dict, str]:
    """The batch scheme's ``FORECAST_KIND``: :func:`forecast_batch` of ``req`` (needs its
    ``batch_profile`` and ``laws_from``), its batched captures' leave-one-out errors and the
    kind ``"batch"``; a configuration already captured is refused."""
    from validation.analysis.batch_validate import load_profile
    from validation.capture.profile import cpu_name
    from validation.capture.setup import CaptureSpec
    from validation.traces.batch import read_batch_traces

    if req.batch_profile is None or req.laws_from is None:
        raise PolyspecInputError("--batch", "needs --batch-profile and --laws-from")
    spec = spec_config(CaptureSpec(list(req.models), list(req.thresholds), req.temperature,
                                   batches=(req.batch,)), req.name)
    _read_option(req.laws_from, "--laws-from", check_only=True)  # before the long reads
    bcaps = read_batch_traces(req.traces)
    if any(c.config_key == spec.config_key and c.batch == spec.batch for c in bcaps):
        raise PolyspecInputError("--batch", "this configuration is already captured")
    laws = _read_option(req.laws_from, "--laws-from")
    prof = load_profile(req.batch_profile)
    device = _profile_device(req.batch_profile)
    fc = forecast_batch(spec, bcaps, laws, prof, device=device)
    here = cpu_name()
    if device is not None and device != here:  # the capture will run on this machine
        fc["notes"] = [f"the batched profile was taken on {device!r}, this machine is "
                       f"{here!r}: costs from another machine (a speedup is a ratio of "
                       "two costs of one machine); profile this machine idle first "
                       "(polyspec profile ... --batch, docs/validation.md)"]
    return fc, batch_loo_errors(bcaps, laws, prof) if req.loo_errors else {}, "batch"


def _profile_device(path) -> str | None:
    """The ``device`` a batched profile records (``None`` if it records none)."""
    import json
    from pathlib import Path

    d = json.loads(Path(path).read_text(encoding="utf-8"))
    dev = d.get("device") if isinstance(d, dict) else None
    return dev if isinstance(dev, str) and dev else None


def machine_costs(spec, captures) -> tuple[list | None, str | None]:
    """The captures of the machine a tree / schedule forecast is for (``--costs-from``) as
    its cost source, when they hold the spec's models at its temperature (and, for a tree,
    tree captures of those models for :func:`tree_factors`): a speedup is a ratio of one
    machine's costs, so tables from another CPU carry that CPU's ratios. Else ``None`` (the
    costs stay with the law captures) and a note saying so."""
    ok = bool(cost_sources(spec, captures)) and (spec.trees is None
                                                 or bool(tree_factors(spec, captures)))
    if ok:
        return list(captures), None
    return None, ("--costs-from holds no capture of these models at this temperature"
                  + (" with this structure" if spec.trees is not None else "")
                  + ": cost tables from the law captures (another machine's, if they are)")


def _read_option(path, option: str, *, check_only: bool = False) -> list:
    """The single-stream captures of the folder an option names; a folder that cannot be
    read is refused naming the option (the reader's own message after it). ``check_only``:
    only the folder's checks that need no full read (its files' first lines), ``[]``."""
    from validation.traces.records import read_traces, single_stream_files
    from validation.traces.schema import TraceError

    try:
        if check_only:
            single_stream_files(path)
            return []
        return read_traces(path)
    except TraceError as e:
        raise PolyspecInputError(option, e.reason) from None


def structured_request(req: KindRequest) -> tuple[dict, dict, str]:
    """The structured scheme's ``FORECAST_KIND``: :func:`forecast_structured` of ``req``'s
    tree or schedules (costs from ``costs_from`` where it holds them,
    :func:`machine_costs`), the leave-one-out errors of the captures of its kind (else the
    chain captures', with a note) and the kind ``"tree"`` / ``"schedule"``."""
    from validation.capture.setup import CaptureSpec

    tree = list(req.tree) if req.tree else None
    spec = spec_config(CaptureSpec(list(req.models), list(req.thresholds), req.temperature,
                                   tree=tree, schedules=req.schedules,
                                   tree_sampling=req.tree_sampling), req.name)
    for path, option in ((req.traces, "--traces"), (req.laws_from, "--laws-from"),
                         (req.costs_from, "--costs-from")):
        if path:  # every folder refused before any is read (a full read takes seconds)
            _read_option(path, option, check_only=True)
    caps = _read_option(req.traces, "--traces")
    if req.laws_from:
        caps += _read_option(req.laws_from, "--laws-from")
    here, note = (machine_costs(spec, _read_option(req.costs_from, "--costs-from"))
                  if req.costs_from else (None, None))
    fc = forecast_structured(spec, caps, cost_captures=here)
    if note:
        fc["notes"] = list(fc.get("notes", [])) + [note]
    if not req.loo_errors:
        return fc, {}, "tree" if tree else "schedule"
    errs = structured_loo_errors(caps, temperature=req.temperature,
                                 kind="tree" if tree else "hf",
                                 nodes=len(tree) - 1 if tree else None)
    if not errs:  # no capture of this kind yet: the chain forecasts' errors
        errs = chain_loo_errors(caps, temperature=req.temperature, models=list(req.models))
        fc["notes"] = list(fc.get("notes", [])) + [
            "no captured schedule: interval from the leave-one-out errors of the chain "
            "captures of these models"]
    return fc, errs, "tree" if tree else "schedule"


def forecast_request(req: KindRequest) -> tuple[dict, dict, str]:
    """``(forecast, leave-one-out errors by capture, kind)`` of ``req``: the scheme decided
    once by the theory's registry (:func:`polyspec_theory.schemes.scheme_named` on the
    request's features), then that scheme's forecast, its scheme module's ``FORECAST_KIND``
    (:func:`validation.schemes.command_hook`: :func:`batch_request`,
    :func:`structured_request`; the chain's is :mod:`validation.analysis.forecast`); a scheme
    with none is refused. The kind it returns is a forecasts file's (score.FORECAST_KINDS)."""
    from polyspec_theory.schemes import scheme_named
    from validation.schemes import command_hook

    scheme = scheme_named(structured=bool(req.tree or req.schedules), batch=req.batch)
    return command_hook(scheme, "FORECAST_KIND", "polyspec forecast --tree / --schedule / "
                        "--batch", "--batch")(req)
