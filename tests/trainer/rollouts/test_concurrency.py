"""The run's sandbox limits are totals over its ranks: each rank gets its share of the episodes
in flight, the sandboxes alive, the warm pool and every engine's slots, and the shares sum to
the totals (what the plan and the docs present); an engine's create rate is divided evenly."""

from __future__ import annotations

import pytest

from swerl.errors import ConfigError
from swerl.sandbox.types import SandboxConfig
from swerl.trainer.rollouts.concurrency import rank_sandbox, split_count


def test_shares_sum_to_the_totals_over_any_number_of_ranks():
    cfg = SandboxConfig(concurrency=10, warm_pool_size=3,
                        engines=[{"url": "tcp://a:2375", "slots": 6, "warm": 5, "max_creates_per_s": 8.0},
                                 {"url": "tcp://b:2375", "slots": 1}, {"url": "tcp://c:2375"}])
    for world in (1, 2, 3, 4):
        shares = [rank_sandbox(cfg, 9, rank, world) for rank in range(world)]
        assert sum(episodes for _, episodes in shares) == 9
        assert sum(mine.concurrency for mine, _ in shares) == 10
        assert sum(mine.warm_pool_size for mine, _ in shares) == 3
        for url, slots in (("tcp://a:2375", 6), ("tcp://b:2375", 1)):
            assert sum(e.slots for mine, _ in shares for e in mine.engines if e.url == url) == slots
        a = [e for mine, _ in shares for e in mine.engines if e.url == "tcp://a:2375"]
        assert sum(e.warm for e in a) == 5 and sum(e.max_creates_per_s for e in a) == pytest.approx(8.0)
        # an engine without slots follows each rank's own concurrency: every rank keeps it
        assert all(any(e.url == "tcp://c:2375" and e.slots is None for e in mine.engines) for mine, _ in shares)
    assert [split_count(9, r, 4) for r in range(4)] == [3, 2, 2, 2]


def test_an_engine_with_few_slots_serves_only_some_ranks_and_a_rank_without_any_is_refused():
    cfg = SandboxConfig(concurrency=8, engines=[{"url": "tcp://a:2375", "slots": 1}, {"url": "tcp://b:2375", "slots": 1}])
    placed = [[e.url for e in rank_sandbox(cfg, 8, rank, 2)[0].engines] for rank in range(2)]
    assert placed == [["tcp://a:2375"], ["tcp://b:2375"]]  # dealt from a rank that moves with the engine
    with pytest.raises(ConfigError, match="without an engine"):
        rank_sandbox(cfg, 8, 1, 3)  # 2 slots for 3 ranks: rank 1 gets none


def test_a_total_below_the_ranks_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="is the run's total and is below its 8 ranks.*raise it to >= 8"):
        rank_sandbox(SandboxConfig(concurrency=64), 4, 0, 8)
    assert rank_sandbox(SandboxConfig(concurrency=4), 4, 0, 1)[1] == 4
