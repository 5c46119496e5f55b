"""``bench/gpu_check.sh --smoke``: the GPU check's update path (FSDP2, bf16, gradient
checkpointing, micro-batch 1) on tiny Qwen3 shapes on CPU prints every figure it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_smoke_mode_prints_its_lines():
    env = {**os.environ, "PY": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--smoke"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for pattern in (r"^model: \d+\.\d+ B parameters, 2 layers", r"^tokens_per_s: \d+\.\d+ tokens/s$",
                    r"^mfu: \d+\.\d+ % of [\d.e+-]+ TFLOP/s", r"^peak_memory: \d+ MiB RSS$",
                    r"^loss: \S+ \(grad_norm \S+\)$"):
        assert re.search(pattern, out, re.M), (pattern, out)
    assert float(re.search(r"grad_norm (\S+)\)", out).group(1)) > 0
