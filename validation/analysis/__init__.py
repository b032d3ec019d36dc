"""Analysis of captures, one module per purpose: fitted pieces shared by the others
(:mod:`.fits`), predicted vs measured (:mod:`.validate`), where the residual comes from
(:mod:`.residuals`), model insertion on real data (:mod:`.insertion`), and planner pools
built from captures (:mod:`.pool`)."""

from validation.analysis.fits import PairFit, capture_cascade, fit_costs, fit_pairs, predict_config
from validation.analysis.insertion import insertion_analysis
from validation.analysis.pool import pool_from_captures
from validation.analysis.residuals import decompose, lag1_correlation, overhead_model
from validation.analysis.validate import ConfigResult, ValidationResult, validate

__all__ = [
    "PairFit", "capture_cascade", "fit_costs", "fit_pairs", "predict_config",
    "insertion_analysis", "pool_from_captures", "decompose", "lag1_correlation",
    "overhead_model", "ConfigResult", "ValidationResult", "validate",
]
