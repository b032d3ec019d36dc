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
    """The JSON object printed by ``predict --json``."""
    from polyspec_theory.approximation import paper_approximation
    from polyspec_theory.bounds import phi_bounds
    from polyspec_theory.polybasic import predict
    from polyspec_theory.structured import has_structures, structured_report

    if has_structures(cascade):  # trees / schedules: no threshold bounds or Lemma 3.1
        return structured_report(cascade)
    pred = predict(cascade)
    out = {"config": cascade.to_config(), **pred.to_dict(),
           "time_base": cascade.time_unit or "model-cost units",
           "baseline": "autoregressive target: T_1(1) per token (no per-round overhead)"}
    for i in range(1, cascade.n):
        below = pred.levels[i].emitted_pmf
        out["levels"][i]["phi_bounds"] = phi_bounds(below, cascade.thresholds[i - 1]).to_dict()
    out["approximation"] = paper_approximation(cascade, pred).to_dict()
    return out


def _structured_text(cascade) -> bool:
    """Trees, schedules or tree/confidence laws: explained by polyspec_theory.structured."""
    from polyspec_theory.schedule import ConfidenceLaw
    from polyspec_theory.structured import has_structures
    from polyspec_theory.trees import TreeLaw

    return has_structures(cascade) or any(
        isinstance(law, TreeLaw | ConfidenceLaw) for law in cascade.laws)


def run(args) -> int:
    from polyspec.api import load_cascade
    from polyspec_theory.approximation import paper_approximation
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.explain import explain_prediction
    from polyspec_theory.polybasic import predict
    from validation.files import dump_json

    cascade = load_cascade(args.config)
    if cascade.mode == "async":
        from ._async import async_report, async_text

        if args.batch is not None:
            raise PolyspecInputError("--batch", 'the serving-batch theory is synchronous; '
                                     'it does not cover "mode": "async"')
        rep = async_report(cascade)
        print(dump_json(rep) if args.json else async_text(rep))
        return 0
    if args.batch is not None:
        from . import _serving

        return _serving.run_predict(args, cascade)
    if args.json:
        print(dump_json(prediction_report(cascade)))
    elif _structured_text(cascade):
        from polyspec_theory.structured import explain_structured, predict_structured

        print(explain_structured(cascade, predict_structured(cascade)))
    else:
        pred = predict(cascade)
        print(explain_prediction(cascade, pred, paper_approximation(cascade, pred)))
    return 0
