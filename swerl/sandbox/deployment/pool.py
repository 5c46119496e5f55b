"""Containers for trials: how one is created, and a warm pool that starts them ahead of use.

Every trial still gets its own fresh container (never reused); the pool only moves
create+start off the critical path, and :class:`Reaper` moves removal off it too. Both keep
track of every container id they own and drain on exit; the ``swerl.run`` / ``swerl.pid``
labels let the next start-up (or ``swerl sandbox gc``) remove whatever a ``kill -9`` left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import docker.errors
from pydantic import BaseModel, ConfigDict

from swerl.errors import SandboxError
from swerl.sandbox.docker_api import LABEL_POOL, LABEL_TASK
from swerl.sandbox.deployment.ramp import CreatePace
from swerl.sandbox.runtime.keeper import KeeperChannel, keeper_script_args
from swerl.sandbox.types import Outcome, TrialTimings

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller

log = logging.getLogger(__name__)
# Seconds a removal whose call timed out is followed until the engine has removed the container
# (a container of many files takes long to remove; a control run waits for it).
GONE_WAIT_S = 120.0


class ContainerSpec(BaseModel):
    """What a trial container looks like; equal specs share one warm pool."""

    model_config = ConfigDict(frozen=True)

    image: str
    cpus: float
    memory_mb: int
    pids_limit: int
    network: bool
    workdir: str | None = None
    runtime: str | None = None  # OCI runtime; None = the engine's default

    def key(self) -> str:
        """Short, label-safe identity of the spec."""
        net = "net" if self.network else "nonet"
        runtime = f"|{self.runtime}" if self.runtime else ""
        return f"{self.image}|{self.cpus:g}c|{self.memory_mb}m|{self.pids_limit}p|{net}{runtime}"


def create_container(
    client: docker.DockerClient, spec: ContainerSpec, labels: dict[str, str], name: str | None = None
) -> str:
    """Create (not start) one isolated container (blocking); returns its id.

    Isolation: no network unless ``spec.network``, CPU/memory (no swap)/pids limits,
    ``cap_drop=ALL``, ``no-new-privileges``. PID 1 is swerl's keeper (the image's entrypoint
    is overridden; see :mod:`swerl.sandbox.runtime.keeper`): it runs commands sent on its stdin,
    survives ``kill -KILL -1`` from inside (the verifier's sweep of leftover processes) and
    reaps orphans. docker-py sets ``StdinOnce`` with ``stdin_open`` (not detached): the
    keeper's stdin closes when swerl's attach does.
    """
    api = client.api
    host_config = api.create_host_config(
        network_mode="bridge" if spec.network else "none",
        nano_cpus=int(spec.cpus * 1e9),
        mem_limit=f"{spec.memory_mb}m",
        memswap_limit=f"{spec.memory_mb}m",
        pids_limit=spec.pids_limit,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        # Output travels on the attach/exec streams; a json-file copy of it would only cost CPU and disk.
        log_config={"type": "none", "config": {}},
        runtime=spec.runtime,
    )
    created = api.create_container(
        spec.image, entrypoint=keeper_script_args(), command=[], labels=labels, name=name, stdin_open=True,
        host_config=host_config, working_dir=spec.workdir, network_disabled=not spec.network,
    )
    return created["Id"]


async def launch(
    call: DockerCaller, client: docker.DockerClient, spec: ContainerSpec, labels: dict[str, str],
    timeout_s: float, docker_timeout_s: float, pace: CreatePace | None = None,
) -> tuple[str, KeeperChannel]:
    """Create a container, attach to its keeper, then start it: the attach precedes the start,
    so a running trial container always has swerl's connection on its stdin and stops when it
    closes (see :mod:`swerl.sandbox.runtime.keeper`). ``pace``: the engine's create turns
    (``engines[].max_creates_per_s``), waited for before the create.

    Returns:
        (container id, the keeper channel).

    Raises:
        SandboxError: create/attach/start failed or exceeded ``timeout_s`` (the container is removed).
    """
    if pace is not None:
        await pace.turn()
    container_id = await call(create_container, client, spec, labels, timeout_s=timeout_s)
    channel: KeeperChannel | None = None
    try:
        channel = await KeeperChannel.attach(call.endpoint, container_id, docker_timeout_s)
        await call(client.api.start, container_id, timeout_s=timeout_s)
    except BaseException:
        if channel is not None:
            channel.close()
        with contextlib.suppress(Exception):
            await call(client.api.remove_container, container_id, force=True, timeout_s=timeout_s)
        raise
    return container_id, channel


class Reaper:
    """Removes containers in the background (off the trial's critical path), at most
    ``parallel`` at once; :meth:`drain` waits for all of them."""

    def __init__(self, call: DockerCaller, client: docker.DockerClient, parallel: int = 2) -> None:
        self._call, self._client = call, client
        self._slots = asyncio.Semaphore(parallel)
        self._tasks: set[asyncio.Task[float]] = set()

    def remove(self, container_id: str) -> asyncio.Task[float]:
        """Schedule removal; the task's result is the seconds it took."""
        task = asyncio.create_task(self._remove(container_id), name=f"swerl-remove-{container_id[:12]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _remove(self, container_id: str) -> float:
        """Remove the container; a call that timed out is followed until the container is gone
        (the engine goes on removing it), at most :data:`GONE_WAIT_S` more. Never raises."""
        async with self._slots:
            began = time.monotonic()
            try:
                await self._call(self._client.api.remove_container, container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except SandboxError as err:  # left for gc; never fails the trial
                if not await self._gone(container_id, began + GONE_WAIT_S):
                    log.warning("could not remove container %s: %s", container_id[:12], err)
            return time.monotonic() - began

    async def _gone(self, container_id: str, deadline: float) -> bool:
        """Whether the container is gone by ``deadline`` (monotonic seconds), asked every second
        while the engine answers (an engine that does not is not waited for)."""
        while True:
            try:
                await self._call(self._client.api.inspect_container, container_id)
            except docker.errors.NotFound:
                return True
            except SandboxError:
                return False
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(1.0)

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for every scheduled removal."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)


class WarmPool:
    """Started, never-used containers of one :class:`ContainerSpec`, refilled in the background.

    A planned pool (:meth:`plan`: its size comes from the step's episodes) fills at once; an
    unplanned one once its spec has been taken twice (a one-off image would waste its warm
    containers). Then every take starts a refill in the background up to ``size`` idle
    containers, at most ``parallel_starts`` at once and within the engine's create pace, so the
    pool is full again when the next step starts (its first ``size`` trials start at once, the
    rest wait for the engine's create turns). A warm container is as pristine as a fresh one: it
    was started from the image and never given a command.

    A plan may name the containers its collection will take (``expected``): the pool then never
    holds more idle or starting containers than the planned takes not yet made (:attr:`owed`), so
    a task with an image of its own (a generated or mined task: one image per task) gets exactly
    the containers its trials take, none started only to be removed unused when the next step's
    tasks bring other images. A pool planned without it (a dataset-wide plan: an image many tasks
    share), or never planned, refills to ``size`` after every take for as long as it lives.

    Args:
        size: idle containers to keep ready; 0 disables pre-starting (create on demand).
        labels: owner labels (run, pid) put on every container.
    """

    def __init__(
        self,
        call: DockerCaller,
        client: docker.DockerClient,
        spec: ContainerSpec,
        size: int,
        labels: dict[str, str],
        reaper: Reaper,
        start_timeout_s: float,
        parallel_starts: int = 2,
        docker_timeout_s: float = 60.0,
        pace: CreatePace | None = None,
    ) -> None:
        self._call, self._client, self.spec, self.size = call, client, spec, size
        self._labels = {**labels, LABEL_POOL: spec.key()[:200], LABEL_TASK: "(warm pool)"}
        self._reaper = reaper
        self._start_timeout_s = start_timeout_s
        self._docker_timeout_s = docker_timeout_s
        self._pace = pace
        self._ready: list[tuple[str, KeeperChannel]] = []
        self._filling: set[asyncio.Task[None]] = set()
        self._starts = asyncio.Semaphore(parallel_starts)
        self._closed = False
        self.planned = False
        self.owed: int | None = None  # planned takes not yet made; None: refill to size for good
        self.takes = 0
        self.last_error: SandboxError | None = None

    @property
    def idle(self) -> int:
        """Started containers ready to take now."""
        return len(self._ready)

    @property
    def target(self) -> int:
        """Idle and starting containers the pool fills to: ``size``, or fewer when a plan's takes
        still owed (:attr:`owed`) are fewer."""
        return self.size if self.owed is None else min(self.size, self.owed)

    def plan(self, size: int, expected: int | None = None) -> None:
        """Keep at least ``size`` idle containers from now on (a collection's plan) and start
        filling to it in the background. A smaller plan keeps the larger size: a small extra round
        of dynamic sampling must not leave the next step's first round with a short pool.

        Args:
            expected: containers the planned collection takes of this spec; the pool then starts
                no more than the takes still owed (the largest plan not yet taken: a collection
                planned ahead and again when it starts owes them once). None (a dataset-wide plan)
                makes the pool refill to ``size`` for good.
        """
        self.size = max(self.size, size) if self.planned else size
        if expected is None or (self.planned and self.owed is None):
            self.owed = None
        else:
            self.owed = max(self.owed or 0, expected)
        self.planned = True
        self._refill()

    async def take(
        self, task_name: str, labels: dict[str, str], timings: TrialTimings | None = None,
    ) -> tuple[str, KeeperChannel]:
        """A started container for one trial and its keeper channel: a warm one if ready, else
        one started now. ``timings`` (optional) counts it in ``warm_containers`` or ``cold_containers``.

        Raises:
            SandboxError: ``outcome`` start_error when the container cannot be created/started.
        """
        if self._closed:
            raise SandboxError("the sandbox manager is closed", outcome=Outcome.start_error)
        self.takes += 1
        if self.owed is not None:
            self.owed = max(0, self.owed - 1)
        ready = self._ready.pop(0) if self._ready else None
        self._refill()
        if timings is not None:
            timings.warm_containers += ready is not None
            timings.cold_containers += ready is None
        if ready is not None:
            return ready
        return await self._start({**labels, LABEL_TASK: task_name})

    def _refill(self) -> None:
        # Pre-start only for a planned spec or one seen twice: a one-off image would waste them.
        if self.takes < 2 and not self.planned:
            return
        while not self._closed and len(self._ready) + len(self._filling) < self.target:
            task = asyncio.create_task(self._fill_one(), name="swerl-warm-pool")
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _fill_one(self) -> None:
        try:
            async with self._starts:
                ready = await self._start(self._labels)
        except SandboxError as err:
            self.last_error = err  # the next take() starts on demand and reports the real error
            log.debug("warm pool start failed: %s", err)
            return
        if self._closed:
            ready[1].close()
            self._reaper.remove(ready[0])
        else:
            self._ready.append(ready)

    async def _start(self, labels: dict[str, str]) -> tuple[str, KeeperChannel]:
        try:
            return await launch(
                self._call, self._client, self.spec, labels, self._start_timeout_s, self._docker_timeout_s, self._pace
            )
        except (SandboxError, docker.errors.DockerException) as err:
            raise SandboxError(f"container start failed ({self.spec.image}): {err}", outcome=Outcome.start_error) from err

    async def close(self, timeout_s: float) -> None:
        """Stop refilling, wait for starts in flight, and hand every idle container to the reaper."""
        self._closed = True
        if self._filling:
            await asyncio.wait(set(self._filling), timeout=timeout_s)
        for container_id, channel in self._ready:
            channel.close()
            self._reaper.remove(container_id)
        self._ready.clear()
