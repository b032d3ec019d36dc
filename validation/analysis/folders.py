"""``polyspec validate`` on a folder of GPU runs, by the folder's format
(:func:`validation.formats.detect_dir`): PipeSpec runs -- every synchronous cascade run
forecast from the others (leave-one-out, :mod:`validation.analysis.pipespec_forecast`); Spec-Bench
answers -- the per-category cost model left out by category
(:mod:`validation.analysis.specbench`)."""

from __future__ import annotations

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation import formats


def _pipespec(directory, costs_from=None) -> dict:
    from validation.analysis.pipespec_forecast import leave_one_out, require_baselines
    from validation.formats.pipespec import read_pipespec_dir

    runs = read_pipespec_dir(directory)
    missing = require_baselines(runs, directory)
    configs = leave_one_out(runs)
    if not configs:
        why = "".join(f"; chains into {m} have no greedy baseline" for m in missing)
        raise PolyspecInputError(str(directory), "no synchronous cascade run whose pairs "
                                 f"appear in other runs: nothing to forecast{why}")
    e = np.abs([c["error"] for c in configs])
    return {"format": "pipespec", "configs": configs, "median_abs_error": float(np.median(e)),
            "max_abs_error": float(e.max()), "headline": "leave-one-out",
            "notes": [f"chains into {m} not forecast: no greedy baseline of {m} "
                      "(greedy_<model>.json)" for m in missing]}


def _specbench(directory, costs_from=None) -> dict:
    from validation.analysis.specbench import validate_specbench

    rep = validate_specbench(directory, costs_from=costs_from)
    rep["comparison_proportional"] = {
        k: v for k, v in validate_specbench(directory, proportional=True, n_boot=1,
                                            costs_from=costs_from).items()
        if k == "per_method"}
    return rep


# a folder format -> its validation; ``costs_from`` (another folder's costs) only where the
# validation takes it
VALIDATE = {"pipespec": (_pipespec, False), "specbench": (_specbench, True)}


def validate_folder(directory, costs_from=None) -> dict | None:
    """The validation report of a folder of GPU runs; ``None`` when the folder is not one
    (our own traces are validated by :func:`validation.analysis.validate.validate`)."""
    fmt = formats.detect_dir(directory)
    if fmt is None or fmt.name not in VALIDATE:
        if costs_from is not None:
            raise PolyspecInputError("--costs-from", "only for a Spec-Bench answer folder")
        return None
    fn, takes_costs = VALIDATE[fmt.name]
    if costs_from is not None:
        other = formats.detect_dir(costs_from)
        if not takes_costs:
            raise PolyspecInputError("--costs-from", "only for a Spec-Bench answer folder")
        if other is None or other.name != fmt.name:
            raise PolyspecInputError("--costs-from", f"{costs_from} is not a Spec-Bench answer "
                                     "folder")
    return fn(directory, costs_from)


def forecast_folder(directory, names, theta: int, precisions=None, mode: str | None = None):
    """``forecast --thresholds θ`` on a folder of PipeSpec runs: the configuration ``names``
    (smallest first) at draft length ``θ`` (their lookahead
    :func:`~validation.formats.pipespec.lookahead_of`) with the decoder of ``mode``'s scheme
    (default: the synchronous chain), its scheme module's ``FORECAST_FOLDER``
    (:func:`validation.schemes.command_hook`); a scheme without one is refused."""
    from polyspec_theory.schemes import DEFAULT_MODE, scheme_named
    from validation.formats.pipespec import lookahead_of
    from validation.schemes import command_hook

    scheme = scheme_named(mode or DEFAULT_MODE)
    forecast_dir = command_hook(scheme, "FORECAST_FOLDER", "forecast on GPU runs", "--mode")
    return forecast_dir(directory, names, lookahead_of(theta, scheme), precisions)
