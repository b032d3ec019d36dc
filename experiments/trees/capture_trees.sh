#!/usr/bin/env bash
# Capture the measured points of figure 11 (token trees against the node budget: chain, best
# fixed-width tree, optimal tree) on the committed zoo. Run from the repository root on an
# IDLE machine (timed captures): bash experiments/trees/capture_trees.sh
#
# For each pair (target <- ngram, target <- small) and temperature (0, 1):
#   1. a pilot capture drafting the complete ternary tree of depth 3 (39 nodes): the
#      sibling-rank law by depth and the cost curves T(m), m = 1..40, are fitted on it;
#   2. python -m validation.analysis.tree_plan: for every node budget, the trees figure 11 compares
#      (panel E[A]: chain of N, widest fixed-width, E[L]-optimal; panel speedup: best chain,
#      best fixed-width, fastest tree under the fitted costs), written to <tag>_plan.json;
#   3. one capture per distinct planned tree (the theory of the figure comes from the pilot,
#      so every measured point is out of sample).
# paper_figures/fig11_trees.py reads OUT (default data/traces/trees) when it holds plans.
#
# Environment: PY (default .venv/bin/python), OUT (default data/traces/trees), PROMPTS (12),
# TOKENS (128), BUDGETS (4,8,16,32), PAIRS ("target,ngram target,small"), TEMPS ("0 1"),
# ZOO_DIR (zoo weights; default the committed zoo), SMOKE=1 (tiny settings: 1 prompt, 12
# tokens, budgets 2,4, a 6-node pilot, no warm-up, one cost context; for tests only).
# Each capture uses 1 thread and --resume: a killed run is continued by running it again.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-data/traces/trees}
PAIRS=${PAIRS:-"target,ngram target,small"}
TEMPS=${TEMPS:-"0 1"}
PILOT=-1,0,0,0,1,1,1,2,2,2,3,3,3,4,4,4,5,5,5,6,6,6,7,7,7,8,8,8,9,9,9,10,10,10,11,11,11,12,12,12
EXTRA=()
if [ "${SMOKE:-0}" = 1 ]; then
  PROMPTS=${PROMPTS:-1}
  TOKENS=${TOKENS:-12}
  BUDGETS=${BUDGETS:-2,4}
  PILOT=-1,0,0,0,1,1,2
  EXTRA+=(--warmup 0 --cost-contexts 32 --cost-repeats 1 --ar-models target)
fi
PROMPTS=${PROMPTS:-12}
TOKENS=${TOKENS:-128}
BUDGETS=${BUDGETS:-4,8,16,32}
if [ -n "${ZOO_DIR:-}" ]; then
  EXTRA+=(--zoo-dir "$ZOO_DIR")
fi
mkdir -p "$OUT"
cap() {  # models temperature parents name
  "$PY" -m polyspec capture --models "$1" --thresholds 1 --temperature "$2" --tree="$3" \
    --name "$4" --prompts "$PROMPTS" --tokens "$TOKENS" --prompt-len 64 --threads 1 \
    --seed 0 --out "$OUT" --resume --no-progress ${EXTRA[@]+"${EXTRA[@]}"} < /dev/null
}
for pair in $PAIRS; do
  for t in $TEMPS; do
    tag="fig11_${pair//,/-}_T${t}"
    cap "$pair" "$t" "$PILOT" "${tag}_pilot"
    "$PY" -m validation.analysis.tree_plan "$OUT/${tag}_pilot.jsonl" --budgets "$BUDGETS" \
      --prefix "$tag" --out "$OUT/${tag}_plan.json" > "$OUT/${tag}_plan.txt"
    while read -r name parents; do
      cap "$pair" "$t" "$parents" "$name"
    done < "$OUT/${tag}_plan.txt"
  done
done
