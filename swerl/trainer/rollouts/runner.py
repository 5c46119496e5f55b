"""The generation phase of each training step, run on EVERY rank: each rank takes a contiguous
share of the step's prompts (groups stay whole on one rank), runs their episodes with its own
generator, and the trajectories are all-gathered so every rank trains on the same batch. One event
loop and one ``SandboxManager`` (warm pools survive across steps) for the whole run; in front of the
rank's generation backend an async front per :meth:`RolloutRunner.run` (one collection, or the
timing-driven producer's several batches at once; vLLM: each turn submitted as it comes; HF: batched).

Episodes run concurrently (bounded by ``concurrency``): while one episode's verifier runs in its
container, other episodes keep generating. Sandboxes are ready before they are needed: each
collection first sizes the warm pools for its episodes (``SandboxManager.plan``; :meth:`RolloutRunner.prewarm`
does so before the first step), and between collections the event loop keeps running in a
background thread (:class:`_Idle`), so the pools refill and removals go on during the update and
the weight sync. Each step's group ids are prefixed ``step{N}/`` so
that the per-episode sampling seeds differ from step to step yet are reproducible on resume.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeVar

from swerl.agent.config import AgentConfig
from swerl.agent.policy import BackendPolicy
from swerl.agent.collect import RolloutEvent, collect_rollouts
from swerl.agent.trajectory import Trajectory
from swerl.inference.backends.batcher import make_front
from swerl.sandbox.types import SandboxConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.inference.backends.base import ContinuousBackend, GenerationBackend
    from swerl.sandbox.manager import SandboxManager
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)
T = TypeVar("T")


def rank_share(num_tasks: int, step: int, rank: int, world_size: int) -> tuple[range, str]:
    """This rank's prompts of a step and the step's group-id prefix.

    Returns:
        (contiguous task indices, ``step{N}/``). Pass ``share.start`` as ``first_index`` so group
        ids (hence episode seeds) are the same on any number of ranks.
    """
    base, extra = divmod(num_tasks, world_size)
    start = rank * base + min(rank, extra)
    share = range(start, start + base + (1 if rank < extra else 0))
    return share, f"step{step}/"


def gather_trajectories(local: list[Trajectory]) -> list[Trajectory]:
    """Every rank's trajectories, concatenated in rank order (= prompt order), on every rank (over
    the gloo group with a long timeout: the slowest rank's episodes may take hours)."""
    from swerl.trainer.distributed import all_gather_objects

    return [traj for box in all_gather_objects(local) for traj in box]


class RolloutRunner:
    """Collects trajectories step after step; use as a context manager (it owns Docker resources).

    Args:
        backend: this rank's generation backend (``HFBackend`` on the live policy, a vLLM engine or pool).
        tokenizer: the policy's tokenizer (chat template).
        sandbox_cfg: settings of the run's sandbox manager.
        agent_cfg: protocol, limits, sampling; ``seed`` None is replaced by ``seed``.
        concurrency: most episodes in flight.
        max_batch_size, batch_wait_s: async batcher settings (prompts per call, seconds).
        seed: base sampling seed when ``agent_cfg.seed`` is None (None: unseeded episodes).
    """

    def __init__(
        self,
        backend: GenerationBackend | ContinuousBackend,
        tokenizer: PreTrainedTokenizerBase,
        sandbox_cfg: SandboxConfig,
        agent_cfg: AgentConfig,
        concurrency: int,
        max_batch_size: int,
        batch_wait_s: float,
        seed: int | None,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.sandbox_cfg = sandbox_cfg
        self.agent_cfg = agent_cfg if agent_cfg.seed is not None else agent_cfg.model_copy(update={"seed": seed})
        self.concurrency = concurrency
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manager: SandboxManager | None = None
        self._collecting = False
        self._idle: _Idle | None = None

    def __enter__(self) -> "RolloutRunner":
        from swerl.sandbox.manager import SandboxManager

        self._loop = asyncio.new_event_loop()
        manager = SandboxManager(self.sandbox_cfg)
        self._manager = self._loop.run_until_complete(manager.__aenter__())
        self._idle = _Idle(self._loop)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        if self._idle is not None:
            self._idle.stop()
            self._idle = None
        try:
            # Episodes interrupted mid-step (SIGTERM, an error): cancel them so their sandboxes close.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            if self._manager is not None:
                self._loop.run_until_complete(self._manager.__aexit__(*exc))
        finally:
            self._loop.close()
            self._loop = None

    def prewarm(self, tasks: list[Task], episodes: int, trials: int | None = None) -> None:
        """Plan the warm pools for ``episodes`` episodes at once over ``tasks`` (the images are
        looked up or built now) and fill them while the caller goes on: between collections the
        loop runs in a background thread. Before the first step over the whole task set
        (``trials`` None: pools of images many tasks share refill for good); after each batch over
        the next batch's tasks, ``trials`` its tasks times samples (``SandboxManager.plan``), so
        its containers start while the trainer updates."""
        assert self._idle is not None, "RolloutRunner used outside its context"
        self._idle.stop()
        self._plan_soon(tasks, episodes, trials)
        self._idle.start()

    def _plan_soon(self, tasks: list[Task], episodes: int, trials: int | None = None) -> None:
        """Start ``SandboxManager.plan`` as a task of the loop (never raises: a plan only saves
        time; the trials report real errors), so episodes need not wait for its image look-ups."""
        assert self._loop is not None and self._manager is not None and self._idle is not None
        manager = self._manager

        async def plan() -> None:
            try:
                await manager.plan(tasks, episodes, trials)
            except Exception as err:  # noqa: BLE001 - see above
                log.warning("warm pools not planned: %s", err)

        self._idle.keep(self._loop.create_task(plan(), name="swerl-warm-plan"))

    def cancel_threadsafe(self) -> None:
        """From another thread: cancel the episodes in flight (their sandboxes close as they unwind)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def cancel_all() -> None:
            if not self._collecting:  # between collections (or while closing): nothing to cancel
                return
            for task in asyncio.all_tasks(loop):
                task.cancel()

        try:
            loop.call_soon_threadsafe(cancel_all)
        except RuntimeError:  # closed in between
            pass

    def collect(
        self,
        tasks: list[Task],
        n_samples: int,
        step: int,
        on_event: Callable[[RolloutEvent], None] | None = None,
        group_prefix: str | None = None,
        first_index: int = 0,
        task_seed: int | None = None,
    ) -> list[Trajectory]:
        """``len(tasks) * n_samples`` trajectories of this step, groups contiguous in task order.

        ``group_prefix`` (default ``step{N}/``) prefixes every group id; ``first_index`` is the
        batch index of ``tasks[0]`` (see :func:`rank_share`); ``task_seed`` seeds the episodes
        as an evaluation does (``swerl.agent.collect.eval_episode_seed``)."""
        assert self._loop is not None, "RolloutRunner used outside its context"
        prefix = f"step{step}/" if group_prefix is None else group_prefix
        if not tasks:
            return []
        return self.run(lambda collector: collector.collect(tasks, n_samples, prefix, first_index, on_event,
                                                            task_seed=task_seed))

    def run(self, main: Callable[[Collector], Awaitable[T]]) -> T:
        """Run ``main(collector)`` on the runner's event loop in this thread until it returns: every
        collection it starts (several at once, if it likes) shares one front to the backend. The
        timing-driven pipeline's producer runs its whole life in one call (continuous admission).

        Raises: whatever ``main`` raises."""
        assert self._loop is not None and self._idle is not None, "RolloutRunner used outside its context"
        self._idle.stop()
        self._collecting = True
        try:
            return self._loop.run_until_complete(self._with_front(main))
        finally:
            self._collecting = False
            self._idle.start()

    async def _with_front(self, main: Callable[[Collector], Awaitable[T]]) -> T:
        async with make_front(self.backend, self.max_batch_size, self.batch_wait_s) as batcher:
            return await main(Collector(self, BackendPolicy(batcher, self.tokenizer)))


class Collector:
    """What a coroutine run by :meth:`RolloutRunner.run` collects with: the runner's sandbox
    manager, warm pools, agent settings and one policy on the front it opened."""

    def __init__(self, runner: RolloutRunner, policy: BackendPolicy) -> None:
        self.runner = runner
        self.policy = policy
        self.concurrency = runner.concurrency

    async def collect(
        self, tasks: list[Task], n_samples: int, prefix: str, first_index: int = 0,
        on_event: Callable[[RolloutEvent], None] | None = None, *, task_seed: int | None = None,
        slots: AbstractAsyncContextManager[object] | None = None,
    ) -> list[Trajectory]:
        """``len(tasks) * n_samples`` trajectories, groups contiguous in task order (the arguments
        are :meth:`RolloutRunner.collect`'s; ``prefix`` is the group-id prefix). ``slots``: the
        budget the episodes share with other collections (``collect_rollouts``); None: at most
        ``concurrency`` episodes of this call at once."""
        runner = self.runner
        # Sized now, so the refills after each take keep this many ready for the next collection.
        runner._plan_soon(tasks, min(runner.concurrency, len(tasks) * n_samples), len(tasks) * n_samples)
        return await collect_rollouts(
            tasks, n_samples, self.policy, runner._manager, runner.agent_cfg,
            concurrency=runner.concurrency, on_event=on_event, group_prefix=prefix,
            first_index=first_index, task_seed=task_seed, slots=slots,
        )


class _Idle:
    """Runs ``loop`` in a background thread between collections, so its background work (warm-pool
    refills, container removals, a prewarm) goes on while the trainer updates; :meth:`stop` before
    the loop is run anywhere else (an event loop runs in one thread at a time)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread: threading.Thread | None = None
        self._kept: set[asyncio.Task[None]] = set()

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold a reference to a background task until it is done (the loop holds only weak ones)."""
        self._kept.add(task)
        task.add_done_callback(self._kept.discard)

    def start(self) -> None:
        """Run the loop in a background thread until :meth:`stop`."""
        if self._thread is None and not self._loop.is_closed():
            self._thread = threading.Thread(target=self._loop.run_forever, name="swerl-sandbox-idle", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the loop's background run and wait for it (returns at once when it is not running)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        thread.join()
