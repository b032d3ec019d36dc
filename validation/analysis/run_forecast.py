"""R1-R3 (docs/theory.md Part III-E) in the forecasts of our own greedy captures.

At ``T = 0`` the drafter's agreement with the target is a function of the output position,
so a fully accepted round carries its run into the next one and a per-round law fitted where
rounds check 8 drafts misstates rounds that check 2. With ``acceptance="run-law"``
(:func:`validation.analysis.forecast.forecast`) a two-level chain at ``T = 0`` is forecast
with R1 (:func:`polyspec_theory.core.runs.sync_two_level`, P1's round: our decoder never
re-checks the bonus position) and the run law fitted per prompt on every top-pair round of
the other captures (:func:`polyspec_theory.core.runs.fit_run_law_hidden`: R2 with the entry
age after a full round hidden; the fresh rounds alone, ``p1_exposures``, see no age past the
largest block, and R1 with their extrapolated tail over-counts the target's forwards by
4-20 % in-sample) -- unless R3 (``geometric_lr_test`` on the fresh rounds, pooled over
prompts) accepts independent rounds, where the per-round law stays.

Only the target's pair qualifies: its verifier's prefix is the target's output, so its
agreements are a function of the output position; a lower pair verifies on a prefix that
holds unverified drafts. R1 is exact for two levels only; cascades of three or more models
keep the per-round law (P1 with the forward-count factors of
:func:`validation.analysis.forecast.count_factors`).
"""

from __future__ import annotations

import numpy as np

from polyspec_theory.core.runs import (
    INDEPENDENCE_LEVEL,
    fit_run_law_hidden,
    fit_run_laws_hidden,
    geometric_lr_test,
    p1_exposures,
    sync_two_level,
)

TOL = 1e-7  # EM's relative log-likelihood tolerance (fit_run_law_hidden)

__all__ = ["top_pair_rounds", "run_law_decision", "prompt_run_laws", "r1_tokens_per_round"]


def top_pair_rounds(captures, key, prompt: int | None = None) -> list[list[tuple[int, int]]]:
    """Per capture and prompt, in order, the ``(G, A)`` rounds of pair ``key`` =
    (verifier, drafter, temperature, top_k) where it is the target's pair (index 0);
    only ``prompt`` if given."""
    out = []
    for c in captures:
        if c.structured or c.n < 2 or c.pair_key(0) != key:
            continue
        r = c.rounds[0]
        for p in np.unique(r.prompt):
            if prompt is not None and int(p) != int(prompt):
                continue
            m = r.prompt == p
            out.append(list(zip(r.G[m].tolist(), r.A[m].tolist(), strict=True)))
    return out


def run_law_decision(captures, key) -> dict | None:
    """R3 on the target pair's rounds of ``captures`` (R2's exposures of P1's rounds, pooled
    over prompts): ``{"independent", "p_value", "statistic", "df", "rounds"}``; ``None``
    when no capture has ``key`` as its target pair or no round enters from age 0."""
    prompts = top_pair_rounds(captures, key)
    if not prompts:
        return None
    exp = p1_exposures(prompts)
    if exp[0].size == 0:
        return None
    lr = geometric_lr_test(*exp)
    return {"independent": bool(lr["p_value"] >= INDEPENDENCE_LEVEL),
            "p_value": lr["p_value"], "statistic": lr["statistic"], "df": lr["df"],
            "rounds": int(exp[0].size), "level": INDEPENDENCE_LEVEL}


def prompt_run_laws(captures, key, prompts) -> tuple[dict, list[str]]:
    """R2 per prompt: ``{prompt: RunLaw}`` fitted on that prompt's target-pair rounds of
    ``captures``, every round (:func:`fit_run_law_hidden`: the entry age after a full
    round is hidden, so runs carried over full rounds count); a prompt without such rounds
    takes the law pooled over every prompt (and a note says so)."""
    pooled = None
    laws, notes, own = {}, [], {}
    for p in prompts:
        rounds = [r for r in top_pair_rounds(captures, key, p) if r]
        if rounds:
            own[p] = rounds
            continue
        if pooled is None:
            pooled = fit_run_law_hidden(top_pair_rounds(captures, key), tol=TOL)
        notes.append(f"prompt {p}: no rounds of {key[0]} <- {key[1]}; pooled run law used")
        laws[p] = pooled
    # one EM per prompt, run side by side (the same laws as one call per prompt)
    laws.update(zip(own, fit_run_laws_hidden(list(own.values()), tol=TOL), strict=True))
    return {p: laws[p] for p in prompts}, notes


def r1_tokens_per_round(law, theta: int) -> float:
    """R1's long-run tokens per round of a two-level chain with ``theta`` drafts a round
    under P1's round (the bonus position never re-checked); cost-free: tokens only."""
    return float(sync_two_level(law, int(theta), 1.0, lambda _m: 1.0)["tokens_per_round"])
