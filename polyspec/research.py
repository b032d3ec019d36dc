"""The analyses behind the committed experiments (``experiments/``), by name: every script
there imports from :mod:`polyspec.api` and from here only, never a module of the layers
below, so the layers can move without breaking the scripts that made the committed numbers.

Each name is the object of the layer below it stands for (loaded on first use, so that
``import polyspec.research`` stays cheap).
"""

from __future__ import annotations

import importlib

# name -> "module:attribute"
EXPORTS = {
    # errors, configs and files
    "PolyspecInputError": "polyspec_theory.errors:PolyspecInputError",
    "read_config": "polyspec.configs:read_config",
    # the theory and the planner
    "predict": "polyspec_theory:predict",
    "Pool": "polyspec_theory.planning.pool:Pool",
    "plan": "polyspec_theory.planning.planner:plan",
    "plan_thresholds": "polyspec_theory.planning.planner:plan_thresholds",
    # our own traces and the cost profiles
    "read_trace": "validation.traces.records:read_trace",
    "read_traces": "validation.traces.records:read_traces",
    "is_batched_file": "validation.traces.records:is_batched_file",
    "read_batch_traces": "validation.traces.batch:read_batch_traces",
    "load_profiles": "validation.capture.composition_profile:load_profiles",
    "CompositionProfile": "validation.capture.composition_profile:CompositionProfile",
    "load_batch_profile": "validation.analysis.batch_validate:load_profile",
    "ProfileSpec": "validation.capture.profile:ProfileSpec",
    "profile_models": "validation.capture.profile:profile_models",
    # forecasts of captures and their decisions
    "Config": "validation.analysis.forecast:Config",
    "forecast": "validation.analysis.forecast:forecast",
    "forecast_capture": "validation.analysis.forecast:forecast_capture",
    "count_factors": "validation.analysis.forecast:count_factors",
    "measured_ci95": "validation.analysis.forecast:measured_ci95",
    "TERMS": "validation.analysis.bias:TERMS",
    "decompose_forecast": "validation.analysis.bias:decompose_forecast",
    "spec_of": "validation.analysis.forecast_kinds:spec_of",
    "forecast_structured": "validation.analysis.forecast_kinds:forecast_structured",
    "forecast_batch": "validation.analysis.forecast_kinds:forecast_batch",
    "Draws": "validation.analysis.plan_uncertainty:Draws",
    "plan_decisions": "validation.analysis.plan_uncertainty:plan_decisions",
    # GPU traces: PipeSpec runs and Spec-Bench answers
    "read_pipespec_dir": "validation.formats.pipespec:read_pipespec_dir",
    "measured_speedup": "validation.formats.pipespec:measured_speedup",
    "pipespec_leave_one_out": "validation.analysis.pipespec_forecast:leave_one_out",
    "pipespec_model_error": "validation.analysis.pipespec_forecast:model_error",
    "forecast_chain": "validation.analysis.pipespec_forecast:forecast_chain",
    "plan_dir": "validation.analysis.pipespec_forecast:plan_dir",
    "forecast_async": "validation.analysis.pipespec_async:forecast_async",
    "async_runs": "validation.analysis.pipespec_async:async_runs",
    "async_leave_one_out": "validation.analysis.pipespec_async:async_leave_one_out",
    "pipespec_async_model_error": "validation.analysis.pipespec_async:model_error",
    "validate_specbench": "validation.analysis.specbench:validate_specbench",
    # the zoo
    "zoo_dir": "validation.paths:zoo_dir",
    "load_split": "validation.zoo.data:load_split",
    "eval_windows": "validation.zoo.distill:eval_windows",
    "greedy_texts": "validation.zoo.distill:greedy_texts",
    "next_byte_laws": "validation.zoo.distill:next_byte_laws",
    "NGramModel": "validation.zoo.ngram:NGramModel",
    "load_gpt": "validation.zoo.weights:load_gpt",
    "GPTConfig": "validation.zoo.model:GPTConfig",
    "TrainRun": "validation.zoo.train:TrainRun",
    "TrainSpec": "validation.zoo.train:TrainSpec",
    "train_zoo": "validation.zoo.train:train_zoo",
    "write_training_record": "validation.zoo.train:write_training_record",
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module 'polyspec.research' has no attribute {name!r}")
    mod, attr = EXPORTS[name].split(":")
    value = getattr(importlib.import_module(mod), attr)
    globals()[name] = value
    return value
