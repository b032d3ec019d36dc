"""Benchmark of the polybasic decoder on the committed zoo (CPU by default).

For every configuration of a grid (2-, 3- and 4-level cascades, several thresholds) it decodes
the same held-out prompts with the cascade and with the target alone, interleaved
(cascade/AR order alternating by prompt), and reports
- speedup = AR target time per token / cascade time per token (prefill excluded), and
- orchestration overhead = share of cascade wall time spent outside model forwards
  (target: ≤ 10 %),
then the best configuration per cascade depth.

    .venv/bin/python benchmarks/bench_decoder.py [--prompts 4] [--tokens 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

GRID = {
    2: [("target,small", t) for t in ("2", "3", "4", "6")]
    + [("target,mid", t) for t in ("2", "4")] + [("target,ngram", t) for t in ("1", "2")],
    3: [("target,mid,small", t) for t in ("4,2", "6,3", "8,4")]
    + [("target,small,ngram", t) for t in ("4,1", "6,2")],
    4: [("target,mid,small,ngram", t) for t in ("6,3,1", "8,4,2", "6,2,1", "10,4,1")],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="polybasic decoder benchmark")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--levels", default="2,3,4", help="cascade depths to run")
    ap.add_argument("--json", default=None, help="write results as JSON here")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")

    import torch

    from validation.capture.models import load_model
    from validation.capture.setup import make_prompts
    from validation.schemes.chain import PolybasicDecoder, autoregressive

    torch.set_num_threads(args.threads)
    names = ("target", "mid", "small", "ngram")
    lv = {n: load_model(n, device=args.device) for n in names}
    prompts, _ = make_prompts(args.prompts, 64, seed=123)
    # warm-up
    for n in names:
        autoregressive(lv[n], prompts[0], 16)
    results = []
    t_all = time.perf_counter()
    for depth in [int(x) for x in args.levels.split(",")]:
        for models, th in GRID[depth]:
            levels = [lv[m] for m in models.split(",")]
            dec = PolybasicDecoder(levels, [int(x) for x in th.split(",")],
                                   temperature=args.temperature, seed=0)
            dec.generate(prompts[0], 16)
            cw = cn = aw = an = fw = 0.0
            for k, p in enumerate(prompts):
                dec.sampler.reseed(k)
                runs = ["c", "a"] if k % 2 == 0 else ["a", "c"]
                for r in runs:
                    if r == "c":
                        res = dec.generate(p, args.tokens)
                        cw += res.wall_s
                        cn += res.n_generated
                        fw += sum(res.forward_s)
                    else:
                        ar = autoregressive(levels[0], p, args.tokens,
                                            temperature=args.temperature, seed=k)
                        aw += ar.wall_s
                        an += len(ar.tokens)
            row = {"levels": depth, "models": models, "thresholds": th,
                   "speedup": (aw / an) / (cw / cn), "ar_ms_per_token": 1e3 * aw / an,
                   "cascade_ms_per_token": 1e3 * cw / cn, "overhead": (cw - fw) / cw}
            results.append(row)
            print(f"{depth}-level {models:<24} θ={th:<7} speedup {row['speedup']:.3f}  "
                  f"AR {row['ar_ms_per_token']:.3f} ms/tok  cascade "
                  f"{row['cascade_ms_per_token']:.3f} ms/tok  overhead "
                  f"{100 * row['overhead']:.1f} %", flush=True)
    print(f"\nbest per depth (temperature {args.temperature}, {args.prompts} prompts × "
          f"{args.tokens} tokens, {args.threads} thread(s), {args.device}):")
    best = {}
    for depth in sorted({r["levels"] for r in results}):
        b = max((r for r in results if r["levels"] == depth), key=lambda r: r["speedup"])
        best[depth] = b
        print(f"  {depth}-level: {b['models']} θ={b['thresholds']}: speedup "
              f"{b['speedup']:.3f}, overhead {100 * b['overhead']:.1f} %")
    ov = [r["overhead"] for r in results]
    print(f"  overhead over all configurations: median {100 * sorted(ov)[len(ov) // 2]:.1f} %,"
          f" max {100 * max(ov):.1f} %   (total {time.perf_counter() - t_all:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "best": best, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
