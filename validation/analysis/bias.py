"""Where a forecast's error comes from, term by term, from the capture's own records.

``log(forecast / measured)`` of the speedup ``S = AR / tau`` splits exactly into

- ``ar``: the profile's autoregressive time per token vs the capture's interleaved AR runs;
- ``acceptance``: forwards per token from laws fitted on other captures vs from laws fitted on
  the capture's own rounds, per prompt (the same P1, the same costs);
- ``counts``: P1's forwards per token from the capture's own laws vs the forwards it counted
  (what P1 misses given the acceptance: correlation between rounds, block ends);
- ``forward_time``: the profile's in-cascade time per forward vs the capture's, per model (at
  the measured counts);
- ``overhead``: the fitted decoder overhead per token vs the capture's time outside forwards.

Each term is a difference of ``log`` time (or AR time) between two successive substitutions,
so the terms sum to ``log(forecast / measured)``; a positive term makes the forecast too high.
"""

from __future__ import annotations

import math

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.analysis.forecast import Config, Forecast, forecast

__all__ = ["decompose_forecast", "TERMS"]

TERMS = ("ar", "acceptance", "counts", "forward_time", "overhead")


def _own(capture, profile, policy: str) -> Forecast:
    """The forecast with acceptance laws fitted on the capture's own rounds, per prompt."""
    return forecast(Config.of(capture)._replace(policy=policy), [capture],
                    profile.cost_curves(), profile.ar_s,
                    prompts=[int(s["prompt"]) for s in capture.summaries])


def decompose_forecast(fc: Forecast, capture, profile=None, own=None) -> dict:
    """The exact split of ``log(fc.speedup / capture.measured_speedup)`` into :data:`TERMS`
    (module docstring), with per-model forwards and times per forward, forecast and measured.
    ``fc``: the forecast of ``capture`` (from other captures; any object with ``speedup``,
    ``time_per_token``, ``forwards_per_token``, ``level_time_per_token``,
    ``overhead_per_token``, ``ar_time_per_token``), ``profile``: the composition profile it
    used (chains), or ``own``: the same forecast with the capture's own laws (trees)."""
    if own is None:
        if profile is None:
            raise PolyspecInputError("own", "give the composition profile or the own-law "
                                     "forecast")
        own = _own(capture, profile, capture.policy)
    tok = capture.tokens
    cnt = np.asarray(capture.forward_count, dtype=np.float64)
    f_meas = cnt / tok
    t_meas = np.asarray(capture.forward_s, dtype=np.float64) / np.maximum(cnt, 1)
    f_fc = np.asarray(fc.forwards_per_token)
    t_fc = np.asarray(fc.level_time_per_token) / np.maximum(f_fc, 1e-300)  # profile s/forward
    f_own = np.asarray(own.forwards_per_token)
    ov_fc = fc.overhead_per_token
    ov_meas = capture.overhead_s / tok
    # successive substitutions: forecast -> own acceptance -> measured counts -> measured
    # forward times -> measured overhead (= the measured time per token)
    tau0 = fc.time_per_token
    tau1 = float(np.dot(f_own, t_fc)) + ov_fc
    tau2 = float(np.dot(f_meas, t_fc)) + ov_fc
    tau3 = float(np.dot(f_meas, t_meas)) + ov_fc
    tau4 = float(np.dot(f_meas, t_meas)) + ov_meas
    terms = {
        "ar": math.log(fc.ar_time_per_token / capture.ar_time_per_token),
        "acceptance": -math.log(tau0 / tau1),
        "counts": -math.log(tau1 / tau2),
        "forward_time": -math.log(tau2 / tau3),
        "overhead": -math.log(tau3 / tau4),
    }
    total = math.log(fc.speedup / capture.measured_speedup)
    models = {
        m: {"forwards_per_token": {"forecast": float(f_fc[i]), "own_acceptance": float(f_own[i]),
                                   "measured": float(f_meas[i])},
            "seconds_per_forward": {"forecast": float(t_fc[i]), "measured": float(t_meas[i])}}
        for i, m in enumerate(capture.models)}
    return {"name": capture.name, "forecast": fc.speedup, "measured": capture.measured_speedup,
            "log_error": total, "terms": terms,
            "dominant": max(terms, key=lambda k: abs(terms[k])),
            "residual": total - sum(terms.values()), "models": models,
            "ar_s": {"forecast": fc.ar_time_per_token, "measured": capture.ar_time_per_token},
            "overhead_per_token": {"forecast": ov_fc, "measured": ov_meas}}
