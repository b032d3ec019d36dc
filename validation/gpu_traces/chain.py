"""PipeSpec's synchronous chain runs read as acceptance over output positions (docs/theory.md
Part III-E): greedy drafting is deterministic, so what varies is WHERE a drafter's argmax
first differs from its verifier's. The law of one pair is a run law
(:class:`polyspec_theory.core.runs.RunLaw`: after a disagreement, the probability that the
next disagreement comes at age j is the hazard ``q_j``), fitted (R2, Kaplan-Meier, the
lookahead censors each round at K-1 accepted drafts) on the pair's rounds, pooled over every
lookahead of the pair; ages beyond the data use the pooled tail hazard. Assumption: the law
does not depend on K (the same prompts give the same text).

Positions (R1): agreement is a function of the output position, so the positions a run
reveals (:func:`revealed_positions`: every checked draft, and the bonus position of a
continuing round, an ambiguous one told by its timed call) can be replayed directly (the
``known`` positions of :func:`simulators.replay.simulate_chain`, PipeSpec's round replayed).
"""

from __future__ import annotations

import numpy as np

from polyspec_theory.core.runs import RunLaw, fit_run_law, pipespec_exposures
from polyspec_theory.errors import PolyspecInputError

from .pipespec import PipeSpecRun

MIN_AT_RISK = 10  # ages with fewer rounds at risk use the tail hazard


def round_exposures(run: PipeSpecRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entry age, agreements, censored) of every verify call of a two-model synchronous run.

    A round after a rejection (or the first) checks K-1 drafts from age 0. After a fully
    accepted round the drafter first re-predicts the bonus position, so the next round's
    checks continue the same run of agreements: entry age = previous entry + previous checks
    (K-1 after a fresh round, K after a continuing one) and ``accepted`` counts the bonus
    position as one more agreement; a continuing round that accepts 1 token is counted as a
    disagreement at its entry age (the decoder does not say whether the bonus or the first
    draft failed). Censored when the round accepted all it could (K tokens)."""
    if run.strategy != "chain" or len(run.models) != 2:
        raise PolyspecInputError(run.path, "acceptance laws are fitted on two-model "
                                 "synchronous chain runs")
    if run.lookahead < 2:
        raise PolyspecInputError(run.path, f"lookahead {run.lookahead} drafts nothing")
    return pipespec_exposures([s.accepted[0] for s in run.samples], run.lookahead)


def fit_age_hazard(observations) -> RunLaw:
    """Kaplan-Meier hazard by age from ``[(entry, agreements, censored), ...]`` (left-truncated
    at the entry age, right-censored after the last agreement when ``censored``): R2,
    :func:`polyspec_theory.core.runs.fit_run_law`."""
    entry = np.concatenate([np.asarray(o[0], dtype=np.int64) for o in observations])
    agree = np.concatenate([np.asarray(o[1], dtype=np.int64) for o in observations])
    cens = np.concatenate([np.asarray(o[2], dtype=bool) for o in observations])
    if entry.size == 0:
        raise PolyspecInputError("acceptance", "no rounds to fit the acceptance law on")
    return fit_run_law(entry, agree, cens, min_at_risk=MIN_AT_RISK)


def revealed_positions(run: PipeSpecRun) -> dict[int, dict[int, bool]]:
    """Per prompt (``sample_index``): the output positions whose drafter/verifier agreement a
    two-model synchronous run reveals (R1: agreement is a function of the position). Output
    position p's agreement: the drafter's argmax after the verifier's first p tokens equals the
    verifier's token p. A round from verifier length L (fresh: the drafter was reset) checks
    positions L..L+K-2: accepting a < K tokens reveals agreement at L..L+a-2 and a disagreement
    at L+a-1; a = K reveals agreement at L..L+K-2 and the next round (continuing) first
    re-checks the bonus position L+K-1. A continuing round that accepts a >= 2 reveals
    agreement at its bonus position, then as a fresh round; one that accepts 1 is ambiguous
    (the bonus disagreed and the verify fed 1 token, or the bonus agreed and the first draft
    did not): its timed call says which -- a 1-token verify is in the fast cluster, below the
    midpoint of the run's fastest such call and its mean rejecting K-token call (no timing
    to tell by: nothing revealed)."""
    if run.strategy != "chain" or len(run.models) != 2:
        raise PolyspecInputError(run.path, "positions are read from two-model synchronous "
                                 "chain runs")
    k = max(run.lookahead, 1)
    thr = None
    amb, rej = [], []
    for s in run.samples:
        a, t = s.accepted[0], s.model_times[1] if len(s.model_times) > 1 else None
        if t is None or len(t) != len(a):
            continue
        after = np.zeros(len(a), dtype=bool)
        after[1:] = a[:-1] >= k
        amb.append(t[after & (a == 1)])
        rej.append(t[~(after & (a == 1)) & (a < k)])
    if amb and rej:
        amb_all, rej_all = np.concatenate(amb), np.concatenate(rej)
        if amb_all.size and rej_all.size:
            thr = (amb_all.min() + rej_all.mean()) / 2
    out = {}
    for s in run.samples:
        d: dict[int, bool] = {}
        ln, cont = 1, False
        times = s.model_times[1] if len(s.model_times) > 1 else None
        for j, a in enumerate(s.accepted[0]):
            a = int(a)
            if k == 1:  # no drafts: nothing is checked
                ln += a
                continue
            if cont:
                if a == 1:
                    if thr is not None and times is not None and j < len(times):
                        if times[j] < thr:
                            d[ln - 1] = False  # 1-token verify: the bonus disagreed
                        else:
                            d[ln - 1], d[ln] = True, False
                    ln, cont = ln + 1, False
                    continue
                d[ln - 1] = True
            for p in range(ln, ln + min(a, k - 1) - (0 if a >= k else 1)):
                d[p] = True
            if a < k:
                d[ln + a - 1] = False
            cont = a >= k
            ln += a
        out[s.index] = d
    return out


def merge_positions(maps) -> dict[int, bool]:
    """Union of revealed positions of several runs of one prompt; a position they disagree on
    (the texts differ there) is left out."""
    seen: dict[int, bool] = {}
    bad: set[int] = set()
    for m in maps:
        for p, v in m.items():
            if p in seen and seen[p] != v:
                bad.add(p)
            seen.setdefault(p, v)
    return {p: v for p, v in seen.items() if p not in bad}
