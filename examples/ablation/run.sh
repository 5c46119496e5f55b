#!/usr/bin/env bash
# The seed ablation sized to answer something on one machine: loss reduction (sequence_mean vs
# seq_mean_token_sum_norm_global) x TIS (on/off) on the CPU default (examples/humaneval-smollm2-cpu.yaml),
# each arm trained as sized by size.args and evaluated on a pinned held-out set before its first
# step and after its last (same eval seeds in every arm: the evaluations pair task by task); then
# `swerl compare` (paired CIs, McNemar, one verdict line per metric) and `swerl report`.
# Behind `make ablation`.
#   usage: examples/ablation/run.sh [OUT_DIR]   (default runs/ablation)
# Knobs (environment):
#   ARMS   arms of arms.txt to train, space-separated, or "all" (default "seqmean-tis seqnorm-tis":
#          with the HF generator the TIS ratio is 1, so the no-TIS arms would repeat the TIS arms)
#   SEEDS  seed replicas per arm, comma-separated (default 0): OUT_DIR/ARM/seed<S>
#   SIZE   the --set lines that size each arm (default examples/ablation/size.args)
#   SETS   extra --set overrides for every arm, space-separated (e.g. "loop.max_steps=4")
#   BASE   the config every arm starts from (default examples/humaneval-smollm2-cpu.yaml)
#   TASKS  the task folder of training and evaluation (default runs/humaneval-tasks, imported if absent)
set -euo pipefail
OUT=${1:-runs/ablation}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/humaneval-tasks}
HERE=$(dirname "$0")
BASE=${BASE:-examples/humaneval-smollm2-cpu.yaml}
SIZE=${SIZE:-$HERE/size.args}
SEEDS=${SEEDS:-0}
ARMS=${ARMS:-seqmean-tis seqnorm-tis}
SETS=${SETS:-}
start=$(date +%s)
mkdir -p "$OUT"

if [[ "$(basename "$TASKS")" == *humaneval* ]] && [ ! -d "$TASKS/humaneval-163" ]; then
  "$SWERL" tasks import humaneval "$TASKS" --force
fi
sets=(--set "data.tasks=$TASKS" --set "eval.tasks=$TASKS")
while read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  sets+=(--set "$line")
done < "$SIZE"
for extra in $SETS; do sets+=(--set "$extra"); done

runs=()
while read -r arm reduction tis; do
  case "$arm" in ''|'#'*) continue ;; esac
  if [ "$ARMS" != all ] && [[ " $ARMS " != *" $arm "* ]]; then continue; fi
  runs+=("$OUT/$arm")
  if [ -f "$OUT/$arm/.done" ]; then echo "arm $arm: done already" >&2; continue; fi
  echo "arm $arm: loss_reduction=$reduction use_tis=$tis seeds=$SEEDS" >&2
  # --resume latest: an arm stopped part way continues from its last checkpoint.
  "$SWERL" train "$BASE" --seeds "$SEEDS" --out "$OUT/$arm" --resume latest "${sets[@]}" \
    --set "algorithm.loss_reduction=$reduction" --set "algorithm.use_tis=$tis"
  touch "$OUT/$arm/.done"
done < "$HERE/arms.txt"

if [ "${#runs[@]}" -ge 2 ]; then
  "$SWERL" compare "${runs[@]}" --all-pairs --json "$OUT/compare.json" | tee "$OUT/compare.txt"
fi
"$SWERL" report "${runs[@]}" --out "$OUT/report.html" | tee "$OUT/table.txt"
echo "ablation finished in $(( $(date +%s) - start )) s; compare: $OUT/compare.txt, report: $OUT/report.html" >&2
