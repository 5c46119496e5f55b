"""The generation phase of each training step, run on rank 0: one event loop, one
``SandboxManager`` (warm pools survive across steps) and an async batcher in front of the
generation backend, for the whole run.

Episodes run concurrently (bounded by ``concurrency``): while one episode's verifier runs in its
container, other episodes keep generating. Each step's group ids are prefixed ``step{N}/`` so
that the per-episode sampling seeds differ from step to step yet are reproducible on resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from swerl.agent.config import AgentConfig
from swerl.agent.policy import BackendPolicy
from swerl.agent.rollout import RolloutEvent, collect_rollouts
from swerl.agent.trajectory import Trajectory
from swerl.inference.batcher import AsyncBatcher
from swerl.sandbox.models import SandboxConfig

log = logging.getLogger(__name__)


class RolloutRunner:
    """Collects trajectories step after step; use as a context manager (it owns Docker resources).

    Args:
        backend: generation backend (``HFBackend`` on the live policy, or ``VLLMBackend``).
        tokenizer: the policy's tokenizer (chat template).
        sandbox_cfg: settings of the run's sandbox manager.
        agent_cfg: protocol, limits, sampling; ``seed`` None is replaced by ``seed``.
        concurrency: most episodes in flight.
        max_batch_size, batch_wait_s: async batcher settings (prompts per call, seconds).
        seed: base sampling seed when ``agent_cfg.seed`` is None.
    """

    def __init__(
        self,
        backend: Any,
        tokenizer: Any,
        sandbox_cfg: SandboxConfig,
        agent_cfg: AgentConfig,
        concurrency: int,
        max_batch_size: int,
        batch_wait_s: float,
        seed: int,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.sandbox_cfg = sandbox_cfg
        self.agent_cfg = agent_cfg if agent_cfg.seed is not None else agent_cfg.model_copy(update={"seed": seed})
        self.concurrency = concurrency
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manager: Any = None

    def __enter__(self) -> "RolloutRunner":
        from swerl.sandbox.manager import SandboxManager

        self._loop = asyncio.new_event_loop()
        manager = SandboxManager(self.sandbox_cfg)
        self._manager = self._loop.run_until_complete(manager.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
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

    def collect(
        self, tasks: list[Any], n_samples: int, step: int, on_event: Callable[[RolloutEvent], None] | None = None
    ) -> list[Trajectory]:
        """``len(tasks) * n_samples`` trajectories of this step, groups contiguous in task order."""
        assert self._loop is not None, "RolloutRunner used outside its context"
        return self._loop.run_until_complete(self._collect(tasks, n_samples, step, on_event))

    async def _collect(
        self, tasks: list[Any], n_samples: int, step: int, on_event: Callable[[RolloutEvent], None] | None
    ) -> list[Trajectory]:
        async with AsyncBatcher(self.backend, self.max_batch_size, self.batch_wait_s) as batcher:
            policy = BackendPolicy(batcher, self.tokenizer)
            return await collect_rollouts(
                tasks, n_samples, policy, self._manager, self.agent_cfg,
                concurrency=self.concurrency, on_event=on_event, group_prefix=f"step{step}/",
            )
