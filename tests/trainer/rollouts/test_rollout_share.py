"""Every rank generates its share: contiguous prompt shares with whole groups, the group ids
of a single-rank run, and trajectories all-gathered in prompt order (two real gloo ranks)."""

from __future__ import annotations

import os

import torch.distributed as tdist
import torch.multiprocessing as mp

from swerl.agent.trajectory import Trajectory
from swerl.trainer.rollouts.runner import gather_trajectories, rank_share


def test_shares_cover_the_prompts_contiguously_with_the_single_rank_prefix() -> None:
    shares = [rank_share(5, 3, rank, 2) for rank in range(2)]
    assert [list(s) for s, _ in shares] == [[0, 1, 2], [3, 4]]
    assert [p for _, p in shares] == ["step3/", "step3/"]  # ids = a single-rank run's (same seeds)
    assert rank_share(4, 3, 0, 1) == (range(0, 4), "step3/")
    assert list(rank_share(1, 1, 1, 2)[0]) == []  # more ranks than prompts: an empty share


def _gather(rank: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=rank, world_size=2)
    share, prefix = rank_share(3, 1, rank, 2)
    local = [Trajectory(task_name=f"t{i}", group_id=f"{prefix}{i}", prompt_ids=[1, 2]) for i in share]
    out[rank] = [t.group_id for t in gather_trajectories(local)]
    tdist.destroy_process_group()


def test_two_ranks_all_gather_in_prompt_order() -> None:
    from swerl.inference.engines.server_process import free_port

    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_gather, args=(free_port(), out), nprocs=2)
        assert out[0] == out[1] == ["step1/0", "step1/1", "step1/2"]
