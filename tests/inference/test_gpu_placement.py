"""Server GPUs go after the node's trainer GPUs, among the GPUs the parent lets this job see."""

from __future__ import annotations

import pytest

from swerl.errors import EnvironmentProblem
from swerl.inference.engines.gpu_placement import server_gpus, visible_gpus


def test_visible_gpus_follow_the_parents_variable_or_the_device_count() -> None:
    assert visible_gpus("4,5, 6,7", 8) == ["4", "5", "6", "7"]  # a Slurm partial allocation
    assert visible_gpus("GPU-aa,GPU-bb", 2) == ["GPU-aa", "GPU-bb"]  # UUIDs pass through
    assert visible_gpus(None, 3) == ["0", "1", "2"] and visible_gpus("", 4) == []


def test_each_ranks_servers_get_gpus_no_trainer_rank_uses() -> None:
    visible = ["4", "5", "6", "7", "8", "9", "10", "11"]
    # 4 trainer ranks on 4..7, one server each on 8..11: rank r's server never on a trainer GPU.
    assert [server_gpus(visible, r, 4, 1) for r in range(4)] == [["8"], ["9"], ["10"], ["11"]]
    assert [server_gpus(visible[:6], r, 2, 2) for r in range(2)] == [["6", "7"], ["8", "9"]]  # 2 ranks, 2 servers each
    with pytest.raises(EnvironmentProblem, match=r"num_servers=1 per rank with 8 trainer ranks on this node needs 16 GPUs"):
        server_gpus(visible, 0, 8, 1)
