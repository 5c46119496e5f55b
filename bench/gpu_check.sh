#!/usr/bin/env bash
# The trainer's update on a GPU machine, without vLLM or internet: a Qwen3-8B-shaped model built
# from a config (random weights), FSDP2 on one GPU, bf16, gradient checkpointing, the seed run's
# micro-batch (1) and sequence length (32768). Prints tokens/s, MFU against the bf16 peak and peak
# memory (bench/gpu_check.py says how they are counted). Capped at 8 minutes.
#   bash bench/gpu_check.sh                 # GPU: one H200 (torch + transformers + swerl installed)
#   bash bench/gpu_check.sh --layers 12     # more of the 36 layers, if memory allows
#   bash bench/gpu_check.sh --smoke         # tiny shapes on CPU (gloo): what the test suite runs
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ " $* " == *" --smoke "* ]]; then
  export OMP_NUM_THREADS=1
  exec timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 bench/gpu_check.py "$@"
fi
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: run with --smoke on CPU")'
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
exec timeout 480 "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 bench/gpu_check.py "$@"
