#!/usr/bin/env bash
# Capture the committed CPU trace set (one trace per cascade configuration) with the
# committed zoo. Run from the repository root: bash data/traces/cpu/capture_cpu.sh
# Environment: PY (python, default .venv/bin/python), OUT (default data/traces/cpu),
# PROMPTS (default 12), TOKENS (default 128). Each capture uses 1 thread; a killed run is
# continued by running the script again (every capture is called with --resume).
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-data/traces/cpu}
PROMPTS=${PROMPTS:-12}
TOKENS=${TOKENS:-128}
cap() {  # models thresholds temperature
  "$PY" -m validation capture --models "$1" --thresholds "$2" --temperature "$3" \
    --prompts "$PROMPTS" --tokens "$TOKENS" --prompt-len 64 --threads 1 --seed 0 \
    --out "$OUT" --resume
}
# greedy
cap target,small 3 0
cap target,small 6 0
cap target,mid 4 0
cap target,ngram 2 0
cap target,mid,small 6,3 0
cap target,small,ngram 6,2 0
cap target,mid,ngram 5,2 0
cap target,mid,small,ngram 8,4,2 0
cap target,mid,small,ngram 6,3,1 0
# temperature 1
cap target,small 3 1
cap target,mid 4 1
cap target,mid,small 6,3 1
cap target,small,ngram 5,2 1
cap target,ngram 2 1
cap target,mid,small,ngram 8,4,2 1
cap target,mid,small,ngram 4,2,1 1
# added for the planner check (issue 8; see TRACES.md): target <- ngram at more thresholds
cap target,ngram 1 0
cap target,ngram 3 0
cap target,ngram 4 0
cap target,ngram 16 0
cap target,ngram 1 1
cap target,ngram 3 1
# added after the 12-layer target (see TRACES.md): the cascade `polyspec plan --traces` chooses
# at T = 0 and the runners-up it names
cap target,small,ngram 2,3 0
cap target,small,ngram 2,2 0
cap target,small 2 0
cap target,small,ngram 2,1 1
