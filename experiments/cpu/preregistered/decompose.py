"""Round 1's forecast errors split into acceptance, forward counts, in-cascade forward time,
overhead and the AR baseline (validation.analysis.bias), from each capture's own records:
    python experiments/cpu/preregistered/decompose.py [--json]
Each forecast is recomputed as it was made: acceptance and overhead from the captures that
existed before round 1 (the nine round-1 captures left out), costs from its profile.
    python experiments/cpu/preregistered/decompose.py --trees | --batches | --round2
the same for the token-tree captures (data/traces/trees) and the batched captures
(data/traces/cpu-batch: T(b, m) in the lockstep loop), each forecast from the others
(validation.analysis.forecast_kinds); --round2: round 2's captured chains against their
committed forecasts (measured on the first 8 prompts, forecast over 24)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "data" / "traces" / "cpu" / "preregistered"
sys.path.insert(0, str(ROOT))

from polyspec.research import (  # noqa: E402
    TERMS,
    decompose_forecast,
    forecast_capture,
    load_profiles,
    read_traces,
)


def trees() -> list[dict]:
    from types import SimpleNamespace

    from polyspec.research import forecast_structured, spec_of

    caps = read_traces(HERE.parents[1] / "trees")
    rows = []
    for c in caps:
        spec = spec_of(c)
        fc = SimpleNamespace(**forecast_structured(spec, caps))
        others = [x for x in caps if x.name != c.name]
        own = SimpleNamespace(**forecast_structured(spec, others, cost_captures=others,
                                                    law_captures=[c]))
        d = decompose_forecast(fc, c, own=own)
        d["committed_forecast"] = d["fixed_forecast"] = fc.speedup  # no count correction
        d["name"] = f"{c.name} ({c.trees[-1].n_nodes} nodes)"
        rows.append(d)
    return rows


def batches() -> list[dict]:
    """Batched captures (data/traces/cpu-batch), each forecast from the others (the
    predictive variant): per sequence token, ``b`` x batched forwards per decode token."""
    from types import SimpleNamespace

    from polyspec.research import forecast_batch, read_batch_traces, spec_of
    from polyspec.research import load_batch_profile as load_profile

    bdir = HERE.parents[1] / "cpu-batch"
    caps = read_batch_traces(bdir)
    laws = read_traces(HERE.parent)
    prof = load_profile(bdir / "profile.json")
    rows = []
    for c in caps:
        spec = spec_of(c)
        fc = SimpleNamespace(**forecast_batch(spec, caps, laws, prof))
        own = SimpleNamespace(**forecast_batch(spec, caps, laws, prof, law_sources=[c]))
        per_seq = SimpleNamespace(
            name=c.name, models=c.models, tokens=c.tokens / c.batch,
            forward_count=c.forward_count, forward_s=c.forward_s, overhead_s=c.overhead_s,
            ar_time_per_token=c.ar_step_s, measured_speedup=c.measured_speedup)
        d = decompose_forecast(fc, per_seq, own=own)
        d["committed_forecast"] = d["fixed_forecast"] = fc.speedup
        rows.append(d)
    return rows


def round2() -> list[dict]:
    """Round 2's captured chains (preregistered-2/captures), each forecast recomputed as
    committed (all committed captures, count correction, its round-2 profile)."""
    from polyspec.research import (
        CompositionProfile,
        Config,
        count_factors,
        forecast,
        read_config,
    )

    r2 = HERE.parent / "preregistered-2"
    caps = read_traces(HERE.parent)
    rows = []
    for f in sorted((r2 / "captures").glob("*.jsonl")):
        pf = r2 / "profiles" / f"{f.stem}.json"
        if not pf.is_file():
            continue
        try:
            c = read_traces_file(f)
        except Exception:  # noqa: BLE001 (a capture still being written)
            continue
        prof = CompositionProfile.from_dict(read_config(pf), str(pf))
        fc = forecast(Config(c.models, c.thresholds, c.temperature), caps, prof.cost_curves(),
                      prof.ar_s, count_factor=count_factors(c.n, c.temperature, caps))
        d = decompose_forecast(fc, c, prof)
        d["committed_forecast"] = d["fixed_forecast"] = fc.speedup
        rows.append(d)
    return rows


def read_traces_file(path):
    from polyspec.research import read_trace

    return read_trace(path)


def main() -> int:
    if "--round2" in sys.argv[1:]:
        return show(round2())
    if "--trees" in sys.argv[1:]:
        return show(trees())
    if "--batches" in sys.argv[1:]:
        return show(batches())
    rec = [json.loads(x) for x in (HERE / "forecasts.jsonl").read_text().splitlines()]
    names = {r["name"] for r in rec}
    caps = read_traces(HERE.parent)
    before = [c for c in caps if c.name not in names]
    profs = load_profiles(HERE.parent / "profiles", caps)
    rows = []
    for r in rec:
        c = next(c for c in caps if c.name == r["name"])
        fc = forecast_capture(c, before, profs[c.name], count_factor=np.ones(c.n))
        d = decompose_forecast(fc, c, profs[c.name])
        d["committed_forecast"] = r["speedup"]
        d["fixed_forecast"] = forecast_capture(c, before, profs[c.name]).speedup
        rows.append(d)
    return show(rows)


def show(rows) -> int:
    if "--json" in sys.argv[1:]:
        print(json.dumps(rows, indent=1))
        return 0
    print("| configuration | committed | recomputed | measured | log error | "
          + " | ".join(TERMS) + " | dominant |")
    print("|---" * (6 + len(TERMS)) + "|")
    for d in rows:
        print(f"| {d['name']} | {d['committed_forecast']:.3f} | {d['forecast']:.3f} | "
              f"{d['measured']:.3f} | {100 * d['log_error']:+.1f} % | "
              + " | ".join(f"{100 * d['terms'][t]:+.1f} %" for t in TERMS)
              + f" | {d['dominant']} |")
    tm = {t: [d["terms"][t] for d in rows] for t in TERMS}
    fe = np.array([d["fixed_forecast"] / d["measured"] - 1 for d in rows])
    print("\nwith the count correction learned on the other captures: median |error| "
          f"{100 * np.median(np.abs(fe)):.2f} %, max {100 * np.abs(fe).max():.2f} %, mean "
          f"{100 * fe.mean():+.2f} % (" + ", ".join(f"{100 * e:+.1f}" for e in fe) + ")")
    print("\nmean term (% of log speedup): " + ", ".join(
        f"{t} {100 * np.mean(v):+.2f}" for t, v in tm.items()))
    print("median term: " + ", ".join(f"{t} {100 * np.median(v):+.2f}" for t, v in tm.items()))
    print("\nper model, seconds per forward (forecast profile / measured in the capture):")
    for d in rows:
        print(f"  {d['name']}: " + ", ".join(
            f"{m} {1e3 * v['seconds_per_forward']['forecast']:.3f}/"
            f"{1e3 * v['seconds_per_forward']['measured']:.3f} ms"
            for m, v in d["models"].items())
              + f"; AR {1e3 * d['ar_s']['forecast']:.3f}/{1e3 * d['ar_s']['measured']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
