"""NCCL weight sync to vLLM GPU servers: vLLM's native weight transfer (docs ``training/weight_transfer``;
servers started with ``--weight-transfer-config '{"backend": "nccl"}'``).

Per server one trainer-side transfer engine (``WeightTransferTrainerFactory.trainer_init``); the
server's owner rank is vLLM's sender ("rank 0" in vLLM's terms) and opens a TCPStore rendezvous on
``address:port`` that the server's workers join, forming one NCCL group of 1 + the server's
tensor x pipeline parallel size. At every :meth:`NcclBroadcast.apply` every trainer rank walks the
policy's parameters in the same order (under FSDP each is an all-gather, of bf16 shards: the cast
comes first) and the owner broadcasts each tensor; one walk per server. vLLM's CPU build has no
such transfer (``/init_weight_transfer_engine`` answers 500): swerl refuses it on CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from swerl.errors import ConfigError, EnvironmentProblem
from swerl.inference.gather import full_tensor
from swerl.inference.weight_sync.base import Staged, WeightSync

if TYPE_CHECKING:
    from vllm.distributed.weight_transfer.base import ModuleSource

    from swerl.inference.engines.vllm_server import VLLMServerBackend

TRANSFER_MODULES = ("vllm.distributed.weight_transfer.base", "vllm.distributed.weight_transfer.clients",
                    "vllm.distributed.weight_transfer.factory", "vllm.distributed.weight_transfer.nccl_engine")
"""What the trainer side imports; the classes moved twice between vLLM 0.16 and 0.29."""
TRANSFER_ROUTES = ("/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
                   "/finish_weight_update", "/get_world_size")
"""The server routes the transfer drives (``VLLM_SERVER_DEV_MODE=1``)."""


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


def check_transfer_api() -> None:
    """The installed vLLM has the trainer-side weight-transfer classes swerl calls.

    Raises:
        EnvironmentProblem: a module or class is missing (vLLM older than the API), naming the version.
    """
    import importlib

    try:
        import vllm

        for name in TRANSFER_MODULES:
            importlib.import_module(name)
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory  # noqa: F401
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo  # noqa: F401
    except ImportError as err:
        version = getattr(locals().get("vllm"), "__version__", "not installed")
        raise EnvironmentProblem(
            f"generator.weight_sync=nccl needs vLLM's weight-transfer API ({err}; vLLM {version}); "
            "fix: install a vLLM that has it (0.29 or newer) or set generator.weight_sync=disk"
        ) from err


def sender_rank(is_owner: bool) -> int:
    """The ``rank`` a trainer passes to vLLM's ``TrainerInitInfo``: vLLM makes rank 0 the sender, so
    a server's owner passes 0 and every other trainer rank 1 (it only joins the gathers)."""
    return 0 if is_owner else 1


def cast_source(model: torch.nn.Module, dtype: torch.dtype) -> ModuleSource:
    """A vLLM ``WeightSource`` over ``model.named_parameters()`` (tied weights once, HF names) that
    casts each parameter to ``dtype`` where it lives BEFORE gathering it (an FSDP shard is cast
    locally, then all-gathered: half the bytes of an fp32 gather for a bf16 engine)."""
    from vllm.distributed.weight_transfer.base import ModuleSource, ParamMeta

    class CastModuleSource(ModuleSource):
        def metadata(self) -> list[Any]:
            return [ParamMeta(name, dtype, tuple(p.shape)) for name, p in self._module.named_parameters()]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            for name, param in self._module.named_parameters():
                yield name, full_tensor(param.detach().to(dtype))

    return CastModuleSource(model)


class NcclBroadcast(WeightSync):
    """vLLM GPU servers receiving every parameter over NCCL from their owner rank.

    Args:
        engines: every server this rank generates with; owned: indices of those it owns.
        model: the trainer's policy (replicated or FSDP-sharded). dtype: the servers' dtype.
        address: where the servers' workers reach this rank's rendezvous (``generator.weight_sync_address``).
        ports: one free port per owned server, on ``address``.
        shared: the servers serve other ranks too (sets ``drain_all_ranks``).

    Raises (construction):
        EnvironmentProblem: the installed vLLM lacks the transfer API, or a server lacks its routes.
    """

    def __init__(self, engines: list[VLLMServerBackend], owned: list[int], model: torch.nn.Module,
                 dtype: torch.dtype, address: str, ports: list[int], shared: bool = False) -> None:
        self.engines, self.owned, self.drain_all_ranks = list(engines), list(owned), shared
        self.num_bytes = sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()
        self.check()
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        source, free = cast_source(model, dtype), iter(ports)
        self.senders = []
        for index, engine in enumerate(self.engines):  # every rank, every server, in order
            owner = index in self.owned
            world = 1 + engine.worker_count() if owner else 2
            info = NCCLTrainerInitInfo(master_address=address, master_port=next(free) if owner else 0,
                                       world_size=world, rank=sender_rank(owner))
            self.senders.append(WeightTransferTrainerFactory.trainer_init(
                info, client=HTTPVLLMWeightSyncClient(engine.url), source=source))

    def check(self) -> None:
        check_transfer_api()
        for index in self.owned:
            self.engines[index].require_routes(TRANSFER_ROUTES, "generator.weight_sync=nccl")

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        return Staged(version, num_bytes=self.num_bytes)

    def apply(self, staged: Staged) -> None:
        """Collective: every rank walks the parameters once per server; owners send, then reset."""
        for sender in self.senders:
            sender.send_weights()
        for index in self.owned:
            self.engines[index].reset_prefix_cache()
        for engine in self.engines:
            engine.weight_version = staged.version

    def probe_engines(self) -> list:
        return [self.engines[i] for i in self.owned]
