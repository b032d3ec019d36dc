"""Token trees, time and choice (docs/theory.md Part III-D, T3-T4): the time of a tree round,
its speedup, and the best tree for a node budget (Sequoia's dynamic programme, written here
from scratch; beam and best-width trees for comparison).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.config import law_from_config
from polyspec_theory.core.costs import CostCurve, cost_from_config
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
)
from polyspec_theory.structures.trees import (
    MAX_TREE_NODES,
    Tree,
    TreeLaw,
    accepted_pmf,
    expected_emitted_tree,
)

__all__ = [
    "beam_tree",
    "tree_draft_cost",
    "tree_round_cost",
    "TreeRound",
    "tree_round",
    "tree_speedup",
    "OptimalTree",
    "max_expected_emitted",
    "optimal_tree",
    "best_width_tree",
    "widest_emitted_tree",
]


# --- time of a round (T3) ----------------------------------------------------------------------


def _curve(c, field) -> CostCurve:
    return cost_from_config(c, field)


def tree_draft_cost(tree: Tree, draft_cost) -> float:
    """Drafter time of one tree: ``sum_{d=1..D} T_draft(m_d)`` — one forward per depth,
    scoring the ``m_d`` nodes of depth ``d - 1`` that have children (a chain: ``G T(1)``)."""
    if not isinstance(tree, Tree):
        raise PolyspecInputError("tree", "must be a Tree")
    c = _curve(draft_cost, "draft_cost")
    return float(np.sum(c(tree.draft_positions())))


def tree_round_cost(tree: Tree, target_cost, draft_cost) -> float:
    """T3: ``sum_d T_draft(m_d) + T_target(N + 1)`` (the verifier scores the N nodes and the
    root in one forward with a tree attention mask)."""
    t = _curve(target_cost, "target_cost")
    return tree_draft_cost(tree, draft_cost) + float(t(tree.n_nodes + 1))


@dataclass(frozen=True)
class TreeRound:
    """One verification round of a tree (two models): the law of ``A``, ``E[L]``, costs."""

    tree: Tree
    accepted_pmf: np.ndarray
    mean_emitted: float
    draft_time: float
    verify_time: float
    speedup: float

    @property
    def round_time(self) -> float:
        return self.draft_time + self.verify_time

    def to_dict(self) -> dict:
        return {"parents": list(self.tree.parents), "nodes": self.tree.n_nodes,
                "depth": self.tree.max_depth, "accepted_pmf": self.accepted_pmf.tolist(),
                "mean_emitted": self.mean_emitted, "draft_time": self.draft_time,
                "verify_time": self.verify_time, "speedup": self.speedup}


def tree_round(tree: Tree, law, target_cost, draft_cost) -> TreeRound:
    """T3: speedup of two models drafting ``tree``: ``T_target(1) E[L] / (sum_d T_draft(m_d)
    + T_target(N + 1))``; a path of ``G`` nodes gives D2's ``T_1(1) E[L] / (G T_2(1) +
    T_1(G + 1))``."""
    if not isinstance(tree, Tree):
        raise PolyspecInputError("tree", "must be a Tree")
    t = _curve(target_cost, "target_cost")
    if t.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    pmf = accepted_pmf(tree, law)
    el = expected_emitted_tree(tree, law)
    dt = tree_draft_cost(tree, draft_cost)
    vt = float(t(tree.n_nodes + 1))
    return TreeRound(tree, pmf, el, dt, vt, t.t1 * el / (dt + vt))


def tree_speedup(tree: Tree, law, target_cost, draft_cost) -> float:
    """Speedup of :func:`tree_round`."""
    return tree_round(tree, law, target_cost, draft_cost).speedup


# --- optimal trees (T4) -------------------------------------------------------------------------


def _tree_law(law, field="law") -> TreeLaw:
    if isinstance(law, dict):
        law = law_from_config(law, field)
    if not isinstance(law, TreeLaw):
        raise PolyspecInputError(
            field, "an optimal tree needs a tree law (sibling or residual); for a chain law "
            "the best tree is a chain: use dualistic.optimal_gamma")
    return law


def _dp(rows: np.ndarray, n_max: int):
    """Sequoia-style DP. ``rows[t]`` = rank probabilities of the children of a node at depth
    ``t`` (t = 0..T-1; no children at depth T). ``V[t, n]`` = max of ``sum_v f(v)`` over
    subtrees rooted at depth ``t`` with at most ``n`` nodes (root included), n = 1..n_max.
    Returns ``V`` and the choices to rebuild the trees."""
    T = rows.shape[0]
    V = np.full((T + 1, n_max + 1), -np.inf)
    V[:, 1:] = 1.0
    best_j = np.zeros((T + 1, n_max + 1), dtype=np.int64)
    choice: dict[tuple[int, int], np.ndarray] = {}
    for t in range(T - 1, -1, -1):
        p = rows[t]
        nz = np.flatnonzero(p > 0)
        K = int(nz[-1]) + 1 if nz.size else 0
        K = min(K, n_max - 1)
        vchild = V[t + 1, 1:]  # x = 1..n_max
        H = np.zeros(n_max)  # H_0(m) = 0 for m = 0..n_max-1 (at most m nodes)
        best = H.copy()
        bj = np.zeros(n_max, dtype=np.int64)
        m = np.arange(n_max)
        for j in range(1, K + 1):
            # H_j(m) = max_{1<=x<=m} H_{j-1}(m - x) + p_j V[t+1][x]
            x = np.arange(1, n_max)
            rest = m[:, None] - x[None, :]
            ok = rest >= 0
            cand = np.where(ok, H[np.clip(rest, 0, None)] + p[j - 1] * vchild[x - 1][None, :],
                            -np.inf)
            arg = np.argmax(cand, axis=1)
            Hj = cand[m, arg]
            choice[(t, j)] = np.where(np.isfinite(Hj), arg + 1, 0)
            H = Hj
            better = H > best
            best = np.where(better, H, best)
            bj = np.where(better, j, bj)
        V[t, 1:] = 1.0 + best[: n_max]
        best_j[t, 1:] = bj[: n_max]
    return V, best_j, choice


def _rebuild(t0: int, n: int, best_j, choice) -> Tree:
    return Tree(_rebuild_parents(t0, n, best_j, choice))


def _rebuild_parents(t0: int, n: int, best_j, choice) -> tuple[int, ...]:
    """The parents of the DP's tree rooted at depth ``t0`` with budget ``n`` (root included)."""
    parents = [-1]
    queue = [(0, t0, n)]  # (node id, dp depth, budget incl. root)
    head = 0
    while head < len(queue):
        v, t, b = queue[head]
        head += 1
        m = b - 1
        j = int(best_j[t, b]) if b >= 1 else 0
        sizes = []
        for r in range(j, 0, -1):
            x = int(choice[(t, r)][m])
            sizes.append(x)
            m -= x
        for x in reversed(sizes):
            parents.append(v)
            queue.append((len(parents) - 1, t + 1, x))
    if len(parents) == 1:  # no child is ever accepted: every tree has E[L] = 1, and one
        parents.append(0)  # drafted node is the cheapest (a tree drafts at least one)
    return tuple(parents)


@dataclass(frozen=True)
class OptimalTree:
    """Result of :func:`optimal_tree` / :func:`max_expected_emitted`. ``exact``: the tree is
    optimal over every tree within the budget (T4's conditions hold)."""

    tree: Tree
    mean_emitted: float
    speedup: float | None
    max_nodes: int
    max_depth: int
    exact: bool

    def to_dict(self) -> dict:
        return {"parents": list(self.tree.parents), "nodes": self.tree.n_nodes,
                "depth": self.tree.max_depth, "mean_emitted": self.mean_emitted,
                "speedup": self.speedup, "max_nodes": self.max_nodes,
                "max_depth": self.max_depth, "exact": self.exact}


def _budget(max_nodes, max_depth):
    n = as_int(max_nodes, "max_nodes", low=1, high=MAX_TREE_NODES)
    d = n if max_depth is None else as_int(max_depth, "max_depth", low=1, high=MAX_TREE_NODES)
    return n, min(d, n)


def max_expected_emitted(law, max_nodes: int, max_depth: int | None = None) -> OptimalTree:
    """T4: the tree with at most ``max_nodes`` drafted nodes and depth at most ``max_depth``
    maximizing ``E[L] = sum_v f(v)`` under a tree law (exact DP: a subtree's best value
    depends only on its size and the depth of its root)."""
    law = _tree_law(law)
    n, D = _budget(max_nodes, max_depth)
    rows = law.rank_probs(D, n)
    V, bj, ch = _dp(rows, n + 1)
    tree = _rebuild(0, n + 1, bj, ch)
    return OptimalTree(tree, float(V[0, n + 1]), None, n, D, True)


def optimal_tree(law, max_nodes: int, target_cost, draft_cost,
                 max_depth: int | None = None) -> OptimalTree:
    """T4: the fastest tree (two models) with at most ``max_nodes`` drafted nodes and depth
    at most ``max_depth``: for every budget ``n <= max_nodes`` and depth ``D <= max_depth``
    the DP's E[L]-optimal tree, scored with its exact round time (T3); the best is returned.

    ``exact`` is True when the drafter's forward cost does not depend on how many positions
    it scores (a constant curve) and the verifier's ``T(m)`` is non-decreasing on
    ``1..max_nodes + 1``: then no tree within the budget is faster. Otherwise the result is
    the best among the E[L]-optimal trees (a width-dependent drafter cost is not in the DP)."""
    law = _tree_law(law)
    t = _curve(target_cost, "target_cost")
    dr = _curve(draft_cost, "draft_cost")
    if t.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    n, Dmax = _budget(max_nodes, max_depth)
    ms = np.arange(1, n + 2)
    tv = t(ms)
    exact = bool(dr.kind == "constant" and np.all(np.diff(tv) >= 0))
    rows_all = law.rank_probs(Dmax, n) if law.depth_independent else None
    dp_all = _dp(rows_all, n + 1) if rows_all is not None else None

    def dp_for(D):
        if dp_all is not None:  # same rows at every depth: remaining depth D is row Dmax - D
            return (*dp_all, Dmax - D)
        return (*_dp(law.rank_probs(D, n), n + 1), 0)

    budgets = np.arange(2, n + 2)  # nodes incl. the root
    if exact:
        # score every (D, b) by its value over the time of a tree with exactly b - 1 nodes
        # and depth D; the rebuilt tree (<= b - 1 nodes, depth <= D) is at least as fast,
        # and no tree within the budget beats the best score (T4)
        best = None
        for D in range(1, Dmax + 1):
            V, bj, ch, t0 = dp_for(D)
            score = t.t1 * V[t0, budgets] / (D * dr.t1 + tv[budgets - 1])
            i = int(np.argmax(score))
            if best is None or score[i] > best[0]:
                best = (float(score[i]), D, int(budgets[i]))
        _, D, b = best
        V, bj, ch, t0 = dp_for(D)
        tree = _rebuild(t0, b, bj, ch)
    else:
        best = None
        seen = set()  # a tree met again cannot pass the strict test: the best only grows
        for D in range(1, Dmax + 1):
            V, bj, ch, t0 = dp_for(D)
            prev = None
            for b in budgets:
                if prev is not None and V[t0, b] == prev:
                    continue
                prev = V[t0, b]
                key = _rebuild_parents(t0, int(b), bj, ch)
                if key in seen:
                    continue
                seen.add(key)
                cand = Tree(key)
                s = t.t1 * expected_emitted_tree(cand, law) / tree_round_cost(cand, t, dr)
                if best is None or s > best[0] * (1 + 1e-12):
                    best = (s, cand)
        tree = best[1]
    el = expected_emitted_tree(tree, law)
    return OptimalTree(tree, el, t.t1 * el / tree_round_cost(tree, t, dr), n, Dmax, exact)


def beam_tree(law, width: int, depth: int) -> Tree:
    """The fixed-width tree: ``width`` nodes per depth (fewer where fewer children have
    positive probability), chosen depth by depth as the ``width`` children of the previous
    depth's nodes with the largest path probability ``f`` (a rank-k child only after its
    rank-(k-1) sibling) — EAGLE-2's top-k expansion at a fixed width."""
    law = _tree_law(law)
    width = as_int(width, "width", low=1, high=MAX_TREE_NODES)
    depth = as_int(depth, "depth", low=1, high=MAX_TREE_NODES)
    if width * depth > MAX_TREE_NODES:
        raise PolyspecInputError("width", f"width * depth exceeds {MAX_TREE_NODES} nodes")
    p = law.rank_probs(depth, width)
    parents, f = [-1], [1.0]
    layer = [0]
    for d in range(depth):
        heap = [(-f[v] * p[d, 0], v, 0) for v in layer if p[d, 0] > 0]
        heapq.heapify(heap)
        nxt = []
        while heap and len(nxt) < width:
            negf, v, k = heapq.heappop(heap)
            parents.append(v)
            f.append(-negf)
            nxt.append(len(parents) - 1)
            if k + 1 < width and p[d, k + 1] > 0:
                heapq.heappush(heap, (-f[v] * p[d, k + 1], v, k + 1))
        if not nxt:
            break
        # keep sibling order by rank: a node's children were appended in rank order
        layer = nxt
    if len(parents) == 1:
        raise PolyspecInputError("law", "no child has a positive acceptance probability")
    return Tree(_bfs_order(parents))


def _bfs_order(parents):
    """The same tree renumbered breadth first (siblings keep their order)."""
    children = [[] for _ in parents]
    for v in range(1, len(parents)):
        children[parents[v]].append(v)
    order, new_id = [0], {0: 0}
    head = 0
    while head < len(order):
        v = order[head]
        head += 1
        for c in children[v]:
            new_id[c] = len(order)
            order.append(c)
    return [-1] + [new_id[parents[v]] for v in order[1:]]


def widest_emitted_tree(law, max_nodes: int) -> tuple[Tree, float]:
    """The fixed-width tree (:func:`beam_tree` of width ``w`` and depth ``max_nodes // w``)
    with the largest ``E[L]`` within ``max_nodes`` nodes: ``(tree, E[L])`` (ties within
    1e-12 relative: the narrowest)."""
    law = _tree_law(law)
    n = as_int(max_nodes, "max_nodes", low=1, high=MAX_TREE_NODES)
    best = None
    for w in range(1, n + 1):
        t = beam_tree(law, w, n // w)
        el = expected_emitted_tree(t, law)
        if best is None or el > best[1] * (1 + 1e-12):
            best = (t, el)
    return best


def best_width_tree(law, max_nodes: int, target_cost, draft_cost,
                    widths=None) -> tuple[Tree, float, int]:
    """The fastest fixed-width tree (:func:`beam_tree`) with at most ``max_nodes`` nodes:
    over widths ``w`` (default 1..max_nodes) and depths ``1..max_nodes // w``. Returns
    ``(tree, speedup, width)``; width 1 is the chain, so this is never slower than the best
    chain within the budget."""
    law = _tree_law(law)
    n = as_int(max_nodes, "max_nodes", low=1, high=MAX_TREE_NODES)
    ws = range(1, n + 1) if widths is None else [as_int(w, "widths", low=1) for w in widths]
    best = None
    for w in ws:
        if w > n:
            continue
        for D in range(1, n // w + 1):
            tree = beam_tree(law, w, D)
            s = tree_speedup(tree, law, target_cost, draft_cost)
            if best is None or s > best[1] * (1 + 1e-12):
                best = (tree, s, w)
    if best is None:
        raise PolyspecInputError("widths", f"no width <= max_nodes ({n})")
    return best
