"""Forecast of our own asynchronous pipeline (``polyspec forecast --mode async``) before it is
captured: AS1 with the contention term (docs/theory.md AS1c) on a contention profile
(:class:`validation.capture.async_profile.AsyncProfile`) and the acceptance of the committed
synchronous captures.

- **Acceptance** of the pair (target, drafter) at ``T = 0`` from the synchronous captures
  that have it, as ``validate --laws-from`` fits it for async captures
  (:func:`validation.analysis.async_validate.pair_law`: pooled per-round law) -- unless R3
  rejects independent rounds there (:func:`validation.analysis.run_forecast.run_law_decision`):
  then each prompt's run law (R2, :func:`~validation.analysis.run_forecast.prompt_run_laws`)
  enters AS1 as a positional law (``alpha_j = 1 - hazard_j``, the tail repeating), as the
  forecast of PipeSpec's async runs does (docs/theory.md AS6), and the prompts' times per
  token are averaged (every prompt decodes the same number of tokens).
- **Costs**: the profile's solo costs ``T_1(m)``, ``c``, its per-verify overhead ``o_1`` and
  its contention factors ``kappa_i``: AS1 runs on ``T_i (1 + kappa_i)``
  (:func:`polyspec_theory.predict_async` with ``contention``).
- **Speedup** against the profile's single-core autoregressive time per token (the baseline a
  capture measures), as a capture's measured speedup is computed.

:func:`profile_of_capture` builds the same inputs from an async capture's own records (its
single-core cost curves, its pipeline's forwards, overhead and baseline): an in-sample
profile, for diagnostics only. :func:`forecast_captures` is the command itself (the async
scheme's ``FORECAST_CAPTURES`` hook, :func:`validation.schemes.command_hook`).
"""

from __future__ import annotations

import numpy as np

from polyspec_theory import Cascade, Model, Positional, predict_async
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import get
from validation.analysis.async_validate import SCHEME, drafter_forward_s, pair_law
from validation.analysis.fits import fit_costs
from validation.analysis.run_forecast import prompt_run_laws, run_law_decision
from validation.schemes import captures_of, synchronous_captures

__all__ = ["forecast_async_config", "profile_of_capture", "already_captured", "check_profile_of",
           "ACCEPTANCE", "forecast_captures"]

ACCEPTANCE = ("run-law", "per-round")


def _positional(law) -> Positional:
    """A run law as AS1's positional law: ``alpha_j = 1 - hazard_j``, the tail repeating."""
    return Positional([1.0 - h for h in law.hazard] + [1.0 - law.tail])


def _cascade(models, profile, law, threshold, queue) -> Cascade:
    tc, dc = profile.cost_curves()
    return Cascade(models=(Model(models[0], tc, profile.overhead_s), Model(models[1], dc)),
                   laws=(law,), thresholds=(threshold,), name="async-forecast",
                   mode=get(SCHEME).mode, queues=None if queue is None else (queue,))


def check_profile_of(profile, models, threshold: int, queue) -> None:
    """Refuse (``--profile``) an async profile that is not of ``models`` at ``threshold``
    and ``queue`` (a command checks this before it reads any capture)."""
    if list(profile.models) != [str(m) for m in models]:
        raise PolyspecInputError("--profile", f"is of {profile.models}, not of "
                                 f"{[str(m) for m in models]}")
    if (profile.threshold, profile.queue) != (threshold, queue):
        raise PolyspecInputError("--profile", f"is of θ={profile.threshold} queue="
                                 f"{profile.queue}, not θ={threshold} queue={queue}")


def forecast_async_config(models, threshold: int, queue, captures, profile, *,
                          acceptance: str = "run-law", families=None) -> dict:
    """The forecast of the async pipeline ``models`` (target, drafter) at ``threshold`` and
    ``queue`` (module docstring; ``profile``: an
    :class:`~validation.capture.async_profile.AsyncProfile`): ``speedup``,
    ``time_per_token`` (s), the same without the contention term, the acceptance model used
    and where everything came from.
    ``captures``: the committed captures (the synchronous ones give the acceptance)."""
    from polyspec_theory.core.laws import FAMILIES

    if acceptance not in ACCEPTANCE:
        raise PolyspecInputError("acceptance", f"must be one of {ACCEPTANCE}, got "
                                 f"{acceptance!r}")
    models = [str(m) for m in models]
    check_profile_of(profile, models, threshold, queue)
    families = FAMILIES if families is None else families
    key = (models[0], models[1], 0.0, 0)
    sync = synchronous_captures(captures)
    used = sorted(c.name for c in sync if key in {c.pair_key(i) for i in range(c.n - 1)})
    if not used:
        raise PolyspecInputError("--traces", f"no synchronous capture has the pair "
                                 f"{models[0]} <- {models[1]} at temperature 0")
    decision = run_law_decision(sync, key) if acceptance == "run-law" else None
    notes: list[str] = []

    def rate(laws, contention):
        preds = [predict_async(_cascade(models, profile, law, threshold, queue), contention)
                 for law in laws]
        return float(np.mean([p.time_per_token for p in preds])), preds

    if decision is not None and not decision["independent"]:
        prompts = sorted({int(s["prompt"]) for c in sync if c.name in used
                          for s in c.summaries})
        run_laws, rnotes = prompt_run_laws(sync, key, prompts)
        notes += rnotes
        laws = [_positional(run_laws[p]) for p in prompts]
        model = "run law"
        law_desc = (f"R2 run law per prompt ({len(prompts)} prompts) as a positional law; "
                    f"R3 rejects independent rounds (p = {decision['p_value']:.3g})")
    else:
        law, _ = pair_law(sync, key, families)
        laws = [law]
        model = "per-round"
        law_desc = "pooled per-round law (validate's) " + (
            "" if decision is None else f"(R3 accepts independent rounds, p = "
            f"{decision['p_value']:.3g})")
    tau, preds = rate(laws, profile.contention)
    tau0, _ = rate(laws, None)
    lv = [p.levels for p in preds]
    return {
        "models": models, "thresholds": [int(threshold)], "queue": queue,
        "window": profile.window, "temperature": 0.0, "mode": get(SCHEME).mode,
        "speedup": profile.ar_s / tau, "time_per_token": tau,
        "ar_time_per_token": profile.ar_s,
        "speedup_without_contention": profile.ar_s / tau0,
        "contention": list(profile.contention), "overhead_per_verify": profile.overhead_s,
        "verifies_per_token": float(np.mean([x[0].verifies_per_token for x in lv])),
        "mean_checked": float(np.mean([x[0].mean_checked for x in lv])),
        "drafter_forwards_per_token": float(np.mean([x[1].forwards_per_token for x in lv])),
        "acceptance_model": model, "independence": decision, "acceptance_from": used,
        "acceptance_law": law_desc,
        "cost_source": "profile " + str(profile.settings.get("source", "profile"))
                       + ": solo costs x (1 + kappa), AS1c; theory AS1 (exact, two levels)",
        "notes": notes,
    }


def already_captured(captures, models, threshold: int, queue) -> bool:
    """Whether ``captures`` hold an async capture of ``models`` (target first) at
    ``threshold`` and ``queue``: a forecast is of a configuration not captured yet."""
    return any(tuple(c.models) == tuple(models) and c.thresholds[0] == threshold
               and c.header.get("async", {}).get("queue") == queue
               for c in captures_of(captures, SCHEME))


def profile_of_capture(capture):
    """An in-sample :class:`AsyncProfile` of an async capture: solo costs from its
    single-core cost curves (raw timings; the target's table at the mean verify context, the
    drafter's ``T(1)`` at the mean drafting context), ``kappa_1`` = its pipeline's verify
    time / the same verifies at solo cost - 1, ``kappa_2`` = its mean one-position drafter
    forward / the solo ``T(1)`` - 1, ``o_1`` its median per-verify overhead, its
    autoregressive time per token. For diagnostics: it uses the capture it would predict."""
    from validation.capture.async_profile import AsyncProfile  # torch: only when used

    if capture.scheme != SCHEME:
        raise PolyspecInputError("capture", f"{capture.name} is not an async capture")
    a = capture.header.get("async", {})
    th, q, w = capture.thresholds[0], a.get("queue"), int(a.get("window"))
    p = capture.header["prompts"]
    plen, tokens = p["prompt_len"], p["max_new_tokens"]
    fits = fit_costs(capture, calibrate=False)
    tgt, dr = capture.models
    r = capture.rounds[0]
    solo = fits[tgt].curve(plen + tokens / 2)
    ctx_shift = fits[tgt].context_slope * (np.asarray(r.ctx, float) - (plen + tokens / 2))
    solo_each = np.asarray(solo(np.asarray(r.m)), float) + ctx_shift
    k1 = float(np.sum(r.verify_s) / np.sum(solo_each) - 1.0)
    c = float(fits[dr].curve(plen + (tokens + w) / 2).t1)
    m1 = drafter_forward_s(capture)
    if not m1:
        raise PolyspecInputError("capture", f"{capture.name}: no drafter forwards recorded")
    k2 = float(np.mean(m1) / c - 1.0)
    over = float(np.median(np.asarray(r.round_s) - np.asarray(r.verify_s)
                           - np.asarray(r.draft_s)))
    return AsyncProfile(
        models=[tgt, dr], threshold=th, queue=q, window=w,
        target_table=[float(x) for x in solo(np.arange(1, w + 2))], draft_s=c,
        contention=(k1, k2), overhead_s=max(0.0, over), ar_s=capture.ar_time_per_token,
        settings={"source": f"in-sample: capture {capture.name} (its single-core cost "
                            "curves, its pipeline's forwards, overhead and baseline)"})


def forecast_captures(args) -> int:
    """``polyspec forecast --mode async`` on our own captures (the async scheme's
    ``FORECAST_CAPTURES``; ``args``: the command's parsed options): AS1 with the contention
    term on a contention profile (:func:`forecast_async_config`); the interval from the
    leave-one-out errors of the chain forecasts at T = 0 (no async capture has a profile
    taken before it). Every option checked first, each error naming it."""
    from pathlib import Path

    from polyspec_theory.errors import as_int, as_real, parse_ints, refuse_options
    from validation.analysis.forecast import loo_errors
    from validation.analysis.score import interval_errors, prediction_interval
    from validation.capture.async_profile import read_async_profile
    from validation.capture.composition_profile import load_profiles
    from validation.capture.model_specs import model_name
    from validation.files import dump_json
    from validation.traces.records import read_traces

    refuse_options((("--tree", args.tree), ("--schedule", args.schedule),
                    ("--batch", args.batch), ("--batch-profile", args.batch_profile),
                    ("--laws-from", args.laws_from), ("--score", args.score),
                    ("--dtype", args.dtype), ("--costs-from", args.costs_from)),
                   "does not apply with --mode async (two models, one chain, greedy)")
    for opt in ("traces", "models", "thresholds", "profile"):
        if getattr(args, opt) is None:
            raise PolyspecInputError(f"--{opt}", "required with --mode async")
    models = [model_name(m.strip()) for m in args.models.split(",") if m.strip()]
    if len(models) != 2:
        raise PolyspecInputError("--models", f"--mode async forecasts two models (target, one "
                                 f"drafter), got {len(models)}")
    th = parse_ints(args.thresholds, "--thresholds", low=0, example="0")
    if len(th) != 1:
        raise PolyspecInputError("--thresholds", f"--mode async takes one threshold, got "
                                 f"{len(th)}")
    temp = as_real(args.temperature, "--temperature", low=0.0)
    if temp != 0:
        raise PolyspecInputError("--temperature", f"the async pipeline is greedy (0), got "
                                 f"{temp:g}")
    if not Path(args.traces).is_dir():
        raise PolyspecInputError("--traces", f"{args.traces}: no such folder of captures")
    prof = read_async_profile(args.profile)
    threshold = th[0]
    queue = None if args.queue is None else as_int(args.queue, "--queue",
                                                   low=max(1, threshold), high=4096)
    check_profile_of(prof, models, threshold, queue)  # before the captures are read
    caps = read_traces(args.traces)
    if already_captured(caps, models, threshold, queue):
        raise PolyspecInputError("--models", "this configuration is already captured in "
                                 f"{args.traces}: forecast a new one (validate predicts the "
                                 "committed ones)")
    fc = forecast_async_config(models, threshold, queue, caps, prof)
    pdir = Path(args.profiles) if args.profiles else Path(args.traces) / "profiles"
    sync = synchronous_captures(caps)
    errs = {} if args.interval_from else loo_errors(sync, load_profiles(pdir, sync),
                                                   temperature=0.0)
    errs, floor, of = interval_errors(args.interval_from, errs, f"the chain forecasts at T = 0 "
                                      f"(profiles in {pdir})")
    out = {**fc, **prediction_interval(fc["speedup"], errs.values(), of, floor),
           "profile": str(args.profile), "traces": str(args.traces), "kind": "async",
           "levels": 2, "batch": 1, "name": args.name or "forecast"}
    if args.json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    k1, k2 = fc["contention"]
    print(f"{' <- '.join(models)} async θ={threshold} queue={queue}: forecast speedup "
          f"{fc['speedup']:.3f}" + ("" if iv is None else
                                    f", 95 % prediction interval [{iv[0]:.3f}, {iv[1]:.3f}]"
                                    f" (from {len(errs)} errors of {of})"))
    print(f"  contention 1 + κ = {1 + k1:.4f} (target), {1 + k2:.4f} (drafter); without it "
          f"{fc['speedup_without_contention']:.3f}")
    print(f"  acceptance: {fc['acceptance_law']}, from {len(fc['acceptance_from'])} "
          "capture(s)")
    return 0
