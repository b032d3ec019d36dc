"""Command-line entry points for the GPU trace formats (called from ``polyspec fit``,
``validate``, ``forecast --lookahead`` and ``plan --traces`` before their own detection)."""

from __future__ import annotations

import os

from polyspec_theory.errors import PolyspecInputError
from validation.files import dump_json


def detect_file(path) -> str | None:
    """``"pipespec"``, ``"specbench"`` or None (not ours)."""
    from .pipespec import looks_like_pipespec
    from .specbench import is_specbench_file

    if not os.path.isfile(path):
        return None
    if str(path).endswith(".jsonl"):
        return "specbench" if is_specbench_file(path) else None
    if str(path).endswith(".json"):
        try:
            with open(path, encoding="utf-8") as fh:
                head = fh.read(4096)
        except (OSError, UnicodeDecodeError):
            return None
        if '"metadata"' in head and '"model_configs"' in head:
            return "pipespec"
        from .pipespec import load_json_file

        try:
            return "pipespec" if looks_like_pipespec(load_json_file(path)) else None
        except PolyspecInputError:
            return None
    return None


def detect_dir(path) -> str | None:
    if not os.path.isdir(path):
        return None
    kinds = {detect_file(os.path.join(path, n)) for n in os.listdir(path)}
    kinds.discard(None)
    return kinds.pop() if len(kinds) == 1 else None


def _pair_report(run, j) -> dict:
    import numpy as np

    acc = np.concatenate([s.accepted[j] for s in run.samples])
    k = run.lookahead
    drafted = None
    if run.strategy == "chain" and j == 0:  # the smallest model logs one entry per draft step
        drafted = sum(len(s.model_times[0]) for s in run.samples) / acc.size
    rep = {"verifier": run.models[j + 1].name, "drafter": run.models[j].name,
           "rounds": int(acc.size), "accepted": int((acc - 1).sum()),
           "mean_accepted": float((acc - 1).mean()), "drafted_per_round": drafted,
           "mean_acceptance_length": float(acc.mean()), "cap": k - 1 if k >= 2 else None,
           "histogram": np.bincount(acc - 1, minlength=max(k, 1)).tolist()}
    if run.strategy == "chain" and len(run.models) == 2 and k >= 2:
        from .chain import fit_age_hazard, round_exposures

        law = fit_age_hazard([round_exposures(run)])
        rep["age_hazard"] = {"hazard": list(law.hazard), "tail": law.tail}
    return rep


def fit_report(path) -> dict:
    kind = detect_file(path)
    if kind == "specbench":
        from .specbench import read_answers

        f = read_answers(path)
        if f.is_baseline:
            raise PolyspecInputError(str(path), f"{f.method!r} is an autoregressive baseline "
                                     "(every round accepts 1 token): nothing to fit")
        from .specbench import fit_report as sb

        return sb(f)
    from .pipespec import read_pipespec

    run = read_pipespec(path)
    if run.is_baseline:
        raise PolyspecInputError(str(path), "a greedy (autoregressive) baseline: nothing to "
                                 "fit; pass a chain or async-chain file")
    pairs = [_pair_report(run, j) for j in range(len(run.models) - 1)]
    warnings = []
    if run.strategy == "async-chain":
        warnings.append("asynchronous pipeline: a verify call takes whatever the drafter has "
                        "produced, so the draft length varies by call")
    top = {k: v for k, v in pairs[-1].items() if k not in ("verifier", "drafter")}
    return {"format": f"pipespec-{run.strategy}", "format_description":
            "PipeSpec benchmark JSON (model_times, accepted_tokens per verify call)",
            "source": run.label, "models": list(run.names),
            "precisions": [m.precision for m in run.models], "lookahead": run.lookahead,
            **top, "pairs": pairs, "warnings": warnings}


def run_fit(path, as_json: bool) -> int:
    rep = fit_report(path)
    if as_json:
        print(dump_json(rep))
        return 0
    print(f"{path}: {rep['format_description']} [{rep['format']}]")
    print(f"  {rep.get('source', '')}")
    print(f"  pooled: {rep['rounds']} rounds, mean acceptance length "
          f"{rep['mean_acceptance_length']:.4f} (bonus token included)")
    for p in rep.get("pairs", []):
        print(f"    {p['drafter']} -> {p['verifier']}: {p['rounds']} verify calls, mean "
              f"acceptance length {p['mean_acceptance_length']:.4f}")
    for w in rep["warnings"]:
        print(f"  warning: {w}")
    return 0


def run_validate(directory, as_json: bool, costs_from=None) -> int:
    kind = detect_dir(directory)
    if costs_from is not None and kind != "specbench":
        raise PolyspecInputError("--costs-from", "only for a Spec-Bench answer folder")
    if costs_from is not None and detect_dir(costs_from) != "specbench":
        raise PolyspecInputError("--costs-from", f"{costs_from} is not a Spec-Bench answer "
                                 "folder")
    if kind == "specbench":
        from .specbench import validate_specbench

        rep = validate_specbench(directory, costs_from=costs_from)
        rep["comparison_proportional"] = {
            k: v for k, v in validate_specbench(directory, proportional=True, n_boot=1,
                                                costs_from=costs_from).items()
            if k == "per_method"}
    else:
        import numpy as np

        from .forecast import leave_one_out, require_baselines
        from .pipespec import read_pipespec_dir

        runs = read_pipespec_dir(directory)
        missing = require_baselines(runs, directory)
        configs = leave_one_out(runs)
        if not configs:
            why = "".join(f"; chains into {m} have no greedy baseline" for m in missing)
            raise PolyspecInputError(str(directory), "no synchronous cascade run whose pairs "
                                     f"appear in other runs: nothing to forecast{why}")
        e = np.abs([c["error"] for c in configs])
        rep = {"format": "pipespec", "configs": configs, "median_abs_error":
               float(np.median(e)), "max_abs_error": float(e.max()),
               "headline": "leave-one-out",
               "notes": [f"chains into {m} not forecast: no greedy baseline of {m} "
                         "(greedy_<model>.json)" for m in missing]}
    if as_json:
        print(dump_json(rep))
        return 0
    for c in rep["configs"]:
        print(f"  {c['name']}: predicted {c['predicted_speedup']:.3f}, measured "
              f"{c['measured_speedup']:.3f} ({100 * c['error']:+.2f} %)")
    for m, how in rep.get("held_out", {}).items():
        print(f"  {m}: {how}" if how.startswith("in-sample") else
              f"  {m}: costs held out by {how}")
    print(f"median |error| {100 * rep['median_abs_error']:.2f} %, max "
          f"{100 * rep['max_abs_error']:.2f} % [{rep['headline']}]")
    for n in rep.get("notes", []):
        print(f"note: {n}")
    return 0


def parse_dtypes(text) -> dict[str, str]:
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise PolyspecInputError("--dtype", f"expected MODEL=DTYPE, got {part!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if not k or not v:
            raise PolyspecInputError("--dtype", f"expected MODEL=DTYPE, got {part!r}")
        out[k] = v
    return out


def run_forecast(traces, models_target_first: str, lookahead, dtypes, mode, as_json) -> int:
    from .forecast import forecast_dir

    if mode not in (None, "sync", "async"):
        raise PolyspecInputError("--mode", f"must be 'sync' or 'async', got {mode!r}")
    names = [m.strip() for m in models_target_first.split(",") if m.strip()]
    if len(names) < 2:
        raise PolyspecInputError("--models", "needs at least two models, target first")
    unknown = sorted(set(parse_dtypes(dtypes)) - set(names))
    if unknown:
        raise PolyspecInputError("--dtype", f"names {', '.join(unknown)}, not one of the "
                                 f"--models {', '.join(names)}")
    if mode == "async":  # docs/theory.md Part VI-AS
        from .async_forecast import forecast_async_dir

        out = forecast_async_dir(traces, tuple(reversed(names)), lookahead,
                                 parse_dtypes(dtypes))
    else:
        out = forecast_dir(traces, tuple(reversed(names)), lookahead, parse_dtypes(dtypes))
    import sys

    for w in out.get("warnings", []):
        print(f"polyspec forecast: warning: {w}", file=sys.stderr)
    if as_json:
        print(dump_json(out))
        return 0
    iv = out["interval95"]
    names = list(reversed(out.get("models_resolved", names[::-1])))
    prec = ", ".join(out["precisions"][m] for m in names)
    print(f"{' <- '.join(names)} lookahead {out['lookahead']} ({prec}): forecast speedup "
          f"{out['speedup']:.3f}, " + ("no 95 % interval (see the warning)" if iv is None
                                       else f"95 % interval [{iv[0]:.3f}, {iv[1]:.3f}]"))
    lo, hi = out.get("cost_interval") or iv
    iv = iv or [lo, hi]
    pos = (out["speedup"] - iv[0]) / (iv[1] - iv[0]) if iv[1] > iv[0] else 0.5
    if pos < 0.15 or pos > 0.85:  # say why before the sources, not among them
        why = [x for x in out["cost_source"] if "interval:" in x] or out["cost_source"]
        print(f"  the point sits near the {'bottom' if pos < 0.15 else 'top'} of its "
              f"interval: the costs' range [{lo:.3f}, {hi:.3f}] is one-sided -- "
              + "; ".join(why))
    for line in out["acceptance_source"] + out["cost_source"]:
        print(f"  {line}")
    return 0
    for r in out["chains"]:
        iv = r["interval95"]
        print(f"  {' <- '.join(reversed(r['models']))} lookahead {r['lookahead']}: "
              f"{r['speedup']:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]")
    for v in out["third_model"]:
        verdict = "pays" if v["third_model_pays"] else "does not pay"
        print(f"third model for {v['target']}: {verdict} ({v['why']})")
    return 0
