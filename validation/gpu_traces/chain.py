"""PipeSpec's synchronous chain (``ChainSpeculativeDecoder``) replayed on synthetic greedy
models, and the acceptance law that drives it.

Acceptance law: greedy drafting is deterministic, so what varies is WHERE a drafter's argmax
first differs from its verifier's. :class:`AgeHazard` models the agreement of one pair as a
renewal process: after a disagreement, the probability that the next disagreement comes at
age j (positions since the last one) is the hazard ``q_j``. It is fitted (Kaplan-Meier, the
lookahead censors each round at K-1 accepted drafts) on the rounds that start right after a
rejection, pooled over every lookahead of the pair; ages beyond the data use the pooled tail
hazard. Assumption: the law does not depend on K (the same prompts give the same text).

Replay (:func:`simulate_chain`): a target token is a hash of its prefix; the model below it
agrees with the model above it at that prefix with probability ``1 - q(age)`` (otherwise it
emits another token), so every model is a deterministic function of its prefix, as greedy
models are. The decoder loop is a transcription of ``decoding.ChainSpeculativeDecoder.generate``:
the smallest model drafts until it is K-1 tokens ahead of the next, a middle model verifies
the draft and then drafts until it is K-1 ahead of the model above, the target verifies (at most
100 tokens per call) and every drafter rolls back to the target's output where it diverged; a
draft that does not extend the verifier's output exactly gets a 1-token verify. Call costs come
from :class:`ChainCosts`; the output stops at the prompt's token count (EOS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError

from .pipespec import MAX_VERIFY_TOKENS, PipeSpecRun

_VOCAB = 128_000
MIN_AT_RISK = 10  # ages with fewer rounds at risk use the tail hazard


@dataclass(frozen=True)
class AgeHazard:
    """Renewal law of draft/verifier disagreement: ``hazard[j]`` = P(disagree at age j |
    agreed at ages < j); ages >= len(hazard) use ``tail``."""

    hazard: tuple[float, ...]
    tail: float

    def q(self, age: int) -> float:
        return self.hazard[age] if age < len(self.hazard) else self.tail

    def survival(self, j: int) -> float:
        """P(at least j agreements in a row from age 0)."""
        s = 1.0
        for a in range(j):
            s *= 1.0 - self.q(a)
        return s

    def mean_accepted(self, lookahead: int) -> float:
        """Expected tokens per verify call of a round starting at age 0 (bonus included)."""
        return 1.0 + sum(self.survival(j) for j in range(1, max(lookahead, 1)))


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
    k = run.lookahead
    if k < 2:
        raise PolyspecInputError(run.path, f"lookahead {k} drafts nothing")
    entry, agree, cens = [], [], []
    for s in run.samples:
        age, checks = 0, k - 1
        prev_full = False
        for a in s.accepted[0]:
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
    return np.array(entry), np.array(agree), np.array(cens, dtype=bool)


def fit_age_hazard(observations) -> AgeHazard:
    """Kaplan-Meier hazard by age from ``[(entry, agreements, censored), ...]`` (left-truncated
    at the entry age, right-censored after the last agreement when ``censored``)."""
    entry = np.concatenate([np.asarray(o[0], dtype=np.int64) for o in observations])
    agree = np.concatenate([np.asarray(o[1], dtype=np.int64) for o in observations])
    cens = np.concatenate([np.asarray(o[2], dtype=bool) for o in observations])
    if entry.size == 0:
        raise PolyspecInputError("acceptance", "no rounds to fit the acceptance law on")
    last = entry + agree - cens.astype(np.int64)  # last age at risk
    top = int(last.max()) + 1
    events = np.bincount((entry + agree)[~cens], minlength=top + 1)[:top]
    at_risk = (np.bincount(entry, minlength=top + 1)[:top].cumsum()
               - np.concatenate([[0], np.bincount(last, minlength=top)[:top - 1].cumsum()]))
    good = np.flatnonzero(at_risk >= MIN_AT_RISK)
    n_good = int(good.max()) + 1 if good.size else 0
    hz = tuple(float(events[j] / at_risk[j]) for j in range(n_good))
    # beyond the well-observed ages: the pooled hazard of the ages past them (long runs of
    # agreement persist, so earlier ages would overstate it), widened back while too sparse
    lo = n_good
    while lo > 0 and at_risk[lo:].sum() < MIN_AT_RISK:
        lo -= 1
    tail_ev, tail_risk = events[lo:].sum(), at_risk[lo:].sum()
    tail = float(tail_ev / tail_risk) if tail_risk else 0.5
    return AgeHazard(hazard=hz, tail=min(max(tail, 1e-6), 1.0))


@dataclass(frozen=True)
class ChainCosts:
    """Seconds per call. ``draft[i]``: one draft step of model i (i < n-1); ``verify[i-1]``
    (model i >= 1): ``(ms, secs, beyond)``, a verify call of m tokens costs the piecewise-linear
    interpolation through the points ``(ms, secs)``, constant below the first point and, beyond
    the last, constant (``beyond="flat"``) or on the line through the last two points
    (``"linear"``); ``overhead``: per prompt (prefills, EOS checks: time in no logged call);
    ``reject[i-1]``: added to a call of model i that rejects a draft token (the drafters'
    caches are cropped inside the timed call)."""

    draft: tuple[float, ...]
    verify: tuple[tuple[tuple[float, ...], tuple[float, ...], str], ...]
    overhead: float
    reject: tuple[float, ...] = ()  # extra seconds of a verify call that rejects (rollback)

    def verify_cost(self, i: int, m: int) -> float:
        ms, vs, beyond = self.verify[i - 1]
        if m > ms[-1] and beyond == "linear" and len(ms) > 1:
            return vs[-1] + (m - ms[-1]) * (vs[-1] - vs[-2]) / (ms[-1] - ms[-2])
        return float(np.interp(m, ms, vs))


_M64 = (1 << 64) - 1
_ROOT, _TOK, _AGREE, _ALT = 1, 2, 3, 4  # stream tags


def _mix(*xs: int) -> int:
    """Deterministic 64-bit hash of integers (splitmix64 chain; Python's ``hash`` of strings
    changes between processes, this does not)."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (x & _M64)) * 0xBF58476D1CE4E5B9 & _M64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _M64
        h ^= h >> 31
    return h


def _u(seed, *key) -> float:
    return (_mix(seed, *key) >> 11) / float(1 << 53)


class _World:
    """Deterministic greedy models: target token = hash(prefix); model i agrees with model
    i+1 unless its renewal law says disagree at this prefix's age."""

    def __init__(self, laws, seed):
        self.laws, self.seed, self.n = laws, seed, len(laws) + 1
        self.tok = [dict() for _ in range(self.n)]
        self.agree = [dict() for _ in laws]
        self.age = [dict() for _ in laws]

    def root(self, sample: int) -> int:
        h = _mix(self.seed, _ROOT, sample)
        for a in self.age:
            a[h] = 0
        return h

    def next(self, i: int, h: int) -> int:
        t = self.tok[i].get(h)
        if t is not None:
            return t
        if i == self.n - 1:
            t = _mix(self.seed, _TOK, h) % _VOCAB
        else:
            up = self.next(i + 1, h)
            ok = _u(self.seed, _AGREE, i, h) >= self.laws[i].q(self.age[i][h])
            self.agree[i][h] = ok
            alt = (up + 1 + _mix(self.seed, _ALT, i, h) % (_VOCAB - 1)) % _VOCAB
            t = up if ok else alt
        self.tok[i][h] = t
        return t

    def extend(self, h: int, t: int) -> int:
        h2 = _mix(h, t)
        for i in range(self.n - 1):
            if h2 not in self.age[i]:
                self.next(i, h)
                self.age[i][h2] = self.age[i][h] + 1 if self.agree[i][h] else 0
        return h2


class _State:
    __slots__ = ("out", "hs")

    def __init__(self, out, hs):
        self.out, self.hs = out, hs


def simulate_chain(prompt_laws, costs: ChainCosts, lookahead: int, n_tokens,
                   seed: int = 0) -> dict:
    """Replay the synchronous chain (models smallest first) on prompts of ``n_tokens`` output
    tokens each; ``prompt_laws[s][i]`` is prompt s's law of pair i -> i+1. Returns per-prompt
    ``time`` (s) and ``rounds``, and the mean tokens per verify call of each level
    (``accepted``)."""
    if len(prompt_laws) != len(n_tokens):
        raise PolyspecInputError("prompt_laws", f"{len(prompt_laws)} prompts' laws for "
                                 f"{len(n_tokens)} prompts")
    n = len(prompt_laws[0]) + 1
    k = int(lookahead)
    if k < 2:
        raise PolyspecInputError("lookahead", f"must be >= 2 (K-1 drafts per round), got {k}")
    times, rounds = [], []
    acc_tot = np.zeros(n - 1)
    acc_n = np.zeros(n - 1)
    for si, n_tok in enumerate(n_tokens):
        t, r = _replay_prompt(_World(prompt_laws[si], seed), si, n, k, costs, int(n_tok),
                              acc_tot, acc_n)
        times.append(t)
        rounds.append(r)
    return {"time": np.array(times), "rounds": np.array(rounds),
            "accepted": acc_tot / np.maximum(acc_n, 1)}


def _replay_prompt(w, si, n, k, costs, n_tok, acc_tot, acc_n):
    """One prompt of ``decoding.ChainSpeculativeDecoder.generate``: (seconds, rounds)."""
    root = w.root(si)
    states = []
    for i in range(n):
        t = w.next(i, root)
        states.append(_State([t], [root, w.extend(root, t)]))
    t_sample = costs.overhead

    def rollback():  # ChainSpeculativeDecoder.update_states / build_draft_inputs
        tgt = states[-1]
        for i in range(n - 1):
            s = states[i]
            m = min(len(s.out), len(tgt.out))
            if s.hs[m] != tgt.hs[m]:
                states[i] = _State(list(tgt.out), list(tgt.hs))

    def step(i):
        s = states[i]
        t = w.next(i, s.hs[-1])
        s.out.append(t)
        s.hs.append(w.extend(s.hs[-1], t))

    def verify(i):  # build_verify_inputs + verify_step
        d, s = states[i - 1], states[i]
        ln = len(s.out)
        if ln > len(d.out) or d.hs[ln] != s.hs[ln]:
            drafts = []
        else:
            drafts = d.out[ln:min(ln - 1 + MAX_VERIFY_TOKENS, len(d.out))]
        got = 0
        h = s.hs[-1]
        while True:
            t = w.next(i, h)
            s.out.append(t)
            h = w.extend(h, t)
            s.hs.append(h)
            got += 1
            if got > len(drafts) or drafts[got - 1] != t:
                break
        acc_tot[i - 1] += got
        acc_n[i - 1] += 1
        extra = costs.reject[i - 1] if costs.reject and got <= len(drafts) else 0.0
        return costs.verify_cost(i, len(drafts) + 1) + extra

    rollback()
    r = 0
    while len(states[-1].out) < n_tok:
        r += 1
        while len(states[0].out) - len(states[1].out) < k - 1:
            step(0)
            t_sample += costs.draft[0]
        for i in range(1, n - 1):
            t_sample += verify(i)
            while len(states[i].out) - len(states[i + 1].out) < k - 1:
                step(i)
                t_sample += costs.draft[i]
        t_sample += verify(n - 1)
        rollback()
    return t_sample, r
