"""Hidden-regime acceptance: acceptance that persists across rounds, and the cap-conditional
law it induces (docs/theory.md E1; used by P1 and the planner).

The laws of docs/theory.md §1.4 make the rounds of a pair independent, so the law of ``A``
given the cap is the same whatever the threshold. When acceptance persists (easy stretches
of text, repetition loops a drafter copies exactly), a fully accepted round is followed by
another far more often than a rejected one, no single iid law fits two thresholds, and the
per-round law itself depends on ``theta``.

**Token model.** Along the verifier's output, position ``t`` has a hidden regime ``s_t`` in
``0..K-1`` (a Markov chain: ``s_0 ~ init``, ``P(s_{t+1} = j | s_t = i) = trans[i, j]``) and
the drafter's token there is accepted (``x_t = 1``) with probability ``accept[s_t]``. ``K = 1``
is Leviathan's iid geometric law.

**Rounds.** A round with a block of ``g`` tokens starting at position ``p`` accepts the
leading ones of ``x_p .. x_{p+g-1}``: ``A = a < g`` means ``x_p..x_{p+a-1} = 1, x_{p+a} = 0``;
``A = g`` means all accepted (``x_{p+g}``, the verifier's bonus token, is not observed). The
verifier emits its own token at ``p + A`` and the next round starts at ``p + A + 1``. With
``M1 = diag(accept) trans`` and ``M0 = diag(1 - accept) trans``, the joint weight of
``(A = a, regime at the next round's start)`` from a start regime is the matrix
``B_a = M1^a M0`` (``a < g``) or ``B_g = M1^g trans`` (rows sum to 1 over ``a``).

**Horizon law.** A decode emits tokens until at least ``horizon`` have been emitted,
starting in ``init``. A renewal recursion over (tokens emitted, regime) gives the expected
number of rounds with ``A = a`` for a threshold ``g``; the *horizon law*
``Q(a | g) = E[#rounds with A = a] / E[#rounds]`` is a law of ``A`` for every cap ``g``
(:class:`RegimeLaw`). In a two-model cascade with threshold ``g`` (every block has ``g``
tokens) the cost of a round does not depend on ``A``, so P1 with ``Q(. | g)`` gives exactly
``E[tokens] / E[time]`` of such a decode (tokens and time summed over the decode, as a
measured speedup is): exact for two models under the token model. In deeper cascades a
block of ``g`` tokens uses ``Q(. | g)``; like P1 this ignores dependence between levels.

**Fit.** :func:`fit_regimes` maximizes the likelihood of the observed rounds (grouped into
sequences, e.g. one per prompt, rounds in order) by BFGS on logits, with the exact gradient
from the E-step of the round-level forward-backward recursion (expected transition and
emission counts, Fisher's identity). Its log-likelihood is that of the same observations
``(A, G)`` as the iid laws' censored likelihood, so AIC compares the two kinds directly.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass

import numpy as np

from polyspec_theory.core.fitting import FitResult, goodness_of_fit
from polyspec_theory.core.kept import Kept, content_key
from polyspec_theory.core.laws import AcceptanceLaw, as_sample
from polyspec_theory.errors import PolyspecInputError, as_int, require_keys

__all__ = [
    "HiddenRegimes",
    "RegimeLaw",
    "RegimeFit",
    "fit_regimes",
    "MAX_HORIZON",
    "MAX_REGIMES",
]

MAX_HORIZON = 100_000
MAX_REGIMES = 4
_PROB_FLOOR = 1e-9  # probabilities kept inside [floor, 1 - floor] by the fit


# --------------------------------------------------------------------------------------
# the token model
# --------------------------------------------------------------------------------------
def _prob_vector(x, field: str, k: int | None = None) -> np.ndarray:
    try:
        v = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise PolyspecInputError(field, f"must be a list of probabilities, got {x!r}") from None
    if v.ndim != 1 or v.size == 0 or (k is not None and v.size != k):
        want = "a non-empty list" if k is None else f"a list of {k} numbers"
        raise PolyspecInputError(field, f"must be {want}, got {x!r}")
    if not np.all(np.isfinite(v)) or np.any(v < 0) or np.any(v > 1):
        raise PolyspecInputError(field, f"entries must be probabilities in [0, 1], got {x!r}")
    return v


@dataclass(frozen=True, eq=False)
class HiddenRegimes:
    """Token-level hidden-regime acceptance (module docstring): ``init`` (K), ``trans``
    (K x K, rows sum to 1), ``accept`` (K, the acceptance probability in each regime)."""

    init: np.ndarray
    trans: np.ndarray
    accept: np.ndarray

    def __post_init__(self):
        acc = _prob_vector(self.accept, "accept")
        k = acc.size
        if k > MAX_REGIMES:
            raise PolyspecInputError("accept", f"at most {MAX_REGIMES} regimes, got {k}")
        init = _prob_vector(self.init, "init", k)
        if abs(init.sum() - 1.0) > 1e-9:
            raise PolyspecInputError("init", f"must sum to 1, got {init.sum()}")
        try:
            tr = np.asarray(self.trans, dtype=np.float64)
        except (TypeError, ValueError):
            raise PolyspecInputError("trans", "must be a K x K matrix of probabilities") from None
        if tr.shape != (k, k):
            raise PolyspecInputError("trans", f"must be a {k} x {k} matrix, got shape {tr.shape}")
        for i in range(k):
            row = _prob_vector(tr[i], f"trans[{i}]", k)
            if abs(row.sum() - 1.0) > 1e-9:
                raise PolyspecInputError(f"trans[{i}]", f"must sum to 1, got {row.sum()}")
        for name, val in (("init", init), ("trans", tr), ("accept", acc)):
            val = val.copy()
            val.setflags(write=False)
            object.__setattr__(self, name, val)

    @property
    def k(self) -> int:
        return int(self.accept.size)

    @property
    def n_params(self) -> int:
        """Free parameters: ``(K - 1) + K (K - 1) + K``."""
        return self.k * self.k + self.k - 1

    def to_config(self) -> dict:
        return {"init": [float(x) for x in self.init],
                "trans": [[float(x) for x in row] for row in self.trans],
                "accept": [float(x) for x in self.accept]}

    @classmethod
    def from_config(cls, spec, field: str = "regime") -> HiddenRegimes:
        require_keys(spec, field, required=["init", "trans", "accept"], optional=["horizon"])
        try:
            return cls(spec["init"], spec["trans"], spec["accept"])
        except PolyspecInputError as e:
            raise PolyspecInputError(f"{field}.{e.field}", str(e).split(": ", 1)[1]) from None

    @classmethod
    def _unchecked(cls, init, trans, accept) -> HiddenRegimes:
        """A model from float64 arrays already known to be valid (the fit's own
        parameterization), without the checks of the constructor."""
        obj = object.__new__(cls)
        for name, val in (("init", init), ("trans", trans), ("accept", accept)):
            val = np.array(val, dtype=np.float64)
            val.setflags(write=False)
            object.__setattr__(obj, name, val)
        return obj

    # ---- rounds --------------------------------------------------------------------
    def _powers(self, gmax: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rej, full)``: ``rej[a] = M1^a M0`` (a = 0..gmax-1), ``full[a] = M1^a trans``
        (a = 0..gmax)."""
        k = self.k
        m1 = self.accept[:, None] * self.trans
        m0 = (1.0 - self.accept)[:, None] * self.trans
        pw = np.empty((gmax + 1, k, k))
        pw[0] = np.eye(k)
        for a in range(1, gmax + 1):
            pw[a] = pw[a - 1] @ m1
        return pw[:gmax] @ m0, pw @ self.trans

    def round_kernels(self, g: int) -> np.ndarray:
        """``B[a]`` for a = 0..g (shape (g+1, K, K)): joint weight of ``A = a`` and the regime
        at the next round's start, from each start regime, for a block of ``g`` tokens."""
        g = as_int(g, "g", low=1)
        rej, full = self._powers(g)
        return np.concatenate([rej, full[g:g + 1]])

    def horizon_counts(self, gmax: int, horizon: int) -> np.ndarray:
        """``N[g, a]`` (g, a = 0..gmax): expected number of rounds with ``A = a`` in a decode
        of at least ``horizon`` tokens from ``init`` with every block of ``g`` tokens (row
        0: zeros)."""
        gmax = as_int(gmax, "gmax", low=1)
        horizon = as_int(horizon, "horizon", low=1, high=MAX_HORIZON)
        k = self.k
        rej, full = self._powers(gmax)
        # kern[g-1, a] = B_a for a block of g (a <= g), zero beyond
        kern = np.zeros((gmax, gmax + 1, k, k))
        for g in range(1, gmax + 1):
            kern[g - 1, :g] = rej[:g]
            kern[g - 1, g] = full[g]
        mass = np.zeros((gmax, horizon + gmax + 1, k))
        mass[:, 0, :] = self.init
        counts = np.zeros((gmax, gmax + 1))
        for n in range(horizon):
            w = np.einsum("gi,gaij->gaj", mass[:, n, :], kern)  # (G, a, K)
            counts += w.sum(axis=2)
            mass[:, n + 1 : n + gmax + 2, :] += w
        return np.concatenate([np.zeros((1, gmax + 1)), counts])

    def horizon_table(self, gmax: int, horizon: int) -> np.ndarray:
        """``Q[g, a] = P(A = a | cap g)``, the horizon law (module docstring), g, a = 0..gmax
        (row 0: ``A = 0`` surely)."""
        c = self.horizon_counts(gmax, horizon)
        tot = c.sum(axis=1, keepdims=True)
        q = np.divide(c, tot, out=np.zeros_like(c), where=tot > 0)
        q[0, 0] = 1.0
        return q

    def horizon_speedup_terms(self, g: int, horizon: int) -> tuple[float, float]:
        """``(E[#rounds], E[#tokens])`` of a two-model decode with threshold ``g`` (at least
        ``horizon`` tokens, the last round's overshoot included)."""
        c = self.horizon_counts(g, horizon)[g]
        return float(c.sum()), float(np.dot(np.arange(g + 1) + 1.0, c))

    # ---- likelihood ----------------------------------------------------------------
    def loglik(self, accepted, caps, groups=None) -> float:
        """Log-likelihood of rounds ``(accepted, caps)`` in order, grouped into independent
        sequences by ``groups`` (one label per round; ``None``: one sequence)."""
        data = _RoundData.build(accepted, caps, groups)
        return _estep(self, data, want_counts=False)[0]

    def sample_rounds(self, g: int, horizon: int, n_decodes: int, seed=None):
        """Simulate ``n_decodes`` two-model decodes (threshold ``g``, at least ``horizon``
        tokens each); returns ``(accepted, group)`` arrays, rounds in order."""
        g = as_int(g, "g", low=1)
        horizon = as_int(horizon, "horizon", low=1, high=MAX_HORIZON)
        n_decodes = as_int(n_decodes, "n_decodes", low=1)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        cum_t = np.cumsum(self.trans, axis=1)
        k = self.k
        s = np.minimum((rng.random(n_decodes)[:, None] > np.cumsum(self.init)).sum(1), k - 1)
        emitted = np.zeros(n_decodes, dtype=np.int64)
        out_a, out_grp = [], []

        def step(state):
            u = rng.random(state.size)
            return np.minimum((u[:, None] > cum_t[state]).sum(1), k - 1)

        alive = np.arange(n_decodes)
        while alive.size:
            st = s[alive]
            a = np.zeros(alive.size, dtype=np.int64)
            going = np.ones(alive.size, dtype=bool)
            for _ in range(g):
                ok = rng.random(alive.size) < self.accept[st]
                # an accepted token moves on to the next position; a rejected one is
                # replaced by the verifier's token and the next round starts one further
                st[going] = step(st[going])
                going &= ok
                a += going
                if not going.any():
                    break
            st[going] = step(st[going])  # all g accepted: past the verifier's bonus token
            out_a.append(a)
            out_grp.append(alive.copy())
            emitted[alive] += a + 1
            s[alive] = st
            alive = alive[emitted[alive] < horizon]
        acc = np.concatenate(out_a)
        grp = np.concatenate(out_grp)
        order = np.argsort(grp, kind="stable")
        return acc[order], grp[order]


# --------------------------------------------------------------------------------------
# the cap-conditional law
# --------------------------------------------------------------------------------------
class RegimeLaw(AcceptanceLaw):
    """The horizon law of a :class:`HiddenRegimes` model as an acceptance law:
    ``P(A = a | cap g) = Q(a | g)`` (module docstring).

    Unlike docs/theory.md §1.4's laws a cap does not merely censor one survival sequence:
    ``survival(kmax)`` is the survival function *at cap* ``kmax``, so the per-cap methods
    (``pmf_vector``, ``mean``, ``sf``, ``mean_emitted``, ...) are exact, and P1's three
    per-cap methods (:meth:`cap_pmf_table`, :meth:`pmf_over_blocks`,
    :meth:`capped_mean_emitted`) use the table ``Q`` itself."""

    family = "regime"

    def __init__(self, model: HiddenRegimes, horizon: int):
        if not isinstance(model, HiddenRegimes):
            raise PolyspecInputError("regime", "must be a HiddenRegimes model")
        self.model = model
        self.horizon = as_int(horizon, "regime.horizon", low=1, high=MAX_HORIZON)
        self._table = None

    def cap_pmf_table(self, gmax: int) -> np.ndarray:
        """``Q[g, a]`` for g, a = 0..gmax (row g: the law of ``A`` for a block of g)."""
        gmax = as_int(gmax, "gmax", low=0)
        if self._table is None or self._table.shape[0] <= gmax:
            self._table = self.model.horizon_table(max(gmax, 1), self.horizon)
        return self._table[: gmax + 1, : gmax + 1].copy()

    def pmf_over_blocks(self, block_pmf) -> np.ndarray:
        """``P(A = a) = sum_g P(G = g) Q[g, a]`` (rows of ``block_pmf``)."""
        w = np.asarray(block_pmf, dtype=np.float64)
        if w.ndim not in (1, 2) or w.shape[-1] < 1 or not (np.isfinite(w) & (w >= 0)).all():
            raise PolyspecInputError("block_pmf", "must be rows of a pmf over block lengths")
        return w @ self.cap_pmf_table(w.shape[-1] - 1)

    def capped_mean_emitted(self, gmax: int) -> np.ndarray:
        """``E[L | cap g] = 1 + sum_a a Q[g, a]`` for g = 0..gmax."""
        return 1.0 + self.cap_pmf_table(gmax) @ np.arange(gmax + 1)

    def survival(self, kmax: int) -> np.ndarray:
        """``P(A >= k | cap kmax)``, k = 0..kmax."""
        kmax = as_int(kmax, "kmax", low=0)
        p = self.cap_pmf_table(kmax)[kmax]
        return np.cumsum(p[::-1])[::-1]

    def mean_emitted_limit(self) -> float:
        """``E[L]`` for a block as long as the horizon (no longer block is meaningful)."""
        return self.mean_emitted(self.horizon)

    def _rvs(self, caps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(caps.shape, dtype=np.int64)
        if caps.size == 0:
            return out
        table = self.cap_pmf_table(int(caps.max()))
        u = rng.random(caps.shape)
        for g in np.unique(caps):
            sel = caps == g
            cdf = np.cumsum(table[g, : g + 1])
            out[sel] = np.minimum(np.searchsorted(cdf, u[sel], side="right"), g)
        return out

    def _logpmf_checked(self, a, g) -> np.ndarray:
        """Per-round log ``Q(A | cap)`` (the marginal horizon law; the sequence likelihood is
        :meth:`HiddenRegimes.loglik`)."""
        table = self.cap_pmf_table(int(g.max()))
        with np.errstate(divide="ignore"):
            return np.log(table[g, a])

    @property
    def n_params(self) -> int:
        return self.model.n_params

    def to_config(self) -> dict:
        return {"regime": {**self.model.to_config(), "horizon": self.horizon}}

    @classmethod
    def from_config(cls, spec, field: str = "regime") -> RegimeLaw:
        if not isinstance(spec, dict):
            raise PolyspecInputError(field, "must be an object {init, trans, accept, horizon}")
        require_keys(spec, field, required=["init", "trans", "accept", "horizon"])
        model = HiddenRegimes.from_config(spec, field)
        try:
            return cls(model, spec["horizon"])
        except PolyspecInputError as e:
            raise PolyspecInputError(f"{field}.horizon", str(e).split(": ", 1)[1]) from None

    @classmethod
    def _mle(cls, d) -> RegimeLaw:
        raise PolyspecInputError(
            "data", "a regime law is fitted on rounds in order, not on a histogram: "
            "use RegimeLaw.fit(accepted, caps, groups)")

    @classmethod
    def fit(cls, accepted, caps, groups=None, *, k: int = 2, horizon: int = 128) -> FitResult:
        """Fit a ``k``-regime model to rounds in order (``groups``: a sequence label per
        round) and wrap it with ``horizon``; the log-likelihood is the sequence
        likelihood."""
        res = fit_regimes(accepted, caps, groups, k=k)
        law = cls(res.model, horizon)
        a, g = as_sample(accepted, caps)
        return FitResult(law=law, loglik=res.loglik, n_params=res.n_params, n=int(a.size),
                         gof=goodness_of_fit(law, a, g))


# --------------------------------------------------------------------------------------
# fitting
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RegimeFit:
    model: HiddenRegimes
    loglik: float
    n_params: int
    n_rounds: int
    n_sequences: int
    converged: bool

    @property
    def aic(self) -> float:
        return 2 * self.n_params - 2 * self.loglik

    @property
    def bic(self) -> float:
        return self.n_params * math.log(max(self.n_rounds, 1)) - 2 * self.loglik


@dataclass(frozen=True)
class _RoundData:
    """Rounds as one chain: every sequence is preceded by a *reset* (the regime is redrawn
    from ``init``: the rank-one kernel ``1 init``), so the product of the chain's kernels from
    any start distribution is the product of the sequences' likelihoods. ``typ``: the kernel
    of every chain position, ``2 A + full`` for a round (``full``: A == G), ``2 (amax + 1)``
    for a reset; ``rounds``: the chain positions of the rounds, grouped by type (in chain
    order within a type); ``types``: the types present, ``type_starts``: where each type's
    rounds begin in ``rounds``; ``resets``: the chain positions of the resets."""

    typ: np.ndarray
    rounds: np.ndarray
    types: np.ndarray
    type_starts: np.ndarray
    resets: np.ndarray
    amax: int
    n_rounds: int
    n_sequences: int

    @classmethod
    def build(cls, accepted, caps, groups) -> _RoundData:
        a, g = as_sample(accepted, caps)
        if groups is None:
            lab = np.zeros(a.size, dtype=np.int64)
        else:
            lab = np.asarray(groups)
            if lab.shape != a.shape:
                raise PolyspecInputError("groups", f"need one label per round ({a.size})")
        _, inv = np.unique(lab, return_inverse=True)
        inv = inv.ravel()
        order = np.argsort(inv, kind="stable")  # keeps the rounds' order within a group
        inv, a, g = inv[order], a[order], g[order]
        n_seq = int(inv.max()) + 1
        starts = np.flatnonzero(np.r_[True, inv[1:] != inv[:-1]])
        # chain position of round j: j + (number of resets up to and including its sequence)
        pos = np.arange(a.size) + np.searchsorted(starts, np.arange(a.size), side="right")
        amax = int(a.max())
        typ = np.full(a.size + n_seq, 2 * (amax + 1), dtype=np.int64)
        rtyp = 2 * a + (a == g)
        typ[pos] = rtyp
        by_type = np.argsort(rtyp, kind="stable")
        types, type_starts = np.unique(rtyp[by_type], return_index=True)
        resets = np.flatnonzero(typ == 2 * (amax + 1))
        return cls(typ, pos[by_type], types, type_starts, resets, amax, int(a.size), n_seq)


def _kernel_table(model: HiddenRegimes, amax: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tab, pw)``: ``tab`` (K, K, 2 amax + 3), the kernel of each chain type of
    :class:`_RoundData` (``[:, :, 2 a] = M1^a M0``, ``[:, :, 2 a + 1] = M1^a trans``, last:
    ``1 init``); ``pw[a] = M1^a`` (a = 0..amax)."""
    k, tr = model.k, model.trans
    m1 = model.accept[:, None] * tr
    pw = np.empty((amax + 1, k, k))
    pw[0] = np.eye(k)
    for a in range(1, amax + 1):
        pw[a] = pw[a - 1] @ m1
    tab = np.empty((k, k, 2 * amax + 3))
    tab[:, :, 0:-1:2] = np.moveaxis(pw @ ((1.0 - model.accept)[:, None] * tr), 0, -1)
    tab[:, :, 1:-1:2] = np.moveaxis(pw @ tr, 0, -1)
    tab[:, :, -1] = model.init[None, :]
    return tab, pw


def _upsweep(b: np.ndarray) -> list[np.ndarray]:
    """Levels of a pairwise product tree over the kernels ``b`` (K, K, n): level 0 is ``b``;
    element ``j`` of level ``l + 1`` is the product of elements ``2 j`` and ``2 j + 1`` of
    level ``l``, scaled to entry sum 1 (an odd last element is carried up unchanged)."""
    levels = [b]
    cur = b
    k = b.shape[0]
    while cur.shape[-1] > 1:
        n = cur.shape[-1]
        p = n // 2
        up = np.empty((k, k, p + n % 2))
        prod = up[:, :, :p]
        np.einsum("ihn,hjn->ijn", cur[:, :, 0 : 2 * p : 2], cur[:, :, 1 : 2 * p : 2], out=prod)
        prod /= prod.sum(axis=(0, 1))
        if n % 2:
            up[:, :, p] = cur[:, :, n - 1]
        levels.append(up)
        cur = up
    return levels


def _forward(levels: list[np.ndarray], start: np.ndarray) -> np.ndarray:
    """``(K, n)``: the direction (sum 1) of ``start B_0 .. B_{t-1}`` at every position ``t``
    (down the tree of :func:`_upsweep`: the left child gets its parent's vector, the right
    child that vector times the left child)."""
    f = start[:, None] / start.sum()
    for cur in levels[-2::-1]:
        n = cur.shape[-1]
        p = n // 2
        new = np.empty((f.shape[0], n))
        new[:, 0 : 2 * p : 2] = f[:, :p]
        right = new[:, 1 : 2 * p : 2]
        np.einsum("in,ijn->jn", f[:, :p], cur[:, :, 0 : 2 * p : 2], out=right)
        right /= right.sum(axis=0)
        if n % 2:
            new[:, -1] = f[:, p]
        f = new
    return f


def _backward(levels: list[np.ndarray]) -> np.ndarray:
    """``(K, n)``: the direction (sum 1) of ``B_{t+1} .. B_{n-1} 1`` at every position ``t``
    (the last: ``1``), down the tree of :func:`_upsweep` (mirror of :func:`_forward`)."""
    k = levels[0].shape[0]
    r = np.full((k, 1), 1.0 / k)
    for cur in levels[-2::-1]:
        n = cur.shape[-1]
        p = n // 2
        new = np.empty((k, n))
        new[:, 1 : 2 * p : 2] = r[:, :p]
        left = new[:, 0 : 2 * p : 2]
        np.einsum("ijn,jn->in", cur[:, :, 1 : 2 * p : 2], r[:, :p], out=left)
        left /= left.sum(axis=0)
        if n % 2:
            new[:, -1] = r[:, p]
        r = new
    return r


def _round_counts(model: HiddenRegimes, pw: np.ndarray, agg: np.ndarray,
                  types: np.ndarray) -> np.ndarray:
    """Expected counts from the rounds' weights ``agg[:, :, u] = sum alpha beta^T / z`` over
    the rounds of type ``types[u]`` (``alpha``, ``beta``: the vectors at a round's start and
    after it, ``z = alpha B beta``). A round ``B = M1^a X`` (``X = M0``, or ``trans`` when
    full) has a transition out of each of its ``a + 1`` positions; the weight of marking
    factor ``r`` is ``<agg, M1^r F M1^(a-1-r) X>`` (``F = M1``) or ``<agg, M1^a X>``, which
    is ``F`` times ``(M1^r)' agg X' (M1^(a-1-r))'`` or ``(M1^a)' agg`` entrywise (``'``:
    transpose), summed over rounds and ``r``. Returns transitions ``i -> j`` (K*K,
    row-major), accepted positions per regime (K), rejected positions per regime (K)."""
    k, amax = model.k, pw.shape[0] - 1
    tr = model.trans
    m1 = model.accept[:, None] * tr
    m0 = (1.0 - model.accept)[:, None] * tr
    rej, full = np.zeros((2, amax + 1, k, k))
    is_full = types % 2 == 1
    rej[types[~is_full] // 2] = np.moveaxis(agg[:, :, ~is_full], -1, 0)
    full[types[is_full] // 2] = np.moveaxis(agg[:, :, is_full], -1, 0)
    # the last factor of every round: sum_a (M1^a)' agg_a, entrywise X
    last_rej = np.einsum("aji,ajk->ik", pw, rej) * m0
    last_full = np.einsum("aji,ajk->ik", pw, full) * tr
    # the accepted positions: sum over a and r + s = a - 1 of (M1^r)' Y_a (M1^s)'
    y = rej @ m0.T + full @ tr.T
    idx = np.add.outer(np.arange(amax + 1), np.arange(amax + 1)) + 1  # a = r + s + 1
    grid = np.where((idx <= amax)[:, :, None, None], y[np.minimum(idx, amax)], 0.0)
    acc = np.einsum("rji,rjl->il", pw, np.einsum("rsjk,slk->rjl", grid, pw)) * m1
    return np.concatenate([(acc + last_rej + last_full).ravel(), acc.sum(axis=1),
                           last_rej.sum(axis=1)])


def _estep(model: HiddenRegimes, data: _RoundData, want_counts: bool = True):
    """Log-likelihood and (optionally) expected counts: ``init`` (K), ``trans`` (K, K),
    ``ones`` and ``zeros`` (K: accepted / rejected positions per regime). Forward and
    backward directions from one pairwise product tree over the chain (:func:`_upsweep`):
    ``O(n K^3)`` work in ``O(log n)`` vectorized steps."""
    k = model.k
    pi = model.init
    tab, pw = _kernel_table(model, data.amax)
    b = np.take(tab, data.typ, axis=2)  # (K, K, n), contiguous
    levels = _upsweep(b)
    # forward directions alpha_t (before position t; uniform start)
    alpha = _forward(levels, np.full(k, 1.0 / k))
    # log L telescopes: sum_t log(alpha_t B_t 1) with alpha_t normalized to sum 1
    rows = np.take(tab.sum(axis=1), data.typ, axis=1)  # B_t 1
    loglik = float(np.sum(np.log(np.einsum("in,in->n", alpha, rows))))
    if not want_counts:
        return loglik, None
    # backward directions after every position: beta_{t+1} = B_{t+1} .. B_{n-1} 1
    beta = _backward(levels)
    pos = data.rounds
    z = np.take(np.einsum("in,ijn,jn->n", alpha, b, beta), pos)
    al, be = np.take(alpha, pos, axis=1), np.take(beta, pos, axis=1)
    outer = al[:, None, :] * (be / z)[None, :, :]  # (K, K, rounds)
    agg = np.add.reduceat(outer, data.type_starts, axis=2)  # per type present
    stats = _round_counts(model, pw, agg, data.types)
    # initial regimes: after each reset, posterior of the first round's start regime
    post = pi[:, None] * np.take(beta, data.resets, axis=1)
    init = (post / post.sum(axis=0)).sum(axis=1)
    return loglik, {"init": init, "trans": stats[: k * k].reshape(k, k),
                    "ones": stats[k * k : k * k + k], "zeros": stats[k * k + k :]}


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@functools.cache
def _rotation(k: int, sign: int) -> np.ndarray:
    """Indices rolling row ``i`` of a (K, K) array by ``sign (i + 1)`` (``np.roll``)."""
    r = np.arange(k)
    out = (r[None, :] - sign * (r[:, None] + 1)) % k
    out.setflags(write=False)
    return out


def _unpack(x: np.ndarray, k: int) -> HiddenRegimes:
    init = _softmax(np.append(x[: k - 1], 0.0))
    zt = np.concatenate([x[k - 1 : k - 1 + k * (k - 1)].reshape(k, k - 1), np.zeros((k, 1))],
                        axis=1)
    # the last column's logit is pinned to 0 in every row; rotate so that the pinned one is
    # the diagonal (a sticky start is the origin)
    zt = np.take_along_axis(zt, _rotation(k, +1), axis=1)  # row i rolled by i + 1
    trans = _softmax(zt)
    from scipy.special import expit  # logistic without overflow (scipy loads on a fit only)

    acc = expit(x[k - 1 + k * (k - 1):])
    floor = _PROB_FLOOR
    trans = np.clip(trans, floor, None)
    trans /= trans.sum(axis=1, keepdims=True)
    init = np.clip(init, floor, None)
    init /= init.sum()
    # valid by construction (rows of a softmax, clipped): no checks on this hot path
    return HiddenRegimes._unchecked(init, trans, np.clip(acc, floor, 1.0 - floor))


def _pack(m: HiddenRegimes) -> np.ndarray:
    k = m.k
    li = np.log(np.maximum(m.init, _PROB_FLOOR))
    parts = [li[: k - 1] - li[k - 1]]
    for i in range(k):
        row = np.log(np.maximum(m.trans[i], _PROB_FLOOR))
        row = np.roll(row, -(i + 1))  # undo the rotation of _unpack
        parts.append(row[: k - 1] - row[k - 1])
    q = np.clip(m.accept, 1e-6, 1 - 1e-6)
    parts.append(np.log(q / (1 - q)))
    return np.concatenate(parts)


def _grad(m: HiddenRegimes, cnt: dict) -> np.ndarray:
    """Gradient of the log-likelihood in the logits of :func:`_unpack` (Fisher: expected
    complete-data score)."""
    k = m.k
    ni = cnt["init"]
    gi = ni - m.init * ni.sum()
    parts = [gi[: k - 1] - 0.0]
    # d/dz_i.(last pinned) handled by the rotation: logit free entries are rotated indices
    nt = cnt["trans"]
    score = nt - m.trans * nt.sum(axis=1, keepdims=True)
    parts.append(np.take_along_axis(score, _rotation(k, -1), axis=1)[:, : k - 1].ravel())
    parts.append(cnt["ones"] * (1 - m.accept) - cnt["zeros"] * m.accept)
    return np.concatenate(parts)


def _starts(k: int, qbar: float) -> list[HiddenRegimes]:
    """Deterministic starting points: regimes spread around the iid estimate, sticky."""
    out = []
    if k == 1:
        return [HiddenRegimes([1.0], [[1.0]], [min(max(qbar, 0.01), 0.99)])]
    for lo, hi, stay in ((qbar / 2, (1 + qbar) / 2, 0.9), (0.2, 0.98, 0.98),
                         (0.05, 0.7, 0.8)):
        acc = np.linspace(lo, hi, k)
        tr = np.full((k, k), (1 - stay) / (k - 1))
        np.fill_diagonal(tr, stay)
        out.append(HiddenRegimes(np.full(k, 1.0 / k), tr, np.clip(acc, 0.01, 0.995)))
    return out


def _canonical(m: HiddenRegimes) -> HiddenRegimes:
    order = np.argsort(m.accept, kind="stable")
    return HiddenRegimes(m.init[order], m.trans[np.ix_(order, order)], m.accept[order])


FITS_KEPT = 256
_FITS = Kept(FITS_KEPT)  # (k, max_iter, content key of the rounds and groups) -> RegimeFit


def fit_regimes(accepted, caps, groups=None, *, k: int = 2, max_iter: int = 400) -> RegimeFit:
    """Maximum-likelihood :class:`HiddenRegimes` with ``k`` regimes for rounds
    ``(accepted, caps)`` in order, grouped into independent sequences by ``groups`` (module
    docstring). Deterministic (fixed starting points); regimes sorted by acceptance. A fit is
    kept (per process, at most ``FITS_KEPT``) under a digest of its inputs: the same rounds,
    groups, ``k`` and ``max_iter`` again give a copy of it, not a second optimisation."""
    k = as_int(k, "k", low=1, high=MAX_REGIMES)
    max_iter = as_int(max_iter, "max_iter", low=1)
    a, g = as_sample(accepted, caps)
    digest = content_key(a, g, None if groups is None else np.asarray(groups))
    if digest is None:  # object labels: no content key
        return _fit_regimes(a, g, groups, k, max_iter)
    key = (k, max_iter, digest)
    if key not in _FITS:
        fit = _fit_regimes(a, g, groups, k, max_iter)
        _FITS.keep({key: copy.deepcopy(fit)})
        return fit
    return copy.deepcopy(_FITS[key])


def _fit_regimes(accepted, caps, groups, k: int, max_iter: int) -> RegimeFit:
    """:func:`fit_regimes` computed (its arguments checked)."""
    from scipy.optimize import minimize

    data = _RoundData.build(accepted, caps, groups)
    a, g = as_sample(accepted, caps)
    rejected = float(np.sum(a < g))
    qbar = float(a.sum() / max(a.sum() + rejected, 1.0))
    if k == 1:
        # closed form: iid geometric MLE
        q = min(max(qbar, _PROB_FLOOR), 1 - _PROB_FLOOR)
        m = HiddenRegimes([1.0], [[1.0]], [q])
        ll = _estep(m, data, want_counts=False)[0]
        return RegimeFit(m, ll, m.n_params, data.n_rounds, data.n_sequences, True)

    def fun(x):
        m = _unpack(x, k)
        ll, cnt = _estep(m, data)
        return -ll, -_grad(m, cnt)

    best = None
    for start in _starts(k, qbar):
        res = minimize(fun, _pack(start), jac=True, method="BFGS",
                       options={"maxiter": max_iter, "gtol": 1e-3})
        if best is None or res.fun < best.fun:
            best = res
    m = _canonical(_unpack(best.x, k))
    ll = _estep(m, data, want_counts=False)[0]
    return RegimeFit(m, ll, m.n_params, data.n_rounds, data.n_sequences,
                     bool(best.success))
