#!/usr/bin/env bash
# The seed ablation sized to answer something on one machine: loss reduction (sequence_mean vs
# seq_mean_token_sum_norm_global) x TIS (on/off) on the generated pymethods family and the CPU
# default model (examples/pymethods-smollm2-cpu-learn.yaml), each arm trained as sized by size-pymethods.args and evaluated on a pinned held-out set before its first
# step and after its last (same eval seeds in every arm: the evaluations pair task by task); then
# `swerl compare` (paired CIs, McNemar, one verdict line per metric) and `swerl report`.
# Behind `make ablation`.
#   usage: examples/ablation/run.sh [OUT_DIR]   (default runs/ablation)
# Knobs (environment):
#   ARMS_FILE  the arms file: one arm per line, its name then the --set overrides that make it
#          (default arms.txt; corrections.txt holds the rollout-correction and KL arms)
#   ARMS   arms of ARMS_FILE to train, space-separated, or "all" (default "seqmean-tis seqnorm-tis":
#          with the HF generator the TIS ratio is 1, so the no-TIS arms would repeat the TIS arms)
#   SEEDS  seed replicas per arm, comma-separated (default 0): OUT_DIR/ARM/seed<S>
#   SIZE   the --set lines that size each arm (default examples/ablation/size-pymethods.args)
#   SETS   extra --set overrides for every arm, space-separated (e.g. "loop.max_steps=4")
#   BASE   the config every arm starts from (default examples/pymethods-smollm2-cpu-learn.yaml)
#   TASKS  the task folder (default runs/pymethods-learn, generated with tier 1 if absent): a
#          generated family trains on TASKS/train and evaluates TASKS/heldout-instance; any other
#          folder is both (the HumanEval arms: BASE=examples/humaneval-smollm2-cpu.yaml
#          TASKS=runs/humaneval-tasks SIZE=examples/ablation/size.args)
set -euo pipefail
OUT=${1:-runs/ablation}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/pymethods-learn}
HERE=$(dirname "$0")
ARMS_FILE=${ARMS_FILE:-$HERE/arms.txt}
BASE=${BASE:-examples/pymethods-smollm2-cpu-learn.yaml}
SIZE=${SIZE:-$HERE/size-pymethods.args}
SEEDS=${SEEDS:-0}
ARMS=${ARMS:-seqmean-tis seqnorm-tis}
SETS=${SETS:-}
start=$(date +%s)
mkdir -p "$OUT"

if [[ "$(basename "$TASKS")" == *humaneval* ]] && [ ! -d "$TASKS/humaneval-163" ]; then
  "$SWERL" tasks import humaneval "$TASKS" --force
fi
if [[ "$(basename "$TASKS")" == pymethods* ]] && [ ! -f "$TASKS/manifest.json" ]; then
  "$SWERL" tasks generate pymethods "$TASKS" --tiers 1 --seed 0 --heldout-count 32
fi
if [ -f "$TASKS/manifest.json" ]; then  # a generated family: its splits
  sets=(--set "data.tasks=$TASKS/train" --set "eval.tasks=$TASKS/heldout-instance")
else
  sets=(--set "data.tasks=$TASKS" --set "eval.tasks=$TASKS")
fi
while read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  sets+=(--set "$line")
done < "$SIZE"
for extra in $SETS; do sets+=(--set "$extra"); done

runs=()
while read -r arm overrides; do
  case "$arm" in ''|'#'*) continue ;; esac
  if [ "$ARMS" != all ] && [[ " $ARMS " != *" $arm "* ]]; then continue; fi
  runs+=("$OUT/$arm")
  if [ -f "$OUT/$arm/.done" ]; then echo "arm $arm: done already" >&2; continue; fi
  echo "arm $arm: $overrides seeds=$SEEDS" >&2
  arm_sets=()
  for kv in $overrides; do arm_sets+=(--set "$kv"); done
  # --resume latest: an arm stopped part way continues from its last checkpoint.
  "$SWERL" train "$BASE" --seeds "$SEEDS" --out "$OUT/$arm" --resume latest "${sets[@]}" "${arm_sets[@]}"
  touch "$OUT/$arm/.done"
done < "$ARMS_FILE"

if [ "${#runs[@]}" -ge 2 ]; then
  "$SWERL" compare "${runs[@]}" --all-pairs --json "$OUT/compare.json" | tee "$OUT/compare.txt"
fi
"$SWERL" report "${runs[@]}" --out "$OUT/report.html" | tee "$OUT/table.txt"
echo "ablation finished in $(( $(date +%s) - start )) s; compare: $OUT/compare.txt, report: $OUT/report.html" >&2
