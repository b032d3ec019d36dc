"""Monte-Carlo verification of every numbered result (D1, D2, P1–P7, Y1–Y5, F1, F2, B1, B2;
token trees T1–T5 and adaptive draft length A1, A2, A4 in :mod:`simulators.verify_structures`).

Each check runs a simulator (:mod:`simulators.length`, :mod:`simulators.token`,
:mod:`simulators.yin_mc`) — the algorithm itself — and compares it with the theory module
that states the result. Pure functions returning :class:`CheckRecord` rows; the CLI
(``polyspec verify``) only prints them.

Confidence level. A row passes when the theory value lies inside the Monte-Carlo confidence
interval at level ``1 - alpha_row`` with ``alpha_row = FAMILY_ALPHA / MAX_ROWS`` (Bonferroni),
and chi-square rows pass when their p-value is ``>= alpha_row``. With ``FAMILY_ALPHA = 1e-3``
the probability that a correct implementation fails any row of the table is ``<= 1e-3``. The
intervals printed are at that level (z about 4.1), not 95 %. All seeds are fixed, so a given
build gives the same table every time.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np
from scipy import stats

from polyspec_theory.core.config import DEFAULT_CASCADE, Cascade

from .checks import (
    FAMILY_ALPHA,
    MAX_ROWS,
    ROW_ALPHA,
    ROW_Z,
    CheckRecord,
    Est,
    VerifyContext,
    ci_row,
    fmt,
    widen_ci,
)
from .schemes import registry as scheme_registry
from .verify_structures import check_schedules, check_trees

__all__ = [
    "ci_row",
    "fmt",
    "widen_ci",
    "FAMILY_ALPHA",
    "MAX_ROWS",
    "ROW_ALPHA",
    "ROW_Z",
    "CheckRecord",
    "VerifyContext",
    "REGISTRY",
    "run_checks",
    "format_table",
    "context_departure",
]

def _dualistic(alpha_or_law, gamma: int, draft_cost: float, target_cost=1.0) -> Cascade:
    from polyspec_theory.core.config import law_from_config

    law = alpha_or_law if not isinstance(alpha_or_law, float) else {"alpha": alpha_or_law}
    return Cascade.from_config({
        "models": [{"name": "target", "cost": target_cost}, {"name": "draft", "cost": draft_cost}],
        "acceptance": [law_from_config(law).to_config()],
        "thresholds": [gamma],
    })


def _length_run(ctx: VerifyContext, key, cascade: Cascade, quick: int, full: int):
    from .length import simulate_lengths

    seed = ctx.seed + zlib.crc32(repr(key).encode()) % 100_000
    return ctx.cached(("length", key), lambda: simulate_lengths(
        cascade, ctx.size(quick, full), seed=seed, chains=512))


def _moments_from_counts(counts: np.ndarray) -> tuple[float, ...]:
    k = np.arange(counts.size, dtype=np.float64)
    n = float(counts.sum())
    m = [float(np.dot(counts, k**p) / n) for p in range(1, 5)]
    return n, *m


def _default_cascade() -> Cascade:
    return Cascade.from_config(DEFAULT_CASCADE)


# --- D1, D2 --------------------------------------------------------------------------------

_D_ALPHA, _D_GAMMA, _D_C = 0.8, 6, 0.05


def check_d(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.closed_forms.dualistic import leviathan_speedup
    from polyspec_theory.closed_forms.symbolic import lambdified

    cas = _dualistic(_D_ALPHA, _D_GAMMA, _D_C)
    res = _length_run(ctx, "D", cas, 300_000, 5_000_000)
    counts = res.levels[0].joint_hist[_D_GAMMA]  # G = gamma always; index = L = A + 1
    a_counts = counts[1:_D_GAMMA + 2]
    n, m1, m2, m3, m4 = _moments_from_counts(a_counts)
    var = m2 - m1 * m1
    mu4c = m4 - 4 * m1 * m3 + 6 * m1 * m1 * m2 - 3 * m1**4
    mean_t = float(lambdified("mean")(_D_ALPHA, _D_GAMMA))
    var_t = float(lambdified("var")(_D_ALPHA, _D_GAMMA))
    rows = [
        ci_row("D1", f"E[A] capped geometric, alpha={_D_ALPHA}, g={_D_GAMMA} (sympy closed form)",
                mean_t, Est(m1, math.sqrt(var / n)), f"{int(n)} rounds"),
        ci_row("D1", f"Var[A] capped geometric, alpha={_D_ALPHA}, g={_D_GAMMA} (sympy)",
                var_t, Est(var, math.sqrt(max(mu4c - var * var, 0.0) / n)),
                f"{int(n)} rounds"),
    ]
    theory = leviathan_speedup(_D_ALPHA, _D_GAMMA, _D_C)
    rows.append(ci_row(
        "D2", f"Leviathan speedup (1-a^(g+1))/((1-a)(gc+1)), a={_D_ALPHA}, g={_D_GAMMA}, "
        f"c={_D_C}", theory, res.speedup, f"{res.tokens} tokens, {res.chains} chains"))
    return rows


# --- P1–P4 on the 4-level default cascade ------------------------------------------------------


def _default_runs(ctx: VerifyContext):
    cas = _default_cascade()
    acc = _length_run(ctx, "P1", cas, 400_000, 10_000_000)
    trunc_cas = Cascade(cas.models, cas.laws, cas.thresholds, "truncate", cas.name)
    trunc = _length_run(ctx, "P1t", trunc_cas, 400_000, 10_000_000)
    return cas, acc, trunc_cas, trunc


def check_p1(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.schemes import predict

    cas, acc, tcas, trunc = _default_runs(ctx)
    rows = []
    for c, r, pol in ((cas, acc, "accumulate"), (tcas, trunc, "truncate")):
        pred = predict(c)
        zs = []
        for lp, ls in zip(pred.levels[1:], r.levels[1:], strict=True):
            zs.append(abs(ls.phi.value - lp.phi) / ls.phi.se if ls.phi.se > 0 else 0.0)
        phi_ok = max(zs) <= ROW_Z
        rows.append(ci_row(
            "P1", f"exact speedup, 4-level default cascade (mixed laws, affine costs), {pol}",
            pred.speedup, r.speedup,
            f"phi |z| max {max(zs):.2f}; {r.tokens} tokens", extra_ok=phi_ok))
    return rows


# per-round overheads o_i (docs/theory.md Part III-B, O1): a 3-level cascade with an overhead
# on both verifiers, a measured-table cost for the middle model and mixed laws
OVERHEAD_CASCADE = {
    "name": "overhead-3-level",
    "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.04}, "overhead": 0.15},
               {"name": "mid", "cost": {"table": [0.2, 0.21, 0.23, 0.26]}, "overhead": 0.05},
               {"name": "draft", "cost": 0.02}],
    "acceptance": [{"beta": [5.0, 1.5]}, {"positional": [0.85, 0.7, 0.6]}],
    "thresholds": [5, 3],
}


def check_p1_overhead(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.schemes import predict

    cas = Cascade.from_config(OVERHEAD_CASCADE)
    res = _length_run(ctx, "P1o", cas, 300_000, 8_000_000)
    pred = predict(cas)
    return [ci_row(
        "P1", "exact speedup with per-round overheads o_i (3 levels, table + affine costs)",
        pred.speedup, res.speedup, f"o = 0.15, 0.05; {res.tokens} tokens")]


def check_p2(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.bounds.tails import phi_bounds
    from polyspec_theory.schemes import predict

    cas, acc, _, _ = _default_runs(ctx)
    pred = predict(cas)
    rows = []
    for j in (1, 2):  # phi of mid (random blocks below) and small
        b = phi_bounds(pred.levels[j].emitted_pmf, cas.thresholds[j - 1])
        v, lo, hi = widen_ci(acc.levels[j].phi)
        exact = pred.levels[j].phi
        # the exact DP inside the Wald/Lorden bounds (the theorem), and the MC inside both
        in_bounds = b.contains(exact, rtol=1e-9)
        ok = (lo <= exact <= hi) and in_bounds and (hi >= b.lower) and (lo <= b.upper)
        rows.append(CheckRecord(
            "P2", f"theta/mu <= phi <= (theta-1+E[L^2]/mu)/mu for {cas.models[j].name}",
            f"[{fmt(b.lower)}, {fmt(b.upper)}] (exact {fmt(pred.levels[j].phi)})",
            f"{fmt(v)} ± {fmt(hi - v)}", ok, float(pred.levels[j].phi), float(v),
            (float(lo), float(hi)), "MC phi inside the bounds and equal to the exact DP"))
    return rows


def check_p3(ctx: VerifyContext) -> list[CheckRecord]:
    import jax
    import jax.numpy as jnp

    from polyspec_theory.bounds.tails import (
        exact_tail,
        forward_count_moments,
        hoeffding_tail,
        length_moments,
        target_forwards_clt,
    )
    from polyspec_theory.schemes import predict

    from .runtime import make_key, uniform_from_bits

    cas, acc, _, _ = _default_runs(ctx)
    pred = predict(cas)
    # (a) tail of N for the block fill of level 0 (rounds of S_2 = mid per target block)
    l_pmf = pred.levels[1].emitted_pmf
    theta = cas.thresholds[0]
    mu = length_moments(l_pmf)["mu"]
    k = int(math.ceil(theta / mu)) + 2
    n = ctx.size(400_000, 10_000_000)
    cdf = jnp.asarray(np.cumsum(l_pmf[1:]) / np.sum(l_pmf[1:]))
    u = uniform_from_bits(jax.random.bits(make_key(ctx.seed + 3), (n, theta), jnp.uint32))
    lengths = 1 + jnp.minimum(jnp.sum(cdf[None, None, :] <= u[..., None], axis=-1),
                              cdf.size - 1)
    s_k = jnp.sum(lengths[:, :k], axis=1)
    p_mc = float(jnp.mean(s_k < theta))  # P(N > k) = P(S_k < theta)
    se = math.sqrt(max(p_mc * (1 - p_mc), 1.0 / n) / n)
    exact = float(exact_tail(l_pmf, theta, k)[k])
    bound = float(hoeffding_tail(l_pmf, theta, k))
    # the bound must be Hoeffding's and no looser: its value from the law itself (lengths in
    # [1, ell], deviation eps = k mu - theta), computed here without polyspec_theory.bounds.tails
    lengths_support = np.flatnonzero(np.asarray(l_pmf) > 0)
    ell = int(lengths_support[-1])
    mu_law = float(np.dot(np.arange(len(l_pmf)), l_pmf) / np.sum(l_pmf))
    eps = k * mu_law - theta
    hoeffding = (math.exp(-2.0 * eps * eps / (k * (ell - 1) ** 2)) if ell > 1
                 else float(k < theta))  # ell = 1: N = theta exactly
    sharp = abs(bound / hoeffding - 1.0) <= 1e-9
    v, lo, hi = widen_ci(Est(p_mc, se))
    rows = [CheckRecord(
        "P3", f"P(N>{k}) <= Hoeffding exp(-2k(mu-theta/k)^2/(l-1)^2), theta={theta}",
        f"exact {fmt(exact)} <= bound {fmt(bound)}", f"{fmt(v)} ± {fmt(hi - v)}",
        bool(lo <= exact <= hi and lo <= bound and sharp), exact, v, (lo, hi),
        f"{n} block fills; Hoeffding's value from the law (ell={ell}) {fmt(hoeffding)}")]
    # (b) CLT: target forwards per chain = first passage of the top renewal process
    top = pred.levels[0].emitted_pmf
    target_tok = int(math.ceil(ctx.size(400_000, 10_000_000) / acc.chains))
    fwd = acc.chain_forwards[:, 0].astype(np.float64)  # rounds until >= target_tok tokens
    exact_m = forward_count_moments(top, target_tok)
    clt = target_forwards_clt(top, target_tok)
    kch = fwd.size
    var_mc = float(fwd.var(ddof=1))
    kurt = float(np.mean((fwd - fwd.mean()) ** 4)) / var_mc**2 if var_mc > 0 else 3.0
    se_var = var_mc * math.sqrt(max(kurt - 1.0, 0.1) / kch)
    rows.append(ci_row(
        "P3", f"Var(target forwards for {target_tok} tokens) ~ N sigma^2/mu^3 (renewal CLT)",
        clt["var"], Est(var_mc, se_var),
        f"exact Var {fmt(exact_m['var'])}; {kch} chains",
        extra_ok=abs(exact_m["var"] / clt["var"] - 1) < 0.05))
    return rows


def check_p4(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.bounds.approximation import identity_from_counts, paper_approximation
    from polyspec_theory.schemes import predict

    from .runtime import ratio_estimate

    cas, acc, _, _ = _default_runs(ctx)
    n = cas.n
    # (a) Lemma 3.1 with the Monte Carlo's forward counts F_1..F_{n-1} per chain, beta =
    # theta_{n-1} from the configuration and T_i = P1's expected forward time E[T_i(G_i + 1)]
    # (plus the per-round overhead o_i, counted in M_i's time; not the simulated times): by
    # Wald, E[formula] = E[simulated total time] exactly, so the ratio of the sums is 1 within
    # its Monte-Carlo interval.
    pred = predict(cas)
    t_p1 = [lv.forward_cost + lv.overhead for lv in pred.levels]
    beta = cas.thresholds[-1]
    fw = acc.chain_forwards
    ident = np.array([identity_from_counts(max(int(tok), 1), f[: n - 1], t_p1, beta=beta)
                      for tok, f in zip(acc.chain_tokens, fw, strict=True)])
    est = ratio_estimate(ident, acc.chain_time)
    beta_exact = bool(np.all(fw[:, n - 1] == beta * fw[:, n - 2]))
    rows = [ci_row(
        "P4", "Lemma 3.1 with the MC forward counts (L_i := N/F_i), beta = theta_{n-1} and "
        "P1's E[T_i(G_i+1)] = the simulated total time", 1.0, est,
        f"formula/simulated time; F_n = theta_{{n-1}} F_{{n-1}} on every chain: {beta_exact}; "
        f"{acc.tokens} tokens", extra_ok=beta_exact)]
    approx = paper_approximation(cas)
    tau = acc.time_per_token
    v, lo, hi = widen_ci(tau)
    mc_err = approx.time_per_token / v - 1.0
    lo_e, hi_e = approx.time_per_token / hi - 1.0, approx.time_per_token / lo - 1.0
    ok = lo_e <= approx.relative_error <= hi_e
    rows.append(CheckRecord(
        "P4", "paper's approximation (pairwise E[L_i], fixed blocks): relative error of tau",
        fmt(approx.relative_error), f"{fmt(mc_err)} ± {fmt((hi_e - lo_e) / 2)}", ok,
        approx.relative_error, mc_err, (lo_e, hi_e), "MC tau against the approximation"))
    return rows


# --- P5 insertion ----------------------------------------------------------------------------


def check_p5(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.core.config import Model
    from polyspec_theory.core.costs import CostCurve
    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.planning.insertion import insertion_decision

    base = Cascade.from_config({
        "models": [{"name": "target", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "draft", "cost": 0.01}],
        "acceptance": [{"alpha": 0.6}], "thresholds": [4]})
    rows = []
    for cost, au, al in ((0.1, 0.85, 0.7), (0.5, 0.7, 0.6)):
        d = insertion_decision(base, 0, Model("mid", CostCurve.constant(cost)),
                               IIDGeometric(au), IIDGeometric(al), (6, 3))
        r0 = _length_run(ctx, "P5base", d.cascade_without, 200_000, 4_000_000)
        r1 = _length_run(ctx, ("P5", cost), d.cascade_with, 200_000, 4_000_000)
        g = r0.time_per_token.value / r1.time_per_token.value - 1.0
        rel_se = math.hypot(r0.time_per_token.se / r0.time_per_token.value,
                            r1.time_per_token.se / r1.time_per_token.value)
        est = Est(g, (1 + g) * rel_se)
        v, lo, hi = widen_ci(est)
        sign_ok = (lo > 0) if d.helps else (hi < 0)
        rows.append(ci_row(
            "P5", f"insert M' (T'={cost}, alphas {au}/{al}) between target and draft: "
            f"{'helps' if d.helps else 'hurts'} (exact P1 decision)", d.relative_gain, est,
            "relative gain tau_without/tau_with - 1", extra_ok=sign_ok))
    return rows


# --- P6, P7 --------------------------------------------------------------------------------


def _cv_est(a_counts) -> Est:
    n, m1, m2, m3, m4 = _moments_from_counts(a_counts)
    var = m2 - m1 * m1
    sd = math.sqrt(var)
    cv = sd / m1
    # delta method for g(m1, m2) = sqrt(m2 - m1^2)/m1 from the raw sample moments
    d1 = -1.0 / sd - sd / m1**2
    d2 = 1.0 / (2 * sd * m1)
    v11, v22, v12 = m2 - m1 * m1, m4 - m2 * m2, m3 - m1 * m2
    se = math.sqrt(max(d1 * d1 * v11 + d2 * d2 * v22 + 2 * d1 * d2 * v12, 0.0) / n)
    return Est(cv, se)


def check_p6(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.bounds.stability import cv_accepted

    g = 6
    alphas = (0.5, 0.7, 0.9)
    ests, theory, oks = [], [], []
    for a in alphas:
        r = _length_run(ctx, ("P6", a), _dualistic(a, g, 0.05), 200_000, 4_000_000)
        cnt = r.levels[0].joint_hist[g][1:g + 2]
        e = _cv_est(cnt)
        t = cv_accepted(a, g)
        v, lo, hi = widen_ci(e)
        ests.append((v, lo, hi))
        theory.append(t)
        oks.append(lo <= t <= hi)
    decreasing = all(ests[i][1] > ests[i + 1][2] for i in range(len(ests) - 1))
    return [CheckRecord(
        "P6", f"CV(A) strictly decreasing in alpha (g={g}; alpha={', '.join(map(str, alphas))})",
        " > ".join(fmt(t) for t in theory),
        " > ".join(f"{fmt(v)}±{fmt(hi - v)}" for v, _, hi in ests),
        bool(all(oks) and decreasing), None, None, None,
        "each MC CV contains theory and the MC intervals are strictly ordered")]


def check_p7(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.bounds.stability import beta_heterogeneity_gap

    a, b, g = 3.0, 1.5, 6
    gap = beta_heterogeneity_gap(a, b, g)
    r = _length_run(ctx, "P7", _dualistic({"beta": [a, b]}, g, 0.05), 200_000, 4_000_000)
    est = r.levels[0].mean_emitted
    v, lo, hi = widen_ci(est)
    return [ci_row(
        "P7", f"alpha~Beta({a},{b}), g={g}: mixed E[L] >= iid E[L](mean alpha) "
        f"= {fmt(gap['iid'])}", gap["mixed"], est, "MC E[L] of the mixed law",
        extra_ok=lo > gap["iid"])]


# --- Y1–Y5 ---------------------------------------------------------------------------------


def _yin_pair():
    from polyspec_theory.yin.theorems import yin_demo_chain

    return yin_demo_chain(0)


def check_y(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.yin import theorems as yin
    from polyspec_theory.yin.markov import tv_distance

    from .yin_mc import simulate_markov, simulate_step, transition_chi2

    pair = _yin_pair()
    n = ctx.size(6_000, 100_000)
    rows = []
    y1 = yin.sd_expected_rejections(*pair, method="tv")
    r = simulate_markov(pair, n, seed=ctx.seed + 11)
    _, df, p = transition_chi2(r.transitions, pair.target)
    rows.append(ci_row(
        "Y1", "SD unbiased; E[N_rej] = sum_n E[TV(draft_n, target_n)] (7 states, T=50)", y1,
        r.mean_rejections, f"{n} sequences; unbiased chi2 p={p:.3g} (df {df})",
        extra_ok=p >= ROW_ALPHA))
    b = 0.6 * yin.sd_acceptance(pair.target, pair.draft)
    y2 = yin.y2_chain(*pair, b)
    r2 = simulate_markov(pair, n, seed=ctx.seed + 12, accept=b, resampling=y2.resampling)
    _, df2, p2 = transition_chi2(r2.transitions, pair.target)
    v, lo, hi = widen_ci(r2.mean_rejections)
    rows.append(ci_row(
        "Y2", "unbiased rule b = 0.6 b_SD rejects more than SD (>= Y1 sum)", y2.rejection,
        r2.mean_rejections, f"Y1 sum {fmt(y1)}; unbiased chi2 p={p2:.3g}",
        extra_ok=(p2 >= ROW_ALPHA) and lo > y1))
    M = 3
    for mode in ("sequences", "per_position"):
        y3 = yin.batch_expected_rejections(*pair, M, mode)
        lb = yin.batch_lower_bound(*pair, mode)
        r3 = simulate_markov(pair, n, seed=ctx.seed + 13, M=M, mode=mode)
        _, _, p3 = transition_chi2(r3.transitions, pair.target)
        rows.append(ci_row(
            "Y3", f"batch SD, M={M} ({mode}): unbiased, E[N_rej] = Y1 sum - improvement",
            y3, r3.mean_rejections, f"improvement {fmt(y1 - y3)}, M-free lower bound "
            f"{fmt(lb)}; chi2 p={p3:.3g}", extra_ok=p3 >= ROW_ALPHA))
    # Y4 / Y5 on one step (first position, state 0)
    t, d = pair.target[0, 0], pair.draft[0, 0]
    bsd = yin.sd_acceptance(t, d)
    lam = 0.5
    bo = bsd + lam * (1 - bsd)
    pstar = yin.optimal_resampling(t, d, bo)
    ns = ctx.size(400_000, 10_000_000)
    counts, rej = simulate_step(t, d, bo, pstar, ns, seed=ctx.seed + 14)
    out_law = yin.output_law(d, bo, pstar)
    plus = (d * bo - t) > 0  # where the output overshoots the target
    # Y4: Loss* = sum over the overshoot set of (out - target), estimated linearly
    freq_plus = counts[plus].sum() / ns
    loss_mc = freq_plus - t[plus].sum()
    se_l = math.sqrt(freq_plus * (1 - freq_plus) / ns)
    chi = stats.chisquare(counts[out_law > 0], ns * out_law[out_law > 0])
    rows.append(ci_row(
        "Y4", f"over-acceptance b = b_SD + {lam}(1-b_SD) with optimal P*: TV loss = "
        "sum (draft b - target)_+", yin.optimal_loss(t, d, bo), Est(loss_mc, se_l),
        f"output law chi2 p={chi.pvalue:.3g}", extra_ok=chi.pvalue >= ROW_ALPHA))
    # Y5: P(reject) + Loss* = TV on the same draws: Z = 1{reject} + 1{emitted in overshoot}
    # per draw Z = 1{reject} + 1{emitted in the overshoot set}: at most one of them is 1
    # (P* puts no mass on the overshoot set), so Z is Bernoulli
    z = (rej + counts[plus].sum()) / ns
    z_var = z * (1 - z)
    est5 = Est(z - t[plus].sum(), math.sqrt(z_var / ns))
    rows.append(ci_row(
        "Y5", "Pareto front: P(reject) + Loss*(b) = TV(draft, target)",
        float(tv_distance(d, t)), est5, f"P(reject) MC {fmt(rej / ns)}"))
    return rows


# --- F1, F2 (token level) --------------------------------------------------------------------


def _token_runs(ctx: VerifyContext):
    from .token import TokenModel, make_lms, simulate_tokens

    def run(bug):
        lms = make_lms(3, vocab=6, order=1, perturbation=0.7, seed=ctx.seed + 5)
        model = TokenModel.build(lms, [6, 2], bug=bug)
        return simulate_tokens(model, ctx.size(100_000, 2_000_000), seed=ctx.seed + 6,
                               chains=256)

    return (ctx.cached(("token", "none"), lambda: run("none")),
            ctx.cached(("token", "bug"), lambda: run("drafter_resample")))


def check_f(ctx: VerifyContext) -> list[CheckRecord]:
    from .token import f1_test

    ok_run, bug_run = _token_runs(ctx)
    f1 = f1_test(ok_run)
    fb = f1_test(bug_run)
    rows = [
        CheckRecord("F1", "lossless: emitted 3-grams follow the target (3-level cascade, "
                    "real speculative sampling)", f"chi2 df {f1.df}",
                    f"stat {f1.statistic:.1f}, p={f1.p_value:.3g}", f1.p_value >= ROW_ALPHA,
                    None, f1.p_value, None, f"{f1.n_tokens} tokens"),
        CheckRecord("F1", "planted bug (resample from the drafter on rejection) is detected",
                    f"p < {ROW_ALPHA:.0e}", f"stat {fb.statistic:.1f}, p={fb.p_value:.3g}",
                    fb.p_value < ROW_ALPHA, None, fb.p_value, None, f"{fb.n_tokens} tokens"),
    ]
    for i, gap in enumerate(ok_run.f2_gap):
        acc = ok_run.acceptance[i]
        exp = ok_run.expected_acceptance[i]
        est = Est(acc.value, gap.se)
        rows.append(ci_row(
            "F2", f"acceptance rate = E[1 - TV(p_{i + 1}, p_{i + 2})] over checked contexts "
            f"(pair {i})", exp, est, f"{int(ok_run.rounds[i])} rounds"))
    return rows


# --- B1, B2 (serving batches, docs/theory.md Part III-C) -----------------------------------------


def check_b(ctx: VerifyContext) -> list[CheckRecord]:
    from polyspec_theory.serving.batch import predict_batch

    from .serving import VERIFY_OVERHEAD, VERIFY_THREE_LEVEL, VERIFY_TWO_MODEL, simulate_serving

    rows = []
    specs = (("B1", VERIFY_TWO_MODEL, 32, "two models, roofline costs, b=32: P1 with T_i(b, .)"),
             ("B2", VERIFY_THREE_LEVEL, 8, "3-level lockstep batch b=8 (roofline, batch_table, "
              "plain costs): E[max_j N_j] and E[max_j G_j] synchronisation"),
             ("B2", DEFAULT_CASCADE, 16, "4-level default cascade, lockstep batch b=16 "
              "(batch-independent costs: the synchronisation alone)"),
             ("B2", VERIFY_OVERHEAD, 2, "two models, per-round target overhead o_1 = 0.5 "
              "(O1), lockstep batch b=2"))
    for k, (id_, cfg, b, what) in enumerate(specs):
        cas = Cascade.from_config(cfg)
        pr = predict_batch(cas, b)
        r = simulate_serving(cas, b, ctx.size(150_000, 3_000_000), seed=ctx.seed + 21 + k)
        zs = [abs(r.levels[j].phi_batch.value - pr.levels[j].phi_batch) / r.levels[j].phi_batch.se
              for j in range(1, cas.n - 1)]
        zs += [abs(r.levels[j].mean_max_block.value - pr.levels[j].mean_max_block)
               / r.levels[j].mean_max_block.se for j in range(cas.n - 1)
               if r.levels[j].mean_max_block.se > 0]
        zmax = max(zs, default=0.0)
        # Bonferroni inside the row too: 1 + len(zs) comparisons share the row's level
        z_row = float(stats.norm.isf(ROW_ALPHA / (2 * (1 + len(zs)))))
        z_unsync = abs(r.speedup.value - pr.speedup_unsynchronised) / r.speedup.se
        rows.append(ci_row(
            id_, f"exact batch speedup vs AR at the same batch, {what}", pr.speedup, r.speedup,
            f"phi_batch/E[max G] |z| max {zmax:.2f} (limit {z_row:.2f}); unsynchronised P1 "
            f"{fmt(pr.speedup_unsynchronised)} (|z| {z_unsync:.1f}); {r.tokens} tokens",
            extra_ok=zmax <= z_row, z=z_row))
    return rows
# the groups of rows, in table order; a simulator scheme with its own rows (a ``verify_key``
# and ``verify(ctx)``: simulators.schemes) adds its group after these
GROUPS: tuple[tuple[str, Callable[[VerifyContext], list[CheckRecord]]], ...] = (
    ("D", check_d),
    ("P1", check_p1),
    ("P1o", check_p1_overhead),
    ("P2", check_p2),
    ("P3", check_p3),
    ("P4", check_p4),
    ("P5", check_p5),
    ("P6", check_p6),
    ("P7", check_p7),
    ("Y", check_y),
    ("F", check_f),
    ("B", check_b),
    ("T", check_trees),
    ("A", check_schedules),
)
REGISTRY = GROUPS + tuple((s.verify_key, s.verify) for s in scheme_registry().values()
                          if hasattr(s, "verify"))


def run_checks(quick: bool = True, seed: int = 0, only=None, progress=None) -> list[CheckRecord]:
    """Run the registry (``only``: an iterable of registry keys) and return every row."""
    ctx = VerifyContext(quick=quick, seed=int(seed))
    rows: list[CheckRecord] = []
    items = [(k, f) for k, f in REGISTRY if only is None or k in set(only)]
    for i, (key, fn) in enumerate(items):
        rows.extend(fn(ctx))
        if progress is not None:
            progress(i + 1, len(items), key)
    if len(rows) > MAX_ROWS:
        raise RuntimeError(f"{len(rows)} rows exceed MAX_ROWS={MAX_ROWS}: raise it")
    ctx.cache.clear()
    return rows


def format_table(rows: list[CheckRecord]) -> str:
    """Plain-text table: id, statement, theory, MC estimate ± CI, pass/fail."""
    head = ("id", "statement", "theory", "MC estimate ± CI", "result")
    body = [(r.id, r.statement, r.theory, r.estimate, "pass" if r.passed else "FAIL")
            for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(4)]
    widths[1] = min(widths[1], 78)
    lines = []
    for row in [head, *body]:
        stmt = row[1] if len(row[1]) <= widths[1] else row[1][: widths[1] - 1] + "…"
        lines.append("  ".join([row[0].ljust(widths[0]), stmt.ljust(widths[1]),
                                row[2].ljust(widths[2]), row[3].ljust(widths[3]), row[4]]))
    lines.insert(1, "-" * len(lines[0]))
    n_fail = sum(not r.passed for r in rows)
    lines.append("")
    lines.append(
        f"{len(rows) - n_fail}/{len(rows)} passed. CIs at level 1 - {ROW_ALPHA:.0e} per row "
        f"(z = {ROW_Z:.2f}; Bonferroni over up to {MAX_ROWS} rows: family-wise false-failure "
        f"rate <= {FAMILY_ALPHA:.0e}).")
    return "\n".join(lines)


def context_departure(quick: bool = True, seed: int = 0) -> dict:
    """How far context-correlated acceptance departs from P1's independence assumption, on
    the verification's 3-level token cascade (see :func:`simulators.token.departure_from_p1`)."""
    from .token import departure_from_p1

    ctx = VerifyContext(quick=quick, seed=int(seed))
    ok_run, _ = _token_runs(ctx)
    return departure_from_p1(ok_run)
