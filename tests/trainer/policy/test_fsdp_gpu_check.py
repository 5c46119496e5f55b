"""``bench/gpu_check.sh --smoke``: every measurement of the GPU check runs on tiny shapes on CPU, in
its own process, and prints its PASS line: the trainer part (log-prob memory, gradient checkpointing
under FSDP2, the update with each gradient-sync setting and on 2 ranks, disk-sync staging) and the
vLLM part (API presence, reload after sleep, weight sync cost; sleep mode and the CUDA test run are
SKIP lines on CPU). A measurement forced out of memory prints a FAIL line, the next one still runs,
and the check exits 1."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MACHINE = r" \| .+ cores, load [\d.]+$"


def smoke(*args: str, expect: int = 0) -> str:
    env = {**os.environ, "PY": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--smoke", *args], capture_output=True,
                          text=True, timeout=1800, env=env, cwd=ROOT)
    assert proc.returncode == expect, (proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def test_trainer_part_of_the_gpu_check_prints_a_pass_line_per_measurement():
    """Each measurement in its own process (8 on the smoke shapes, the 2-rank update on 2 gloo ranks)."""
    out = smoke("trainer")
    for pattern in (r"^PASS logprob_peak_memory L=256: plain \+[\d.]+ GiB vs chunked \+[\d.]+ GiB",
                    r"^PASS logprob_peak_memory L=512: ",
                    r"^PASS fsdp2_gradient_checkpointing: 2 layers L=64: grad_norm (\S+) vs (\S+) without",
                    r"^PASS update_every_micro_batch: 1 rank, 2 layers, 2 x 64 tokens: peak [\d.]+ GiB per rank, "
                    r"[\d.]+ tokens/s, MFU [\d.]+ %",
                    r"^PASS update_last_micro_batch: 1 rank, ",
                    r"^PASS update_every_micro_batch_2ranks: 2 ranks, 2 layers, 4 x 64 tokens: ",
                    r"^PASS disk_sync_staging: [\d.]+ GB in [\d.]+ s = [\d.]+ GB/s .*under 1 GB: a latency, not "
                    r"extrapolated"):
        assert re.search(pattern + ".*" + MACHINE, out, re.M), (pattern, out)
    assert not re.search(r"^FAIL", out, re.M)
    with_ckpt, without = re.search(r"grad_norm (\S+) vs (\S+) without", out).groups()
    assert float(with_ckpt) > 0 and float(with_ckpt) == pytest.approx(float(without), rel=1e-2)


def test_a_measurement_out_of_memory_prints_a_fail_line_and_the_run_goes_on():
    """No allocation allowed past what each measurement's process holds: both measurements fail
    on their own line (the second ran after the first's out-of-memory), and the check exits 1."""
    out = smoke("--memory-limit-mib", "0", "--only", "logprob_L256,checkpointing", expect=1)
    assert re.search(r"^FAIL logprob: out of memory at L=256: .*can't allocate memory.*" + MACHINE, out, re.M), out
    assert re.search(r"^FAIL checkpointing: out of memory at 4 layers: .*" + MACHINE, out, re.M), out
    assert not re.search(r"^PASS", out, re.M)


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make setup installs it)")
def test_vllm_half_of_the_gpu_check_reloads_and_prints_its_lines():
    out = smoke("vllm")
    assert re.search(r"^PASS vllm_api: vllm [\d.]+: 14 modules.*" + MACHINE, out, re.M), out
    assert re.search(r"^SKIP vllm_sleep_wake: vLLM's CPU build has no sleep mode", out, re.M), out
    gap, stale = map(float, re.search(r"^PASS vllm_reload_after_sleep: reload: probe gap ([\d.]+) nats "
                                      r"\(limit 0.1; the old weights' ([\d.]+)\)", out, re.M).groups())
    assert gap < 1e-3 < stale  # fp32 engine: the new weights exactly; the old ones far off
    assert re.search(r"^PASS weight_sync_cost: [\d.]+ GB: write [\d.]+ s \+ reload [\d.]+ s", out, re.M), out
    assert re.search(r"^SKIP vllm_tests: --smoke", out, re.M) and not re.search(r"^FAIL", out, re.M)
