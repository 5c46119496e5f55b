"""The dry-run's GPU memory row of one trainer rank with each gradient-sync setting, and its
refusal of a run whose update does not fit the GPU (Qwen3-8B's shapes, the seed recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.trainer.config import load_train_config
from swerl.trainer.setup.gpu_budget import rank_memory
from swerl.trainer.setup.plan import make_plan

from tests.trainer.policy.test_fsdp_placement import QWEN3_8B, SEED_YAML

N_8B = 8_190_726_144


@pytest.fixture
def qwen3_8b(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    return tmp_path


WHOLE = "model.lm_head_chunk_tokens=0"  # the model's own head: the whole (rows, window, V) logits


def seed(path, *overrides):
    return load_train_config(SEED_YAML, [f"model.path={path}", *overrides])


def test_the_unsharded_gradients_are_counted_only_with_last_micro_batch(qwen3_8b):
    every = rank_memory(seed(qwen3_8b, WHOLE), QWEN3_8B, N_8B, 4)
    last = rank_memory(seed(qwen3_8b, WHOLE, "model.grad_sync=last_micro_batch"), QWEN3_8B, N_8B, 4)
    assert every.unsharded_grads == 0 and last.unsharded_grads == 4 * N_8B  # 32.8 GB whatever W
    assert last.total - every.total == 4 * N_8B
    assert every.state == 16 * N_8B / 4
    assert every.logits == pytest.approx(2 * 2 * 32768 * 151936 + 4 * 128 * 2**20)  # bf16 logits + gradient + chunks
    # 4 ranks of a node (the seed's torchrun --nproc_per_node 4): 71.6 GB vs 104.3 GB
    assert every.words().startswith("71.6 GB at 4 ranks: state 32.8 + gathered weights 3.3")
    assert last.words().startswith("104.3 GB at 4 ranks: state 32.8 + unsharded fp32 gradients 32.8")
    lines = dict(make_plan(seed(qwen3_8b, WHOLE, "model.grad_sync=last_micro_batch"), 5000, world_size=4).placement)
    assert lines["GPU memory, update peak / rank"] == last.words() + " (GPU size unknown: set model.gpu_memory_gib)"


def test_a_run_that_does_not_fit_the_gpu_is_refused_with_its_numbers(qwen3_8b):
    h100 = "model.gpu_memory_gib=79.6"
    plan = make_plan(seed(qwen3_8b, WHOLE, h100), 5000, world_size=4)  # every_micro_batch, the default: fits
    assert dict(plan.placement)["GPU memory, update peak / rank"].endswith("(GPU: 85.5 GB)")
    with pytest.raises(ConfigError, match=r"needs 104\.3 GB at 4 ranks.*more than one GPU's 85\.5 GB: set "
                                          r"model\.grad_sync=every_micro_batch"):
        make_plan(seed(qwen3_8b, WHOLE, h100, "model.grad_sync=last_micro_batch"), 5000, world_size=4)
    # 8 ranks: 88.0 GB, still over; an H200 (139 GiB) holds it
    with pytest.raises(ConfigError, match=r"needs 88\.0 GB at 8 ranks"):
        make_plan(seed(qwen3_8b, WHOLE, h100, "model.grad_sync=last_micro_batch"), 5000, world_size=8)
    make_plan(seed(qwen3_8b, WHOLE, "model.gpu_memory_gib=139", "model.grad_sync=last_micro_batch"), 5000, world_size=8)


def test_the_chunked_lm_head_counts_one_chunk_of_logits_instead_of_the_whole(qwen3_8b):
    """auto (the default) chunks the seed's 32k-token rows: one 880-position chunk of bf16 logits and
    its gradient, the float32 chunks, and the head's float32 (V, d) weight gradient; 16.9 GB less."""
    whole = rank_memory(seed(qwen3_8b, WHOLE), QWEN3_8B, N_8B, 4)
    auto = rank_memory(seed(qwen3_8b), QWEN3_8B, N_8B, 4)
    assert auto.logits == pytest.approx(2 * 2 * 880 * 151936 + 4 * 128 * 2**20 + 4 * 151936 * 4096)
    assert whole.total - auto.total == pytest.approx(whole.logits - auto.logits) and whole.logits - auto.logits > 16.5e9
    assert "logits + gradient 3.6 (LM head in chunks of 880 positions)" in auto.words()
    fixed = rank_memory(seed(qwen3_8b, "model.lm_head_chunk_tokens=1024"), QWEN3_8B, N_8B, 4)
    assert fixed.logits_chunk == 1024 and fixed.logits > auto.logits > 0
    # an H100 now holds last_micro_batch at 8 ranks (88.0 GB with the whole logits)
    make_plan(seed(qwen3_8b, "model.gpu_memory_gib=79.6", "model.grad_sync=last_micro_batch"), 5000, world_size=8)
    row = dict(make_plan(seed(qwen3_8b), 5000, world_size=4).placement)["update activations / rank"]
    assert row.startswith("LM head in chunks of 880 positions (model.lm_head_chunk_tokens)")


def test_the_dry_run_refuses_it_with_a_config_error(qwen3_8b, tmp_path, monkeypatch):
    import torch

    # As on a 4-GPU node (the dry-run refuses a CUDA device a CPU machine does not have before it plans).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    tasks = Path(__file__).resolve().parents[2] / "fixtures" / "tasks"
    result = CliRunner().invoke(app, ["train", str(SEED_YAML), "--dry-run", "--set", f"model.path={qwen3_8b}",
                                      "--set", f"data.tasks={tasks}", "-o", str(tmp_path / "run"),
                                      "--set", "model.gpu_memory_gib=79.6", "--set", "model.grad_sync=last_micro_batch",
                                      "--set", WHOLE],
                             env={"WORLD_SIZE": "4"})  # as torchrun --nproc_per_node 4 sets it
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2  # main() prints one line
    message = str(result.exception)
    assert "\n" not in message and "needs 104.3 GB at 4 ranks" in message and "more than one GPU's 85.5 GB" in message
