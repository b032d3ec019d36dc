"""polyspec: theory, simulation and validation of polybasic speculative decoding.

    import polyspec as ps
    cascade = ps.load_cascade("configs/default.json")
    ps.predict(cascade).speedup          # exact (P1)
    ps.simulate(cascade, tokens=10**6)   # Monte Carlo with a 95 % CI
    ps.validate("data/traces/cpu")       # predicted vs measured on captures
    ps.plan("configs/pool.json").best    # the best cascade from a pool of models
    ps.fit("vllm.log")["best"]           # acceptance law from a serving engine's output
    ps.calibrate("configs/calibration-eagle1.json").estimates  # unknown costs from runs

The mathematics is stated in docs/theory.md; the command line is ``polyspec --help``.
"""

from polyspec_theory.core.config import Cascade
from polyspec_theory.errors import PolyspecInputError

from .api import (
    calibrate,
    figures,
    fit,
    load_cascade,
    load_pool,
    plan,
    predict,
    profile,
    read_traces,
    simulate,
    validate,
    verify,
)

__all__ = [
    "PolyspecInputError",
    "Cascade",
    "load_cascade",
    "load_pool",
    "predict",
    "simulate",
    "verify",
    "read_traces",
    "validate",
    "plan",
    "figures",
    "fit",
    "calibrate",
    "profile",
]
