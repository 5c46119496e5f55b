"""``inference.gather.full_tensor``: a plain tensor passes through untouched; an FSDP-style shard
(a ``DTensor`` over a real one-rank gloo mesh) comes back whole, in its dtype."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from swerl.inference.gather import full_tensor


def test_a_plain_tensor_is_returned_as_it_is():
    value = torch.arange(6.0).reshape(2, 3)
    assert full_tensor(value) is value


def test_a_sharded_tensor_is_gathered_whole():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        whole = torch.arange(12, dtype=torch.bfloat16).reshape(4, 3)
        shard = distribute_tensor(whole, init_device_mesh("cpu", (1,)), [Shard(0)])
        got = full_tensor(shard)
        assert type(got) is torch.Tensor and got.dtype == torch.bfloat16
        assert torch.equal(got, whole)
    finally:
        dist.destroy_process_group()
