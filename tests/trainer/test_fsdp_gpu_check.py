"""``bench/gpu_check.sh --smoke``: every step of the GPU check plan runs on tiny shapes on CPU and
prints its PASS line: the trainer half (log-prob memory, gradient checkpointing under FSDP2,
throughput, the seed's memory split) and the vLLM half (API presence, reload after sleep, weight
sync cost; sleep mode and the CUDA test run are SKIP lines on CPU)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE = r" \| .+ cores, load [\d.]+$"


def smoke(part: str) -> str:
    env = {**os.environ, "PY": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--smoke", part], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def test_trainer_half_of_the_gpu_check_prints_a_pass_line_per_step():
    out = smoke("trainer")
    for pattern in (r"^PASS logprob_peak_memory L=64: plain \+[\d.]+ GiB vs chunked \+[\d.]+ GiB",
                    r"^PASS logprob_peak_memory L=128: ",
                    r"^PASS fsdp2_gradient_checkpointing: 2 layers L=64: grad_norm (\S+) vs (\S+) without",
                    r"^PASS update_throughput: [\d.]+ tokens/s, .* MFU [\d.]+ %",
                    r"^PASS seed_memory_split: 2 layers at L=64: .* seed rank of 8 GPUs: state 15.3 \+ unsharded "
                    r"grads 30.5 \+ update"):
        assert re.search(pattern + ".*" + MACHINE, out, re.M), (pattern, out)
    assert not re.search(r"^FAIL", out, re.M)
    with_ckpt, without = re.search(r"grad_norm (\S+) vs (\S+) without", out).groups()
    assert float(with_ckpt) > 0 and float(with_ckpt) == pytest.approx(float(without), rel=1e-2)


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make setup installs it)")
def test_vllm_half_of_the_gpu_check_reloads_and_prints_its_lines():
    out = smoke("vllm")
    assert re.search(r"^PASS vllm_api: vllm [\d.]+: 8 modules.*" + MACHINE, out, re.M), out
    assert re.search(r"^SKIP vllm_sleep_wake: vLLM's CPU build has no sleep mode", out, re.M), out
    gap, stale = map(float, re.search(r"^PASS vllm_reload_after_sleep: reload: probe gap ([\d.]+) nats "
                                      r"\(limit 0.1; the old weights' ([\d.]+)\)", out, re.M).groups())
    assert gap < 1e-3 < stale  # fp32 engine: the new weights exactly; the old ones far off
    assert re.search(r"^PASS weight_sync_cost: [\d.]+ GB: write [\d.]+ s \+ reload [\d.]+ s", out, re.M), out
    assert re.search(r"^SKIP vllm_tests: --smoke", out, re.M) and not re.search(r"^FAIL", out, re.M)
