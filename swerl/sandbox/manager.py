"""The process-wide owner of sandboxes: the fleet of Docker engines, image caches, warm pools,
concurrency, and retries of trials whose engine stopped answering.

``async with SandboxManager(config) as mgr`` opens every engine of ``config.engines`` (one
local engine by default): each is connected, its data root's free disk checked, and what dead
runs left on it removed. On exit every engine drains: warm containers and trial containers are
removed, and a final sweep by this run's labels catches anything a timed-out call created late.
While a trial runs, a watcher bounds its disk use (:mod:`swerl.sandbox.deployment.limits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.network import Phase, granted, network_problem
from swerl.sandbox.runtime.cleanroom import verification_mode
from swerl.sandbox.runtime.healthcheck import wait_healthy
from swerl.sandbox.deployment.engine import DEFAULT_MAX_WARM, MAX_WARM_POOLS, Engine, EngineLost
from swerl.sandbox.deployment.fleet import Fleet
from swerl.sandbox.deployment.transfer import copy_image, has_image
from swerl.sandbox.docker_api import LABEL_TASK
from swerl.sandbox.deployment.gc import owner_labels
from swerl.sandbox.deployment.image_cache import prune_task_images, record_use
from swerl.sandbox.deployment.images import ensure_task_image, from_images, task_image_tag
from swerl.sandbox.runtime.keeper import KeeperChannel
from swerl.sandbox.deployment.limits import watch_disk
from swerl.sandbox.types import Outcome, SandboxConfig, TrialRecord, TrialTimings
from swerl.sandbox.deployment.pool import ContainerSpec
from swerl.sandbox.runtime.sandbox import Sandbox

if TYPE_CHECKING:
    import docker

    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)
# Outcomes of a Docker failure: when the engine then fails a ping too, the engine is lost.
ENGINE_OUTCOMES = (Outcome.daemon_error, Outcome.start_error, Outcome.build_error)


def new_run_id() -> str:
    """A fresh run id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def outcome_of(err: BaseException) -> Outcome:
    """The trial outcome a sandbox failure maps to (``daemon_error`` unless it says otherwise)."""
    return (err.outcome if isinstance(err, SandboxError) else None) or Outcome.daemon_error


class SandboxManager:
    """Hands out one fresh, isolated :class:`Sandbox` per trial, at most ``concurrency`` at once,
    each on the engine with the most free slots.

    Args:
        config: see :class:`SandboxConfig`.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.run_id = self.config.run_id or new_run_id()
        self._slots = asyncio.Semaphore(self.config.concurrency)
        self._labels: dict[str, str] = {}
        self.fleet: Fleet | None = None

    @property
    def engines(self) -> list[Engine]:
        """The engines of the fleet, in config order (empty before the manager is open)."""
        return self.fleet.engines if self.fleet is not None else []

    @property
    def client(self) -> docker.DockerClient | None:
        """The client of the first healthy engine (None when none is)."""
        healthy = self.fleet.healthy if self.fleet is not None else []
        return healthy[0].client if healthy else None

    async def __aenter__(self) -> SandboxManager:
        """Open every engine: connect, check free disk, gc dead runs.

        Raises:
            EnvironmentProblem: (exit 3) no engine is reachable with enough free disk
                (``min_free_disk_mb``); engines that fail while others open are quarantined.
        """
        self._labels = owner_labels(self.run_id)
        fleet = Fleet([Engine(e, self.config, self._labels) for e in self.config.engine_list()], self.config.engine_probe_s)
        await fleet.open()
        self.fleet = fleet
        log.info("sandboxes of run %s: containers labelled swerl.run=%s (swerl sandbox gc removes them after a crash)",
                 self.run_id, self.run_id)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.close())

    async def close(self) -> None:
        """Drain every engine: close warm pools, wait for removals, sweep this run's leftovers."""
        if self.fleet is not None:
            fleet, self.fleet = self.fleet, None
            await fleet.close()

    # --- images and containers ---------------------------------------------------

    async def image_for(self, task: Task, engine: Engine | None = None) -> str:
        """The task's image on ``engine`` (default: the first healthy one): ``[environment]
        docker_image``, or ``environment/`` built there (cached per engine). A ``FROM`` image
        the engine lacks is copied from a peer engine that has it.

        Raises:
            TaskError: bad environment folder. SandboxError: build_error.
        """
        env = task.config.environment
        if env.docker_image:
            return env.docker_image
        return await self._built_image(task.environment_dir, env.build_timeout_sec, self._engine(engine))

    async def verifier_image_for(self, task: Task, engine: Engine | None = None) -> str:
        """The image the clean room's tests run in (:attr:`Task.verifier_image`): a separate
        verifier's ``docker_image``, or its ``tests/Dockerfile`` built with ``tests/`` as the
        context (cached like a task image), else the task image.

        Raises:
            TaskError: bad tests folder. SandboxError: build_error.
        """
        source = task.verifier_image
        if source == "task_image":
            return await self.image_for(task, engine)
        env = task.config.verifier_environment
        if source == "docker_image":
            assert env.docker_image is not None
            return env.docker_image
        return await self._built_image(task.tests_dir, env.build_timeout_sec, self._engine(engine))

    def _engine(self, engine: Engine | None) -> Engine:
        if engine is not None:
            return engine
        if self.fleet is None or not self.fleet.healthy:
            raise SandboxError("SandboxManager is not open; use `async with SandboxManager(...)`")
        return self.fleet.healthy[0]

    async def _built_image(self, folder: Path, build_timeout_s: float, engine: Engine) -> str:
        """``folder`` (holding a Dockerfile) built on ``engine`` once per run, cached by content."""
        key = str(folder.resolve())
        if key in engine.images:
            return engine.images[key]
        lock = engine.image_locks.setdefault(task_image_tag(folder), asyncio.Lock())
        async with lock:
            assert engine.call is not None and engine.client is not None
            await self._bring_bases(folder / "Dockerfile", build_timeout_s, engine)
            tag, built = await ensure_task_image(
                engine.call, engine.client, folder, build_timeout_s, allow_network=False, known_ids=engine.base_ids,
            )
        first_use = tag not in engine.images.values()
        engine.images[key] = tag
        if first_use:  # many task folders share one image (e.g. every HumanEval task): note it once
            await asyncio.to_thread(record_use, tag)
        # The cache grows only by a build; the first image of a run checks a budget lowered since.
        if (built or not engine.pruned) and self.config.image_cache_mb is not None:
            engine.pruned = True
            try:
                await engine.call(prune_task_images, engine.client, self.config.image_cache_mb, set(engine.images.values()))
            except SandboxError as err:  # a full cache is a nuisance, never a failed trial
                log.warning("image cache pruning failed on %s: %s", engine.url, err)
        return tag

    async def _bring_bases(self, dockerfile: Path, timeout_s: float, engine: Engine) -> None:
        """Copy the ``FROM`` images of ``dockerfile`` that ``engine`` lacks from a healthy peer engine."""
        assert engine.call is not None and engine.client is not None and self.fleet is not None
        for ref in from_images(dockerfile):
            async with engine.image_locks.setdefault(f"from:{ref}", asyncio.Lock()):  # one copy per image
                await self._bring_base(ref, timeout_s, engine)

    async def _bring_base(self, ref: str, timeout_s: float, engine: Engine) -> None:
        """Copy ``ref`` to ``engine`` from the first healthy peer that has it (if it lacks it)."""
        assert engine.call is not None and engine.client is not None and self.fleet is not None
        if ref in engine.base_ids or await engine.call(has_image, engine.client, ref):
            return
        for peer in self.fleet.healthy:
            if peer is engine or peer.call is None or not await peer.call(has_image, peer.client, ref):
                continue
            try:
                await engine.call(copy_image, peer.client, engine.client, ref, timeout_s=timeout_s)
            except Exception as err:  # noqa: BLE001 - the build then names the missing image
                log.warning("could not copy %s from %s to %s: %s", ref, peer.url, engine.url, err)
            return

    def _spec(self, task: Task, phase: Phase, image: str, engine: Engine) -> ContainerSpec:
        """The container of ``phase``: the agent's limits and network, or the verifier's (the
        separate verifier environment's limits, the verifier phase's network)."""
        env = task.config.environment if phase == "agent" else task.config.verifier_environment
        return ContainerSpec(
            runtime=engine.runtime, image=image, cpus=env.cpus, memory_mb=env.memory_mb, pids_limit=self.config.pids_limit,
            network=granted(task, phase, self.config.allow_network), workdir=env.workdir,
        )

    @contextlib.asynccontextmanager
    async def sandbox(
        self, task: Task, timings: TrialTimings | None = None, placed: list[str] | None = None
    ) -> AsyncIterator[Sandbox]:
        """A fresh started sandbox for one trial; removed (in the background) on every exit path.

        Waits for a concurrency slot and an engine slot first. A start that fails because the
        engine stopped answering moves to another engine (at most ``engine_retries`` times).
        ``timings`` (optional) receives ``build_s``, ``start_s`` and, once the background
        removal ends, ``cleanup_s``. ``placed`` (optional) receives the URL of each engine the
        trial was placed on, in order (a start that failed there included).

        Raises:
            TaskError: malformed environment. SandboxError: ``outcome`` build_error/start_error.
            EngineLost: the sandbox's engine stopped answering while the caller used it (the
                caller may run the trial again: another engine takes it).
        """
        if self.fleet is None:
            raise SandboxError("SandboxManager is not open; use `async with SandboxManager(...)`")
        timings = timings if timings is not None else TrialTimings()
        async with self._slots:
            for moves in range(self.config.engine_retries + 1):
                async with self.fleet.slot() as engine:
                    if placed is not None:
                        placed.append(engine.url)
                    try:
                        sb = await self._start(task, engine, timings)
                    except SandboxError as err:
                        if (moves < self.config.engine_retries and outcome_of(err) in ENGINE_OUTCOMES
                                and await self.fleet.check(engine, str(err))):
                            continue
                        raise
                    async with self._running(sb, engine, timings):
                        if (check := task.config.environment.healthcheck) is not None:
                            began = time.monotonic()
                            try:
                                await wait_healthy(sb, check)
                            finally:
                                timings.start_s += time.monotonic() - began
                        yield sb
                    return

    async def _start(self, task: Task, engine: Engine, timings: TrialTimings) -> Sandbox:
        """Build (or find) the images on ``engine`` and take a started container there; in the
        clean room, the verifier's container comes from its own warm pool (the same one when the
        verifier's image, limits and network are the agent's)."""
        mode = verification_mode(task, self.config)
        if (problem := network_problem(task, mode, self.config.allow_network)) is not None:
            raise SandboxError(problem, outcome=Outcome.start_error)  # check_network refuses it before a run
        began = time.monotonic()
        image = await self.image_for(task, engine)
        clean_room = mode == "clean_room"
        verifier_image = await self.verifier_image_for(task, engine) if clean_room else image
        timings.build_s = time.monotonic() - began
        began = time.monotonic()
        labels = {**self._labels, LABEL_TASK: task.name}
        spec = self._spec(task, "agent", image, engine)
        verifier_spec = self._spec(task, "verifier", verifier_image, engine) if clean_room else spec
        shared = clean_room and verifier_spec == spec  # one pool serves both containers of a trial
        container_id, keeper = await engine.pool(spec, 2 if shared else 1).take(task.name, labels)
        timings.start_s = time.monotonic() - began

        async def renew() -> tuple[str, KeeperChannel]:
            return await engine.pool(verifier_spec, 2 if shared else 1).take(task.name, labels)

        assert engine.call is not None and engine.client is not None and engine.reaper is not None
        sb = Sandbox(engine.call, engine.client, self.config, task, container_id, keeper=keeper,
                     renew=renew, retire=engine.reaper.remove)
        sb.engine, sb.image, sb.verifier_image = engine.url, image, verifier_image
        return sb

    @contextlib.asynccontextmanager
    async def _running(self, sb: Sandbox, engine: Engine, timings: TrialTimings) -> AsyncIterator[None]:
        """Watch the sandbox's disk while the caller uses it; remove it after; turn a Docker
        failure of an engine that no longer answers into :class:`EngineLost`."""
        assert engine.call is not None and engine.client is not None and engine.reaper is not None
        watcher = None
        if self.config.disk_poll_s is not None:
            watcher = asyncio.create_task(watch_disk(engine.call, engine.client, sb, self.config.disk_poll_s))
        try:
            yield
        except SandboxError as err:
            if (not isinstance(err, EngineLost) and outcome_of(err) in ENGINE_OUTCOMES and self.fleet is not None
                    and await self.fleet.check(engine, str(err))):
                raise EngineLost(f"engine {engine.url} stopped answering: {err}", outcome=outcome_of(err)) from err
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            await asyncio.shield(sb.close_shells())
            removal = engine.reaper.remove(sb.container_id)
            removal.add_done_callback(lambda t: _record_cleanup(t, timings))

    async def engine_lost(self, sb: Sandbox) -> bool:
        """True when the engine ``sb`` runs on stopped answering (it is then quarantined): a
        trial that failed there may run again; another engine takes it."""
        engine = next((e for e in self.engines if e.url == sb.engine), None)
        return engine is not None and self.fleet is not None and await self.fleet.check(engine, "a trial failed there")

    # --- sandbox-test trials -----------------------------------------------------

    async def run_oracle(self, task: Task) -> TrialRecord:
        """Trial ``oracle``: run ``solution/solve.sh`` then verify; expected reward 1."""
        return await self._trial(task, "oracle")

    async def run_null(self, task: Task) -> TrialRecord:
        """Trial ``null``: verify an untouched sandbox; expected reward 0."""
        return await self._trial(task, "null")

    async def _trial(self, task: Task, attempt: str) -> TrialRecord:
        """One trial, run again on another engine (at most ``engine_retries`` times) while its
        engine is lost; after that the record is the masked failure."""
        record, lost = await self._trial_once(task, attempt)
        moves = record.engine_retries
        for retry in range(1, self.config.engine_retries + 1):
            if not lost:
                break
            log.info("%s/%s: engine %s lost, retry %d on another engine", task.name, attempt, record.engine, retry)
            record, lost = await self._trial_once(task, attempt)
            moves += 1 + record.engine_retries
            record.engine_retries = moves
        return record

    async def _trial_once(self, task: Task, attempt: str) -> tuple[TrialRecord, bool]:
        """The trial's record, and whether it failed because its engine stopped answering."""
        timings = TrialTimings()
        placed: list[str] = []
        try:
            async with self.sandbox(task, timings, placed) as sb:
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
            record = TrialRecord(
                task=task.name, attempt=attempt, outcome=outcome, failure_class=outcome.failure_class,
                detail=str(err), engine=placed[-1] if placed else None, timings=timings,
                engine_retries=max(len(placed) - 1, 0),
            )
            return record, isinstance(err, EngineLost)
        record = TrialRecord(
            task=task.name, attempt=attempt, outcome=verdict.outcome, reward=verdict.reward,
            failure_class=verdict.failure_class, detail=(agent_note + verdict.detail).strip("; "),
            verification=verdict.verification, verifier_image=verdict.verifier_image, engine=sb.engine,
            timings=timings, engine_retries=len(placed) - 1,  # starts moved off an engine that stopped answering
        )
        return record, False


def _record_cleanup(task: asyncio.Task[float], timings: TrialTimings) -> None:
    if not task.cancelled() and task.exception() is None:
        timings.cleanup_s = task.result()


__all__ = ["DEFAULT_MAX_WARM", "MAX_WARM_POOLS", "SandboxManager", "new_run_id", "outcome_of"]
