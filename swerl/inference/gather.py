"""The whole tensor of a possibly sharded, possibly offloaded value: what every writer of full
weights (the weight syncs, the checkpoint exports) gathers before it casts, copies or sends it.

Stage: ``inference/``, ground floor (the weight syncs here and the trainer's exports above call it).
Under FSDP2 a parameter or state-dict entry is a ``DTensor`` holding this rank's shard; with
``CPUOffloadPolicy`` that shard lives in host memory while the mesh is a CUDA one, and NCCL cannot
gather host tensors, so the shard first moves to the mesh's device. A plain tensor is returned as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """The full (unsharded) tensor of ``value``, on the device of its mesh.

    Args:
        value: any tensor; a ``DTensor`` (an FSDP2 shard), possibly on the host while its mesh is
            on CUDA (CPU-offloaded).
    Returns: ``value`` itself when it is not a ``DTensor``; else its all-gathered full tensor
        (global shape, same dtype: cast before calling to gather fewer bytes).
    Collective for a ``DTensor``: every rank of its mesh calls it, in the same order.
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        return value
    mesh_device = value.device_mesh.device_type
    if value.device.type != mesh_device:  # CPU-offloaded shard: gather over the mesh's device (NCCL)
        value = value.to(mesh_device)
    return value.full_tensor()
