#!/usr/bin/env bash
# Batched (lockstep) captures of the committed zoo for issue 19: one two-level and one
# three-level cascade at batch sizes 1, 2, 4, 8, 16, one trace per (cascade, b), plus a
# separate batched cost profile T(b, m) (profile.json) that the predictive variant of
# `polyspec validate` uses instead of anything timed in the captures it predicts.
# Run from the repository root on an otherwise idle machine:
#   bash experiments/cpu-batch/capture_cpu_batch.sh
# Environment: PY (python, default .venv/bin/python), OUT (default data/traces/cpu-batch),
# PROMPTS (default 64: a multiple of every batch size; the same prompts at every b), TOKENS
# (default 128 per sequence: a decode stops when its first sequence has them), BATCHES
# (default 1,2,4,8,16; add 32,64 if no crossover shows by 16). One thread. A killed run is
# continued by running the script again (every capture is called with --resume; the profile
# is kept once written).
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-data/traces/cpu-batch}
PROMPTS=${PROMPTS:-64}
TOKENS=${TOKENS:-128}
BATCHES=${BATCHES:-1,2,4,8,16}
mkdir -p "$OUT"
# 1. the separate cost profile: b slots with 128 cached tokens each (prompt + half the
#    tokens), m = 1..16, median of 5
if [ ! -f "$OUT/profile.json" ]; then
  "$PY" -m polyspec profile target small ngram --batch "$BATCHES" --max-m 16 --repeats 5 \
    --context 128 --threads 1 --out "$OUT/profile.json.tmp" --json > /dev/null
  mv "$OUT/profile.json.tmp" "$OUT/profile.json"
fi
cap() {  # models thresholds
  "$PY" -m polyspec capture --models "$1" --thresholds "$2" --temperature 0 \
    --batches "$BATCHES" --prompts "$PROMPTS" --tokens "$TOKENS" --prompt-len 64 \
    --threads 1 --seed 0 --out "$OUT" --resume --no-progress
}
# 2. the captures: the best single-stream two-level and three-level cascades of
#    data/traces/cpu (so their single-stream traces are a law source from outside)
cap target,ngram 2
cap target,small,ngram 2,3
# 3. the comparison (prints the table; writes out/validate/cpu-batch/batch.md and .json)
"$PY" -m polyspec validate "$OUT" --batch-profile "$OUT/profile.json" --laws-from data/traces/cpu
