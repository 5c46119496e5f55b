"""Which rollout source a run uses: the synchronous loop (k = 0), the pipeline's exact schedule
(k >= 1, ``loop.exact_staleness``) or its timing-driven one; see ``docs/async.md``."""

from __future__ import annotations

from swerl.errors import ConfigError
from swerl.trainer.rollouts import pipeline
from swerl.trainer.rollouts.exact import ExactRollouts
from swerl.trainer.rollouts.pipeline import Context, InlineRollouts, PipelinedRollouts, RolloutBatch


def open_rollouts(ctx: Context, start_step: int, last_step: int,
                  pending: list[RolloutBatch] | None = None) -> InlineRollouts | PipelinedRollouts:
    """The rollout source for ``loop.max_staleness_steps`` and ``loop.exact_staleness`` (use as a
    context manager); ``pending``: the batches after ``start_step`` a checkpoint saved (exact only).

    Raises:
        ConfigError: dynamic sampling with k >= 1 on several ranks; the exact schedule with servers
            every rank shares (their reload is a collective of all ranks).
    """
    k = ctx.config.loop.max_staleness_steps
    if k > 0 and ctx.config.algorithm.dynamic_sampling.enabled and ctx.info.world_size > 1:
        raise ConfigError(f"algorithm.dynamic_sampling with loop.max_staleness_steps={k} runs on one trainer rank, "
                          f"this run has {ctx.info.world_size}: set loop.max_staleness_steps: 0 or "
                          "algorithm.dynamic_sampling.enabled: false")
    if k == 0 and not pipeline.THREADED_AT_ZERO:
        return InlineRollouts(ctx, start_step, last_step)
    if k > 0 and ctx.config.loop.exact_staleness:
        if ctx.generator.sync.drain_all_ranks:
            raise ConfigError("loop.exact_staleness with generator.server_urls shared by several ranks: their reload is "
                              "a collective of every rank, which a producer between two batches cannot join: set "
                              "loop.exact_staleness: false")
        return ExactRollouts(ctx, start_step, last_step, k, pending)
    return PipelinedRollouts(ctx, start_step, last_step, k)
