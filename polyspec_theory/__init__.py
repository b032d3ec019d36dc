"""polyspec theory: acceptance-length laws, dualistic and polybasic speculative decoding,
Yin et al.'s Markov-chain theorems. Pure functions, no I/O (THEORY.md is the spec)."""

from ._input import PolyspecInputError
from .config import Cascade, Model
from .costs import CostCurve, cost_from_config
from .dualistic import (
    OptimalGamma,
    cor39_bound,
    dualistic_speedup,
    expected_emitted,
    leviathan_speedup,
    operations_factor,
    optimal_gamma,
)
from .laws import (
    LAW_FAMILIES,
    AcceptanceLaw,
    BetaMixed,
    FitResult,
    GaussianBaseline,
    GoodnessOfFit,
    IIDGeometric,
    Positional,
    best_fit,
    fit_laws,
    law_from_config,
)
from .polybasic import LevelPrediction, Prediction, emitted_law, predict, renewal_fill

__all__ = [
    "PolyspecInputError",
    "Cascade",
    "Model",
    "CostCurve",
    "cost_from_config",
    "OptimalGamma",
    "cor39_bound",
    "dualistic_speedup",
    "expected_emitted",
    "leviathan_speedup",
    "operations_factor",
    "optimal_gamma",
    "LAW_FAMILIES",
    "AcceptanceLaw",
    "BetaMixed",
    "FitResult",
    "GaussianBaseline",
    "GoodnessOfFit",
    "IIDGeometric",
    "Positional",
    "fit_laws",
    "best_fit",
    "law_from_config",
    "LevelPrediction",
    "Prediction",
    "emitted_law",
    "predict",
    "renewal_fill",
]

# Other modules append their re-export blocks below (each block extends __all__).

# --- Yin et al. (markov.py, yin.py) ---
from .markov import (  # noqa: E402
    MAX_SEQUENCE_LAW_SIZE,
    PROB_TOL,
    MarkovPair,
    as_chain,
    as_kernels,
    as_law,
    drop_support,
    logit_draft,
    mixture_draft,
    random_kernels,
    random_law,
    random_pair,
    sequence_law,
    state_marginals,
    step_tv,
    tv_distance,
)
from .yin import (  # noqa: E402
    BATCH_MODES,
    UNBIASED_TOL,
    BatchSaturation,
    ParetoFront,
    Y2Result,
    batch_expected_rejections,
    batch_improvement,
    batch_lower_bound,
    batch_output_law,
    batch_rejections,
    batch_saturation,
    batch_sequence_law,
    batch_step_rejection,
    chain_rejections,
    optimal_loss,
    optimal_resampling,
    output_law,
    output_tv,
    pareto_front,
    pareto_point,
    rejection_probability,
    require_over_acceptance,
    sd_acceptance,
    sd_expected_rejections,
    sd_output_kernels,
    sd_output_law,
    sd_rejections_dp,
    sd_rejections_tv,
    sd_residual,
    sd_sequence_law,
    unbiased_resampling,
    unbiased_resampling_chain,
    y2_chain,
    y2_step,
    yin_demo,
    yin_demo_chain,
)

__all__ += [
    "PROB_TOL",
    "MAX_SEQUENCE_LAW_SIZE",
    "MarkovPair",
    "as_law",
    "as_kernels",
    "as_chain",
    "tv_distance",
    "step_tv",
    "state_marginals",
    "sequence_law",
    "random_law",
    "random_kernels",
    "mixture_draft",
    "logit_draft",
    "drop_support",
    "random_pair",
    "UNBIASED_TOL",
    "BATCH_MODES",
    "sd_acceptance",
    "sd_residual",
    "sd_output_law",
    "sd_output_kernels",
    "sd_rejections_dp",
    "sd_rejections_tv",
    "sd_expected_rejections",
    "sd_sequence_law",
    "rejection_probability",
    "output_law",
    "chain_rejections",
    "unbiased_resampling",
    "unbiased_resampling_chain",
    "Y2Result",
    "y2_step",
    "y2_chain",
    "batch_step_rejection",
    "batch_output_law",
    "batch_rejections",
    "batch_expected_rejections",
    "batch_improvement",
    "batch_lower_bound",
    "batch_sequence_law",
    "BatchSaturation",
    "batch_saturation",
    "require_over_acceptance",
    "optimal_resampling",
    "optimal_loss",
    "output_tv",
    "pareto_point",
    "ParetoFront",
    "pareto_front",
    "yin_demo_chain",
    "yin_demo",
]
# --- end Yin et al. ---

# --- P2-P7, batched P1, symbolic cascade (bounds, approximation, insertion, stability,
# symbolic_cascade, batch) ---
from .approximation import (  # noqa: E402
    PaperApproximation,
    approximation_error,
    error_curve,
    identity_from_counts,
    identity_from_prediction,
    lemma31_time,
    paper_approximation,
)
from .bounds import (  # noqa: E402
    PhiBounds,
    exact_tail,
    forward_count_moments,
    hoeffding_tail,
    length_moments,
    phi_bounds,
    target_forwards_clt,
)
from .grid import GridPrediction, optimize_thresholds, predict_grid, predict_many  # noqa: E402
from .insertion import (  # noqa: E402
    DecisionConfidence,
    InsertionDecision,
    decision_confidence,
    insert_model,
    insertion_decision,
    paper_insertion_check,
    paper_insertion_condition,
)
from .stability import (  # noqa: E402
    VerificationComparison,
    beta_heterogeneity_gap,
    beta_variance_decomposition,
    cv_accepted,
    cv_dense_check,
    cv_derivative_coefficients,
    cv_emitted,
    cv_emitted_not_monotone,
    cv_general_proof,
    cv_monotone_certificate,
    greedy_acceptance,
    heterogeneity_gap,
    speculative_acceptance,
    verification_comparison,
)
from .symbolic_cascade import (  # noqa: E402
    SymbolicCascade,
    evaluate_against_predict,
    leviathan_derivation,
    symbolic_cascade,
    three_level_closed_form,
)

__all__ += [
    "PaperApproximation", "approximation_error", "error_curve", "identity_from_counts",
    "identity_from_prediction", "lemma31_time", "paper_approximation",
    "GridPrediction", "optimize_thresholds", "predict_grid", "predict_many",
    "PhiBounds", "exact_tail", "forward_count_moments", "hoeffding_tail", "length_moments",
    "phi_bounds", "target_forwards_clt",
    "DecisionConfidence", "InsertionDecision", "decision_confidence", "insert_model",
    "insertion_decision", "paper_insertion_check", "paper_insertion_condition",
    "VerificationComparison", "beta_heterogeneity_gap", "beta_variance_decomposition",
    "cv_accepted", "cv_dense_check", "cv_derivative_coefficients", "cv_emitted",
    "cv_emitted_not_monotone", "cv_general_proof", "cv_monotone_certificate",
    "greedy_acceptance", "heterogeneity_gap", "speculative_acceptance",
    "verification_comparison",
    "SymbolicCascade", "evaluate_against_predict", "leviathan_derivation", "symbolic_cascade",
    "three_level_closed_form",
]
# --- end P2-P7 block ---

# --- D1 capped-geometric derivation (symbolic.py) ---
from .symbolic import (  # noqa: E402
    DerivationStep,
    closed_forms,
    derivation,
    derivation_latex,
    limits_at_one,
)

__all__ += ["DerivationStep", "closed_forms", "derivation", "derivation_latex", "limits_at_one"]
# --- end D1 block ---

# --- cascade planner (planner.py, issue 8) ---
from .planner import (  # noqa: E402
    GreedyResult,
    GreedyStep,
    Plan,
    PlannedCascade,
    Pool,
    SearchStats,
    greedy_paper_rule,
    plan,
    plan_thresholds,
)

__all__ += ["GreedyResult", "GreedyStep", "Plan", "PlannedCascade", "Pool", "SearchStats",
            "greedy_paper_rule", "plan", "plan_thresholds"]
# --- end planner block ---

# --- hidden-regime acceptance (regimes.py, issue 8 on real traces) ---
from .regimes import HiddenRegimes, RegimeFit, RegimeLaw, fit_regimes  # noqa: E402

__all__ += ["HiddenRegimes", "RegimeFit", "RegimeLaw", "fit_regimes"]
# --- end hidden-regime block ---

# --- serving batches (batch_costs.py, serving.py, serving_plan.py; issue 19, B0-B6) ---
from .batch_costs import BatchCostCurve, BatchTableCost, RooflineCost  # noqa: E402
from .serving import (  # noqa: E402
    BatchLevel,
    BatchOptimum,
    BatchPoint,
    BatchPrediction,
    Crossover,
    batch_cascade,
    batch_cost,
    batch_sweep,
    crossover_batch,
    large_batch_limit,
    max_block_law,
    max_fill_bounds,
    max_fill_mean,
    optimize_batch_thresholds,
    predict_batch,
)
from .serving_plan import BatchPlan, plan_batch, plan_batches  # noqa: E402

__all__ += ["BatchCostCurve", "BatchTableCost", "RooflineCost", "BatchLevel", "BatchOptimum",
            "BatchPoint", "BatchPrediction", "Crossover", "batch_cascade", "batch_cost",
            "batch_sweep", "crossover_batch", "large_batch_limit", "max_block_law",
            "max_fill_bounds", "max_fill_mean", "optimize_batch_thresholds", "predict_batch",
            "BatchPlan", "plan_batch", "plan_batches"]
# --- end serving block ---
