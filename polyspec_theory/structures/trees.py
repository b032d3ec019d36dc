"""Token trees (docs/theory.md Part III-D, T1–T4): structure, acceptance by sibling rank, the
SpecInfer residual rule, the exact law of the accepted path, the time of a tree round and
the optimal tree for a node budget (Sequoia's dynamic programme, written here from scratch).

A tree is given by ``parents``: node 0 is the last committed token (the root, parent -1);
node ``v >= 1`` is a drafted token whose parent is ``parents[v] < v``; the children of a node
are ranked 1, 2, ... by their order in the list. ``N = len(parents) - 1`` drafted nodes,
depth ``D`` = the largest node depth.

Acceptance models (which one is exact for which verification rule: T2 and
docs/theory.md Part III-D):

* :class:`SiblingLaw` ``{"sibling": [p1, p2, ...]}`` — Sequoia's positional assumption: at an
  accepted node at depth ``d - 1`` the verifier accepts its rank-k child with probability
  ``p_{d,k}`` (none with ``1 - sum_k p_{d,k}`` over the children present), independently of
  everything above. Rows per depth ``[[...], [...]]`` are allowed (the last row repeats); one
  row means the same ranks law at every depth.
* :class:`ResidualLaw` ``{"residual": {"target": P, "draft": Q[, "weights": w]}}`` —
  SpecInfer's multi-step speculative sampling (children drawn iid from ``Q``, tried in rank
  order with the residual ``P <- (P - Q)_+ / ||.||`` after each rejection). It induces the
  rank law ``p_k = r_k prod_{j<k} (1 - r_j)``, ``r_j = sum_x min(P_j(x), Q(x))``, exact when
  every node's (P, Q) pair is the same (rows of P, Q = contexts drawn independently per node
  with probabilities ``weights``).

Chain laws (``{"alpha": ...}``, positional, Beta, ...) apply to path-shaped trees only, where a
tree of ``G`` nodes is exactly a chain of ``G`` drafted tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from polyspec_theory.core.laws import AcceptanceLaw
from polyspec_theory.errors import (
    PolyspecInputError,
    as_int,
    as_real_array,
    require_keys,
)

__all__ = [
    "MAX_TREE_NODES",
    "SUM_TOL",
    "Tree",
    "tree_from_config",
    "chain_tree",
    "kary_tree",
    "TreeLaw",
    "SiblingLaw",
    "ResidualLaw",
    "residual_rank_probs",
    "fit_sibling_law",
    "path_probabilities",
    "accepted_survival",
    "accepted_pmf",
    "expected_emitted_tree",
]

MAX_TREE_NODES = 4096  # drafted nodes (as MAX_THRESHOLD for chains)
SUM_TOL = 1e-12  # sibling probabilities may exceed 1 in total by at most this (rounding)


# --- structure -------------------------------------------------------------------------------


class Tree:
    """A draft tree from its ``parents`` list (module docstring). Validates: node 0 is the
    root (-1), every other node's parent is an earlier node (no forward references, hence no
    cycles), at least one drafted node. Errors name ``{field}.parents[i]``."""

    __slots__ = ("parents", "depth", "rank", "children", "max_depth", "_field")

    def __init__(self, parents, field: str = "tree"):
        f = f"{field}.parents"
        if isinstance(parents, (str, bytes, dict)) or not isinstance(
                parents, Sequence | np.ndarray):
            raise PolyspecInputError(f, "must be a list of parent indices (-1 for node 0)")
        n1 = len(parents)
        if n1 < 2:
            raise PolyspecInputError(
                f, "need node 0 (the last committed token) and at least one drafted node")
        if n1 - 1 > MAX_TREE_NODES:
            raise PolyspecInputError(f, f"at most {MAX_TREE_NODES} drafted nodes, got {n1 - 1}")
        par = [as_int(p, f"{f}[{i}]") for i, p in enumerate(parents)]
        if par[0] != -1:
            raise PolyspecInputError(
                f"{f}[0]", f"node 0 is the root (the last committed token): its parent must be "
                f"-1, got {par[0]}")
        for i in range(1, n1):
            p = par[i]
            if p == -1:
                raise PolyspecInputError(f"{f}[{i}]", "only node 0 may be the root (parent -1)")
            if p < -1 or p >= n1:
                raise PolyspecInputError(
                    f"{f}[{i}]", f"parent {p} is not a node (nodes are 0..{n1 - 1})")
            if p == i:
                raise PolyspecInputError(f"{f}[{i}]", f"node {i} is its own parent (a cycle)")
            if p > i:
                cyc = _cycle_from(par, i)
                if cyc is not None:
                    raise PolyspecInputError(
                        f"{f}[{i}]", "cycle " + " -> ".join(map(str, cyc)))
                raise PolyspecInputError(
                    f"{f}[{i}]", f"forward reference: parent {p} comes after node {i}; list "
                    "every node after its parent (parent index < node index)")
        depth = [0] * n1
        rank = [0] * n1
        children: list[list[int]] = [[] for _ in range(n1)]
        for i in range(1, n1):
            depth[i] = depth[par[i]] + 1
            children[par[i]].append(i)
            rank[i] = len(children[par[i]])
        self.parents = tuple(par)
        self.depth = tuple(depth)
        self.rank = tuple(rank)
        self.children = tuple(tuple(c) for c in children)
        self.max_depth = max(depth)
        self._field = field

    # --- derived quantities ---
    @property
    def n_nodes(self) -> int:
        """``N``: drafted nodes (the root excluded)."""
        return len(self.parents) - 1

    @property
    def is_path(self) -> bool:
        """True when every node has at most one child (a chain of ``N`` drafted tokens)."""
        return all(len(c) <= 1 for c in self.children)

    @property
    def max_children(self) -> int:
        return max(len(c) for c in self.children)

    def level_sizes(self) -> np.ndarray:
        """Nodes per depth ``d = 0..D`` (``[1, ...]``)."""
        return np.bincount(np.asarray(self.depth), minlength=self.max_depth + 1)

    def draft_positions(self) -> np.ndarray:
        """``m_d`` for ``d = 1..D``: nodes at depth ``d - 1`` with at least one child, i.e.
        the positions the drafter scores in its ``d``-th forward (which proposes depth ``d``)."""
        m = np.zeros(self.max_depth, dtype=np.int64)
        for v, c in enumerate(self.children):
            if c:
                m[self.depth[v]] += 1
        return m

    def to_config(self) -> dict:
        return {"parents": list(self.parents)}

    def __eq__(self, other) -> bool:
        return isinstance(other, Tree) and self.parents == other.parents

    def __hash__(self) -> int:
        return hash(("Tree", self.parents))

    def __repr__(self) -> str:
        return f"Tree(parents={list(self.parents)})"


def _cycle_from(par, start):
    """The cycle reached from ``start`` by following parents, if any."""
    seen = {}
    v, path = start, []
    while 0 <= v < len(par) and v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = par[v]
    if 0 <= v < len(par) and v in seen:
        cyc = path[seen[v]:]
        return [*cyc, cyc[0]]
    return None


def tree_from_config(spec, field: str = "tree") -> Tree:
    """``{"parents": [-1, 0, 0, 1, ...]}`` (a :class:`Tree` passes through)."""
    if isinstance(spec, Tree):
        return spec
    require_keys(spec, field, required=["parents"])
    return Tree(spec["parents"], field)


def chain_tree(length: int) -> Tree:
    """The path of ``length`` drafted nodes: a chain of ``length`` tokens."""
    g = as_int(length, "length", low=1, high=MAX_TREE_NODES)
    return Tree([-1, *range(g)])


def kary_tree(k: int, depth: int) -> Tree:
    """The complete ``k``-ary tree of the given depth (``k + k^2 + ... + k^depth`` nodes)."""
    k = as_int(k, "k", low=1)
    depth = as_int(depth, "depth", low=1)
    total = sum(k**d for d in range(1, depth + 1))
    if total > MAX_TREE_NODES:
        raise PolyspecInputError("depth", f"{total} nodes exceed {MAX_TREE_NODES}")
    parents, layer = [-1], [0]
    for _ in range(depth):
        nxt = []
        for v in layer:
            for _ in range(k):
                parents.append(v)
                nxt.append(len(parents) - 1)
        layer = nxt
    return Tree(parents)


# --- acceptance laws on trees ------------------------------------------------------------------


class TreeLaw(AcceptanceLaw):
    """An acceptance law defined on trees by its rank probabilities ``p_{d,k}``; on a chain
    (first children only) it is the law with survival ``prod_{d<=k} p_{d,1}``."""

    def rank_probs(self, depth: int, kmax: int) -> np.ndarray:
        """``P[d-1, k-1] = p_{d,k}``: probability that the accepted child of an accepted node
        at depth ``d - 1`` is its rank-``k`` child, d = 1..depth, k = 1..kmax."""
        raise NotImplementedError

    @property
    def depth_independent(self) -> bool:
        return True

    def survival(self, kmax: int) -> np.ndarray:
        kmax = as_int(kmax, "kmax", low=0)
        if kmax == 0:
            return np.ones(1)
        return np.concatenate([[1.0], np.cumprod(self.rank_probs(kmax, 1)[:, 0])])

    def _point_masses(self, s, cap):
        return s[:-1] * (1.0 - self.rank_probs(cap, 1)[:, 0])

    @classmethod
    def _mle(cls, d):
        raise PolyspecInputError(
            cls.family, "chain acceptance counts identify only the first rank; fit from tree "
            "verifications with fit_sibling_law")


class SiblingLaw(TreeLaw):
    """Sequoia's positional acceptance: ``{"sibling": [p1, p2, ...]}`` (every depth) or
    ``{"sibling": [[p11, p12, ...], [p21, ...], ...]}`` (row ``d`` for the children at depth
    ``d``; the last row repeats). Each row: probabilities in [0, 1] summing to at most 1.
    Exact (T1) when the rank of the accepted child of each accepted node is independent of
    everything above it with these probabilities."""

    family = "sibling"

    def __init__(self, probs, field: str = "sibling"):
        if isinstance(probs, (str, bytes)) or not hasattr(probs, "__len__") or not len(probs):
            raise PolyspecInputError(field, "must be a non-empty list of probabilities")
        nested = all(isinstance(r, (list, tuple, np.ndarray)) for r in probs)
        if any(isinstance(r, (list, tuple, np.ndarray)) for r in probs) and not nested:
            raise PolyspecInputError(field, "mixes numbers and rows: use one list, or one "
                                     "row per depth")
        rows_in = probs if nested else [probs]
        rows = []
        for d, row in enumerate(rows_in):
            rf = f"{field}[{d}]" if nested else field
            arr = as_real_array(row, rf, low=0.0, high=1.0)
            total = math.fsum(arr)
            if total > 1.0 + SUM_TOL:
                raise PolyspecInputError(
                    rf, f"sibling probabilities sum to {total!r} > 1 (p_k = probability that "
                    "the k-th child is the accepted one; at most one child is)")
            rows.append(tuple(float(x) for x in arr))
        self.rows = tuple(rows)

    @property
    def depth_independent(self) -> bool:
        return len(self.rows) == 1

    @property
    def n_params(self) -> int:
        return sum(len(r) for r in self.rows)

    def to_config(self) -> dict:
        if len(self.rows) == 1:
            return {"sibling": list(self.rows[0])}
        return {"sibling": [list(r) for r in self.rows]}

    def rank_probs(self, depth: int, kmax: int) -> np.ndarray:
        depth = as_int(depth, "depth", low=1)
        kmax = as_int(kmax, "kmax", low=1)
        out = np.zeros((depth, kmax))
        for d in range(depth):
            r = self.rows[min(d, len(self.rows) - 1)]
            w = min(kmax, len(r))
            out[d, :w] = r[:w]
        return out


def residual_rank_probs(target, draft, kmax: int) -> np.ndarray:
    """T2: rank law of SpecInfer's multi-step speculative sampling for one (P, Q) pair.

    Children ``x_1, x_2, ... ~ Q`` iid; child j is accepted with probability
    ``min(1, P_j(x_j) / Q(x_j))`` where ``P_1 = P`` and ``P_{j+1} = (P_j - Q)_+ / ||(P_j -
    Q)_+||_1``. Returns ``p_k = r_k prod_{j<k} (1 - r_j)``, ``r_j = sum_x min(P_j(x), Q(x))``,
    k = 1..kmax (``1 - r_j`` computed as ``||(P_j - Q)_+||_1``: no cancellation)."""
    p, nd_p = _prob_rows(target, "target")
    q, nd_q = _prob_rows(draft, "draft")
    if nd_p != 1 or nd_q != 1 or p.shape != q.shape:
        raise PolyspecInputError("draft", "target and draft must be probability vectors of "
                                 "one length")
    p, q = p[0], q[0]
    kmax = as_int(kmax, "kmax", low=1)
    out = np.zeros(kmax)
    alive = 1.0
    pj = p
    for j in range(kmax):
        out[j] = alive * float(np.minimum(pj, q).sum())
        res = np.maximum(pj - q, 0.0)
        z = float(res.sum())
        if z <= 0.0 or alive == 0.0:
            break
        alive *= z
        pj = res / z
    return out


def _prob_rows(x, field: str):
    """Rows of probability vectors (1-D input = one row); returns ``(rows, ndim)``."""
    try:
        nd = np.asarray(x, dtype=np.float64).ndim
    except (TypeError, ValueError):
        raise PolyspecInputError(field, "must be a probability vector or a list of them") from None
    if nd not in (1, 2):
        raise PolyspecInputError(field, "must be a probability vector or a list of them")
    a = np.atleast_2d(as_real_array(x, field, low=0.0, ndim=nd))
    sums = a.sum(axis=1)
    for i, s in enumerate(sums):
        if abs(s - 1.0) > 1e-9:
            where = f"{field}[{i}]" if nd == 2 else field
            raise PolyspecInputError(where, f"must be a probability vector (sum 1), sums to {s!r}")
    return a / sums[:, None], nd


class ResidualLaw(TreeLaw):
    """SpecInfer's residual rule on fixed categorical laws: ``{"residual": {"target": P,
    "draft": Q, "weights": w}}``; ``P``/``Q`` one vector (one context) or one row per context
    (each node draws its context independently with probabilities ``weights``, default
    uniform). Rank law = the ``weights``-average of :func:`residual_rank_probs` (exact under
    per-node independent contexts: T2). On a chain: iid with ``alpha = E[1 - TV(P, Q)]``."""

    family = "residual"

    def __init__(self, target, draft, weights=None, field: str = "residual"):
        p, nd_p = _prob_rows(target, f"{field}.target")
        q, nd_q = _prob_rows(draft, f"{field}.draft")
        if p.shape != q.shape:
            raise PolyspecInputError(
                f"{field}.draft", f"must have the shape of target {p.shape}, got {q.shape}")
        self._nested = nd_p == 2
        if weights is None:
            w = np.full(p.shape[0], 1.0 / p.shape[0])
            self._weights_given = False
        else:
            w = as_real_array(weights, f"{field}.weights", low=0.0)
            if w.size != p.shape[0]:
                raise PolyspecInputError(
                    f"{field}.weights", f"need one weight per context ({p.shape[0]}), got {w.size}")
            if abs(w.sum() - 1.0) > 1e-9:
                raise PolyspecInputError(f"{field}.weights", f"must sum to 1, got {w.sum()!r}")
            w = w / w.sum()
            self._weights_given = True
        self.target, self.draft, self.weights = p, q, w
        self._cache: dict[int, np.ndarray] = {}

    @property
    def n_params(self) -> int:
        return int(self.target.size + self.draft.size)

    def to_config(self) -> dict:
        def out(a):
            return a.tolist() if self._nested else a[0].tolist()

        spec = {"target": out(self.target), "draft": out(self.draft)}
        if self._weights_given:
            spec["weights"] = self.weights.tolist()
        return {"residual": spec}

    def context_rank_probs(self, kmax: int) -> np.ndarray:
        """``[contexts, kmax]``: the rank law of each context."""
        kmax = as_int(kmax, "kmax", low=1)
        if kmax not in self._cache:
            self._cache[kmax] = np.stack([residual_rank_probs(p, q, kmax)
                                          for p, q in zip(self.target, self.draft, strict=True)])
        return self._cache[kmax]

    def rank_probs(self, depth: int, kmax: int) -> np.ndarray:
        depth = as_int(depth, "depth", low=1)
        row = self.weights @ self.context_rank_probs(kmax)
        return np.tile(row, (depth, 1))


def fit_sibling_law(accepted_rank, n_children, max_rank: int | None = None) -> SiblingLaw:
    """Maximum-likelihood :class:`SiblingLaw` (one row) from tree verifications.

    One record per visited (accepted) node with at least one child: ``n_children`` = its
    children, ``accepted_rank`` = the rank of its accepted child (0 = none). "None" at a node
    with ``c`` children says only ``rank > c`` (censored), so the MLE is the Kaplan–Meier
    hazard ``h_k = #{rank = k} / #{c >= k and (rank >= k or rank = 0)}`` and
    ``p_k = h_k prod_{j<k} (1 - h_j)``. ``max_rank`` truncates the law (default: the largest
    observed child count)."""
    r = as_real_array(accepted_rank, "accepted_rank", low=0.0).astype(np.int64)
    c = as_real_array(n_children, "n_children", low=1.0).astype(np.int64)
    if r.shape != c.shape:
        raise PolyspecInputError("n_children", "must have one entry per accepted_rank")
    if (r > c).any():
        i = int(np.flatnonzero(r > c)[0])
        raise PolyspecInputError("accepted_rank", f"rank {r[i]} > children {c[i]} at {i}")
    kmax = int(c.max()) if max_rank is None else as_int(max_rank, "max_rank", low=1)
    p, alive = [], 1.0
    for k in range(1, kmax + 1):
        at_risk = (c >= k) & ((r >= k) | (r == 0))
        n = int(at_risk.sum())
        if n == 0:
            break
        h = int((r == k).sum()) / n
        p.append(alive * h)
        alive *= 1.0 - h
    return SiblingLaw(p or [0.0])


# --- exact law of the accepted path (T1) ------------------------------------------------------


def _rank_table(tree: Tree, law) -> np.ndarray:
    return law.rank_probs(max(tree.max_depth, 1), max(tree.max_children, 1))


def _require_law(tree: Tree, law, field: str):
    if not isinstance(law, AcceptanceLaw):
        raise PolyspecInputError(field, "must be an AcceptanceLaw")
    if not isinstance(law, TreeLaw) and not tree.is_path:
        raise PolyspecInputError(
            field, f"a branching tree needs a tree acceptance law ({{\"sibling\": [...]}} or "
            f"{{\"residual\": {{...}}}}); {law.family!r} describes a chain")


def path_probabilities(tree: Tree, law: TreeLaw) -> np.ndarray:
    """``f(v)`` = probability that node ``v`` is on the accepted path: the product of
    ``p_{depth(u), rank(u)}`` over the nodes ``u`` from the root to ``v`` (``f(0) = 1``)."""
    if not isinstance(tree, Tree):
        raise PolyspecInputError("tree", "must be a Tree")
    if not isinstance(law, TreeLaw):
        raise PolyspecInputError("law", "must be a SiblingLaw or ResidualLaw")
    p = _rank_table(tree, law)
    f = np.empty(tree.n_nodes + 1)
    f[0] = 1.0
    for v in range(1, tree.n_nodes + 1):
        f[v] = f[tree.parents[v]] * p[tree.depth[v] - 1, tree.rank[v] - 1]
    return f


def accepted_pmf(tree: Tree, law, field: str = "law") -> np.ndarray:
    """T1: ``P(A = d)``, d = 0..D, for the accepted path length ``A`` (drafted tokens
    accepted; the round emits ``L = A + 1``). Tree laws: ``P(A = d) = sum_{depth(v)=d} f(v)
    (1 - sum_{k <= c(v)} p_{d+1,k})`` (reach ``v``, accept none of its ``c(v)`` children). A
    chain law on a path of ``G`` nodes: its pmf at cap ``G`` (exactly the chain's)."""
    if not isinstance(tree, Tree):
        raise PolyspecInputError("tree", "must be a Tree")
    _require_law(tree, law, field)
    D = tree.max_depth
    if not isinstance(law, TreeLaw):
        return law.cap_pmf_table(D)[D].copy()
    f = path_probabilities(tree, law)
    p = law.rank_probs(D + 1, max(tree.max_children, 1))
    cum = np.concatenate([np.zeros((D + 1, 1)), np.cumsum(p, axis=1)], axis=1)
    out = np.zeros(D + 1)
    for v in range(tree.n_nodes + 1):
        d, c = tree.depth[v], len(tree.children[v])
        out[d] += f[v] * max(1.0 - cum[d, c], 0.0)
    return out


def accepted_survival(tree: Tree, law, field: str = "law") -> np.ndarray:
    """T1: ``P(A >= d) = sum_{depth(v) = d} f(v)``, d = 0..D (events of reaching distinct
    nodes at one depth are disjoint)."""
    pmf = accepted_pmf(tree, law, field)
    return np.cumsum(pmf[::-1])[::-1]


def expected_emitted_tree(tree: Tree, law, field: str = "law") -> float:
    """T1: ``E[L] = 1 + E[A] = sum_{v = 0..N} f(v)`` (tree laws), the chain's ``E[L | G]``
    on a path."""
    if isinstance(law, TreeLaw):
        if not isinstance(tree, Tree):
            raise PolyspecInputError("tree", "must be a Tree")
        return float(math.fsum(path_probabilities(tree, law)))
    pmf = accepted_pmf(tree, law, field)
    return 1.0 + float(np.dot(np.arange(pmf.size), pmf))
