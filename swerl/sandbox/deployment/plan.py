"""Warm pools sized from the step's plan: how many containers of each spec a step takes at once on
each engine, so that they are started before the step asks for them.

A step runs ``episodes`` episodes at once over its tasks. Each healthy engine takes its share of
them by its slots (at most its slots); each container spec (image, limits, network) its share of
those by the tasks that use it, the clean room's verifier container counted with the agent's
(``SandboxManager.container_specs``). The pools then fill in the background within the engine's create pace
and refill after every take, so between two steps they fill again for the next one.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import TYPE_CHECKING

from swerl.errors import SandboxError, TaskError
from swerl.sandbox.deployment.engine import MAX_WARM_POOLS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from swerl.sandbox.deployment.engine import Engine
    from swerl.sandbox.deployment.pool import ContainerSpec
    from swerl.tasks.task_folder import Task

    SpecsOf = Callable[[Task, Engine], Awaitable[list[tuple[ContainerSpec, int]]]]

log = logging.getLogger(__name__)
# Tasks a plan looks at (evenly spaced over those it is given): enough to find the images a step
# shares, few enough that planning over a whole dataset builds no image the first steps do not need.
MAX_PLAN_TASKS = 16


async def plan_pools(engines: list[Engine], tasks: list[Task], episodes: int, specs_of: SpecsOf,
                     trials: int | None = None) -> int:
    """Size the warm pools of ``engines`` (the healthy ones) for ``episodes`` episodes at once over
    ``tasks`` (each task as often) and start filling them.

    ``trials``: the trials the planned collection runs over ``tasks`` in all (its tasks times
    samples); each pool then starts no more containers than its share of them takes
    (``WarmPool.plan``'s ``expected``: the engine's share of the trials by slots, the spec's by the
    tasks that use it, times the containers per trial). None (a dataset-wide plan): pools refill
    for good.

    ``specs_of(task, engine)``: the containers a trial of the task takes there, as (spec, how many
    of that spec) (``SandboxManager.container_specs``: it builds or finds the images). A spec that
    fewer than 2 of an engine's episodes use gets no warm containers (a one-off image would waste
    them), and an engine plans at most :data:`MAX_WARM_POOLS` specs, the most used. Only
    :data:`MAX_PLAN_TASKS` tasks are looked at; a task whose image cannot be had is left out (its
    trials report the error). ``engines[].warm`` and ``sandbox.warm_pool_size`` still fix a pool's
    size when set.

    Returns:
        the idle containers the planned pools keep, all engines together.
    """
    if not tasks or episodes < 1 or not engines:
        return 0
    sample = tasks[::max(1, len(tasks) // MAX_PLAN_TASKS)][:MAX_PLAN_TASKS]
    all_slots, kept = sum(e.slots for e in engines), 0
    for engine in engines:
        share = min(engine.slots, math.ceil(episodes * engine.slots / all_slots))
        engine_trials = None if trials is None else math.ceil(trials * engine.slots / all_slots)
        uses: Counter[tuple[ContainerSpec, int]] = Counter()
        for task in sample:
            try:
                uses.update(await specs_of(task, engine))
            except (SandboxError, TaskError) as err:
                log.debug("the warm pool plan leaves out %s: %s", task.name, err)
        for (spec, per_trial), count in reversed(uses.most_common(MAX_WARM_POOLS)):
            planned = min(share, math.ceil(share * count / len(sample)))
            expected = None if engine_trials is None else math.ceil(engine_trials * count / len(sample)) * per_trial
            if planned >= 2:
                kept += engine.plan(spec, planned, per_trial, expected).target
    return kept
