"""Rollout collection: n episodes per task, each in a fresh sandbox, bounded by one
semaphore. Used by ``swerl eval`` and by the trainer.

Yields ``len(tasks) * n_samples`` trajectories, ordered task by task (a group's samples
are contiguous, ``group_id`` shared, ``sample_index`` 0..n-1). A failed sandbox or a
crashed episode never cancels the others: it becomes a typed trajectory, masked only when the
attempt never acted or a control run fails too (:mod:`swerl.sandbox.control`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from swerl.agent.config import AgentConfig
from swerl.agent.episode import finish_trajectory, masked_trajectory, play_episode
from swerl.agent.policy import Policy
from swerl.agent.trajectory import Trajectory
from swerl.errors import SandboxError
from swerl.sandbox.control import run_control
from swerl.sandbox.types import TrialTimings

if TYPE_CHECKING:
    from swerl.sandbox.manager import SandboxManager
    from swerl.tasks.task_folder import Task

logger = logging.getLogger(__name__)


EventKind = Literal["started", "verifying", "finished"]


@dataclass(frozen=True)
class RolloutEvent:
    """Progress of one episode, for live displays.

    Attributes:
        kind: ``started`` (sandbox acquired), ``verifying`` (the agent is done, the tests run) or
            ``finished`` (trajectory ready).
        task_name, sample_index: which episode.
        trajectory: the result (``finished`` only).
        done, total: episodes finished so far / in this call.
    """

    kind: EventKind
    task_name: str
    sample_index: int
    done: int
    total: int
    trajectory: Trajectory | None = None


def group_id_for(task_index: int, task_name: str, prefix: str = "") -> str:
    """Group id of the samples of ``tasks[task_index]`` (unique within one collection)."""
    return f"{prefix}{task_index}:{task_name}"


async def collect_rollouts(
    tasks: list[Task],
    n_samples: int,
    policy: Policy,
    sandbox_manager: SandboxManager,
    agent_cfg: AgentConfig,
    *,
    concurrency: int,
    on_event: Callable[[RolloutEvent], None] | None = None,
    group_prefix: str = "",
    first_index: int = 0,
    skip: Collection[tuple[str, int]] = (),
    task_seed: int | None = None,
    slots: AbstractAsyncContextManager[object] | None = None,
) -> list[Trajectory]:
    """Sample ``n_samples`` episodes of every task.

    Args:
        tasks: ``swerl.tasks.Task`` objects (B prompts).
        n_samples: G episodes per task (the RLOO group size).
        policy: shared by all episodes (batching happens behind it).
        sandbox_manager: entered ``SandboxManager``; ``sandbox(task)`` is an async context
            manager yielding a started sandbox, raising ``SandboxError`` on infra failure.
        agent_cfg: protocol, limits, sampling (``agent_cfg.seed`` makes seeds per episode).
        concurrency: most episodes alive at once (>= 1), unless ``slots`` is given.
        on_event: called (in the event loop) when an episode starts and finishes.
        group_prefix: prepended to every ``group_id`` (e.g. ``step12/``) for global uniqueness.
        first_index: index of ``tasks[0]`` in the whole batch (a rank's share starts there), so
            group ids, and the episode seeds made from them, do not depend on the number of ranks.
        skip: ``(group_id, sample_index)`` of episodes not to run (a resumed eval); the others keep ids and seeds.
        task_seed: evaluation seeding (:func:`eval_episode_seed`); None: training seeding (group id based).
        slots: entered by each episode for its whole life in place of the call's own semaphore: a
            budget collections share (the pipeline's continuous admission, ``trainer/rollouts/slots.py``).

    Returns: N = B * G trajectories (minus the skipped), groups contiguous, in task order then sample order.
    """
    if n_samples < 1 or concurrency < 1:
        raise ValueError(f"n_samples ({n_samples}) and concurrency ({concurrency}) must be >= 1")
    semaphore = asyncio.Semaphore(concurrency) if slots is None else slots
    todo = [(ti, task, si) for ti, task in enumerate(tasks, start=first_index) for si in range(n_samples)
            if (group_id_for(ti, task.name, group_prefix), si) not in skip]
    total, done = len(todo), 0

    def emit(kind: EventKind, task: Task, index: int, traj: Trajectory | None = None) -> None:
        if on_event is not None:
            on_event(RolloutEvent(kind, task.name, index, done, total, traj))

    async def one(task_index: int, task: Task, sample_index: int) -> Trajectory:
        nonlocal done
        group_id = group_id_for(task_index, task.name, group_prefix)
        async with semaphore:
            seed = _seed_of(agent_cfg.seed, task_seed, group_id, task.name, sample_index)
            traj = await _guarded_episode(task, sandbox_manager, policy, agent_cfg, group_id, sample_index, seed,
                                          lambda kind: emit(kind, task, sample_index))
            traj.seed = seed
        done += 1
        emit("finished", task, sample_index, traj)
        return traj

    return list(await asyncio.gather(*(one(ti, task, si) for ti, task, si in todo)))


async def _guarded_episode(task: Task, manager: SandboxManager, policy: Policy, cfg: AgentConfig, group_id: str,
                           sample_index: int, seed: int | None, on_phase: Callable[[EventKind], None]) -> Trajectory:
    """One episode whose failures become typed trajectories, never exceptions.

    An episode whose Docker engine stopped answering runs again from the start on another engine
    (at most ``engine_retries`` times, as sandbox-test trials do); after that a control run settles
    it like any other (a missed ping alone proves nothing). An episode that read no trustworthy reward after the agent acted, or
    crashed, is settled by a control run once its sandbox is released (:mod:`swerl.sandbox.control`):
    ``zero`` when the control reads a reward, ``mask`` (the task flagged) when it fails too. A
    sandbox that never started is masked (the attempt never acted).
    """
    retries = manager.config.engine_retries
    engine: str | None = None
    played, lost = None, False
    try:
        for retry in range(retries + 1):
            played, lost, timings = None, False, TrialTimings()
            async with manager.sandbox(task, timings) as sandbox:
                on_phase("started")
                engine = sandbox.placement.engine
                played = await play_episode(task, sandbox, policy, cfg, seed=seed,
                                            on_verify=lambda: on_phase("verifying"))
                lost = played.verdict.needs_control and await manager.engine_lost(sandbox)
            played.state.timings_s.update(container_timings(timings))
            if not lost or retry == retries:
                break
            logger.warning("%s #%d: its engine stopped answering; running it again on another engine",
                           task.name, sample_index)
    except Exception as err:  # noqa: BLE001 - one episode's failure never sinks the batch
        if played is not None:  # played and verified; only what came after (the release, a ping) failed
            logger.warning("%s #%d: after the episode: %s: %s", task.name, sample_index, type(err).__name__, err)
        elif isinstance(err, SandboxError):  # the sandbox never started: nothing of the attempt to judge
            outcome = getattr(err, "outcome", None)
            outcome_name = str(getattr(outcome, "value", outcome) or "sandbox_error")
            logger.warning("%s #%d: sandbox failed: %s", task.name, sample_index, err)
            return masked_trajectory(task, policy, cfg, group_id=group_id, sample_index=sample_index,
                                     outcome=outcome_name, detail=str(err))
        else:  # a crash inside one episode: logged in full, then a control
            logger.exception("%s #%d: episode crashed", task.name, sample_index)
            control = await run_control(manager, task, engine)
            return masked_trajectory(task, policy, cfg, group_id=group_id, sample_index=sample_index,
                                     outcome="episode_error", detail=f"{type(err).__name__}: {err}", control=control)
    # The control runs once the episode's sandbox is released (it needs a sandbox slot of its own),
    # after the last retry too: an engine judged lost by one missed ping is no proof (the control
    # prefers a healthy engine; with none left it fails, and the episode is masked).
    control = await run_control(manager, task, engine) if played.verdict.needs_control else None
    return finish_trajectory(task, played, control, group_id=group_id, sample_index=sample_index)


def container_timings(timings: TrialTimings) -> dict[str, float]:
    """What an episode's trajectory keeps of its sandbox's start (``timings_s``): ``container_wait_s``
    (seconds from asking for the sandbox to holding its started container), ``containers_warm`` and
    ``containers_cold`` (its containers taken from a warm pool / started on demand, the clean room's
    verifier container included)."""
    return {"container_wait_s": timings.wait_s, "containers_warm": float(timings.warm_containers),
            "containers_cold": float(timings.cold_containers)}


def _seed_of(base_seed: int | None, task_seed: int | None, group_id: str, task_name: str, sample_index: int) -> int | None:
    """An episode's seed: evaluation seeding when ``task_seed`` is set, else training seeding."""
    if task_seed is not None:
        return eval_episode_seed(task_seed, task_name, sample_index)
    return _episode_seed(base_seed, group_id, sample_index)


def _episode_seed(base_seed: int | None, group_id: str, sample_index: int) -> int | None:
    """A stable per-episode seed from the config seed, the group and the sample index."""
    if base_seed is None:
        return None
    digest = hashlib.sha256(f"{base_seed}/{group_id}/{sample_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") * 1000


def eval_episode_seed(eval_seed: int, task_name: str, sample_index: int) -> int:
    """The sampling seed of sample ``sample_index`` of a task in an evaluation.

    A function of the three arguments only: not of the step, the run's training seed, the task's
    position in the set or the number of ranks. Every evaluation with the same ``eval_seed``
    (``eval.seed`` during training, ``swerl eval --seed``) samples task t's sample i with the same
    seed, so two policies evaluated on one pinned set differ only by their weights: a paired
    design (common random numbers), which ``swerl compare`` checks before pairing.

    Returns: a non-negative int, a multiple of 1000 (turn t of the episode samples with seed + t).
    """
    digest = hashlib.sha256(f"eval/{eval_seed}/{task_name}/{sample_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") * 1000
