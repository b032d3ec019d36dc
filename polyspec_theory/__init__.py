"""polyspec theory: acceptance-length laws, dualistic and polybasic speculative decoding,
Yin et al.'s Markov-chain theorems. Pure functions, no I/O (THEORY.md is the spec)."""

from ._checks import PolyspecInputError
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
    compare_laws,
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
    "compare_laws",
    "law_from_config",
    "LevelPrediction",
    "Prediction",
    "emitted_law",
    "predict",
    "renewal_fill",
]

# Other modules append their re-export blocks below (each block extends __all__).
