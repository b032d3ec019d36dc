"""How sure a plan on traces is: an interval and ``probability_best`` per top candidate
(``polyspec plan --traces DIR --json``).

Each draw perturbs the planner's predicted speedup of every candidate by three independent
sources:

- **acceptance fit**: the prompts are resampled with replacement (every capture decodes the
  same prompts, so one resample applies to all captures), each pair's iid law refitted on
  the resampled rounds; the candidate's factor is P1 with those laws / P1 with the laws of
  all rounds (both iid, pool costs);
- **costs**: each model's in-cascade cost relative to the target's AR token is scaled by
  ``exp(N(0, s_m^2))``, ``s_m`` the spread (sd of log) over the profiled captures of its
  measured in-capture time per forward against its profile's, both relative to their AR
  time (the profile-to-capture drift that carried round 1's error,
  :mod:`validation.analysis.bias`), drawn per candidate (each capture drifts on its own);
  the target's ``T(1) = 1`` is the unit;
- **noise floor**: the measured speedup of a capture moves by ``exp(N(0, f^2))``, ``f`` the
  relative sd from an A/A check (:func:`noise_floor`), independently per candidate.

``probability_best`` = the fraction of draws where the candidate has the largest speedup;
``interval95`` = the 2.5 / 97.5 % quantiles of its draws; ``decision`` = ``"confident"``
when ``probability_best >= 0.9``, else ``"too close to call"``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from polyspec_theory import AcceptanceCounts, Cascade, CostCurve, IIDGeometric, Model, predict
from polyspec_theory.errors import PolyspecInputError, as_int, as_real

__all__ = ["noise_floor", "cost_spreads", "candidate_uncertainty", "plan_decisions",
           "CONFIDENT", "POOL_FILE_NOTE"]

CONFIDENT = 0.9


def noise_floor(captures) -> dict | None:
    """Relative sd of one capture's measured speedup from A/A captures (the same
    configuration captured repeatedly, interleaved): captures grouped by configuration
    (models, thresholds, temperature, structure); ``f = sqrt(pooled within-group variance of
    log speedup)``. ``None`` with no group of two or more."""
    groups: dict = {}
    for c in captures:
        key = (c.models, c.thresholds, c.temperature, c.top_k,
               str(c.cascade.get("trees")), str(c.cascade.get("schedules")))
        groups.setdefault(key, []).append(c)
    ss, dof, used = 0.0, 0, []
    for g in groups.values():
        if len(g) < 2:
            continue
        x = np.log([c.measured_speedup for c in g])
        ss += float(np.sum((x - x.mean()) ** 2))
        dof += len(g) - 1
        used.append({"configuration": g[0].name, "captures": [c.name for c in g],
                     "measured_speedup": [c.measured_speedup for c in g]})
    if not dof:
        return None
    f = math.sqrt(ss / dof)
    return {"relative_sd": f, "interval95_halfwidth": 1.96 * f, "dof": dof, "groups": used,
            "method": "pooled within-configuration sd of log measured speedup over A/A "
                      "captures (same configuration, interleaved)"}


def cost_spreads(captures, profiles) -> dict[str, float]:
    """Per model: sd of ``log((t_capture / t_profile) / (AR_capture / AR_profile))`` over the
    profiled captures (verifiers: per block length, weighted by rounds; the bottom model:
    its drafting forward); models with fewer than 3 values get the pooled sd."""
    vals: dict[str, list] = {}
    for c in captures:
        p = profiles.get(c.name)
        if p is None or c.structured or list(p.models) != list(c.models):
            continue
        ar = c.ar_time_per_token / p.ar_s
        for i, nm in enumerate(c.models):
            if i == c.n - 1:
                cnt = c.forward_count[i]
                if cnt and p.draft_s > 0:
                    vals.setdefault(nm, []).append(math.log(c.forward_s[i] / cnt / p.draft_s
                                                            / ar))
                continue
            r = c.rounds[i]
            mv = p.mean_verify(i)
            num = den = 0.0
            for g in np.unique(r.G):
                sel = r.G == g
                if int(g) in mv and mv[int(g)] > 0:
                    num += float(np.sum(r.verify_s[sel]))
                    den += float(sel.sum()) * mv[int(g)]
            if den > 0:
                vals.setdefault(nm, []).append(math.log(num / den / ar))
    allv = [v for x in vals.values() for v in x]
    pooled = float(np.std(allv, ddof=1)) if len(allv) >= 3 else 0.0
    return {nm: (float(np.std(v, ddof=1)) if len(v) >= 3 else pooled)
            for nm, v in vals.items()} | {"*": pooled}


def _pair_data(captures, pairs):
    """``{(v, d): (A, G, prompt)}`` pooled over captures."""
    out = {}
    for key in pairs:
        a, g, p = [], [], []
        for c in captures:
            for i in range(c.n - 1):
                if (c.models[i], c.models[i + 1]) == key:
                    r = c.rounds[i]
                    a.append(r.A)
                    g.append(r.G)
                    p.append(np.asarray(r.prompt, dtype=np.int64))
        if not a:
            raise PolyspecInputError("traces", f"no rounds of the pair {key[0]} <- {key[1]}")
        out[key] = (np.concatenate(a), np.concatenate(g), np.concatenate(p))
    return out


def _law(a, g, w):
    keep = w > 0
    rep = np.repeat(np.arange(a.size)[keep], w[keep])
    return IIDGeometric.fit(AcceptanceCounts.from_samples(a[rep], g[rep])).law


def candidate_uncertainty(pool, candidates, captures, *, spreads=None, floor: float = 0.0,
                          n_draws: int = 400, seed: int = 0) -> list[dict]:
    """Per candidate ``(chain, thresholds, speedup)`` (the planner's, best first):
    ``interval95``, ``probability_best``, ``decision`` and the sd of log speedup from each
    source (module docstring). ``spreads``: :func:`cost_spreads` (none: no cost
    uncertainty); ``floor``: the A/A relative sd."""
    n_draws = as_int(n_draws, "n_draws", low=10)
    floor = as_real(floor, "noise_floor", low=0.0)
    if not candidates:
        raise PolyspecInputError("candidates", "need at least one")
    spreads = dict(spreads or {})
    rng = np.random.default_rng(as_int(seed, "seed", low=0))
    pairs = sorted({(ch[k], ch[k + 1]) for ch, _, _ in candidates for k in range(len(ch) - 1)})
    data = _pair_data(captures, pairs)
    prompts = np.unique(np.concatenate([d[2] for d in data.values()]))
    names = sorted({nm for ch, _, _ in candidates for nm in ch})
    m_max = max(max(th) for _, th, _ in candidates) + 2
    ms = np.arange(1, m_max + 1)
    base_tab = {nm: np.asarray(pool.model(nm).cost(ms), dtype=np.float64) for nm in names}

    def speedup(j, laws, scale):
        ch, th, _ = candidates[j]
        models = []
        for k, nm in enumerate(ch):
            t = base_tab[nm] * scale.get(nm, 1.0)
            if k == 0:
                t[0] = base_tab[nm][0]
            models.append(Model(nm, CostCurve.from_table([float(x) for x in t])))
        lw = tuple(laws[(ch[k], ch[k + 1])] for k in range(len(ch) - 1))
        return predict(Cascade(tuple(models), lw, tuple(th), pool.policy)).speedup

    ones = {key: np.ones(d[0].size, dtype=np.int64) for key, d in data.items()}
    base_laws = {key: _law(*data[key][:2], ones[key]) for key in pairs}
    k = len(candidates)
    s0 = np.asarray([speedup(j, base_laws, {}) for j in range(k)])
    logs = {"acceptance": np.zeros((n_draws, k)), "costs": np.zeros((n_draws, k)),
            "noise_floor": np.zeros((n_draws, k))}
    acceptance = {}  # per resample of the prompts (its counts): the candidates' log ratios
    for b in range(n_draws):
        mult = np.bincount(np.searchsorted(prompts, rng.choice(prompts, prompts.size)),
                           minlength=prompts.size)
        if mult.tobytes() not in acceptance:  # the same counts give the same laws
            laws = {key: _law(d[0], d[1], mult[np.searchsorted(prompts, d[2])])
                    for key, d in data.items()}
            acceptance[mult.tobytes()] = [math.log(speedup(j, laws, {}) / s0[j])
                                          for j in range(k)]
        for j in range(k):
            logs["acceptance"][b, j] = acceptance[mult.tobytes()][j]
            # each candidate's capture drifts on its own (the spreads are capture-to-capture)
            scale = {nm: math.exp(rng.normal(0.0, spreads.get(nm, spreads.get("*", 0.0))))
                     for nm in candidates[j][0]}
            # no drift drawn (every spread 0): the very cascade of s0, log ratio 0 exactly
            if any(x != 1.0 for x in scale.values()):
                logs["costs"][b, j] = math.log(speedup(j, base_laws, scale) / s0[j])
        logs["noise_floor"][b] = rng.normal(0.0, floor, size=k)
    total = sum(logs.values())
    draws = np.asarray([s for _, _, s in candidates]) * np.exp(total)
    best = np.bincount(np.argmax(draws, axis=1), minlength=k) / n_draws
    out = []
    for j, (ch, th, s) in enumerate(candidates):
        lo, hi = np.quantile(draws[:, j], [0.025, 0.975])
        out.append({"chain": list(ch), "thresholds": list(th), "speedup": float(s),
                    "interval95": [float(lo), float(hi)], "probability_best": float(best[j]),
                    "decision": "confident" if best[j] >= CONFIDENT else "too close to call",
                    "log_sd": {src: float(np.std(v[:, j])) for src, v in logs.items()}})
    return out


POOL_FILE_NOTE = ("a pool file's laws and costs are fixed numbers: the plan carries no "
                  "acceptance, cost or measurement uncertainty unless the file states one, so no "
                  "interval or probability_best is given")


class Draws(NamedTuple):
    """The Monte-Carlo draws of :func:`candidate_uncertainty`: how many, from which seed."""

    n: int = 400
    seed: int = 0


def plan_decisions(result, pool, captures, profiles, aa_captures=(), *, temperature=None,
                   top: int = 5, draws: Draws | None = None) -> dict:
    """``{"candidates": [...], "noise_floor": ..., "notes": [...]}`` for the best plan and
    its alternatives (at most ``top`` in all) of ``result`` on ``pool``, built from
    ``captures`` at ``temperature`` (:func:`candidate_uncertainty` with ``draws``)."""
    n_draws, seed = draws or Draws()
    cands = [(tuple(result.best.chain), tuple(result.best.thresholds), result.best.speedup)]
    cands += [(tuple(a.chain), tuple(a.thresholds), a.speedup) for a in result.alternatives]
    cands = cands[:max(1, as_int(top, "top", low=1))]
    nf = noise_floor(aa_captures) if aa_captures else None
    notes = []
    if nf is None:
        notes.append("no A/A captures (DIR/aa/): the noise floor is not included")
    used = [c for c in captures if temperature is None or c.temperature == temperature]
    spreads = cost_spreads(used, profiles)
    out = candidate_uncertainty(pool, cands, used, spreads=spreads,
                                floor=0.0 if nf is None else nf["relative_sd"],
                                n_draws=n_draws, seed=seed)
    return {"candidates": out, "noise_floor": nf, "cost_spread": spreads,
            "n_draws": n_draws, "seed": seed, "notes": notes}

