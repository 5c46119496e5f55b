"""Data parallelism: 2 CPU processes (gloo, launched by torchrun) update exactly like 1 process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swerl.trainer.distributed import process_group_backend, rank_slice

HERE = Path(__file__).parent


def test_rank_slice_pads_to_equal_rows():
    assert rank_slice(9, 0, 2) == (range(0, 5), 5)
    assert rank_slice(9, 1, 2) == (range(5, 9), 5)
    assert rank_slice(1, 1, 2) == (range(1, 1), 1)


def test_offloaded_state_on_cuda_gets_a_gloo_backend_beside_nccl():
    """CPUOffloadPolicy's host DTensors (the gradient norm's sum) need a CPU backend; NCCL has none."""
    assert process_group_backend(use_cuda=True, cpu_offload=True) == "cuda:nccl,cpu:gloo"
    assert process_group_backend(use_cuda=True, cpu_offload=False) == "nccl"
    assert process_group_backend(use_cuda=False, cpu_offload=True) == "gloo"


REDUCTIONS = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm_global"]
KL_CASE = "kl+sequence_mask"  # sequence-level MIS and a KL term to a frozen reference (dp_worker)


def test_two_processes_equal_one(tmp_path):
    """One torchrun launch (2 gloo ranks, 5 + 4 rows, one padding row) per reduction mode, and
    with sequence MIS plus the KL term (each rank computes pi_ref of its rows)."""
    sys.path.insert(0, str(HERE))
    from dp_worker import update

    from swerl.trainer.distributed import DistInfo

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "dp_worker.py"), str(tmp_path), *REDUCTIONS, KL_CASE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    initial = build_initial()
    for reduction in [*REDUCTIONS, KL_CASE]:
        single_state, single_metrics = update(None, reduction, DistInfo())
        dp_state = torch.load(tmp_path / f"weights-{reduction}.pt")
        dp_metrics = json.loads((tmp_path / f"metrics-{reduction}.json").read_text())
        for key, value in single_state.items():
            torch.testing.assert_close(dp_state[key], value, rtol=1e-5, atol=1e-6)
        assert any(not torch.equal(dp_state[k], v) for k, v in initial.items())
        keys = ["loss/policy", "grad_norm", "policy/num_tokens", "policy/clip_fraction"]
        if reduction == KL_CASE:
            keys += ["loss/kl", "policy/kl_ref_mean", "loss/kl_share", "tis/masked_fraction", "tis/ratio_mean"]
            assert 0 < single_metrics["tis/masked_fraction"] < 1 and single_metrics["policy/kl_ref_mean"] > 0
        for key in keys:
            assert dp_metrics[key] == pytest.approx(single_metrics[key], rel=1e-5, abs=1e-7), (reduction, key)
    # The run-directory check of the same launch: a shared folder passes and is left clean; a
    # folder per rank fails on both ranks, naming rank 1.
    for rank in (0, 1):
        outcome = json.loads((tmp_path / f"shared-rank{rank}.json").read_text())
        assert outcome["shared"] == "ok" and outcome["shared_left"] == []
        assert "rank 1 on" in outcome["per_rank"] and "not shared by every rank" in outcome["per_rank"]
        assert "rank 0 on" not in outcome["per_rank"]


def build_initial():
    from ._support import build_tiny_model

    return build_tiny_model(16, seed=0).state_dict()


@pytest.mark.docker
@pytest.mark.slow
def test_torchrun_train_matches_single_process(tmp_path, tiny_model_dir):
    """`torchrun --nproc_per_node 2 -m swerl.cli train` (rank 0 rolls out, both ranks update their
    slice) logs the same losses and gradient norms as one process, step after step."""
    sys.path.insert(0, str(HERE))
    from .test_loop import records, tiny_config

    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(tiny_config(tiny_model_dir).to_yaml())
    swerl = [sys.executable, "-m", "swerl.cli", "train", str(cfg_path)]
    single = subprocess.run([*swerl, "--run-dir", str(tmp_path / "single")], capture_output=True, text=True,
                            timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    dp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                         *swerl[1:], "--run-dir", str(tmp_path / "dp")], capture_output=True, text=True, timeout=300)
    assert dp.returncode == 0, dp.stderr[-2000:]
    for a, b in zip(records(tmp_path / "single"), records(tmp_path / "dp"), strict=True):
        assert a["reward/avg_raw_reward"] == b["reward/avg_raw_reward"]
        assert a["policy/num_tokens"] == b["policy/num_tokens"]
        for key in ("loss/policy", "grad_norm", "tis/imp_ratio_mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-9), key
    assert (tmp_path / "dp" / "checkpoints" / "global_step_3" / "rng_rank1.pt").is_file()
