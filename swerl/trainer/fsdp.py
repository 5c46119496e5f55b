"""FSDP2 sharding of the policy on CUDA (``torch.distributed.fsdp.fully_shard``).

Each decoder layer is one FSDP unit, then the root. Master weights stay fp32; with
``bf16`` the forward/backward compute in bfloat16 and gradients are reduced in fp32. FSDP
averages gradients over ranks; the update cancels that by scaling the loss by W
(``rl.reductions.dp_loss_scale``), so the applied gradient is the formula's sum.
"""

from __future__ import annotations

import torch


def shard_model(model: torch.nn.Module, bf16: bool) -> torch.nn.Module:
    """Apply ``fully_shard`` to every decoder layer and the root; returns the same module.

    Args:
        model: an HF causal LM already on the rank's CUDA device (``model.model.layers``).
        bf16: compute in bfloat16 (params cast per unit), reduce gradients in float32.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model
