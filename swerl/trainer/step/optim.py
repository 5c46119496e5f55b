"""AdamW and its learning-rate schedule (linear warmup, then constant or cosine decay)."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from swerl.trainer.config import OptimizerConfig


def lr_factor(step: int, cfg: OptimizerConfig, total_steps: int) -> float:
    """Multiplier of ``cfg.lr`` at optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup_steps for step < warmup_steps. Then constant 1, or cosine from 1
    down to ``min_lr_ratio`` at ``total_steps`` (nanoGPT ``get_lr``).
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    decay_steps = max(total_steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / decay_steps, 1.0)
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module, cfg: OptimizerConfig, total_optimizer_steps: int
) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW over the trainable parameters and a ``LambdaLR`` stepping once per optimizer step.

    The fused kernel (one launch for all parameters) when every parameter is on CUDA, else the
    multi-tensor ``foreach`` one (CPU, or FSDP shards offloaded to the host); same update rule.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    on_cuda = bool(params) and all(p.device.type == "cuda" for p in params)
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
        **({"fused": True} if on_cuda else {"foreach": True}),
    )
    scheduler = LambdaLR(optimizer, lambda s: lr_factor(s, cfg, total_optimizer_steps))
    return optimizer, scheduler
