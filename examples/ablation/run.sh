#!/usr/bin/env bash
# The seed ablation, small: loss reduction (sequence_mean vs seq_mean_token_sum_norm_global)
# x TIS (on/off) on the CPU default (examples/humaneval-smollm2-cpu.yaml, shrunk by shrink.args),
# then one `swerl report` comparing the four arms. Behind `make ablation`.
#   usage: examples/ablation/run.sh [OUT_DIR]   (default runs/ablation)
# Every arm has the same seed, prompts and sampling seeds: step 1 samples the same episodes in
# every arm; the arms part from the first update on.
set -euo pipefail
OUT=${1:-runs/ablation}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/humaneval-tasks}
HERE=$(dirname "$0")
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
while read -r arm reduction tis; do
  case "$arm" in ''|'#'*) continue ;; esac
  if [ -f "$OUT/$arm/.done" ]; then echo "arm $arm: done already" >&2; runs+=("$OUT/$arm"); continue; fi
  rm -rf "${OUT:?}/$arm"
  echo "arm $arm: loss_reduction=$reduction use_tis=$tis" >&2
  "$SWERL" train "$BASE" --run-dir "$OUT/$arm" --set "data.tasks=$TASKS" "${shrink[@]}" \
    --set "algorithm.loss_reduction=$reduction" --set "algorithm.use_tis=$tis"
  touch "$OUT/$arm/.done"
  runs+=("$OUT/$arm")
done < "$HERE/arms.txt"

"$SWERL" report "${runs[@]}" --out "$OUT/report.html" | tee "$OUT/table.txt"
echo "ablation finished in $(( $(date +%s) - start )) s; report: $OUT/report.html" >&2
