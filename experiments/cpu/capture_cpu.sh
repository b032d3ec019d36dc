#!/usr/bin/env bash
# Capture the committed CPU trace set (one trace per cascade configuration) with the committed
# zoo, each capture preceded by the composition profile of its cascade (the in-cascade costs
# `polyspec validate` forecasts it with; the profile's acceptance laws come from the OTHER
# captures and its prompts are not the capture's).
# Run from the repository root on an otherwise idle machine:
#   bash experiments/cpu/capture_cpu.sh            # every configuration below
#   bash experiments/cpu/capture_cpu.sh LIST.txt   # lines "models thresholds temperature"
# Environment: PY (python, default .venv/bin/python), OUT (default data/traces/cpu),
# PROMPTS (default 24), TOKENS (default 128), PROFILE (1 = profile before capturing, default),
# LAWS (captures the profiles draw acceptance from, default OUT; it needs captures of each
# cascade's pairs). Each capture uses 1 thread; a killed
# run is continued by running the script again (captures are called with --resume and
# existing profiles are kept).
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-data/traces/cpu}
PROMPTS=${PROMPTS:-24}
TOKENS=${TOKENS:-128}
PROFILE=${PROFILE:-1}
LAWS=${LAWS:-$OUT}
mkdir -p "$OUT/profiles"
name_of() {  # models thresholds temperature -> the capture's default name
  echo "$(echo "$1" | tr , - | tr -d :)_th$(echo "$2" | tr , -)_T$(echo "$3" | sed 's/\./p/')"
}
cap() {  # models thresholds temperature
  local name; name=$(name_of "$1" "$2" "$3")
  if [ "$PROFILE" = 1 ] && [ ! -f "$OUT/profiles/$name.json" ]; then
    "$PY" -m polyspec profile $(echo "$1" | tr , ' ') --cascade --thresholds "$2" \
      --temperature "$3" --traces "$LAWS" --exclude "$name" --prompts 6 --tokens "$TOKENS" \
      --out "$OUT/profiles/$name.json" >/dev/null || echo "no profile for $name"
  fi
  "$PY" -m polyspec capture --models "$1" --thresholds "$2" --temperature "$3" \
    --prompts "$PROMPTS" --tokens "$TOKENS" --prompt-len 64 --threads 1 --seed 0 \
    --out "$OUT" --resume --no-progress
}
if [ $# -ge 1 ]; then
  while read -r m t temp; do
    [ -z "$m" ] || [ "${m:0:1}" = "#" ] || cap "$m" "$t" "$temp"
  done < "$1"
  exit 0
fi
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
# target <- ngram at more thresholds (the planner's threshold check)
cap target,ngram 1 0
cap target,ngram 3 0
cap target,ngram 4 0
cap target,ngram 16 0
cap target,ngram 1 1
cap target,ngram 3 1
# the planner's choice and runners-up
cap target,small,ngram 2,3 0
cap target,small,ngram 2,2 0
cap target,small 2 0
cap target,small,ngram 2,1 1
cap target,small 1 1  # the original pool's T = 1 plan
