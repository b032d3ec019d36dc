#!/usr/bin/env bash
# Freeze snapshot (issue 37, "Freeze first"): run the user-facing commands of one revision on
# the inputs committed at the wave's start (configs/, examples/, tests/fixtures/, data/traces/)
# and keep each command's stdout, exit status and stderr.
#
#   bash experiments/freeze/snap.sh REV OUT        # e.g. 384fb7a out/base
#   python experiments/freeze/compare.py OUT_A OUT_B
#
# REV is checked out into a temporary detached worktree (removed at the end) and the CLI OF
# THAT REVISION runs from its root: cwd = the worktree and PYTHONPATH = the worktree, so its
# own packages are imported, not the editable install of /work/main (OUT/_imports.txt lists
# the file of every top-level package and of every loaded module outside the worktree; the
# run stops if one of the project's packages comes from elsewhere).
# OUT/<name>.txt: "$ polyspec ARGS" (this revision's spelling), stdout, "--- exit N", then
# "--- stderr" and stderr; the worktree's path is written as <WT>. OUT/_times.txt: seconds per
# command (bookkeeping only, not compared). Sizes are small (a snapshot takes minutes).
# Option spellings that changed in the wave are taken per revision from `--help`:
# forecast --lookahead K (retired: --thresholds θ, θ = max(K - 1, 0), AS0), fit --gamma G
# (retired: --thresholds G). FULL=1 adds `validate data/traces/cpu` (about 6 minutes).
# Environment: PY (default /work/main/.venv/bin/python), FULL (0).
set -uo pipefail

REV=${1:?usage: snap.sh REV OUT}
OUT=${2:?usage: snap.sh REV OUT}
PY=${PY:-/work/main/.venv/bin/python}
FULL=${FULL:-0}
REPO=$(git rev-parse --show-toplevel)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.txt
SHA=$(git -C "$REPO" rev-parse --verify "$REV^{commit}") || exit 2
TMP=$(mktemp -d /tmp/freeze-snap.XXXXXX)
WT=$TMP/wt
git -C "$REPO" worktree add --detach "$WT" "$SHA" >/dev/null 2>&1 || {
  echo "snap.sh: cannot add a worktree of $REV" >&2; exit 2; }
cleanup() { git -C "$REPO" worktree remove --force "$WT" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
cd "$WT" || exit 2
export PYTHONPATH=$WT MPLBACKEND=Agg PYTHONHASHSEED=0 TQDM_DISABLE=1
unset POLYSPEC_TRACEBACK
mkdir -p out

# the CLI of this revision: `python -m polyspec` where it exists, else polyspec.cli.main
if [ -f polyspec/__main__.py ]; then
  CLI=("$PY" -m polyspec)
else
  CLI=("$PY" -c 'import sys; from polyspec.cli import main; sys.exit(main(sys.argv[1:]))')
fi

# which files are imported: every project package must come from this worktree
"$PY" - "$WT" > "$OUT/_imports.txt" 2>&1 <<'EOF'
import sys
wt = sys.argv[1]
import polyspec, polyspec_theory, simulators, validation  # noqa: E401
from polyspec.cli import build_parser
build_parser()  # imports every command module
import polyspec.api  # noqa: F401
bad = []
for name in ("polyspec", "polyspec_theory", "simulators", "validation"):
    f = sys.modules[name].__file__
    print(f"{name}: {f.replace(wt, '<WT>')}")
    bad += [] if f.startswith(wt + "/") else [name]
outside = sorted(m for m, mod in list(sys.modules.items())
                 if (getattr(mod, "__file__", None) or "").startswith("/work/main/")
                 and "/.venv/" not in mod.__file__)
print(f"project modules loaded from /work/main outside .venv: {outside or 'none'}")
sys.exit(1 if bad or outside else 0)
EOF
if [ $? -ne 0 ]; then
  cat "$OUT/_imports.txt" >&2
  echo "snap.sh: the project's code is not imported from the worktree" >&2
  exit 1
fi
echo "rev $REV = $SHA" >> "$OUT/_imports.txt"
: > "$OUT/_times.txt"

# per-revision spellings
FC_HELP=$("${CLI[@]}" forecast --help 2>&1)
FIT_HELP=$("${CLI[@]}" fit --help 2>&1)
lookahead() {  # K -> this revision's option for PipeSpec's lookahead
  if grep -Eq '^ +--lookahead' <<<"$FC_HELP"; then echo "--lookahead $1"
  else local t=$(( $1 > 0 ? $1 - 1 : 0 )); echo "--thresholds $t"; fi
}
gamma() {  # G -> this revision's option for an engine's draft length
  if grep -Eq '^ +--gamma' <<<"$FIT_HELP"; then echo "--gamma $1"; else echo "--thresholds $1"; fi
}

run() {  # NAME ARGS...: one command of this revision's CLI
  local name=$1; shift
  local f="$OUT/$name.txt" t0 t1 rc
  t0=$(date +%s.%N)
  { printf '$ polyspec'; printf ' %q' "$@"; printf '\n'; } > "$f"
  "${CLI[@]}" "$@" > "$TMP/stdout" 2> "$TMP/stderr" < /dev/null
  rc=$?
  t1=$(date +%s.%N)
  { sed "s#$WT#<WT>#g" "$TMP/stdout"; echo "--- exit $rc"; echo "--- stderr"
    sed "s#$WT#<WT>#g" "$TMP/stderr"; } >> "$f"
  printf '%-40s %7.1f s  exit %d\n' "$name" "$(echo "$t1 - $t0" | bc)" "$rc" >> "$OUT/_times.txt"
}

EL=tests/fixtures/engine-samples
PS=examples/gpu-traces/pipespec-humaneval
SB=examples/gpu-traces/specbench-vicuna7b
CPU=data/traces/cpu
R2=data/traces/cpu/preregistered-2
T70=Meta-Llama-3.1-70B-Instruct T8=Llama-3.1-8B-Instruct T1=Llama-3.2-1B-Instruct

# --- fit: every engine log of the fixtures, PipeSpec and Spec-Bench files, our own trace -----
for f in "$EL"/*.txt "$EL"/*.json; do
  run "fit_$(basename "${f%.*}")" fit "$f"
done
run fit_vllm_v1_log_issue19254_json fit "$EL/vllm_v1_log_issue19254.txt" --json
run fit_vllm_v1_log_issue19254_draft3 fit "$EL/vllm_v1_log_issue19254.txt" $(gamma 3)
run fit_vllm_v1_log_issue19254_out fit examples/engine-logs/vllm_v1_log_issue19254.txt \
  --out out/qwen-fit.json
run fit_pipespec_chain_1B-8B_8 fit "$PS/chain_${T1}-${T8}_8.json"
run fit_pipespec_chain_8B-70B_8_json fit "$PS/chain_${T8}-${T70}_8.json" --json
run fit_pipespec_async_1B-8B_4 fit "$PS/async-chain_${T1}-${T8}_4.json"
run fit_specbench_eagle fit "$SB/vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl"
run fit_trace_target-ngram_th2_T0 fit "$CPU/target-ngram_th2_T0.jsonl"
run fit_trace_target-small-ngram_th3-2_T0_json fit "$CPU/target-small-ngram_th3-2_T0.jsonl" --json

# --- calibrate (its outputs feed predict and plan below) --------------------------------------
run calibrate_eagle1 calibrate examples/engine-logs/vllm_eagle_sweep_issue20780.txt \
  --method "EAGLE 1" --fit-on 2,7
run calibrate_eagle3 calibrate examples/engine-logs/vllm_eagle_sweep_issue20780.txt \
  --method "EAGLE 3" --fit-on 2,7
run calibrate_config calibrate configs/calibration-eagle1.json --write-config out/eagle1.json \
  --write-pool out/eagle1-pool.json

# --- predict: every config and example (text and --json) ------------------------------------
for f in configs/calibration-eagle1.json configs/default.json configs/dualistic.json \
         configs/pool.json configs/serving-70b.json configs/serving-pool.json \
         examples/qwen3-32b-ngram-gamma3.json examples/qwen3-32b-ngram-gamma5.json; do
  b=$(basename "${f%.json}")
  run "predict_$b" predict "$f"
  run "predict_${b}_json" predict "$f" --json
done
run predict_serving-70b_batch predict configs/serving-70b.json --batch 1,4,16,64
run predict_default_maxth4 predict configs/default.json --max-threshold 4 --json
run predict_eagle1 predict out/eagle1.json

# --- simulate --seed 0, small budgets ----------------------------------------------------------
run simulate_default simulate configs/default.json --tokens 20000 --chains 64 --seed 0 \
  --no-progress
run simulate_dualistic_json simulate configs/dualistic.json --tokens 20000 --chains 64 --seed 0 \
  --json --no-progress
run simulate_serving-70b_batch4 simulate configs/serving-70b.json --batch 4 --tokens 8000 \
  --chains 16 --seed 0 --no-progress
run simulate_qwen-gamma3 simulate examples/qwen3-32b-ngram-gamma3.json --tokens 20000 \
  --chains 64 --seed 0 --no-progress
run simulate_dualistic_async simulate configs/dualistic.json --mode async --events 2000 \
  --chains 64 --seed 0 --no-progress

# --- plan ---------------------------------------------------------------------------------
run plan_pool plan configs/pool.json
run plan_pool_json plan configs/pool.json --json
run plan_serving-pool plan configs/serving-pool.json --batch 1,8,64
run plan_eagle1-pool plan out/eagle1-pool.json
run plan_traces_pipespec plan --traces "$PS"

# --- verify --quick ------------------------------------------------------------------------
run verify_quick_json verify --quick --json

# --- validate: the committed trace folders ---------------------------------------------------
run validate_pipespec validate "$PS" --no-plots --no-progress
run validate_specbench validate "$SB" --no-plots --no-progress
run validate_trees validate data/traces/trees --no-plots --no-progress
run validate_cpu-batch validate data/traces/cpu-batch --no-plots --no-progress
run validate_cpu-async validate data/traces/cpu-async --no-plots --no-progress
[ "$FULL" = 1 ] && run validate_cpu validate "$CPU" --no-plots --no-progress

# --- forecast: PipeSpec (the pre-registered GPU forecasts, here on the trimmed fixtures) ------
run forecast_gpu_sync_70B-8B-1B_K8 forecast --traces "$PS" --models 70B,8B,1B $(lookahead 8) \
  --dtype 8B=float16
run forecast_gpu_sync_70B-1B_K4_json forecast --traces "$PS" --models 70B,1B $(lookahead 4) \
  --json
run forecast_gpu_async_70B-1B_K0 forecast --traces "$PS" --models 70B,1B $(lookahead 0) \
  --mode async
run forecast_gpu_async_70B-8B_K0 forecast --traces "$PS" --models 70B,8B $(lookahead 0) \
  --mode async --dtype 8B=float16
run forecast_gpu_async_70B-8B-1B_K0 forecast --traces "$PS" --models 70B,8B,1B $(lookahead 0) \
  --mode async --dtype 8B=float16

# --- forecast: the committed pre-registered rounds (round 2 re-forecast as registered, scored) -
run forecast_score_round2 forecast --score "$R2/forecasts.jsonl"
run forecast_score_round2_json forecast --score "$R2/forecasts.jsonl" --json
run forecast_score_round1 forecast --score "$CPU/preregistered/forecasts.jsonl"
while read -r kind name m t temp extra; do
  case $kind in
    chain) run "forecast_r2_$name" forecast --traces "$CPU" --models "$m" --thresholds "$t" \
             --temperature "$temp" --profile "$R2/profiles/$name.json" --name "$name" --json ;;
    tree) run "forecast_r2_$name" forecast --traces data/traces/trees --laws-from "$CPU" \
            --models "$m" --thresholds "$t" --temperature "$temp" --tree="$extra" --name "$name" \
            --json ;;
    schedule) run "forecast_r2_$name" forecast --traces "$CPU" --models "$m" --thresholds "$t" \
                --temperature "$temp" --schedule "$extra" --name "$name" --json ;;
    batch) run "forecast_r2_${name}_b$extra" forecast --traces data/traces/cpu-batch \
             --laws-from "$CPU" --batch-profile data/traces/cpu-batch/profile.json --models "$m" \
             --thresholds "$t" --temperature "$temp" --batch "$extra" --name "${name}_b$extra" \
             --json ;;
  esac
done < <(grep -v '^#' "$R2/configs.txt" | grep -v '^[[:space:]]*$')

echo "snap.sh: $(ls "$OUT"/*.txt | grep -vc '/_') commands of $REV ($SHA) in $OUT" >&2
