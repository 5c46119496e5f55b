#!/usr/bin/env bash
# The GPU check plan of the seed recipe: two calls that fit a lent device's 15 minutes, each step
# one line "PASS|FAIL|SKIP <step>: <value> | <machine>"; exit 1 when a line is FAIL.
#   bash bench/gpu_check.sh trainer      # call 1 (~5 min, capped at 9): bench/gpu_check.py on one GPU:
#                                        #   log-prob peak memory 8k/16k/32k chunked vs plain, gradient
#                                        #   checkpointing under FSDP2, update throughput/MFU at 32k and
#                                        #   the seed's memory split
#   bash bench/gpu_check.sh vllm         # call 2 (~5 min, capped at 9): bench/gpu_check_vllm.py: vLLM API
#                                        #   presence, sleep/wake, sleep(2) + reload, weight-sync cost,
#                                        #   pytest -m vllm tests/inference on CUDA
#   bash bench/gpu_check.sh --smoke [trainer|vllm]   # every step on tiny shapes on CPU (the suite runs it)
# Without a part, both run one after the other. A device without pydantic (swerl's configs) or vLLM
# takes wheels carried in .whl/ (git-ignored; prepare them with `pip download --only-binary=:all:
# --no-deps -d .whl pydantic pydantic-core annotated-types typing-inspection` for its Python): they
# are installed to /tmp/site first. vLLM's CUDA wheel is larger than a call can carry: without it,
# the vllm part prints FAIL lines that say so.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
smoke=0; parts=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1 ;;
    trainer|vllm) parts+=("$arg") ;;
    *) echo "usage: bash bench/gpu_check.sh [--smoke] [trainer|vllm]" >&2; exit 2 ;;
  esac
done
[ ${#parts[@]} -eq 0 ] && parts=(trainer vllm)
if [ -d .whl ] && ! "$PY" -c "import pydantic" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
if [ $smoke -eq 1 ]; then
  export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
  flag=--smoke; limit=120
else
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run with --smoke on CPU")' || exit 3
  flag=; limit=540
fi
status=0
for part in "${parts[@]}"; do
  if [ "$part" = trainer ]; then
    # expandable segments: the update's peak without fragmentation (vLLM's sleep mode forbids it: not in the vllm part)
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout $limit "$PY" -m torch.distributed.run --standalone \
      --nproc_per_node 1 bench/gpu_check.py $flag || status=1
  else
    timeout $limit "$PY" bench/gpu_check_vllm.py $flag || status=1
  fi
done
exit $status
