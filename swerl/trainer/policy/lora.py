"""LoRA on the trainer's policy (peft): adapters added to a frozen base, and the views of that one
module the other parts need (the transformers model that generates, the base with adapters off).

With ``model.lora`` set, :func:`add_adapters` wraps the HF causal LM in a ``peft.PeftModel``: each
targeted linear ``W`` becomes ``W x + (alpha / r) B A x`` with ``A`` (r, in) drawn at random and
``B`` (out, r) zero (Hu et al. 2021, "LoRA"; peft ``LoraConfig``), so the policy starts equal to the
base. Only ``A`` and ``B`` require gradients: the optimizer, the gradient all-reduce, clipping,
checkpoints (``StateDictOptions(ignore_frozen_params=True)``), the weight sync and the exports then
touch the adapters only. The loss, its reductions and TIS do not change: they see log-probs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from swerl.trainer.config import LoraConfig


def is_lora(model: torch.nn.Module) -> bool:
    """True when ``model`` is a peft model (adapters on a frozen base)."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def add_adapters(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Freeze ``model`` and wrap it with fresh LoRA adapters (fp32 whatever the base dtype).

    Args:
        model: an HF causal LM (fp32, or bf16 for a bf16 run: a frozen weight needs no fp32 master).
    Returns:
        the ``peft.PeftModel`` (its ``peft_config["default"]`` names the base folder).
    """
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, task_type="CAUSAL_LM",
        target_modules=cfg.target_modules if isinstance(cfg.target_modules, str) else list(cfg.target_modules),
    )
    return get_peft_model(model, peft_config, autocast_adapter_dtype=True)


def hf_module(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside ``model``: a peft model's base (its adapters are injected in it,
    so it generates WITH them), else ``model`` itself. ``generate``, its generation config and the
    decoder layers (``.model.layers``) are read there."""
    return model.get_base_model() if is_lora(model) else model


@contextlib.contextmanager
def adapters_off(model: torch.nn.Module) -> Iterator[None]:
    """Inside: ``model`` computes as its frozen base (peft ``disable_adapter``), e.g. a reference policy.

    Raises:
        TypeError: ``model`` has no adapters (full fine-tuning has no base to return to).
    """
    if not is_lora(model):
        raise TypeError("adapters_off needs a LoRA model (model.lora); a fully fine-tuned policy has no frozen base")
    with model.disable_adapter():
        yield


def trainable_count(model: torch.nn.Module) -> int:
    """Parameters that require gradients (the adapters under LoRA), counted at their global shape."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe(cfg: LoraConfig, model: torch.nn.Module) -> str:
    """``LoRA r=16 alpha=32 on all-linear: 1.8M of 136M parameters trained`` (the run log's line)."""
    total = sum(p.numel() for p in model.parameters())
    targets = cfg.target_modules if isinstance(cfg.target_modules, str) else ", ".join(cfg.target_modules)
    return (f"LoRA r={cfg.rank} alpha={cfg.alpha:g} on {targets}: {trainable_count(model) / 1e6:.2f}M of "
            f"{total / 1e6:.1f}M parameters trained")
