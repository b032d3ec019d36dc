"""Fit the engine correction (docs/theory.md HW2) on measured GPU tables.

Three kinds of evidence, all from the nano-PEARL H200 table's measured fields:

1. **Autoregressive runs** (``ar_time_s / n_batches``: one prefill + ``ar_gen_len - 1``
   decode steps of the target at each batch size): linear in the parameters,
   ``T = kernel_scale * A + n_forwards * per_forward_ms + [TP > 1] (n_forwards *
   per_forward_tp_ms + n_sequence_forwards * per_sequence_ms)`` with ``A`` the database's
   kernels of the run.
2. **The draft length each process chose** (start-up rule, batch 1): the ``gamma`` implied by a
   pair's ``mat`` and ``tokens_per_step`` (:func:`validation.hardware.acceptance.implied_gamma`)
   must be ``T_target(1) / T_drafter(1)``: one linear equation per pair,
   ``T_target(1) - gamma * T_drafter(1) = 0``. This is what separates the TP-1 drafters' host
   time from the TP-2 targets'.
3. **PEARL runs** (``sd_time_s / n_batches``): with the other parameters fixed, the host time
   per packed token and the handshake per step minimise the squared relative errors of the
   PEARL batches (acceptance from each row's own ``tokens_per_step``: the fit prices costs,
   the acceptance is data).

Stages 1-2 are one bounded linear least-squares problem in relative error (each equation
divided by its measured, or target, time); stage 3 a two-parameter search. Standard errors: a
bootstrap over the evidence (autoregressive cells, pairs, PEARL rows; fixed seed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polyspec_theory.errors import PolyspecInputError
from validation.hardware import methods
from validation.hardware.acceptance import implied_gammas
from validation.hardware.engines import PARAMETERS, Corrections, engine_model
from validation.hardware.rows import Row, read_measured

__all__ = ["TABLES", "default_table", "load_rows", "FitEvidence", "fit", "fit_bootstrap",
           "load_corrections", "CORRECTIONS_FILE", "GAMMA_WEIGHT"]

TABLES = Path(__file__).resolve().parents[2] / "data" / "gpu-tables"
CORRECTIONS_FILE = Path(__file__).resolve().parent / "corrections.json"
GAMMA_WEIGHT = 4.0  # a pair's start-up equation counts as this many autoregressive cells
BOUNDS = ((0.5, 0.0, 0.0, 0.0), (2.0, 50.0, 50.0, 5.0))
STAGE3_BOUNDS = ((0.0, 1.0), (0.0, 50.0))  # per_sample_ms, handshake_ms


def default_table() -> Path:
    return TABLES / "nanopearl_h200.json"


def load_rows(path=None) -> list[Row]:
    rows, refused = read_measured(path or default_table(), "table")
    if refused:
        raise PolyspecInputError("table", f"{len(refused)} row(s) unreadable, first: "
                                 f"{refused[0].id}: {refused[0].reason}")
    return [r for r in rows if r.method == "pearl"]


def _bare(row: Row):
    none = Corrections.none()
    t = engine_model(row.pair[0], row.gpu, row.engine, row.tp_target, none)
    d = engine_model(row.pair[1], row.gpu, row.engine, row.tp_drafter, none)
    return t, d


def _cached(row: Row) -> int:
    return methods.shared_prefix_cached(row.settings, row.prompt_len, row.batch)


@dataclass
class FitEvidence:
    """The linear system's rows, precomputed once (the database part does not depend on the
    parameters)."""

    ar: list      # (row id, cell key, [A, n_fwd, n_fwd*tp>1, n_tok], measured ms)
    gamma: list   # (pair key, [coefficients], scale, gamma)
    pearl: list   # rows


def evidence(rows: list[Row]) -> FitEvidence:
    ar, seen = [], set()
    for r in rows:
        t, _ = _bare(r)
        n = r.get("ar_gen_len")
        run = methods.ar_run(t, r.batch, r.prompt_len, n, cached=_cached(r))
        b = r.batch
        tp = 1.0 if (r.tp_target or 1) > 1 else 0.0
        meas = 1e3 * r.measured["ar_time_s"] / r.get("n_batches")
        ar.append((r.id, (r.pair[0], r.batch, r.dataset), [run.ms, n, n * tp, n * b * tp], meas))
        seen.add(r.pair)
    gamma = []
    by_pair = [[r for r in rows if r.pair == pair] for pair in sorted(seen)]
    for pair, prs, (g, _err) in zip(sorted(seen), by_pair, implied_gammas(by_pair),
                                    strict=True):
        t, d = _bare(prs[0])
        dt, dd = (x.decode(1, methods.PROFILE_CONTEXT) for x in (t, d))
        tpt = 1.0 if (prs[0].tp_target or 1) > 1 else 0.0
        tpd = 1.0 if (prs[0].tp_drafter or 1) > 1 else 0.0
        gamma.append((pair, [dt - g * dd, 1.0 - g, tpt - g * tpd, tpt - g * tpd], dt, g))
    return FitEvidence(ar, gamma, list(rows))


def _solve(ev: FitEvidence, ar_idx, gamma_idx) -> np.ndarray:
    from scipy.optimize import lsq_linear  # scipy loads with a fit, not with load_corrections

    A, y = [], []
    for i in ar_idx:
        _rid, _cell, coef, meas = ev.ar[i]
        A.append(np.array(coef) / meas)
        y.append(1.0)
    for j in gamma_idx:
        _pair, coef, scale, _g = ev.gamma[j]
        w = np.sqrt(GAMMA_WEIGHT)
        A.append(w * np.array(coef) / scale)
        y.append(0.0)
    res = lsq_linear(np.array(A), np.array(y), bounds=BOUNDS, method="bvls")
    return res.x


def _pearl_parts(ev: FitEvidence, theta) -> list:
    """Per PEARL row, at stage-1 parameters ``theta``: (prefill ms, steps, PEARL terms,
    measured ms), or ``None`` where the chain cannot give the row's tokens per step."""
    from validation.hardware.acceptance import alphas_for_tokens

    c = Corrections(*theta)
    models, groups = [], {}  # per row (t, d, gamma, steps); rows by (gamma, steps)
    for i, r in enumerate(ev.pearl):
        t = engine_model(r.pair[0], r.gpu, r.engine, r.tp_target, c)
        d = engine_model(r.pair[1], r.gpu, r.engine, r.tp_drafter, c)
        g, steps = methods.pearl_gamma(t, d), r.get("steps")
        models.append((t, d, g, steps))
        groups.setdefault((g, steps), []).append(i)
    alphas = [None] * len(ev.pearl)
    for (g, steps), idx in groups.items():  # the rows of one (gamma, steps) side by side
        try:
            found = alphas_for_tokens([ev.pearl[i].measured["tokens_per_step"] for i in idx],
                                      g, steps)
        except PolyspecInputError:
            continue
        for i, a in zip(idx, found, strict=True):
            alphas[i] = a
    out = []
    for r, (t, d, g, steps), alpha in zip(ev.pearl, models, alphas, strict=True):
        if alpha is None:  # the chain cannot give the row's tokens per step
            out.append(None)
            continue
        terms = methods.pearl_terms(t, d, r.batch, r.prompt_len, steps, alpha, g)
        cached = _cached(r)
        pre = max(t.prefill(r.batch, r.prompt_len, cached),
                  d.prefill(r.batch, r.prompt_len, cached))
        out.append((pre, steps, terms, 1e3 * r.measured["sd_time_s"] / r.get("n_batches")))
    return out


def _stage3(parts: list, idx, start=(0.0, 0.0)) -> np.ndarray:
    """``(per_sample_ms, handshake_ms)`` minimising the PEARL rows' squared relative errors
    (bounded below at 0; derivative-free: the step is a maximum of two branches)."""
    from scipy.optimize import minimize

    rows = [parts[i] for i in idx if parts[i] is not None]

    def loss(x):
        return float(sum(((pre + steps * terms.step_ms(x[0], x[1])) / meas - 1.0) ** 2
                         for pre, steps, terms, meas in rows))

    res = minimize(loss, np.array(start, dtype=float), method="Powell",
                   bounds=STAGE3_BOUNDS, options={"xtol": 1e-5, "ftol": 1e-10})
    return np.clip(res.x, [lo for lo, _ in STAGE3_BOUNDS], [hi for _, hi in STAGE3_BOUNDS])


def fit(rows: list[Row] | None = None, *, ev: FitEvidence | None = None,
        fitted_on: str | None = None) -> Corrections:
    """Point estimates of the five parameters from ``rows`` (default: the committed table)."""
    rows = load_rows() if rows is None and ev is None else rows
    ev = ev or evidence(rows)
    theta = _solve(ev, range(len(ev.ar)), range(len(ev.gamma)))
    sample, h = _stage3(_pearl_parts(ev, theta), range(len(ev.pearl)))
    return Corrections(*map(float, theta), per_sample_ms=float(sample), handshake_ms=float(h),
                       fitted_on=fitted_on or _describe(ev))


def _describe(ev: FitEvidence) -> str:
    gpus = sorted({r.gpu for r in ev.pearl})
    cells = len({cell for _i, cell, _c, _m in ev.ar})
    return (f"{len(ev.pearl)} nano-PEARL rows on {', '.join(gpus)}: {cells} autoregressive "
            f"cells, {len(ev.gamma)} start-up draft lengths, {len(ev.pearl)} PEARL runs")


def fit_bootstrap(rows: list[Row] | None = None, *, replicates: int = 100,
                  seed: int = 0) -> Corrections:
    """:func:`fit` with a bootstrap standard error per parameter (autoregressive cells, pairs
    and PEARL rows resampled with replacement; ``seed`` fixed)."""
    rows = load_rows() if rows is None else rows
    ev = evidence(rows)
    point = fit(ev=ev)
    rng = np.random.default_rng(seed)
    cells = sorted({cell for _i, cell, _c, _m in ev.ar})
    by_cell = {c: [i for i, a in enumerate(ev.ar) if a[1] == c] for c in cells}
    draws = []
    for _ in range(replicates):
        pick = rng.integers(0, len(cells), len(cells))
        ar_idx = [i for k in pick for i in by_cell[cells[k]]]
        gamma_idx = list(rng.integers(0, len(ev.gamma), len(ev.gamma)))
        theta = _solve(ev, ar_idx, gamma_idx)
        pearl_idx = list(rng.integers(0, len(ev.pearl), len(ev.pearl)))
        extra = _stage3(_pearl_parts(ev, theta), pearl_idx,
                        start=(point.per_sample_ms, point.handshake_ms))
        draws.append([*theta, *extra])
    sd = np.std(np.array(draws), axis=0, ddof=1)
    return Corrections(**{k: getattr(point, k) for k in PARAMETERS},
                       stderr={k: float(s) for k, s in zip(PARAMETERS, sd, strict=True)},
                       fitted_on=point.fitted_on + f"; standard errors from {replicates} "
                       f"bootstrap replicates (seed {seed})")


def ssd_table() -> Path:
    return TABLES / "ssd_h100.json"


def fit_async(c: Corrections, rows: list[Row], log) -> Corrections:
    """SSD's asynchronous speculation parameters on top of ``c`` (docs/theory.md HW2):
    ``spec_forward_ms`` and ``spec_branch_ms`` by least squares on the async rows' measured
    draft step (``avg_draft_step_ms = k * speculate(b, (k+1) f)``), then ``rank_coverage``
    by a bounded one-dimensional search on the async rows' measured speedups (acceptance from
    ``log``, the nano-PEARL table: another log of the same pairs)."""
    from dataclasses import replace

    from scipy.optimize import minimize_scalar

    from validation.hardware.forecast import forecast_row, load_interval_or_none

    asy = [r for r in rows if r.method == "ssd-async"]
    A, y = [], []
    for r in asy:
        ms = r.measured.get("avg_draft_step_ms")
        if not ms:
            continue
        k, f = r.get("k"), r.get("fan_out")
        d = engine_model(r.pair[1], r.gpu, r.engine, r.tp_drafter, c)
        x = r.batch * (k + 1) * f
        out = r.get("output_len")
        kern = methods.simpson(lambda s, d=d, x=x: d.kernels_ms(x, 1, s, "packed"),
                               r.prompt_len + 1, r.prompt_len + out)
        A.append([1.0, float(x)])
        y.append(ms / k - kern)
    if len(A) < 2:
        raise PolyspecInputError("table", "fewer than two async rows with a draft step")
    from scipy.optimize import lsq_linear

    res = lsq_linear(np.array(A), np.array(y), bounds=((0.0, 0.0), (np.inf, np.inf)))
    resid = np.array(y) - np.array(A) @ res.x
    dof = max(1, len(y) - 2)
    cov = np.linalg.pinv(np.array(A).T @ np.array(A)) * float(resid @ resid) / dof
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    c2 = replace(c, spec_forward_ms=float(res.x[0]), spec_branch_ms=float(res.x[1]))
    scored = [r for r in asy if r.measured.get("speedup")]
    iv = load_interval_or_none()

    def loss(beta):
        cb = replace(c2, rank_coverage=float(beta))
        return sum(np.log(forecast_row(r, cb, log, iv).speedup / r.measured["speedup"]) ** 2
                   for r in scored)

    beta = minimize_scalar(loss, bounds=(0.0, 1.0), method="bounded",
                           options={"xatol": 1e-4}).x if scored else 1.0
    stderr = dict(c.stderr, spec_forward_ms=float(se[0]), spec_branch_ms=float(se[1]))
    return replace(c2, rank_coverage=float(beta), stderr=stderr,
                   fitted_on=c.fitted_on + f"; SSD async speculation: {len(y)} draft steps "
                   f"and {len(scored)} speedups of the SSD H100 table (rank_coverage has no "
                   "standard error: fitted on those rows alone)")


def load_corrections(path=None) -> Corrections:
    """The committed fit (``validation/hardware/corrections.json``, written by
    ``python -m validation.hardware.fit``)."""
    p = Path(path) if path else CORRECTIONS_FILE
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolyspecInputError("corrections", f"{p}: no such file") from None
    return Corrections.from_dict(d.get("corrections", d), f"corrections ({p.name})")


def main(argv=None) -> int:  # pragma: no cover - writes the committed fit
    import argparse

    from validation.files import dump_json

    ap = argparse.ArgumentParser(description="fit the engine correction on the GPU tables")
    ap.add_argument("--table", default=None)
    ap.add_argument("--replicates", type=int, default=100)
    ap.add_argument("--out", default=str(CORRECTIONS_FILE))
    a = ap.parse_args(argv)
    from validation.hardware.acceptance import AcceptanceLog

    rows = load_rows(a.table)
    c = fit_bootstrap(rows, replicates=a.replicates)
    ssd, _ = read_measured(ssd_table(), "table")
    c = fit_async(c, ssd, AcceptanceLog(rows, (Path(a.table) if a.table
                                               else default_table()).name))
    table = Path(a.table) if a.table else default_table()
    text = dump_json({"corrections": c.to_dict(), "tables": [table.name, ssd_table().name],
                      "command": "python -m validation.hardware.fit"})
    Path(a.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
