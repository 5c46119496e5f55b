"""Data-parallel plumbing: process group setup under ``torchrun``, sums across ranks, rank slices.

Gradients are reduced by an explicit SUM (never an average), so that the gradient every rank
applies equals the one of a single process over the whole batch (docs/algorithms.md, Loss reductions: no extra
1/world_size). Without ``torchrun`` everything here degrades to a one-rank no-op.

Process groups: the default one (NCCL on CUDA, gloo on CPU) carries the tensors of the
update, with ``timeout_s`` (on CUDA with offloaded state it is ``cuda:nccl,cpu:gloo``: FSDP2's
``CPUOffloadPolicy`` leaves host DTensors whose collectives, the gradient norm's Partial-to-Replicate
sum among them, need a CPU backend, as torchtitan and torchtune set it); a gloo group with :data:`GATHER_TIMEOUT_S` carries the Python objects
and waits that may span rollouts (trajectory gathering, parity-probe results, barriers around
files): a rank still running its episodes must not time the others out, and no NCCL
communicator is held open while the GPUs generate. A third, gloo too, made at the first
background checkpoint (:func:`checkpoint_group`), carries that write's collectives from its thread.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

GATHER_TIMEOUT_S = 24 * 3600.0
"""Timeout of the gloo group that gathers rollouts: a whole step's episodes on the slowest rank."""

_objects_group: dist.ProcessGroup | None = None  # the gloo group of objects and barriers, made by init_distributed
_checkpoint_group: dist.ProcessGroup | None = None  # the gloo group of background checkpoint writes (checkpoint_group)


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` in ``[0, world_size)``, its ``device``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes files and drives rollouts."""
        return self.rank == 0


def process_group_backend(use_cuda: bool, cpu_offload: bool) -> str:
    """The default group's backend: ``gloo`` on CPU, ``nccl`` on CUDA, and ``cuda:nccl,cpu:gloo``
    on CUDA when some state lives in host memory (``model.cpu_offload``,
    ``model.reference_cpu_offload``): NCCL alone cannot reduce host tensors, so clipping an
    offloaded gradient would fail at the first optimizer step."""
    if not use_cuda:
        return "gloo"
    return "cuda:nccl,cpu:gloo" if cpu_offload else "nccl"


def init_distributed(device: str = "auto", timeout_s: float = 1800.0, cpu_offload: bool = False) -> DistInfo:
    """Join the process group that ``torchrun`` describes (:func:`process_group_backend`).

    Args:
        device: ``cpu``, ``cuda`` or ``auto`` (CUDA when available).
        timeout_s: collective timeout in seconds (rollouts of one step run between collectives).
        cpu_offload: some of the trainer's state is offloaded to host memory (adds a gloo backend on CUDA).
    Returns: the rank layout; ``DistInfo()`` for a plain single process.
    """
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    launched = dist.is_torchelastic_launched() or "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not launched:
        return DistInfo(device=torch.device("cuda" if use_cuda else "cpu"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            backend=process_group_backend(use_cuda, cpu_offload), timeout=dt.timedelta(seconds=timeout_s)
        )
    global _objects_group
    if _objects_group is None:  # every rank passes here once, as new_group needs
        _objects_group = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=GATHER_TIMEOUT_S))
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=dev)


def is_distributed() -> bool:
    """True when a process group with more than one rank is up."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """In-place SUM over ranks of a tensor (identity on one rank); returns it."""
    if is_distributed():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_reduce_max(value: int) -> int:
    """The largest ``value`` over ranks (itself on one rank)."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.int64)
    if dist.get_backend() == "nccl":  # a mixed "cuda:nccl,cpu:gloo" group reduces it on the host
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def all_reduce_grads(model: torch.nn.Module) -> None:
    """SUM the ``.grad`` of every trainable parameter over ranks (one flat buffer per dtype).

    Ranks must hold the same parameters in the same order (replicated, not sharded, models).
    A parameter without a gradient contributes zeros.
    """
    if not is_distributed():
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p in params:
        by_dtype.setdefault(p.grad.dtype, []).append(p)
    for group in by_dtype.values():
        flat = torch.cat([p.grad.reshape(-1) for p in group])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in group:
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n


def broadcast_object(obj: T | None, src: int = 0) -> T:
    """Send a picklable object from ``src`` to every rank (gloo group); returns it everywhere."""
    if not is_distributed():
        return obj  # type: ignore[return-value]
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=src, group=_objects_group)
    return box[0]


def all_gather_objects(obj: T) -> list[T]:
    """Every rank's picklable ``obj``, in rank order, on every rank (gloo group, long timeout);
    ``[obj]`` on one rank."""
    if not is_distributed():
        return [obj]
    boxes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(boxes, obj, group=_objects_group)
    return boxes


def barrier() -> None:
    """Wait for every rank (gloo group, long timeout; no-op on one rank)."""
    if is_distributed():
        dist.barrier(group=_objects_group)


def checkpoint_group() -> dist.ProcessGroup | None:
    """The gloo group that background checkpoint writes (``dcp.async_save``) talk on, made at the
    first call (every rank must make that call, in the same order); None on one rank.

    A group of their own: a write's collectives run in its thread while the main thread uses the
    other groups, and two threads on one group could pair up different collectives across ranks.
    Its timeout is :data:`GATHER_TIMEOUT_S` (a write may span a whole step)."""
    global _checkpoint_group
    if not is_distributed():
        return None
    if _checkpoint_group is None:
        _checkpoint_group = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=GATHER_TIMEOUT_S))
    return _checkpoint_group


def rank_slice(num_rows: int, rank: int, world_size: int) -> tuple[range, int]:
    """The contiguous rows of ``rank`` and the padded per-rank row count.

    Every rank gets ``ceil(num_rows / world_size)`` slots so that all ranks run the same number
    of forward/backward calls (FSDP collectives need it); slots past the real rows are padding
    rows with an all-zero loss mask.

    Returns: (range of real row indices of this rank, rows per rank including padding).
    """
    per_rank = -(-num_rows // world_size) if num_rows else 0
    start = min(rank * per_rank, num_rows)
    return range(start, min(start + per_rank, num_rows)), per_rank


def destroy() -> None:
    """Tear the process groups down if this process set them up."""
    global _objects_group, _checkpoint_group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _objects_group = _checkpoint_group = None
