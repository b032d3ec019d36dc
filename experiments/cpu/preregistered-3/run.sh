#!/usr/bin/env bash
# Third pre-registered round (issue 40), one command, run from the repository root:
#   bash experiments/cpu/preregistered-3/run.sh forecast   # idle profiles + forecasts.jsonl
#                                                           # (commit it ALONE, before capturing)
#   bash experiments/cpu/preregistered-3/run.sh capture    # every configuration + 3 A/A repeats
#   bash experiments/cpu/preregistered-3/run.sh score      # polyspec forecast --score
# data/traces/cpu/preregistered-3/configs.txt: lines "kind name models thresholds temperature
# [extra]" (kind chain|tree|schedule|batch|async; extra = tree parents, HF schedule
# hf:START:MIN:MAX, batch size, or async queue length). Round 2's script
# (experiments/cpu/preregistered-2/run.sh) with an async kind, idle profiles for every timed
# cost the forecast needs, and all 24 prompts (16 batched).
# Forecasts use only committed captures (data/traces/cpu, data/traces/trees,
# data/traces/cpu-batch) and profiles taken here before any capture of this round; captures
# go to data/traces/cpu/preregistered-3/captures/, the A/A repeats to .../aa/.
# Environment: PY (default .venv/bin/python), PROMPTS (24), TREE_PROMPTS (24), BATCH_PROMPTS
# (16), TOKENS (128), PROFILE_PROMPTS (12). Captures use 1 thread per process and --resume.
# Timing discipline (docs/measuring.md): nothing else may run meanwhile; before each profile and
# capture the script prints `uptime` and waits until the 1-minute load average is at most
# WAIT_LOAD (0.3; polyspec itself refuses above 0.5 and --allow-load is never passed here).
set -euo pipefail
PY=${PY:-.venv/bin/python}
HERE=data/traces/cpu/preregistered-3
CPU=data/traces/cpu
PROMPTS=${PROMPTS:-24}
TREE_PROMPTS=${TREE_PROMPTS:-24}
BATCH_PROMPTS=${BATCH_PROMPTS:-24}  # a multiple of every batch size (4, 6)
TOKENS=${TOKENS:-128}
PROFILE_PROMPTS=${PROFILE_PROMPTS:-12}
OUT=${OUT:-$HERE/captures}
export AA_OUT=${AA_OUT:-$HERE/aa} PROMPTS TOKENS
WAIT_LOAD=${WAIT_LOAD:-0.3}
# this machine's captures (round 2, recaptured idle on it): the cost tables of trees and
# schedules (forecast --costs-from) and the batched captures whose in-cascade factors and
# orchestration go with this machine's batched profile
MACHINE=data/traces/cpu/preregistered-2-idle/captures
# every interval calibrated on round 2's scored errors under the current model (in-sample
# there; issue 40 item 3) with its A/A floor: forecast --interval-from
INTERVAL=(--interval-from data/traces/cpu/preregistered-2-idle/reforecast.jsonl)
mode=${1:?usage: run.sh forecast|capture|score}

quiet() {  # show the load, wait (at most 10 min) until the 1-minute load is at most WAIT_LOAD
  uptime >&2
  local waited=0
  while awk -v m="$WAIT_LOAD" '{ exit !($1 > m) }' /proc/loadavg && [ $waited -lt 600 ]; do
    sleep 10; waited=$((waited + 10))
  done
  [ $waited -gt 0 ] && uptime >&2
  return 0
}

profile_chain() {  # name models thresholds temperature: the cascade's composition, idle
  mkdir -p "$HERE/profiles"
  [ -f "$HERE/profiles/$1.json" ] && return 0
  quiet
  "$PY" -m polyspec profile $(echo "$2" | tr , ' ') --cascade --thresholds "$3" \
    --temperature "$4" --traces "$CPU" --prompts "$PROFILE_PROMPTS" --tokens "$TOKENS" \
    --out "$HERE/profiles/$1.json" >/dev/null
}

profile_batch() {  # T(b, m) of the three models on this machine, idle (the batched costs)
  mkdir -p "$HERE/profiles"
  [ -f "$HERE/profiles/batch.json" ] && return 0
  quiet
  "$PY" -m polyspec profile target small ngram --batch 1,2,4,6,8,16 --max-m 16 --repeats 5 \
    --context 128 --threads 1 --out "$HERE/profiles/batch.json" >/dev/null
}

forecast_one() {  # kind name models thresholds temperature extra
  local kind=$1 name=$2 m=$3 t=$4 temp=$5 extra=${6:-}
  case $kind in
    chain)
      profile_chain "$name" "$m" "$t" "$temp"
      "$PY" -m polyspec forecast --traces "$CPU" --models "$m" --thresholds "$t" \
        --temperature "$temp" --profile "$HERE/profiles/$name.json" "${INTERVAL[@]}" \
        --name "$name" --json ;;
    tree)
      "$PY" -m polyspec forecast --traces data/traces/trees --laws-from "$CPU" --models "$m" \
        --thresholds "$t" --temperature "$temp" --tree="$extra" --costs-from "$MACHINE" \
        "${INTERVAL[@]}" --name "$name" --json ;;
    schedule)
      "$PY" -m polyspec forecast --traces "$CPU" --models "$m" --thresholds "$t" \
        --temperature "$temp" --schedule "$extra" --costs-from "$MACHINE" "${INTERVAL[@]}" \
        --name "$name" --json ;;
    batch)
      profile_batch
      "$PY" -m polyspec forecast --traces "$MACHINE" --laws-from "$CPU" \
        --batch-profile "$HERE/profiles/batch.json" --models "$m" --thresholds "$t" \
        --temperature "$temp" --batch "$extra" "${INTERVAL[@]}" --name "${name}_b$extra" \
        --json ;;
    async)  # the pipeline's own two-process forwards, solo and together (AS1c), idle
      mkdir -p "$HERE/profiles"
      if [ ! -f "$HERE/profiles/$name.json" ]; then
        quiet
        "$PY" -m polyspec profile --cascade --mode async $(echo "$m" | tr , ' ') \
          --thresholds "$t" --queue "$extra" --prompts "$PROFILE_PROMPTS" --tokens "$TOKENS" \
          --repeats 20 --out "$HERE/profiles/$name.json" >/dev/null
      fi
      "$PY" -m polyspec forecast --mode async --models "$m" --thresholds "$t" --queue "$extra" \
        --temperature "$temp" --traces "$CPU" --profile "$HERE/profiles/$name.json" \
        "${INTERVAL[@]}" --name "$name" --json ;;
  esac
}

capture_one() {  # kind name models thresholds temperature extra
  local kind=$1 name=$2 m=$3 t=$4 temp=$5 extra=${6:-}
  quiet
  local args=(--models "$m" --thresholds "$t" --temperature "$temp" --tokens "$TOKENS"
              --prompt-len 64 --seed 0 --out "$OUT" --name "$name"
              --no-progress --ar-models target)
  local sync=(--resume --threads 1 --cost-contexts 96 --cost-repeats 1)
  case $kind in
    chain) "$PY" -m polyspec capture "${args[@]}" "${sync[@]}" --prompts "$PROMPTS" ;;
    tree) "$PY" -m polyspec capture "${args[@]}" "${sync[@]}" --prompts "$TREE_PROMPTS" --tree="$extra" ;;
    schedule) "$PY" -m polyspec capture "${args[@]}" "${sync[@]}" --prompts "$PROMPTS" --schedule "$extra" ;;
    batch) "$PY" -m polyspec capture "${args[@]}" "${sync[@]}" --prompts "$BATCH_PROMPTS" --batch "$extra" ;;
    async)  # an async capture cannot be resumed: a finished one is kept, a partial one refused
      [ -f "$OUT/$name.jsonl" ] && return 0
      "$PY" -m polyspec capture --mode async "${args[@]}" --queue "$extra" --prompts "$PROMPTS" ;;
  esac
}

rows() {  # the config lines, comments and blank lines left out
  grep -v '^[[:space:]]*\(#\|$\)' "$HERE/configs.txt"
}

case $mode in
  forecast)
    [ -s "$HERE/forecasts.jsonl" ] && { echo "$HERE/forecasts.jsonl exists: never rewritten" >&2; exit 2; }
    mkdir -p "$HERE/.forecast"
    one() {  # the forecast of one config line, kept in .forecast/NAME.json (rerun: kept)
      local f="$HERE/.forecast/$2.json"
      [ -s "$f" ] && return 0
      forecast_one "$@" | "$PY" -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" \
        > "$f.tmp" && mv "$f.tmp" "$f" && echo "forecast $2" >&2
    }
    while read -r kind name m t temp extra; do
      one "$kind" "$name" "$m" "$t" "$temp" "${extra:-}" < /dev/null
    done < <(rows)
    while read -r kind name m t temp extra; do
      cat "$HERE/.forecast/$name.json"
    done < <(rows) > "$HERE/forecasts.jsonl.tmp"
    mv "$HERE/forecasts.jsonl.tmp" "$HERE/forecasts.jsonl" ;;
  capture)
    # interleaved with the A/A captures: one before, one in the middle, one after
    mkdir -p "$OUT"
    n=$(rows | wc -l)
    k=0
    bash experiments/cpu/capture_aa.sh 1
    while read -r kind name m t temp extra; do
      capture_one "$kind" "$name" "$m" "$t" "$temp" "${extra:-}" < /dev/null
      k=$((k + 1))
      [ "$k" = $((n / 2)) ] && bash experiments/cpu/capture_aa.sh 2
    done < <(rows)
    bash experiments/cpu/capture_aa.sh 3 ;;
  score)
    "$PY" -m polyspec forecast --score "$HERE/forecasts.jsonl" "${@:2}" ;;
  *) echo "usage: run.sh forecast|capture|score" >&2; exit 2 ;;
esac
