"""The run plan: how many steps, prompts, samples, optimizer steps and tokens a config implies.

``swerl train --dry-run`` prints it; ``train`` sizes the LR schedule from it.
"""

from __future__ import annotations

from pydantic import BaseModel

from swerl.trainer.config import TrainConfig


class RunPlan(BaseModel):
    """Counts implied by a config and a task-set size.

    Attributes:
        num_tasks: tasks in the source (None when the source is not readable at plan time).
        steps_per_epoch: full batches per epoch (None when ``num_tasks`` is unknown).
        total_steps: training steps the run will take.
        prompts_per_step, samples_per_step: B and B * n.
        optimizer_steps_per_step: mini-batches x update epochs.
        total_optimizer_steps: what the LR schedule spans.
        max_tokens_per_episode: the agent's context window (prompt + every turn), tokens.
        token_budget_per_step: upper bound of tokens sampled per step (samples x window).
        checkpoint_steps, export_steps: steps that write a checkpoint / an HF export.
        notes: warnings about the plan (e.g. features that run differently than configured).
    """

    num_tasks: int | None
    steps_per_epoch: int | None
    total_steps: int
    prompts_per_step: int
    samples_per_step: int
    optimizer_steps_per_step: int
    total_optimizer_steps: int
    max_tokens_per_episode: int
    token_budget_per_step: int
    checkpoint_steps: list[int]
    export_steps: list[int]
    notes: list[str] = []


def _every(interval: int, total: int, final: bool) -> list[int]:
    steps = list(range(interval, total + 1, interval)) if interval > 0 else []
    if final and total > 0 and (not steps or steps[-1] != total):
        steps.append(total)
    return steps


def make_plan(cfg: TrainConfig, num_tasks: int | None) -> RunPlan:
    """The plan of ``cfg`` over ``num_tasks`` tasks (limited by ``data.limit``).

    With an unknown task count the run is assumed to stop at ``loop.max_steps``.
    """
    loop = cfg.loop
    if num_tasks is not None and cfg.data.limit is not None:
        num_tasks = min(num_tasks, cfg.data.limit)
    steps_per_epoch = None if num_tasks is None else num_tasks // loop.train_batch_size
    by_epochs = None if steps_per_epoch is None else steps_per_epoch * loop.epochs
    candidates = [s for s in (by_epochs, loop.max_steps) if s is not None]
    total = min(candidates) if candidates else 0
    minis = loop.train_batch_size // (loop.mini_batch_size or loop.train_batch_size)
    opt_per_step = minis * loop.update_epochs
    window = cfg.agent.limits.context_window_tokens
    samples = loop.train_batch_size * cfg.n_samples
    notes = []
    if num_tasks is None:
        notes.append(f"task source {cfg.data.tasks} not readable now: steps assume loop.max_steps")
    if loop.max_staleness_steps > 0:
        notes.append(
            f"loop.max_staleness_steps={loop.max_staleness_steps} is an upper bound: swerl samples each batch "
            "with the current weights (staleness 0, synchronous)"
        )
    ck = cfg.checkpointing
    return RunPlan(
        num_tasks=num_tasks,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        prompts_per_step=loop.train_batch_size,
        samples_per_step=samples,
        optimizer_steps_per_step=opt_per_step,
        total_optimizer_steps=total * opt_per_step,
        max_tokens_per_episode=window,
        token_budget_per_step=samples * window,
        checkpoint_steps=_every(ck.ckpt_interval, total, ck.save_final),
        export_steps=_every(ck.hf_save_interval, total, ck.save_final),
        notes=notes,
    )
