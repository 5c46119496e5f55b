"""Checkpoints of a run: full training state for exact resume, HF exports for eval and selection.

Layout of a run directory (SkyRL's names):

    RUN_DIR/checkpoints/global_step_N/{model.pt, optimizer.pt, scheduler.pt, trainer_state.json,
                                      config.yaml, rng_rank{r}.pt}
    RUN_DIR/checkpoints/latest_ckpt_global_step.txt
    RUN_DIR/exports/global_step_N/{model.safetensors, config.json, tokenizer files, chat template}

Every folder is written under a ``.tmp-*`` name and renamed when complete, so a ``kill -9``
mid-save leaves the previous checkpoint as the newest loadable one; stale temp folders are
ignored when loading and removed by the next save.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from swerl.errors import ConfigError
from swerl.inference.rng import restore_rng_state, save_rng_state
from swerl.trainer.distributed import DistInfo, barrier

log = logging.getLogger(__name__)

CKPT_DIR = "checkpoints"
EXPORT_DIR = "exports"
LATEST_FILE = "latest_ckpt_global_step.txt"
_STEP_RE = re.compile(r"^global_step_(\d+)$")
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def step_dir_name(step: int) -> str:
    """``global_step_N``."""
    return f"global_step_{step}"


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


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())


def _rename_into_place(tmp: Path, final: Path) -> None:
    if final.exists():  # re-saving a step (e.g. after a resume): swap, then drop the old one
        trash = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)


def _remove_stale_temps(root: Path) -> None:
    for p in root.glob(".tmp-*"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def full_model_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict on CPU (collective under FSDP: every rank calls it)."""
    return get_model_state_dict(model, options=_FULL)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    config_yaml: str,
    dist_info: DistInfo,
    keep_last: int | None = None,
    protect: frozenset[int] = frozenset(),
) -> Path:
    """Write the full training state of ``step`` atomically; every rank must call it.

    Args:
        trainer_state: JSON-serialisable loop state (global step, sampler position, ...).
        config_yaml: the resolved config, stored beside the weights.
        keep_last: keep this many newest checkpoints (None or 0: keep all); the newest and the
            steps in ``protect`` are never deleted.
    Returns: the final folder ``RUN_DIR/checkpoints/global_step_N``.
    """
    root = run_dir / CKPT_DIR
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}"
    model_sd = get_model_state_dict(model, options=_FULL)
    optim_sd = get_optimizer_state_dict(model, optimizer, options=_FULL)
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(root)
        tmp.mkdir()
    barrier()
    torch.save(save_rng_state(), tmp / f"rng_rank{dist_info.rank}.pt")
    if dist_info.is_main:
        torch.save(model_sd, tmp / "model.pt")
        torch.save(optim_sd, tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "config.yaml").write_text(config_yaml)
        state = dict(trainer_state, global_step=step, world_size=dist_info.world_size)
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    barrier()
    if dist_info.is_main:
        _fsync_tree(tmp)
        _rename_into_place(tmp, final)
        _write_text_atomic(root / LATEST_FILE, f"{step}\n")
        prune_checkpoints(root, keep_last, protect)
        log.info("saved checkpoint %s", final)
    barrier()
    return final


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
    scheduler: Any,
    dist_info: DistInfo,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and this rank's RNG from ``path``; every rank calls it.

    Returns: the saved ``trainer_state`` (includes ``global_step``).
    Raises:
        ConfigError: the checkpoint was written by a different world size (RNG streams differ).
    """
    state = json.loads((path / "trainer_state.json").read_text())
    if state.get("world_size", 1) != dist_info.world_size:
        raise ConfigError(
            f"{path} was written with {state.get('world_size')} ranks, this run has {dist_info.world_size}: "
            "resume with the same number of processes"
        )
    model_sd = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
    set_model_state_dict(model, model_sd, options=StateDictOptions(full_state_dict=True))
    optim_sd = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)
    set_optimizer_state_dict(model, optimizer, optim_sd, options=StateDictOptions(full_state_dict=True))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    restore_rng_state(torch.load(path / f"rng_rank{dist_info.rank}.pt", weights_only=False))
    log.info("resumed from %s (global step %d)", path, state["global_step"])
    return state


def export_hf(run_dir: Path, step: int, model: torch.nn.Module, tokenizer: Any, dist_info: DistInfo) -> Path:
    """Write an HF folder (safetensors, config, tokenizer, chat template) to ``exports/global_step_N``.

    Every rank calls it (the full state dict is gathered collectively); rank 0 writes.
    Returns: the export folder.
    """
    state_dict = get_model_state_dict(model, options=_FULL)
    root = run_dir / EXPORT_DIR
    final = root / step_dir_name(step)
    if dist_info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(root)
        tmp = root / f".tmp-{step_dir_name(step)}"
        unwrapped = getattr(model, "module", model)
        unwrapped.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _fsync_tree(tmp)
        _rename_into_place(tmp, final)
        log.info("exported %s", final)
    barrier()
    return final
