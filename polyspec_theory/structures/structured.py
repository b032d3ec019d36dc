"""P1 for cascades with token trees and adaptive draft lengths (docs/theory.md Part III-D, T5, A4).

A config may carry, per adjacent pair, ``"trees": [null | {"parents": [...]}, ...]`` and
``"schedules": [null | {"kind": "hf", ...} | {"kind": "confidence", ...}, ...]``; ``null`` is
the plain chain of docs/theory.md §6. A pair with a tree or a schedule ignores its threshold (except
that a confidence cut-off without ``max`` uses it as its cap). Where they may sit:

* a tree only at the bottom pair (its drafter ``M_n`` is one model running one forward per
  depth; an upper pair's drafter is a sub-cascade, which emits one sequence, not a tree);
* a confidence cut-off only at the bottom pair (it needs the drafter's own top probability),
  with a :class:`~polyspec_theory.structures.schedule.ConfidenceLaw` as that pair's acceptance law;
* an HF schedule at any pair (at an upper pair it adapts ``theta_i``).

Exact computation (A4, a Markov-modulated P1): the round process of each system ``S_i`` is a
Markov additive process — a finite state ``s`` (the HF lengths of level ``i`` and below at the
round's start), a kernel ``K[s, l, s'] = P(L = l, next state s' | s)`` and per-round expected
rewards (time and forwards per model, blocks, ...). A block of level ``i - 1`` is filled by the
renewal DP of P1 run on the pair ``(accumulated length, state)``; the top level's long-run
averages follow from the stationary law of its state (Markov renewal–reward). With no
schedule every state space has one element and this is P1 itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.core.config import as_cascade
from polyspec_theory.core.explain import law_text
from polyspec_theory.core.p1 import LevelPrediction, Prediction
from polyspec_theory.errors import PolyspecInputError, as_int
from polyspec_theory.structures.pairs import (
    pair_kind,
)
from polyspec_theory.structures.schedule import (
    ConfidenceLaw,
    ConfidenceSchedule,
    HFSchedule,
    stationary_distribution,
)
from polyspec_theory.structures.schedule_models import confidence_round
from polyspec_theory.structures.tree_search import tree_draft_cost
from polyspec_theory.structures.trees import ResidualLaw, SiblingLaw, Tree, accepted_pmf

__all__ = [
    "StructuredPrediction",
    "predict_structured",
    "explain_structured",
    "structured_report",
]

MAX_KERNEL = 40_000_000  # entries of one level's kernel K[s, l, s']


# --- the engine -------------------------------------------------------------------------------


class _Layout:
    """Columns of the per-round reward vectors."""

    def __init__(self, n, gmax, lmax, hf_sizes):
        self.cols: dict[str, slice] = {}
        self.size = 0
        m = n - 1

        def add(name, width):
            self.cols[name] = slice(self.size, self.size + width)
            self.size += width

        for name, width in (("time", n), ("fwd", n), ("rounds", m), ("gsum", m), ("lsum", m),
                            ("full", m)):
            add(name, width)
        for i in range(m):
            add(f"g{i}", gmax[i] + 1)
            add(f"l{i}", lmax[i] + 1)
            if hf_sizes[i]:
                add(f"o{i}", hf_sizes[i])

    def col(self, name, j=0) -> int:
        return self.cols[name].start + j


@dataclass
class _Proc:
    K: np.ndarray  # [S, Lmax + 1, S]
    R: np.ndarray  # [S, C]
    init: int


def _bounds(cascade, trees, schedules):
    """Largest block ``G_i`` and emitted length ``L_i`` per pair level, bottom up."""
    m = cascade.n - 1
    gmax, lmax = [0] * m, [0] * m
    for i in range(m - 1, -1, -1):
        t = trees[i] if trees else None
        s = schedules[i] if schedules else None
        if t is not None:
            gmax[i], lmax[i] = t.n_nodes, t.max_depth + 1
            continue
        if isinstance(s, ConfidenceSchedule):
            cap = s.cap(cascade.thresholds[i])
            gmax[i], lmax[i] = cap, cap + 1
            continue
        th = s.max if isinstance(s, HFSchedule) else cascade.thresholds[i]
        below = 1 if i == m - 1 else lmax[i + 1]
        gmax[i] = th if cascade.policy == "truncate" else th - 1 + below
        lmax[i] = gmax[i] + 1
    return gmax, lmax


def _chain_level(i, cascade, low: _Proc, sched, lay: _Layout, gmax_i, lmax_i) -> _Proc:
    """Level ``i`` (chain or HF) from the round process ``low`` of the system below."""
    K_low, R_low = low.K, low.R
    S, Ll = K_low.shape[0], K_low.shape[1] - 1
    hf = isinstance(sched, HFSchedule)
    thetas = list(sched.states) if hf else [cascade.thresholds[i]]
    nsig = len(thetas)
    big = nsig * S
    if big * big * (lmax_i + 1) > MAX_KERNEL:
        raise PolyspecInputError("schedules", f"level {i}'s state space ({big} states) is "
                                 "too large to compute exactly")
    tmax = max(thetas)
    # renewal DP on (accumulated length, state): F[a] = E[#rounds starting at a, by state]
    F = np.zeros((tmax, S, S))
    F[0] = np.eye(S)
    for a in range(1, tmax):
        for l in range(1, min(a, Ll) + 1):
            F[a] += F[a - l] @ K_low[:, l, :]
    W = np.concatenate([np.zeros((1, S, S)), np.cumsum(F, axis=0)])  # W[a] = sum_{a'<a} F
    Q = cascade.laws[i].cap_pmf_table(gmax_i)
    dq = np.diag(Q).copy()
    Qs = np.tril(Q, -1)  # k < g: not fully accepted
    tcost = cascade.costs[i](np.arange(gmax_i + 1) + 1)
    gs = np.arange(gmax_i + 1)
    K = np.zeros((big, lmax_i + 1, big))
    R = np.zeros((big, lay.size))
    for si, th in enumerate(thetas):
        raw = np.zeros((S, th + Ll, S))  # accumulated G in th..th - 1 + Ll
        for a in range(th):
            for l in range(max(1, th - a), Ll + 1):
                raw[:, a + l, :] += F[a] @ K_low[:, l, :]
        exit_ = np.zeros((S, gmax_i + 1, S))
        if cascade.policy == "truncate":  # G = theta, the excess dropped
            exit_[:, th, :] = raw.sum(axis=1)
        else:
            exit_[:, : th + Ll, :] = raw
        pg = exit_.sum(axis=2)  # [S, G]
        k_full = np.zeros((S, lmax_i + 1, S))
        k_full[:, 1: gmax_i + 2, :] = exit_ * dq[None, :, None]
        k_not = np.zeros((S, lmax_i + 1, S))
        k_not[:, 1: gmax_i + 2, :] = np.einsum("sgt,gk->skt", exit_, Qs)
        if hf:
            up = thetas.index(sched.next_length(th, True))
            dn = thetas.index(sched.next_length(th, False))
        else:
            up = dn = 0
        rows = slice(si * S, (si + 1) * S)
        K[rows, :, up * S:(up + 1) * S] += k_full
        K[rows, :, dn * S:(dn + 1) * S] += k_not
        pl = (k_full + k_not).sum(axis=2)  # [S, L]
        r = W[th] @ R_low
        r[:, lay.col("time", i)] += pg @ tcost + cascade.models[i].overhead  # O1: per round
        r[:, lay.col("fwd", i)] += 1.0
        r[:, lay.col("rounds", i)] += 1.0
        r[:, lay.col("gsum", i)] += pg @ gs
        r[:, lay.col("lsum", i)] += pl @ np.arange(lmax_i + 1)
        r[:, lay.col("full", i)] += pg @ dq
        r[:, lay.cols[f"g{i}"]] += pg
        r[:, lay.cols[f"l{i}"]] += pl
        if hf:
            r[:, lay.col(f"o{i}", si)] += 1.0
        R[rows] = r
    start = thetas.index(sched.start) if hf else 0
    return _Proc(K, R, start * S + low.init)


def _tree_level(i, cascade, tree: Tree, lay: _Layout) -> _Proc:
    n = cascade.n
    a_pmf = accepted_pmf(tree, cascade.laws[i], f"acceptance[{i}]")
    D, N = tree.max_depth, tree.n_nodes
    K = np.zeros((1, D + 2, 1))
    K[0, 1:, 0] = a_pmf
    R = np.zeros((1, lay.size))
    R[0, lay.col("time", n - 1)] = tree_draft_cost(tree, cascade.costs[n - 1])
    R[0, lay.col("fwd", n - 1)] = D
    R[0, lay.col("time", i)] = cascade.costs[i](N + 1) + cascade.models[i].overhead
    R[0, lay.col("fwd", i)] = 1.0
    R[0, lay.col("rounds", i)] = 1.0
    R[0, lay.col("gsum", i)] = N
    R[0, lay.col("lsum", i)] = float(np.dot(np.arange(1, D + 2), a_pmf))
    R[0, lay.col("full", i)] = a_pmf[-1]
    R[0, lay.col(f"g{i}", N)] = 1.0
    R[0, lay.cols[f"l{i}"]] = K[0, :, 0]
    return _Proc(K, R, 0)


def _confidence_level(i, cascade, sched: ConfidenceSchedule, lay: _Layout) -> _Proc:
    n = cascade.n
    cap = sched.cap(cascade.thresholds[i])
    rd = confidence_round(cascade.laws[i], sched.eta, cap)
    K = np.zeros((1, cap + 2, 1))
    K[0, 1:, 0] = rd.accepted_pmf
    R = np.zeros((1, lay.size))
    R[0, lay.col("time", n - 1)] = rd.draft_forwards * cascade.costs[n - 1].t1
    R[0, lay.col("fwd", n - 1)] = rd.draft_forwards
    R[0, lay.col("time", i)] = (float(rd.block_pmf @ cascade.costs[i](np.arange(cap + 1) + 1))
                                + cascade.models[i].overhead)
    R[0, lay.col("fwd", i)] = 1.0
    R[0, lay.col("rounds", i)] = 1.0
    R[0, lay.col("gsum", i)] = rd.mean_block
    R[0, lay.col("lsum", i)] = rd.mean_emitted
    # all drafted tokens accepted: A = G = g < cap (r^g (1 - q)) or A = cap (r^cap)
    g = np.arange(cap)
    R[0, lay.col("full", i)] = float(np.sum(rd.r**g) * (1.0 - rd.q) + rd.r**cap)
    R[0, lay.cols[f"g{i}"]] = rd.block_pmf
    R[0, lay.cols[f"l{i}"]] = K[0, :, 0]
    return _Proc(K, R, 0)


@dataclass(frozen=True)
class StructuredPrediction:
    """P1 with trees and schedules: ``prediction`` (the same :class:`Prediction` as
    :func:`polyspec_theory.core.p1.predict_chain`), per-pair details, and the top level's state
    chain (``transition``, per-round ``rewards``, ``stationary``) for finite-horizon checks."""

    prediction: object
    pairs: tuple[dict, ...]
    transition: np.ndarray = field(repr=False)
    rewards: np.ndarray = field(repr=False)
    stationary: np.ndarray = field(repr=False)
    init: int = 0
    layout: _Layout = field(default=None, repr=False)

    @property
    def speedup(self) -> float:
        return self.prediction.speedup

    def finite_horizon(self, burn_in: int, rounds: int) -> dict:
        """Exact expectations over top-level rounds ``burn_in + 1 .. burn_in + rounds`` from
        the start state: what a simulation of that many rounds estimates (the gap to the
        stationary speedup is the start's transient)."""
        b = as_int(burn_in, "burn_in", low=0)
        r = as_int(rounds, "rounds", low=1)
        mu = np.zeros(self.transition.shape[0])
        mu[self.init] = 1.0
        tot = np.zeros(self.rewards.shape[1])
        for k in range(b + r):
            if k >= b:
                tot += mu @ self.rewards
            mu = mu @ self.transition
        lay = self.layout
        tokens = tot[lay.col("lsum", 0)]
        time = tot[lay.cols["time"]].sum()
        t1 = self.prediction.autoregressive_time_per_token
        return {"tokens": float(tokens), "time": float(time), "speedup": t1 * tokens / time}

    def to_dict(self) -> dict:
        return {**self.prediction.to_dict(), "pairs": [dict(p) for p in self.pairs]}


def predict_structured(cascade) -> StructuredPrediction:
    """P1 (exact) for a cascade with trees and schedules (module docstring); identical to
    :func:`polyspec_theory.core.p1.predict_chain` on plain chains (up to rounding)."""
    as_cascade(cascade)
    n, m = cascade.n, cascade.n - 1
    trees, schedules = cascade.trees, cascade.schedules
    gmax, lmax = _bounds(cascade, trees, schedules)
    scheds = [schedules[i] if schedules else None for i in range(m)]
    hf_sizes = [s.max - s.min + 1 if isinstance(s, HFSchedule) else 0 for s in scheds]
    lay = _Layout(n, gmax, lmax, hf_sizes)
    # M_n alone: one token per forward
    K0 = np.zeros((1, 2, 1))
    K0[0, 1, 0] = 1.0
    R0 = np.zeros((1, lay.size))
    R0[0, lay.col("time", n - 1)] = cascade.costs[n - 1].t1
    R0[0, lay.col("fwd", n - 1)] = 1.0
    proc = _Proc(K0, R0, 0)
    for i in range(m - 1, -1, -1):
        t = trees[i] if trees else None
        if t is not None:
            proc = _tree_level(i, cascade, t, lay)
        elif isinstance(scheds[i], ConfidenceSchedule):
            proc = _confidence_level(i, cascade, scheds[i], lay)
        else:
            proc = _chain_level(i, cascade, proc, scheds[i], lay, gmax[i], lmax[i])
    P = proc.K.sum(axis=1)
    pi = stationary_distribution(P, proc.init, "schedules")
    rbar = pi @ proc.R
    x = rbar / rbar[lay.col("lsum", 0)]  # per generated token
    times = x[lay.cols["time"]]
    fwds = x[lay.cols["fwd"]]
    total = float(times.sum())

    def rounds_of(j):
        return x[lay.col("rounds", j)] if j < m else fwds[n - 1]

    levels = []
    for j in range(n):
        rj = rounds_of(j)
        if j < m:
            bp = x[lay.cols[f"g{j}"]] / rj
            ep = x[lay.cols[f"l{j}"]] / rj
            mb = float(x[lay.col("gsum", j)] / rj)
            me = float(x[lay.col("lsum", j)] / rj)
        else:
            bp, ep, mb, me = None, np.array([0.0, 1.0]), None, 1.0
        rc = float(times[j:].sum() / rj)
        levels.append(LevelPrediction(
            name=cascade.models[j].name,
            phi=None if j == 0 else float(rj / rounds_of(j - 1)),
            block_pmf=bp, mean_block=mb, emitted_pmf=ep, mean_emitted=me,
            round_cost=rc, tau=rc / me, forwards_per_token=float(fwds[j]),
            forward_cost=float(times[j] / fwds[j]) - (cascade.models[j].overhead if j < m
                                                      else 0.0),
            time_per_token=float(times[j]), time_share=float(times[j] / total),
            overhead=cascade.models[j].overhead if j < m else 0.0))
    t_ar = cascade.costs[0].t1
    pred = Prediction(speedup=t_ar / total, time_per_token=total,
                      autoregressive_time_per_token=t_ar, levels=tuple(levels),
                      policy=cascade.policy)
    pairs = []
    for i in range(m):
        kind = pair_kind(cascade, i)
        rj = rounds_of(i)
        info = {"pair": i, "verifier": cascade.models[i].name,
                "drafter": cascade.models[i + 1].name, "kind": kind,
                "mean_block": levels[i].mean_block, "mean_emitted": levels[i].mean_emitted,
                "full_acceptance": float(x[lay.col("full", i)] / rj)}
        if kind == "chain":
            info["threshold"] = cascade.thresholds[i]
        elif kind == "tree":
            t = trees[i]
            info.update(parents=list(t.parents), nodes=t.n_nodes, depth=t.max_depth,
                        draft_positions=t.draft_positions().tolist(),
                        accepted_pmf=accepted_pmf(t, cascade.laws[i]).tolist())
        elif kind == "hf":
            s = scheds[i]
            occ = x[lay.cols[f"o{i}"]] / rj
            info.update(schedule=s.to_config(), lengths=s.states.tolist(),
                        length_distribution=occ.tolist(),
                        mean_length=float(occ @ s.states))
        else:
            s = scheds[i]
            rd = confidence_round(cascade.laws[i], s.eta, s.cap(cascade.thresholds[i]))
            info.update(schedule=s.to_config(), cap=rd.cap, q=rd.q, r=rd.r,
                        draft_forwards=rd.draft_forwards)
        pairs.append(info)
    return StructuredPrediction(pred, tuple(pairs), P, proc.R, pi, proc.init, lay)


# --- reports ----------------------------------------------------------------------------------


def _law_text(law) -> str:
    if isinstance(law, SiblingLaw):
        rows = law.rows
        if len(rows) == 1:
            return "sibling ranks p=" + ",".join(f"{x:.3g}" for x in rows[0])
        return f"sibling ranks by depth ({len(rows)} rows) p1=" + ",".join(
            f"{r[0]:.3g}" for r in rows)
    if isinstance(law, ResidualLaw):
        p = law.rank_probs(1, 4)[0]
        return (f"SpecInfer residual rule ({law.target.shape[0]} context(s)), ranks p="
                + ",".join(f"{x:.3g}" for x in p) + ",...")
    if isinstance(law, ConfidenceLaw):
        return (f"confidence C~Beta({law.a:.3g},{law.b:.3g}), P(acc|c)=sigmoid({law.b0:.3g}"
                f"{law.b1:+.3g} logit c), alpha={law.alpha:.3g}")
    return law_text(law)


def explain_structured(cascade, sp: StructuredPrediction) -> str:
    """Plain-text explanation of :func:`predict_structured` (as ``polyspec predict``)."""
    pred = sp.prediction
    names = [mm.name for mm in cascade.models]
    lines = [
        f"Cascade {cascade.name!r}: " + " <- ".join(names)
        + f"  ({cascade.n} levels, block policy: {pred.policy})",
        f"Predicted speedup over autoregressive {names[0]}: {pred.speedup:.3f}x "
        "(exact P1 with trees/schedules, Markov renewal-reward; time base: model-cost units)",
        f"Time per token: {pred.time_per_token:.4g} vs "
        f"{pred.autoregressive_time_per_token:.4g} autoregressive",
        "",
        "Pairs (verifier <- drafter):",
    ]
    for p in sp.pairs:
        i = p["pair"]
        head = f"  {p['verifier']} <- {p['drafter']}: {_law_text(cascade.laws[i])}; "
        if p["kind"] == "chain":
            what = f"chain, threshold {p['threshold']}"
        elif p["kind"] == "tree":
            what = (f"tree of {p['nodes']} nodes, depth {p['depth']} (drafter forwards score "
                    f"{p['draft_positions']} positions)")
        elif p["kind"] == "hf":
            s = p["schedule"]
            what = (f"HF schedule start {s['start']} in [{s['min']}, {s['max']}]: stationary "
                    f"mean length {p['mean_length']:.3f}")
        else:
            what = (f"confidence cut-off eta={p['schedule']['eta']:.3g}, cap {p['cap']}: "
                    f"P(draft)={p['q']:.3f}, P(draft & accept)={p['r']:.3f}, drafter "
                    f"forwards/round {p['draft_forwards']:.3f}")
        lines.append(head + what)
        lines.append(f"    mean block E[G]={p['mean_block']:.3f}, emitted per verify "
                     f"E[L]={p['mean_emitted']:.3f}, fully accepted {p['full_acceptance']:.3f}")
    lines += ["", f"  {'model':<12}{'phi':>8}{'fwd/token':>11}{'cost/fwd':>10}{'time/token':>12}"
              f"{'share':>8}"]
    for lv in pred.levels:
        phi = "-" if lv.phi is None else f"{lv.phi:.3f}"
        lines.append(f"  {lv.name:<12}{phi:>8}{lv.forwards_per_token:>11.3f}"
                     f"{lv.forward_cost:>10.4g}{lv.time_per_token:>12.4g}"
                     f"{100 * lv.time_share:>7.1f}%")
    if pred.speedup < 1:
        lines.append("Warning: this cascade is SLOWER than autoregressive decoding of the target.")
    return "\n".join(lines)


def structured_report(cascade) -> dict:
    """The JSON object of ``polyspec predict --json`` for a cascade with trees/schedules."""
    sp = predict_structured(cascade)
    return {"config": cascade.to_config(), **sp.to_dict()}
