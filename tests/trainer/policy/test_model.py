"""Policy loading options: gradient checkpointing changes memory, not the update; bf16 autocast
stays close to fp32; both with LoRA adapters too, where only the adapters train."""

from __future__ import annotations

import pytest
import torch

from swerl.rl.config import AlgorithmConfig
from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.policy.lora import adapters_off, hf_module, is_lora
from swerl.trainer.policy.model import compute_dtype, load_policy
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from ..step.test_update import rows_of
from .._support import make_trajectories

ALGO = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)


def update_once(model_dir, **model_opts):
    model, tok, _ = load_policy(ModelConfig(path=str(model_dir), device="cpu", **model_opts), DistInfo())
    model.train()
    trajs = make_trajectories(num_groups=2, group_size=4, seed=11)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0})
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=8, micro_batch_size=4, grad_clip=None,
                       compute_dtype=compute_dtype(ModelConfig(**{k: v for k, v in model_opts.items() if k != "lora"})))
    metrics = train_on_batch(model, opt, sched, rows_of(trajs, ALGO), ALGO, s, DistInfo())
    return model, metrics


LORA = [None, {"rank": 4, "alpha": 8.0}]


@pytest.mark.parametrize("lora", LORA, ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_update(tiny_model_dir, lora):
    torch.manual_seed(0)
    plain, m1 = update_once(tiny_model_dir, lora=lora)
    torch.manual_seed(0)  # the same adapters' A
    ckpt, m2 = update_once(tiny_model_dir, gradient_checkpointing=True, lora=lora)
    assert hf_module(ckpt).is_gradient_checkpointing and not hf_module(plain).is_gradient_checkpointing
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-5) and m1["grad_norm"] > 0
    for a, b in zip(plain.parameters(), ckpt.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_lora_trains_the_adapters_only(tiny_model_dir):
    base, _, _ = load_policy(ModelConfig(path=str(tiny_model_dir), device="cpu"), DistInfo())
    model, metrics = update_once(tiny_model_dir, lora=LORA[1])
    assert is_lora(model) and metrics["grad_norm"] > 0
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_A." in name or ".lora_B." in name for name in trained)
    with adapters_off(model):  # the frozen base computes exactly as the model it was loaded from
        ids = torch.tensor([[6, 7, 8, 9, 10]])
        torch.testing.assert_close(model(ids).logits, base(ids).logits, rtol=0, atol=0)
    assert not torch.equal(model(ids).logits, base(ids).logits)  # the adapters moved (B was 0)


@pytest.mark.parametrize("lora", LORA, ids=["full", "lora"])
def test_bf16_autocast_stays_close_to_fp32(tiny_model_dir, lora):
    torch.manual_seed(0)
    _, fp32 = update_once(tiny_model_dir, lora=lora)
    torch.manual_seed(0)
    _, bf16 = update_once(tiny_model_dir, dtype="bfloat16", lora=lora)
    assert compute_dtype(ModelConfig(dtype="bfloat16")) is torch.bfloat16
    assert bf16["grad_norm"] != fp32["grad_norm"]  # autocast really ran in bf16
    assert bf16["grad_norm"] == pytest.approx(fp32["grad_norm"], rel=5e-2)
    assert bf16["loss/policy"] == pytest.approx(fp32["loss/policy"], rel=5e-2, abs=1e-3)
