#!/usr/bin/env bash
# GPU trace capture (fits in ~10 minutes on one modern GPU): trains the larger GPU zoo
# (experiments/gpu/train_gpu_zoo.py, ~5.5 min, not committed: ~300 MB) and captures the
# configurations below into data/traces/gpu/ (plus the zoo's TRAINING.md).
# Needs a CUDA build of torch and safetensors. Run from the repository root:
#     bash experiments/gpu/run_gpu_capture.sh
# Env: PY (default python3, or .venv/bin/python if present), ZOO (default /tmp/gpu_zoo),
#      OUT (default data/traces/gpu), SCALE (training time multiplier, default 1),
#      PROMPTS (default 8), TOKENS (default 128).
set -euo pipefail
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
ZOO=${ZOO:-/tmp/gpu_zoo}
OUT=${OUT:-data/traces/gpu}
SCALE=${SCALE:-1}
PROMPTS=${PROMPTS:-8}
TOKENS=${TOKENS:-128}
mkdir -p "$OUT"
"$PY" -c "import torch, sys; print(torch.__version__, torch.cuda.is_available()); \
sys.exit(0 if torch.cuda.is_available() else 2)"
nvidia-smi --query-gpu=name,memory.total --format=csv || true
if [ ! -f "$ZOO/target.safetensors" ]; then
  "$PY" -m experiments.gpu.train_gpu_zoo --out "$ZOO" --scale "$SCALE"
fi
cp "$ZOO/TRAINING.md" "$OUT/ZOO_TRAINING.md"
cp "$ZOO/zoo.json" "$OUT/zoo.json"
cap() {  # models thresholds temperature
  "$PY" -m polyspec capture --device cuda --zoo-dir "$ZOO" --models "$1" \
    --thresholds "$2" --temperature "$3" --prompts "$PROMPTS" --tokens "$TOKENS" \
    --prompt-len 64 --threads 1 --seed 0 --out "$OUT" --resume --no-progress
}
cap target,small 4 0
cap target,mid 4 0
cap target,mid,small 6,3 0
cap target,mid,small,ngram 8,4,2 0
cap target,small 4 1
cap target,mid,small 6,3 1
cap target,mid,small,ngram 8,4,2 1
cap target,small,ngram 6,2 0
ls -la "$OUT"
