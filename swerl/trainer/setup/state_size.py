"""Bytes of the trainer's state: which parameters train (all, or the LoRA adapters) and what they
hold per rank. Shared by the run plan, its RAM estimate and the GPU budget.

Stage: ``trainer/`` (the preflight). No torch: shapes come from the HF config.
"""

from __future__ import annotations

from swerl.trainer.config import TrainConfig
from swerl.trainer.setup.model_size import lora_param_count

TRAIN_BYTES_PER_PARAM = 16  # fp32 master weight + fp32 grad + AdamW m and v


def trained_params(cfg: TrainConfig, shape: dict, n: int) -> int:
    """Parameters that train, hold AdamW state and are checkpointed: all ``n``, or the LoRA adapters."""
    lora = cfg.model.lora
    return n if lora is None else lora_param_count(shape, lora.target_modules, lora.rank)


def state_bytes(cfg: TrainConfig, shape: dict, n: int, ranks: int) -> float:
    """Trainer state on one of ``ranks`` ranks, bytes: 16 B per trained parameter (fp32 weight,
    gradient, AdamW m and v) plus a LoRA run's frozen base (bf16 with bf16 compute, else fp32),
    divided by the ranks under FSDP."""
    m = cfg.model
    frozen = 0 if m.lora is None else n * (2 if m.dtype == "bfloat16" else 4)
    total = trained_params(cfg, shape, n) * TRAIN_BYTES_PER_PARAM + frozen
    return total / (ranks if m.fsdp else 1)
