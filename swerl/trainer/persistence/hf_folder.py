"""Writing an HF model folder from a stream of full tensors gathered one at a time (an export of
the policy, a LoRA run's ``merged/``): safetensors shards of at most ``max_shard_bytes`` written
by rank 0 as they fill (with ``model.safetensors.index.json`` when there are several), then the
config, generation config and tokenizer. No rank holds more than one shard of full tensors.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def _shard_plan(sizes: list[tuple[str, int]], max_shard_bytes: int) -> list[list[str]]:
    """Consecutive names grouped into shards of at most ``max_shard_bytes`` (a bigger tensor gets its own)."""
    shards: list[list[str]] = [[]]
    used = 0
    for name, nbytes in sizes:
        if shards[-1] and used + nbytes > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += nbytes
    return shards


def write_safetensors_streaming(folder: Path, sizes: list[tuple[str, int]],
                                stream: Iterator[tuple[str, torch.Tensor | None]], is_main: bool,
                                max_shard_bytes: int) -> None:
    """Consume ``stream`` (full tensors, gathered one at a time, in the order of ``sizes``: (name,
    bytes); None on ranks that only take part in the gathers); rank 0 writes each safetensors
    shard when it is full, and the index of several."""
    from safetensors.torch import save_file

    plan = _shard_plan(sizes, max_shard_bytes)
    names = ["model.safetensors"] if len(plan) == 1 else [
        f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))]
    where = {name: file for file, shard in zip(names, plan) for name in shard}
    weight_map: dict[str, str] = {}
    for file, shard in zip(names, plan):
        tensors = {}
        for _ in shard:
            name, tensor = next(stream)
            if is_main:
                tensors[name] = tensor.contiguous()
                weight_map[name] = where[name]
        if is_main:
            save_file(tensors, str(folder / file), metadata={"format": "pt"})
        del tensors
    if is_main and len(plan) > 1:
        total = sum(n for _, n in sizes)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_hf_folder(folder: Path, sizes: list[tuple[str, int]], stream: Iterator[tuple[str, torch.Tensor | None]],
                    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, is_main: bool, max_shard_bytes: int,
                    dtype: torch.dtype | None = None) -> None:
    """An HF model folder: the weights of ``stream`` (:func:`write_safetensors_streaming`), then on
    rank 0 :func:`write_hf_files`."""
    write_safetensors_streaming(folder, sizes, stream, is_main, max_shard_bytes)
    if is_main:
        write_hf_files(folder, model, tokenizer, dtype)


def write_hf_files(folder: Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase | None,
                   dtype: torch.dtype | None = None) -> None:
    """The files of an HF folder besides the weights: ``model``'s config (naming ``dtype``, the
    weights' dtype, when given), its generation config and the tokenizer."""
    unwrapped = getattr(model, "module", model)
    config = copy.deepcopy(unwrapped.config)
    if dtype is not None:
        config.dtype = dtype
    config.save_pretrained(folder)
    if getattr(unwrapped, "generation_config", None) is not None:
        unwrapped.generation_config.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def untied_state(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The state dict without tensors tied to an earlier one (same storage, shape and dtype).

    ``state_dict()`` detaches every entry into a new tensor object, so a tied weight (SmolLM2's
    ``lm_head.weight`` is ``embed_tokens.weight``) is recognised by its storage, not its ``id``;
    safetensors refuses shared storage.
    """
    seen: set[tuple[int, tuple[int, ...], torch.dtype]] = set()
    out = []
    for name, value in model.state_dict().items():
        local = value.to_local() if hasattr(value, "to_local") else value
        key = (local.data_ptr(), tuple(value.shape), value.dtype)
        if local.numel() and key in seen:
            continue
        seen.add(key)
        out.append((name, value))
    return out
