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

Positions (docs/theory.md R1): agreement is a function of the output position, so the
positions a run reveals (:func:`revealed_positions`: every checked draft, and the bonus
position of a continuing round, an ambiguous one told by its timed call) can be replayed
directly (``known``); a run replayed at its own lookahead on its own positions gives its
verify calls one for one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.runs import fit_run_law
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
    at the entry age, right-censored after the last agreement when ``censored``): R2,
    :func:`polyspec_theory.core.runs.fit_run_law`."""
    entry = np.concatenate([np.asarray(o[0], dtype=np.int64) for o in observations])
    agree = np.concatenate([np.asarray(o[1], dtype=np.int64) for o in observations])
    cens = np.concatenate([np.asarray(o[2], dtype=bool) for o in observations])
    if entry.size == 0:
        raise PolyspecInputError("acceptance", "no rounds to fit the acceptance law on")
    law = fit_run_law(entry, agree, cens, min_at_risk=MIN_AT_RISK)
    return AgeHazard(hazard=law.hazard, tail=law.tail)


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


@dataclass(frozen=True)
class ChainCosts:
    """Seconds per call. ``draft[i]``: one draft step of model i (i < n-1); ``verify[i-1]``
    (model i >= 1): ``(ms, secs, beyond)``, a verify call of m tokens costs the piecewise-linear
    interpolation through the points ``(ms, secs)``, constant below the first point and, beyond
    the last, constant (``beyond="flat"``) or on the line through the last two points
    (``"linear"``); ``overhead``: per prompt (prefills, EOS checks: time in no logged call);
    ``reject[i-1]``: added to a call of model i that rejects a draft token (the drafters'
    caches are cropped inside the timed call); ``draft_reset[i]``: added to the first draft step
    of model i after it was rolled back to its verifier's output (it feeds the tokens from the
    divergence on); ``per_round``: per round of the target, outside every logged call."""

    draft: tuple[float, ...]
    verify: tuple[tuple[tuple[float, ...], tuple[float, ...], str], ...]
    overhead: float
    reject: tuple[float, ...] = ()  # extra seconds of a verify call that rejects (rollback)
    draft_reset: tuple[float, ...] = ()  # extra seconds of a drafter's first step after reset
    per_round: float = 0.0  # seconds per round outside the logged calls (the EOS check)

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

    def __init__(self, laws, seed, known=None):
        self.laws, self.seed, self.n = laws, seed, len(laws) + 1
        self.tok = [dict() for _ in range(self.n)]
        self.agree = [dict() for _ in laws]
        self.age = [dict() for _ in laws]
        self.known = known or {}  # output position -> agreement of the top pair (R1)
        self.path: dict[int, int] = {}  # hash of the target's prefix -> its length

    def root(self, sample: int) -> int:
        h = _mix(self.seed, _ROOT, sample)
        for a in self.age:
            a[h] = 0
        if self.known:
            x = h
            for p in range(max(self.known) + 1):
                self.path[x] = p
                x = _mix(x, _mix(self.seed, _TOK, x) % _VOCAB)
        return h

    def next(self, i: int, h: int) -> int:
        t = self.tok[i].get(h)
        if t is not None:
            return t
        if i == self.n - 1:
            t = _mix(self.seed, _TOK, h) % _VOCAB
        else:
            up = self.next(i + 1, h)
            pos = self.path.get(h) if i == self.n - 2 else None
            if pos is not None and pos in self.known:
                ok = self.known[pos]
            else:
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
                   seed: int = 0, known=None) -> dict:
    """Replay the synchronous chain (models smallest first) on prompts of ``n_tokens`` output
    tokens each; ``prompt_laws[s][i]`` is prompt s's law of pair i -> i+1; ``known[s]`` (optional)
    maps output positions of prompt s to the top pair's agreement there (positions other runs
    revealed, :func:`revealed_positions`): there the law is not drawn. Lookahead 1: the
    drafter only catches up to its verifier's length (one step per round) and every verify
    feeds one token, as the decoder's loop condition gives. Returns
    per-prompt ``time`` (s) and ``rounds``, and the mean tokens per verify call of each level
    (``accepted``)."""
    if len(prompt_laws) != len(n_tokens):
        raise PolyspecInputError("prompt_laws", f"{len(prompt_laws)} prompts' laws for "
                                 f"{len(n_tokens)} prompts")
    if known is not None and len(known) != len(n_tokens):
        raise PolyspecInputError("known", f"{len(known)} prompts' positions for "
                                 f"{len(n_tokens)} prompts")
    n = len(prompt_laws[0]) + 1
    k = int(lookahead)
    if k < 1:
        raise PolyspecInputError("lookahead", f"must be >= 1, got {k}")
    times, rounds = [], []
    acc_tot = np.zeros(n - 1)
    acc_n = np.zeros(n - 1)
    for si, n_tok in enumerate(n_tokens):
        w = _World(prompt_laws[si], seed, known[si] if known is not None else None)
        t, r = _replay_prompt(w, si, n, k, costs, int(n_tok), acc_tot, acc_n)
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

    reset = [False] * n

    def rollback():  # ChainSpeculativeDecoder.update_states / build_draft_inputs
        tgt = states[-1]
        for i in range(n - 1):
            s = states[i]
            m = min(len(s.out), len(tgt.out))
            if s.hs[m] != tgt.hs[m]:
                states[i] = _State(list(tgt.out), list(tgt.hs))
                reset[i] = True

    def step(i):
        nonlocal t_sample
        if reset[i]:
            reset[i] = False
            if costs.draft_reset:
                t_sample += costs.draft_reset[i]
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
        t_sample += verify(n - 1) + costs.per_round
        rollback()
    return t_sample, r
