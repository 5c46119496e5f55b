"""Getting trained weights into the engines after each optimizer step.

Two paths:

- ``disk`` (portable, CPU and GPU): the trainer writes the weights as one safetensors file into a
  folder every engine can read; each engine reloads it in place (``collective_rpc`` of swerl's
  worker extension, which also re-packs tied LM heads on CPU). ~0.5 s for 135M params on CPU.
- ``nccl`` (GPU servers only): vLLM's native weight transfer (``WeightTransferTrainerFactory``,
  servers started with ``--weight-transfer-config '{"backend": "nccl"}'``): rank 0 of the trainer
  broadcasts every tensor to the servers' workers over one NCCL group. vLLM's CPU build has no
  such transfer (``/init_weight_transfer_engine`` answers 500), so swerl refuses it on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from swerl.errors import ConfigError
from swerl.fileio import atomic_write

WEIGHTS_FILE = "model.safetensors"


def untied_state_dict(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` cast to ``dtype``, contiguous, with tensors that share storage kept once (the first
    name wins, as in ``save_pretrained``: a tied ``lm_head.weight`` goes, ``embed_tokens`` stays)."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = tensor.untyped_storage().data_ptr() if tensor.numel() else id(tensor)
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu", dtype).contiguous()
    return out


def write_weights(state: dict[str, torch.Tensor], folder: Path, dtype: torch.dtype, version: int) -> Path:
    """Write ``state`` (HF names) as ``folder/model.safetensors`` atomically (temp name + rename).

    Args:
        dtype: the engines' dtype (casting here halves the bytes for a bf16 engine).
        version: the policy version, stored in the file's metadata.

    Returns:
        ``folder`` (what ``reload_weights`` takes).
    """
    from safetensors.torch import save_file

    tensors, metadata = untied_state_dict(state, dtype), {"format": "pt", "weight_version": str(version)}
    atomic_write(folder / WEIGHTS_FILE, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    return folder


def check_nccl_supported(on_cpu: bool) -> None:
    """Refuse ``generator.weight_sync=nccl`` where it cannot work.

    Raises:
        ConfigError: on CPU (vLLM's CPU build has no NCCL weight transfer).
    """
    if on_cpu:
        raise ConfigError(
            "generator.weight_sync=nccl needs CUDA GPUs: vLLM's CPU build has no NCCL weight transfer; "
            "fix: set generator.weight_sync=disk"
        )


class NcclWeightSender:
    """Trainer side of vLLM's NCCL weight transfer to one vLLM server (GPU only, untested on CPU).

    Written to vLLM 0.32's documented API (docs ``training/weight_transfer``): the server runs with
    ``--weight-transfer-config '{"backend": "nccl"}'``; the trainer builds
    ``WeightTransferTrainerFactory.trainer_init(NCCLTrainerInitInfo(...), client=HTTP client,
    source=ModuleSource(model))`` once, which rendezvouses over a TCPStore on ``master_port``, then
    calls ``send_weights()`` after each optimizer step (start/update/finish run inside it).

    Args:
        url: server root. model: the trainer's (unsharded) module. rank: this trainer rank (0 sends).
        world_size: trainer senders + the server's workers (1 + tensor-parallel size).
    """

    def __init__(self, url: str, model: torch.nn.Module, rank: int, world_size: int, master_port: int) -> None:
        check_nccl_supported(not torch.cuda.is_available())
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        info = NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=master_port, world_size=world_size, rank=rank)
        self._engine: Any = WeightTransferTrainerFactory.trainer_init(
            info, client=HTTPVLLMWeightSyncClient(url), source=ModuleSource(model)
        )

    def send(self) -> None:
        """Broadcast every parameter to the server (the server then resets its prefix cache)."""
        self._engine.send_weights()
