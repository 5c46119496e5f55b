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
