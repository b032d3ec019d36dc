"""``polyspec demo``: the main job of ``make demo`` — predict, simulate, verify, draw figures
on the default configuration, writing everything under ``--out``."""

from __future__ import annotations

from pathlib import Path

HELP = ("Run the demo: exact prediction, Monte-Carlo simulation, the quick verification of "
        "every theorem, and a subset of the figures, on the default cascade.")

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.json"
DEMO_FIGURES = (1, 3, 5, 6, 8)


def add_arguments(p):
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="cascade config (default: configs/default.json)")
    p.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    p.add_argument("--tokens", type=int, default=400_000, help="tokens to simulate")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed")
    p.add_argument("--skip-figures", action="store_true", help="do not draw figures")


def _section(title: str) -> None:
    print(f"\n{'=' * 8} {title} {'=' * (70 - len(title))}", flush=True)


def run(args) -> int:
    from polyspec.api import load_cascade
    from polyspec_theory.errors import as_int
    from polyspec_theory.schemes import get, predict

    from ..output import atomic_write_text, dump_json

    tokens = as_int(args.tokens, "tokens", low=1_000, high=10**10)
    seed = as_int(args.seed, "seed", low=0, high=2**31 - 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cascade = load_cascade(args.config)

    _section("1. predict (exact theory, P1)")
    pred = predict(cascade)
    print(get(cascade.scheme).explain(cascade))
    atomic_write_text(out / "predict.json", dump_json(get(cascade.scheme).report(cascade)))

    _section("2. simulate (length-level JAX Monte Carlo)")
    from simulators.runtime import use_cpu_cores
    from simulators.schemes import Budget, get_simulator

    use_cpu_cores()

    sim = get_simulator(cascade)
    result = sim.simulate(cascade, Budget(tokens=tokens), seed)
    print(sim.explain(cascade, result))
    inside = result.speedup.low <= pred.speedup <= result.speedup.high
    print(f"\nP1 {'inside' if inside else 'OUTSIDE'} the simulator's 95% CI.")
    atomic_write_text(out / "simulate.json", dump_json(sim.report(cascade, result)))

    _section("3. verify --quick (every numbered result against Monte Carlo)")
    from simulators.verify import format_table, run_checks

    rows = run_checks(quick=True, seed=seed)
    print(format_table(rows))
    atomic_write_text(out / "verify.json", dump_json([r.to_dict() for r in rows]))
    failed = [r.id for r in rows if not r.passed]

    if not args.skip_figures:
        _section("4. figures")
        from paper_figures import build_all

        built = build_all(out / "figures", subset=list(DEMO_FIGURES), progress=True)
        for num, paths in sorted(built.items()):
            print(f"  figure {num}: " + ", ".join(str(p) for p in paths))

    _section("done")
    print(f"predicted speedup {pred.speedup:.3f}x; simulated {result.speedup.value:.3f}x "
          f"[{result.speedup.low:.3f}, {result.speedup.high:.3f}]; "
          f"{len(rows) - len(failed)}/{len(rows)} checks passed; outputs in {out}/")
    if failed:
        print("FAILED checks: " + ", ".join(failed))
    return 1 if failed else 0
