"""Checkpoints of a run: sharded training state for exact resume, HF exports for eval and selection.

Layout of a run directory (SkyRL's names):

    RUN_DIR/checkpoints/global_step_N/{state/, scheduler.pt, trainer_state.json, config.yaml, rng_rank{r}.pt}
    RUN_DIR/checkpoints/latest_ckpt_global_step.txt
    RUN_DIR/exports/global_step_N/{model.safetensors (or model-0000i-of-0000n.safetensors + index),
                                  config.json, tokenizer files, chat template}

``state/`` is a ``torch.distributed.checkpoint`` (DCP) folder holding the model and AdamW state:
every rank writes its own shards (``__r_0.distcp``) and rank 0 the ``.metadata``; replicated
tensors are written once. DCP reshards on load, so a checkpoint written by W ranks resumes on
any number of ranks, FSDP-sharded or not (2 -> 2, 2 -> 1, 1 -> 2). The folder must be on a file
system every rank sees (one machine, or a shared mount across nodes).

Every folder is written under a ``.tmp-*`` name and renamed by rank 0 after a barrier, once
every rank's files are complete, so a ``kill -9`` mid-save leaves the previous checkpoint as
the newest loadable one; stale temp folders are ignored when loading and removed by the next save.

HF exports never hold a second full copy of the weights on any rank: the tensors are cast to the
export dtype (the training compute dtype: bf16 for the seed run), gathered one at a time
(``DTensor.full_tensor``) and only rank 0 copies them to the host, writing safetensors shards of
at most ``max_shard_bytes`` as it goes.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from swerl.fileio import atomic_write_text, replace_dir
from swerl.errors import ConfigError
from swerl.inference.gather import full_tensor
from swerl.inference.rng import restore_rng_state, save_rng_state
from swerl.logs import phase
from swerl.run_layout import CKPT_DIR, CONFIG_FILE, EXPORT_DIR, LATEST_FILE, TMP_PREFIX, step_dir_name
from swerl.run_layout import STEP_DIR_RE as _STEP_RE
from swerl.trainer.distributed import DistInfo, barrier, is_distributed
from swerl.trainer.persistence.hf_folder import untied_state, write_hf_folder
from swerl.trainer.persistence.model_card import finish_export

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
_TRAINED = StateDictOptions(ignore_frozen_params=True)
"""What a checkpoint holds of the model: the parameters that train (every one, or the LoRA adapters:
a frozen base comes from ``model.path`` again at resume) and the buffers."""
STATE_DIR = "state"  # the DCP folder of model + optimizer shards


@contextmanager
def _quiet_no_dist() -> Iterator[None]:
    """Around one DCP save/load: DCP's "torch.distributed is disabled" UserWarning (it warns on
    every ``no_dist=True`` call, which is what swerl asks for in one process) is silenced for this
    block only. Every other warning is untouched."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete ``global_step_N`` folders under ``root``, sorted by step (temp folders skipped)."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir() and (p / "trainer_state.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def _remove_stale_temps(root: Path) -> None:
    for p in root.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def full_model_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict on CPU, HF names (tied weights under both names).

    Collective under FSDP (every rank calls it): tensors are gathered one by one and only rank 0
    keeps them, so rank 0 holds one full copy and the other ranks get an empty dict. An
    unsharded CPU model returns its own tensors (no copy).
    """
    return get_model_state_dict(model, options=_FULL)


def iter_full_state(model: torch.nn.Module, dtype: torch.dtype | None = None,
                    keep: bool = True) -> Iterator[tuple[str, torch.Tensor | None]]:
    """Stream ``(name, full tensor)`` over the model's state dict, one tensor gathered at a time.

    Collective under FSDP: every rank must exhaust the iterator in the same order (each
    sharded tensor is one all-gather, of at most one unsharded tensor per rank at a time). A
    weight tied to an earlier one (same parameter, e.g. SmolLM2's ``lm_head.weight``) is skipped,
    like ``save_pretrained`` does.

    Args:
        dtype: cast floating tensors to it BEFORE the gather (a bf16 export gathers half the bytes).
        keep: False on ranks that only take part in the gathers: the gathered tensor is dropped
            there (yielded as None), never copied to the host.
    """
    for name, value in untied_state(model):
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)  # a DTensor casts its local shard: no communication
        value = full_tensor(value)
        yield name, (value.detach().cpu() if keep else None)


def _state_nbytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> list[tuple[str, int]]:
    """(name, bytes of the full tensor, cast to ``dtype`` if floating) in ``iter_full_state`` order,
    from global shapes (no collective)."""
    def itemsize(value: torch.Tensor) -> int:
        cast = dtype is not None and value.is_floating_point()
        return torch.empty(0, dtype=dtype if cast else value.dtype).element_size()

    return [(name, value.numel() * itemsize(value)) for name, value in untied_state(model)]


@phase("checkpoint save")
def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    trainer_state: dict[str, Any],
    config_yaml: str,
    dist_info: DistInfo,
    keep_last: int | None = None,
    protect: frozenset[int] = frozenset(),
    pending: list[Any] | None = None,
) -> Path:
    """Write the full training state of ``step`` atomically; every rank must call it.

    Each rank writes its own shards of the model and optimizer state (DCP) and its RNG state;
    rank 0 writes the scheduler, config and ``trainer_state.json``, then renames the folder.

    Args:
        trainer_state: JSON-serialisable loop state (global step, sampler position, ...).
        config_yaml: the resolved config, stored beside the weights.
        keep_last: keep this many newest checkpoints (None or 0: keep all); the newest and the
            steps in ``protect`` are never deleted.
        pending: the rollout batches after ``step`` the exact pipeline schedule already collected
            (this rank's share), written as ``pending_rollouts_rank{r}.pt``; None writes nothing.
    Returns: the final folder ``RUN_DIR/checkpoints/global_step_N``.
    """
    root = run_dir / CKPT_DIR
    final = root / step_dir_name(step)
    tmp = root / f"{TMP_PREFIX}{step_dir_name(step)}"
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_TRAINED)  # this rank's shards (DTensors under FSDP)
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(root)
        tmp.mkdir()
    barrier()
    with _quiet_no_dist():
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=tmp / STATE_DIR, no_dist=not is_distributed())
    torch.save(save_rng_state(), tmp / f"rng_rank{dist_info.rank}.pt")
    if pending is not None:
        torch.save(pending, tmp / pending_file(dist_info.rank))
    if dist_info.is_main:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / CONFIG_FILE).write_text(config_yaml)
        state = dict(trainer_state, global_step=step, world_size=dist_info.world_size)
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    barrier()  # every rank's shards are on disk before the folder becomes visible
    if dist_info.is_main:
        replace_dir(tmp, final)  # re-saving a step (after a resume) swaps the old folder out
        atomic_write_text(root / LATEST_FILE, f"{step}\n")
        prune_checkpoints(root, keep_last, protect)
        log.info("saved checkpoint %s", final)
    barrier()
    return final


def pending_file(rank: int) -> str:
    """The file of a checkpoint holding rank ``rank``'s already collected batches past its step."""
    return f"pending_rollouts_rank{rank}.pt"


def load_pending(path: Path, rank: int) -> list[Any] | None:
    """The batches :func:`save_checkpoint` saved as ``pending`` for ``rank`` (``RolloutBatch``
    objects, unpickled: a checkpoint is trusted as the weights are), or None when it has none (an
    older checkpoint, another schedule)."""
    file = path / pending_file(rank)
    return torch.load(file, weights_only=False) if file.is_file() else None


def prune_checkpoints(root: Path, keep_last: int | None, protect: frozenset[int] = frozenset()) -> list[int]:
    """Delete all but the ``keep_last`` newest checkpoints; never the newest or a protected step.

    Returns: the deleted steps.
    """
    ckpts = list_checkpoints(root)
    if not keep_last or len(ckpts) <= keep_last:
        return []
    newest = ckpts[-1][0]
    deleted = []
    for step, path in ckpts[: len(ckpts) - keep_last]:
        if step == newest or step in protect:
            continue
        shutil.rmtree(path)
        deleted.append(step)
    return deleted


def resolve_resume(run_dir: Path, resume: str | None) -> Path | None:
    """The checkpoint folder ``--resume`` names: ``latest`` (None when the run has none) or a path.

    ``latest`` reads ``latest_ckpt_global_step.txt`` and falls back to the highest complete
    folder when the pointer is missing or names a folder that is gone.

    Raises:
        ConfigError: a PATH that is not a checkpoint folder.
    """
    if resume is None:
        return None
    root = run_dir / CKPT_DIR
    if resume == "latest":
        pointer = root / LATEST_FILE
        if pointer.is_file():
            cand = root / step_dir_name(int(pointer.read_text().strip()))
            if (cand / "trainer_state.json").is_file():
                return cand
        ckpts = list_checkpoints(root)
        return ckpts[-1][1] if ckpts else None
    path = Path(resume)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"--resume {resume}: not a checkpoint folder (no trainer_state.json): pass 'latest' "
                          f"or a {CKPT_DIR}/global_step_N folder")
    return path


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    dist_info: DistInfo,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and this rank's RNG from ``path``; every rank calls it.

    The model and optimizer are resharded to this run's layout (any number of ranks, sharded
    or not). RNG: rank r restores ``rng_rank{r}.pt``; a rank the saving run did not have
    restores rank 0's (rank 0, which drives the rollouts, always resumes its own stream).

    Returns: the saved ``trainer_state`` (includes ``global_step``).
    Raises:
        ConfigError: ``path`` holds no DCP state (e.g. written by an older swerl).
    """
    state = json.loads((path / "trainer_state.json").read_text())
    if not (path / STATE_DIR / ".metadata").is_file():
        raise ConfigError(f"{path}: no {STATE_DIR}/.metadata (not a sharded swerl checkpoint): resume from a "
                          "checkpoint written by this version, or start a fresh run")
    saved_world = int(state.get("world_size", 1))
    if saved_world != dist_info.world_size:
        log.info("resharding %s from %d to %d ranks", path, saved_world, dist_info.world_size)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_TRAINED)  # initializes empty AdamW state
    target = {"model": model_sd, "optimizer": optim_sd}
    with _quiet_no_dist():
        try:
            dcp.load(target, checkpoint_id=path / STATE_DIR, no_dist=not is_distributed())
        except CheckpointException as err:  # a BaseException: DCP wraps each rank's error in it
            if "Missing key" not in str(err):
                raise
            raise ConfigError(f"{path}: the checkpoint lacks weights this policy trains (a LoRA checkpoint resumed as "
                              "full fine-tuning, or another model.lora): resume with the run's own config.yaml") from err
    set_state_dict(model, optimizer, model_state_dict=target["model"], optim_state_dict=target["optimizer"],
                   options=StateDictOptions(ignore_frozen_params=True, strict=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    rng_file = path / f"rng_rank{dist_info.rank}.pt"
    if not rng_file.is_file():
        rng_file = path / "rng_rank0.pt"
    restore_rng_state(torch.load(rng_file, weights_only=False))
    log.info("resumed from %s (global step %d)", path, state["global_step"])
    return state


def read_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The full model weights of checkpoint folder ``path``, read in this one process (no process group).

    For inspection and tests: allocates every tensor at its global shape, then lets DCP fill it.
    """
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = dcp.FileSystemReader(str(path / STATE_DIR)).read_metadata()
    empty = {
        key: torch.empty(m.size, dtype=m.properties.dtype)
        for key, m in meta.state_dict_metadata.items()
        if key.startswith("model.") and isinstance(m, TensorStorageMetadata)
    }
    with _quiet_no_dist():
        dcp.load(empty, checkpoint_id=path / STATE_DIR, no_dist=True)
    return {key.removeprefix("model."): value for key, value in empty.items()}


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
    from swerl.trainer.policy.lora import hf_module, is_lora

    root = run_dir / EXPORT_DIR
    final = root / step_dir_name(step)
    tmp = root / f"{TMP_PREFIX}{step_dir_name(step)}"
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(root)
        tmp.mkdir()
    if is_lora(model):
        from swerl.trainer.persistence.lora_export import write_lora_export

        write_lora_export(tmp, model, tokenizer, dist_info.is_main, max_shard_bytes, merged)
    else:
        write_hf_folder(tmp, _state_nbytes(model, dtype), iter_full_state(model, dtype, keep=dist_info.is_main),
                        model, tokenizer, dist_info.is_main, max_shard_bytes, dtype)
    if dist_info.is_main:
        unwrapped = hf_module(getattr(model, "module", model))
        finish_export(tmp, run_dir, step, unwrapped.config, metrics)
        replace_dir(tmp, final)  # re-saving a step (after a resume) swaps the old folder out
        log.info("exported %s", final)
    barrier()
    return final
