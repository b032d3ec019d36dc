"""Acceptance from another log of the same pair (validation/hardware/acceptance.py): the draft
length a log's engine ran with is recovered from rows made by the iid PEARL chain at a known
draft length; a row is never its own source; the chain inversion of EAGLE's accept length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes.pearl import RunAcceptance, pearl_horizon
from validation.hardware.acceptance import (
    AcceptanceLog,
    alpha_for_chain,
    alpha_for_tokens,
    alphas_for_tokens,
    implied_gamma,
    implied_gammas,
)
from validation.hardware.methods import pearl_counts, pearl_counts_many
from validation.hardware.rows import parse_row


def _row(i, alpha, gamma, dataset="A", batch=1, target="org/T", drafter="org/D"):
    steps = 100
    tps = pearl_counts(alpha, gamma, steps)[0] / steps
    d = {"id": f"r{i}", "gpu": "H200", "engine": "nano-PEARL", "method": "pearl",
         "target": target, "drafter": drafter, "batch": batch, "dataset": dataset,
         "prompt_len": 100, "steps": steps, "ar_gen_len": 200, "tokens_per_step": tps,
         "mat": 1.0 / (1.0 - alpha)}
    return parse_row(d, i, keep_measured=True)


@pytest.mark.parametrize("gamma", [3, 5, 8, 11])
def test_implied_gamma_recovers_the_draft_length(gamma):
    rows = [_row(i, a, gamma, dataset=str(i)) for i, a in enumerate((0.7, 0.85, 0.93, 0.96))]
    g, err = implied_gamma(rows)
    assert g == gamma and err < 1e-6


def test_implied_gammas_side_by_side_are_each_alone():
    """implied_gammas of several pairs (their rows side by side per draft length) gives each
    pair's implied_gamma, float for float, each computed alone here; a pair without a usable
    row is refused."""
    from validation.hardware import methods

    pairs = [[_row(i, a, gamma, dataset=str(i)) for i, a in enumerate(alphas)]
             for gamma, alphas in ((4, (0.6, 0.8)), (9, (0.75, 0.9, 0.95)), (6, (0.5,)))]
    pairs[1][0].measured["tokens_per_step"] *= 1.01  # an error that is not 0
    together = implied_gammas(pairs, range(1, 13))
    alone = []
    for rows in pairs:
        methods._COUNTS.clear()  # computed alone, not remembered from the run side by side
        alone.append(implied_gamma(rows, range(1, 13)))
    assert together == alone
    assert [g for g, _ in together] == [4, 9, 6] and together[1][1] > 1e-4
    for r in pairs[2]:
        del r.measured["mat"]
    with pytest.raises(PolyspecInputError, match="^rows"):
        implied_gammas(pairs)


def test_prefetch_leaves_alpha_nothing_to_compute(monkeypatch):
    """AcceptanceLog.prefetch computes (side by side) the alphas that alpha() then pools for
    the same asks: no PL3 recursion is left for alpha(), whose estimates are those of a log
    that was never prefetched."""
    import polyspec_theory.schemes.pearl as pearl
    from validation.hardware import acceptance

    rows = [_row(i, a, g, dataset=d, batch=b) for i, (a, g, d, b) in enumerate(
        [(0.9, 6, "A", 1), (0.8, 6, "A", 8), (0.7, 6, "A", 8), (0.6, 9, "B", 1),
         (0.85, 9, "B", 1), (0.75, 4, "C", 2)])]
    gammas = {r.id: g for r, g in zip(rows, (6, 6, 6, 9, 9, 4), strict=True)}
    log = AcceptanceLog(rows, "test")
    asks = [("T", "D", "A", "r1", 8), ("T", "D", "B", None, None), ("T", "D", "C", None, 2)]

    def estimates():
        return [log.alpha(t, d, ds, gamma_of=lambda r: gammas[r.id], exclude=ex, batch=b)
                .to_dict() for t, d, ds, ex, b in asks]

    acceptance._ALPHAS.clear()
    plain = estimates()
    acceptance._ALPHAS.clear()
    log.prefetch(asks, gamma_of=lambda r: gammas[r.id])
    recursions = []
    run = pearl._horizon_group
    monkeypatch.setattr(pearl, "_horizon_group", lambda *a: recursions.append(a) or run(*a))
    assert estimates() == plain and recursions == []


def test_log_alpha_excludes_the_row_and_prefers_its_batch():
    rows = [_row(0, 0.9, 6, batch=1), _row(1, 0.8, 6, batch=8), _row(2, 0.7, 6, batch=32),
            _row(3, 0.5, 6, dataset="B")]
    log = AcceptanceLog(rows, "test")
    est = log.alpha("T", "D", "A", gamma_of=lambda r: 6, exclude="r1", batch=8)
    assert sorted(est.sources) == ["r0", "r2"]  # r1 excluded, so no row at batch 8
    assert est.alpha == pytest.approx((0.9 + 0.7) / 2, abs=1e-6)
    est = log.alpha("T", "D", "A", gamma_of=lambda r: 6, batch=32)
    assert est.sources == ["r2"] and est.alpha == pytest.approx(0.7, abs=1e-6)
    assert log.alpha("T", "D", "C", gamma_of=lambda r: 6) is None
    assert log.alpha("T", "other", "A", gamma_of=lambda r: 6) is None
    # the wrong draft length gives another alpha: the log's engine's gamma matters
    longer = log.alpha("T", "D", "A", gamma_of=lambda r: 9, batch=1)
    assert longer.alpha < 0.9 - 1e-3
    # tokens per step a shorter draft length cannot give: no estimate
    assert log.alpha("T", "D", "A", gamma_of=lambda r: 3, batch=1) is None


@given(alpha=st.floats(0.0, 0.99), d=st.integers(1, 12))
def test_alpha_for_chain_inverts(alpha, d):
    length = sum(alpha**i for i in range(d + 1))
    assert alpha_for_chain(length, d) == pytest.approx(alpha, abs=1e-6)


def test_alpha_for_chain_refuses_impossible_lengths():
    with pytest.raises(PolyspecInputError, match="accept_length"):
        alpha_for_chain(5.0, 3)


@settings(max_examples=25, deadline=None)
@given(alpha=st.floats(0.01, 0.99), gamma=st.integers(2, 16), steps=st.integers(1, 200))
def test_alpha_for_tokens_inverts(alpha, gamma, steps):
    t = pearl_counts(alpha, gamma, steps)[0] / steps
    assert alpha_for_tokens(t, gamma, steps) == pytest.approx(alpha, abs=1e-6)


def test_alpha_for_tokens_refuses_the_impossible():
    with pytest.raises(PolyspecInputError, match="tokens_per_step"):
        alpha_for_tokens(9.0, 8, 100)  # above gamma
    with pytest.raises(PolyspecInputError, match="tokens_per_step"):
        alpha_for_tokens(0.5, 8, 100)  # below one per step


def _alpha_for_tokens_before(t, gamma, steps):
    """The bisection as it ran before issue 41: one PL3 recursion per halving."""
    lo, hi = 0.0, 1.0
    for _ in range(48):
        mid = 0.5 * (lo + hi)
        if pearl_counts(mid, gamma, steps)[0] / steps < t:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@settings(max_examples=15, deadline=None)
@given(u=st.floats(0.0, 1.0), gamma=st.integers(1, 12), steps=st.integers(1, 150))
def test_alpha_for_tokens_is_the_bisection_before(u, gamma, steps):
    """Halvings computed three at a time (issue 41) end on the very float of the one-by-one
    bisection, anywhere in what PEARL can give (both ends included)."""
    lo, hi = (pearl_counts(a, gamma, steps)[0] / steps for a in (0.0, 1.0))
    t = lo + u * (hi - lo)
    assert alpha_for_tokens(t, gamma, steps) == _alpha_for_tokens_before(t, gamma, steps)


@settings(max_examples=10, deadline=None)
@given(us=st.lists(st.floats(-0.2, 1.2), min_size=1, max_size=6),
       gamma=st.integers(1, 12), steps=st.integers(1, 150))
def test_bisections_side_by_side_are_the_bisection_before(us, gamma, steps):
    """alphas_for_tokens (the bisections side by side, repeats included) ends each on the very
    float of the one-by-one bisection, in the order asked; None where it is refused (outside
    what PEARL can give), as alpha_for_tokens refuses it."""
    from validation.hardware import acceptance

    acceptance._ALPHAS.clear()  # computed here, not remembered from another test
    lo, hi = (pearl_counts(a, gamma, steps)[0] / steps for a in (0.0, 1.0))
    ts = [lo + u * (hi - lo) for u in us] + [lo + us[0] * (hi - lo)]
    want = [_alpha_for_tokens_before(t, gamma, steps) if lo <= t <= hi else None for t in ts]
    assert alphas_for_tokens(ts, gamma, steps) == want
    for t, w in zip(ts, want, strict=True):
        if w is None:
            with pytest.raises(PolyspecInputError, match="tokens_per_step"):
                alpha_for_tokens(t, gamma, steps)


@settings(max_examples=15, deadline=None)
@given(alphas=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
       gamma=st.integers(1, 12), steps=st.integers(1, 150), keep=st.booleans())
def test_counts_side_by_side_are_the_counts_alone(alphas, gamma, steps, keep):
    """pearl_counts_many (repeats, kept or not) gives each alpha's pearl_counts float for
    float, in the order asked."""
    got = pearl_counts_many(alphas, gamma, steps, keep=keep)
    alone = [pearl_horizon(RunAcceptance((), float(a)), gamma, [0.0, 0.0], steps)
             for a in alphas]
    assert got == [(h.counted, tuple(h.post_by_step[:steps])) for h in alone]
