"""FSDP2 on CPU with the sequence-chunked LM head: 2 gloo ranks with ``lm_head_chunk_tokens=3`` update
exactly like 1 unsharded process with the model's own head (fp32 and LoRA: rtol 1e-5 / atol 1e-6, gloo
sums in another order), and in bf16 at the bf16 tolerance of ``test_fsdp.py``; every forward went
through the chunked head (the root's head weight is read inside the root's forward, unsharded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swerl.trainer.distributed import DistInfo

HERE = Path(__file__).parents[1]  # tests/trainer: the workers and _support
sys.path.insert(0, str(HERE))
import fsdp_worker as W  # noqa: E402

ONE = DistInfo()


@pytest.fixture(scope="module")
def chunked_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fsdp_lm_head")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "fsdp_lm_head_worker.py"), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("case", ["fp32", "lora", "bf16"])
def test_two_fsdp_ranks_with_the_chunked_head_equal_one_process_with_its_own_head(chunked_run, case):
    lora, bf16 = case == "lora", case == "bf16"
    ref_state, ref_metrics = W.sgd_update("token_mean", ONE, sharded=False, lora=lora, lm_head_chunk_tokens=0)
    state = torch.load(chunked_run / "weights.pt")[case]
    metrics = json.loads((chunked_run / "metrics.json").read_text())[case]
    initial = W.adapter_state(W.lora_model_for(ONE, sharded=False)) if lora else W.build_tiny_model(16, seed=0).state_dict()
    assert metrics["chunked_forwards"] >= 4  # 2 optimizer steps x >= 2 micro-batches, and pi_old's forwards
    deltas = {k: (state[k] - initial[k], ref_state[k] - initial[k]) for k in initial}
    largest = max(float(ref.abs().max()) for _, ref in deltas.values())
    for key, (delta, ref) in deltas.items():
        assert ref.abs().max() > 0 or "norm" in key, key
        if bf16:
            torch.testing.assert_close(delta, ref, rtol=0, atol=0.03 * largest, msg=key)
        else:
            torch.testing.assert_close(delta, ref, rtol=1e-5, atol=1e-6, msg=key)
    for key in ("loss/policy", "grad_norm"):
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-2 if bf16 else 1e-5, abs=0 if bf16 else 1e-7), key
