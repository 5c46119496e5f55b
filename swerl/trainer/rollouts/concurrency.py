"""The run's sandbox limits split over its ranks: ``loop.rollout_concurrency`` (or
``sandbox.concurrency``), ``sandbox.concurrency``, ``sandbox.warm_pool_size`` and each engine's
``slots``, ``warm`` and ``max_creates_per_s`` are totals for the whole run, whatever the number of trainer ranks; every rank runs its
share of the episodes (``rollouts.rank_share``) with its share of these limits.
"""

from __future__ import annotations

from swerl.errors import ConfigError
from swerl.sandbox.types import SandboxConfig


def split_count(total: int, rank: int, world_size: int) -> int:
    """Rank ``rank``'s part of ``total`` (the first ``total % world_size`` ranks get one more, as
    ``rollouts.rank_share`` gives them one more prompt); the parts sum to ``total``."""
    base, extra = divmod(total, world_size)
    return base + (1 if rank < extra else 0)


def rank_sandbox(cfg: SandboxConfig, episodes: int, rank: int, world_size: int) -> tuple[SandboxConfig, int]:
    """This rank's share of the run's sandbox limits. ``episodes`` (``loop.rollout_concurrency``
    or ``sandbox.concurrency``), ``sandbox.concurrency``, ``warm_pool_size`` and every engine's
    ``slots`` and ``warm`` are totals over all ranks: each rank gets its :func:`split_count` of them
    (an engine's ``max_creates_per_s`` is divided evenly: each rank opens its own client; its
    slots and warm containers are dealt from a rank that moves with the engine's index, so that engines with few slots
    land on different ranks; a rank with no slot on an engine leaves it out).

    Returns: (the rank's SandboxConfig, the episodes it keeps in flight).
    Raises: ConfigError when a total is below the number of ranks (a rank would run nothing).
    """
    if world_size == 1:
        return cfg, episodes
    if min(episodes, cfg.concurrency) < world_size:
        raise ConfigError(
            f"loop.rollout_concurrency / sandbox.concurrency ({min(episodes, cfg.concurrency)}) is the run's total and "
            f"is below its {world_size} ranks: each rank runs its share of the episodes; raise it to >= {world_size}")
    engines = []
    for index, engine in enumerate(cfg.engines):
        turn = (rank + index) % world_size
        slots = engine.slots if engine.slots is None else split_count(engine.slots, turn, world_size)
        warm = engine.warm if engine.warm is None else split_count(engine.warm, turn, world_size)
        rate = engine.max_creates_per_s and engine.max_creates_per_s / world_size
        if slots != 0:
            engines.append(engine.model_copy(update={"slots": slots, "warm": warm, "max_creates_per_s": rate}))
    if cfg.engines and not engines:
        raise ConfigError(f"sandbox.engines' slots leave rank {rank} of {world_size} without an engine: they are the "
                          f"run's totals; give the engines >= {world_size} slots together")
    pool = cfg.warm_pool_size if cfg.warm_pool_size is None else split_count(cfg.warm_pool_size, rank, world_size)
    mine = cfg.model_copy(update={"concurrency": split_count(cfg.concurrency, rank, world_size), "engines": engines,
                                  "warm_pool_size": pool})
    return mine, split_count(episodes, rank, world_size)
