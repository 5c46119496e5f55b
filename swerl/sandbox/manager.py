"""The process-wide owner of sandboxes: Docker client, image cache, warm pools, concurrency.

``async with SandboxManager(config) as mgr`` connects once, checks the free disk of Docker's
data root, removes what dead runs left, and on exit drains: warm containers and trial
containers are removed, and a final sweep by this run's labels catches anything a timed-out
call created late. While a trial runs, a watcher bounds its disk use (:mod:`swerl.sandbox.limits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.cleanroom import verification_mode
from swerl.sandbox.docker_api import LABEL_PID, LABEL_RUN, LABEL_TASK, DockerCaller, connect, sandbox_error
from swerl.sandbox.gc import collect_garbage, owner_labels
from swerl.sandbox.image_cache import prune_task_images, record_use
from swerl.sandbox.images import ensure_task_image
from swerl.sandbox.keeper import KeeperChannel
from swerl.sandbox.limits import check_free_disk, watch_disk
from swerl.sandbox.models import Outcome, SandboxConfig, TrialRecord, TrialTimings
from swerl.sandbox.pool import ContainerSpec, Reaper, WarmPool
from swerl.sandbox.sandbox import Sandbox

if TYPE_CHECKING:
    import docker

    from swerl.tasks.models import Task

log = logging.getLogger(__name__)


# Warm pools kept at once (one per image + limits); older ones are drained.
MAX_WARM_POOLS = 4
# Default idle containers per pool (SandboxConfig.warm_pool_size overrides).
DEFAULT_MAX_WARM = 4


def new_run_id() -> str:
    """A fresh run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def outcome_of(err: BaseException) -> Outcome:
    """The trial outcome a sandbox failure maps to (``daemon_error`` unless it says otherwise)."""
    return getattr(err, "outcome", None) or Outcome.daemon_error


class SandboxManager:
    """Hands out one fresh, isolated :class:`Sandbox` per trial, at most ``concurrency`` at once.

    Args:
        config: see :class:`SandboxConfig`.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.run_id = self.config.run_id or new_run_id()
        self.client: docker.DockerClient | None = None
        self._call: DockerCaller | None = None
        self._slots = asyncio.Semaphore(self.config.concurrency)
        self._pools: dict[ContainerSpec, WarmPool] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._images: dict[str, str] = {}
        self._reaper: Reaper | None = None
        self._labels: dict[str, str] = {}
        self._evictions: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SandboxManager:
        """Connect, check free disk and gc dead runs.

        Raises:
            EnvironmentProblem: (exit 3) Docker is unreachable, or its data root has less free
                space than ``min_free_disk_mb``.
        """
        workers = 4 * self.config.concurrency + 4
        self._call = DockerCaller(workers, self.config.docker_timeout_s)
        pool = 2 * self.config.concurrency + 4
        self.client = await asyncio.to_thread(
            connect, self.config.docker_base_url, pool, self.config.docker_timeout_s
        )
        self._reaper = Reaper(self._call, self.client, parallel=max(2, self.config.concurrency))
        self._labels = owner_labels(self.run_id)
        try:
            await self._call(check_free_disk, self.client, self.config.min_free_disk_mb)
        except BaseException:
            self.client.close()
            self._call.close()
            self.client = None
            raise
        if self.config.gc_dead_runs:
            await self._call(collect_garbage, self.client, timeout_s=self.config.drain_timeout_s)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.close())

    async def close(self) -> None:
        """Drain: close warm pools, wait for removals, sweep this run's leftovers, close the client."""
        if self.client is None or self._call is None or self._reaper is None:
            return
        limit = self.config.drain_timeout_s
        for pool in self._pools.values():
            await pool.close(limit)
        if self._evictions:
            await asyncio.wait(set(self._evictions), timeout=limit)
        await self._reaper.drain(limit)
        # Calls that timed out may still be running in worker threads (a late container create):
        # let them finish, then sweep whatever this process created under this run id.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(self._call.close, True), limit)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(self._sweep_own), limit)
        self.client.close()
        self.client = None

    def _sweep_own(self) -> None:
        assert self.client is not None
        flt = {"label": [f"{LABEL_RUN}={self.run_id}", f"{LABEL_PID}={self._labels[LABEL_PID]}"]}
        for container in self.client.containers.list(all=True, filters=flt, ignore_removed=True):
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)

    # --- images and containers ---------------------------------------------------

    async def image_for(self, task: Task) -> str:
        """The task's image: ``[environment] docker_image``, or ``environment/`` built (cached).

        Raises:
            TaskError: bad environment folder. SandboxError: build_error.
        """
        env = task.config.environment
        if env.docker_image:
            return env.docker_image
        key = str(task.environment_dir.resolve())
        if key in self._images:
            return self._images[key]
        from swerl.sandbox.images import task_image_tag

        lock = self._image_locks.setdefault(task_image_tag(task.environment_dir), asyncio.Lock())
        async with lock:
            assert self._call is not None and self.client is not None
            tag = await ensure_task_image(
                self._call, self.client, task.environment_dir, env.build_timeout_sec, allow_network=False
            )
        self._images[key] = tag
        await asyncio.to_thread(record_use, tag)
        if self.config.image_cache_mb is not None:
            try:
                await self._call(prune_task_images, self.client, self.config.image_cache_mb, set(self._images.values()))
            except SandboxError as err:  # a full cache is a nuisance, never a failed trial
                log.warning("image cache pruning failed: %s", err)
        return tag

    def _spec(self, task: Task, image: str) -> ContainerSpec:
        env = task.config.environment
        return ContainerSpec(
            image=image,
            cpus=env.cpus,
            memory_mb=env.memory_mb,
            pids_limit=self.config.pids_limit,
            network=bool(env.allow_internet and self.config.allow_network),
        )

    def _pool(self, spec: ContainerSpec, per_trial: int = 1) -> WarmPool:
        """The warm pool of ``spec``, most recently used last; pools beyond the few most recent
        are closed, so a dataset with one image per task never piles up idle containers.
        ``per_trial``: containers one trial takes (2 in the clean room)."""
        pool = self._pools.pop(spec, None)
        if pool is None:
            assert self._call is not None and self.client is not None and self._reaper is not None
            size = self.config.warm_pool_size
            if size is None:  # enough to stay ahead of trial starts; more would only idle
                size = min(self.config.concurrency, DEFAULT_MAX_WARM) * per_trial
            pool = WarmPool(
                self._call, self.client, spec, size if self.config.warm_pool else 0,
                self._labels, self._reaper, self.config.start_timeout_s,
                docker_timeout_s=self.config.docker_timeout_s,
            )
        self._pools[spec] = pool  # re-insert: dict order is least -> most recently used
        while len(self._pools) > MAX_WARM_POOLS:
            stale = self._pools.pop(next(iter(self._pools)))
            task = asyncio.create_task(stale.close(self.config.drain_timeout_s), name="swerl-pool-evict")
            self._evictions.add(task)
            task.add_done_callback(self._evictions.discard)
        return pool

    @contextlib.asynccontextmanager
    async def sandbox(self, task: Task, timings: TrialTimings | None = None) -> AsyncIterator[Sandbox]:
        """A fresh started sandbox for one trial; removed (in the background) on every exit path.

        Waits for a concurrency slot first. ``timings`` (optional) receives ``build_s``,
        ``start_s`` and, once the background removal ends, ``cleanup_s``.

        Raises:
            TaskError: malformed environment. SandboxError: ``.outcome`` build_error/start_error.
        """
        if self.client is None or self._call is None or self._reaper is None:
            raise SandboxError("SandboxManager is not open; use `async with SandboxManager(...)`")
        timings = timings if timings is not None else TrialTimings()
        async with self._slots:
            began = time.monotonic()
            image = await self.image_for(task)
            timings.build_s = time.monotonic() - began
            began = time.monotonic()
            labels = {**self._labels, LABEL_TASK: task.name}
            spec = self._spec(task, image)
            per_trial = 2 if verification_mode(task, self.config) == "clean_room" else 1
            container_id, keeper = await self._pool(spec, per_trial).take(task.name, labels)
            timings.start_s = time.monotonic() - began

            async def renew() -> tuple[str, KeeperChannel]:
                return await self._pool(spec, per_trial).take(task.name, labels)

            assert self._reaper is not None
            sb = Sandbox(self._call, self.client, self.config, task, container_id, keeper=keeper,
                         renew=renew, retire=self._reaper.remove)
            watcher = None
            if self.config.disk_poll_s is not None:
                watcher = asyncio.create_task(watch_disk(self._call, self.client, sb, self.config.disk_poll_s))
            try:
                yield sb
            finally:
                if watcher is not None:
                    watcher.cancel()
                await asyncio.shield(sb.close_shells())
                removal = self._reaper.remove(sb.container_id)
                removal.add_done_callback(lambda t: _record_cleanup(t, timings))

    # --- sandbox-test trials -----------------------------------------------------

    async def run_oracle(self, task: Task) -> TrialRecord:
        """Trial ``oracle``: run ``solution/solve.sh`` then verify; expected reward 1."""
        return await self._trial(task, "oracle")

    async def run_null(self, task: Task) -> TrialRecord:
        """Trial ``null``: verify an untouched sandbox; expected reward 0."""
        return await self._trial(task, "null")

    async def _trial(self, task: Task, attempt: str) -> TrialRecord:
        timings = TrialTimings()
        try:
            async with self.sandbox(task, timings) as sb:
                began = time.monotonic()
                agent_note = ""
                if attempt == "oracle":
                    result = await sb.run_solution()
                    if result.timed_out or result.exit_code != 0:
                        agent_note = f"solve.sh exit {result.exit_code}{' (timed out)' if result.timed_out else ''}; "
                timings.agent_s = time.monotonic() - began
                began = time.monotonic()
                verdict = await sb.verify()
                timings.verify_s = time.monotonic() - began
        except SandboxError as err:
            outcome = outcome_of(err)
            return TrialRecord(
                task=task.name, attempt=attempt, outcome=outcome, failure_class=outcome.failure_class,
                detail=str(err), timings=timings,
            )
        return TrialRecord(
            task=task.name, attempt=attempt, outcome=verdict.outcome, reward=verdict.reward,
            failure_class=verdict.failure_class, detail=(agent_note + verdict.detail).strip("; "),
            verification=verdict.verification, timings=timings,
        )


def _record_cleanup(task: asyncio.Task[float], timings: TrialTimings) -> None:
    if not task.cancelled() and task.exception() is None:
        timings.cleanup_s = task.result()


__all__ = ["SandboxManager", "new_run_id", "outcome_of", "sandbox_error"]
