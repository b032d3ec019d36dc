"""The planner's decisions with their uncertainty (what ``polyspec plan --traces
data/traces/cpu --temperature T --json`` reports under ``uncertainty``), from the committed
pools of round 2 (pool0.json, pool1.json: written by that command), and whether each is
confirmed by the captures that measured its candidates:
    python experiments/cpu/preregistered-2/decisions.py [--draws N]
A decision is confirmed when the planned candidate has the largest measured speedup among
the candidates that were captured (round 1 and 2 captures included)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "data" / "traces" / "cpu" / "preregistered-2"
sys.path.insert(0, str(ROOT))

from polyspec.research import (  # noqa: E402
    Draws,
    PolyspecInputError,
    Pool,
    is_batched_file,
    load_profiles,
    plan,
    plan_decisions,
    read_trace,
    read_traces,
)


def main() -> int:
    draws = int(sys.argv[sys.argv.index("--draws") + 1]) if "--draws" in sys.argv else 400
    caps = read_traces(HERE.parent)
    profs = load_profiles(HERE.parent / "profiles", caps)
    aa = HERE.parent / "aa"
    aa_caps = read_traces(aa) if any(aa.glob("*.jsonl")) else []
    measured = {(c.models, c.thresholds, c.temperature): c.measured_speedup for c in caps}
    for f in sorted((HERE / "captures").glob("*.jsonl")):
        try:
            c = read_trace(f)
        except PolyspecInputError:  # a capture still running
            continue
        if not c.structured and not is_batched_file(f):
            measured.setdefault((c.models, c.thresholds, c.temperature), c.measured_speedup)
    for temp, f in ((0.0, "pool0.json"), (1.0, "pool1.json")):
        pool = Pool.from_config(json.loads((HERE / f).read_text()))
        res = plan(pool, 5)
        unc = plan_decisions(res, pool, caps, profs, aa_caps, temperature=temp, top=6,
                             draws=Draws(draws))
        nf = unc["noise_floor"]
        print(f"T = {temp:g} (noise floor "
              + (f"{100 * nf['relative_sd']:.1f} % from {nf['dof']} A/A dof" if nf else "none")
              + ")")
        meas = {}
        for c in unc["candidates"]:
            key = (tuple(c["chain"]), tuple(c["thresholds"]), temp)
            m = measured.get(key)
            meas[key] = m
            lo, hi = c["interval95"]
            print(f"  {' <- '.join(c['chain'])} {c['thresholds']}: {c['speedup']:.3f} "
                  f"[{lo:.3f}, {hi:.3f}] p_best {c['probability_best']:.2f} {c['decision']}; "
                  + ("not captured" if m is None else f"measured {m:.3f}"))
        top = unc["candidates"][0]
        got = {k: v for k, v in meas.items() if v is not None}
        key0 = (tuple(top["chain"]), tuple(top["thresholds"]), temp)
        if key0 in got and len(got) > 1:
            ok = got[key0] == max(got.values())
            print(f"  decision {top['decision']}: the planned cascade measured "
                  + ("the best" if ok else "NOT the best") + f" of {len(got)} captured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
