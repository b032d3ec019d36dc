"""``polyspec simulate CONFIG --tokens N --seed S``: the Monte Carlo of a cascade in its scheme
(:mod:`simulators.schemes`: the scheme's ``simulate``, ``report`` and ``explain``)."""

from __future__ import annotations

from polyspec_theory.errors import options_named

from .common import add_cpu_devices_argument, add_mode_argument

ANNOUNCE_EVENTS = 1e8  # estimates above this are announced on stderr
# events x verifying levels per second on a 2-core CPU (measured: 9e7 with 4 models, 7e7
# with 30), for the rough time announced; chains wait for the slowest, so it is a floor
LEVEL_EVENT_RATE = 7e7
# the Budget's fields as this command spells them (errors name the option)
SPELLING = (("tokens", "--tokens"), ("events", "--events"), ("chains", "--chains"),
            ("max_events", "--max-events"))

HELP = ("Simulate a cascade (length-level JAX Monte Carlo): speedup with a 95% CI, per-level "
        "phi, block/emitted histograms, forwards per token, next to the exact P1 prediction.")


def add_arguments(p):
    from simulators.schemes import DEFAULT_CHAINS, DEFAULT_EVENTS, DEFAULT_TOKENS

    p.add_argument("config", help="cascade config (JSON or YAML), as for `polyspec predict`")
    p.add_argument("--tokens", type=int, default=None,
                   help=f"tokens to simulate in total (default {DEFAULT_TOKENS:.0e}; schemes "
                        "counted in events (async) take --events, and refuse --tokens)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed (same seed -> same result)")
    p.add_argument("--chains", type=int, default=DEFAULT_CHAINS,
                   help=f"independent chains (spread over all devices; default {DEFAULT_CHAINS})")
    p.add_argument("--max-events", type=float, default=None,
                   help="refuse a run whose expected events (verification rounds: P1's "
                        "forwards per token of the verifying models x tokens; async: chains x "
                        "events) exceed this, and stop one that runs past twice as many "
                        "(default 1e9; async 1e8)")
    add_cpu_devices_argument(p)
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="simulate a lockstep serving batch of B sequences (docs/theory.md "
                        "Part III-C, B0; simulators/serving.py) against the exact B2 "
                        "prediction; --chains batches of B run in parallel")
    add_mode_argument(p, "run the cascade in this mode (sync: P1's rounds; async: the "
                         "asynchronous pipeline, simulators/asynchronous.py, docs/theory.md "
                         "Part VI-AS); default: the config's \"mode\"")
    p.add_argument("--events", type=int, default=None,
                   help="schemes counted in events (async): completed actions (forwards, "
                        f"verifies) per chain (default {DEFAULT_EVENTS}; refused by the other "
                        "schemes)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    import sys

    from polyspec.api import load_cascade
    from polyspec_theory.errors import as_int
    from polyspec_theory.schemes import in_mode
    from simulators.runtime import use_cpu_cores
    from simulators.schemes import DEFAULT_TOKENS, Budget, get_simulator

    from ..output import dump_json

    cascade = in_mode(load_cascade(args.config), args.mode, "--mode")
    if args.batch is not None:
        cascade = cascade.with_batch(args.batch, "--batch")
    sim = get_simulator(cascade)
    seed = as_int(args.seed, "seed", low=0, high=2**63 - 1)
    bar = (_progress_bar(DEFAULT_TOKENS if args.tokens is None else args.tokens)
           if not args.no_progress and sys.stderr.isatty() else None)
    # a size the scheme is not sized by (--tokens / --events) is refused, never ignored
    budget = Budget(args.tokens, args.events, args.chains, args.max_events,
                    bar and bar.update, SPELLING)
    budget.refuse_unused(sim)
    use_cpu_cores(args.cpu_devices)
    _announce(sim, cascade, budget)
    try:
        with options_named({"batch": "--batch"}):
            result = sim.simulate(cascade, budget, seed)
    finally:
        if bar is not None:
            bar.close()
    print(dump_json(sim.report(cascade, result)) if args.json
          else sim.explain(cascade, result))
    return 0


class _progress_bar:
    """A tqdm bar on stderr fed ``update(done, asked)``."""

    def __init__(self, tokens):
        import sys

        from tqdm import tqdm

        self.bar = tqdm(total=tokens, unit="tok", unit_scale=True, file=sys.stderr,
                        desc="simulate")

    def update(self, done, asked):
        self.bar.total = asked
        self.bar.n = min(done, asked)
        self.bar.refresh()

    def close(self):
        self.bar.close()


def _announce(sim, cascade, budget) -> None:
    """A run past ANNOUNCE_EVENTS events is announced on stderr with a rough duration."""
    import sys

    events = sim.work(cascade, budget)
    cap = budget.cap(sim.default_max_events)
    if ANNOUNCE_EVENTS < events <= cap:
        secs = events * (cascade.n - 1) / LEVEL_EVENT_RATE
        print(f"polyspec simulate: about {events:.3g} {sim.unit} to simulate over "
              f"{cascade.n - 1} verifying models (roughly {_duration(secs)} or more on a 2-core "
              f"CPU; limit --max-events {cap:.3g})", file=sys.stderr, flush=True)


def _duration(secs: float) -> str:
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.3g} h"



