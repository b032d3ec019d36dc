#!/usr/bin/env bash
# A/A check (issue 26): the same configuration captured repeatedly, interleaved with the other
# captures (never concurrently with anything), so the spread of its measured speedup is the
# machine's noise floor (polyspec validate --json
# reports it as noise_floor; polyspec plan --traces uses it). Run from the repository root:
#   bash experiments/cpu/capture_aa.sh K     # capture repetition K (1, 2, ...)
# experiments/cpu/preregistered-2/run.sh capture calls it between the round-2 captures.
# Environment: PY (default .venv/bin/python), AA_OUT (data/traces/cpu/aa), AA ("target,ngram 2 0"), PROMPTS (8),
# TOKENS (128). The first prompts (seed 0) of every capture of data/traces/cpu.
set -euo pipefail
PY=${PY:-.venv/bin/python}
K=${1:?usage: capture_aa.sh K}
read -r m t temp <<< "${AA:-target,ngram 2 0}"
# docs/measuring.md: show the load, wait (at most 10 min) until the 1-minute load average is at
# most WAIT_LOAD (0.3: polyspec capture refuses above 0.5, and its start-up raises the load by
# about 0.1 before it checks)
uptime >&2
waited=0
while awk -v m="${WAIT_LOAD:-0.3}" '{ exit !($1 > m) }' /proc/loadavg && [ $waited -lt 600 ]; do
  sleep 10; waited=$((waited + 10))
done
[ $waited -gt 0 ] && uptime >&2
"$PY" -m polyspec capture --models "$m" --thresholds "$t" --temperature "$temp" \
  --prompts "${PROMPTS:-8}" --tokens "${TOKENS:-128}" --prompt-len 64 --threads 1 --seed 0 \
  --out "${AA_OUT:-data/traces/cpu/aa}" --name "aa_$(echo "$m" | tr , -)_th$(echo "$t" | tr , -)_T${temp}_$K" \
  --resume --no-progress --ar-models target --cost-contexts 96 --cost-repeats 1 < /dev/null
