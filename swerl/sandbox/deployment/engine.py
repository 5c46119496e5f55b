"""One Docker engine of the fleet and what swerl keeps on it: its client and caller, the reaper
of its trial containers, its warm pools, the task images built on it, and its health.

Every Docker call of a trial goes through the engine the trial was placed on (its
:class:`~swerl.sandbox.docker_api.DockerCaller` carries the engine's endpoint, so the exec and
attach streams reach the same engine as the SDK calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swerl.errors import EnvironmentProblem, SandboxError
from swerl.sandbox.docker_api import LABEL_PID, LABEL_RUN, DockerCaller, connect, engine_url
from swerl.sandbox.deployment.gc import collect_garbage
from swerl.sandbox.deployment.admission import DiskAdmission
from swerl.sandbox.deployment.limits import DiskWatch, FreeDisk, check_free_disk, data_root, free_disk
from swerl.sandbox.deployment.pool import ContainerSpec, Reaper, WarmPool
from swerl.sandbox.deployment.ramp import CreatePace
from swerl.sandbox.endpoint import Endpoint

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.engine_config import EngineConfig
    from swerl.sandbox.types import SandboxConfig

log = logging.getLogger(__name__)

# Warm pools kept at once per engine (one per image + limits); older ones are drained.
MAX_WARM_POOLS = 4
# Default idle containers per pool (SandboxConfig.warm_pool_size overrides).
DEFAULT_MAX_WARM = 4
# Deadline of a health probe (a ping), seconds.
PING_TIMEOUT_S = 5.0


def check_runtime(client: docker.DockerClient, runtime: str, url: str) -> None:
    """Raise unless the engine has the OCI runtime ``runtime`` registered (``docker info`` Runtimes).

    Raises:
        EnvironmentProblem: (exit 3) naming the engine, the runtime and those it has.
    """
    runtimes = sorted((client.info().get("Runtimes") or {}).keys())
    if runtime not in runtimes:
        raise EnvironmentProblem(
            f"sandbox.runtime (--runtime): the engine {url} has no OCI runtime {runtime!r} (it has: {', '.join(runtimes) or 'none'}); "
            f"register it (dockerd --add-runtime {runtime}=/path/to/{runtime}) or choose one it has"
        )


@dataclass
class OpenEngine:
    """The handles of an open engine (:meth:`Engine.open` makes them, :meth:`Engine.close` ends them).

    Attributes:
        client: the Docker SDK client.
        call: the caller every blocking Docker call of a trial goes through.
        reaper: the background remover of the engine's trial containers.
        disk_watch: the watcher of the trials' disk use; None when ``SandboxConfig.disk_poll_s`` is.
    """

    client: docker.DockerClient
    call: DockerCaller
    reaper: Reaper
    disk_watch: DiskWatch | None


class Engine:
    """One engine: open with :meth:`open`, place trials while :attr:`healthy`, :meth:`close` at the end.

    Attributes:
        url: the engine URL (``unix:///...``, ``tcp://...``).
        slots: most sandboxes alive at once here; ``in_use`` counts those placed now.
        pace: this engine's create turns (``max_creates_per_s``), shared by trials and warm pools.
        runtime: OCI runtime of its trial containers (``EngineConfig.runtime``, else
            ``SandboxConfig.runtime``); None = the engine's default.
        healthy: False while quarantined (it stopped answering); no trial is placed on it then.
        trials: trials placed here so far (for the balance of a run).
        images: task image tag per environment folder, built on this engine.
        base_ids: local image id per ``FROM`` ref seen on this engine (looked up once a run).
        pruned: whether the task image cache was pruned to its budget here in this run.
        admission: the disk reservations of the trials placed here (:mod:`~swerl.sandbox.deployment.admission`).
        opened: its handles while open (:class:`OpenEngine`).
    """

    def __init__(self, config: EngineConfig, sandbox: SandboxConfig, labels: dict[str, str]) -> None:
        self.config, self.sandbox = config, sandbox
        self.url = engine_url(config.url)
        self.slots = config.slots or sandbox.concurrency
        self.runtime = config.runtime or sandbox.runtime
        self.pace = CreatePace(config.max_creates_per_s)
        self.in_use = 0
        self.trials = 0
        self.healthy = False
        self.last_error = ""
        self.labels = labels
        self._open: OpenEngine | None = None
        self.pools: dict[ContainerSpec, WarmPool] = {}
        self.images: dict[str, str] = {}
        self.base_ids: dict[str, str] = {}
        self.pruned = False
        self.image_locks: dict[str, asyncio.Lock] = {}
        self.admission = DiskAdmission(self.url, self.free_disk, sandbox.admission_wait_s)
        self._data_root: str | None = None
        self._evictions: set[asyncio.Task[None]] = set()

    @property
    def opened(self) -> OpenEngine:
        """The handles of the open engine.

        Raises:
            SandboxError: the engine is not open (before :meth:`open`, after a failed one or :meth:`close`).
        """
        if self._open is None:
            raise SandboxError(f"engine {self.url} is not open")
        return self._open

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` has not run since."""
        return self._open is not None

    @property
    def free(self) -> int:
        """Slots not in use (negative never)."""
        return max(self.slots - self.in_use, 0)

    async def open(self) -> OpenEngine:
        """Connect, check the free disk of the data root, and remove dead runs' containers.

        Returns:
            the engine's handles (also :attr:`opened` until :meth:`close`).

        Raises:
            EnvironmentProblem: (exit 3) the engine does not answer or its disk is too full.
        """
        cfg = self.sandbox
        pool = 2 * self.slots + 4
        client = await asyncio.to_thread(connect, self.url, pool, cfg.docker_timeout_s, self.config.sdk_tls())
        call: DockerCaller | None = None
        try:
            endpoint = Endpoint.of(self.url, client.api.api_version, self.config.ssl_context())
            call = DockerCaller(4 * self.slots + 4, cfg.docker_timeout_s, endpoint)
            reaper = Reaper(call, client, parallel=max(2, self.slots))
            disk_watch = DiskWatch(call, client, self.labels, cfg.disk_poll_s) if cfg.disk_poll_s is not None else None
            await call(check_free_disk, client, cfg.min_free_disk_mb)
            self._data_root = await call(data_root, client)
            if self.runtime is not None:
                await call(check_runtime, client, self.runtime, self.url)
            if cfg.gc_dead_runs:
                await call(collect_garbage, client, timeout_s=cfg.drain_timeout_s)
        except BaseException:
            client.close()
            if call is not None:
                call.close()
            raise
        self._open = OpenEngine(client, call, reaper, disk_watch)
        self.healthy = True
        return self._open

    async def free_disk(self) -> FreeDisk | None:
        """What Docker's data root has free now (:func:`~swerl.sandbox.deployment.limits.free_disk`),
        measured on this host; None for an engine on another host (``tcp://``, ``ssh://``) or before
        :meth:`open`."""
        if self._data_root is None or not self.url.startswith("unix://"):
            return None
        return await asyncio.to_thread(free_disk, self._data_root)

    async def answers(self) -> bool:
        """Whether the engine answers a ping within :data:`PING_TIMEOUT_S` seconds."""
        if self._open is None:
            return False
        try:
            return bool(await asyncio.wait_for(asyncio.to_thread(self._open.client.ping), PING_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - any failure to answer means it is gone
            return False

    def warm_size(self, per_trial: int, episodes: int | None = None) -> int:
        """Idle containers a pool of this engine keeps: ``engines[].warm``, else
        ``sandbox.warm_pool_size``, else the plan's ``episodes`` on this engine (None: no plan yet,
        :data:`DEFAULT_MAX_WARM`) capped by the engine's slots, times ``per_trial``; 0 with
        ``sandbox.warm_pool`` off. The slots cap bounds the idle containers by what the engine
        runs at once anyway (each idle one holds only swerl's keeper, about a megabyte)."""
        if not self.sandbox.warm_pool:
            return 0
        size = self.config.warm if self.config.warm is not None else self.sandbox.warm_pool_size
        if size is not None:
            return size
        return min(self.slots, DEFAULT_MAX_WARM if episodes is None else episodes) * per_trial

    def pool(self, spec: ContainerSpec, per_trial: int = 1) -> WarmPool:
        """The warm pool of ``spec`` on this engine, most recently used last; pools beyond the
        few most recent are closed, so a dataset with one image per task never piles up idle
        containers. ``per_trial``: containers one trial takes (2 in the clean room)."""
        handles, cfg = self.opened, self.sandbox
        pool = self.pools.pop(spec, None)
        if pool is None:
            pool = WarmPool(handles.call, handles.client, spec, self.warm_size(per_trial), self.labels, handles.reaper,
                            cfg.start_timeout_s, docker_timeout_s=cfg.docker_timeout_s, pace=self.pace)
        self.pools[spec] = pool  # re-insert: dict order is least -> most recently used
        while len(self.pools) > MAX_WARM_POOLS:
            self._close_pool(self.pools.pop(next(iter(self.pools))))
        return pool

    def plan(self, spec: ContainerSpec, episodes: int, per_trial: int = 1, expected: int | None = None) -> WarmPool:
        """Size the pool of ``spec`` for ``episodes`` episodes that start here at once
        (:meth:`warm_size`; the largest plan so far holds) and start filling it in the background
        (within :attr:`pace`); ``expected``: the containers the planned collection takes of it
        (:meth:`WarmPool.plan`; None: refill for good)."""
        pool = self.pool(spec, per_trial)
        pool.plan(self.warm_size(per_trial, episodes), expected)
        return pool

    def _close_pool(self, pool: WarmPool) -> None:
        task = asyncio.create_task(pool.close(self.sandbox.drain_timeout_s), name="swerl-pool-evict")
        self._evictions.add(task)
        task.add_done_callback(self._evictions.discard)

    def quarantine(self, reason: str) -> None:
        """Stop placing trials here and drop the warm pools (their containers went with the engine)."""
        if self.healthy:
            log.warning("engine %s quarantined: %s", self.url, reason)
        self.healthy, self.last_error = False, reason
        while self.pools:
            self._close_pool(self.pools.popitem()[1])

    def rejoin(self) -> None:
        """Take trials again; first remove this run's stopped containers here (the engine lost
        their keepers while it was down, and the reaper's removals then failed)."""
        with contextlib.suppress(Exception):
            self._sweep_own(stopped_only=True)
        log.warning("engine %s rejoined the fleet", self.url)
        self.healthy, self.last_error = True, ""

    async def close(self) -> None:
        """Drain: close warm pools, wait for removals, sweep this run's leftovers, close the client."""
        if self._open is None:
            return
        handles, limit = self._open, self.sandbox.drain_timeout_s
        if handles.disk_watch is not None:
            await handles.disk_watch.close()
        for pool in self.pools.values():
            await pool.close(limit)
        self.pools.clear()
        if self._evictions:
            await asyncio.wait(set(self._evictions), timeout=limit)
        await handles.reaper.drain(limit)
        # Calls that timed out may still be running in worker threads (a late container create):
        # let them finish, then sweep whatever this process created under this run id.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(handles.call.close, True), limit)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(self._sweep_own), limit)
        handles.client.close()
        self._open = None
        self.healthy = False

    def _sweep_own(self, stopped_only: bool = False) -> None:
        client = self.opened.client
        flt: dict[str, object] = {"label": [f"{LABEL_RUN}={self.labels[LABEL_RUN]}", f"{LABEL_PID}={self.labels[LABEL_PID]}"]}
        if stopped_only:
            flt["status"] = ["exited", "dead"]
        for container in client.containers.list(all=True, filters=flt, ignore_removed=True):
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)


def engine_lost(message: str) -> SandboxError:
    """A trial's engine stopped answering (``daemon_error``; the manager retries it elsewhere)."""
    from swerl.sandbox.types import Outcome

    return EngineLost(message, outcome=Outcome.daemon_error)


class EngineLost(SandboxError):
    """The engine of a sandbox stopped answering while it ran; ``engine`` names it. A trial that
    sees this may run again on another engine (``SandboxConfig.engine_retries``)."""
