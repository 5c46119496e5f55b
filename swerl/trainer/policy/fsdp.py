"""FSDP2 sharding of the policy (``torch.distributed.fsdp.fully_shard``), on CUDA (NCCL) or CPU (gloo).

Each decoder layer is one FSDP unit, then the root (embeddings, final norm, LM head). Master
weights, gradients and AdamW state stay fp32 and sharded over the ranks of a 1-D device mesh;
with ``bf16`` each unit's parameters are all-gathered as bfloat16 for the forward/backward and
gradients are reduce-scattered in float32 (``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)``). ``cpu_offload`` keeps the sharded parameters, gradients and optimizer
state in host memory (``CPUOffloadPolicy``; on a CPU mesh it changes nothing but is accepted).

FSDP averages gradients over ranks; the update cancels that by scaling the loss by W
(``rl.reductions.dp_loss_scale``), so the applied gradient is the formula's sum.
"""

from __future__ import annotations

import torch

from swerl.trainer.distributed import DistInfo


def device_mesh(dist_info: DistInfo):
    """The 1-D mesh over every rank, on the ranks' device type (``cpu`` -> gloo, ``cuda`` -> NCCL).

    Raises: RuntimeError from torch when no process group is up (FSDP needs ``torchrun``).
    """
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(dist_info.device.type, (dist_info.world_size,))


def shard_model(
    model: torch.nn.Module, dist_info: DistInfo, *, bf16: bool, cpu_offload: bool = False
) -> torch.nn.Module:
    """Apply ``fully_shard`` to every decoder layer and the root; returns the same module.

    Args:
        model: an HF causal LM on the rank's device, fp32 (``model.model.layers`` are the units), or its
            peft wrapper (frozen base and trainable adapters share each unit; only the adapters get gradients).
        dist_info: the rank layout (the process group must be initialized).
        bf16: compute in bfloat16 (params cast per unit), reduce gradients in float32.
        cpu_offload: keep sharded params/grads/optimizer state on the host (``CPUOffloadPolicy``).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16
          else MixedPrecisionPolicy())
    offload = CPUOffloadPolicy(pin_memory=dist_info.device.type == "cuda") if cpu_offload else OffloadPolicy()
    from swerl.trainer.policy.lora import hf_module

    mesh = device_mesh(dist_info)
    for layer in hf_module(model).model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, offload_policy=offload)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
    return model

