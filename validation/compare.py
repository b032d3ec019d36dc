"""Predicted vs measured speedup on captured configurations, and where the residual comes from.

Input: :class:`ConfigCapture` objects (one captured configuration each: the cascade's
per-round records, its decode totals and the per-model baselines interleaved in the same
capture; built from trace files by :func:`validation.trace_captures.load_captures` or by the
synthetic decoder of :mod:`validation.synthetic`).

Pipeline (:func:`validate`):

1. **Laws.** Per configuration and adjacent pair, every law family is fitted by censored MLE
   on that capture's ``(A, G)`` rounds and ranked by AIC
   (:func:`validation.fitting.fit_laws`); "best" = each pair's AIC-best law outside the
   Gaussian baseline (``laws="config"``, the default). Generalization checks reported too:
   laws pooled per pair ``(verifier, drafter, temperature, top_k)`` over every
   configuration using it (THEORY §1: the pair's acceptance does not depend on how the
   drafter's tokens were produced), and "holdout": pooled over the OTHER configurations only.
2. **Costs.** Per configuration and model, ``T_i(m)`` (and its context slope) from that
   capture's baseline timings (:func:`validation.fitting.fit_cost_curve`), calibrated to the
   forward time per token of the model's autoregressive baseline in the same capture
   (interleaved with the cascade runs: same machine load; timing on shared CPUs drifts up to
   2x between runs). The uncalibrated microbenchmark prediction is reported too.
3. **Plain prediction** = P1 exactly: speedup ``T_1(1) / tau_1`` with the fitted laws and the
   fitted cost curves (affine unless a lack-of-fit test rejects it, then the median table) at
   the baselines' reference context. **Measured** speedup = the capture's
   autoregressive target time per token / the cascade's decode time per token.
4. **Extended prediction** (THEORY's accounting with the two departures the real decoder
   shows): forward counts per token from P1 with acceptance **shared by the levels of a
   top-level round** (cascades of n >= 3 models; :func:`validation.dependence.fit_regimes`:
   a latent regime drawn per top-level round, iid acceptance per regime and pair, 1-3
   regimes by BIC, fitted by EM on the capture's rounds grouped by top-level round; exact
   renewal–reward over regimes), times this capture's **measured mean forward time per
   level** (``forward_s / forward_count``: inside the cascade a model runs 30-100 % slower
   than in its baselines, its weights evicted from the CPU caches by the other models), plus
   an **orchestration-overhead** term ``o_fwd * forwards + o_round * verify rounds`` fitted
   by least squares on the OTHER configurations of the same sampling mode (leave one out);
   speedup = measured AR time per token / ``tau_ext``. Two-model cascades keep P1's law
   (their best per-configuration fit). Also reported: **in-run** (measured forward times
   with P1's independent acceptance) and two fully **predictive** variants that use no
   timing of the cascade being predicted: baseline costs at the capture's mean context per
   level, with the decoder's extra verify positions (``m - G - 1``), times each model's
   in-cascade slowdown factor (measured / expected forward time, per model and role
   verify/bottom, median over the other configurations of the same sampling mode), plus the
   same overhead, with regime (``predictive``) or independent (``predictive_iid``)
   acceptance.
5. **Residual decomposition** (exact identity, per configuration):
   ``tau_meas - tau_pred = sum_i (F_i^meas - F_i^pred) t_i^meas`` (forward counts:
   acceptance model incl. correlation between rounds) ``+ sum_i F_i^pred (t_i^meas -
   T_i^pred)`` (forward cost: context drift + timing drift) ``+ overhead/token`` (decoder
   time outside forwards); plus the AR side ``T_1(1)`` vs measured AR time per token. Lag-1
   autocorrelation of ``A/G`` between consecutive rounds of a level (same prompt) is reported
   with its standard error.
6. **P5 on real data** (:func:`insertion_analysis`): for every captured cascade and every zoo
   model that can be inserted between two of its adjacent models (pair laws available for
   both new pairs at the same temperature), the exact P1 decision with the fitted laws/costs,
   the measured decision when the cascade with the inserted model was also captured (same
   other thresholds), and P5's decision confidence (delta method by default, or the
   parametric bootstrap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory._input import PolyspecInputError
from polyspec_theory.config import Cascade, Model
from polyspec_theory.costs import CostCurve, CostFit, fit_cost_curve
from polyspec_theory.counts import AcceptanceCounts
from polyspec_theory.laws import FAMILIES, FitResult, best_fit, fit_laws
from polyspec_theory.polybasic import Prediction, predict

__all__ = [
    "LevelRounds",
    "ModelBaseline",
    "ConfigCapture",
    "PairFit",
    "ConfigResult",
    "ValidationResult",
    "fit_pairs",
    "fit_costs",
    "predict_config",
    "overhead_model",
    "validate",
    "insertion_analysis",
    "lag1_correlation",
]


# --------------------------------------------------------------------------------------------
# captured data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LevelRounds:
    """Verification rounds of one verifying level (``models[i]`` verifies ``models[i+1]``).

    Arrays of equal length: ``ctx`` (committed length before the block), ``G`` (block
    length), ``A`` (accepted), ``m`` (positions scored by the verify forward), ``verify_s``,
    ``draft_s`` (seconds), ``prompt`` (prompt index, for correlations within a prompt)."""

    ctx: np.ndarray
    G: np.ndarray
    A: np.ndarray
    m: np.ndarray
    verify_s: np.ndarray
    draft_s: np.ndarray
    prompt: np.ndarray

    def __post_init__(self):
        n = len(self.G)
        for k in ("ctx", "A", "m", "verify_s", "draft_s", "prompt"):
            if len(getattr(self, k)) != n:
                raise PolyspecInputError(k, f"must have one value per round ({n})")

    @property
    def n(self) -> int:
        return len(self.G)

    def counts(self) -> AcceptanceCounts:
        return AcceptanceCounts.from_samples(self.A, self.G)

    @property
    def extra_positions(self) -> float:
        """Mean positions a verify forward scored beyond ``G + 1`` (catch-up tokens)."""
        return float(np.mean(self.m - self.G - 1)) if self.n else 0.0


@dataclass(frozen=True)
class ModelBaseline:
    """One model's baselines from the capture: autoregressive decode time per token
    (``ar_time_per_token``, over ``ar_tokens`` tokens at mean context ``ar_context``; of it
    ``ar_forward_per_token`` inside the forwards) and cost-curve timing samples
    ``(cost_m, cost_ctx, cost_s)``."""

    name: str
    ar_time_per_token: float | None
    ar_tokens: int
    ar_context: float | None
    cost_m: np.ndarray
    cost_ctx: np.ndarray
    cost_s: np.ndarray
    ar_forward_per_token: float | None = None


@dataclass(frozen=True)
class ConfigCapture:
    """One captured configuration (models target first, one threshold per pair)."""

    name: str
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    top_k: int
    rounds: tuple[LevelRounds, ...]
    tokens: int
    wall_s: float
    forward_s: tuple[float, ...]
    forward_count: tuple[int, ...]
    baselines: dict
    policy: str = "accumulate"
    n_prompts: int = 1
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    prompt_wall_s: tuple[float, ...] = field(default=())
    prompt_tokens: tuple[int, ...] = field(default=())

    def __post_init__(self):
        n = len(self.models)
        if n < 2:
            raise PolyspecInputError(f"{self.name}.models", "need at least two models")
        for k, want in (("thresholds", n - 1), ("rounds", n - 1), ("forward_s", n),
                        ("forward_count", n)):
            if len(getattr(self, k)) != want:
                raise PolyspecInputError(f"{self.name}.{k}", f"need {want} entries")
        for m in self.models:
            if m not in self.baselines:
                raise PolyspecInputError(f"{self.name}.baselines", f"no baseline for {m!r}")
        if self.tokens <= 0 or self.wall_s <= 0:
            raise PolyspecInputError(f"{self.name}.tokens", "no decoded tokens / time")

    @property
    def n(self) -> int:
        return len(self.models)

    def pair_key(self, i: int) -> tuple:
        return (self.models[i], self.models[i + 1], float(self.temperature), int(self.top_k))

    @property
    def time_per_token(self) -> float:
        """Measured cascade decode time per token (seconds)."""
        return self.wall_s / self.tokens

    def time_per_token_se(self) -> float:
        """Delta-method standard error of the measured time per token over prompts (ratio
        estimator ``sum wall / sum tokens``; NaN without per-prompt totals)."""
        w = np.asarray(self.prompt_wall_s, dtype=np.float64)
        n = np.asarray(self.prompt_tokens, dtype=np.float64)
        k = w.size
        if k < 2 or n.size != k:
            return math.nan
        tau = w.sum() / n.sum()
        return float(math.sqrt(k / (k - 1) * np.sum((w - tau * n) ** 2)) / n.sum())

    @property
    def ar_time_per_token(self) -> float:
        t = self.baselines[self.models[0]].ar_time_per_token
        if t is None:
            raise PolyspecInputError(f"{self.name}.baselines",
                                     f"no autoregressive baseline for the target {self.models[0]}")
        return float(t)

    @property
    def measured_speedup(self) -> float:
        return self.ar_time_per_token / self.time_per_token

    @property
    def overhead_s(self) -> float:
        """Decode time outside model forwards."""
        return self.wall_s - float(sum(self.forward_s))

    def mean_context(self, i: int) -> float:
        """Mean context of model ``i``'s forwards: its verify rounds' mean ``ctx``; the bottom
        model drafts the last pair's blocks at ``ctx + 0..theta-1``, mean ``ctx + (theta-1)/2``."""
        if i < self.n - 1:
            r = self.rounds[i]
            return float(np.mean(r.ctx)) if r.n else 0.0
        r = self.rounds[-1]
        return float(np.mean(r.ctx)) + (self.thresholds[-1] - 1) / 2.0 if r.n else 0.0


def lag1_correlation(r: LevelRounds) -> tuple[float, float, int]:
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


# --------------------------------------------------------------------------------------------
# fitting per pair / per config
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairFit:
    """Pooled acceptance data and ranked law fits of one pair at one sampling setting."""

    key: tuple
    counts: AcceptanceCounts
    fits: tuple[FitResult, ...]
    configs: tuple[str, ...]

    @property
    def best(self) -> FitResult:
        return best_fit(list(self.fits))

    def law(self, family: str | None):
        """The fitted law of ``family`` (``None``/``"best"``: the AIC-best non-Gaussian)."""
        if family in (None, "best"):
            return self.best.law
        for f in self.fits:
            if f.law.family == family:
                return f.law
        raise PolyspecInputError("family", f"no {family!r} fit for pair {self.key}")

    def to_dict(self) -> dict:
        v, d, t, k = self.key
        return {
            "verifier": v, "drafter": d, "temperature": t, "top_k": k,
            "configs": list(self.configs),
            "n_rounds": self.counts.n_rounds,
            "mean_accepted": self.counts.mean_accepted(),
            "best": self.best.law.family,
            "fits": [f.to_dict() for f in self.fits],
        }


def fit_pairs(captures, families=FAMILIES) -> dict[tuple, PairFit]:
    """Pool rounds per pair key over configurations and fit every law family."""
    pooled: dict[tuple, list] = {}
    for c in captures:
        for i in range(c.n - 1):
            if c.rounds[i].n == 0:
                continue
            pooled.setdefault(c.pair_key(i), []).append((c.name, c.rounds[i].counts()))
    out = {}
    for key, items in pooled.items():
        counts = items[0][1]
        for _, d in items[1:]:
            counts = counts.merge(d)
        out[key] = PairFit(key, counts, tuple(fit_laws(counts, families=families)),
                           tuple(n for n, _ in items))
    return out


def fit_costs(capture: ConfigCapture, calibrate: bool = True) -> dict[str, CostFit]:
    """Cost fit of every model of the capture from its own baseline timings.

    ``calibrate``: scale each model's cost curve so that ``T_i(1)`` at the mean context of
    its autoregressive baseline equals the forward time per token measured in that baseline
    (interleaved with the cascade runs, so under the same machine load; the curve's shape in
    ``m`` and context comes from the cost-curve timings). Models without an AR baseline keep
    the raw curve."""
    out = {}
    for name in capture.models:
        b = capture.baselines[name]
        if len(b.cost_m) == 0:
            raise PolyspecInputError(f"{capture.name}.baselines.{name}",
                                     "no cost-curve timings")
        cf = fit_cost_curve(b.cost_m, b.cost_s, b.cost_ctx, name=name)
        if calibrate and b.ar_forward_per_token and b.ar_context is not None:
            t1 = cf.at(1, context=b.ar_context)
            if t1 > 0:
                cf = cf.scaled(b.ar_forward_per_token / t1)
        out[name] = cf
    return out


# --------------------------------------------------------------------------------------------
# prediction
# --------------------------------------------------------------------------------------------
def _cascade(capture, pair_fits, costs, family, contexts=None, extra=None) -> Cascade:
    models = []
    for i, name in enumerate(capture.models):
        cf = costs[name]
        curve = cf.curve(None if contexts is None else contexts[i])
        if extra is not None and i < capture.n - 1 and extra[i] > 0:
            # expected cost with extra[i] more scored positions on average (catch-up tokens;
            # exact for affine curves, linear interpolation between table entries)
            if curve.table is None:
                curve = CostCurve.affine(curve.base + extra[i] * curve.per_token,
                                         curve.per_token)
            else:
                t = np.asarray(curve.table)
                nxt = curve(np.arange(2, t.size + 2))
                curve = CostCurve.from_table((1 - extra[i]) * t + extra[i] * nxt)
        models.append(Model(name, curve))
    laws = []
    for i in range(capture.n - 1):
        key = capture.pair_key(i)
        if key not in pair_fits:
            raise PolyspecInputError(f"{capture.name}.rounds",
                                     f"no acceptance data for pair {key[:2]}")
        laws.append(pair_fits[key].law(family))
    return Cascade(tuple(models), tuple(laws), capture.thresholds, capture.policy, capture.name)


def predict_config(capture: ConfigCapture, pair_fits, costs, family=None, *,
                   contexts=None, extra_positions=None) -> Prediction:
    """P1 for one captured configuration with fitted laws (``family``; ``None`` = best) and
    fitted costs (at ``contexts[i]`` per model if given; ``extra_positions[i]`` = mean number
    of positions a verify forward of model ``i`` scores beyond ``G + 1``)."""
    return predict(_cascade(capture, pair_fits, costs, family, contexts, extra_positions))


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


def overhead_model(captures, exclude: str | None = None,
                   like: ConfigCapture | None = None) -> OverheadModel:
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


@dataclass(frozen=True)
class ConfigResult:
    """Everything computed for one configuration."""

    name: str
    models: tuple[str, ...]
    thresholds: tuple[int, ...]
    temperature: float
    measured_speedup: float
    measured_time_per_token: float
    ar_time_per_token: float
    predicted: dict  # family -> plain P1 speedup ("best" included)
    best_family: str
    extended_speedup: float
    extended_time_per_token: float
    decomposition: dict
    correlations: list
    forwards_per_token: dict  # measured / predicted per model
    costs: dict  # model -> CostFit.to_dict()
    context_effect: dict  # model -> relative T(1) change between reference and capture ctx
    holdout_speedup: float | None = None  # best laws fitted on the OTHER configurations only
    measured_speedup_se: float = math.nan
    microbenchmark_speedup: float = math.nan  # costs from the cost-curve timings alone
    pooled_speedup: float = math.nan  # laws pooled over every configuration using the pair
    # baseline costs x in-cascade factors (leave one out), contexts, extra positions,
    # overhead (leave one out), with block-dependent / independent acceptance
    predictive_speedup: float = math.nan
    predictive_iid_speedup: float = math.nan

    @property
    def predictive_error(self) -> float:
        return self.predictive_speedup / self.measured_speedup - 1.0

    @property
    def predictive_iid_error(self) -> float:
        return self.predictive_iid_speedup / self.measured_speedup - 1.0

    @property
    def pooled_error(self) -> float:
        return self.pooled_speedup / self.measured_speedup - 1.0
    inrun_speedup: float = math.nan  # P1 (iid) counts x this capture's per-level forward times

    @property
    def inrun_error(self) -> float:
        return self.inrun_speedup / self.measured_speedup - 1.0

    @property
    def microbenchmark_error(self) -> float:
        return self.microbenchmark_speedup / self.measured_speedup - 1.0

    @property
    def predicted_speedup(self) -> float:
        return self.predicted["best"]

    @property
    def error(self) -> float:
        """Relative error of the best-law plain prediction: (pred - meas) / meas."""
        return self.predicted_speedup / self.measured_speedup - 1.0

    @property
    def extended_error(self) -> float:
        return self.extended_speedup / self.measured_speedup - 1.0

    @property
    def holdout_error(self) -> float | None:
        if self.holdout_speedup is None:
            return None
        return self.holdout_speedup / self.measured_speedup - 1.0

    def errors(self) -> dict:
        return {f: s / self.measured_speedup - 1.0 for f, s in self.predicted.items()}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "models": list(self.models),
            "thresholds": list(self.thresholds),
            "temperature": self.temperature,
            "measured_speedup": self.measured_speedup,
            "predicted_speedup": self.predicted_speedup,
            "error": self.error,
            "best_family": self.best_family,
            "predicted_by_law": dict(self.predicted),
            "error_by_law": self.errors(),
            "extended_speedup": self.extended_speedup,
            "extended_error": self.extended_error,
            "holdout_speedup": self.holdout_speedup,
            "holdout_error": self.holdout_error,
            "microbenchmark_speedup": self.microbenchmark_speedup,
            "microbenchmark_error": self.microbenchmark_error,
            "predictive_speedup": self.predictive_speedup,
            "predictive_error": self.predictive_error,
            "predictive_iid_speedup": self.predictive_iid_speedup,
            "predictive_iid_error": self.predictive_iid_error,
            "pooled_speedup": self.pooled_speedup,
            "pooled_error": self.pooled_error,
            "inrun_speedup": self.inrun_speedup,
            "inrun_error": self.inrun_error,
            "measured_speedup_se": self.measured_speedup_se,
            "measured_time_per_token": self.measured_time_per_token,
            "extended_time_per_token": self.extended_time_per_token,
            "ar_time_per_token": self.ar_time_per_token,
            "decomposition": self.decomposition,
            "lag1_correlation": self.correlations,
            "forwards_per_token": self.forwards_per_token,
            "context_effect": self.context_effect,
            "costs": self.costs,
        }


def _holdout_speedup(capture, captures, families, costs) -> float | None:
    """Best-law P1 speedup with every pair law fitted only on the other configurations
    (``None`` if some pair of this configuration was captured nowhere else)."""
    others = [c for c in captures if c.name != capture.name]
    keys = {capture.pair_key(i) for i in range(capture.n - 1)}
    sub = [c for c in others if keys & {c.pair_key(i) for i in range(c.n - 1)}]
    fits = fit_pairs(sub, families)
    if not keys <= set(fits):
        return None
    return predict_config(capture, fits, costs, None).speedup


def _role(capture, i) -> str:
    return "bottom" if i == capture.n - 1 else "verify"


def _inrun_ratios(capture, fits) -> dict:
    """Measured mean forward time / P1's expected forward cost (calibrated costs at the
    capture's contexts) per (model, role): how much slower a model runs inside the cascade
    (other models evict its weights from the CPU caches between its forwards) than in its
    baselines."""
    costs = fit_costs(capture)
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    extra = [r.extra_positions for r in capture.rounds]
    pred = predict_config(capture, fits, costs, None, contexts=ctxs, extra_positions=extra)
    out = {}
    for i, name in enumerate(capture.models):
        cnt = capture.forward_count[i]
        if cnt and pred.levels[i].forward_cost > 0:
            out[(name, _role(capture, i))] = (capture.forward_s[i] / cnt
                                              / pred.levels[i].forward_cost)
    return out


def inrun_factor(ratios: dict, name: str, role: str, exclude: str, like: ConfigCapture,
                 captures) -> float:
    """Median in-run/baseline forward-time ratio of (model, role) over the OTHER captures of
    the same sampling mode (all modes if none; 1 if the pair was never seen elsewhere)."""
    def collect(pool):
        return [ratios[c.name][(name, role)] for c in pool
                if c.name != exclude and (name, role) in ratios[c.name]]

    vals = collect([c for c in captures if (c.temperature == 0) == (like.temperature == 0)])
    if not vals:
        vals = collect(captures)
    return float(np.median(vals)) if vals else 1.0


def _analyse(capture, pair_fits, pooled_fits, families, captures, holdout,
             ratios) -> ConfigResult:
    costs = fit_costs(capture)
    micro = predict_config(capture, pair_fits, fit_costs(capture, calibrate=False), None)
    predicted = {}
    for fam in families:
        predicted[fam] = predict_config(capture, pair_fits, costs, fam).speedup
    best = predict_config(capture, pair_fits, costs, None)
    predicted["best"] = best.speedup
    best_fams = sorted({pair_fits[capture.pair_key(i)].best.law.family
                        for i in range(capture.n - 1)})
    # ---- extended model
    ctxs = [capture.mean_context(i) for i in range(capture.n)]
    extra = [r.extra_positions for r in capture.rounds]
    factors = [inrun_factor(ratios, name, _role(capture, i), capture.name, capture, captures)
               for i, name in enumerate(capture.models)]
    ext_costs = {name: costs[name].scaled(f) for name, f in zip(capture.models, factors,
                                                                strict=True)}
    ov = overhead_model(captures, exclude=capture.name, like=capture)
    ext_casc = _cascade(capture, pair_fits, ext_costs, None, ctxs, extra)
    pred_iid = predict(ext_casc)
    predictive_iid = capture.ar_time_per_token / (pred_iid.time_per_token
                                                  + ov.per_token(pred_iid))
    # ---- acceptance shared by the levels of a top-level round (regime mixture, n >= 3)
    from .dependence import mixture_forwards, select_regimes

    def ov_tok(f):
        return ov.per_forward * float(f.sum()) + ov.per_round * float(f[:-1].sum())

    regimes = None
    if capture.n >= 3:
        try:
            regimes = select_regimes(capture.rounds, capture.n)
        except PolyspecInputError:
            regimes = None
    if regimes is not None:
        fw, tau_mix = mixture_forwards(ext_casc, regimes)
    else:
        fw = np.array([lv.forwards_per_token for lv in pred_iid.levels])
        tau_mix = pred_iid.time_per_token
    predictive = capture.ar_time_per_token / (tau_mix + ov_tok(fw))
    # ---- extended: those counts x this capture's measured per-level forward times
    t_in = np.array(capture.forward_s) / np.maximum(np.array(capture.forward_count), 1)
    tau_ext = float(np.dot(fw, t_in)) + ov_tok(fw)
    ext_speed = capture.ar_time_per_token / tau_ext
    # ---- exact decomposition of tau_meas - tau_pred (plain, best law)
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
    decomposition = {
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
        "overhead_model": {"per_forward": ov.per_forward, "per_round": ov.per_round},
        "inrun_factors": dict(zip(capture.models, factors, strict=True)),
        "regimes": None if regimes is None else {
            "k": regimes.k, "weights": regimes.weights.tolist(),
            "alphas": regimes.alphas.tolist(), "bic": regimes.bic, "top_rounds": regimes.n_top},
    }
    rel = decomposition["relative"]
    decomposition["dominant"] = max(rel, key=lambda k: abs(rel[k]))
    corr = []
    for i, r in enumerate(capture.rounds):
        rho, se, k = lag1_correlation(r)
        corr.append({"level": i, "verifier": capture.models[i], "rho": rho, "se": se,
                     "pairs": k})
    fwd = {name: {"measured": float(f_meas[i]), "predicted": float(f_pred[i]),
                  "measured_cost": float(t_meas[i]), "predicted_cost": float(t_pred[i])}
           for i, name in enumerate(capture.models)}
    ctx_eff = {name: float(costs[name].context_effect(costs[name].reference_context, ctxs[i]))
               for i, name in enumerate(capture.models)}
    return ConfigResult(
        name=capture.name, models=capture.models, thresholds=capture.thresholds,
        temperature=capture.temperature, measured_speedup=capture.measured_speedup,
        measured_time_per_token=tau_meas, ar_time_per_token=capture.ar_time_per_token,
        predicted=predicted, best_family="+".join(best_fams), extended_speedup=ext_speed,
        extended_time_per_token=tau_ext, decomposition=decomposition, correlations=corr,
        forwards_per_token=fwd, costs={k: v.to_dict() for k, v in costs.items()},
        context_effect=ctx_eff,
        holdout_speedup=_holdout_speedup(capture, captures, families, costs) if holdout
        else None,
        pooled_speedup=predict_config(capture, pooled_fits, costs, None).speedup,
        predictive_speedup=predictive,
        predictive_iid_speedup=predictive_iid,
        microbenchmark_speedup=micro.speedup,
        inrun_speedup=capture.ar_time_per_token / (float(np.dot(f_pred, t_meas))
                                                   + ov.per_token(best)),
        measured_speedup_se=capture.measured_speedup * capture.time_per_token_se()
        / capture.time_per_token,
    )


@dataclass(frozen=True)
class ValidationResult:
    configs: tuple[ConfigResult, ...]
    pairs: dict
    insertions: tuple
    families: tuple[str, ...]
    law_scope: str = "config"

    def _abs_errors(self, attr="error") -> np.ndarray:
        return np.array([abs(getattr(c, attr)) for c in self.configs])

    @property
    def median_abs_error(self) -> float:
        return float(np.median(self._abs_errors()))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(self._abs_errors()))

    def summary(self) -> dict:
        ext = self._abs_errors("extended_error")
        by_law = {}
        for fam in list(self.families) + ["best"]:
            e = np.array([abs(c.errors()[fam]) for c in self.configs])
            by_law[fam] = {"median_abs_error": float(np.median(e)),
                           "max_abs_error": float(np.max(e))}
        hold = [abs(c.holdout_error) for c in self.configs if c.holdout_error is not None]
        doms = [c.decomposition["dominant"] for c in self.configs]
        shares = {k: float(np.median([abs(c.decomposition["relative"][k]) for c in self.configs]))
                  for k in self.configs[0].decomposition["relative"]}
        return {
            "n_configs": len(self.configs),
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "extended": {"median_abs_error": float(np.median(ext)),
                         "max_abs_error": float(np.max(ext))},
            "law_scope": self.law_scope,
            "predictive": {
                "median_abs_error": float(np.median(self._abs_errors("predictive_error"))),
                "max_abs_error": float(np.max(self._abs_errors("predictive_error")))},
            "predictive_iid": {
                "median_abs_error": float(np.median(self._abs_errors("predictive_iid_error"))),
                "max_abs_error": float(np.max(self._abs_errors("predictive_iid_error")))},
            "pooled_laws": {
                "median_abs_error": float(np.median(self._abs_errors("pooled_error"))),
                "max_abs_error": float(np.max(self._abs_errors("pooled_error")))},
            "inrun_costs": {
                "median_abs_error": float(np.median(self._abs_errors("inrun_error"))),
                "max_abs_error": float(np.max(self._abs_errors("inrun_error")))},
            "microbenchmark_costs": {
                "median_abs_error": float(np.median(self._abs_errors("microbenchmark_error"))),
                "max_abs_error": float(np.max(self._abs_errors("microbenchmark_error")))},
            "holdout": {"n_configs": len(hold),
                        "median_abs_error": float(np.median(hold)) if hold else None,
                        "max_abs_error": float(np.max(hold)) if hold else None},
            "by_law": by_law,
            "dominant_residual": max(set(doms), key=doms.count),
            "median_abs_residual_share": shares,
        }

    def to_json(self) -> dict:
        """The ``polyspec validate --json`` object."""
        return {
            "configs": [{"name": c.name, "measured_speedup": c.measured_speedup,
                         "predicted_speedup": c.predicted_speedup, "error": c.error,
                         "best_law": c.best_family,
                         "extended_speedup": c.extended_speedup,
                         "extended_error": c.extended_error,
                         "predictive_error": c.predictive_error,
                         "inrun_error": c.inrun_error,
                         "holdout_error": c.holdout_error}
                        for c in self.configs],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "summary": self.summary(),
            "pairs": [p.to_dict() for p in self.pairs.values()],
            "insertions": list(self.insertions),
        }


def validate(captures, families=FAMILIES, *, laws: str = "config", insertions: bool = True,
             holdout: bool = True, confidence: str = "delta", n_boot: int = 200,
             seed: int = 0) -> ValidationResult:
    """Run the whole pipeline (module docstring) on a list of :class:`ConfigCapture`."""
    captures = list(captures)
    if not captures:
        raise PolyspecInputError("traces", "no captured configurations")
    names = [c.name for c in captures]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PolyspecInputError("traces", f"configuration name {dup!r} appears twice")
    families = tuple(families)
    if laws not in ("config", "pooled"):
        raise PolyspecInputError("laws", f"must be 'config' or 'pooled', got {laws!r}")
    pair_fits = fit_pairs(captures, families)
    own = {c.name: (fit_pairs([c], families) if laws == "config" else pair_fits)
           for c in captures}
    ratios = {c.name: _inrun_ratios(c, own[c.name]) for c in captures}
    results = tuple(_analyse(c, own[c.name], pair_fits, families, captures, holdout, ratios)
                    for c in captures)
    ins = tuple(insertion_analysis(captures, pair_fits, method=confidence, n_boot=n_boot,
                                   seed=seed, ratios=ratios)) if insertions else ()
    return ValidationResult(results, pair_fits, ins, families, laws)


# --------------------------------------------------------------------------------------------
# P5 on captured data
# --------------------------------------------------------------------------------------------
def _model_order(captures) -> list[str]:
    """Models ordered target first by decreasing fitted ``T(1)`` (the zoo's size order)."""
    t1 = {}
    for c in captures:
        for name in c.models:
            if name not in t1:
                f = fit_costs_one(name, captures, c)
                t1[name] = f.table[0] if f is not None else math.nan
    return sorted(t1, key=lambda k: -t1[k])


def insertion_analysis(captures, pair_fits, *, method: str = "delta", n_boot: int = 200,
                       seed: int = 0, ratios: dict | None = None):
    """P5 for every (captured cascade, insertable model, position); see module docstring.

    Thresholds of the two new pairs: those of a captured cascade with the model inserted when
    one exists (then the measured decision is reported), else the optimum over 1..8 of the
    P1 prediction for the new pairs, other thresholds unchanged (prediction only)."""
    from polyspec_theory.insertion import decision_confidence, insertion_decision

    captures = list(captures)
    order = _model_order(captures)
    by_models = {}
    for c in captures:
        by_models.setdefault((c.models, c.temperature, c.top_k), []).append(c)
    out = []
    for c in captures:
        costs = fit_costs(c)
        for p in range(c.n - 1):
            lo, hi = order.index(c.models[p]), order.index(c.models[p + 1])
            for new in order[lo + 1: hi]:
                k_up = (c.models[p], new, float(c.temperature), int(c.top_k))
                k_lo = (new, c.models[p + 1], float(c.temperature), int(c.top_k))
                if k_up not in pair_fits or k_lo not in pair_fits:
                    continue
                new_cost = _cost_for(new, captures, c)
                if new_cost is None:
                    continue
                base = _cascade(c, pair_fits, costs, None)
                new_models = c.models[: p + 1] + (new,) + c.models[p + 1:]
                measured = None
                candidates = [d for d in by_models.get((new_models, c.temperature, c.top_k), [])
                              if d.thresholds[:p] == c.thresholds[:p]
                              and d.thresholds[p + 2:] == c.thresholds[p + 1:]]
                if candidates:
                    # prefer the captured cascade whose upper threshold equals the original
                    d = min(candidates, key=lambda d: (d.thresholds[p] != c.thresholds[p],
                                                       d.thresholds[p:p + 2]))
                    th = (d.thresholds[p], d.thresholds[p + 1])
                    se = [x.measured_speedup * x.time_per_token_se() / x.time_per_token
                          for x in (c, d)]
                    z = (d.measured_speedup - c.measured_speedup) / math.hypot(*se) \
                        if all(math.isfinite(v) for v in se) and math.hypot(*se) > 0 \
                        else math.nan
                    measured = {"with": d.name, "speedup_with": d.measured_speedup,
                                "speedup_without": c.measured_speedup,
                                "helps": bool(d.measured_speedup > c.measured_speedup),
                                "z": z}
                else:
                    th = _best_new_thresholds(base, p, Model(new, new_cost),
                                              pair_fits[k_up].law(None),
                                              pair_fits[k_lo].law(None))
                dec = insertion_decision(base, p, Model(new, new_cost),
                                         pair_fits[k_up].law(None), pair_fits[k_lo].law(None),
                                         th)
                rounds = [pair_fits[c.pair_key(i)].counts.n_rounds for i in range(c.n - 1)]
                rounds += [pair_fits[k_up].counts.n_rounds, pair_fits[k_lo].counts.n_rounds]
                rel_se = [_cost_rel_se(costs[m]) for m in c.models] + [
                    _cost_rel_se(fit_costs_one(new, captures, c))]
                conf = decision_confidence(
                    base, p, Model(new, new_cost), pair_fits[k_up].law(None),
                    pair_fits[k_lo].law(None), th, rounds=rounds, cost_rel_se=rel_se,
                    method=method, n_boot=n_boot, seed=seed)
                # the same decision with the decoder-overhead term (fitted without c)
                ov = overhead_model(captures, exclude=c.name, like=c)
                p0, p1 = predict(dec.cascade_without), predict(dec.cascade_with)
                t0 = p0.time_per_token + ov.per_token(p0)
                t1 = p1.time_per_token + ov.per_token(p1)
                # ... and with each model's in-cascade slowdown (learned without c)
                pe = None
                if ratios is not None:
                    taus = []
                    for casc in (dec.cascade_without, dec.cascade_with):
                        ms = tuple(
                            Model(m.name, m.cost.scaled(inrun_factor(
                                ratios, m.name, "bottom" if k == casc.n - 1 else "verify",
                                c.name, c, captures)))
                            for k, m in enumerate(casc.models))
                        pr = predict(Cascade(ms, casc.laws, casc.thresholds, casc.policy))
                        taus.append(pr.time_per_token + ov.per_token(pr))
                    pe = {"helps": bool(taus[1] < taus[0]),
                          "relative_gain": taus[0] / taus[1] - 1.0}
                out.append({
                    "cascade": c.name, "models": list(c.models), "position": p,
                    "inserted": new, "thresholds_new": list(th),
                    "predicted": dec.to_dict(),
                    "predicted_with_overhead": {"helps": bool(t1 < t0),
                                                "relative_gain": t0 / t1 - 1.0},
                    "predicted_extended": pe,
                    "agrees_extended": None if (measured is None or pe is None)
                    else bool(measured["helps"] == pe["helps"]),
                    "measured": measured,
                    "agrees": None if measured is None else bool(measured["helps"] == dec.helps),
                    "agrees_with_overhead": None if measured is None
                    else bool(measured["helps"] == (t1 < t0)),
                    "confidence": conf.probability,
                    "confidence_se": conf.std_error,
                    "confidence_method": conf.method,
                })
    return out


def fit_costs_one(name: str, captures, prefer: ConfigCapture) -> CostFit | None:
    """Cost fit of ``name`` from ``prefer``'s baselines if it has them, else from the first
    capture that does."""
    for c in [prefer] + list(captures):
        b = c.baselines.get(name)
        if b is not None and len(b.cost_m):
            return fit_cost_curve(b.cost_m, b.cost_s, b.cost_ctx, name=name)
    return None


def _cost_for(name, captures, prefer) -> CostCurve | None:
    f = fit_costs_one(name, captures, prefer)
    return None if f is None else f.curve()


def _cost_rel_se(f: CostFit | None) -> float:
    """Relative standard error of T(1): residual relative sd / sqrt(samples at m = 1)."""
    if f is None:
        return 0.0
    n1 = sum(n for m, _, _, n in f.cells if m == 1) or 1
    return float(f.residual_rel_sd / math.sqrt(n1)) if f.residual_rel_sd > 0 else 0.0


def _best_new_thresholds(base, p, model, up, low, max_theta: int = 8):
    from polyspec_theory.insertion import insert_model

    best = None
    for a in range(1, max_theta + 1):
        for b in range(1, max_theta + 1):
            tau = predict(insert_model(base, p, model, up, low, (a, b))).time_per_token
            if best is None or tau < best[0]:
                best = (tau, (a, b))
    return best[1]
