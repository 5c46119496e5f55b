#!/usr/bin/env bash
# The GPU check of the seed recipe (docs/scaling.md, "The GPU check"). Every measurement runs in its
# own process and prints "PASS|FAIL|SKIP <measurement>: <value> | <machine>"; one that runs out of
# memory, times out or dies prints a FAIL line naming its size, and the run goes on. Exit 1 when a
# line is FAIL, 3 when the machine cannot run it at all.
#   bash bench/gpu_check.sh             # the trainer part on one 80 GB GPU, within one 8-minute call:
#                                       #   log-prob peak 8k/16k/32k, gradient checkpointing, the update
#                                       #   with each model.grad_sync, cached vs allocated memory after it,
#                                       #   disk-sync staging GB/s; the 2-rank update when 2 GPUs are there
#   bash bench/gpu_check.sh vllm        # the vLLM part (bench/gpu_check_vllm.py; needs vLLM's CUDA wheel)
#   bash bench/gpu_check.sh --smoke [trainer|vllm]   # every measurement on tiny shapes on CPU (the suite)
#   --memory-limit-mib M                # cap each measurement's allocations (the suite forces an OOM with it)
#   --only 'update_*,disk_sync'         # only the measurements whose names match (comma-separated shell patterns)
# A machine with CUDA torch + transformers but no pydantic (no network) installs swerl's pure-Python
# dependencies from wheels/gpu-check/ (git-ignored, 7 MB), fetched beforehand where there is a network:
#   for v in 3.10 3.11 3.12; do pip download --only-binary=:all: --platform manylinux2014_x86_64 \
#     --python-version $v -d wheels/gpu-check pydantic; done
# (pydantic, pydantic-core for each Python, annotated-types, typing-inspection, typing-extensions;
# torch, transformers and PyYAML come with the machine). Carry the folder with the tree; the wheels
# go to /tmp/gpu-check-site, never into the machine's environment.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
WHEELS=wheels/gpu-check
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
smoke=0; parts=(); limit=(); only="*"
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --memory-limit-mib) shift; limit=(--memory-limit-mib "$1") ;;
    --only) shift; only=$1 ;;
    trainer|vllm) parts+=("$1") ;;
    *) echo "usage: bash bench/gpu_check.sh [--smoke] [--memory-limit-mib M] [--only NAME] [trainer|vllm]" >&2; exit 2 ;;
  esac
  shift
done
[ ${#parts[@]} -eq 0 ] && parts=(trainer)
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  [ -d "$WHEELS" ] || { echo "FAIL setup: pydantic is not importable and $WHEELS/ is missing (see the pip download command at the top of $0)"; exit 3; }
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" --target /tmp/gpu-check-site --no-compile \
    pydantic || { echo "FAIL setup: installing from $WHEELS/ failed"; exit 3; }
  export PYTHONPATH="/tmp/gpu-check-site:$PYTHONPATH"
fi
if [ $smoke -eq 1 ]; then
  export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
  flag=(--smoke); each=300; gpus=2  # the 2-rank step runs on 2 gloo processes
else
  gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  [ "$gpus" -ge 1 ] || { echo "FAIL setup: no CUDA device: run with --smoke on CPU"; exit 3; }
  flag=(); each=150
fi
status=0

# Whether NAME matches one of --only's comma-separated shell patterns.
selected() {
  local pattern
  IFS=, read -ra patterns <<<"$only"
  for pattern in "${patterns[@]}"; do
    # shellcheck disable=SC2053
    [[ $1 == $pattern ]] && return 0
  done
  return 1
}

# One measurement: NAME SIZE RANKS ARGS...; a FAIL line of its own when the process gives none.
measure() {
  local name=$1 size=$2 ranks=$3; shift 3
  local out rc
  selected "$name" || return 0
  [ $smoke -eq 1 ] && size="smoke shapes"
  out=$(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout "$each" "$PY" -m torch.distributed.run \
        --standalone --nproc_per_node "$ranks" bench/gpu_check.py "$@" "${flag[@]}" "${limit[@]}" 2>/tmp/gpu-check-$name.err)
  rc=$?
  [ -n "$out" ] && echo "$out"
  if [ $rc -ne 0 ]; then
    status=1
    if ! grep -q '^FAIL' <<<"$out"; then
      why="exit code $rc"; [ $rc -eq 124 ] && why="timed out after ${each} s"
      grep -qi 'out of memory\|OutOfMemory\|cannot allocate' /tmp/gpu-check-$name.err && why="out of memory ($why)"
      echo "FAIL $name: $why at $size; $(grep -v '^\s*$' /tmp/gpu-check-$name.err | tail -1 | cut -c1-200)"
    fi
  fi
}

for part in "${parts[@]}"; do
  if [ "$part" = vllm ]; then
    timeout 540 "$PY" bench/gpu_check_vllm.py "${flag[@]}" || status=1
    continue
  fi
  if [ $smoke -eq 1 ]; then lengths=(256 512); else lengths=(8192 16384 32768); fi
  for L in "${lengths[@]}"; do measure logprob_L$L "L=$L" 1 logprob --seq-len "$L"; done
  measure checkpointing "2 layers at L=8192" 1 checkpointing
  for sync in every_micro_batch last_micro_batch; do
    measure update_$sync "4 layers, 2 x 32768 tokens" 1 update --grad-sync $sync
  done
  if [ "$gpus" -ge 2 ]; then
    measure update_2ranks "2 ranks, 4 layers, 2 x 32768 tokens each" 2 update --grad-sync every_micro_batch
  else
    selected update_2ranks && echo "SKIP update_2ranks: one GPU here"
  fi
  measure disk_sync "4 layers (4.1 GB bf16)" 1 disk_sync
done
exit $status
