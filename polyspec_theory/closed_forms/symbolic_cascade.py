"""Symbolic P1 (sympy): the renewal DP of docs/theory.md §6 carried out on symbols.

- :func:`leviathan_derivation` — for n = 2 the DP reduces to Leviathan et al.'s Thm 3.8:
  the bottom system ``S_2`` emits ``L_2 = 1`` a.s., so the renewal masses solve
  ``f(s) = f(s-1)``, ``f(0) = 1`` (``rsolve``) i.e. ``f = 1``; ``phi = sum_{s<gamma} 1 =
  gamma`` and ``G = gamma`` a.s.; ``E[L_1] = sum_{k=0}^gamma alpha^k``; ``E[C_1] = gamma T_2 +
  T_1(gamma+1)``; with constant costs and ``c = T_2/T_1`` the speedup simplifies to
  ``(1 - alpha^{gamma+1}) / ((1 - alpha)(gamma c + 1))`` for symbolic ``gamma``.
- :func:`symbolic_cascade` — any n with small integer thresholds, iid acceptance
  ``alpha_i`` per pair and affine costs ``T_i(m) = b_i + k_i (m - 1)``: exact rational
  functions for ``phi``, the block and emitted laws, ``tau_1`` and the speedup.
- :func:`three_level_closed_form` — the n = 3 case (default ``theta_1 = 3``,
  ``theta_2 = 2``) in closed form; :func:`evaluate_against_predict` compares any symbolic
  result with :func:`polyspec_theory.core.p1.predict_chain` numerically.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.errors import PolyspecInputError, as_int, as_probability, as_real
from polyspec_theory.schemes import predict

__all__ = [
    "leviathan_derivation",
    "SymbolicCascade",
    "symbolic_cascade",
    "three_level_closed_form",
    "evaluate_against_predict",
]

MAX_SYMBOLIC_THRESHOLD = 8


def leviathan_derivation() -> dict:
    """Run the n = 2 derivation with symbolic ``gamma`` (see module docstring).

    Returns the intermediate results (``f``, ``phi``, ``mean_emitted``, ``round_cost``,
    ``speedup``, ``leviathan``) and ``difference`` (simplifies to 0; asserted)."""
    alpha, c, t1, t2, b1, k1 = sp.symbols("alpha c T_1 T_2 b_1 k_1", positive=True)
    gamma = sp.Symbol("gamma", integer=True, positive=True)
    s, k = sp.symbols("s k", integer=True, nonnegative=True)
    f = sp.Function("f")
    # renewal masses of S_2 (one token per round): f(s) = sum_l f(s-l) P(L=l) = f(s-1)
    f_sol = sp.rsolve(f(s) - f(s - 1), f(s), {f(0): 1})
    phi = sp.summation(f_sol, (s, 0, gamma - 1))
    # G = s + L for the last s < gamma reached: s = gamma - 1, L = 1, so G = gamma a.s.
    p_block = f_sol.subs(s, gamma - 1) * 1
    mean_emitted = sp.summation(alpha**k, (k, 0, gamma))  # sum_{k<=gamma} P(A >= k)
    if isinstance(mean_emitted, sp.Piecewise):
        mean_emitted = mean_emitted.args[-1].expr  # the alpha != 1 branch
    # affine target cost T_1(m) = b_1 + k_1 (m - 1) over gamma + 1 positions
    round_cost_affine = phi * t2 + (b1 + k1 * gamma)
    speedup_affine = b1 * mean_emitted / round_cost_affine
    round_cost = phi * t2 + t1  # constant costs
    speedup = sp.simplify((t1 * mean_emitted / round_cost).subs(t2, c * t1))
    leviathan = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    diff = sp.simplify(speedup - leviathan)
    assert diff == 0, diff
    assert sp.simplify(p_block - 1) == 0
    return {
        "f": f_sol,
        "phi": phi,
        "block_probability_at_gamma": p_block,
        "mean_emitted": mean_emitted,
        "round_cost": round_cost,
        "speedup": speedup,
        "speedup_affine": speedup_affine,
        "leviathan": leviathan,
        "difference": diff,
    }


@dataclass(frozen=True)
class SymbolicCascade:
    """Symbolic P1 for fixed thresholds. ``alphas[i]`` / ``bases[i]`` / ``slopes[i]`` are the
    symbols (``slopes`` of the bottom model unused: it runs ``T_n(1) = b_n``). ``phi[i]`` is
    ``E[N_{i+2}]`` (rounds of ``S_{i+2}`` per block of level ``i+1``, 1-based models)."""

    thresholds: tuple[int, ...]
    alphas: tuple[sp.Symbol, ...]
    bases: tuple[sp.Symbol, ...]
    slopes: tuple[sp.Symbol, ...]
    phi: tuple[sp.Expr, ...]
    block_pmfs: tuple[dict, ...]
    mean_emitted: sp.Expr  # E[L_1]
    round_cost: sp.Expr  # E[C_1]
    time_per_token: sp.Expr
    speedup: sp.Expr

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return self.alphas + self.bases + self.slopes


def _renewal(l_pmf: dict, theta: int):
    f = [sp.Integer(1)]
    for s in range(1, theta):
        f.append(sp.expand(sum(f[s - ll] * p for ll, p in l_pmf.items() if ll <= s)))
    phi = sp.expand(sum(f))
    g_pmf: dict[int, sp.Expr] = {}
    for s in range(theta):
        for ll, p in l_pmf.items():
            if s + ll >= theta:
                g_pmf[s + ll] = g_pmf.get(s + ll, 0) + f[s] * p
    return phi, {g: sp.expand(v) for g, v in sorted(g_pmf.items())}


def symbolic_cascade(thresholds, policy: str = "accumulate") -> SymbolicCascade:
    """Exact P1 as rational functions of ``alpha_i`` (iid per pair), ``b_i``, ``k_i``
    (affine costs) for integer ``thresholds`` (each in 1..8: the expressions grow fast)."""
    if not isinstance(thresholds, (list, tuple)) or not thresholds:
        raise PolyspecInputError("thresholds", "must be a non-empty list of integers")
    th = tuple(as_int(t, f"thresholds[{i}]", low=1, high=MAX_SYMBOLIC_THRESHOLD)
               for i, t in enumerate(thresholds))
    if policy not in ("accumulate", "truncate"):
        raise PolyspecInputError("policy", f"must be 'accumulate' or 'truncate', got {policy!r}")
    n = len(th) + 1
    alphas = tuple(sp.Symbol(f"alpha_{i + 1}", positive=True) for i in range(n - 1))
    bases = tuple(sp.Symbol(f"b_{i + 1}", positive=True) for i in range(n))
    slopes = tuple(sp.Symbol(f"k_{i + 1}", nonnegative=True) for i in range(n))
    l_pmf: dict[int, sp.Expr] = {1: sp.Integer(1)}
    round_cost: sp.Expr = bases[-1]
    phis, blocks = [], []
    mean_l = None
    for i in range(n - 2, -1, -1):
        phi, g_pmf = _renewal(l_pmf, th[i])
        if policy == "truncate":
            g_pmf = {th[i]: sp.Integer(1)}
        a = alphas[i]
        fwd = sp.expand(sum(p * (bases[i] + slopes[i] * g) for g, p in g_pmf.items()))
        round_cost = sp.expand(phi * round_cost + fwd)
        phis.append(phi)
        blocks.append(g_pmf)
        if i == 0:
            mean_l = sp.expand(sum(p * sum(a**k for k in range(g + 1))
                                   for g, p in g_pmf.items()))
        else:
            new: dict[int, sp.Expr] = {}
            for g, p in g_pmf.items():
                for acc in range(g + 1):
                    pa = a**acc * (1 - a) if acc < g else a**g
                    new[acc + 1] = new.get(acc + 1, 0) + p * pa
            l_pmf = {ll: sp.expand(v) for ll, v in new.items()}
    tau = round_cost / mean_l
    return SymbolicCascade(
        thresholds=th,
        alphas=alphas,
        bases=bases,
        slopes=slopes,
        phi=tuple(reversed(phis)),
        block_pmfs=tuple(reversed(blocks)),
        mean_emitted=mean_l,
        round_cost=round_cost,
        time_per_token=tau,
        speedup=sp.factor(bases[0] / tau),
    )


def three_level_closed_form(theta_1: int = 3, theta_2: int = 2) -> SymbolicCascade:
    """n = 3 (target, mid, small) with thresholds ``(theta_1, theta_2)`` in closed form."""
    return symbolic_cascade((theta_1, theta_2))


def evaluate_against_predict(sym: SymbolicCascade, alphas, bases, slopes) -> dict:
    """Substitute numbers into ``sym`` and compute :func:`predict` on the same cascade.
    Returns ``{"symbolic": speedup, "predict": speedup, "phi_symbolic", "phi_predict"}``."""

    n = len(sym.thresholds) + 1
    if len(alphas) != n - 1 or len(bases) != n or len(slopes) != n:
        raise PolyspecInputError("alphas", f"need {n - 1} alphas and {n} bases and slopes")
    al = [as_probability(x, f"alphas[{i}]") for i, x in enumerate(alphas)]
    bs = [as_real(x, f"bases[{i}]", low=0.0) for i, x in enumerate(bases)]
    ks = [as_real(x, f"slopes[{i}]", low=0.0) for i, x in enumerate(slopes)]
    subs = dict(zip(sym.alphas, al, strict=True))
    subs.update(zip(sym.bases, bs, strict=True))
    subs.update(zip(sym.slopes, ks, strict=True))
    models = tuple(Model(f"m{i + 1}", CostCurve.affine(bs[i], ks[i]) if i < n - 1
                         else CostCurve.constant(bs[i])) for i in range(n))
    casc = Cascade(models, tuple(IIDGeometric(a) for a in al), sym.thresholds)
    pred = predict(casc)
    return {
        "symbolic": float(sym.speedup.subs(subs)),
        "predict": pred.speedup,
        "phi_symbolic": [float(p.subs(subs)) for p in sym.phi],
        "phi_predict": [lv.phi for lv in pred.levels[1:]],
    }
