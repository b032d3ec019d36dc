"""Where the gap between P1 and a measured capture comes from, and the two effects that close
it without using the capture's own timings: decoder overhead and in-cascade slowdown.

- :func:`decompose` — exact identity per capture:
  ``tau_meas - tau_pred = sum_i (F_i^meas - F_i^pred) t_i^meas`` (forward counts: the
  acceptance model, including correlation between rounds) ``+ sum_i F_i^pred (t_i^meas -
  T_i^pred)`` (forward cost: context and timing drift) ``+ overhead / token`` (decoder time
  outside forwards); plus the AR side ``T_1(1)`` vs the measured AR time per token.
- :func:`overhead_model` — decoder overhead ``o_fwd * forwards + o_round * verify rounds``,
  least squares over other captures.
- :func:`slowdown_ratios` / :func:`slowdown_factor` — how much slower each model runs inside
  a cascade (other models evict its weights from the CPU caches between its forwards) than
  in its baselines, per role (verify / bottom), learned on other captures.
- :func:`lag1_correlation` — correlation of ``A/G`` between consecutive rounds of a level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.p1 import Prediction
from validation.analysis.fits import fit_costs, predict_config
from validation.traces.dataset import Capture, Rounds

__all__ = ["OverheadModel", "overhead_model", "slowdown_ratios", "slowdown_factor", "role",
           "lag1_correlation", "decompose"]


@dataclass(frozen=True)
class OverheadModel:
    """Decoder overhead (seconds) = ``per_forward * forwards + per_round * verify rounds``."""

    per_forward: float
    per_round: float
    fitted_on: tuple[str, ...]

    def per_token(self, pred: Prediction) -> float:
        fwd = sum(lv.forwards_per_token for lv in pred.levels)
        rounds = sum(lv.forwards_per_token for lv in pred.levels[:-1])
        return self.per_forward * fwd + self.per_round * rounds

    def per_token_from_forwards(self, forwards_per_token: np.ndarray) -> float:
        """The same with forwards per token of each model given (target first)."""
        f = np.asarray(forwards_per_token, dtype=np.float64)
        return self.per_forward * float(f.sum()) + self.per_round * float(f[:-1].sum())


def overhead_model(captures, exclude: str | None = None,
                   like: Capture | None = None) -> OverheadModel:
    """Least-squares (non-negative) overhead coefficients on the captures except ``exclude``;
    with fewer than 3 configurations only ``per_forward`` is fitted. ``like``: use only
    captures with the same sampling mode (greedy vs sampled: sampling adds per-round work)
    when at least two such remain."""
    use = [c for c in captures if c.name != exclude]
    if like is not None:
        same = [c for c in use if (c.temperature == 0) == (like.temperature == 0)]
        if len(same) >= 2:
            use = same
    if not use:
        return OverheadModel(0.0, 0.0, ())
    y = np.array([c.overhead_s for c in use])
    fwd = np.array([float(sum(c.forward_count)) for c in use])
    rnd = np.array([float(sum(r.n for r in c.rounds)) for c in use])
    # weight each configuration equally in relative terms (scale by its wall time)
    w = 1.0 / np.array([c.wall_s for c in use])
    if len(use) >= 3:
        from scipy.optimize import nnls

        X = np.stack([fwd, rnd], axis=1) * w[:, None]
        coef, _ = nnls(X, y * w)
        return OverheadModel(float(coef[0]), float(coef[1]), tuple(c.name for c in use))
    pf = max(float(np.dot(fwd * w, y * w) / np.dot(fwd * w, fwd * w)), 0.0)
    return OverheadModel(pf, 0.0, tuple(c.name for c in use))


def role(capture: Capture, i: int) -> str:
    """``"bottom"`` for the smallest model (it only drafts), else ``"verify"``."""
    return "bottom" if i == capture.n - 1 else "verify"


def slowdown_ratios(capture: Capture, fits) -> dict:
    """Measured mean forward time / P1's expected forward cost (calibrated costs at the
    capture's contexts, with its extra verify positions) per (model, role)."""
    costs = fit_costs(capture)
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    extra = [r.extra_positions for r in capture.rounds]
    pred = predict_config(capture, fits, costs, None, contexts=ctxs, extra_positions=extra)
    out = {}
    for i, name in enumerate(capture.models):
        cnt = capture.forward_count[i]
        if cnt and pred.levels[i].forward_cost > 0:
            out[(name, role(capture, i))] = (capture.forward_s[i] / cnt
                                             / pred.levels[i].forward_cost)
    return out


def slowdown_factor(ratios: dict, name: str, model_role: str, exclude: str, like: Capture,
                    captures) -> float:
    """Median in-cascade slowdown of (model, role) over the OTHER captures of the same
    sampling mode (all modes if none; 1 if the pair was never seen elsewhere). ``ratios``:
    :func:`slowdown_ratios` per capture name."""
    def collect(pool):
        return [ratios[c.name][(name, model_role)] for c in pool
                if c.name != exclude and (name, model_role) in ratios[c.name]]

    vals = collect([c for c in captures if (c.temperature == 0) == (like.temperature == 0)])
    if not vals:
        vals = collect(captures)
    return float(np.median(vals)) if vals else 1.0


def lag1_correlation(r: Rounds) -> tuple[float, float, int]:
    """Pearson correlation of ``A/G`` between consecutive rounds of one level within a prompt,
    its standard error ``1/sqrt(pairs)`` (under independence) and the number of pairs."""
    if r.n < 3:
        return math.nan, math.nan, 0
    x = r.A / r.G
    same = r.prompt[1:] == r.prompt[:-1]
    a, b = x[:-1][same], x[1:][same]
    k = int(a.size)
    if k < 3 or a.std() == 0 or b.std() == 0:
        return math.nan, math.nan, k
    return float(np.corrcoef(a, b)[0, 1]), 1.0 / math.sqrt(k), k


def decompose(capture: Capture, pair_fits, costs, best: Prediction,
              families) -> tuple[dict, dict]:
    """The exact decomposition of ``tau_meas - tau_pred`` for the plain best-law prediction
    ``best`` (module docstring) with its relative shares and the dominant one; and per model
    the measured and predicted forwards per token and forward costs."""
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    tok = capture.tokens
    f_meas = np.array(capture.forward_count, dtype=np.float64) / tok
    t_meas = np.array(capture.forward_s) / np.maximum(np.array(capture.forward_count), 1)
    f_pred = np.array([lv.forwards_per_token for lv in best.levels])
    t_pred = np.array([lv.forward_cost for lv in best.levels])
    tau_meas = capture.time_per_token
    tau_pred = best.time_per_token
    counts_term = float(np.dot(f_meas - f_pred, t_meas))
    cost_term = float(np.dot(f_pred, t_meas - t_pred))
    overhead_term = capture.overhead_s / tok
    # context part of the cost term: P1 costs at the capture contexts vs reference
    ctx_only = predict_config(capture, pair_fits, costs, None, contexts=ctxs)
    context_term = ctx_only.time_per_token - tau_pred
    ar_pred = best.autoregressive_time_per_token
    # correlation part of the count term: positional (non-parametric) law vs measured counts
    pos = predict_config(capture, pair_fits, costs, "positional") if "positional" in families \
        else best
    f_pos = np.array([lv.forwards_per_token for lv in pos.levels])
    dep_term = float(np.dot(f_meas - f_pos, t_meas))
    out = {
        "tau_measured": tau_meas,
        "tau_predicted": tau_pred,
        "forward_counts": counts_term,
        "forward_counts_beyond_positional_law": dep_term,
        "forward_cost": cost_term,
        "forward_cost_context_drift": context_term,
        "overhead": overhead_term,
        "ar_measured": capture.ar_time_per_token,
        "ar_predicted": ar_pred,
        "relative": {
            "forward_counts": counts_term / tau_meas,
            "forward_cost": cost_term / tau_meas,
            "overhead": overhead_term / tau_meas,
            "ar_baseline": capture.ar_time_per_token / ar_pred - 1.0,
        },
    }
    rel = out["relative"]
    out["dominant"] = max(rel, key=lambda k: abs(rel[k]))
    forwards = {
        name: {"measured": float(f_meas[i]), "predicted": float(f_pred[i]),
               "measured_cost": float(t_meas[i]), "predicted_cost": float(t_pred[i])}
        for i, name in enumerate(capture.models)}
    return out, forwards
