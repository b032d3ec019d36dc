"""The public API (re-exported by :mod:`polyspec`): one function per product verb.

Every function takes what a user has at hand — a config file path, a config mapping or a
built object — and rejects bad input with :class:`PolyspecInputError` naming the field.
Heavy dependencies load on first use: JAX for :func:`simulate` / :func:`verify`, matplotlib
for :func:`figures`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from polyspec_theory.core.config import Cascade
from polyspec_theory.errors import PolyspecInputError

__all__ = ["load_cascade", "predict", "simulate", "verify", "read_traces", "validate",
           "load_pool", "plan", "figures", "fit", "calibrate", "profile",
           "resolve_fit_files", "law_config_from_fit", "load_calibration_runs"]


def load_cascade(source) -> Cascade:
    """A :class:`Cascade` from a config file (JSON or YAML), a config mapping, or a Cascade."""
    if isinstance(source, Cascade):
        return source
    if isinstance(source, dict):
        return Cascade.from_config(resolve_fit_files(source, Path.cwd()))
    if not isinstance(source, (str, Path)):
        raise PolyspecInputError("config", "must be a file path, a mapping or a Cascade, got "
                                 f"{type(source).__name__}")
    from polyspec.configs import read_config

    path = Path(source)
    return Cascade.from_config(resolve_fit_files(read_config(path), path.parent))


def predict(cascade, batch: int | None = None):
    """The exact long-run speedup and per-level accounting of a cascade (any form
    :func:`load_cascade` accepts) in its scheme (:mod:`polyspec_theory.schemes`): P1
    (:class:`polyspec_theory.core.p1.Prediction`) for chains, trees and schedules;
    ``"mode": "async"``: AS1 / AS3
    (:class:`polyspec_theory.pipelines.asynchronous.AsyncPrediction`, ``speedup`` ``None``
    for three or more models: see its ``bounds``); ``batch``: B2 in a lockstep serving batch
    of that many sequences (:class:`polyspec_theory.serving.batch.BatchPrediction`)."""
    from polyspec_theory.schemes import predict as _predict

    return _predict(_in_batch(load_cascade(cascade), batch))


def _in_batch(cascade, batch):
    return cascade if batch is None else cascade.with_batch(batch)


def simulate(cascade, tokens: int | None = None, seed: int = 0, *, chains: int | None = None,
             cpu_devices: int | None = None, batch: int | None = None,
             events: int | None = None, budget=None):
    """Monte Carlo of a cascade in its scheme (:mod:`simulators.schemes`): speedup with a 95 %
    CI and per-level estimates (a chain: :class:`simulators.length.LengthResult`; trees or
    schedules: ``simulators.structures.StructuredResult``; ``batch``: a lockstep serving batch,
    ``simulators.serving.ServingResult``; ``"mode": "async"``: the pipeline,
    ``simulators.asynchronous.AsyncSimResult``). How much: ``budget``
    (:class:`simulators.schemes.Budget`), or its fields ``tokens`` (default 1e6), ``events``
    (per chain, schemes counted in events: async; default 20,000) and ``chains`` (default
    1024). ``seed``: an int or a JAX PRNG key; same seed, same numbers; ``cpu_devices``
    spreads chains over that many CPU devices (the numbers do not depend on it)."""
    from simulators.runtime import use_cpu_cores
    from simulators.schemes import Budget
    from simulators.schemes import simulate as _simulate

    use_cpu_cores(cpu_devices)
    given = {k: v for k, v in (("tokens", tokens), ("events", events), ("chains", chains))
             if v is not None}
    if budget is None:
        budget = Budget(**given)
    elif given:
        raise PolyspecInputError(next(iter(given)), "give it in the budget (not both)")
    return _simulate(_in_batch(load_cascade(cascade), batch), budget, seed)


def verify(quick: bool = True, seed: int = 0, *, cpu_devices: int | None = None):
    """Check every numbered result against Monte Carlo: a list of rows
    (:class:`simulators.verify.CheckRecord`, each with ``passed``)."""
    from simulators.runtime import use_cpu_cores
    from simulators.verify import run_checks

    use_cpu_cores(cpu_devices)
    return run_checks(quick=quick, seed=seed)


def read_traces(directory, *, allow_truncated: bool = False):
    """Every capture (:class:`validation.traces.dataset.Capture`) stored in a folder of traces."""
    from validation.traces.records import read_traces as _read

    return _read(directory, allow_truncated=allow_truncated)


def validate(traces, **options):
    """Predicted vs measured on captures (a folder of traces or a list of captures): a
    :class:`validation.analysis.validate.ValidationResult`. ``options`` are those of
    :func:`validation.analysis.validate.validate`."""
    from validation.analysis.validate import validate as _validate

    captures = read_traces(traces) if isinstance(traces, (str, Path)) else list(traces)
    return _validate(captures, **options)


def load_pool(source):
    """A planner :class:`polyspec_theory.planning.planner.Pool` from a pool file or mapping."""
    from polyspec_theory.planning.pool import Pool

    if isinstance(source, Pool):
        return source
    if isinstance(source, dict):
        return Pool.from_config(resolve_fit_files(source, Path.cwd()))
    from polyspec.configs import read_config

    path = Path(source)
    return Pool.from_config(resolve_fit_files(read_config(path), path.parent))


def plan(pool, top: int = 5, **options):
    """The exact best cascade from a pool (a pool file, mapping or Pool): a
    :class:`polyspec_theory.planning.planner.Plan`. To plan from captures, build the pool with
    :func:`validation.analysis.pool.pool_from_captures`."""
    from polyspec_theory.planning.planner import plan as _plan

    return _plan(load_pool(pool), top, **options)


def figures(out_dir, only=None, *, quick: bool = False, progress: bool = False):
    """Regenerate the theory figures (PNG and PDF) into ``out_dir``; returns
    ``{number: [paths]}``."""
    from paper_figures.registry import build_all

    return build_all(out_dir, subset=only, progress=progress, quick=quick)


def fit(path, *, fmt: str | None = None, threshold: int | None = None,
        snapshot: int | None = None, eta: float | None = None) -> dict:
    """A serving engine's output file -> acceptance data and fitted laws: the object that
    ``polyspec fit --json`` prints (:func:`validation.formats.fit_report`: every format of
    :mod:`validation.formats`; an engine's drafts of varying length come back as
    ``variable_length``, a confidence cut-off whose representative law is written at
    ``eta``; ``threshold``: the draft length where the output does not state it; PipeSpec's
    two-model chains: the run law, R2, and R3's test of independent rounds)."""
    from validation.formats import fit_report

    return fit_report(path, fmt, gamma=threshold, eta=eta, snapshot=snapshot)


def calibrate(runs, *, method: str | None = None, fit_on=None):
    """Fit the unknown cost parameters to measured runs (a runs file, a runs mapping or a sweep
    table; see :func:`load_calibration_runs`): a
    :class:`polyspec_theory.planning.calibration.Calibration`."""
    from polyspec_theory.planning.calibration import calibrate as _calibrate
    from polyspec_theory.planning.calibration_problem import problem_from_config

    cfg = runs if isinstance(runs, dict) else load_calibration_runs(runs, method=method,
                                                                    fit_on=fit_on)
    return _calibrate(problem_from_config(cfg))


def profile(models, **options) -> dict:
    """Measured ``T(m)`` tables of ``models`` on this device (:func:`validation.capture.profile.
    profile_models`; options ``max_m``, ``repeats``, ``context``, ``device``, ...)."""
    from validation.capture.profile import ProfileSpec, profile_models

    return profile_models(list(models) if not isinstance(models, str) else [models],
                          ProfileSpec.of(options))


def law_config_from_fit(fit: dict, family: str | None = None, field: str = "fit") -> dict:
    """The law (config form) in a ``polyspec fit --json`` object: its ``best`` law, or the
    fitted law of ``family`` (``iid``, ``positional``, ``beta``, ``gaussian``); a fit of
    rounds over positions (a PipeSpec chain) gives its run law (``run``, R2)."""
    if isinstance(fit, dict) and "run_law" in fit and family in (None, "run"):
        return fit["run_law"]  # rounds over positions: the run law (R2)
    if not isinstance(fit, dict) or "format" not in fit or "best" not in fit:
        raise PolyspecInputError(field, "is not the output of `polyspec fit --json` "
                                 "(no 'format' and 'best' keys)")
    if family is None:
        if fit["best"] is None:
            why = "; ".join(fit.get("warnings") or []) or "no law was fitted"
            raise PolyspecInputError(field, f"has no fitted law ({why})")
        return fit["best"]
    for entry in fit.get("laws") or []:
        if entry.get("law") == family:
            return entry["params"]
    have = ", ".join(e.get("law", "?") for e in fit.get("laws") or []) or "none"
    raise PolyspecInputError(f"{field}.law", f"no {family!r} law in the fit (have: {have})")


def _resolve_one(spec, base: Path, field: str):
    if not (isinstance(spec, dict) and "fit" in spec):
        return spec
    return _read_fit(spec, base, field)[0]


def _read_fit(spec, base: Path, field: str):
    """(the law of a ``{"fit": FILE}`` entry, the largest draft position it was fitted on)."""
    from polyspec.configs import read_config
    from polyspec_theory.errors import require_keys

    require_keys(spec, field, required=["fit"], optional=["law"])
    name = spec["fit"]
    if not isinstance(name, str) or not name:
        raise PolyspecInputError(f"{field}.fit", "must be a file name (a `polyspec fit --json` "
                                 "output)")
    path = Path(name) if Path(name).is_absolute() else base / name
    if not path.is_file():
        raise PolyspecInputError(f"{field}.fit", f"file not found: {path}")
    try:
        fit = read_config(path)
    except PolyspecInputError as e:
        raise PolyspecInputError(f"{field}.fit", str(e)) from None
    law = law_config_from_fit(fit, spec.get("law"), f"{field}.fit")
    return law, fit.get("cap")


class FitExtrapolationWarning(UserWarning):
    """A fitted law is used past the draft positions it was fitted on (``polyspec`` prints it
    on stderr as ``warning: ...``)."""


def _extrapolation(field, law, cap, threshold):
    if not (isinstance(cap, int) and isinstance(threshold, int) and threshold > cap):
        return
    tail = ""
    if isinstance(law, dict) and isinstance(law.get("positional"), list) and law["positional"]:
        last = law["positional"][-1]
        tail = f"; the positional law repeats its last rate {last:.4g} there"
        if last >= 1.0:
            tail += f" (every draft past position {cap} accepted)"
    warnings.warn(FitExtrapolationWarning(
        f"{field}.fit: fitted on drafts at positions 1..{cap}, used at threshold {threshold}: "
        f"positions {cap + 1}..{threshold} are extrapolated{tail}"), stacklevel=3)


def resolve_fit_files(cfg, base_dir) -> dict:
    """``cfg`` with every acceptance entry ``{"fit": FILE}`` / ``{"fit": FILE, "law": F}``
    replaced by the law it names (FILE relative to ``base_dir``). Works on cascade configs
    (acceptance a list) and pools (acceptance keyed ``"verifier|drafter"``)."""
    if not isinstance(cfg, dict) or "acceptance" not in cfg:
        return cfg
    base = Path(base_dir)
    acc = cfg["acceptance"]
    def one(a, field, threshold=None):
        if not (isinstance(a, dict) and "fit" in a):
            return a
        law, cap = _read_fit(a, base, field)
        _extrapolation(field, law, cap, threshold)
        return law

    if isinstance(acc, list):
        th = cfg.get("thresholds")
        th = th if isinstance(th, list) else []
        new = [one(a, f"acceptance[{i}]", th[i] if i < len(th) else None)
               for i, a in enumerate(acc)]
    elif isinstance(acc, dict):
        new = {k: one(a, f"acceptance.{k}") for k, a in acc.items()}
    else:
        return cfg
    return {**cfg, "acceptance": new}


def load_calibration_runs(source, *, method: str | None = None, fit_on=None) -> dict:
    """A ``polyspec calibrate`` runs mapping from a runs file (JSON / YAML; acceptance entries
    ``{"fit": FILE}`` read relative to it) or a sweep table (text: mean acceptance length and
    time per token per K; ``method`` picks its column). ``fit_on``: names of the runs (for a
    sweep: the Ks) to fit on, the others held out."""
    from polyspec.configs import read_config
    from validation.formats.engine_common import read_engine_text
    from validation.formats.vllm_sweep import load_sweep, sweep_runs

    path = Path(source)
    text, _ = read_engine_text(path)
    if text.lstrip()[:1] in ("{", "[") or path.suffix.lower() in (".json", ".yaml", ".yml"):
        if method is not None:
            raise PolyspecInputError("--method", "only applies to a sweep table")
        cfg = read_config(path)
        runs = cfg.get("runs")
        if isinstance(runs, list):
            new = []
            for i, r in enumerate(runs):
                if isinstance(r, dict) and isinstance(r.get("acceptance"), list):
                    r = {**r, "acceptance": [_resolve_one(a, path.parent,
                                                          f"runs[{i}].acceptance[{k}]")
                                             for k, a in enumerate(r["acceptance"])]}
                new.append(r)
            cfg = {**cfg, "runs": new}
        cfg = resolve_fit_files(cfg, path.parent)
        if fit_on is not None:
            runs = cfg.get("runs")
            if not isinstance(runs, list):
                raise PolyspecInputError("runs", "must be a list of run objects (--fit-on picks "
                                         "runs by name)")
            for i, r in enumerate(runs):
                if not isinstance(r, dict):
                    raise PolyspecInputError(f"runs[{i}]", f"must be an object, got "
                                             f"{type(r).__name__}")
            names = [r.get("name") for r in runs]
            unnamed = [i for i, nm in enumerate(names) if not isinstance(nm, str) or not nm]
            if unnamed:
                raise PolyspecInputError(f"runs[{unnamed[0]}].name", "missing: --fit-on picks "
                                         "runs by name, so every run needs one")
            want = [str(x) for x in fit_on]
            for w in want:
                if w not in names:
                    raise PolyspecInputError("--fit-on", f"no run named {w!r} (runs: "
                                             f"{', '.join(map(str, names))})")
            cfg["runs"] = [{**r, "holdout": r.get("name") not in want} for r in cfg["runs"]]
        return cfg
    table = load_sweep(path)
    if method is None:
        raise PolyspecInputError("--method", "this sweep table has methods "
                                 f"{', '.join(table.methods)}: choose one with --method")
    ks = None
    if fit_on is not None:
        ks = []
        for x in fit_on:
            if str(x).strip().upper().startswith("K="):
                raise PolyspecInputError("--fit-on", f"{x!r}: give the sweep's draft lengths "
                                         f"as plain numbers (e.g. {str(x).strip()[2:]})")
            try:
                ks.append(int(str(x)))
            except ValueError:
                raise PolyspecInputError("--fit-on", f"{x!r} is not a draft length of the "
                                         "sweep") from None
    return sweep_runs(table, method, ks)
