"""Train the larger GPU zoo (bf16 autocast, time-capped) for the GPU trace capture.

On a GPU at batch size 1 a forward costs about one kernel launch per op, so the cost ratio of
two models is close to the ratio of their layer counts: 2 : 6 : 20 layers gives adjacent
ratios ≈ 0.3. Each model trains for at most its time budget (seconds); the record says how
many steps it reached. Usage (repository root, on the GPU machine):

    python -m experiments.gpu.train_gpu_zoo --out /tmp/gpu_zoo [--scale 1.0]
"""

from __future__ import annotations

import argparse
import sys

from polyspec.research import GPTConfig, TrainRun, TrainSpec, train_zoo, write_training_record

GPU_SPECS = (
    TrainSpec("small", GPTConfig(n_layer=2, n_head=4, d_model=256), steps=2500, lr=2e-3,
              batch_size=64, warmup=100),
    TrainSpec("mid", GPTConfig(n_layer=6, n_head=8, d_model=512), steps=2500, lr=1.5e-3,
              batch_size=64, warmup=100),
    TrainSpec("target", GPTConfig(n_layer=20, n_head=12, d_model=768), steps=2500, lr=6e-4,
              batch_size=64, warmup=100),
)
BUDGET_S = {"small": 45.0, "mid": 75.0, "target": 200.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the time budgets")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("train_gpu_zoo: CUDA is not available", file=sys.stderr)
        return 2
    budgets = {k: v * args.scale for k, v in BUDGET_S.items()}
    train_zoo(args.seed, args.out, GPU_SPECS, TrainRun(device="cuda", amp=True),
              max_seconds=budgets)
    write_training_record(args.out, "python -m experiments.gpu.train_gpu_zoo --out "
                          f"{args.out} --seed {args.seed} --scale {args.scale}",
                          notes=f"GPU zoo, bf16 autocast, time budgets (s): {budgets}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
