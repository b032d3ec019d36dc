#!/usr/bin/env bash
# Second pre-registered round (issue 26), one command, run from the repository root:
#   bash experiments/cpu/preregistered-2/run.sh forecast   # profiles + forecasts.jsonl (commit it
#                                                           # ALONE, before capturing)
#   bash experiments/cpu/preregistered-2/run.sh capture    # capture every configuration
#   bash experiments/cpu/preregistered-2/run.sh score      # polyspec forecast --score
# configs.txt: lines "kind name models thresholds temperature [extra]" (kind chain|tree|
# schedule|batch; extra = tree parents, HF schedule hf:START:MIN:MAX, or batch size).
# Forecasts use only the committed captures (data/traces/cpu, data/traces/trees,
# data/traces/cpu-batch); captures go to data/traces/cpu/preregistered-2/captures/.
# Environment: PY (default .venv/bin/python), PROMPTS (8: the first 8 of the committed
# captures' 24 prompts; chain forecasts average all 24), TREE_PROMPTS (8), BATCH_PROMPTS
# (16), TOKENS (128), PROFILE_PROMPTS (6; the two T = 0 planner picks were
# profiled with 12 before the machine load made that too slow). Captures use 1 thread and --resume:
# a killed run is continued by running it again.
# Timing discipline (docs/measuring.md): nothing else may run meanwhile; before each profile and
# capture the script prints `uptime` and waits until the 1-minute load average is at most
# WAIT_LOAD (0.3, below polyspec's own limit of 0.5, above which it refuses; --allow-load is
# never passed here).
set -euo pipefail
PY=${PY:-.venv/bin/python}
HERE=data/traces/cpu/preregistered-2
CPU=data/traces/cpu
PROMPTS=${PROMPTS:-8}
TREE_PROMPTS=${TREE_PROMPTS:-8}
BATCH_PROMPTS=${BATCH_PROMPTS:-16}
TOKENS=${TOKENS:-128}
PROFILE_PROMPTS=${PROFILE_PROMPTS:-6}
OUT=${OUT:-$HERE/captures}  # OUT: another folder for a recapture (the forecasts stay as committed)
# FC_DIR: where forecast writes .forecast/ and forecasts.jsonl (default $HERE); another folder
# re-forecasts the round with the current model (an in-sample diagnostic once captured; the
# committed profiles are reused, nothing is timed)
FC_DIR=${FC_DIR:-$HERE}
# wait for a load below polyspec's own limit (0.5): a capture's start-up (imports, model
# loading) raises the 1-minute load by about 0.1 before it checks
WAIT_LOAD=${WAIT_LOAD:-0.3}
mode=${1:?usage: run.sh forecast|capture|score}

quiet() {  # before every profile and capture (docs/measuring.md): show the load, wait (at most
  # 10 min) until the 1-minute load average is at most WAIT_LOAD; polyspec itself refuses above 0.5
  uptime >&2
  local waited=0
  while awk -v m="$WAIT_LOAD" '{ exit !($1 > m) }' /proc/loadavg && [ $waited -lt 600 ]; do
    sleep 10; waited=$((waited + 10))
  done
  [ $waited -gt 0 ] && uptime >&2
  return 0
}

forecast_one() {  # kind name models thresholds temperature extra
  local kind=$1 name=$2 m=$3 t=$4 temp=$5 extra=${6:-}
  case $kind in
    chain)
      mkdir -p "$HERE/profiles"
      [ -f "$HERE/profiles/$name.json" ] || quiet
      [ -f "$HERE/profiles/$name.json" ] || "$PY" -m polyspec profile $(echo "$m" | tr , ' ') \
        --cascade --thresholds "$t" --temperature "$temp" --traces "$CPU" \
        --prompts "$PROFILE_PROMPTS" --tokens "$TOKENS" --out "$HERE/profiles/$name.json" >/dev/null
      "$PY" -m polyspec forecast --traces "$CPU" --models "$m" --thresholds "$t" \
        --temperature "$temp" --profile "$HERE/profiles/$name.json" --name "$name" --json ;;
    tree)
      "$PY" -m polyspec forecast --traces data/traces/trees --laws-from "$CPU" --models "$m" \
        --thresholds "$t" --temperature "$temp" --tree="$extra" --name "$name" --json ;;
    schedule)
      "$PY" -m polyspec forecast --traces "$CPU" --models "$m" --thresholds "$t" \
        --temperature "$temp" --schedule "$extra" --name "$name" --json ;;
    batch)
      "$PY" -m polyspec forecast --traces data/traces/cpu-batch --laws-from "$CPU" \
        --batch-profile data/traces/cpu-batch/profile.json --models "$m" --thresholds "$t" \
        --temperature "$temp" --batch "$extra" --name "${name}_b$extra" --json ;;
  esac
}

capture_one() {  # kind name models thresholds temperature extra
  local kind=$1 name=$2 m=$3 t=$4 temp=$5 extra=${6:-}
  quiet
  local args=(--models "$m" --thresholds "$t" --temperature "$temp" --tokens "$TOKENS"
              --prompt-len 64 --threads 1 --seed 0 --out "$OUT" --name "$name" --resume
              --no-progress --ar-models target --cost-contexts 96 --cost-repeats 1)
  case $kind in
    chain) "$PY" -m polyspec capture "${args[@]}" --prompts "$PROMPTS" ;;
    tree) "$PY" -m polyspec capture "${args[@]}" --prompts "$TREE_PROMPTS" --tree="$extra" ;;
    schedule) "$PY" -m polyspec capture "${args[@]}" --prompts "$PROMPTS" --schedule "$extra" ;;
    batch) "$PY" -m polyspec capture "${args[@]}" --prompts "$BATCH_PROMPTS" --batch "$extra" ;;
  esac
}

case $mode in
  forecast)
    [ -s "$FC_DIR/forecasts.jsonl" ] && { echo "$FC_DIR/forecasts.jsonl exists: never rewritten" >&2; exit 2; }
    mkdir -p "$FC_DIR/.forecast"
    one() {  # the forecast of one config line, kept in .forecast/NAME.json (rerun: kept)
      local f="$FC_DIR/.forecast/$2.json"
      [ -s "$f" ] && return 0
      forecast_one "$@" | "$PY" -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" \
        > "$f.tmp" && mv "$f.tmp" "$f" && echo "forecast $2" >&2
    }
    # trees, schedules and batches time nothing: forecast them first, then the chains, whose
    # composition profiles are timed one at a time with nothing else running
    # (docs/measuring.md; never in parallel with the profiles)
    while read -r kind name m t temp extra; do
      { [ -z "$kind" ] || [ "${kind:0:1}" = "#" ] || [ "$kind" = chain ]; } && continue
      one "$kind" "$name" "$m" "$t" "$temp" "${extra:-}"
    done < "$HERE/configs.txt"
    while read -r kind name m t temp extra; do
      { [ -z "$kind" ] || [ "${kind:0:1}" = "#" ] || [ "$kind" != chain ]; } && continue
      one "$kind" "$name" "$m" "$t" "$temp" "${extra:-}"
    done < "$HERE/configs.txt"
    while read -r kind name m t temp extra; do
      { [ -z "$kind" ] || [ "${kind:0:1}" = "#" ]; } && continue
      cat "$FC_DIR/.forecast/$name.json"
    done < "$HERE/configs.txt" > "$FC_DIR/forecasts.jsonl.tmp"
    mv "$FC_DIR/forecasts.jsonl.tmp" "$FC_DIR/forecasts.jsonl" ;;
  capture)
    # interleaved with the A/A captures (data/traces/cpu/aa): one before, one in the middle,
    # one after, so the noise floor is measured under the same machine load
    mkdir -p "$OUT"
    n=$(grep -c '^[a-z]' "$HERE/configs.txt")
    k=0
    bash experiments/cpu/capture_aa.sh 1
    while read -r kind name m t temp extra; do
      { [ -z "$kind" ] || [ "${kind:0:1}" = "#" ]; } && continue
      capture_one "$kind" "$name" "$m" "$t" "$temp" "${extra:-}" < /dev/null
      k=$((k + 1))
      [ "$k" = $((n / 2)) ] && bash experiments/cpu/capture_aa.sh 2
    done < "$HERE/configs.txt"
    bash experiments/cpu/capture_aa.sh 3 ;;
  score)
    "$PY" -m polyspec forecast --score "$HERE/forecasts.jsonl" "${@:2}" ;;
  *) echo "usage: run.sh forecast|capture|score" >&2; exit 2 ;;
esac
