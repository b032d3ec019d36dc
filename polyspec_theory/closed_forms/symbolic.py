"""D1: the capped-geometric moments and pgf, derived with sympy (docs/theory.md D1).

``A`` = accepted drafted tokens in a round with cap ``g``, per-position acceptance ``alpha``:
``P(A=k) = alpha^k (1-alpha)`` for ``k < g`` and ``P(A=g) = alpha^g``; ``L = A + 1``.
Every closed form is *computed* from its defining sum (``sympy.Sum(...).doit()`` and
simplification); where a readable form is quoted (Leviathan's ``E[L]``, the variance, the pgf)
sympy proves it equal to the computed one before it is used, and a failed check raises.
:func:`derivation` returns the ordered steps, each with its sympy expression, so a user can
print them or render them in LaTeX (:func:`derivation_latex`). The ``alpha -> 1`` limits are
computed with ``sympy.limit``.

Results (all for ``alpha != 1``; at ``alpha = 1`` the limits hold):
``E[A] = alpha (1 - alpha^g) / (1 - alpha)``, ``E[L] = (1 - alpha^{g+1}) / (1 - alpha)``,
``Var[A] = Var[L] = alpha (1 - (2g+1)(1-alpha) alpha^g - alpha^{2g+1}) / (1-alpha)^2``,
``G(z) = E[z^A] = (1-alpha)(1 - (alpha z)^g)/(1 - alpha z) + (alpha z)^g``;
``alpha -> 1``: ``E[A] -> g``, ``E[L] -> g + 1``, ``Var -> 0``, ``G(z) -> z^g``.

:func:`lambdified` gives the closed forms as numpy functions (they cancel catastrophically
near ``alpha = 1``: that is why :class:`polyspec_theory.core.laws.IIDGeometric` evaluates them
differently) and :func:`reference` evaluates them with mpmath at high precision (the reference
the numeric code is tested against). sympy is imported on first use only.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from polyspec_theory.errors import PolyspecInputError, as_int, as_probability, as_real

__all__ = [
    "DerivationStep",
    "QUANTITIES",
    "symbols",
    "pmf_expr",
    "defining_sums",
    "closed_forms",
    "limits_at_one",
    "derivation",
    "derivation_latex",
    "lambdified",
    "reference",
]

#: Names accepted by :func:`closed_forms`, :func:`lambdified` and :func:`reference`.
QUANTITIES = ("mean", "second_moment", "var", "mean_emitted", "var_emitted", "pgf", "pmf")


class DerivationStep(NamedTuple):
    """One step of a derivation: what is done, and the resulting sympy expression."""

    description: str
    expression: object  # a sympy expression, usually an unevaluated Eq


@functools.cache
def symbols():
    """The sympy symbols ``(alpha, g, k, z)``: ``alpha > 0``, ``g >= 1``, ``k >= 0`` integers."""
    import sympy as sp

    alpha = sp.Symbol("alpha", positive=True)
    g = sp.Symbol("g", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, nonnegative=True)
    z = sp.Symbol("z")
    return alpha, g, k, z


def pmf_expr():
    """``P(A = k | g)`` as a sympy Piecewise in ``(alpha, g, k)``."""
    import sympy as sp

    alpha, g, k, _ = symbols()
    return sp.Piecewise(
        (alpha**k * (1 - alpha), k < g), (alpha**g, sp.Eq(k, g)), (0, True)
    )


def defining_sums() -> dict:
    """The unevaluated defining sums (the pmf split at the cap) of each quantity."""
    import sympy as sp

    alpha, g, k, z = symbols()
    body = alpha**k * (1 - alpha)
    return {
        "total": sp.Sum(body, (k, 0, g - 1)) + alpha**g,
        "mean": sp.Sum(k * body, (k, 0, g - 1)) + g * alpha**g,
        "second_moment": sp.Sum(k**2 * body, (k, 0, g - 1)) + g**2 * alpha**g,
        "pgf": sp.Sum(z**k * body, (k, 0, g - 1)) + z**g * alpha**g,
        "tail_sum": sp.Sum(alpha**k, (k, 1, g)),  # E[A] = sum_{k=1}^{g} P(A >= k)
    }


def _generic(expr):
    """Keep the generic (``otherwise``) branch of every Piecewise sympy produced."""
    import sympy as sp

    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1].expr)


def _special(expr):
    """Keep the first (special-case, e.g. ``alpha = 1``) branch of every Piecewise."""
    import sympy as sp

    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[0].expr)


def _zero(expr) -> bool:
    import sympy as sp

    return sp.simplify(expr) == 0


@functools.cache
def _derive():
    """Run the derivation once; returns (steps, closed forms, limits)."""
    import sympy as sp

    alpha, g, k, z = symbols()
    sums = defining_sums()
    P = sp.Function("P")
    E = sp.Function("E")
    Var = sp.Function("Var")
    G = sp.Function("G")
    A, L = sp.Symbol("A"), sp.Symbol("L")
    steps: list[DerivationStep] = []

    def add(desc, lhs, rhs):
        steps.append(DerivationStep(desc, sp.Eq(lhs, rhs, evaluate=False)))

    add("Law of A: capped geometric (iid acceptance alpha, cap g)", P(sp.Eq(A, k)), pmf_expr())

    # normalization
    total = sp.simplify(_generic(sums["total"].doit()))
    if total != 1:
        raise AssertionError(f"pmf does not normalize: {total}")
    add("Normalization: the defining sum evaluates to 1", sums["total"], total)

    # mean
    mean_raw = sums["mean"].doit()
    add("E[A] by its definition, split at the cap", E(A), sums["mean"])
    add("Evaluate the finite sums (sympy; Piecewise keeps alpha = 1 apart)", E(A), mean_raw)
    mean = sp.factor(sp.simplify(_generic(mean_raw)))
    add("Simplify the alpha != 1 branch", E(A), mean)
    tail = sp.simplify(_generic(sums["tail_sum"].doit()))
    if not _zero(tail - mean):
        raise AssertionError("tail-sum route disagrees with the direct sum")
    add("Check by the tail sum E[A] = sum_{k=1}^g P(A >= k) = sum alpha^k", sums["tail_sum"], tail)
    mean_l = sp.factor(sp.simplify(1 + mean))
    leviathan = (1 - alpha ** (g + 1)) / (1 - alpha)
    if not _zero(mean_l - leviathan):
        raise AssertionError("E[L] is not Leviathan's (1 - alpha^(g+1))/(1 - alpha)")
    add("E[L] = 1 + E[A] (Leviathan et al. eq. 1)", E(L), leviathan)

    # second moment and variance
    m2_raw = sums["second_moment"].doit()
    add("E[A^2] by its definition", E(A**2), sums["second_moment"])
    m2 = sp.factor(sp.simplify(_generic(m2_raw)))
    add("Evaluate and simplify (alpha != 1)", E(A**2), m2)
    var = sp.factor(sp.simplify(m2 - mean**2))
    add("Var[A] = E[A^2] - E[A]^2", Var(A), var)
    var_expected = alpha * (
        1 - (2 * g + 1) * (1 - alpha) * alpha**g - alpha ** (2 * g + 1)
    ) / (1 - alpha) ** 2
    if not _zero(var - var_expected):
        raise AssertionError("variance does not reduce to the readable form")
    add("Readable form of the same expression", Var(A), var_expected)
    add("Var[L] = Var[A + 1] = Var[A]", Var(L), var_expected)

    pgf_readable = _pgf_steps(add, sums["pgf"], mean, var, (G, Var, A))

    # alpha -> 1
    limits = {
        "mean": sp.limit(mean, alpha, 1, dir="-"),
        "mean_emitted": sp.limit(leviathan, alpha, 1, dir="-"),
        "var": sp.limit(var_expected, alpha, 1, dir="-"),
        "second_moment": sp.limit(m2, alpha, 1, dir="-"),
        "pgf": sp.simplify(sp.limit(pgf_readable, alpha, 1, dir="-")),
    }
    limits["var_emitted"] = limits["var"]
    for key, lhs, desc in (
        ("mean", E(A), "Limit alpha -> 1 (sympy.limit, from below): E[A] -> g"),
        ("mean_emitted", E(L), "Limit alpha -> 1: E[L] -> g + 1 (no 0/0 in the limit)"),
        ("var", Var(A), "Limit alpha -> 1: Var[A] -> 0 (every round accepts all g)"),
        ("pgf", G(z), "Limit alpha -> 1: G(z) -> z^g"),
    ):
        add(desc, sp.Limit(lhs, alpha, 1, dir="-"), limits[key])
    # sympy's own alpha = 1 branch must agree with the limit (continuity at alpha = 1)
    special_mean = sp.simplify(_special(mean_raw).subs(alpha, 1))
    special_m2 = sp.simplify(_special(m2_raw).subs(alpha, 1))
    if not (_zero(special_mean - limits["mean"]) and _zero(special_m2 - limits["second_moment"])):
        raise AssertionError("alpha = 1 branch disagrees with the limit")
    add("Continuity: sympy's own alpha = 1 branch gives E[A] = g (= the limit)",
        sp.Subs(E(A), alpha, 1), special_mean)
    add("Continuity: alpha = 1 branch gives Var[A] = E[A^2] - g^2 = 0 (= the limit)",
        sp.Subs(Var(A), alpha, 1), sp.simplify(special_m2 - special_mean**2))

    closed = {
        "mean": mean,
        "second_moment": m2,
        "var": var_expected,
        "mean_emitted": leviathan,
        "var_emitted": var_expected,
        "pgf": pgf_readable,
        "pmf": pmf_expr(),
    }
    return tuple(steps), closed, limits


def _pgf_steps(add, pgf_sum, mean, var, funcs):
    """The pgf's steps of the derivation (evaluated, then checked against the moments):
    returns its readable form."""
    import sympy as sp

    alpha, g, _, z = symbols()
    G, Var, A = funcs
    add("pgf G(z) = E[z^A] by its definition", G(z), pgf_sum)
    pgf = sp.simplify(_generic(pgf_sum.doit()))
    pgf_readable = (1 - alpha) * (1 - (alpha * z) ** g) / (1 - alpha * z) + (alpha * z) ** g
    if not _zero(pgf - pgf_readable):
        raise AssertionError("pgf does not reduce to the readable form")
    add("Evaluate the geometric sum (alpha z != 1)", G(z), pgf_readable)
    d1 = sp.diff(pgf_readable, z).subs(z, 1)
    d2 = sp.diff(pgf_readable, z, 2).subs(z, 1)
    if not _zero(pgf_readable.subs(z, 1) - 1):
        raise AssertionError("G(1) != 1")
    add("Check: G(1) = 1", G(1), sp.simplify(pgf_readable.subs(z, 1)))
    if not _zero(d1 - mean):
        raise AssertionError("G'(1) != E[A]")
    add("Check: G'(1) = E[A]", sp.Derivative(G(z), z).subs(z, 1), sp.factor(sp.simplify(d1)))
    if not _zero(d2 + d1 - d1**2 - var):
        raise AssertionError("G''(1) + G'(1) - G'(1)^2 != Var[A]")
    add("Check: G''(1) + G'(1) - G'(1)^2 = Var[A]", Var(A), sp.factor(sp.simplify(d2 + d1 - d1**2)))
    return pgf_readable


def _quantity(name: str) -> str:
    if name not in QUANTITIES:
        raise PolyspecInputError("name", f"must be one of {', '.join(QUANTITIES)}, got {name!r}")
    return name


def closed_forms() -> dict:
    """Closed forms (sympy, valid for ``alpha != 1``) keyed by :data:`QUANTITIES`."""
    return dict(_derive()[1])


def limits_at_one() -> dict:
    """``alpha -> 1`` limits computed with ``sympy.limit`` (symbolic in ``g``):
    ``mean -> g``, ``mean_emitted -> g + 1``, ``var``/``var_emitted -> 0``, ``pgf -> z^g``."""
    return dict(_derive()[2])


def derivation() -> list[DerivationStep]:
    """The ordered derivation: ``(description, sympy expression)`` per step.

    Each equality was checked by sympy while deriving (an inconsistent step raises)."""
    return list(_derive()[0])


def derivation_latex() -> str:
    """The derivation as LaTeX, one ``description`` + display equation per step."""
    import sympy as sp

    lines = []
    for i, step in enumerate(derivation(), 1):
        lines.append(f"% step {i}\n\\text{{{step.description}}}\\\\\n"
                     f"\\[ {sp.latex(step.expression)} \\]")
    return "\n".join(lines)


@functools.cache
def lambdified(name: str, backend: str = "numpy"):
    """Closed form ``name`` as a plain function ``f(alpha, g)`` (``f(alpha, g, z)`` for pgf,
    ``f(alpha, g, k)`` for pmf) via ``sympy.lambdify``; ``backend`` "numpy" or "mpmath".

    These are the raw closed forms: 0/0 at ``alpha = 1`` and cancellation near it in float64.
    """
    import sympy as sp

    name = _quantity(name)
    if backend not in ("numpy", "mpmath"):
        raise PolyspecInputError("backend", f"must be 'numpy' or 'mpmath', got {backend!r}")
    alpha, g, k, z = symbols()
    expr = closed_forms()[name]
    extra = {"pgf": (z,), "pmf": (k,)}.get(name, ())
    return sp.lambdify((alpha, g, *extra), expr, modules=backend)


def reference(name: str, alpha, g, z=None, k=None, dps: int = 60):
    """High-precision value (mpmath, ``dps`` digits) of ``name`` at float ``alpha`` (exactly
    converted), integer cap ``g`` and, for the pgf, real ``z`` (``k`` for the pmf).

    At ``alpha = 1`` the sympy limit is evaluated instead of the 0/0 closed form. Digits lost
    to cancellation near ``alpha = 1`` are about ``-2 log10(1 - alpha)``; keep ``dps`` above it.
    """
    import mpmath
    import sympy as sp

    name = _quantity(name)
    a = as_probability(alpha, "alpha")
    g = as_int(g, "g", low=1)
    dps = as_int(dps, "dps", low=15, high=10_000)
    args = ()
    if name == "pgf":
        args = (mpmath.mpf(as_real(z, "z")),)
    elif name == "pmf":
        args = (as_int(k, "k", low=0),)
    with mpmath.workdps(dps):
        if name == "pmf":
            kk = args[0]
            am = mpmath.mpf(a)
            if kk > g:
                return mpmath.mpf(0)
            return am**g if kk == g else am**kk * (1 - am)
        if a == 1.0:
            _, g_s, _, z_s = symbols()
            lim = sp.lambdify((g_s, z_s), limits_at_one()[name], modules="mpmath")
            return +mpmath.mpf(lim(g, *(args or (0,))))
        f = lambdified(name, "mpmath")
        return +f(mpmath.mpf(a), g, *args)

