#!/usr/bin/env bash
# `make learn`: does training with swerl make the default model better at tasks it did not train on?
#   1. generate the pymethods family once (train, heldout-instance, heldout-template);
#   2. train the default model on the training split (examples/pymethods-smollm2-cpu-learn.yaml);
#   3. evaluate both held-out splits with the run's initial model (--step 0) and its last export,
#      with one evaluation seed, so each pair differs by the weights alone;
#   4. `swerl compare` each pair: per-task paired bootstrap CI and McNemar's test, one verdict per
#      metric (`better at 95%` when both agree).
#   usage: examples/learn/run.sh [OUT_DIR]   (default runs/learn)
# Knobs (environment): TIERS (the tiers generated, trained and evaluated: 1, those whose base
# pass@1 is between 0.15 and 0.6, docs/experiments.md), TASKS (default runs/pymethods-learn), CONFIG,
# SETS (extra --set overrides, space-separated), SAMPLES (eval samples per task, 4), HELDOUT
# (tasks per held-out split, 32: spread evenly over the split's templates by the generator).
set -euo pipefail
OUT=${1:-runs/learn}
SWERL=${SWERL:-.venv/bin/swerl}
TIERS=${TIERS:-1}
TASKS=${TASKS:-runs/pymethods-learn}
CONFIG=${CONFIG:-examples/pymethods-smollm2-cpu-learn.yaml}
SAMPLES=${SAMPLES:-4}
start=$(date +%s)
mkdir -p "$OUT"

step() {  # step NAME CMD...: run CMD; on failure name the step and its exit code, and stop
  local name=$1 rc=0
  shift
  "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "learn failed: step '$name' exited with code $rc (command: $*)" >&2
    exit "$rc"
  fi
}

if [ ! -f "$TASKS/manifest.json" ]; then
  step "tasks generate" "$SWERL" tasks generate pymethods "$TASKS" --tiers "$TIERS" --seed 0 \
    --heldout-count "${HELDOUT:-32}"
fi
sets=(--set "data.tasks=$TASKS/train")
for kv in ${SETS:-}; do sets+=(--set "$kv"); done
if [ ! -f "$OUT/train/.done" ]; then
  step train "$SWERL" train "$CONFIG" --run-dir "$OUT/train" --resume latest "${sets[@]}"
  touch "$OUT/train/.done"
fi
last=$(ls "$OUT/train/exports" | sed -n 's/^global_step_\([0-9]*\)$/\1/p' | sort -n | tail -1)
[ -n "$last" ] || { echo "learn failed: $OUT/train/exports holds no export" >&2; exit 1; }
for split in instance template; do
  for s in 0 "$last"; do
    dir="$OUT/eval/$split-step$s"
    [ -f "$dir/summary.json" ] && continue
    step "eval $split step $s" "$SWERL" eval "$TASKS/heldout-$split" --from-run "$OUT/train" --step "$s" \
      -k "$SAMPLES" --seed 0 --out "$dir"
  done
  step "compare $split" "$SWERL" compare "$OUT/eval/$split-step0" "$OUT/eval/$split-step$last" \
    --json "$OUT/compare-$split.json" | tee "$OUT/compare-$split.txt"
done
echo "learn finished in $(( $(date +%s) - start )) s; run directory: $OUT/train" >&2
