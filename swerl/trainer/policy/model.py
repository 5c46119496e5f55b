"""The policy the trainer optimizes: loaded from an HF folder or GGUF (converted once), put on the
rank's device, optionally wrapped with LoRA adapters (``lora.py``), gradient-checkpointed and
FSDP-sharded.

Under ``torchrun`` only rank 0 reads the weights (one fp32 copy in its host RAM); the other ranks
build the model on the ``meta`` device (no memory), every rank adds the same adapters, shards it
(FSDP2) or keeps it whole (replicated), allocates its part on its device, and rank 0 broadcasts
the weights, adapters included, into it (``set_model_state_dict(..., broadcast_from_rank0=True)``,
as FSDP2 users do: torchtitan, verl).
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Any

import torch

from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo, is_distributed

log = logging.getLogger(__name__)


def load_policy(cfg: ModelConfig, dist_info: DistInfo) -> tuple[torch.nn.Module, Any, Path]:
    """Load the initial policy and its tokenizer.

    Returns: (model in fp32 on ``dist_info.device``, sharded as ``cfg`` says (a ``peft.PeftModel``
        with ``cfg.lora``), tokenizer, resolved HF folder).
    Raises: ConfigError / EnvironmentProblem from ``resolve_model`` (bad path, missing default).
    """
    from transformers import AutoTokenizer

    from swerl.inference.model_files import resolve_model

    path = resolve_model(cfg.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = load_causal_lm(path, cfg, dist_info)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("policy %s: %.1fM parameters on %s", path, n_params / 1e6, dist_info.device)
    if cfg.lora is not None:
        from swerl.trainer.policy.lora import describe

        log.info("%s", describe(cfg.lora, model))
    return model, tokenizer, path


def load_causal_lm(path: Path, cfg: ModelConfig, dist_info: DistInfo) -> torch.nn.Module:
    """The fp32 causal LM of the HF folder ``path``, placed as ``cfg`` says (device, gradient
    checkpointing, FSDP2 sharding, ``cpu_offload``): read by rank 0 only under ``torchrun``, by
    this process otherwise. The policy and the KL term's frozen reference both load through it."""
    from transformers import AutoModelForCausalLM

    if is_distributed():
        model = _load_from_rank0(path, cfg, dist_info)
    else:
        model = prepare_policy(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), cfg, dist_info)
    free_memory(dist_info)
    return model


def _load_from_rank0(path: Path, cfg: ModelConfig, dist_info: DistInfo) -> torch.nn.Module:
    """Rank 0 reads the fp32 weights on the host; the others build on ``meta``; every rank shards
    (or not), allocates its part on its device, and receives rank 0's values by broadcast."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    if dist_info.is_main:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32)
        _copy_generation_config(model, path)
    model = _checkpointing_and_adapters(model, cfg)  # rank 0's random adapter init is the one broadcast
    full_state = model.state_dict() if dist_info.is_main else {}  # rank 0's host tensors, kept for the broadcast
    if cfg.fsdp:
        from swerl.trainer.policy.fsdp import shard_model

        shard_model(model, dist_info, bf16=cfg.dtype == "bfloat16", cpu_offload=cfg.cpu_offload)
    # Broadcasts run on the process group's device: NCCL needs every tensor on the GPU, offloaded or not.
    if dist_info.is_main:
        model.to(dist_info.device)
    else:
        model.to_empty(device=dist_info.device)
    set_model_state_dict(model, full_state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():  # non-persistent buffers (rotary inv_freq) are in no state dict
        dist.broadcast(buffer, src=0)
    if cfg.cpu_offload and dist_info.device.type != "cpu":
        model.to("cpu")  # CPUOffloadPolicy: shards live on the host, buffers on the GPU
        for buffer in model.buffers():
            buffer.data = buffer.data.to(dist_info.device)
    del full_state
    return model


def _copy_generation_config(model: torch.nn.Module, path: Path) -> None:
    """The folder's ``generation_config.json`` (eos ids, defaults) on a model built from its config,
    as ``from_pretrained`` sets it; a folder without one keeps the config-derived defaults."""
    from transformers import GenerationConfig

    if (path / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(path)


def _checkpointing_and_adapters(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """Gradient checkpointing, then ``cfg.lora``'s adapters (the frozen base cast to bf16 first under
    bf16 compute); returns the policy (the peft wrapper with LoRA)."""
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora is not None:
        from swerl.trainer.policy.lora import add_adapters

        if cfg.dtype == "bfloat16":
            model.to(torch.bfloat16)
        model = add_adapters(model, cfg.lora)
    return model


def prepare_policy(model: torch.nn.Module, cfg: ModelConfig, dist_info: DistInfo) -> torch.nn.Module:
    """Put an fp32 HF causal LM on the rank's device, add LoRA adapters, gradient-checkpoint it and
    FSDP-shard it as ``cfg`` says; returns the policy (the same module, or its peft wrapper with
    ``cfg.lora``; also used on models built from a config).

    With ``cfg.lora`` and bfloat16 compute the frozen base is cast to bf16 before the adapters (fp32)
    are added: a weight that never steps needs no fp32 master copy (half the memory of the base).
    """
    model.to(dist_info.device)
    model = _checkpointing_and_adapters(model, cfg)
    if cfg.fsdp:
        from swerl.trainer.policy.fsdp import shard_model

        shard_model(model, dist_info, bf16=cfg.dtype == "bfloat16", cpu_offload=cfg.cpu_offload)
    return model


def free_memory(dist_info: DistInfo) -> None:
    """Return what loading left behind: Python garbage (rank 0's host copy) and the CUDA cache."""
    gc.collect()
    if dist_info.device.type == "cuda":
        torch.cuda.empty_cache()


def compute_dtype(cfg: ModelConfig) -> torch.dtype | None:
    """Autocast dtype of a replicated model (None = fp32; FSDP handles bf16 itself)."""
    return torch.bfloat16 if cfg.dtype == "bfloat16" and not cfg.fsdp else None
