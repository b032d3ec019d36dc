"""polyspec theory: acceptance-length laws, dualistic and polybasic speculative decoding,
serving batches, token trees and schedules, the planner, Yin et al.'s Markov-chain theorems.
Pure functions, no I/O; every numbered result is stated in docs/theory.md.

Sub-packages: ``core`` (laws, costs, the config, the P1 kernel, R1-R3), ``schemes`` (the
registry of schemes: ``predict`` in the cascade's scheme), ``closed_forms``
(D1, D2, symbolic P1), ``bounds`` (P2-P4, P6-P7), ``structures`` (trees, schedules, T1-T5,
A1-A4), ``serving`` (B0-B6), ``planning`` (grids, the planner, P5, calibration, coupling),
``yin`` (Y1-Y5); input checks in ``errors``. The names a user imports are listed below per
defining module and re-exported here (``__all__``); each loads its module on first use, so
importing the package costs only what is used (sympy and scipy load with the modules that
need them).
"""

from __future__ import annotations

import importlib

# submodule -> the names it exports here
_MODULES = {
    "errors": (
        "PolyspecInputError",
    ),
    "core.counts": (
        "AcceptanceCounts",
    ),
    "core.laws": (
        "AcceptanceLaw", "best_fit", "BetaMixed", "FAMILIES", "fit_laws", "GaussianBaseline",
        "IIDGeometric", "LAW_FAMILIES", "Positional",
    ),
    "core.fitting": (
        "fit_result", "FitResult", "goodness_of_fit", "GoodnessOfFit",
    ),
    "core.regimes": (
        "fit_regimes", "HiddenRegimes", "RegimeFit", "RegimeLaw",
    ),
    "core.costs": (
        "BatchCostCurve", "BatchTableCost", "cost_from_config", "CostCurve", "CostFit",
        "fit_cost_curve", "RooflineCost",
    ),
    "core.config": (
        "acceptance_from_config", "as_cascade", "Cascade", "check_async_cascade",
        "law_from_config", "Model", "model_from_config",
    ),
    "core.p1": (
        "block_bounds", "block_laws", "fill_blocks", "fold_levels", "FoldedLevel",
        "LevelPrediction", "Prediction", "renewal_masses", "emitted_law", "renewal_fill",
    ),
    "schemes": (
        "predict", "scheme_of",
    ),
    "core.runs": (
        "fit_run_law", "predict_runs", "run_law_report", "RunLaw", "RunPrediction",
        "sync_two_level",
    ),
    "closed_forms.dualistic": (
        "cor39_bound", "dualistic_speedup", "expected_emitted", "leviathan_speedup",
        "operations_factor", "optimal_gamma", "OptimalGamma",
    ),
    "closed_forms.symbolic": (
        "closed_forms", "derivation", "derivation_latex", "DerivationStep", "limits_at_one",
    ),
    "closed_forms.symbolic_cascade": (
        "evaluate_against_predict", "leviathan_derivation", "symbolic_cascade", "SymbolicCascade",
        "three_level_closed_form",
    ),
    "bounds.tails": (
        "exact_tail", "forward_count_moments", "hoeffding_tail", "length_moments", "phi_bounds",
        "PhiBounds", "target_forwards_clt",
    ),
    "bounds.approximation": (
        "approximation_error", "error_curve", "identity_from_counts", "identity_from_prediction",
        "lemma31_time", "paper_approximation", "PaperApproximation",
    ),
    "bounds.stability": (
        "beta_heterogeneity_gap", "beta_variance_decomposition", "cv_accepted", "cv_dense_check",
        "cv_derivative_coefficients", "cv_emitted", "cv_emitted_not_monotone", "cv_general_proof",
        "cv_monotone_certificate", "greedy_acceptance", "heterogeneity_gap",
        "speculative_acceptance", "verification_comparison", "VerificationComparison",
    ),
    "structures.trees": (
        "chain_tree", "expected_emitted_tree", "fit_sibling_law", "kary_tree", "ResidualLaw",
        "SiblingLaw", "Tree", "TreeLaw",
    ),
    "structures.tree_search": (
        "beam_tree", "best_width_tree", "best_width_trees", "max_expected_emitted",
        "max_expected_emitted_trees", "optimal_tree", "optimal_trees", "OptimalTree",
        "tree_round", "tree_speedup", "TreeRound", "widest_emitted_tree", "widest_emitted_trees",
    ),
    "structures.schedule": (
        "ConfidenceFit", "ConfidenceLaw", "ConfidenceSchedule", "fit_confidence_law", "HFSchedule",
        "stationary_distribution",
    ),
    "structures.schedule_models": (
        "confidence_two_model", "hf_two_model", "HFPrediction",
    ),
    "structures.structured": (
        "predict_structured", "StructuredPrediction",
    ),
    "serving.batch": (
        "batch_cascade", "batch_cost", "batch_sweep", "BatchLevel", "BatchOptimum", "BatchPoint",
        "BatchPrediction", "Crossover", "crossover_batch", "large_batch_limit", "max_block_law",
        "max_fill_bounds", "max_fill_mean", "optimize_batch_thresholds", "predict_batch",
    ),
    "serving.plan": (
        "BatchPlan", "plan_batch", "plan_batches",
    ),
    "planning.grid": (
        "GridPrediction", "optimize_thresholds", "predict_grid", "predict_many",
    ),
    "planning.pool": (
        "Pool",
    ),
    "planning.search": (
        "SearchStats",
    ),
    "planning.planner": (
        "greedy_paper_rule", "GreedyResult", "GreedyStep", "Plan", "plan", "plan_thresholds",
        "PlannedCascade",
    ),
    "planning.insertion": (
        "decision_confidence", "DecisionConfidence", "insert_model", "insertion_decision",
        "InsertionDecision", "paper_insertion_check", "paper_insertion_condition",
    ),
    "planning.calibration_problem": (
        "acceptance_from_taus", "CalibrationProblem", "cost_coefficients", "problem_from_config",
    ),
    "planning.calibration": (
        "calibrate", "Calibration", "choose_threshold", "ThresholdChoice",
    ),
    "planning.coupling": (
        "coupled_forwards", "fit_coupling", "group_rounds", "LevelCoupling", "select_coupling",
    ),
    "yin.markov": (
        "as_chain", "as_kernels", "as_law", "drop_support", "logit_draft", "MarkovPair",
        "MAX_SEQUENCE_LAW_SIZE", "mixture_draft", "PROB_TOL", "random_kernels", "random_law",
        "random_pair", "sequence_law", "state_marginals", "step_tv", "tv_distance",
    ),
    "pipelines.asynchronous": (
        "async_bounds", "async_pair", "async_rules", "async_tie_tolerance", "AsyncLevel",
        "AsyncPair", "AsyncPrediction", "lookahead_threshold", "MAX_VERIFY_TOKENS",
        "predict_async", "READY_WINDOW", "sync_ratio_bounds", "TIE_RTOL", "with_contention",
    ),
    "yin.theorems": (
        "batch_expected_rejections", "batch_improvement", "batch_lower_bound", "BATCH_MODES",
        "batch_output_law", "batch_rejections", "batch_saturation", "batch_sequence_law",
        "batch_step_rejection", "BatchSaturation", "chain_rejections", "optimal_loss",
        "optimal_resampling", "output_law", "output_tv", "pareto_front", "pareto_point",
        "ParetoFront", "rejection_probability", "require_over_acceptance", "sd_acceptance",
        "sd_expected_rejections", "sd_output_kernels", "sd_output_law", "sd_rejections_dp",
        "sd_rejections_tv", "sd_residual", "sd_sequence_law", "unbiased_resampling",
        "unbiased_resampling_chain", "UNBIASED_TOL", "y2_chain", "y2_step", "Y2Result", "yin_demo",
        "yin_demo_chain",
    ),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
