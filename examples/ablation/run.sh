#!/usr/bin/env bash
# The seed ablation, small: loss reduction (sequence_mean vs seq_mean_token_sum_norm_global)
# x TIS (on/off) on the CPU default (examples/humaneval-smollm2-cpu.yaml, shrunk by shrink.args),
# then one `swerl report` comparing the four arms. Behind `make ablation`.
#   usage: [ARMS=FILE] examples/ablation/run.sh [OUT_DIR]   (default runs/ablation)
# ARMS: the arms file (default arms.txt; corrections.txt holds the rollout-correction and KL arms).
# Every arm has the same seed, prompts and sampling seeds: step 1 samples the same episodes in
# every arm; the arms part from the first update on.
set -euo pipefail
OUT=${1:-runs/ablation}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/humaneval-tasks}
HERE=$(dirname "$0")
ARMS=${ARMS:-$HERE/arms.txt}
BASE=${BASE:-examples/humaneval-smollm2-cpu.yaml}
start=$(date +%s)
mkdir -p "$OUT"

if [ ! -d "$TASKS/humaneval-163" ]; then
  "$SWERL" tasks import humaneval "$TASKS" --force
fi
shrink=()
while read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  shrink+=(--set "$line")
done < "$HERE/shrink.args"

runs=()
while read -r arm overrides; do
  case "$arm" in ''|'#'*) continue ;; esac
  if [ -f "$OUT/$arm/.done" ]; then echo "arm $arm: done already" >&2; runs+=("$OUT/$arm"); continue; fi
  rm -rf "${OUT:?}/$arm"
  echo "arm $arm: $overrides" >&2
  sets=()
  for kv in $overrides; do sets+=(--set "$kv"); done
  "$SWERL" train "$BASE" --run-dir "$OUT/$arm" --set "data.tasks=$TASKS" "${shrink[@]}" "${sets[@]}"
  touch "$OUT/$arm/.done"
  runs+=("$OUT/$arm")
done < "$ARMS"

"$SWERL" report "${runs[@]}" --out "$OUT/report.html" | tee "$OUT/table.txt"
echo "ablation finished in $(( $(date +%s) - start )) s; report: $OUT/report.html" >&2
