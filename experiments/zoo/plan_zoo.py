"""P1 on the zoo before any capture: measured pair acceptance and per-model costs -> the
planner's best cascades, and the map of where a third model pays.

    python experiments/zoo/plan_zoo.py [--costs COSTS.json] [--acceptance data/zoo/plan_zoo.json]
                                [--out data/zoo/plan_zoo.json]

On an idle machine, profile first and reuse the committed acceptance:

    polyspec profile target draft-t mid small ngram:1 ngram:2 ngram:3 ngram:4 ngram:5 \
        --max-m 16 --repeats 7 --context 96 --threads 1 --unit ms --out costs.json
    python experiments/zoo/plan_zoo.py --acceptance data/zoo/plan_zoo.json --costs costs.json \
        --out plan.json

1. Acceptance of every (verifier, drafter) pair of the pool, teacher-forced
   (validation.zoo.distill.pair_acceptance): at T = 0 the greedy agreement on the target's
   greedy continuations of held-out prompts (64 bytes + 128 generated, as in a capture; on
   that text a greedy round accepts exactly the run of agreements), at T = 1 the mean
   1 - TV(p, q) on held-out text (speculative sampling's per-token acceptance).
2. Costs T(m), m = 1..16, of every model (validation.capture.profile.profile_models, 1 thread), or
   read from --costs (the JSON this script writes, or `polyspec profile --json` output).
3. The planner (polyspec_theory.planning.planner.plan, P1 exact) on the pool with iid laws at those
   acceptance rates: best cascade, best two-model cascade, best cascade of >= 3 models.
4. The map: for a drafter D of the target with acceptance a (target|D) and cost ratio
   c = T_D(1)/T_target(1), the gain of the best cascade using D (and the n-gram below it)
   over the best two-model cascade of the same pool — where a third model pays.

iid laws are what P1 needs from a single number per pair; on the zoo's text acceptance is
bursty and iid at the mean agreement over-predicts E[L] of the captured cascades by about
5-10 % (the same direction for every pair), see data/zoo/TRAINING.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from polyspec.research import (  # noqa: E402
    eval_windows,
    greedy_texts,
    load_split,
    next_byte_laws,
    plan,
    plan_thresholds,
)

NEURAL = ("target", "draft-t", "mid", "small")
NGRAMS = ("ngram:1", "ngram:2", "ngram:3", "ngram:4", "ngram:5")
PROMPT, NEW = 64, 128
MAP_ALPHAS = tuple(round(0.70 + 0.02 * i, 2) for i in range(15))  # 0.70 .. 0.98
MAP_RATIOS = (0.04, 0.06, 0.08, 0.10, 0.12, 0.15, 0.20, 0.25, 0.30)


def _law_source(name):
    from polyspec.research import NGramModel, load_gpt, zoo_dir

    if name.startswith("ngram"):
        return NGramModel.default(int(name.split(":")[1]) if ":" in name else 1)
    return load_gpt(zoo_dir() / f"{name}.safetensors")


def measure_acceptance(models, n_prompts=64, n_windows=64, log=print) -> dict:
    """{"T0": {"v|d": greedy agreement}, "T1": {"v|d": 1 - TV}} for every pair v above d."""
    val = load_split("val")
    src = {m: _law_source(m) for m in models}
    greedy_text = greedy_texts(src["target"], val, n_prompts, PROMPT, NEW)
    held = eval_windows(val, n_windows, 256)
    laws = {}
    for m in models:
        t0 = time.perf_counter()
        laws[m] = (next_byte_laws(src[m], greedy_text, PROMPT), next_byte_laws(src[m], held,
                                                                               PROMPT))
        log(f"laws of {m} ({time.perf_counter() - t0:.0f}s)")
    out = {"T0": {}, "T1": {}}
    for i, v in enumerate(models):
        for d in models[i + 1:]:
            pg, ph = laws[v]
            qg, qh = laws[d]
            out["T0"][f"{v}|{d}"] = float(np.mean(pg.argmax(-1) == qg.argmax(-1)))
            out["T1"][f"{v}|{d}"] = float(np.minimum(ph, qh).sum(-1).mean())
    out["setting"] = {"T0": f"greedy agreement on the target's greedy continuations "
                      f"({NEW} bytes) of {n_prompts} held-out prompts of {PROMPT} bytes",
                      "T1": f"mean 1 - TV on {n_windows} held-out windows of 256 bytes, "
                      f"contexts >= {PROMPT}"}
    return out


def measure_costs(models, repeats=7) -> dict:
    from polyspec.research import ProfileSpec, profile_models

    prof = profile_models(list(models), ProfileSpec(max_m=16, repeats=repeats, context=96,
                                                    threads=1))
    return {m: row["cost"]["table"] for m, row in zip(models, prof["models"], strict=True)}


def round_overhead_ms(traces_dir=ROOT / "data" / "traces" / "cpu") -> dict:
    """Median over the committed CPU captures of the decoder's time outside model forwards per
    verification round (all levels), per temperature: O1's ``o`` (docs/theory-overhead.md)."""
    per = {"T0": [], "T1": []}
    for f in sorted(Path(traces_dir).glob("*.jsonl")):
        temp, over, rounds = None, 0.0, 0
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r["type"] == "header":
                temp = "T0" if r["temperature"] == 0 else "T1"
            elif r["type"] == "summary":
                over += r["overhead_s"]
                rounds += sum(r["n_rounds"])
        if temp and rounds:
            per[temp].append(1e3 * over / rounds)
    return {k: float(np.median(v)) for k, v in per.items() if v}


def read_costs(path) -> dict:
    """Cost tables (ms) by model from this script's JSON (``costs_ms``) or from the output of
    ``polyspec profile MODELS --max-m 16 --unit ms --out FILE.json`` (keyed by the model
    names as given on its command line, e.g. ``ngram:3``)."""
    doc = json.loads(Path(path).read_text())
    if "costs_ms" in doc:
        return doc["costs_ms"]
    if doc.get("time_unit") != "ms":
        raise SystemExit(f"{path}: expected a profile in ms (--unit ms)")
    return {row["source"]: row["cost"]["table"] for row in doc["models"]}


def pool(models, costs, acc, max_threshold=16, overhead=0.0) -> dict:
    return {"name": "zoo", "models": [{"name": m, "cost": {"table": costs[m]},
                                       **({"overhead": overhead} if overhead else {})}
                                      for m in models],
            "acceptance": {k: {"alpha": min(v, 0.999)} for k, v in acc.items()},
            "max_threshold": max_threshold, "time_unit": "ms"}


def chain_table(pool_cfg, models) -> list[dict]:
    """P1 optimum of every two-model chain target <- X and every three-model chain
    target <- draft-t <- n-gram, each at its own best thresholds, best first."""
    chains = [("target", x) for x in models[1:]]
    chains += [("target", "draft-t", n) for n in models if n.startswith("ngram")]
    rows = [plan_thresholds(pool_cfg, c).to_dict() for c in chains]
    return sorted(rows, key=lambda r: -r["speedup"])


def capture_command(row, temp) -> str:
    return (f"polyspec capture --models {','.join(row['chain'])} --thresholds "
            f"{','.join(str(t) for t in row['thresholds'])} --temperature {temp[1]} "
            "--prompts 12 --tokens 128 --prompt-len 64 --threads 1 --seed 0 "
            "--out data/traces/cpu --resume")


def best_deep(p):
    deep = [c for c in (p.best, *p.alternatives) if len(c.chain) >= 3]
    return max(deep, key=lambda c: c.speedup) if deep else None


def third_model_map(costs, acc_t0, ngram="ngram:4", d_shape=None,
                    alphas=MAP_ALPHAS, ratios=MAP_RATIOS,
                    d_ngram=None, overhead=0.0) -> dict:
    """Gain (%) of the best cascade containing a drafter D over the best two-model cascade,
    on the pool {target, D, n-gram}: D with acceptance a (target|D), cost ratio c and the
    cost shape ``d_shape`` (T_D(m)/T_D(1)); the n-gram's measured acceptance and cost."""
    t1 = costs["target"][0]
    shape = d_shape or [1.0 + 0.03 * j for j in range(16)]
    a_tn = acc_t0[f"target|{ngram}"]
    a_dn = d_ngram if d_ngram is not None else a_tn
    rows = []
    for a in alphas:
        row = []
        for c in ratios:
            pl = plan(pool(["target", "D", ngram],
                           {"target": costs["target"], "D": [c * t1 * s for s in shape],
                            ngram: costs[ngram]},
                           {"target|D": float(a), f"target|{ngram}": a_tn,
                            f"D|{ngram}": a_dn}, overhead=overhead), top=3, greedy=False)
            deep = best_deep(pl)
            row.append(round(100 * (deep.speedup / pl.best_two_model.speedup - 1), 1)
                       if deep else None)
        rows.append(row)
    return {"alphas": [float(a) for a in alphas], "ratios": list(ratios), "gain_pct": rows,
            "ngram": ngram, "alpha_target_ngram": a_tn, "alpha_D_ngram": a_dn,
            "overhead_ms": overhead}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--costs", default=None, help="cost tables: this script's JSON or a "
                    "`polyspec profile ... --max-m 16 --out FILE.json` output (default: "
                    "profile now)")
    ap.add_argument("--acceptance", default=None, help="acceptance JSON (default: measure)")
    ap.add_argument("--out", default=str(ROOT / "data" / "zoo" / "plan_zoo.json"))
    ap.add_argument("--prompts", type=int, default=64)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    models = [*NEURAL, *NGRAMS]
    if args.acceptance:
        acc = json.loads(Path(args.acceptance).read_text())["acceptance"]
    else:
        acc = measure_acceptance(models, n_prompts=args.prompts)
    if args.costs:
        costs = read_costs(args.costs)
    else:
        costs = measure_costs(models)
    over = round_overhead_ms()
    result = {"acceptance": acc, "costs_ms": costs, "overhead_ms": over,
              "overhead_note": "per verification round, median of the committed CPU traces "
              "(data/traces/cpu) per temperature; P1 with O1 (docs/theory-overhead.md)",
              "costs_note": "T(m) in ms, m = 1..16, 1 torch thread, context 96, median of "
              "repeats; measured on a shared, loaded 2-core CPU: indicative only",
              "plans": {}}
    for temp in ("T0", "T1"):
        pool_cfg = pool(models, costs, acc[temp], overhead=over[temp])
        pl = plan(pool_cfg, top=12, greedy=False)
        deep = best_deep(pl)
        table = chain_table(pool_cfg, models)
        result["plans"][temp] = {"overhead_ms": over[temp], "best": pl.best.to_dict(),
                                 "best_two_model": pl.best_two_model.to_dict(),
                                 "best_three_plus": deep.to_dict() if deep else None,
                                 "alternatives": [c.to_dict() for c in pl.alternatives],
                                 "chains": table}
        print(f"{temp}: best {pl.best.chain} {pl.best.thresholds} {pl.best.speedup:.3f}x; "
              f"best two-model {pl.best_two_model.chain} {pl.best_two_model.thresholds} "
              f"{pl.best_two_model.speedup:.3f}x" + (
                  f"; best >= 3 {deep.chain} {deep.thresholds} {deep.speedup:.3f}x"
                  if deep else ""))
        for row in table:
            print(f"   {row['speedup']:.3f}x  {capture_command(row, temp)}")
    d_shape = [x / costs["draft-t"][0] for x in costs["draft-t"]]
    best_ng = max(NGRAMS, key=lambda n: acc["T0"][f"target|{n}"])
    result["map_T0"] = third_model_map(costs, acc["T0"], ngram=best_ng, d_shape=d_shape,
                                       d_ngram=acc["T0"][f"draft-t|{best_ng}"],
                                       overhead=over["T0"])
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    m = result["map_T0"]
    print(f"\nwhere a third model pays (T = 0): gain % of the best cascade with D over the best "
          f"two-model one; a(target|{m['ngram']}) = {m['alpha_target_ngram']:.3f}, "
          f"a(D|{m['ngram']}) = {m['alpha_D_ngram']:.3f}, overhead {m['overhead_ms']:.3f} ms "
          "per round")
    print("a(target|D) \\ c_D " + " ".join(f"{c:>6}" for c in m["ratios"]))
    for a, row in zip(m["alphas"], m["gain_pct"], strict=True):
        print(f"{a:>17.2f} " + " ".join(f"{g:6.1f}" if g and g > 0 else "     ."
                                        for g in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
