"""Policy loading options: gradient checkpointing changes memory, not the update; bf16 autocast
stays close to fp32."""

from __future__ import annotations

import pytest
import torch

from swerl.rl.config import AlgorithmConfig
from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.model import compute_dtype, load_policy
from swerl.trainer.update import UpdateSettings, train_on_batch

from .test_update import rows_of
from ._support import make_trajectories

ALGO = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)


def update_once(model_dir, **model_opts):
    model, tok, _ = load_policy(ModelConfig(path=str(model_dir), device="cpu", **model_opts), DistInfo())
    model.train()
    trajs = make_trajectories(num_groups=2, group_size=4, seed=11)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0})
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=8, micro_batch_size=4, grad_clip=None,
                       compute_dtype=compute_dtype(ModelConfig(**model_opts)))
    metrics = train_on_batch(model, opt, sched, rows_of(trajs, ALGO), ALGO, s, DistInfo())
    return model, metrics


def test_gradient_checkpointing_gives_the_same_update(tiny_model_dir):
    plain, m1 = update_once(tiny_model_dir)
    ckpt, m2 = update_once(tiny_model_dir, gradient_checkpointing=True)
    assert ckpt.is_gradient_checkpointing and not plain.is_gradient_checkpointing
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-5)
    for a, b in zip(plain.parameters(), ckpt.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_stays_close_to_fp32(tiny_model_dir):
    _, fp32 = update_once(tiny_model_dir)
    _, bf16 = update_once(tiny_model_dir, dtype="bfloat16")
    assert compute_dtype(ModelConfig(dtype="bfloat16")) is torch.bfloat16
    assert bf16["grad_norm"] != fp32["grad_norm"]  # autocast really ran in bf16
    assert bf16["grad_norm"] == pytest.approx(fp32["grad_norm"], rel=5e-2)
    assert bf16["loss/policy"] == pytest.approx(fp32["loss/policy"], rel=5e-2, abs=1e-3)
