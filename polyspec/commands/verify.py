"""``polyspec verify``: Monte-Carlo check of every numbered result (D1, D2, P1–P7, Y1–Y5,
F1, F2, B1, B2, T1–T5, A1, A2, A4, R1, AS1, AS2, AS7; a scheme's own rows come with its
simulator, :mod:`simulators.schemes`). Exit status 1 if any check fails."""

from __future__ import annotations

from .common import add_cpu_devices_argument

HELP = ("Check every numbered result (D1, D2, P1-P7, Y1-Y5, F1, F2, B1, B2, T1-T5, A1, A2, "
        "A4, R1, AS1, AS2, AS7; docs/theory.md) against the "
        "Monte-Carlo simulators; exit status 1 if any fails.")


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="CI-sized runs (about a minute on 2 CPU cores; the full run is "
                        "longer)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed")
    p.add_argument("--only", default=None, metavar="KEYS",
                   help="comma-separated groups of checks to run (D, P1, P1o, P2, ..., R, AS; "
                   "default: all); each group's rows are those of the full run")
    add_cpu_devices_argument(p)
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of checks (each with id, passed, ...)")
    p.add_argument("--departure", action="store_true",
                   help="also report how far context-correlated acceptance departs from P1")


def run(args) -> int:
    import sys

    from polyspec_theory.errors import as_int
    from simulators.runtime import use_cpu_cores
    from simulators.verify import context_departure, format_table, run_checks

    from ..output import dump_json

    seed = as_int(args.seed, "seed", low=0, high=2**31 - 1)
    use_cpu_cores(args.cpu_devices)

    def progress(i, n, key):
        if not args.json and sys.stderr.isatty():
            print(f"\r[{i}/{n}] {key}   ", end="", file=sys.stderr, flush=True)

    only = None
    if args.only is not None:
        from polyspec_theory.errors import PolyspecInputError
        from simulators.verify import REGISTRY

        keys = [k for k, _ in REGISTRY]
        only = [x.strip() for x in args.only.split(",") if x.strip()]
        bad = [x for x in only if x not in keys]
        if bad or not only:
            raise PolyspecInputError("--only", f"unknown group {bad[0]!r}; known: "
                                     f"{', '.join(keys)}" if bad else "names no group")
    rows = run_checks(quick=args.quick, seed=seed, only=only, progress=progress)
    if not args.json and sys.stderr.isatty():
        print("\r", end="", file=sys.stderr)
    if args.json:
        print(dump_json([r.to_dict() for r in rows]))
    else:
        print(format_table(rows))
        if args.departure:
            d = context_departure(quick=args.quick, seed=seed)
            print()
            print("Context-correlated acceptance (token level, 3-level Markov-LM cascade) vs P1 "
                  "fed the laws fitted to the same rounds:")
            print(f"  MC speedup {d['mc_speedup']:.4f}  95% CI "
                  f"[{d['mc_ci95'][0]:.4f}, {d['mc_ci95'][1]:.4f}]")
            for fam, v in d["fits"].items():
                lo, hi = v["relative_departure_ci95"]
                print(f"  P1 with fitted {fam:<10} {v['p1_speedup']:.4f}   departure "
                      f"{100 * v['relative_departure']:+.2f}% (95% CI {100 * lo:+.2f}%, "
                      f"{100 * hi:+.2f}%)")
    return 0 if all(r.passed for r in rows) else 1
