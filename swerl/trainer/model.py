"""The policy the trainer optimizes: loaded from an HF folder or GGUF (converted once), put on the
rank's device, optionally wrapped with LoRA adapters (``lora.py``), gradient-checkpointed and
FSDP-sharded."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo

log = logging.getLogger(__name__)


def load_policy(cfg: ModelConfig, dist_info: DistInfo) -> tuple[torch.nn.Module, Any, Path]:
    """Load the initial policy and its tokenizer.

    Returns: (model in fp32 on ``dist_info.device`` (a ``peft.PeftModel`` with ``cfg.lora``), tokenizer,
        resolved HF folder).
    Raises: ConfigError / EnvironmentProblem from ``resolve_model`` (bad path, missing default).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swerl.inference.model_files import resolve_model

    path = resolve_model(cfg.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = prepare_policy(model, cfg, dist_info)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("policy %s: %.1fM parameters on %s", path, n_params / 1e6, dist_info.device)
    if cfg.lora is not None:
        from swerl.trainer.lora import describe

        log.info("%s", describe(cfg.lora, model))
    return model, tokenizer, path


def prepare_policy(model: torch.nn.Module, cfg: ModelConfig, dist_info: DistInfo) -> torch.nn.Module:
    """Put an fp32 HF causal LM on the rank's device, add LoRA adapters, gradient-checkpoint it and
    FSDP-shard it as ``cfg`` says; returns the policy (the same module, or its peft wrapper with
    ``cfg.lora``; also used on models built from a config).

    With ``cfg.lora`` and bfloat16 compute the frozen base is cast to bf16 before the adapters (fp32)
    are added: a weight that never steps needs no fp32 master copy (half the memory of the base).
    """
    model.to(dist_info.device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora is not None:
        from swerl.trainer.lora import add_adapters

        if cfg.dtype == "bfloat16":
            model.to(torch.bfloat16)
        model = add_adapters(model, cfg.lora)
    if cfg.fsdp:
        from swerl.trainer.fsdp import shard_model

        shard_model(model, dist_info, bf16=cfg.dtype == "bfloat16", cpu_offload=cfg.cpu_offload)
    return model


def compute_dtype(cfg: ModelConfig) -> torch.dtype | None:
    """Autocast dtype of a replicated model (None = fp32; FSDP handles bf16 itself)."""
    return torch.bfloat16 if cfg.dtype == "bfloat16" and not cfg.fsdp else None
