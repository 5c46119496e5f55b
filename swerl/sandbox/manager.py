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
from swerl.sandbox.control import with_control
from swerl.sandbox.network import Phase, granted, network_problem
from swerl.sandbox.runtime.healthcheck import wait_healthy
from swerl.sandbox.deployment.engine import DEFAULT_MAX_WARM, MAX_WARM_POOLS, Engine, EngineLost
from swerl.sandbox.deployment.fleet import Fleet
from swerl.sandbox.deployment.plan import plan_pools
from swerl.sandbox.deployment.registry import ImageRoutes
from swerl.sandbox.docker_api import LABEL_TASK
from swerl.sandbox.deployment.gc import owner_labels
from swerl.sandbox.deployment.image_cache import prune_task_images, record_use
from swerl.sandbox.deployment.images import ensure_task_image, task_image_tag
from swerl.sandbox.runtime.keeper import KeeperChannel
from swerl.sandbox.types import Blame, Outcome, Placement, SandboxConfig, TrialRecord, TrialTimings, VerifierResult
from swerl.sandbox.deployment.pool import ContainerSpec
from swerl.sandbox.runtime.sandbox import Sandbox
from swerl.sandbox.runtime.verification import verification_mode
from swerl.sandbox.tamper.scan import merge
from swerl.sandbox.tamper.text import oracle_texts, texts_reasons

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
    return Outcome((err.outcome if isinstance(err, SandboxError) else None) or Outcome.daemon_error)


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
        self.routes: ImageRoutes | None = None

    @property
    def engines(self) -> list[Engine]:
        """The engines of the fleet, in config order (empty before the manager is open)."""
        return self.fleet.engines if self.fleet is not None else []

    @property
    def client(self) -> docker.DockerClient | None:
        """The client of the first healthy engine (None when none is)."""
        healthy = self.fleet.healthy if self.fleet is not None else []
        return healthy[0].opened.client if healthy else None

    async def __aenter__(self) -> SandboxManager:
        """Open every engine: connect, check free disk, gc dead runs.

        Raises:
            EnvironmentProblem: (exit 3) no engine is reachable with enough free disk
                (``min_free_disk_mb``); engines that fail while others open are quarantined.
        """
        self._labels = owner_labels(self.run_id)
        fleet = Fleet([Engine(e, self.config, self._labels) for e in self.config.engine_list()], self.config.engine_probe_s)
        await fleet.open()
        self.fleet, self.routes = fleet, ImageRoutes(self.config.registry)
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
        docker_image``, or ``environment/`` built there (cached per engine), or pulled from
        ``sandbox.registry``. A ``FROM`` image the engine lacks comes from the registry or a peer.

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
        """``folder`` (holding a Dockerfile) on ``engine`` once per run, cached by content: pulled
        from ``sandbox.registry`` when it holds it, else built there (and pushed)."""
        key = str(folder.resolve())
        if key in engine.images:
            return engine.images[key]
        assert self.fleet is not None and self.routes is not None
        routes = self.routes
        async with routes.lock(engine, task_image_tag(folder)):
            handles = engine.opened
            await routes.bring_bases(folder / "Dockerfile", engine, self.fleet.healthy, build_timeout_s)
            fetch = (lambda tag: routes.pull(engine, tag, build_timeout_s)) if routes.registry else None
            tag, built = await ensure_task_image(
                handles.call, handles.client, folder, build_timeout_s, allow_network=False, known_ids=engine.base_ids,
                fetch=fetch,
            )
            if built and routes.registry:
                await routes.push(engine, tag, build_timeout_s)
        first_use = tag not in engine.images.values()
        engine.images[key] = tag
        if first_use:  # many task folders share one image (e.g. every HumanEval task): note it once
            await asyncio.to_thread(record_use, tag)
        # The cache grows only by a build; the first image of a run checks a budget lowered since.
        if (built or not engine.pruned) and self.config.image_cache_mb is not None:
            engine.pruned = True
            try:
                await handles.call(prune_task_images, handles.client, self.config.image_cache_mb, set(engine.images.values()))
            except SandboxError as err:  # a full cache is a nuisance, never a failed trial
                log.warning("image cache pruning failed on %s: %s", engine.url, err)
        return tag

    def spec(self, task: Task, phase: Phase, image: str, engine: Engine) -> ContainerSpec:
        """The container of ``phase``: the agent's limits and network, or the verifier's (the
        separate verifier environment's limits, the verifier phase's network)."""
        env = task.config.environment if phase == "agent" else task.config.verifier_environment
        return ContainerSpec(
            runtime=engine.runtime, image=image, cpus=env.cpus, memory_mb=env.memory_mb, pids_limit=self.config.pids_limit,
            network=granted(task, phase, self.config.allow_network), workdir=env.workdir,
        )

    async def plan(self, tasks: list[Task], episodes: int, trials: int | None = None) -> int:
        """Size the warm pools for a step that runs ``episodes`` episodes at once over ``tasks`` and
        start filling them in the background (:func:`~swerl.sandbox.deployment.plan.plan_pools`);
        nothing with ``warm_pool`` off. ``trials``: the collection's trials in all (tasks times
        samples): no pool starts more containers than they take; None: pools refill for good.

        Returns:
            the idle containers the planned pools keep, all engines together.
        """
        if self.fleet is None or not self.config.warm_pool:
            return 0
        return await plan_pools(self.fleet.healthy, tasks, episodes, self.container_specs, trials)

    async def container_specs(self, task: Task, engine: Engine) -> list[tuple[ContainerSpec, int]]:
        """The containers a trial of ``task`` takes on ``engine``, as (spec, how many of that spec):
        the agent's; in the clean room the verifier's too (one spec taken twice when it is the
        agent's, as :meth:`_start` takes them). [] for a task whose network the run cannot grant.
        Builds (or finds) the images on ``engine``.

        Raises:
            TaskError: malformed environment. SandboxError: build_error.
        """
        mode = verification_mode(task, self.config)
        if network_problem(task, mode, self.config.allow_network) is not None:
            return []
        spec = self.spec(task, "agent", await self.image_for(task, engine), engine)
        if mode != "clean_room":
            return [(spec, 1)]
        verifier_spec = self.spec(task, "verifier", await self.verifier_image_for(task, engine), engine)
        return [(spec, 2)] if verifier_spec == spec else [(spec, 1), (verifier_spec, 1)]

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the ``concurrency`` slots, held without a sandbox: a trial that runs its
        sandboxes on a manager of its own (the red team's small engine) still counts here."""
        async with self._slots:
            yield

    @contextlib.asynccontextmanager
    async def sandbox(
        self, task: Task, timings: TrialTimings | None = None, placed: list[str] | None = None,
        prefer: str | None = None,
    ) -> AsyncIterator[Sandbox]:
        """A fresh started sandbox for one trial; on every exit path every container of the trial
        is removed before this returns (so a control run after it meets nothing of the trial).

        Waits for a concurrency slot, an engine slot and the engine's disk first: the trial holds
        its ``[environment] storage_mb`` there until its containers are removed
        (:mod:`~swerl.sandbox.deployment.admission`). A start that fails because the
        engine stopped answering moves to another engine (at most ``engine_retries`` times).
        ``timings`` (optional) receives ``build_s``, ``start_s`` and ``cleanup_s`` (the wait for
        the removal of the trial's containers: the trial's time). ``placed`` (optional) receives
        the URL of each engine the trial was placed on, in order (a start that failed there included). ``prefer`` (optional):
        the URL of the engine to place it on while that engine is healthy and has a free slot
        (a control run goes where its trial ran).

        Raises:
            TaskError: malformed environment. SandboxError: ``outcome`` build_error/start_error
                (start_error too when the engine's free disk never covered the budget).
            EngineLost: the sandbox's engine stopped answering while the caller used it (the
                caller may run the trial again: another engine takes it).
        """
        if self.fleet is None:
            raise SandboxError("SandboxManager is not open; use `async with SandboxManager(...)`")
        timings = timings if timings is not None else TrialTimings()
        asked = time.monotonic()
        async with self._slots:
            for moves in range(self.config.engine_retries + 1):
                async with (self.fleet.slot(prefer if moves == 0 else None) as engine,
                            engine.admission.reserve(task.name, task.config.environment.storage_mb) as held):
                    if placed is not None:
                        placed.append(engine.url)
                    try:
                        sb = await self._start(task, engine, timings)
                        timings.wait_s = time.monotonic() - asked
                    except SandboxError as err:
                        if (moves < self.config.engine_retries and outcome_of(err) in ENGINE_OUTCOMES
                                and await self.fleet.check(engine, str(err))):
                            continue
                        raise
                    if (watch := engine.opened.disk_watch) is not None:
                        held.used = lambda: watch.charged(sb.container_id)
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
        spec = self.spec(task, "agent", image, engine)
        verifier_spec = self.spec(task, "verifier", verifier_image, engine) if clean_room else spec
        shared = clean_room and verifier_spec == spec  # one pool serves both containers of a trial
        container_id, keeper = await engine.pool(spec, 2 if shared else 1).take(task.name, labels, timings)
        timings.start_s = time.monotonic() - began

        async def renew() -> tuple[str, KeeperChannel]:
            return await engine.pool(verifier_spec, 2 if shared else 1).take(task.name, labels, timings)

        handles = engine.opened
        placement = Placement(engine.url, image, verifier_image)
        return Sandbox(handles.call, handles.client, self.config, task, container_id, placement, keeper=keeper,
                       renew=renew, retire=handles.reaper.remove)

    @contextlib.asynccontextmanager
    async def _running(self, sb: Sandbox, engine: Engine, timings: TrialTimings) -> AsyncIterator[None]:
        """Watch the sandbox's disk while the caller uses it; after, remove every container of the
        trial (the clean room's retired one included) and wait for that; turn a Docker failure of
        an engine that no longer answers into :class:`EngineLost`."""
        handles = engine.opened
        if handles.disk_watch is not None:
            handles.disk_watch.add(sb)
        try:
            yield
        except SandboxError as err:
            if (not isinstance(err, EngineLost) and outcome_of(err) in ENGINE_OUTCOMES and self.fleet is not None
                    and await self.fleet.check(engine, str(err))):
                raise EngineLost(f"engine {engine.url} stopped answering: {err}", outcome=outcome_of(err)) from err
            raise
        finally:
            if handles.disk_watch is not None:
                handles.disk_watch.discard(sb)
            await asyncio.shield(sb.close_shells())
            began = time.monotonic()
            removals = [*sb.removals, handles.reaper.remove(sb.container_id)]
            if engine.healthy:  # a lost engine is not waited for: its trial runs again elsewhere
                await asyncio.shield(asyncio.wait(removals))  # cancelled: the removals go on, drained at close
                timings.cleanup_s = time.monotonic() - began

    async def engine_lost(self, sb: Sandbox) -> bool:
        """True when the engine ``sb`` runs on stopped answering (it is then quarantined): a
        trial that failed there may run again; another engine takes it."""
        engine = next((e for e in self.engines if e.url == sb.placement.engine), None)
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
        engine is lost; after that the record is the masked failure. A trial that read no
        trustworthy reward is settled by a control run (:mod:`swerl.sandbox.control`)."""
        record, lost = await self._trial_once(task, attempt)
        moves = record.engine_retries
        for retry in range(1, self.config.engine_retries + 1):
            if not lost:
                break
            log.info("%s/%s: engine %s lost, retry %d on another engine", task.name, attempt, record.engine, retry)
            record, lost = await self._trial_once(task, attempt)
            moves += 1 + record.engine_retries
            record.engine_retries = moves
        return await with_control(self, task, record)

    async def _trial_once(self, task: Task, attempt: str) -> tuple[TrialRecord, bool]:
        """The trial's record, and whether it failed because its engine stopped answering.

        The solution's failures (and a sandbox failure while it runs) never skip verification:
        the work product is verified as it stands."""
        timings = TrialTimings()
        placed: list[str] = []
        acted = False
        sent = oracle_texts(task) if attempt == "oracle" else []
        try:
            async with self.sandbox(task, timings, placed) as sb:
                acted = True
                began = time.monotonic()
                agent_note = await _solve(sb) if attempt == "oracle" else ""
                timings.agent_s = time.monotonic() - began
                began = time.monotonic()
                verdict = await sb.verify()
                timings.verify_s = time.monotonic() - began
        except SandboxError as err:
            record = failed_record(task.name, attempt, err, timings, placed, acted)
            tamper = merge(record.tamper, texts_reasons(sent))
            return record.model_copy(update={"tamper": tamper}), isinstance(err, EngineLost)
        record = verified_record(task.name, attempt, verdict, timings, placed, agent_note)
        return record.model_copy(update={"tamper": merge(verdict.tamper, texts_reasons(sent))}), False


def failed_record(task: str, attempt: str, err: SandboxError, timings: TrialTimings, placed: list[str],
                  acted: bool, note: str = "") -> TrialRecord:
    """The record of a trial that ended in a sandbox failure (``placed``: the engines it was put on;
    ``acted``: whether its sandbox had started; its tamper reasons: those of the container's scan
    when the verification failed after it, ``err.tamper``). An engine that stopped answering blames
    the infrastructure outright (its failed ping is the proof); other failures await a control."""
    outcome = outcome_of(err)
    return TrialRecord(
        task=task, attempt=attempt, outcome=outcome, failure_class=outcome.failure_class,
        detail="; ".join(x for x in (note, str(err)) if x and (x == note or x not in note)),
        engine=placed[-1] if placed else None, timings=timings,
        engine_retries=max(len(placed) - 1, 0), acted=acted,
        blame=Blame.infrastructure if isinstance(err, EngineLost) else None, tamper=list(err.tamper),
    )


def verified_record(task: str, attempt: str, verdict: VerifierResult, timings: TrialTimings, placed: list[str],
                    note: str = "") -> TrialRecord:
    """The record of a trial that was verified (``note``: what went wrong while the attempt acted;
    the tamper reasons are the container's, ``verdict.tamper``)."""
    return TrialRecord(
        task=task, attempt=attempt, outcome=verdict.outcome, reward=verdict.reward,
        failure_class=verdict.failure_class, detail="; ".join(x for x in (note, verdict.detail) if x),
        verification=verdict.verification, verifier_image=verdict.verifier_image,
        engine=placed[-1] if placed else None, timings=timings, acted=True,
        engine_retries=max(len(placed) - 1, 0),  # starts moved off an engine that stopped answering
        work_product_dropped=verdict.work_product_dropped, tamper=list(verdict.tamper),
    )


async def _solve(sb: Sandbox) -> str:
    """Run the oracle's ``solve.sh``; a note on how it failed ("" when it did not)."""
    try:
        result = await sb.run_solution()
    except SandboxError as err:  # e.g. it killed its own container: what it left is verified all the same
        return f"solve.sh: {err}"
    if result.timed_out or result.exit_code != 0:
        return f"solve.sh exit {result.exit_code}{' (timed out)' if result.timed_out else ''}"
    return ""



__all__ = ["DEFAULT_MAX_WARM", "MAX_WARM_POOLS", "SandboxManager", "failed_record", "new_run_id", "outcome_of",
           "verified_record"]
