"""Independent exact computation of the lockstep batched cascade (B0) for tests: the event
machine itself, enumerated over every joint outcome of the ``b`` sequences' accepted counts,
with memoization on the state. No maxima laws, no Wald identity, no renewal DP: only the
laws' own ``pmf_vector`` and the costs ``T_i(b, m)``.

One top-level batched round is a regenerative cycle (all blocks empty at its start), so the
long-run throughput is ``E[tokens per cycle] / E[time per cycle]`` (renewal–reward)."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

from polyspec_theory.serving.batch import batch_cost


def enumerate_batch(cascade, b: int) -> dict:
    n = cascade.n
    m = n - 1
    th = cascade.thresholds
    truncate = cascade.policy == "truncate"
    costs = [batch_cost(mo.cost, b) for mo in cascade.models]
    pmf_cache = {}

    def pmf(level, cap):
        key = (level, cap)
        if key not in pmf_cache:
            pmf_cache[key] = cascade.laws[level].pmf_vector(cap)
        return pmf_cache[key]

    @cache
    def value(level: int, acc: tuple) -> tuple[float, float, float]:
        """(E[time], E[tokens], E[sum of max-block at level 0]) from this event to the end of
        the current top-level round; ``acc[i]`` = blocks of pair level i (i < m - 1)."""
        if level == m - 1:
            blocks = (th[m - 1],) * b
            cost = th[m - 1] * costs[n - 1](1) + costs[m - 1](th[m - 1] + 1)
        else:
            blocks = tuple(min(g, th[level]) if truncate else g for g in acc[level])
            cost = costs[level](max(blocks) + 1)
        et, ek, eg = cost, 0.0, float(max(blocks)) if level == 0 else 0.0
        laws = [pmf(level, g) for g in blocks]
        for accepted in itertools.product(*[range(g + 1) for g in blocks]):
            pr = 1.0
            for j, a in enumerate(accepted):
                pr *= laws[j][a]
            if pr == 0.0:
                continue
            emitted = [a + 1 for a in accepted]
            if level == 0:
                ek += pr * sum(emitted)
                continue
            new = [list(r) for r in acc]
            if level < m - 1:
                new[level] = [0] * b
            parent = level - 1
            for j in range(b):
                if new[parent][j] < th[parent]:
                    new[parent][j] += emitted[j]
            new_t = tuple(tuple(r) for r in new)
            nxt = parent if all(x >= th[parent] for x in new_t[parent]) else m - 1
            t2, k2, g2 = value(nxt, new_t)
            et += pr * t2
            ek += pr * k2
            eg += pr * g2
        return et, ek, eg

    start = tuple(tuple([0] * b) for _ in range(m - 1))
    t, k, g = value(m - 1, start)
    t1 = costs[0](1)
    return {"time": t, "tokens": k, "max_block": g, "speedup": t1 * k / (b * t),
            "tokens_per_time": k / t}


def random_small_cascade(draw, st, n_max=3, theta_max=3, table_len=4):
    """A hypothesis-drawn small cascade with batch-dependent costs (roofline or batch table)
    for the enumerator (blocks stay small)."""
    from polyspec_theory.core.config import Cascade

    n = draw(st.integers(2, n_max))
    models = []
    for i in range(n):
        kind = draw(st.sampled_from(["roofline", "batch_table", "plain"]))
        scale = 1.0 if i == 0 else draw(st.one_of(st.just(0.0), st.floats(0.01, 0.6)))
        if kind == "roofline":
            cost = {"roofline": {
                "overhead": scale * draw(st.floats(0.0, 0.3)),
                "weight_time": scale * draw(st.floats(0.1, 1.0)) + (0.1 if i == 0 else 0.0),
                "compute_time": scale * draw(st.one_of(st.just(0.0), st.floats(1e-3, 0.2))),
                "kv_time": scale * draw(st.floats(0.0, 0.05))}}
        elif kind == "batch_table":
            rows = {}
            for bb in (1, 2, 4, 1024):
                row = np.cumsum(draw(st.lists(st.floats(0.0, 0.5), min_size=1,
                                              max_size=table_len)))
                rows[str(bb)] = [float(scale * (1 + 0.3 * min(bb, 8)) + x * scale) +
                                 (0.1 if i == 0 else 0.0) for x in row]
            cost = {"batch_table": rows}
        else:
            cost = {"base": scale + (0.1 if i == 0 else 0.0),
                    "per_token": scale * draw(st.floats(0.0, 0.1))}
        models.append({"name": f"m{i}", "cost": cost})
    acc = []
    for _ in range(n - 1):
        fam = draw(st.sampled_from(["alpha", "positional", "beta"]))
        if fam == "alpha":
            acc.append({"alpha": draw(st.floats(0.0, 1.0))})
        elif fam == "positional":
            acc.append({"positional": draw(st.lists(st.floats(0.0, 1.0), min_size=1,
                                                    max_size=3))})
        else:
            acc.append({"beta": [draw(st.floats(0.3, 5.0)), draw(st.floats(0.3, 5.0))]})
    ths = [draw(st.integers(1, theta_max)) for _ in range(n - 1)]
    policy = draw(st.sampled_from(["accumulate", "truncate"]))
    return Cascade.from_config({"models": models, "acceptance": acc, "thresholds": ths,
                                "policy": policy})
