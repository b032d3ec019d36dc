"""``polyspec predict CONFIG``: the exact theory of any cascade, in its scheme
(:mod:`polyspec_theory.schemes`: the scheme's ``report`` and ``explain``)."""

from __future__ import annotations

HELP = ("Predict the speedup of a cascade exactly (P1; \"mode\": \"async\": AS1) and explain "
        "where the time goes.")


def add_arguments(p):
    p.add_argument("config", help="cascade config (JSON or YAML)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch", metavar="B1,B2,...", default=None,
                   help="serving batch sizes (e.g. 1,2,4,8,16): synchronised batch theory "
                        "(docs/theory.md Part III-C): speedup, throughput and optimal thresholds "
                        "per batch, and the crossover batch")
    p.add_argument("--max-threshold", type=int, default=16,
                   help="with --batch: largest threshold searched for the optimum (default 16)")


def _options(batches=None, max_threshold: int = 16):
    from polyspec_theory.schemes import Options

    def estimate(cascade):  # where the exact theory gives no number (JAX loads only then)
        from simulators.schemes import estimate as mc

        return mc(cascade)

    return Options(estimate, None if batches is None else tuple(batches), max_threshold)


def run(args) -> int:
    from polyspec.api import load_cascade
    from polyspec_theory.core.config import MAX_THRESHOLD
    from polyspec_theory.errors import as_int
    from polyspec_theory.schemes import get

    from ..output import dump_json
    from .common import parse_batches

    cascade = load_cascade(args.config)
    batches = None
    if args.batch is not None:
        batches = parse_batches(args.batch)
        cascade = cascade.with_batch(batches[0], "--batch")
    options = _options(batches, as_int(args.max_threshold, "--max-threshold", low=1,
                                       high=MAX_THRESHOLD))
    scheme = get(cascade.scheme)
    print(dump_json(scheme.report(cascade, options)) if args.json
          else scheme.explain(cascade, options))
    return 0
