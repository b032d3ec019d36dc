"""An independent exact computation of parallel draft-verify (docs/theory.md Part VI-PL),
written from the rules of PL0 as nano-PEARL states them, for the tests of
``polyspec_theory/schemes/pearl.py``.

No renewal cycles, no binomial law, no lumped states, no linearity trick: the protocol is run
one check at a time (each check of a draft at age ``a`` is a branch with the law's
probability), the target's text length is kept as the benchmark reads it, the run list as the
benchmark records it, and the ``b`` sequences of a lockstep batch are carried as one joint
state. The long run is the stationary law of the product chain over ``b`` sequences (states
``(mode, age)``, ages capped where the law's hazard stops changing), solved directly."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

PRE, POST = "pre", "post"


def accept_prob(accept: tuple, ratio: float, age: int) -> float:
    return accept[age] if age < len(accept) else ratio


def step(mode: str, age: int, pending: int, gamma: int, accept: tuple, ratio: float):
    """One step of one sequence, check by check. Yields ``(prob, mode, age, pending,
    appended, verified, rejected)``: ``appended`` = change of the target's text length."""
    if mode == PRE:
        p = accept_prob(accept, ratio, 0)
        # accepted: the target appends all gamma new drafts (1 verified, gamma - 1 pending)
        yield p, POST, 1, gamma - 1, gamma, 1, 0
        # rejected: the drafts are dropped, the correction is appended
        yield 1.0 - p, PRE, 0, 0, 1, 1, 1
        return
    checks = pending + 1  # the pending drafts of the previous block + the current first
    prob, a = 1.0, age
    for n in range(checks):
        p = accept_prob(accept, ratio, a)
        # rejected at the n-th check: roll back the pending drafts, keep n, add the correction
        yield prob * (1.0 - p), PRE, 0, 0, -pending + n + 1, n + 1, 1
        prob *= p
        a += 1
    # all accepted: the current block is appended (first verified, rest pending)
    yield prob, POST, a, gamma - 1, gamma, checks, 0


def horizon(gamma, accept, ratio, costs, steps):
    """Exact expectations over ``steps`` steps from all-pre-verify of a batch of
    ``len(costs) - 1`` sequences: per-sequence time, verified tokens, counted tokens (1 + the
    target's text), MAT (mean of the run list), and P(post-verify) per step."""
    b = len(costs) - 1
    # one sequence: full path law over (mode, age, pending, text, verified, run, runsum, nruns)
    seq = {(PRE, 0, 0, 0, 0, 0, 0, 0): 1.0}
    post = []
    for _ in range(steps):
        post.append(sum(p for s, p in seq.items() if s[0] == POST))
        nxt = defaultdict(float)
        for (mode, age, pend, text, ver, run, rsum, nr), p in seq.items():
            for q, m2, a2, p2, app, v, rej in step(mode, age, pend, gamma, accept, ratio):
                if q <= 0.0:
                    continue
                if rej:  # the benchmark records (accepted since the last rejection) + 1
                    acc = run + v - 1
                    key = (m2, a2, p2, text + app, ver + v, 0, rsum + acc + 1, nr + 1)
                else:
                    key = (m2, a2, p2, text + app, ver + v, run + v, rsum, nr)
                nxt[key] += p * q
        seq = nxt
    post.append(sum(p for s, p in seq.items() if s[0] == POST))
    verified = sum(p * s[4] for s, p in seq.items())
    counted = sum(p * (1 + s[3]) for s, p in seq.items())
    # the unfinished run is recorded without the +1
    mat = sum(p * (s[6] + s[5]) / (s[7] + 1) for s, p in seq.items())
    # the batch: joint (mode, age, pending) of b sequences, time per step from n_post
    joint = {((PRE, 0, 0),) * b: 1.0}
    time = 0.0
    for _ in range(steps):
        nxt = defaultdict(float)
        for state, p in joint.items():
            time += p * costs[sum(1 for s in state if s[0] == POST)]
            branches = [list(step(*s, gamma, accept, ratio)) for s in state]
            for combo in itertools.product(*branches):
                q = float(np.prod([c[0] for c in combo]))
                if q > 0.0:
                    nxt[tuple((c[1], c[2], c[3]) for c in combo)] += p * q
        joint = nxt
    return {"time": time, "verified": verified, "counted": counted, "mat": mat,
            "post": np.array(post)}


def long_run(gamma, accept, ratio, costs):
    """Long-run per-sequence time per token and tokens per step: the stationary law of the
    product chain of ``b`` sequences on the states reachable from all-pre-verify (ages capped
    at ``len(accept)``: from there every age accepts with ``ratio``)."""
    b = len(costs) - 1
    cap = len(accept)

    def key(mode, age):
        return (mode, min(age, cap) if mode == POST else 0)

    # one sequence: states reachable from pre-verify, transitions and expected tokens
    states, index, todo = [], {}, [(PRE, 0)]
    trans, tokens = {}, {}
    while todo:
        s = todo.pop()
        if s in index:
            continue
        index[s] = len(states)
        states.append(s)
        out = defaultdict(float)
        tok = 0.0
        pend = 0 if s[0] == PRE else gamma - 1
        for q, m2, a2, _p2, _app, v, _rej in step(s[0], s[1], pend, gamma, accept, ratio):
            if q > 0.0:
                out[key(m2, a2)] += q
                tok += q * v
        trans[s], tokens[s] = dict(out), tok
        todo.extend(k for k in out if k not in index)
    n1 = len(states)
    joint = list(itertools.product(range(n1), repeat=b))
    jindex = {j: i for i, j in enumerate(joint)}
    P = np.zeros((len(joint), len(joint)))
    for j in joint:
        rows = [trans[states[i]] for i in j]
        for combo in itertools.product(*[list(r.items()) for r in rows]):
            P[jindex[j], jindex[tuple(index[c[0]] for c in combo)]] += \
                float(np.prod([c[1] for c in combo]))
    # stationary law of the class reached from all-pre: power iteration from that start,
    # Cesaro-averaged (exact for aperiodic chains; the tests draw aperiodic laws)
    A = P.T - np.eye(len(joint))
    A[-1, :] = 1.0
    rhs = np.zeros(len(joint))
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(A, rhs, rcond=None)[0]
    cost = np.array([costs[sum(1 for i in j if states[i][0] == POST)] for j in joint])
    tok = np.array([tokens[states[j[0]]] for j in joint])
    return {"time_per_token": float(pi @ cost / (pi @ tok)), "tokens_per_step": float(pi @ tok)}
