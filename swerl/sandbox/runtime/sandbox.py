"""One trial's container and what can be done in it: exec, files, a persistent shell.

A :class:`Sandbox` is handed out by ``SandboxManager.sandbox(task)``, which owns its
lifecycle (start from the warm pool, removal in ``finally``) and decides its
:class:`~swerl.sandbox.types.Placement`. The task's tests are not in the container until
:meth:`Sandbox.verify` runs the protocol of :mod:`swerl.sandbox.runtime.verification` on it,
through the handle's container operations (stop, kill, archive, replace). In the clean room
the protocol replaces the agent's container with a fresh one of the pristine image
(:meth:`Sandbox.replace_container`): ``container_id`` then names the fresh one, and there is
still one container per trial at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import docker.errors

from swerl.errors import SandboxError
from swerl.sandbox.runtime import verification
from swerl.sandbox.runtime.channel import Command
from swerl.sandbox.runtime.commands import Commands
from swerl.sandbox.runtime.files import ArchiveTooLarge, file_from_tar, spool_archive, tar_of_dir, tar_of_files
from swerl.sandbox.runtime.keeper import KeeperChannel
from swerl.sandbox.runtime.layer import LayerReader
from swerl.sandbox.runtime.shell import Shell
from swerl.sandbox.types import ExecResult, Outcome, Placement, SandboxConfig, VerifierResult

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)
T = TypeVar("T")


class Sandbox:
    """A started container bound to one task and one trial.

    Attributes:
        task: the task it runs.
        config: the run's sandbox settings.
        placement: its engine and images (the manager's choice).
        container_id: Docker id of the container (the clean room's, once :meth:`replace_container` ran).
        removals: removals of the trial's retired containers (the manager awaits them when the trial ends).
        disk_exceeded: why the trial passed its disk budget (read-only: the engine's disk watcher
            records it once through :meth:`exceed_disk` before it kills the container); None while
            within it.
    """

    def __init__(
        self,
        call: DockerCaller,
        client: docker.DockerClient,
        config: SandboxConfig,
        task: Task,
        container_id: str,
        placement: Placement,
        keeper: KeeperChannel | None = None,
        renew: Callable[[], Awaitable[tuple[str, KeeperChannel]]] | None = None,
        retire: Callable[[str], asyncio.Task[float]] | None = None,
    ) -> None:
        """``keeper``: the container's channel (attached before start; None: attached on first
        use); ``renew``/``retire``: the manager's hooks that start a fresh container of the
        verifier's image and remove an old one in the background (:meth:`replace_container`
        needs both)."""
        self._call, self._client, self.config = call, client, config
        self.task, self.placement = task, placement
        self.container_id = container_id
        self._shells: list[Shell] = []
        self._commands = Commands(call, client, container_id, keeper, config.docker_timeout_s)
        self._renew, self._retire = renew, retire
        self.removals: list[asyncio.Task[float]] = []
        self._disk_exceeded: str | None = None

    @property
    def disk_exceeded(self) -> str | None:
        """Why the trial passed its disk budget; None while within it."""
        return self._disk_exceeded

    def exceed_disk(self, why: str) -> bool:
        """Record that the trial passed its disk budget (``why``: what was used, against which
        limit); only the first reason is kept. Returns True when this call recorded it (the caller
        then kills the container), False when one was recorded already."""
        if self._disk_exceeded is not None:
            return False
        self._disk_exceeded = why
        return True

    async def exec(
        self,
        command: str,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``bash -c command``; the timeout kills it inside the container.

        Args:
            timeout_s: seconds; output is capped at ``config.max_output_bytes``.
            stdin: bytes fed to the command's standard input, then EOF.

        Raises:
            SandboxError: container gone / daemon failure (``outcome`` daemon_error or oom).
        """
        return await self._guard(self._commands.run(Command(
            script=command, max_output_bytes=self.config.max_output_bytes, stdin=stdin, env=env,
            workdir=workdir, timeout_s=timeout_s,
        )))

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to absolute ``path`` (parents created) as a tar stream."""
        await self._put({path: (data, mode)})

    async def read_file(self, path: str, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        """Read the first ``max_bytes`` of the regular file at ``path``.

        Raises:
            SandboxError: no such file (``FileNotFoundError`` chained) or daemon failure.
        """
        try:
            stream, _ = await self._call(self._client.api.get_archive, self.container_id, path)
            data = await self._call(lambda: b"".join(stream))
        except docker.errors.NotFound as err:
            raise SandboxError(f"{path}: no such file in the sandbox", outcome=Outcome.daemon_error) from err
        return file_from_tar(data, max_bytes)

    async def upload_dir(self, local_dir: Path, dest: str) -> None:
        """Copy ``local_dir``'s contents under absolute ``dest`` (created if missing)."""
        archive = tar_of_dir(local_dir, dest)
        await self.put_archive(archive)

    async def open_shell(self, env: dict[str, str] | None = None, workdir: str | None = None) -> Shell:
        """A persistent ``bash -i`` (see :class:`~swerl.sandbox.runtime.shell.Shell`); closed with the sandbox."""
        shell = await Shell.open(
            self._commands, env=env, workdir=workdir,
            max_buffer_bytes=self.config.max_output_bytes, timeout_s=self.config.docker_timeout_s,
        )
        self._shells.append(shell)
        return shell

    async def run_solution(self, timeout_s: float | None = None) -> ExecResult:
        """The oracle: copy ``solution/`` to ``/solution`` and run ``bash /solution/solve.sh``
        under the agent timeout of task.toml.

        Raises:
            SandboxError: the task has no ``solution/solve.sh``.
        """
        solution = self.task.solution_dir
        if solution is None:
            raise SandboxError(f"{self.task.path}: no solution/solve.sh", outcome=Outcome.start_error)
        limit = timeout_s if timeout_s is not None else self.task.config.agent.timeout_sec
        # The files ride on the exec's stdin (one round trip instead of a copy plus an exec).
        command = "tar -x -C / -f - && exec bash /solution/solve.sh"
        return await self.exec(command, timeout_s=limit, stdin=tar_of_dir(solution, "/solution"))

    async def verify(self, timeout_s: float | None = None) -> VerifierResult:
        """Run the task's hidden tests and read the reward:
        :func:`swerl.sandbox.runtime.verification.verify` on this sandbox (where the tests run,
        the tamper scan, the clean room's copy-out; what it raises)."""
        return await verification.verify(self, timeout_s)

    async def run(self, command: Command) -> ExecResult:
        """Run ``command`` as it is (its own caps and deadline) on the container's channel.

        Raises:
            SandboxError: container gone / daemon failure (``outcome`` daemon_error or oom).
        """
        return await self._guard(self._commands.run(command))

    async def kill_processes(self) -> None:
        """Kill every process in the container from inside (``kill -KILL -1``); a container that
        has stopped (e.g. past its disk budget) is left as it is.

        Raises:
            SandboxError: the kill failed while the container runs, or the container is gone.
        """
        try:
            await self._commands.run(Command(
                script="kill -KILL -1 2>/dev/null; true", max_output_bytes=4096, wait_s=self.config.docker_timeout_s))
        except (docker.errors.NotFound, SandboxError) as err:
            if await self._is_running():  # a stopped container (e.g. past its disk budget) is scanned as it is
                raise await self._container_failure(err) from err

    async def kill_from_outside(self) -> None:
        """Kill every process in the container through a fresh ``docker exec`` (a command whose
        stream outlived its deadline may have left them)."""
        await self._commands.docker_exec.run(Command(script="kill -KILL -1", max_output_bytes=4096, wait_s=10.0))

    def layer_reader(self) -> LayerReader:
        """A reader of the container's changes against its image (:mod:`~swerl.sandbox.runtime.layer`)."""
        return LayerReader(self._call, self._client, self.container_id)

    async def workdir(self) -> str:
        """The container's ``WORKDIR`` as its config holds it (``""`` when none).

        Raises:
            SandboxError: container gone / daemon failure.
        """
        attrs = await self._guard(self._call(self._client.api.inspect_container, self.container_id))
        return (attrs.get("Config") or {}).get("WorkingDir") or ""

    async def stop(self) -> None:
        """The engine kills the agent's container (every process in it dies at once), so nothing
        changes it while it is scanned and read; a container that had stopped already is read as it is.

        Raises:
            SandboxError: the container is gone.
        """
        try:
            await self._call(self._client.api.kill, self.container_id)
        except docker.errors.NotFound as err:
            raise await self._container_failure(err) from err
        except SandboxError as err:  # 409: it had stopped already (e.g. its keeper died); it still reads
            log.debug("%s: kill before the scan and copy-out: %s", self.task.name, err)

    async def archive(self, path: str, limit_bytes: int) -> IO[bytes] | None:
        """The daemon's tar of ``path`` in a rewound temporary file (None when the path does not
        exist), read without running anything in the container (a stopped one reads too).

        Raises:
            ArchiveTooLarge: the tar passed ``limit_bytes``. SandboxError: the container's failure.
        """
        try:
            stream, _ = await self._call(self._client.api.get_archive, self.container_id, path)
        except docker.errors.NotFound as err:  # no such path, or no such container
            if await self._exists():
                return None
            raise await self._container_failure(err) from err
        except SandboxError as err:
            raise await self._container_failure(err) from err
        spool = await self._call(spool_archive, stream, limit_bytes)
        if spool is None:
            raise ArchiveTooLarge(f"{path}: over {limit_bytes} bytes")
        return spool

    async def _is_running(self) -> bool:
        try:
            attrs = await self._call(self._client.api.inspect_container, self.container_id)
        except (docker.errors.NotFound, SandboxError):
            return False
        return bool((attrs.get("State") or {}).get("Running"))

    async def _exists(self) -> bool:
        try:
            await self._call(self._client.api.inspect_container, self.container_id)
        except (docker.errors.NotFound, SandboxError):
            return False
        return True

    async def replace_container(self) -> None:
        """Retire this container (removed in the background: :attr:`removals`) and continue in a
        fresh one of the verifier's image from the manager (closing every shell first).

        Raises:
            SandboxError: start_error without the manager's hooks; the new container's start failure.
        """
        if self._renew is None or self._retire is None:
            raise SandboxError("clean-room verification needs a sandbox from SandboxManager.sandbox()", outcome=Outcome.start_error)
        await self.close_shells()
        self.removals.append(self._retire(self.container_id))
        self.container_id, keeper = await self._renew()
        self._commands = Commands(self._call, self._client, self.container_id, keeper, self.config.docker_timeout_s)

    async def close_shells(self) -> None:
        """Close every shell and the command channels of this sandbox (the keeper then stops the
        container); kills scheduled for cancelled commands get a moment to finish."""
        for shell in self._shells:
            await shell.close()
        self._shells.clear()
        await self._commands.close(self.config.docker_timeout_s)

    async def _put(self, files: dict[str, tuple[bytes, int]]) -> None:
        await self.put_archive(tar_of_files(files))

    async def put_archive(self, archive: bytes) -> None:
        """Extract the tar ``archive`` at ``/`` through the daemon (nothing of the container runs).

        Raises:
            SandboxError: the daemon refused, or the container's failure.
        """
        ok = await self._guard(self._call(self._client.api.put_archive, self.container_id, "/", archive))
        if not ok:
            raise SandboxError("copying files into the sandbox failed", outcome=Outcome.daemon_error)

    async def _guard(self, awaitable: Awaitable[T]) -> T:
        """Await a Docker operation; if it fails because the container died, say why (oom or not)."""
        try:
            return await awaitable
        except (docker.errors.NotFound, SandboxError) as err:
            if isinstance(err, SandboxError) and err.outcome not in (None, Outcome.daemon_error):  # already says why
                raise
            raise await self._container_failure(err) from err

    async def _container_failure(self, err: Exception) -> SandboxError:
        """Say why a Docker operation failed: the container's end (:meth:`_stopped`), else ``err``."""
        stopped = await self._stopped(err)
        if stopped is not None:
            return stopped
        return err if isinstance(err, SandboxError) else SandboxError(str(err), outcome=Outcome.daemon_error)

    async def _stopped(self, err: Exception) -> SandboxError | None:
        """Why the container is gone (``oom`` when the kernel killed it for memory) or passed
        its disk budget (``disk_limit``); None while it runs."""
        try:
            state = (await self._call(self._client.api.inspect_container, self.container_id))["State"]
        except Exception:  # noqa: BLE001 - the container may be gone entirely
            state = {}
        if self.disk_exceeded is not None:
            return SandboxError(self.disk_exceeded, outcome=Outcome.disk_limit)
        if state.get("Running"):
            return None
        outcome = Outcome.oom if state.get("OOMKilled") else Outcome.daemon_error
        return SandboxError(f"the sandbox container stopped ({outcome.value}): {err}", outcome=outcome)

