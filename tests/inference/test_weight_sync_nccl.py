"""The NCCL weight sync's logic on CPU (the transfer itself needs CUDA GPUs): one vLLM trainer
engine per server, the server's owner rank is vLLM's sender ("rank 0") with a rendezvous on the
configured address and its own port, its group sized from the server's workers; other ranks only
join the gathers; every rank walks the parameters once per server at apply, the owners reset
their servers' prefix caches and every server carries the version."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from swerl.inference.weight_sync.base import Staged  # noqa: E402
from swerl.inference.weight_sync.nccl import TRANSFER_ROUTES, NcclBroadcast  # noqa: E402


class Server:
    """What the sync asks of a server: its url, routes, worker count, prefix-cache reset, version."""

    def __init__(self, url: str, workers: int) -> None:
        self.url, self.workers, self.weight_version, self.resets, self.checked = url, workers, 0, 0, []

    def require_routes(self, needed, purpose) -> None:
        self.checked.append((tuple(needed), purpose))

    def worker_count(self) -> int:
        return self.workers

    def reset_prefix_cache(self) -> None:
        self.resets += 1


class Sender:
    """vLLM's trainer engine as the factory returns it; counts its sends (each walks the source)."""

    def __init__(self, info, source) -> None:
        self.info, self.source, self.walked = info, source, []

    def send_weights(self) -> None:
        self.walked.append([name for name, _ in self.source])


def test_owner_sends_others_gather_and_every_server_carries_the_version(monkeypatch) -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    made: list[Sender] = []
    monkeypatch.setattr(WeightTransferTrainerFactory, "trainer_init",
                        staticmethod(lambda info, client, source: made.append(Sender(info, source)) or made[-1]))
    servers = [Server("http://gpu-node-2:8000", workers=2), Server("http://gpu-node-3:8000", workers=1)]
    model = torch.nn.Linear(3, 2)
    sync = NcclBroadcast(servers, owned=[1], model=model, dtype=torch.bfloat16, address="10.0.0.7", ports=[29601],
                         shared=True)
    infos = [(s.info.rank, s.info.master_address, s.info.master_port, s.info.world_size) for s in made]
    assert infos[1] == (0, "10.0.0.7", 29601, 2)  # owner of server 1: vLLM's sender, 1 + its 1 worker
    assert infos[0][0] == 1  # server 0 is another rank's: this rank only joins the gathers
    assert servers[1].checked == [(TRANSFER_ROUTES, "generator.weight_sync=nccl")] and servers[0].checked == []
    assert sync.drain_all_ranks and sync.stage(model, 3) == Staged(3, num_bytes=2 * 8)  # 8 parameters in bf16
    sync.apply(Staged(3))
    assert [s.walked for s in made] == [[["weight", "bias"]], [["weight", "bias"]]]  # one walk per server
    assert [s.resets for s in servers] == [0, 1] and [s.weight_version for s in servers] == [3, 3]
    assert sync.probe_engines() == [servers[1]]


def _servers_config(weight_sync: str):
    from swerl.trainer.config import TrainConfig

    return TrainConfig(data={"tasks": "unused"}, agent={"limits": {"context_window_tokens": 256,
                                                                   "max_new_tokens_per_turn": 64}},
                       loop={"max_staleness_steps": 1, "exact_staleness": False},
                       generator={"backend": "vllm", "vllm_mode": "servers", "max_model_len": 256,
                                  "server_urls": ["http://127.0.0.1:8000"], "weight_sync": weight_sync})


def test_auto_resolved_on_a_gpu_node_builds_the_nccl_broadcast(monkeypatch, tmp_path) -> None:
    """``weight_sync: auto`` resolved with a GPU node's (forced) probe: the factory builds
    ``NcclBroadcast`` for the servers; left unresolved it refuses (no process group either way)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from swerl.inference.engines.engine_pool import EnginePool
    from swerl.trainer.distributed import DistInfo
    from swerl.trainer.rollouts.generator import attach_sync
    from swerl.trainer.setup.auto import resolve_auto
    from swerl.trainer.setup.sync_auto import forced_sync_probe

    made: list[Sender] = []
    monkeypatch.setattr(WeightTransferTrainerFactory, "trainer_init",
                        staticmethod(lambda info, client, source: made.append(Sender(info, source)) or made[-1]))
    config = resolve_auto(_servers_config("auto"), sync_probe=forced_sync_probe()).config
    assert config.generator.weight_sync == "nccl"
    server, model = Server("http://127.0.0.1:8000", workers=1), torch.nn.Linear(3, 2)
    generator = attach_sync(EnginePool([server]), config, model, tmp_path, DistInfo(), owns_backend=False)
    assert isinstance(generator.sync, NcclBroadcast) and made[0].info.rank == 0  # this rank sends to its server
    assert set(server.checked) == {(TRANSFER_ROUTES, "generator.weight_sync=nccl")}  # its routes, before any send
    with pytest.raises(ValueError, match="generator.weight_sync=auto reached the generator unresolved"):
        attach_sync(EnginePool([server]), _servers_config("auto"), model, tmp_path, DistInfo(), owns_backend=False)
