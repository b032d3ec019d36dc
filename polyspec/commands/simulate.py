"""``polyspec simulate CONFIG --tokens N --seed S``: length-level Monte Carlo of a cascade."""

from __future__ import annotations

import math

from .common import add_cpu_devices_argument

DEFAULT_MAX_EVENTS = 1e9  # ~30 s for 4 models on a 2-core CPU, minutes for many models
# --mode async: chains x events (completed actions, all chains) at most this by default, 5x
# the default run (1024 chains x 20,000 events); --max-events sets another bound
ASYNC_MAX_EVENTS = 1e8
ANNOUNCE_EVENTS = 1e8  # estimates above this are announced on stderr
# events x verifying levels per second on a 2-core CPU (measured: 9e7 with 4 models, 7e7
# with 30), for the rough time announced; chains wait for the slowest, so it is a floor
LEVEL_EVENT_RATE = 7e7

DEFAULT_TOKENS = 1_000_000  # --tokens (synchronous schemes)
DEFAULT_EVENTS = 20_000  # --events (the asynchronous pipeline)
HELP = ("Simulate a cascade (length-level JAX Monte Carlo): speedup with a 95% CI, per-level "
        "phi, block/emitted histograms, forwards per token, next to the exact P1 prediction.")


def add_arguments(p):
    p.add_argument("config", help="cascade config (JSON or YAML), as for `polyspec predict`")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens to simulate in total (default 1e6; not with async: --events)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed (same seed -> same result)")
    p.add_argument("--chains", type=int, default=1024,
                   help="independent chains (spread over all devices; default 1024)")
    p.add_argument("--max-events", type=float, default=None,
                   help="refuse a run whose expected verification rounds (P1's forwards per "
                        "token of the verifying models x tokens) exceed this, and stop one "
                        f"that runs past twice as many (default {DEFAULT_MAX_EVENTS:.0e})")
    add_cpu_devices_argument(p)
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="simulate a lockstep serving batch of B sequences (docs/theory.md "
                        "Part III-C, B0; simulators/serving.py) against the exact B2 "
                        "prediction; --chains batches of B run in parallel")
    p.add_argument("--mode", choices=("sync", "async"), default=None,
                   help="run the cascade synchronously (P1's rounds) or as an asynchronous "
                        "pipeline (simulators/asynchronous.py, docs/theory.md Part VI-AS); "
                        "default: the config's \"mode\"")
    p.add_argument("--events", type=int, default=None,
                   help="with async: completed actions (forwards, verifies) per chain "
                        "(default 20000; --tokens is refused there)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def simulation_report(cascade, result, prediction, notes=()) -> dict:
    """The JSON object: ``speedup``, ``ci95``, ``levels`` (each with the P1 value alongside),
    ``notes``."""
    out = result.to_dict()
    out["notes"] = list(notes)
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": prediction.speedup,
                         "time_per_token": prediction.time_per_token}
    for lv, lp in zip(out["levels"], prediction.levels, strict=True):
        lv["p1"] = {"phi": lp.phi, "mean_block": lp.mean_block,
                    "mean_emitted": lp.mean_emitted if lp.block_pmf is not None else None,
                    "forwards_per_token": lp.forwards_per_token, "time_share": lp.time_share}
    return out


def simulation_text(cascade, result, pred, notes=()) -> str:
    s = result.speedup
    lines = [
        f"cascade {cascade.name!r}: {cascade.n} models, policy {result.policy}",
        f"simulated {result.tokens} tokens in {result.chains} independent chains, "
        f"seed {result.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   "
        f"P1 exact {pred.speedup:.4f}",
        f"CI: {result.ci_method}",
        "",
        f"{'model':<12}{'phi MC':>10}{'phi P1':>10}{'E[G] MC':>10}{'E[G] P1':>10}"
        f"{'E[L] MC':>10}{'E[L] P1':>10}{'fwd/tok MC':>12}{'fwd/tok P1':>12}{'time %':>8}",
    ]

    def f(x):
        return "-" if x is None else f"{x:.4f}"

    for ls, lp in zip(result.levels, pred.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{f(ls.phi and ls.phi.value):>10}{f(lp.phi):>10}"
            f"{f(ls.mean_block and ls.mean_block.value):>10}{f(lp.mean_block):>10}"
            f"{f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{f(lp.mean_emitted if lp.block_pmf is not None else None):>10}"
            f"{ls.forwards_per_token.value:>12.4f}{lp.forwards_per_token:>12.4f}"
            f"{100 * ls.time_share:>8.1f}")
    lines.append("")
    for ls in result.levels:
        if ls.block_hist is None:
            continue
        tot = ls.block_hist.sum()
        bh = {g: c / tot for g, c in enumerate(ls.block_hist) if c}
        eh = {n: c / tot for n, c in enumerate(ls.emitted_hist) if c}
        lines.append(f"{ls.name}: block G " + " ".join(f"{g}:{p:.3f}" for g, p in bh.items()))
        lines.append(f"{' ' * len(ls.name)}  emitted L " +
                     " ".join(f"{n}:{p:.3f}" for n, p in eh.items()))
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def run(args) -> int:
    from polyspec.api import load_cascade
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.schemes import handler, in_mode, scheme_of

    cascade = in_mode(load_cascade(args.config), args.mode, "--mode")
    scheme = scheme_of(cascade, args.batch, batch_field="--batch")
    # a size the scheme does not use is refused, never ignored
    if scheme == "async" and args.tokens is not None:
        raise PolyspecInputError("--tokens", "the asynchronous pipeline is sized in "
                                 "--events (completed actions per chain), not tokens")
    if scheme != "async" and args.events is not None:
        raise PolyspecInputError("--events", f"sizes the asynchronous pipeline only; this "
                                 f"cascade is scheme {scheme!r}: give --tokens")
    return handler(RUN, scheme, "polyspec simulate")(args, cascade)


def _sizes(args):
    """The synchronous simulators' sizes: tokens, seed, chains, the event limit."""
    from polyspec_theory.errors import as_int, as_real
    from simulators.runtime import use_cpu_cores

    tokens = as_int(DEFAULT_TOKENS if args.tokens is None else args.tokens, "tokens", low=1,
                    high=10**13)
    seed = as_int(args.seed, "seed", low=0, high=2**63 - 1)
    chains = as_int(args.chains, "chains", low=2, high=2**24)
    max_events = as_real(DEFAULT_MAX_EVENTS if args.max_events is None else args.max_events,
                         "--max-events", low=1.0)
    use_cpu_cores(args.cpu_devices)
    return tokens, seed, chains, max_events


def _check_events(cascade, tokens, chains, max_events) -> None:
    """The work, estimated before it starts: each event is one verification round (of one
    sequence; a batch of b runs the same rounds b at a time); refused past ``max_events``,
    announced on stderr past ANNOUNCE_EVENTS."""
    import sys

    from polyspec_theory.errors import PolyspecInputError
    from simulators.length import estimate_events

    events = estimate_events(cascade, max(tokens, chains))
    if not events <= max_events:
        raise PolyspecInputError(
            "--max-events", f"this run needs about {events:.3g} verification rounds "
            f"({cascade.n} models, {tokens:,} tokens; P1's forwards per token of the verifying "
            f"models x tokens), more than the limit {max_events:.3g}: lower --tokens, or raise "
            f"the limit with --max-events {_ceil_sig(events)}")
    if events > ANNOUNCE_EVENTS:
        secs = events * (cascade.n - 1) / LEVEL_EVENT_RATE
        print(f"polyspec simulate: about {events:.3g} verification rounds to simulate over "
              f"{cascade.n - 1} verifying models (roughly {_duration(secs)} or more on a 2-core "
              f"CPU; limit --max-events {max_events:.3g})", file=sys.stderr, flush=True)


def _run_structured(args, cascade) -> int:
    """Trees / schedules: simulators.structures."""
    from .structured_runs import run_structured

    tokens, seed, chains, _ = _sizes(args)
    return run_structured(cascade, tokens, seed, chains, args.json)


def _run_chain(args, cascade) -> int:
    import sys

    from polyspec_theory.core.p1 import block_bounds, predict_chain
    from polyspec_theory.errors import PolyspecInputError
    from simulators.length import histograms_fit, simulate_lengths
    from validation.files import dump_json

    tokens, seed, chains, max_events = _sizes(args)
    _check_events(cascade, tokens, chains, max_events)
    notes = []
    if not histograms_fit(cascade):
        notes.append("block/emitted histograms omitted: blocks up to "
                     f"{max(block_bounds(cascade.thresholds, cascade.policy))} tokens are too "
                     "wide to tabulate (every other estimate is unaffected)")
    # an overrun guard: no chain may run past twice its share of the limit
    per_chain = max(1024, math.ceil(2 * max_events / chains))

    bar = None
    progress = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=tokens, unit="tok", unit_scale=True, file=sys.stderr,
                   desc="simulate")

        def progress(done, asked):
            bar.total = asked
            bar.n = min(done, asked)
            bar.refresh()

    try:
        result = simulate_lengths(cascade, tokens, seed, chains=chains, progress=progress,
                                  max_events=per_chain)
    except PolyspecInputError as e:
        if e.field != "max_events":
            raise
        raise PolyspecInputError(
            "--max-events", f"the run went past twice the limit {max_events:.3g} ({e}); "
            "raise --max-events to let it finish") from None
    finally:
        if bar is not None:
            bar.close()
    pred = predict_chain(cascade)
    if args.json:
        print(dump_json(simulation_report(cascade, result, pred, notes)))
    else:
        print(simulation_text(cascade, result, pred, notes))
    return 0


def _run_async(args, cascade) -> int:
    """``simulate --mode async``: the discrete-event pipeline next to AS1 / AS3."""
    from polyspec_theory import predict_async
    from polyspec_theory.errors import PolyspecInputError, as_int, as_real
    from simulators.asynchronous import simulate_async
    from simulators.runtime import use_cpu_cores
    from validation.files import dump_json

    use_cpu_cores(args.cpu_devices)
    seed = as_int(args.seed, "seed", low=0, high=2**63 - 1)
    chains = as_int(args.chains, "chains", low=2, high=2**20)
    events = as_int(DEFAULT_EVENTS if args.events is None else args.events, "--events", low=50,
                    high=10**8)
    limit = as_real(ASYNC_MAX_EVENTS if args.max_events is None else args.max_events,
                    "--max-events", low=1.0)
    if chains * events > limit:
        raise PolyspecInputError(
            "--max-events", f"--chains {chains} x --events {events} = {chains * events:.3g} "
            f"actions to simulate, more than the limit {limit:.3g}: lower --chains or "
            f"--events, or raise the limit with --max-events {_ceil_sig(chains * events)}")
    res = simulate_async(cascade, events, seed, chains=chains)
    pred = predict_async(cascade)
    out = res.to_dict()
    out["config"] = cascade.to_config()
    out["prediction"] = {"speedup": pred.speedup, "exact": pred.exact,
                         "bounds": list(pred.bounds)}
    if args.json:
        print(dump_json(out))
        return 0
    s = res.speedup
    theory = (f"AS1 exact {pred.speedup:.4f}" if pred.exact else
              f"AS3 bounds [{pred.bounds[0]:.4f}, {pred.bounds[1]:.4f}]")
    print(f"cascade {cascade.name!r}: {cascade.n} models, asynchronous pipeline\n"
          f"simulated {res.tokens} tokens ({res.chains} chains x {res.events} events, "
          f"{res.window} window), seed {res.seed}\n"
          f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   {theory}\n"
          "drafts checked per verify: "
          + ", ".join(f"{m.name} {x:.3f}" for m, x in zip(cascade.models, res.mean_checked,
                                                          strict=False)))
    return 0


def serving_report(cascade, result, prediction) -> dict:
    """``simulate --batch --json``: the Monte Carlo (speedup, throughput, time per token with
    CIs, per level) next to B2 (``prediction``)."""
    out = result.to_dict()
    out["config"] = cascade.to_config()
    out["model"] = ("lockstep batch (B0): every forward batched over all b slots, padded to "
                    "the longest block; a level waits for the sequence needing the most rounds")
    out["prediction"] = {"speedup": prediction.speedup,
                         "tokens_per_time": prediction.tokens_per_time,
                         "time_per_token": prediction.time_per_token,
                         "speedup_unsynchronised": prediction.speedup_unsynchronised}
    for lv, lp in zip(out["levels"], prediction.levels, strict=True):
        lv["b2"] = {"phi_batch": lp.phi_batch, "mean_max_block": lp.mean_max_block,
                    "mean_block": lp.mean_block,
                    "mean_emitted": lp.mean_emitted if lp.mean_block is not None else None,
                    "idle_share": lp.idle_share}
    return out


def _run_batch(args, cascade) -> int:
    from polyspec_theory.errors import as_int
    from polyspec_theory.serving.batch import predict_batch
    from simulators.serving import MAX_SIM_BATCH, simulate_serving
    from validation.files import dump_json

    tokens, seed, chains, max_events = _sizes(args)
    _check_events(cascade, tokens, chains, max_events)
    b = as_int(args.batch, "--batch", low=1, high=MAX_SIM_BATCH)
    pred = predict_batch(cascade, b)
    res = simulate_serving(cascade, b, tokens, seed, chains=chains)
    if args.json:
        print(dump_json(serving_report(cascade, res, pred)))
        return 0
    s = res.speedup

    def f(x):
        return "-" if x is None else f"{x:.4f}"

    lines = [
        f"cascade {cascade.name!r}: {cascade.n} models, batch {b} (lockstep, B0), policy "
        f"{res.policy}",
        f"simulated {res.tokens} tokens in {res.chains} independent batches, seed {res.seed}",
        f"speedup  MC {s.value:.4f}  95% CI [{s.low:.4f}, {s.high:.4f}]   B2 exact "
        f"{pred.speedup:.4f}   unsynchronised P1 {pred.speedup_unsynchronised:.4f}",
        f"throughput MC {res.tokens_per_time.value:.6g}   B2 {pred.tokens_per_time:.6g} "
        "tokens per time unit (batch)",
        "",
        f"{'model':<12}{'E[max N] MC':>13}{'B2':>10}{'E[max G] MC':>13}{'B2':>10}"
        f"{'E[L] MC':>10}{'B2':>10}{'idle B2':>9}{'time %':>8}"]
    for ls, lp in zip(res.levels, pred.levels, strict=True):
        lines.append(
            f"{ls.name:<12}{f(ls.phi_batch and ls.phi_batch.value):>13}{f(lp.phi_batch):>10}"
            f"{f(ls.mean_max_block and ls.mean_max_block.value):>13}"
            f"{f(lp.mean_max_block):>10}{f(ls.mean_emitted and ls.mean_emitted.value):>10}"
            f"{f(lp.mean_emitted if lp.mean_block is not None else None):>10}"
            f"{f(lp.idle_share):>9}{100 * ls.time_share:>8.1f}")
    print("\n".join(lines))
    return 0


RUN = {"chain": _run_chain, "structured": _run_structured, "batch": _run_batch,
       "async": _run_async}


def _ceil_sig(x: float) -> str:
    """``x`` rounded up to two significant digits, as an option value (``3.5e+12``)."""
    if not math.isfinite(x):
        return "inf (the estimate overflows: this cascade cannot be simulated)"
    e = math.floor(math.log10(x)) - 1
    return f"{math.ceil(x / 10**e) * 10**e:.2g}"


def _duration(secs: float) -> str:
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.3g} h"
