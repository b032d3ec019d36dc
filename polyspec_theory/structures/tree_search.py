"""Token trees, time and choice (docs/theory.md Part III-D, T3-T4): the time of a tree round,
its speedup, and the best tree for a node budget (Sequoia's dynamic programme, written here
from scratch; beam and best-width trees for comparison).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
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
    "optimal_trees",
    "max_expected_emitted_trees",
    "best_width_tree",
    "best_width_trees",
    "widest_emitted_tree",
    "widest_emitted_trees",
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


def _budget(max_nodes, max_depth):
    n = as_int(max_nodes, "max_nodes", low=1, high=MAX_TREE_NODES)
    d = n if max_depth is None else as_int(max_depth, "max_depth", low=1, high=MAX_TREE_NODES)
    return n, min(d, n)


def _budget_list(budgets, max_depth):
    """Validated ``(budgets, depth cap or None)`` of the functions of several budgets."""
    if isinstance(budgets, (str, bytes, dict)) or not isinstance(
            budgets, Sequence | np.ndarray):
        raise PolyspecInputError("budgets", "must be a list of node budgets")
    ns = [as_int(b, f"budgets[{i}]", low=1, high=MAX_TREE_NODES) for i, b in enumerate(budgets)]
    if not ns:
        raise PolyspecInputError("budgets", "give at least one node budget")
    cap = None if max_depth is None else as_int(max_depth, "max_depth", low=1,
                                                  high=MAX_TREE_NODES)
    return ns, cap


class _SharedDP:
    """T4's DP tables of the largest budget ``N`` (``n_max = N + 1``), read for every smaller
    budget ``n``: ``V_t(x)``, ``H_{t,j}(m)`` and their argmax choices at ``x, m <= n + 1`` read
    only smaller sizes and the ranks ``k <= n`` (a rank-k child needs ``k`` nodes), so they
    are the entries, bit for bit, of the table of budget ``n`` itself; with more depth rows
    ``V_0(x)`` is unchanged for ``x - 1 <=`` the rows of both tables (a subtree of ``x``
    nodes is at most ``x - 1`` deep). A budget whose rank table is not the top-left block
    of ``N``'s (``rank_probs`` not a prefix for that law) gets its own table."""

    def __init__(self, law: TreeLaw, n_max: int):
        self.law, self.n_max, self._tables = law, n_max, {}

    def get(self, depth: int, table_depth: int, n: int):
        """``(V, best_j, choice, shift, rebuilt)`` serving ``_dp(law.rank_probs(depth, n),
        n + 1)`` (``table_depth >= depth`` rows when shared; ``shift`` = the extra rows, 0
        when the budget has its own table; ``rebuilt``: ``{(t0, b): parents}`` of the
        table's trees rebuilt so far, shared by the budgets that read the table)."""
        rows = self.law.rank_probs(depth, n)
        if table_depth not in self._tables:
            big = self.law.rank_probs(table_depth, self.n_max)
            self._tables[table_depth] = (big, *_dp(big, self.n_max + 1), {})
        big, V, bj, ch, rebuilt = self._tables[table_depth]
        if np.array_equal(rows, big[:depth, :n]):
            return V, bj, ch, table_depth - depth, rebuilt
        return (*_dp(rows, n + 1), 0, {})

    def drop(self, table_depth: int) -> None:
        self._tables.pop(table_depth, None)


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


def max_expected_emitted(law, max_nodes: int, max_depth: int | None = None) -> OptimalTree:
    """T4: the tree with at most ``max_nodes`` drafted nodes and depth at most ``max_depth``
    maximizing ``E[L] = sum_v f(v)`` under a tree law (exact DP: a subtree's best value
    depends only on its size and the depth of its root)."""
    law = _tree_law(law)
    n, D = _budget(max_nodes, max_depth)
    return _max_emitted(law, [n], None if max_depth is None else D)[0]


def max_expected_emitted_trees(law, budgets, max_depth: int | None = None) -> list[OptimalTree]:
    """T4 for several budgets from one DP table (that of the largest, :class:`_SharedDP`):
    element ``i`` is ``max_expected_emitted(law, budgets[i], max_depth)``, bit for bit."""
    law = _tree_law(law)
    ns, cap = _budget_list(budgets, max_depth)
    return _max_emitted(law, ns, cap)


def _max_emitted(law: TreeLaw, ns: list[int], cap) -> list[OptimalTree]:
    top = max(ns)
    dtop = top if cap is None else min(cap, top)
    dp = _SharedDP(law, top)
    out = []
    for n in ns:
        D = n if cap is None else min(cap, n)
        V, bj, ch, _, _ = dp.get(D, dtop, n)  # the root is row 0 of either table
        out.append(OptimalTree(_rebuild(0, n + 1, bj, ch), float(V[0, n + 1]), None, n, D,
                               True))
    return out


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
    t, dr = _tree_costs(target_cost, draft_cost)
    n, D = _budget(max_nodes, max_depth)
    return _fastest(law, [n], t, dr, None if max_depth is None else D)[0]


def optimal_trees(law, budgets, target_cost, draft_cost,
                  max_depth: int | None = None) -> list[OptimalTree]:
    """T4 for several budgets from the DP tables of the largest (one table for
    depth-independent ranks, one per depth otherwise; :class:`_SharedDP`) instead of tables
    per budget: element ``i`` is ``optimal_tree(law, budgets[i], target_cost, draft_cost,
    max_depth)``, bit for bit."""
    law = _tree_law(law)
    t, dr = _tree_costs(target_cost, draft_cost)
    ns, cap = _budget_list(budgets, max_depth)
    return _fastest(law, ns, t, dr, cap)


def _tree_costs(target_cost, draft_cost):
    t = _curve(target_cost, "target_cost")
    dr = _curve(draft_cost, "draft_cost")
    if t.t1 <= 0:
        raise PolyspecInputError("target_cost", "T_1(1) must be > 0")
    return t, dr


def _fastest(law: TreeLaw, ns: list[int], t: CostCurve, dr: CostCurve, cap) -> list[OptimalTree]:
    """:func:`optimal_tree` of each budget of ``ns``; the depths ``D`` run in the outer loop
    so that one table per depth is alive at a time (each budget's search is the same
    sequence over ``D`` as alone)."""
    top = max(ns)
    dtop = top if cap is None else min(cap, top)
    dp = _SharedDP(law, top)
    speeds = {}  # parents -> (tree, speedup): a tree's score does not depend on the budget
    search = {n: _BudgetSearch(law, n, n if cap is None else min(cap, n), t, dr, speeds)
              for n in dict.fromkeys(ns)}
    if law.depth_independent:  # same rows at every depth: remaining depth D is row Dn - D
        tables = {n: dp.get(s.D, dtop, n) for n, s in search.items()}
    for D in range(1, dtop + 1):
        for n, s in search.items():
            if D > s.D:
                continue
            if law.depth_independent:
                V, bj, ch, shift, rebuilt = tables[n]
                s.step(D, V, bj, ch, s.D - D + shift, rebuilt)
            else:
                s.step(D, *dp.get(D, D, n))
        if not law.depth_independent:
            dp.drop(D)  # one table per depth alive at a time
    return [search[n].result() for n in ns]


class _BudgetSearch:
    """One budget's search of :func:`optimal_tree` over the DP's trees, depth by depth
    (:meth:`step` with the table serving depth ``D``, :meth:`result` at the end)."""

    def __init__(self, law, n, D, t, dr, speeds):
        self.law, self.n, self.D, self.t, self.dr, self.speeds = law, n, D, t, dr, speeds
        self.tv = t(np.arange(1, n + 2))
        self.exact = bool(dr.kind == "constant" and np.all(np.diff(self.tv) >= 0))
        self.budgets = np.arange(2, n + 2)  # nodes incl. the root
        self.best = None
        self.seen = set()  # a tree met again cannot pass the strict test: the best only grows

    def step(self, D, V, bj, ch, t0, rebuilt):
        t, budgets = self.t, self.budgets
        if self.exact:
            # score every (D, b) by its value over the time of a tree with exactly b - 1
            # nodes and depth D; the rebuilt tree (<= b - 1 nodes, depth <= D) is at least
            # as fast, and no tree within the budget beats the best score (T4)
            score = t.t1 * V[t0, budgets] / (D * self.dr.t1 + self.tv[budgets - 1])
            i = int(np.argmax(score))
            if self.best is None or score[i] > self.best[0]:
                self.best = (float(score[i]), (t0, int(budgets[i]), bj, ch))
            return
        prev = None
        for b in budgets:
            if prev is not None and V[t0, b] == prev:
                continue
            prev = V[t0, b]
            key = rebuilt.get((t0, b))
            if key is None:
                key = rebuilt[(t0, b)] = _rebuild_parents(t0, int(b), bj, ch)
            if key in self.seen:
                continue
            self.seen.add(key)
            if key not in self.speeds:
                cand = Tree(key)
                self.speeds[key] = (cand, t.t1 * expected_emitted_tree(cand, self.law)
                                    / tree_round_cost(cand, t, self.dr))
            cand, s = self.speeds[key]
            if self.best is None or s > self.best[0] * (1 + 1e-12):
                self.best = (s, cand)

    def result(self) -> OptimalTree:
        tree = _rebuild(*self.best[1]) if self.exact else self.best[1]
        el = expected_emitted_tree(tree, self.law)
        return OptimalTree(tree, el, self.t.t1 * el / tree_round_cost(tree, self.t, self.dr),
                           self.n, self.D, self.exact)


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
    return _widest(law, [n])[0]


def widest_emitted_trees(law, budgets) -> list[tuple[Tree, float]]:
    """Element ``i`` is ``widest_emitted_tree(law, budgets[i])``, bit for bit, each beam tree
    built and scored once for all the budgets."""
    law = _tree_law(law)
    ns, _ = _budget_list(budgets, None)
    return _widest(law, ns)


def _widest(law: TreeLaw, ns: list[int]) -> list[tuple[Tree, float]]:
    beams = {}  # (width, depth) -> (beam tree, E[L])
    out = []
    for n in ns:
        best = None
        for w in range(1, n + 1):
            if (w, n // w) not in beams:
                t = beam_tree(law, w, n // w)
                beams[(w, n // w)] = (t, expected_emitted_tree(t, law))
            t, el = beams[(w, n // w)]
            if best is None or el > best[1] * (1 + 1e-12):
                best = (t, el)
        out.append(best)
    return out


def best_width_tree(law, max_nodes: int, target_cost, draft_cost,
                    widths=None) -> tuple[Tree, float, int]:
    """The fastest fixed-width tree (:func:`beam_tree`) with at most ``max_nodes`` nodes:
    over widths ``w`` (default 1..max_nodes) and depths ``1..max_nodes // w``. Returns
    ``(tree, speedup, width)``; width 1 is the chain, so this is never slower than the best
    chain within the budget."""
    law = _tree_law(law)
    n = as_int(max_nodes, "max_nodes", low=1, high=MAX_TREE_NODES)
    ws = None if widths is None else [as_int(w, "widths", low=1) for w in widths]
    return _best_widths(law, [n], target_cost, draft_cost, ws)[0]


def best_width_trees(law, budgets, target_cost, draft_cost,
                     widths=None) -> list[tuple[Tree, float, int]]:
    """Element ``i`` is ``best_width_tree(law, budgets[i], target_cost, draft_cost,
    widths)``, bit for bit, each beam tree built and timed once for all the budgets."""
    law = _tree_law(law)
    ns, _ = _budget_list(budgets, None)
    ws = None if widths is None else [as_int(w, "widths", low=1) for w in widths]
    return _best_widths(law, ns, target_cost, draft_cost, ws)


def _best_widths(law: TreeLaw, ns: list[int], target_cost, draft_cost, widths):
    speeds = {}  # (width, depth) -> (beam tree, speedup)
    out = []
    for n in ns:
        best = None
        for w in range(1, n + 1) if widths is None else widths:
            if w > n:
                continue
            for D in range(1, n // w + 1):
                if (w, D) not in speeds:
                    tree = beam_tree(law, w, D)
                    speeds[(w, D)] = (tree, tree_speedup(tree, law, target_cost, draft_cost))
                tree, s = speeds[(w, D)]
                if best is None or s > best[1] * (1 + 1e-12):
                    best = (tree, s, w)
        if best is None:
            raise PolyspecInputError("widths", f"no width <= max_nodes ({n})")
        out.append(best)
    return out
