#!/usr/bin/env bash
# The main job behind `make demo`, on the bundled default (HumanEval tasks, SmolLM2-135M, CPU):
#   1. import the 164 HumanEval problems as pymethods2test-shaped task folders (once);
#   2. `swerl sandbox-test`: every oracle must earn reward 1 and every null attempt 0 in Docker,
#      so the rewards the run trains on can be trusted (SKIP_SANDBOX_TEST=1 skips it);
#   3. `swerl train` a few steps of RLOO-n with TIS on 12 short HumanEval problems (exports included);
#   4. `swerl select-checkpoint` picks the export with the best trailing EMA of the reward.
set -euo pipefail
OUT=${1:-runs/demo}
SWERL=${SWERL:-.venv/bin/swerl}
TASKS=${TASKS:-runs/humaneval-tasks}
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

if [ ! -d "$TASKS/humaneval-163" ]; then
  step "tasks import" "$SWERL" tasks import humaneval "$TASKS" --force
fi
if [ "${SKIP_SANDBOX_TEST:-0}" != 1 ]; then
  step sandbox-test "$SWERL" sandbox-test "$TASKS" --json "$OUT/sandbox-test.json"
fi
rm -rf "$OUT/train"  # each demo trains afresh; DEMO_DIR=runs/other make demo keeps this one
# DEMO_SET="loop.max_steps=2" (space-separated key=value) adds --set overrides, e.g. a shorter run.
sets=(--set "data.tasks=$TASKS")
for kv in ${DEMO_SET:-}; do sets+=(--set "$kv"); done
step train "$SWERL" train examples/humaneval-smollm2-cpu.yaml --run-dir "$OUT/train" "${sets[@]}"
step select-checkpoint "$SWERL" select-checkpoint "$OUT/train"
echo "demo finished in $(( $(date +%s) - start )) s; run directory: $OUT/train" >&2
