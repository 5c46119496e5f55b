#!/usr/bin/env bash
# The main job behind `make demo`, on the bundled default (generated pymethods tasks, SmolLM2-135M, CPU):
#   1. generate a small pymethods family once (`swerl tasks generate pymethods`: tier 1, 8 training
#      tasks and two held-out splits of 8, for the `swerl eval --from-run` the run suggests next);
#   2. `swerl sandbox-test --config`: on the tasks the demo trains and evaluates on (its config's
#      data and eval sections), every oracle must earn reward 1 and every null attempt 0 in Docker,
#      so the rewards the run trains on can be trusted (SKIP_SANDBOX_TEST=1 skips it; the whole
#      family: `swerl sandbox-test runs/pymethods-demo/train`);
#   3. `swerl train` 4 steps of RLOO-n with TIS and dynamic sampling on those tasks (exports included);
#   4. `swerl select-checkpoint` picks the export with the best trailing EMA of the reward.
set -euo pipefail
OUT=${1:-runs/demo}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/pymethods-demo}
CONFIG=${CONFIG:-examples/pymethods-smollm2-cpu.yaml}
start=$(date +%s)
mkdir -p "$OUT"

step() {  # step NAME CMD...: run CMD; if it fails, say which step failed and with what exit code, and stop
  local name=$1 rc=0
  shift
  "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "demo failed: step '$name' exited with code $rc (command: $*)" >&2
    exit "$rc"
  fi
}

if [ ! -f "$TASKS/manifest.json" ]; then
  step "tasks generate" "$SWERL" tasks generate pymethods "$TASKS" --tiers 1 --count 8 --heldout-count 8 --force
fi
rm -rf "$OUT/train"  # each demo trains afresh; DEMO_DIR=runs/other make demo keeps this one
# DEMO_SET="loop.max_steps=2" (space-separated key=value) adds --set overrides, e.g. a shorter run.
sets=(--set "data.tasks=$TASKS/train")
for kv in ${DEMO_SET:-}; do sets+=(--set "$kv"); done
if [ "${SKIP_SANDBOX_TEST:-0}" != 1 ]; then
  step sandbox-test "$SWERL" sandbox-test --config "$CONFIG" "${sets[@]}" --json "$OUT/sandbox-test.json"
fi
step train "$SWERL" train "$CONFIG" --run-dir "$OUT/train" "${sets[@]}"
step select-checkpoint "$SWERL" select-checkpoint "$OUT/train"
echo "demo finished in $(( $(date +%s) - start )) s; run directory: $OUT/train" >&2
