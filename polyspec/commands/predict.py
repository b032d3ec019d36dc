"""``polyspec predict CONFIG``: exact theory (P1) for any cascade."""

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


def prediction_report(cascade) -> dict:
    """The JSON object printed by ``predict --json`` for a chain or a structured cascade."""
    from polyspec_theory.schemes import handler, scheme_of

    return handler(_REPORTS, scheme_of(cascade), "predict_report")(cascade)


def _chain_report(cascade) -> dict:
    from polyspec_theory.bounds.approximation import paper_approximation
    from polyspec_theory.bounds.tails import phi_bounds
    from polyspec_theory.core.p1 import predict_chain

    pred = predict_chain(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    for i in range(1, cascade.n):
        below = pred.levels[i].emitted_pmf
        out["levels"][i]["phi_bounds"] = phi_bounds(below, cascade.thresholds[i - 1]).to_dict()
    out["approximation"] = paper_approximation(cascade, pred).to_dict()
    return out


def _structured_report(cascade) -> dict:
    # trees / schedules: no threshold bounds or Lemma 3.1
    from polyspec_theory.structures.structured import structured_report

    return structured_report(cascade)


def _law_explained_structured(cascade) -> bool:
    """Tree or confidence laws on a chain: explained by polyspec_theory.structures.structured."""
    from polyspec_theory.structures.schedule import ConfidenceLaw
    from polyspec_theory.structures.trees import TreeLaw

    return any(isinstance(law, TreeLaw | ConfidenceLaw) for law in cascade.laws)


def _run_chain(args, cascade) -> int:
    from polyspec_theory.bounds.approximation import paper_approximation
    from polyspec_theory.core.explain import explain_prediction
    from polyspec_theory.core.p1 import predict_chain
    from validation.files import dump_json

    if args.json:
        print(dump_json(_chain_report(cascade)))
    elif _law_explained_structured(cascade):
        _print_structured(cascade)
    else:
        pred = predict_chain(cascade)
        print(explain_prediction(cascade, pred, paper_approximation(cascade, pred)))
    return 0


def _print_structured(cascade) -> None:
    from polyspec_theory.structures.structured import explain_structured, predict_structured

    print(explain_structured(cascade, predict_structured(cascade)))


def _run_structured(args, cascade) -> int:
    from validation.files import dump_json

    if args.json:
        print(dump_json(_structured_report(cascade)))
    else:
        _print_structured(cascade)
    return 0


def _run_batch(args, cascade) -> int:
    from . import serving_batch

    return serving_batch.run_predict(args, cascade)


def _run_async(args, cascade) -> int:
    from validation.files import dump_json

    from .async_modes import async_report, async_text

    rep = async_report(cascade)
    print(dump_json(rep) if args.json else async_text(rep))
    return 0


_REPORTS = {"chain": _chain_report, "structured": _structured_report}
RUN = {"chain": _run_chain, "structured": _run_structured, "batch": _run_batch,
       "async": _run_async}


def run(args) -> int:
    from polyspec.api import load_cascade
    from polyspec_theory.schemes import handler, scheme_of

    cascade = load_cascade(args.config)
    return handler(RUN, scheme_of(cascade, args.batch, batch_field="--batch"),
                   "polyspec predict")(args, cascade)
