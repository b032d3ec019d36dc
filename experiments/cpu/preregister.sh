#!/usr/bin/env bash
# Pre-register forecasts: for each configuration of LIST (lines "models thresholds temperature",
# none captured yet), profile its cascade and forecast its speedup from the committed captures
# (polyspec forecast); the forecasts go to OUT/preregistered/forecasts.jsonl, to be committed BEFORE the
# configurations are captured (capture_cpu.sh LIST). Run from the repository root.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-data/traces/cpu}
LIST=${1:?usage: preregister.sh LIST}
mkdir -p "$OUT/profiles" "$OUT/preregistered"
while read -r m t temp; do
  { [ -z "$m" ] || [ "${m:0:1}" = "#" ]; } && continue
  name="$(echo "$m" | tr , - | tr -d :)_th$(echo "$t" | tr , -)_T$(echo "$temp" | sed 's/\./p/')"
  [ -f "$OUT/$name.jsonl" ] && { echo "$name is already captured" >&2; exit 2; }
  "$PY" -m polyspec profile $(echo "$m" | tr , ' ') --cascade --thresholds "$t" \
    --temperature "$temp" --traces "$OUT" --exclude "$name" --prompts 6 --tokens 128 \
    --out "$OUT/profiles/$name.json" >/dev/null
  "$PY" -m polyspec forecast --traces "$OUT" --models "$m" --thresholds "$t" \
    --temperature "$temp" --profile "$OUT/profiles/$name.json" --json \
    | "$PY" -c "import json,sys; d=json.load(sys.stdin); d['name']='$name'; print(json.dumps(d))" \
    >> "$OUT/preregistered/forecasts.jsonl"
  echo "forecast $name"
done < "$LIST"
