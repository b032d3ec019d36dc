"""R1-R3 (docs/theory.md, Part III-E): acceptance as a process over output positions.

Under greedy decoding, whether a drafter agrees with its verifier is a function of the
absolute output position ``p`` (the verifier's prefix fixes both argmaxes). The agreements
form runs separated by disagreements; :class:`RunLaw` is the law of one run's length through
its hazard over the run's age (``q(a)`` = P(disagree at age ``a`` | agreed at ages ``< a``);
config ``{"run_hazard": [...], "tail": q}``). A verify that checks ``m`` drafts starting at
age ``a`` accepts ``min(remaining run, m)``; a fully accepted round carries the run (its age)
into the next round.

* :func:`predict_runs` -- R1 for a two-model cascade (a run law, or PipeSpec's round,
  config ``"round": "pipespec"``; :data:`ROUNDS`), through :func:`sync_two_level` -- R1:
  exact time per token of a two-level synchronous chain under that process (a Markov chain
  over the carried age); equal to P1 for the geometric law with P1's round (not with
  PipeSpec's round, which re-checks the bonus position).
* :func:`fit_run_law` -- R2: Kaplan-Meier fit of the hazard from rounds as left-truncated
  (entry age), right-censored (fully accepted) observations.
* :func:`geometric_lr_test` -- R3: likelihood-ratio test of a constant hazard (rounds are
  independent exactly when the hazard is constant).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.counts import MAX_CAP
from polyspec_theory.core.laws import AcceptanceLaw, IIDGeometric
from polyspec_theory.errors import PolyspecInputError, as_int, require_keys

MIN_AT_RISK = 10  # ages with fewer rounds at risk use the pooled tail hazard (R2)


def _prob(x, field: str, *, open_low: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise PolyspecInputError(field, f"must be a finite number, got {x!r}")
    if x < 0 or x > 1 or (open_low and x <= 0):
        raise PolyspecInputError(field, f"must be in {'(0' if open_low else '[0'}, 1], "
                                 f"got {x!r}")
    return float(x)


class RunLaw(AcceptanceLaw):
    """Law of a run of agreements: ``hazard[a]`` = P(disagree at age ``a`` | agreed at ages
    ``< a``); ages ``>= len(hazard)`` use ``tail`` (``0``: a run that reaches that age never
    ends). Config ``{"run_hazard": [q_0, q_1, ...], "tail": q}``.

    As an :class:`~polyspec_theory.core.laws.AcceptanceLaw` it is the law of a round that
    starts a fresh run (age 0): ``S_k = prod_{a < k} (1 - q(a))``. Rounds are not drawn
    afresh (``carries_age``): a fully accepted round carries its run into the next one, so
    P1 does not apply; R1 (:func:`sync_two_level`) is the exact two-level theory."""

    family = "run"
    carries_age = True

    def __init__(self, hazard, tail):
        if isinstance(hazard, (str, bytes, dict)) or not hasattr(hazard, "__iter__"):
            raise PolyspecInputError("hazard", "must be a list of probabilities")
        self.hazard = tuple(_prob(h, f"hazard[{i}]") for i, h in enumerate(hazard))
        if len(self.hazard) > MAX_CAP:
            raise PolyspecInputError("hazard", f"at most {MAX_CAP} ages, got {len(self.hazard)}")
        self.tail = _prob(tail, "tail")

    @classmethod
    def geometric(cls, alpha: float) -> RunLaw:
        """The memoryless law of P1's iid acceptance ``alpha`` (constant hazard 1 - alpha)."""
        a = _prob(alpha, "alpha")
        if a >= 1:
            raise PolyspecInputError("alpha", "must be < 1 (a run of agreements must end)")
        return cls((), 1.0 - a)

    @classmethod
    def from_config(cls, spec, field: str = "acceptance") -> RunLaw:
        """``{"run_hazard": [q_0, ...], "tail": q}`` (errors name ``field``)."""
        require_keys(spec, field, required=["run_hazard", "tail"])
        try:
            return cls(spec["run_hazard"], spec["tail"])
        except PolyspecInputError as e:
            key = "run_hazard" + e.field[len("hazard"):] if e.field.startswith("hazard") \
                else e.field
            raise PolyspecInputError(f"{field}.{key}", e.reason) from None

    @property
    def n_params(self) -> int:
        return len(self.hazard) + 1

    @property
    def memoryless(self) -> bool:
        """A constant hazard: rounds are independent (R3) and P1 holds with P1's round."""
        return all(h == self.tail for h in self.hazard)

    def to_config(self) -> dict:
        return {"run_hazard": list(self.hazard), "tail": self.tail}

    def q(self, age: int) -> float:
        return self.hazard[age] if age < len(self.hazard) else self.tail

    def survival(self, kmax: int) -> np.ndarray:
        """``S_k`` of a fresh run, k = 0..kmax."""
        kmax = int(kmax)
        q = np.full(kmax, self.tail)
        h = np.asarray(self.hazard[:kmax], dtype=np.float64)
        q[: h.size] = h
        return np.concatenate([[1.0], np.cumprod(1.0 - q)])

    def run_survival(self, age: int, j: int) -> float:
        """P(j more agreements | agreed at ages < ``age``)."""
        s = 1.0
        for a in range(age, age + j):
            s *= 1.0 - self.q(a)
        return s

    @classmethod
    def _mle(cls, d):
        raise PolyspecInputError("law", "a run law is fitted on rounds with their entry ages "
                                 "(polyspec_theory.core.runs.fit_run_law), not on accepted "
                                 "counts alone")


def _cost(fn, m, field):
    v = float(fn(m))
    if not math.isfinite(v) or v < 0:
        raise PolyspecInputError(field, f"must be a finite cost >= 0, got {v!r} at m = {m}")
    return v


def sync_two_level(law: RunLaw, theta: int, draft_cost: float,
                   verify_cost: Callable[[int], float], overhead: float = 0.0, *,
                   recheck_bonus: bool = False) -> dict:
    """R1: exact long-run time per token of a two-level synchronous chain whose drafter/
    verifier agreement follows ``law`` over output positions.

    Every round the drafter drafts ``theta`` tokens (one step each, ``draft_cost``) and the
    verifier scores ``theta + 1`` positions (``verify_cost(theta + 1)`` + ``overhead``).
    ``recheck_bonus=False`` (P1's round): the bonus position after a fully accepted round is
    never checked, so the run there continues with probability ``1 - q``. ``True``
    (PipeSpec's ``ChainSpeculativeDecoder``, lookahead ``K = theta + 1``): after a fully
    accepted round the drafter drafts ``theta + 1`` tokens, the first re-predicting the bonus
    position; if it disagrees the verifier scores 1 position (emits 1 token and the next
    position goes unchecked), else it scores ``theta + 1`` positions and checks ``theta``
    drafts.

    Returns ``time_per_token``, ``tokens_per_round``, ``time_per_round`` and the stationary
    law of the carried state."""
    if isinstance(theta, bool) or not isinstance(theta, int) or theta < 1:
        raise PolyspecInputError("theta", f"must be an integer >= 1, got {theta!r}")
    if not isinstance(law, RunLaw):
        raise PolyspecInputError("law", "must be a RunLaw")
    d = _cost(lambda _m: draft_cost, 1, "draft_cost")
    o = _cost(lambda _m: overhead, 1, "overhead")
    big = len(law.hazard)  # ages >= big behave alike: the carried age is capped there
    cap = lambda a: min(a, big)  # noqa: E731
    n_age = big + 1
    # states: (age, continuing); continuing only with recheck_bonus
    n_st = n_age * (2 if recheck_bonus else 1)
    P = np.zeros((n_st, n_st))
    tok = np.zeros(n_st)
    cost = np.zeros(n_st)
    v_full = _cost(verify_cost, theta + 1, "verify_cost")
    for cont in ((0, 1) if recheck_bonus else (0,)):
        for a in range(n_age):
            s = a + cont * n_age
            start = a
            w = 1.0
            if cont:  # the bonus position is checked first
                qb = law.q(a)
                # disagree: 1-position verify, 1 token; position after it unchecked
                P[s, 0] += qb * law.q(0)
                P[s, cap(1)] += qb * (1 - law.q(0))
                tok[s] += qb * 1.0
                cost[s] += qb * ((theta + 1) * d + _cost(verify_cost, 1, "verify_cost") + o)
                w = 1.0 - qb
                start = a + 1
            surv = w
            for j in range(theta):  # j drafts accepted, then a disagreement
                pj = surv * law.q(start + j)
                P[s, 0] += pj
                tok[s] += pj * (j + 1)
                surv *= 1.0 - law.q(start + j)
            tok[s] += surv * (theta + 1)
            end = start + theta  # age at the bonus position
            if recheck_bonus:
                P[s, cap(end) + n_age] += surv
            else:
                qb = law.q(end)
                P[s, 0] += surv * qb
                P[s, cap(end + 1)] += surv * (1 - qb)
            cost[s] += w * ((theta + cont) * d + v_full + o)
    # stationary law: the chain from age 0 (states reachable from it); solve pi P = pi
    A = P.T - np.eye(n_st)
    A[-1, :] = 1.0
    b = np.zeros(n_st)
    b[-1] = 1.0
    pi = np.linalg.lstsq(A, b, rcond=None)[0]
    pi = np.clip(pi, 0.0, None)
    pi /= pi.sum()
    tpr, cpr = float(pi @ tok), float(pi @ cost)
    return {"time_per_token": cpr / tpr, "tokens_per_round": tpr, "time_per_round": cpr,
            "stationary": pi}


# the round policies of a synchronous two-level chain under a run law (R1): P1's round (the
# bonus position after a full round is never checked) and PipeSpec's ChainSpeculativeDecoder
# (lookahead K = theta + 1: the bonus position is re-predicted and checked first)
ROUNDS = ("p1", "pipespec")
ROUND_TEXT = {"p1": "P1's round (the bonus position after a full round is not re-checked)",
              "pipespec": "PipeSpec's round (lookahead K = theta + 1: the bonus position "
                          "after a full round is re-predicted and checked first)"}


def uses_runs(cascade) -> bool:
    """Whether R1 (not P1) states ``cascade``'s time per token: some law carries its run
    across rounds (:class:`RunLaw`), or the config asks for PipeSpec's round."""
    return cascade.option("round", "p1") == "pipespec" or any(
        getattr(law, "carries_age", False) for law in cascade.laws)


def as_run_law(law, field: str = "acceptance[0]") -> RunLaw:
    """``law`` as a run law: a :class:`RunLaw`, or an iid law (the geometric run law, R1
    with one state); other families do not say how a run continues."""
    if isinstance(law, RunLaw):
        return law
    if isinstance(law, IIDGeometric):
        if law.alpha >= 1:
            raise PolyspecInputError(f"{field}.alpha", "must be < 1 under R1 (a run of "
                                     "agreements must end)")
        return RunLaw.geometric(law.alpha)
    raise PolyspecInputError(field, f"R1 (acceptance as runs over positions) needs a run "
                             f"law {{\"run_hazard\": [...], \"tail\": q}} or an iid law, got "
                             f"the {law.family!r} family")


def check_runs(cascade) -> None:
    """The cascades whose acceptance runs over positions: a round policy of :data:`ROUNDS`,
    run or iid laws; two models (R1), or, with PipeSpec's round, any number sharing one
    threshold (its chain decoder, simulated by ``simulators.replay``). Errors name the
    field."""
    rnd = cascade.option("round", "p1")
    if rnd not in ROUNDS:
        raise PolyspecInputError("round", f"must be one of {ROUNDS}, got {rnd!r}")
    if not uses_runs(cascade):
        return
    for i, law in enumerate(cascade.laws):
        as_run_law(law, f"acceptance[{i}]")
    if cascade.n == 2:
        return
    if rnd != "pipespec":
        raise PolyspecInputError(
            "models", f"a run law with P1's round is covered for two models (R1); this "
            f"cascade has {cascade.n}")
    if len(set(cascade.thresholds)) != 1:
        raise PolyspecInputError(
            "thresholds", "PipeSpec's chain decoder has one lookahead K = θ + 1 for every "
            f"pair: give one threshold, got {list(cascade.thresholds)}")


@dataclass(frozen=True)
class RunPrediction:
    """R1's exact long-run accounting of a two-level chain (``round``: the round policy,
    :data:`ROUNDS`); ``stationary``: the law of the carried state (age, continuing)."""

    speedup: float
    time_per_token: float
    autoregressive_time_per_token: float
    tokens_per_round: float
    time_per_round: float
    round: str
    stationary: np.ndarray

    def to_dict(self) -> dict:
        return {"speedup": self.speedup, "time_per_token": self.time_per_token,
                "autoregressive_time_per_token": self.autoregressive_time_per_token,
                "tokens_per_round": self.tokens_per_round,
                "time_per_round": self.time_per_round, "round": self.round,
                "round_policy": ROUND_TEXT[self.round],
                "stationary": self.stationary.tolist()}


def predict_runs(cascade) -> RunPrediction:
    """R1 for ``cascade`` (two models; :func:`check_runs`) under its round policy:
    :func:`sync_two_level` with the drafter's ``T_2(1)`` per draft, the target's ``T_1(m)``
    per verify of ``m`` positions and its per-round overhead."""
    check_runs(cascade)
    if cascade.n != 2:
        raise PolyspecInputError(
            "models", f"R1 is exact for two models; this cascade has {cascade.n} (`polyspec "
            "simulate` replays PipeSpec's chain decoder for more)")
    rnd = cascade.option("round", "p1")
    target, drafter = cascade.models
    r = sync_two_level(as_run_law(cascade.laws[0]), cascade.thresholds[0], drafter.cost.t1,
                       lambda m: float(target.cost(m)), target.overhead,
                       recheck_bonus=rnd == "pipespec")
    t1 = target.cost.t1
    return RunPrediction(t1 / r["time_per_token"], r["time_per_token"], t1,
                         r["tokens_per_round"], r["time_per_round"], rnd, r["stationary"])


def fit_run_law(entry, agree, censored, *, min_at_risk: int = MIN_AT_RISK) -> RunLaw:
    """R2: Kaplan-Meier hazard by age from rounds: round r entered the run at age
    ``entry[r]``, saw ``agree[r]`` agreements, then a disagreement unless ``censored[r]``
    (fully accepted). Ages with fewer than ``min_at_risk`` rounds at risk take the pooled
    hazard of the ages past the well-observed ones (``tail``)."""
    entry = np.asarray(entry, dtype=np.int64)
    agree = np.asarray(agree, dtype=np.int64)
    cens = np.asarray(censored, dtype=bool)
    if not (entry.shape == agree.shape == cens.shape) or entry.ndim != 1:
        raise PolyspecInputError("rounds", "entry, agree and censored must be 1-D and of one "
                                 "length")
    if entry.size == 0:
        raise PolyspecInputError("rounds", "no rounds to fit the run law on")
    if (entry < 0).any() or (agree < 0).any():
        raise PolyspecInputError("rounds", "entry ages and agreements must be >= 0")
    if (cens & (agree == 0)).any():
        raise PolyspecInputError("censored", "a censored round must have >= 1 agreement")
    last = entry + agree - cens.astype(np.int64)  # last age at risk
    top = int(last.max()) + 1
    events = np.bincount((entry + agree)[~cens], minlength=top + 1)[:top]
    at_risk = (np.bincount(entry, minlength=top + 1)[:top].cumsum()
               - np.concatenate([[0], np.bincount(last, minlength=top)[:top - 1].cumsum()]))
    good = np.flatnonzero(at_risk >= min_at_risk)
    n_good = int(good.max()) + 1 if good.size else 0
    hz = tuple(float(events[j] / at_risk[j]) if at_risk[j] else 0.0 for j in range(n_good))
    lo = n_good
    while lo > 0 and at_risk[lo:].sum() < min_at_risk:
        lo -= 1
    tail_ev, tail_risk = events[lo:].sum(), at_risk[lo:].sum()
    tail = float(tail_ev / tail_risk) if tail_risk else 0.5
    return RunLaw(hazard=hz, tail=min(max(tail, 1e-6), 1.0))


def pipespec_exposures(prompts, lookahead: int):
    """R2's observations ``(entry, agree, censored)`` of PipeSpec's rounds (lookahead ``K``;
    ``prompts``: per prompt the tokens each round emitted, in order). A round after a
    rejection (or the first) checks ``K - 1`` drafts from age 0. After a fully accepted round
    the drafter first re-predicts the bonus position, so the next round's checks continue the
    same run: entry age = previous entry + previous checks (``K - 1`` after a fresh round,
    ``K`` after a continuing one), and its emitted count counts the bonus position as one more
    agreement; a continuing round that emits 1 token is a disagreement at its entry age (the
    decoder does not say whether the bonus or the first draft failed). Censored when the
    round emitted all it could (``K``)."""
    k = int(lookahead)
    if k < 2:
        raise PolyspecInputError("lookahead", f"lookahead {k} drafts nothing")
    entry, agree, cens = [], [], []
    for rounds in prompts:
        age, checks, prev_full = 0, k - 1, False
        for a in rounds:
            a = int(a)
            if prev_full:
                age += checks
                checks = k
                n_agree = 0 if a == 1 else a
            else:
                age, checks = 0, k - 1
                n_agree = a - 1
            full = a >= k
            entry.append(age)
            agree.append(min(n_agree, checks))
            cens.append(full)
            prev_full = full
    return np.array(entry, dtype=np.int64), np.array(agree, dtype=np.int64), np.array(
        cens, dtype=bool)


def p1_exposures(prompts):
    """R2's observations of P1's rounds (``prompts``: per prompt the rounds in order as
    ``(G, A)`` pairs). The bonus position after a full round is never checked, so the next
    round's entry age is unknown: only the rounds after a rejection (and each prompt's first)
    enter, from age 0 (``G`` drafts checked, censored when ``A = G``); the rounds they leave
    out depend on the past only through the previous round, so the fit stays unbiased for
    the ages a fresh round reaches (``< G``)."""
    entry, agree, cens = [], [], []
    for i, rounds in enumerate(prompts):
        fresh = True
        for j, r in enumerate(rounds):
            if len(r) != 2:
                raise PolyspecInputError(f"prompts[{i}][{j}]", "must be a (G, A) pair")
            g, a = int(r[0]), int(r[1])
            if g < 1 or not 0 <= a <= g:
                raise PolyspecInputError(f"prompts[{i}][{j}]", f"needs integers 0 <= A <= G, "
                                         f"G >= 1, got {r!r}")
            if fresh:
                entry.append(0)
                agree.append(a)
                cens.append(a == g)
            fresh = a < g
    return np.array(entry, dtype=np.int64), np.array(agree, dtype=np.int64), np.array(
        cens, dtype=bool)


INDEPENDENCE_LEVEL = 1e-3  # R3: rounds called dependent below this p-value


def run_law_report(entry, agree, censored, round_policy: str) -> dict:
    """What ``polyspec fit`` writes for rounds over positions: the run law (R2, config
    syntax: usable as a pair's acceptance with ``"round": round_policy``) and R3's test of
    independent rounds (a constant hazard)."""
    if round_policy not in ROUNDS:
        raise PolyspecInputError("round", f"must be one of {ROUNDS}, got {round_policy!r}")
    law = fit_run_law(entry, agree, censored)
    lr = geometric_lr_test(entry, agree, censored)
    return {"run_law": law.to_config(), "round": round_policy,
            "rounds": int(np.asarray(entry).size),
            "independence": {
                "test": "R3: likelihood ratio of a constant hazard (independent rounds, P1's "
                        "assumption) against one hazard per age",
                "statistic": lr["statistic"], "df": lr["df"], "p_value": lr["p_value"],
                "constant_hazard": lr["hazard"],
                "independent": bool(lr["p_value"] >= INDEPENDENCE_LEVEL),
                "level": INDEPENDENCE_LEVEL}}


def geometric_lr_test(entry, agree, censored, *, max_age: int = 40) -> dict:
    """R3: likelihood-ratio test of a constant hazard (geometric runs: rounds independent)
    against one hazard per age ``< max_age`` (ages beyond pooled). Returns ``statistic``,
    ``df`` and ``p_value`` (chi-square), and the constant hazard fitted."""
    from scipy.stats import chi2

    entry = np.asarray(entry, dtype=np.int64)
    agree = np.asarray(agree, dtype=np.int64)
    cens = np.asarray(censored, dtype=bool)
    if entry.size == 0:
        raise PolyspecInputError("rounds", "no rounds to test")
    ev = np.zeros(max_age + 1)
    risk = np.zeros(max_age + 1)
    for e, g, c in zip(entry, agree, cens, strict=True):
        ages = np.minimum(np.arange(e, e + g + (0 if c else 1)), max_age)
        np.add.at(risk, ages, 1.0)
        if not c:
            ev[min(e + g, max_age)] += 1.0
    h0 = ev.sum() / risk.sum()

    def ll(e, r, h):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(e > 0, e * np.log(np.where(h > 0, h, 1)), 0.0)
            t += np.where(r - e > 0, (r - e) * np.log(np.where(h < 1, 1 - h, 1)), 0.0)
        return float(t.sum())

    used = risk > 0
    hj = np.where(used, ev / np.where(used, risk, 1), 0.0)
    stat = 2.0 * (ll(ev[used], risk[used], hj[used]) - ll(ev[used], risk[used], h0))
    df = int(used.sum()) - 1
    p = float(chi2.sf(stat, df)) if df > 0 else 1.0
    return {"statistic": max(stat, 0.0), "df": df, "p_value": p, "hazard": float(h0)}


def carry_test(prompts) -> dict:
    """R3, read off rounds directly: are a round's accepted counts independent of whether the
    previous round (same prompt, same block ``G``) was fully accepted? ``prompts``: per prompt
    the rounds in order as ``(G, A)`` pairs. Chi-square test of homogeneity of ``A`` between
    rounds after a full round and rounds after a rejection (P1's assumption (i) says equal;
    R1 with a non-constant hazard says not). Returns ``statistic``, ``df``, ``p_value`` and
    the group sizes and means."""
    from scipy.stats import chi2

    after_full, after_rej = [], []
    for i, rounds in enumerate(prompts):
        for j, r in enumerate(rounds):
            if len(r) != 2:
                raise PolyspecInputError(f"prompts[{i}][{j}]", "must be a (G, A) pair")
            g, a = r
            if isinstance(g, bool) or isinstance(a, bool) or int(g) != g or int(a) != a \
                    or g < 1 or a < 0 or a > g:
                raise PolyspecInputError(f"prompts[{i}][{j}]", f"needs integers 0 <= A <= G, "
                                         f"G >= 1, got {r!r}")
        for (g0, a0), (g1, a1) in zip(rounds[:-1], rounds[1:], strict=False):
            if g0 == g1:
                (after_full if a0 >= g0 else after_rej).append(int(a1))
    if not after_full or not after_rej:
        raise PolyspecInputError("prompts", "needs rounds after a full round and after a "
                                 "rejection")
    top = max(after_full + after_rej) + 1
    tab = np.array([np.bincount(after_full, minlength=top),
                    np.bincount(after_rej, minlength=top)], dtype=float)
    tab = tab[:, tab.sum(axis=0) > 0]
    exp = tab.sum(axis=1, keepdims=True) * tab.sum(axis=0, keepdims=True) / tab.sum()
    stat = float(((tab - exp) ** 2 / exp).sum())
    df = tab.shape[1] - 1
    return {"statistic": stat, "df": df, "p_value": float(chi2.sf(stat, df)) if df else 1.0,
            "n_after_full": len(after_full), "n_after_rejection": len(after_rej),
            "mean_after_full": float(np.mean(after_full)),
            "mean_after_rejection": float(np.mean(after_rej))}


def fit_run_law_hidden(prompts, *, max_age: int | None = None, min_at_risk: int = MIN_AT_RISK,
                       tol: float = 1e-9, max_iter: int = 500) -> RunLaw:
    """R2 on every round of P1's rounds (``prompts``: per prompt the ``(G, A)`` rounds in
    order), not only the ones after a rejection: after a fully accepted round the bonus
    position goes unchecked, so the next round's entry age is hidden (``a + G + 1`` if the
    bonus agreed, else 0). The entry ages form a hidden Markov chain; EM (forward-backward
    over rounds, the M step R2's events / exposures by age with expected counts) maximises
    the likelihood of the accepted counts. Ages ``>= max_age`` (default: the largest block
    + 1, at most 40) share the tail; ages with fewer than ``min_at_risk`` expected rounds at
    risk are pooled into it afterwards. Long runs carried over full rounds are seen here,
    which :func:`p1_exposures` leaves out (it sees ages ``< G`` only)."""
    return fit_run_laws_hidden([prompts], max_age=max_age, min_at_risk=min_at_risk, tol=tol,
                               max_iter=max_iter, field="prompts")[0]


def fit_run_laws_hidden(sets, *, max_age: int | None = None, min_at_risk: int = MIN_AT_RISK,
                        tol: float = 1e-9, max_iter: int = 500, field: str = "sets") -> list:
    """:func:`fit_run_law_hidden` of each of ``sets`` (each: per prompt the ``(G, A)`` rounds
    in order), one independent EM each, run side by side: the same laws, to the last bit, as
    one call per set (every sum is taken in the same order; only the loops over sequences and
    sets are vectorised)."""
    max_iter = as_int(max_iter, "max_iter", low=1)
    parsed = [_hidden_sequences(p, field if field == "prompts" else f"{field}[{j}]")
              for j, p in enumerate(sets)]
    groups: dict = {}  # sets with the same state space (largest block, tail age) run together
    for j, seqs in enumerate(parsed):
        gmax = int(max(g.max() for g, _ in seqs))
        big = min(gmax + 1, 40) if max_age is None else int(max_age)
        groups.setdefault((gmax, big), []).append(j)
    out: list = [None] * len(parsed)
    for (gmax, big), js in groups.items():
        laws = _HiddenEM([parsed[j] for j in js], gmax, big).run(min_at_risk, tol, max_iter)
        for j, law in zip(js, laws, strict=True):
            out[j] = law
    return out


def _hidden_sequences(prompts, field: str) -> list:
    """The ``(G, A)`` arrays of each prompt with rounds (refused naming ``field[i]``)."""
    seqs = []
    for i, rounds in enumerate(prompts):
        g = np.array([int(r[0]) for r in rounds], dtype=np.int64)
        a = np.array([int(r[1]) for r in rounds], dtype=np.int64)
        if g.size and (g.min() < 1 or a.min() < 0 or (a > g).any()):
            raise PolyspecInputError(f"{field}[{i}]", "needs rounds 0 <= A <= G, G >= 1")
        if g.size:
            seqs.append((g, a))
    if not seqs:
        raise PolyspecInputError("rounds", "no rounds to fit the run law on")
    return seqs


class _HiddenEM:
    """The EM of :func:`fit_run_law_hidden` on several sets of sequences sharing one state
    space (entry ages ``0..big``, extended ages ``0..big + gmax + 1``). Every sequence of
    every set still running is one row: the forward-backward recursions step over rounds
    for all rows at once (rows longest first: at each round only the rows that have it); the
    M step's expected counts are added in the order of one set at a time, sequence by
    sequence, last round first (floating-point sums are not associative)."""

    def __init__(self, sets, gmax: int, big: int):
        self.sets, self.big = sets, big
        self.n_ext = big + gmax + 2
        self.ages = np.minimum(np.arange(self.n_ext), big)
        self.st = np.arange(big + 1)
        self._ops: dict = {}  # set -> its M-step scatter ops (_set_ops)

    def _set_ops(self, j: int):
        """The M step's scatter of set ``j``, op by op in the order of the per-set loop
        (sequence by sequence, last round first; per round the entry's at-risk start and
        end, then a full round's bonus start and end): per risk op its kind (0: post, 1:
        bonus share), sequence (within the set), round, sign and target (extended age); per
        event op its kind (0: post, 2: bonus event), sequence, round and target. What the
        layout of the running sets adds is only offsets (:meth:`_rows`)."""
        if j not in self._ops:
            risk, ev = [], []
            for ls, (g, a) in enumerate(self.sets[j]):
                r = np.arange(g.size - 1, -1, -1)
                gr, ar = g[r], a[r]
                f = ar == gr
                n = r.size
                # four risk slots per round, the last two (the bonus) for full rounds only
                kind = np.tile([0, 0, 1, 1], n)
                sign = np.tile([1.0, -1.0, 1.0, -1.0], n)
                tgt = np.stack([np.zeros(n, dtype=np.int64), ar + np.where(f, 0, 1), gr, gr + 1],
                               axis=1).ravel()
                keep = np.stack([np.ones(n, bool), np.ones(n, bool), f, f], axis=1).ravel()
                rr = np.repeat(r, 4)
                risk.append((kind[keep], np.full(int(keep.sum()), ls), rr[keep], sign[keep],
                             tgt[keep]))
                ev.append((np.where(f, 2, 0), np.full(n, ls), r, np.where(f, gr, ar)))
            self._ops[j] = tuple(tuple(np.concatenate(x) for x in zip(*part, strict=True))
                                 for part in (risk, ev))
        return self._ops[j]

    def _rows(self, active) -> dict:
        """The row layout of the sets ``active`` (everything that does not depend on the
        hazards): rows longest first, per sequence (in the order of the per-set loops) its
        set (position in ``active``), length and row, per round the number of rows that
        have it (``n_live``); per round and row
        (``(R, S)``, padded to the longest) the block, the accepted count, whether the round
        was full, the flat indices its recursions read; the M step's scatter (value index,
        sign, target index of every expected count, in the order of the per-set loops)."""
        k, n_ext, st, big = self.big + 1, self.n_ext, self.st, self.big
        seqs = [(p, g, a) for p, j in enumerate(active) for g, a in self.sets[j]]
        # rows longest first (stable), so that the rows still running at round r are the
        # first n_live[r]: the recursions step over those only (each row's numbers are its
        # own); pos[i]: the row of the i-th sequence in the order of the per-set loops
        order = np.argsort([-g.size for _, g, _ in seqs], kind="stable")
        pos = np.empty(len(seqs), dtype=np.int64)
        pos[order] = np.arange(len(seqs))
        ll_rows = [(p, g.size, int(pos[i])) for i, (p, g, _) in enumerate(seqs)]
        seqs = [seqs[i] for i in order]
        s_n, r_n = len(seqs), max(g.size for _, g, _ in seqs)
        lens = np.array([g.size for _, g, _ in seqs])
        gg = np.ones((r_n, s_n), dtype=np.int64)
        aa = np.zeros((r_n, s_n), dtype=np.int64)
        for s, (_, g, a) in enumerate(seqs):
            gg[: g.size, s], aa[: g.size, s] = g, a
        full = (aa == gg) & (np.arange(r_n)[:, None] < lens[None, :])
        row = np.array([p for p, _, _ in seqs])
        at_a = st[None, None, :] + aa[:, :, None]
        at_g = st[None, None, :] + gg[:, :, None]
        offs = (np.arange(s_n) * k)[None, :, None]
        nxt = offs + np.minimum(at_g + 1, big)  # flat (row, entry age of the next round)
        fwd = []  # per round: the full rows' flat next-entry indices and their rows
        for r in range(r_n):
            rows = np.flatnonzero(full[r])
            fwd.append((rows, nxt[r][rows].ravel()))
        # the M step's scatter, op by op in the order of the per-set loops: values from
        # (kind 0: post / 1: bonus share / 2: bonus event, round, row, age) with a sign
        risk_src, risk_sign, risk_tgt, ev_src, ev_tgt = [], [], [], [], []
        first = 0  # the set's first row
        for p, j in enumerate(active):
            (kind, ls, r, sign, tgt), (ekind, els, er, etgt) = self._set_ops(j)
            risk_src.append((kind * r_n + r) * s_n + pos[first + ls])
            risk_sign.append(sign)
            risk_tgt.append(p * n_ext + tgt)
            ev_src.append((ekind * r_n + er) * s_n + pos[first + els])
            ev_tgt.append(p * n_ext + etgt)
            first += len(self.sets[j])

        def flat(src, tgt):
            src = (np.concatenate(src).astype(np.int64)[:, None] * k + st[None, :]).ravel()
            return src, (np.concatenate(tgt).astype(np.int64)[:, None] + st[None, :]).ravel()

        rs, rt = flat(risk_src, risk_tgt)
        es, et = flat(ev_src, ev_tgt)
        risk_sign = np.concatenate(risk_sign)
        return {"ll_rows": ll_rows, "full": full,
                "n_live": (lens[None, :] > np.arange(r_n)[:, None]).sum(axis=1).tolist(),
                "cum_a": row[None, :, None] * (n_ext + 1) + at_a,
                "cum_0": (row[:, None] * (n_ext + 1) + st[None, :])[None],
                "qe_a": row[None, :, None] * n_ext + at_a,
                "qe_g": row[None, :, None] * n_ext + at_g,
                "nxt": nxt, "fwd": fwd,
                # no run goes on into age 0 (big >= 1): the entry-0 column is no target
                "col0_free": bool((np.minimum(at_g + 1, big) > 0).all()),
                "risk": (rs, np.repeat(np.asarray(risk_sign), k), rt),
                "ev": (es, et)}

    def _forward(self, lay, emis, qb):
        """Scaled forward pass: ``alpha`` (R, S, k) and the scales (S, R), over the rows
        still running at each round (after a row's last round: alpha 0, scale 1)."""
        r_n, s_n, k = emis.shape
        alpha = np.zeros((r_n, s_n, k))
        scale = np.ones((s_n, r_n))
        n_live = lay["n_live"]
        cur = np.zeros((n_live[0], k))
        cur[:, 0] = 1.0
        full = lay["full"]
        qc = 1 - qb
        for r in range(r_n):
            nl = n_live[r]
            v = cur[:nl] * emis[r, :nl]
            scale[:nl, r] = v.sum(axis=1)
            al = alpha[r, :nl]
            np.divide(v, scale[:nl, r][:, None], out=al)
            col0 = np.where(full[r, :nl], (al * qb[r, :nl]).sum(axis=1), al.sum(axis=1))
            rows, at = lay["fwd"][r]  # full rows: running ones (< nl)
            carried = (al[rows] * qc[r][rows]).ravel()
            if lay["col0_free"]:  # bincount adds in index order from 0.0: np.add.at into zeros
                cur = np.bincount(at, weights=carried, minlength=nl * k).astype(
                    np.float64, copy=False).reshape(nl, k)  # (no weights: int zeros)
                cur[:, 0] = col0
            else:
                cur = np.zeros((nl, k))
                cur[:, 0] = col0
                np.add.at(cur.reshape(-1), at, carried)
        return alpha, scale

    def _backward(self, lay, emis, qb, alpha, scale):
        """Backward pass: per round and row the posterior of the entry age (``vals[0]``)
        and, of a full round, the bonus position's at-risk share and event (``vals[1]``,
        ``vals[2]``)."""
        r_n, s_n, k = emis.shape
        full, n_live, nxt = lay["full"], lay["n_live"], lay["nxt"]
        vals = np.zeros((3, r_n, s_n, k))
        qc = 1 - qb
        # beta, and beta x emission of the round after by its entry: 1 for a row until its
        # last round (the rows running at round r are the first n_live[r])
        beta = np.ones((s_n, k))
        bn_next = np.ones((s_n, k))
        with np.errstate(divide="ignore", invalid="ignore"):
            for r in range(r_n - 1, -1, -1):
                nl = n_live[r]
                al = alpha[r, :nl]
                post = vals[0, r, :nl]  # P(entry age of round r | all rounds), in place
                np.multiply(al, beta[:nl], out=post)
                post /= post.sum(axis=1)[:, None]
                # bonus position at age e + G: at risk; event unless the run went on
                b0 = qb[r, :nl] * bn_next[:nl, :1]
                b1 = qc[r, :nl] * bn_next.reshape(-1)[nxt[r, :nl]]
                both = al * (b0 + b1)
                tot = both.sum(axis=1)[:, None]
                np.divide(both, tot, out=vals[1, r, :nl])
                ev = vals[2, r, :nl]
                np.multiply(al, b0, out=ev)
                ev /= tot
                # beta of round r - 1: sum over this round's entry of transition x emission
                bn = beta[:nl] * emis[r, :nl] / scale[:nl, r][:, None]
                bn_next[:nl] = bn
                if r > 0:
                    beta[:nl] = np.where(full[r - 1, :nl, None], qb[r - 1, :nl] * bn[:, :1]
                                         + qc[r - 1, :nl] * bn.reshape(-1)[nxt[r - 1, :nl]],
                                         bn[:, :1])
        return vals

    def run(self, min_at_risk: int, tol: float, max_iter: int) -> list:
        big, n_ext, ages = self.big, self.n_ext, self.ages
        k, n_sets = big + 1, len(self.sets)
        q = np.full((n_sets, k), 0.5)
        prev = np.full(n_sets, -np.inf)
        running = list(range(n_sets))
        final: dict = {}
        layout = None
        for _ in range(max_iter):
            if layout is None or layout[0] != running:
                layout = (list(running), self._rows(running))
            lay = layout[1]
            full = lay["full"]
            qe = np.clip(q[running][:, ages], 1e-12, 1 - 1e-12)
            cum = np.concatenate([np.zeros((len(running), 1)),
                                  np.cumsum(np.log1p(-qe), axis=1)], axis=1).reshape(-1)
            qe = qe.reshape(-1)
            emis = np.exp(cum[lay["cum_a"]] - cum[lay["cum_0"]])
            emis = np.where(full[:, :, None], emis, emis * qe[lay["qe_a"]])
            qb = qe[lay["qe_g"]]  # hazard at the bonus position
            alpha, scale = self._forward(lay, emis, qb)
            logs = np.log(scale)
            ll = np.zeros(len(running))
            for p, n, s in lay["ll_rows"]:  # in the order of the per-set loops
                ll[p] += logs[s, :n].sum()
            vals = self._backward(lay, emis, qb, alpha, scale).reshape(-1)
            rs, sign, rt = lay["risk"]
            # bincount adds in index order from 0.0: np.add.at into zeros, to the bit
            risk_all = np.bincount(rt, weights=vals[rs] * sign,
                                   minlength=len(running) * n_ext).astype(np.float64, copy=False)
            es, et = lay["ev"]
            ev_all = np.bincount(et, weights=vals[es],
                                 minlength=len(running) * n_ext).astype(np.float64, copy=False)
            still = []
            for p, j in enumerate(running):
                risk = np.cumsum(risk_all[p * n_ext:(p + 1) * n_ext])
                rk = np.bincount(ages, weights=risk, minlength=big + 1)
                evk = np.bincount(ages, weights=ev_all[p * n_ext:(p + 1) * n_ext],
                                  minlength=big + 1)
                q[j] = np.where(rk > 0, evk / np.where(rk > 0, rk, 1), 0.5)
                final[j] = (rk, evk)
                if ll[p] - prev[j] < tol * max(1.0, abs(ll[p])):
                    continue
                prev[j] = ll[p]
                still.append(j)
            running = still
            if not running:
                break
        return [_pooled_tail(*final[j], big, min_at_risk, q[j]) for j in range(n_sets)]


def _pooled_tail(rk, evk, big: int, min_at_risk: int, q) -> RunLaw:
    """R2's law from the expected exposures ``rk`` and events ``evk`` by age: ages with
    fewer than ``min_at_risk`` rounds at risk pooled into the tail."""
    good = np.flatnonzero(rk[:big] >= min_at_risk)
    n_good = int(good.max()) + 1 if good.size else 0
    lo = n_good
    while lo > 0 and rk[lo:].sum() < min_at_risk:
        lo -= 1
    tail = float(evk[lo:].sum() / rk[lo:].sum()) if rk[lo:].sum() > 0 else 0.5
    return RunLaw(hazard=tuple(float(x) for x in q[:lo]), tail=min(max(tail, 1e-6), 1.0))
