"""PipeSpec's synchronous chain (``ChainSpeculativeDecoder``) replayed on synthetic greedy
models whose agreement follows run laws over output positions (docs/theory.md Part III-E): the
chain scheme's kernel for PipeSpec's round.

A target token is a hash of its prefix; the model below it agrees with the model above it at
that prefix with probability ``1 - q(age)`` of the pair's
:class:`~polyspec_theory.core.runs.RunLaw` (otherwise it emits another token), so every model
is a deterministic function of its prefix, as greedy models are. The decoder loop is a
transcription of ``decoding.ChainSpeculativeDecoder.generate``: the smallest model drafts
until it is K-1 tokens ahead of the next, a middle model verifies the draft and then drafts
until it is K-1 ahead of the model above, the target verifies (at most 100 tokens per call)
and every drafter rolls back to the target's output where it diverged; a draft that does not
extend the verifier's output exactly gets a 1-token verify. Call costs come from
:class:`ChainCosts`; the output stops at the prompt's token count (EOS). Positions whose
agreement is known (``known``: what measured runs revealed,
``validation.formats.pipespec.revealed_positions``) are replayed as they were.

Deterministic in ``seed`` (a 64-bit hash chain, not a PRNG stream): same seed, same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.pipelines.asynchronous import MAX_VERIFY_TOKENS

__all__ = ["ChainCosts", "simulate_chain", "simulate_chain_priced"]

_VOCAB = 128_000


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
_H0 = 0x9E3779B97F4A7C15
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _fold(h: int, x: int) -> int:
    """One splitmix64 step of :func:`_mix`'s chain: the state after absorbing ``x``."""
    h = (h ^ (x & _M64)) * _C1 & _M64
    h = (h ^ (h >> 27)) * _C2 & _M64
    return h ^ (h >> 31)


def _mix(*xs: int) -> int:
    """Deterministic 64-bit hash of integers (splitmix64 chain; Python's ``hash`` of strings
    changes between processes, this does not). ``_mix(a, b, c) == _fold(_mix(a, b), c)``:
    the replay's hot paths start from the state of their fixed leading keys."""
    h = _H0
    for x in xs:
        h = _fold(h, x)
    return h


def _u(seed, *key) -> float:
    return (_mix(seed, *key) >> 11) / float(1 << 53)


class _World:
    """Deterministic greedy models: target token = hash(prefix); model i agrees with model
    i+1 unless its renewal law says disagree at this prefix's age. The hashes of
    :func:`_mix` with the fixed leading keys ``(seed, tag[, level])`` folded in once
    (``_fold`` of their state with the prefix hash: the same numbers, a third of the work)."""

    def __init__(self, laws, seed, known=None):
        self.laws, self.seed, self.n = laws, seed, len(laws) + 1
        self.tok = [dict() for _ in range(self.n)]
        self.agree = [dict() for _ in laws]
        self.age = [dict() for _ in laws]
        self.known = known or {}  # output position -> agreement of the top pair (R1)
        self.path: dict[int, int] = {}  # hash of the target's prefix -> its length
        self._tok0 = _mix(seed, _TOK)
        self._agree0 = [_mix(seed, _AGREE, i) for i in range(len(laws))]
        self._alt0 = [_mix(seed, _ALT, i) for i in range(len(laws))]

    def root(self, sample: int) -> int:
        h = _mix(self.seed, _ROOT, sample)
        for a in self.age:
            a[h] = 0
        if self.known:
            x = h
            for p in range(max(self.known) + 1):
                self.path[x] = p
                x = _mix(x, _fold(self._tok0, x) % _VOCAB)
        return h

    def next(self, i: int, h: int) -> int:
        t = self.tok[i].get(h)
        if t is not None:
            return t
        if i == self.n - 1:
            t = _fold(self._tok0, h) % _VOCAB  # _mix(seed, _TOK, h)
        else:
            up = self.next(i + 1, h)
            pos = self.path.get(h) if i == self.n - 2 else None
            if pos is not None and pos in self.known:
                ok = self.known[pos]
            else:  # _u(seed, _AGREE, i, h)
                u = (_fold(self._agree0[i], h) >> 11) / float(1 << 53)
                ok = u >= self.laws[i].q(self.age[i][h])
            self.agree[i][h] = ok
            alt = (up + 1 + _fold(self._alt0[i], h) % (_VOCAB - 1)) % _VOCAB
            t = up if ok else alt
        self.tok[i][h] = t
        return t

    def extend(self, h: int, t: int) -> int:
        # _mix(h, t), _fold inlined (the replay's hottest line)
        x = (_H0 ^ (h & _M64)) * _C1 & _M64
        x = (x ^ (x >> 27)) * _C2 & _M64
        x ^= x >> 31
        x = (x ^ (t & _M64)) * _C1 & _M64
        x = (x ^ (x >> 27)) * _C2 & _M64
        h2 = x ^ (x >> 31)
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
    per-prompt ``time`` (s), ``rounds`` and ``tokens`` (emitted after the first), and the mean
    tokens per verify call of each level
    (``accepted``)."""
    return simulate_chain_priced(prompt_laws, (costs,), lookahead, n_tokens, seed, known)[0]


def simulate_chain_priced(prompt_laws, costs, lookahead: int, n_tokens, seed: int = 0,
                          known=None) -> list[dict]:
    """:func:`simulate_chain` under each :class:`ChainCosts` of ``costs``, from one replay:
    the calls a replay makes do not depend on their costs, so each costs' times are its own
    sums over the same calls in the same order (element ``j`` equals
    ``simulate_chain(..., costs[j], ...)``, every float)."""
    costs = tuple(costs)
    if not costs or not all(isinstance(c, ChainCosts) for c in costs):
        raise PolyspecInputError("costs", "must be one or more ChainCosts")
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
    times, rounds, emitted = [[] for _ in costs], [], []
    acc_tot = np.zeros(n - 1)
    acc_n = np.zeros(n - 1)
    verify_memo = [{} for _ in costs]  # (level, m) -> verify_cost: np.interp once per call size
    for si, n_tok in enumerate(n_tokens):
        w = _World(prompt_laws[si], seed, known[si] if known is not None else None)
        t, r, out = _replay_prompt(w, si, n, k, costs, int(n_tok), (acc_tot, acc_n),
                                   verify_memo)
        for j, tj in enumerate(t):
            times[j].append(tj)
        rounds.append(r)
        emitted.append(out)
    accepted = acc_tot / np.maximum(acc_n, 1)
    return [{"time": np.array(tj), "rounds": np.array(rounds), "tokens": np.array(emitted),
             "accepted": accepted.copy()} for tj in times]


def _replay_prompt(w, si, n, k, costs, n_tok, acc, verify_memo):
    """One prompt of ``decoding.ChainSpeculativeDecoder.generate``: (seconds under each of
    ``costs``, rounds, tokens); ``acc``: the tokens per verify call, summed and counted."""
    acc_tot, acc_n = acc
    root = w.root(si)
    states = []
    for i in range(n):
        t = w.next(i, root)
        states.append(_State([t], [root, w.extend(root, t)]))
    priced = range(len(costs))
    t_sample = [c.overhead for c in costs]

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
        if reset[i]:
            reset[i] = False
            for j in priced:
                if costs[j].draft_reset:
                    t_sample[j] += costs[j].draft_reset[i]
        s = states[i]
        t = w.next(i, s.hs[-1])
        s.out.append(t)
        s.hs.append(w.extend(s.hs[-1], t))
        for j in priced:
            t_sample[j] += costs[j].draft[i]

    def verify(i, per_round=False):  # build_verify_inputs + verify_step
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
        key = (i, len(drafts) + 1)
        for j in priced:
            c = costs[j]
            v = verify_memo[j].get(key)
            if v is None:
                v = verify_memo[j][key] = c.verify_cost(i, len(drafts) + 1)
            extra = c.reject[i - 1] if c.reject and got <= len(drafts) else 0.0
            if per_round:  # the target's call, then the time of its round outside the calls
                t_sample[j] += v + extra + c.per_round
            else:
                t_sample[j] += v + extra

    rollback()
    r = 0
    while len(states[-1].out) < n_tok:
        r += 1
        while len(states[0].out) - len(states[1].out) < k - 1:
            step(0)
        for i in range(1, n - 1):
            verify(i)
            while len(states[i].out) - len(states[i + 1].out) < k - 1:
                step(i)
        verify(n - 1, per_round=True)
        rollback()
    return t_sample, r, len(states[-1].out) - 1  # the first token is the prefill's


@dataclass(frozen=True)
class ReplayResult:
    """The replay of a cascade under PipeSpec's round (:func:`replay_cascade`): speedup
    (``T_1(1)`` x tokens / time, ratio estimator over prompts), tokens per verify call of
    each verifier (target first)."""

    speedup: object  # RatioEstimate
    time_per_token: object
    tokens_per_verify: tuple[float, ...]
    tokens: int
    chains: int
    lookahead: int
    seed: int | None
    round: str = "pipespec"

    def to_dict(self) -> dict:
        return {"speedup": self.speedup.value, "ci95": [self.speedup.low, self.speedup.high],
                "se": self.speedup.se, "time_per_token": self.time_per_token.value,
                "tokens_per_verify": list(self.tokens_per_verify), "tokens": self.tokens,
                "chains": self.chains, "lookahead": self.lookahead, "round": self.round,
                "seed": self.seed}


def chain_costs(cascade) -> ChainCosts:
    """The cascade's costs as the replay's calls (models smallest first): a draft step of
    model ``j`` is ``T_j(1)``, a verify call of ``m`` positions ``T_j(m) + o_j`` (tabulated up
    to the verify cap, linear beyond)."""
    n = cascade.n
    ms = tuple(float(m) for m in range(1, MAX_VERIFY_TOKENS + 1))
    draft = tuple(float(cascade.models[n - 1 - r].cost.t1) for r in range(n - 1))
    verify = []
    for r in range(1, n):
        m = cascade.models[n - 1 - r]
        secs = tuple(float(x) + m.overhead for x in np.asarray(m.cost(np.array(ms))))
        verify.append((ms, secs, "linear"))
    return ChainCosts(draft, tuple(verify), 0.0)


def replay_cascade(cascade, tokens: int, seed=0, *, chains: int = 64) -> ReplayResult:
    """PipeSpec's chain decoder replayed on ``cascade`` (lookahead ``K = θ + 1``, one θ for
    every pair; each pair's run law, an iid law as the geometric one): ``chains`` prompts of
    ``ceil(tokens / chains)`` tokens. ``seed``: an int (or a JAX PRNG key, hashed to one)."""
    from polyspec_theory.core.runs import as_run_law
    from simulators.runtime import as_chains, ratio_estimate

    chains = as_chains(chains)
    seed_int = _seed_int(seed)
    n = cascade.n
    k = cascade.thresholds[0] + 1
    laws = tuple(as_run_law(cascade.laws[n - 2 - i], f"acceptance[{n - 2 - i}]")
                 for i in range(n - 1))
    per = -(-int(tokens) // chains)
    out = simulate_chain([laws] * chains, chain_costs(cascade), k, [per] * chains,
                         seed=seed_int)
    tok = out["tokens"].astype(np.float64)
    t1 = cascade.models[0].cost.t1
    return ReplayResult(ratio_estimate(tok, out["time"], scale=t1),
                        ratio_estimate(out["time"], tok),
                        tuple(float(x) for x in out["accepted"][::-1]), int(tok.sum()), chains,
                        k, seed if isinstance(seed, int) else None)


def _seed_int(seed) -> int:
    if isinstance(seed, int) and not isinstance(seed, bool):
        if seed < 0:
            raise PolyspecInputError("seed", f"must be >= 0, got {seed}")
        return seed
    import jax

    return int(jax.random.bits(seed, (), dtype=np.uint32))
