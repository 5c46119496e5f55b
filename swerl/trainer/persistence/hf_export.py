"""HF exports of the policy for eval and selection: ``RUN_DIR/exports/global_step_N/`` holds
``model.safetensors`` (or ``model-0000i-of-0000n.safetensors`` + index), ``config.json``, the
tokenizer files, the chat template and a model card.

In the foreground, no rank holds a second full copy of the weights: the tensors are cast to
the export dtype (the training compute dtype: bf16 for the seed run), gathered one at a time
(``DTensor.full_tensor``) and only rank 0 copies them to the host, writing safetensors shards of
at most ``max_shard_bytes`` as it goes. In the background (``checkpointing.async_save``, full
weights only), the gathers and host copies still happen at the step, every rank together, and
rank 0 keeps the whole host copy until a thread has written the shards; the folder is renamed
into place when :meth:`PendingExport.finish` finds the thread done.

Every export is written under ``exports/.tmp-global_step_N`` and renamed, so a kill leaves the
previous exports and a temp folder that the next export or resume removes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from swerl.fileio import replace_dir
from swerl.inference.gather import full_tensor
from swerl.logs import phase
from swerl.run_layout import EXPORT_DIR, TMP_PREFIX, step_dir_name
from swerl.trainer.distributed import DistInfo, barrier
from swerl.trainer.persistence.checkpoint import remove_temp_entries
from swerl.trainer.persistence.hf_folder import untied_state, write_hf_files, write_hf_folder, write_safetensors_streaming
from swerl.trainer.persistence.model_card import finish_export

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


def iter_full_state(model: torch.nn.Module, dtype: torch.dtype | None = None,
                    keep: bool = True, copy: bool = False) -> Iterator[tuple[str, torch.Tensor | None]]:
    """Stream ``(name, full tensor)`` over the model's state dict, one tensor gathered at a time.

    Collective under FSDP: every rank must exhaust the iterator in the same order (each
    sharded tensor is one all-gather, of at most one unsharded tensor per rank at a time). A
    weight tied to an earlier one (same parameter, e.g. SmolLM2's ``lm_head.weight``) is skipped,
    like ``save_pretrained`` does.

    Args:
        dtype: cast floating tensors to it BEFORE the gather (a bf16 export gathers half the bytes).
        keep: False on ranks that only take part in the gathers: the gathered tensor is dropped
            there (yielded as None), never copied to the host.
        copy: every yielded tensor is a new host tensor, never the live parameter itself (an
            unsharded CPU model already in ``dtype`` would otherwise yield its own tensors).
    """
    for name, value in untied_state(model):
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)  # a DTensor casts its local shard: no communication
        value = full_tensor(value)
        yield name, (value.detach().to("cpu", copy=copy) if keep else None)


def _state_nbytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> list[tuple[str, int]]:
    """(name, bytes of the full tensor, cast to ``dtype`` if floating) in ``iter_full_state`` order,
    from global shapes (no collective)."""
    def itemsize(value: torch.Tensor) -> int:
        cast = dtype is not None and value.is_floating_point()
        return torch.empty(0, dtype=dtype if cast else value.dtype).element_size()

    return [(name, value.numel() * itemsize(value)) for name, value in untied_state(model)]


@phase("export")
def export_hf(
    run_dir: Path, step: int, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, dist_info: DistInfo,
    *, max_shard_bytes: int = 5 * 2**30, metrics: dict[str, Any] | None = None, dtype: torch.dtype = torch.float32,
    merged: bool = False,
) -> Path:
    """Write an HF folder (safetensors, config, tokenizer, chat template, model card ``README.md``
    with ``metrics`` and ``RUN_DIR/config.yaml``) to ``exports/global_step_N``, files 0644, folders 0755.

    Every rank calls it (sharded tensors are cast to ``dtype``, then gathered collectively, one
    at a time); only rank 0 copies them to the host and writes shards of at most
    ``max_shard_bytes`` as they fill, so no rank holds more than one shard of full tensors.
    ``config.json`` names ``dtype``. A LoRA policy exports its peft adapter folder instead, and
    with ``merged`` also the merged weights in ``merged/`` (``lora_export.write_lora_export``).
    Returns: the export folder.
    """
    final = start_export(run_dir, step, model, tokenizer, dist_info, max_shard_bytes=max_shard_bytes,
                         metrics=metrics, dtype=dtype, merged=merged, background=False).finish()
    barrier()
    return final


@dataclass
class PendingExport:
    """An export written under ``tmp`` (by ``writer``, a thread of rank 0, when in the background);
    :meth:`finish` commits it.

    Attributes:
        error: what the writer thread raised, if it did.
    """

    step: int
    tmp: Path
    final: Path
    run_dir: Path
    is_main: bool
    model_config: PretrainedConfig | None = None  # the HF config the model card reads (rank 0)
    metrics: dict[str, Any] | None = None
    writer: threading.Thread | None = None
    error: BaseException | None = None
    committed: bool = False
    kind: Literal["export"] = field(default="export")

    def finish(self) -> Path:
        """Wait for the writer thread (rank 0), then write the model card, fix the modes and rename
        ``tmp`` to ``final``. No collective. Returns: ``final``. Raises: what the writer raised
        (the export stays a ``.tmp-*`` folder)."""
        if self.writer is not None:
            self.writer.join()
            self.writer = None
        if self.error is not None:
            raise self.error
        if self.is_main and not self.committed:
            finish_export(self.tmp, self.run_dir, self.step, self.model_config, self.metrics)
            replace_dir(self.tmp, self.final)  # re-saving a step (after a resume) swaps the old folder out
            log.info("exported %s", self.final)
        self.committed = True
        return self.final


def start_export(
    run_dir: Path, step: int, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, dist_info: DistInfo,
    *, max_shard_bytes: int = 5 * 2**30, metrics: dict[str, Any] | None = None, dtype: torch.dtype = torch.float32,
    merged: bool = False, background: bool,
) -> PendingExport:
    """Start the export of ``step`` (arguments: :func:`export_hf`); every rank calls it, then
    :meth:`PendingExport.finish` commits it.

    With ``background`` and full weights, the gathers run now (collective) and rank 0 keeps a host
    copy of every tensor (the whole model in ``dtype``), writes the config and tokenizer, and
    leaves the safetensors shards to a thread. A LoRA policy's export is always written in the
    foreground (its adapter is small; its merged folder streams like a foreground export).
    """
    from swerl.trainer.policy.lora import hf_module, is_lora

    root = run_dir / EXPORT_DIR
    tmp = root / f"{TMP_PREFIX}{step_dir_name(step)}"
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        remove_temp_entries(root)
        tmp.mkdir()
    pending = PendingExport(step, tmp, root / step_dir_name(step), run_dir, dist_info.is_main,
                            hf_module(getattr(model, "module", model)).config,
                            dict(metrics) if metrics is not None else None)
    if is_lora(model):
        from swerl.trainer.persistence.lora_export import write_lora_export

        write_lora_export(tmp, model, tokenizer, dist_info.is_main, max_shard_bytes, merged)
    elif background:
        sizes = _state_nbytes(model, dtype)
        tensors = list(iter_full_state(model, dtype, keep=dist_info.is_main, copy=True))  # collective
        if dist_info.is_main:
            write_hf_files(tmp, model, tokenizer, dtype)
            pending.writer = threading.Thread(target=_write_shards, args=(pending, sizes, tensors, max_shard_bytes),
                                              name=f"export-{step}", daemon=False)
            pending.writer.start()
    else:
        write_hf_folder(tmp, _state_nbytes(model, dtype), iter_full_state(model, dtype, keep=dist_info.is_main),
                        model, tokenizer, dist_info.is_main, max_shard_bytes, dtype)
    return pending


def _write_shards(pending: PendingExport, sizes: list[tuple[str, int]], tensors: list[tuple[str, torch.Tensor]],
                  max_shard_bytes: int) -> None:
    """The writer thread of a background export: the safetensors shards of ``tensors`` (rank 0's
    host copies) in ``pending.tmp``; an exception is kept in ``pending.error``."""
    try:
        write_safetensors_streaming(pending.tmp, sizes, iter(tensors), True, max_shard_bytes)
    except BaseException as err:  # noqa: BLE001 - raised again by finish(), in the main thread
        pending.error = err
