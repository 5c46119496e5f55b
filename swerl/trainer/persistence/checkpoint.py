"""Checkpoints of a run: the sharded training state for an exact resume (HF exports for eval and
selection: ``hf_export.py``).

Layout of a run directory (SkyRL's names):

    RUN_DIR/checkpoints/global_step_N/{state/, scheduler.pt, trainer_state.json, config.yaml, rng_rank{r}.pt}
    RUN_DIR/checkpoints/latest_ckpt_global_step.txt

``state/`` is a ``torch.distributed.checkpoint`` (DCP) folder holding the model and AdamW state:
every rank writes its own shards (``__r_0.distcp``) and rank 0 the ``.metadata``; replicated
tensors are written once. DCP reshards on load, so a checkpoint written by W ranks resumes on
any number of ranks, FSDP-sharded or not (2 -> 2, 2 -> 1, 1 -> 2). The folder must be on a file
system every rank sees (one machine, or a shared mount across nodes).

Every folder is written under a ``.tmp-*`` name and renamed by rank 0 after a barrier, once
every rank's files are complete, so a ``kill -9`` mid-save leaves the previous checkpoint as
the newest loadable one; stale temp folders are ignored when loading and removed by the next save.

In the background (``checkpointing.async_save``; :func:`start_checkpoint`), ``dcp.async_save``
copies each rank's shards to host memory before it returns and a thread writes them while the
next step trains; the rename waits for :meth:`PendingCheckpoint.finish` (``background.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from swerl.fileio import atomic_write_text, replace_dir
from swerl.errors import ConfigError
from swerl.inference.rng import restore_rng_state, save_rng_state
from swerl.logs import phase
from swerl.run_layout import CKPT_DIR, CONFIG_FILE, LATEST_FILE, TMP_PREFIX, step_dir_name
from swerl.run_layout import STEP_DIR_RE as _STEP_RE
from swerl.trainer.distributed import DistInfo, barrier, checkpoint_group, is_distributed

log = logging.getLogger(__name__)

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
_TRAINED = StateDictOptions(ignore_frozen_params=True)
"""What a checkpoint holds of the model: the parameters that train (every one, or the LoRA adapters:
a frozen base comes from ``model.path`` again at resume) and the buffers."""
STATE_DIR = "state"  # the DCP folder of model + optimizer shards


_NO_DIST_WARNING = "torch.distributed is disabled"
DCP_MODULES = r"torch\.distributed\.checkpoint\."  # the modules a background write's warning comes from


@contextmanager
def _quiet_no_dist() -> Iterator[None]:
    """Around one DCP save/load: DCP's "torch.distributed is disabled" UserWarning (it warns on
    every ``no_dist=True`` call, which is what swerl asks for in one process) is silenced for this
    block only. Every other warning is untouched."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_DIST_WARNING, category=UserWarning)
        yield


def _quiet_no_dist_in_threads() -> None:
    """The same silence for a background write, whose thread warns after any block has ended: a
    filter of that one message, raised from DCP's own modules only, is installed for the process
    (``catch_warnings`` is not thread-safe). The same words raised from any other module still show."""
    warnings.filterwarnings("ignore", message=_NO_DIST_WARNING, category=UserWarning, module=DCP_MODULES)


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


def remove_temp_entries(root: Path) -> None:
    """Remove the ``.tmp-*`` folders and files a killed save left in ``root``."""
    for p in root.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def full_model_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict on CPU, HF names (tied weights under both names).

    Collective under FSDP (every rank calls it): tensors are gathered one by one and only rank 0
    keeps them, so rank 0 holds one full copy and the other ranks get an empty dict. An
    unsharded CPU model returns its own tensors (no copy).
    """
    return get_model_state_dict(model, options=_FULL)


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
    final = start_checkpoint(run_dir, step, model, optimizer, scheduler, trainer_state, config_yaml, dist_info,
                             keep_last, protect, pending, background=False).finish()
    barrier()
    return final


@dataclass
class PendingCheckpoint:
    """A checkpoint whose files are written under ``tmp``; :meth:`finish` commits it.

    Attributes:
        write: DCP's future of this rank's shard write (``dcp.async_save``), None once done or
            when written in the foreground.
        committed: rank 0 renamed ``tmp`` to ``final`` (or, off rank 0, the write is done).
    """

    step: int
    tmp: Path
    final: Path
    is_main: bool
    keep_last: int | None
    protect: frozenset[int]
    write: Future | None = None
    committed: bool = False
    kind: Literal["checkpoint"] = "checkpoint"

    def finish(self) -> Path:
        """Wait for this rank's DCP write, then (rank 0) rename ``tmp`` to ``final``, point
        ``latest_ckpt_global_step.txt`` at it and prune. No collective: DCP's own write ends
        with a gather of every rank's write results before rank 0 writes ``.metadata``, so
        this rank's future is done only when every rank's shards are on disk, and the other
        files were on disk (a barrier) before :func:`start_checkpoint` returned.

        Returns: ``final``. Raises: ``CheckpointException`` (a BaseException) when a rank's write
            failed; the checkpoint stays uncommitted (its ``.tmp-*`` folder is removed later).
        """
        if self.write is not None:
            with _quiet_no_dist():
                self.write.result()
            self.write = None
        if self.is_main and not self.committed:
            root = self.final.parent
            replace_dir(self.tmp, self.final)  # re-saving a step (after a resume) swaps the old folder out
            atomic_write_text(root / LATEST_FILE, f"{self.step}\n")
            prune_checkpoints(root, self.keep_last, self.protect)
            log.info("saved checkpoint %s", self.final)
        self.committed = True
        return self.final


def start_checkpoint(
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
    *,
    background: bool,
) -> PendingCheckpoint:
    """Write the training state of ``step`` under ``checkpoints/.tmp-global_step_N``; every rank
    calls it, then :meth:`PendingCheckpoint.finish` commits it (arguments: :func:`save_checkpoint`).

    With ``background``, ``dcp.async_save`` first copies this rank's model and optimizer shards
    to host memory (its staging: a new copy, so an optimizer step right after the return does
    not change what is written), then a thread writes them while this returns; the RNG state,
    pending batches, scheduler, config and trainer state are written before the return. A
    previous background checkpoint must be finished first (one write on the checkpoint group at
    a time).
    """
    root = run_dir / CKPT_DIR
    tmp = root / f"{TMP_PREFIX}{step_dir_name(step)}"
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_TRAINED)  # this rank's shards (DTensors under FSDP)
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        remove_temp_entries(root)
        tmp.mkdir()
    barrier()
    state, where, no_dist = {"model": model_sd, "optimizer": optim_sd}, tmp / STATE_DIR, not is_distributed()
    write = None
    if background:
        _quiet_no_dist_in_threads()  # outside the block below: catch_warnings would undo it at its end
    with _quiet_no_dist():
        if background:
            write = dcp.async_save(state, checkpoint_id=where, process_group=checkpoint_group(), no_dist=no_dist)
            write = write.upload_completion if isinstance(write, AsyncSaveResponse) else write
        else:
            dcp.save(state, checkpoint_id=where, no_dist=no_dist)
    torch.save(save_rng_state(), tmp / f"rng_rank{dist_info.rank}.pt")
    if pending is not None:
        torch.save(pending, tmp / pending_file(dist_info.rank))
    if dist_info.is_main:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / CONFIG_FILE).write_text(config_yaml)
        loop_state = dict(trainer_state, global_step=step, world_size=dist_info.world_size)
        (tmp / "trainer_state.json").write_text(json.dumps(loop_state, indent=2))
    barrier()  # every rank's files besides the DCP shards are on disk
    return PendingCheckpoint(step, tmp, root / step_dir_name(step), dist_info.is_main, keep_last, protect, write)


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
