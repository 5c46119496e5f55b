"""What a LoRA run exports per step: the peft adapter folder (``adapter_config.json`` +
``adapter_model.safetensors`` in fp32, the tokenizer), which ``PeftModel.from_pretrained`` and vLLM
(``--enable-lora``, a ``LoRARequest``) load on top of the base; with ``checkpointing.export_merged``
also ``merged/``, an HF folder of the base with the adapters merged in (fp32, ``W + (alpha / r) B A``
per targeted linear, as peft's ``merge_and_unload``), streamed tensor by tensor like a full export.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from swerl.inference.gather import full_tensor
from swerl.inference.weight_sync.adapter import write_adapter
from swerl.trainer.policy.lora import hf_module

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MERGED_DIR = "merged"
BASE_SUFFIX = ".base_layer.weight"


def write_lora_export(folder: Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, is_main: bool,
                      max_shard_bytes: int, merged: bool) -> None:
    """Collective: the adapter folder of ``model`` (a peft model) in ``folder``, and ``folder/merged``
    when ``merged``; rank 0 writes."""
    from swerl.trainer.persistence.hf_folder import write_hf_folder

    base = hf_module(model)
    write_adapter(model, folder, torch.float32, getattr(base, "name_or_path", None) or None, is_main)
    if is_main and tokenizer is not None:
        tokenizer.save_pretrained(folder)
    if merged:
        target = folder / MERGED_DIR
        if is_main:
            target.mkdir()
        write_hf_folder(target, merged_sizes(model), iter_merged_state(model), base, tokenizer, is_main,
                        max_shard_bytes)


def _full(value: torch.Tensor) -> torch.Tensor:
    """The full tensor of a (possibly FSDP-sharded, possibly CPU-offloaded) parameter, fp32 on CPU."""
    return full_tensor(value.detach()).float().cpu()


def _merged_entries(model: torch.nn.Module) -> list[tuple[str, str, torch.Tensor]]:
    """(HF name, state-dict name, tensor) of every weight the merged folder holds: the base's
    state dict without the adapters, ``.base_layer`` dropped from the names, tied weights once."""
    from swerl.trainer.persistence.hf_folder import untied_state

    return [(name.replace(".base_layer", ""), name, value) for name, value in untied_state(hf_module(model))
            if ".lora_" not in name]


def merged_sizes(model: torch.nn.Module) -> list[tuple[str, int]]:
    """(HF name, fp32 bytes) in :func:`iter_merged_state` order, from global shapes (no collective)."""
    return [(hf_name, value.numel() * 4) for hf_name, _, value in _merged_entries(model)]


def iter_merged_state(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, fp32 tensor)`` of the merged policy: each adapted linear's ``W + scaling * B @ A``
    (peft's own ``scaling``: alpha / r), every other weight as it is.

    Collective under FSDP: every rank must exhaust it in the same order (each tensor one all-gather).
    """
    base = hf_module(model)
    for hf_name, name, value in _merged_entries(model):
        weight = _full(value)
        if name.endswith(BASE_SUFFIX):
            layer = base.get_submodule(name.removesuffix(BASE_SUFFIX))
            for adapter, scale in layer.scaling.items():
                delta = _full(layer.lora_B[adapter].weight) @ _full(layer.lora_A[adapter].weight)
                weight = weight + delta * scale
        yield hf_name, weight
