"""One trial's container and what can be done in it: exec, files, a persistent shell, verify.

A :class:`Sandbox` is handed out by ``SandboxManager.sandbox(task)``, which owns its
lifecycle (start from the warm pool, removal in ``finally``). The task's tests are not in
the container until :meth:`Sandbox.verify` uploads them. In the clean room (see
:mod:`swerl.sandbox.runtime.cleanroom`) ``verify`` swaps the agent's container for a fresh one of the
pristine image: ``container_id`` then names the fresh one, and there is still one container
per trial at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import docker.errors

from swerl.errors import SandboxError
from swerl.sandbox.runtime import cleanroom
from swerl.sandbox.runtime.channel import Command
from swerl.sandbox.runtime.commands import Commands
from swerl.sandbox.runtime.files import file_from_tar, tar_of_dir, tar_of_files
from swerl.sandbox.runtime.healthcheck import wait_healthy
from swerl.sandbox.runtime.keeper import KeeperChannel
from swerl.sandbox.runtime.layer import LayerReader
from swerl.sandbox.runtime.shell import Shell
from swerl.sandbox.runtime.verifier import VERIFY_OUTPUT_BYTES, VERIFY_SCRIPT, parse_sections, verdict
from swerl.sandbox.tamper.reach import VerifierReach
from swerl.sandbox.tamper.scan import scan_container
from swerl.sandbox.types import ExecResult, Outcome, SandboxConfig, Verification, VerifierResult

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.sandbox.runtime.workproduct import WorkProductStats
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)
T = TypeVar("T")
_VERIFY_GRACE_S = 10.0


class Sandbox:
    """A started container bound to one task and one trial.

    Attributes:
        task: the task it runs.
        container_id: Docker id of the container.
        timings: seconds per phase (``build_s``, ``start_s``, ...) filled as the trial goes.
    """

    def __init__(
        self,
        call: DockerCaller,
        client: docker.DockerClient,
        config: SandboxConfig,
        task: Task,
        container_id: str,
        keeper: KeeperChannel | None = None,
        renew: Callable[[], Awaitable[tuple[str, KeeperChannel]]] | None = None,
        retire: Callable[[str], asyncio.Task[float]] | None = None,
    ) -> None:
        """``keeper``: the container's channel (attached before start; None: attached on first
        use); ``renew``/``retire``: the manager's hooks that start a fresh container of the same
        image and remove an old one in the background (the clean room needs both; the manager
        awaits :attr:`removals` when the trial ends)."""
        self._call, self._client, self._config = call, client, config
        self.task = task
        self.container_id = container_id
        self._shells: list[Shell] = []
        self._commands = Commands(call, client, container_id, keeper, config.docker_timeout_s)
        self._renew, self._retire = renew, retire
        self.removals: list[asyncio.Task[float]] = []  # removals of the trial's retired containers
        self.disk_exceeded: str | None = None  # set by the manager's disk watcher before it kills the container
        self.engine: str | None = None  # URL of the Docker engine it runs on (set by the manager)
        self.image: str | None = None  # the agent's image, and the clean room's (both set by the manager)
        self.verifier_image: str | None = None

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
            script=command, max_output_bytes=self._config.max_output_bytes, stdin=stdin, env=env,
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
        await self._put_archive(archive)

    async def open_shell(self, env: dict[str, str] | None = None, workdir: str | None = None) -> Shell:
        """A persistent ``bash -i`` (see :class:`~swerl.sandbox.runtime.shell.Shell`); closed with the sandbox."""
        shell = await Shell.open(
            self._commands, env=env, workdir=workdir,
            max_buffer_bytes=self._config.max_output_bytes, timeout_s=self._config.docker_timeout_s,
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
        """Run the task's hidden tests (docs/sandbox.md) and read the reward.

        First, with every process of the agent's container killed, the container half of the
        tamper scan (:func:`~swerl.sandbox.tamper.scan.scan_container`): nothing that can end
        verification runs before it, and a verification that fails after it raises with its reasons.

        Where: :func:`~swerl.sandbox.runtime.cleanroom.verification_mode`. Clean room: the engine
        kills the agent's container and reads the work product out of it (its archive API; a
        stopped container reads too), every member is checked and what passes is rewritten
        (:mod:`~swerl.sandbox.runtime.workproduct`), that container is removed, and the protocol
        runs in a fresh one of the pristine verifier image (the task's, or a separate verifier
        environment's, whose own ``/tests`` is then kept) holding only the work product. Same
        container: every process killed, then ``/logs/verifier`` and ``/tests``
        moved aside and recreated in a way the agent's permissions cannot block, then the protocol.
        Either way: ``tests/`` uploaded to ``/tests``, ``bash /tests/test.sh`` run
        (``[verifier] env`` applied) under ``timeout_s`` (default:
        ``SandboxConfig.verifier_timeout_s``, else task.toml ``[verifier] timeout_sec``), every
        process left killed, then ``reward.txt`` else ``reward.json`` read. Never raises for a
        misbehaving verifier: the outcome says what happened; ``verification`` and
        ``verifier_image`` say where.

        Raises:
            SandboxError: only when the container/daemon fails (``outcome`` daemon_error, oom,
                start_error), the trial passed its disk budget or the work product the cap
                (``disk_limit``), the work product's archive is unreadable (``copy_out_error``), or
                the clean room's healthcheck never passed (``healthcheck_failed``); its ``tamper``
                holds the scan's reasons when the scan ran.
        """
        limit = timeout_s or self._config.verifier_timeout_s or self.task.config.verifier.timeout_sec
        began = time.monotonic()
        mode = cleanroom.verification_mode(self.task, self._config)
        # The container half of the tamper signal comes first: whatever ends verification after it
        # (the disk budget, a work product over its cap, a broken copy-out) keeps its reasons.
        if mode == "clean_room":  # the engine kills the agent's container: it reads the same stopped
            await self._stop()
        tamper = await self._scan_for_tamper(kill_first=mode != "clean_room")
        try:
            raw, stats = await self._verify_scanned(mode, limit)
        except SandboxError as err:
            err.tamper = tamper
            raise
        if raw.timed_out:  # the stream outlived the deadline: kill everything from outside
            await self._commands.docker_exec.run(Command(script="kill -KILL -1", max_output_bytes=4096, wait_s=10.0))
        self._check_disk()
        result = verdict(parse_sections(raw.output), raw.timed_out, limit, time.monotonic() - began)
        note = stats.note()
        image = self.verifier_image if mode == "clean_room" else self.image
        update = {"verification": mode, "verifier_image": image, "work_product_dropped": dict(stats.dropped),
                  "tamper": tamper}
        if note:
            update["detail"] = "; ".join(x for x in (result.detail, note) if x)
        return result.model_copy(update=update)

    async def _verify_scanned(self, mode: Verification, limit: float) -> tuple[ExecResult, WorkProductStats]:
        """After the scan: the disk check, the copy-out and the switch (clean room), then the protocol."""
        self._check_disk()
        # Tests that belong to a separate verifier's own image are in its /tests (mode is then clean_room).
        tests = None if self.task.tests_in_verifier_image else self.task.tests_dir
        if mode == "clean_room":
            paths = await self._work_paths()
            work = await self._copy_out(paths)
        else:
            paths, work = [], []
        try:
            if mode == "clean_room":
                await self._switch_container()
            return await self._deliver_and_test(tests, work, paths, limit)
        finally:
            for spool, _ in work:
                spool.close()

    async def _deliver_and_test(
        self, tests: Path | None, work: list[tuple[IO[bytes], str]], paths: list[str], limit: float
    ) -> tuple[ExecResult, WorkProductStats]:
        """Send ``tests`` and the checked work product in as one tar and run the protocol on it.

        The tar is checked and written in a child process killed at the verifier's time ``limit``
        (:func:`cleanroom.bundle_by_deadline`): up to ``MAX_WORK_MEMBERS`` members of the agent's
        choosing (links resolved through chains of up to 40) cost seconds of CPU, which on the event
        loop would stall every sandbox of the run (17 s for 199k chained links here), and a worker
        thread abandoned at its deadline would go on running and hold a slot of the engine's calls."""
        archive, stats = await cleanroom.bundle_by_deadline(tests, work, paths, "", limit)
        raw = await self._run_verify_script("-", limit, tests is not None, archive, paths)
        if "\x1enotar\x1f" in raw.output:  # no tar in the image: the daemon copies the files in first
            staging = f"/tmp/.swerl-verify-{uuid.uuid4().hex}"
            staged, _ = await cleanroom.bundle_by_deadline(tests, work, paths, staging.lstrip("/") + "/", limit)
            await self._put_archive(staged)
            raw = await self._run_verify_script(staging, limit, tests is not None, None, paths)
        return raw, stats

    async def _scan_for_tamper(self, kill_first: bool) -> list[str]:
        """The tamper reasons of the agent's container (:mod:`swerl.sandbox.tamper.scan`), after
        every process in it is killed (``kill_first``), so none changes it between scan and tests."""
        if not self._config.tamper_scan:
            return []
        if kill_first:
            try:
                await self._commands.run(Command(
                    script="kill -KILL -1 2>/dev/null; true", max_output_bytes=4096, wait_s=self._config.docker_timeout_s))
            except (docker.errors.NotFound, SandboxError) as err:
                if await self._is_running():  # a stopped container (e.g. past its disk budget) is scanned as it is
                    raise await self._container_failure(err) from err
        reader = LayerReader(self._call, self._client, self.container_id)
        return await scan_container(reader, self.task.clean_room_paths, self._config.tamper_scan_max_changes,
                                    VerifierReach.of(self.task))

    def _check_disk(self) -> None:
        if self.disk_exceeded is not None:
            raise SandboxError(self.disk_exceeded, outcome=Outcome.disk_limit)

    async def _work_paths(self) -> list[str]:
        """The declared work product (:attr:`Task.clean_room_paths`), else (clean room forced by
        the run) the image's WORKDIR."""
        if (declared := self.task.clean_room_paths) is not None:
            return declared
        attrs = await self._guard(self._call(self._client.api.inspect_container, self.container_id))
        workdir = (attrs.get("Config") or {}).get("WorkingDir") or ""
        if workdir.rstrip("/") == "":
            raise SandboxError(
                f"{self.task.path / 'task.toml'}: clean-room verification needs [verifier] artifacts "
                '(e.g. ["/app"]) and the image has no WORKDIR; declare them or verify same_container', outcome=Outcome.start_error,
            )
        return [workdir.rstrip("/")]

    async def _stop(self) -> None:
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

    async def _copy_out(self, paths: list[str]) -> list[tuple[IO[bytes], str]]:
        """Read the work product out of the stopped agent's container (:meth:`_stop`) without
        running anything of it: the engine's archive API reads each declared path that exists,
        streamed into temporary files, at most ``max_artifact_mb`` in all.

        Returns:
            ``(tar file object, rebase)`` pairs, rewound (see :func:`cleanroom.bundle`).

        Raises:
            SandboxError: disk_limit (over the cap, or the container passed its disk budget),
                daemon_error (the container is gone).
        """
        budget = (self._config.max_artifact_mb << 20) + (1 << 20)  # tar headers and padding on top of the data
        work: list[tuple[IO[bytes], str]] = []
        try:
            for path in paths:
                spool = await self._get_archive(path, budget - sum(_size(f) for f, _ in work))
                if spool is not None:
                    parent = path.rsplit("/", 1)[0].lstrip("/")
                    work.append((spool, parent + "/" if parent else ""))
        except BaseException:
            for spool, _ in work:
                spool.close()
            raise
        return work

    async def _get_archive(self, path: str, limit_bytes: int) -> IO[bytes] | None:
        """The daemon's tar of ``path`` in a temporary file (None when the path does not exist).

        Raises:
            SandboxError: disk_limit past ``limit_bytes``; the container's failure otherwise.
        """
        try:
            stream, _ = await self._call(self._client.api.get_archive, self.container_id, path)
        except docker.errors.NotFound as err:  # no such path, or no such container
            if await self._exists():
                return None
            raise await self._container_failure(err) from err
        except SandboxError as err:
            raise await self._container_failure(err) from err
        spool = await self._call(cleanroom.spool_archive, stream, limit_bytes)
        if spool is None:
            raise cleanroom.too_large(self.task, self._config.max_artifact_mb)
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

    async def _switch_container(self) -> None:
        """Remove the agent's container and continue in a fresh one of the verifier's image (the
        task's, or a separate verifier environment's); its healthcheck, if any, runs first."""
        if self._renew is None or self._retire is None:
            raise SandboxError("clean-room verification needs a sandbox from SandboxManager.sandbox()", outcome=Outcome.start_error)
        await self.close_shells()
        self.removals.append(self._retire(self.container_id))
        self.container_id, keeper = await self._renew()
        self._commands = Commands(self._call, self._client, self.container_id, keeper, self._config.docker_timeout_s)
        if (check := self.task.config.verifier_environment.healthcheck) is not None:
            await wait_healthy(self, check, "the verifier environment's healthcheck")

    async def _run_verify_script(
        self, source: str, limit: float, upload_tests: bool, stdin: bytes | None = None, clear: list[str] | None = None
    ) -> ExecResult:
        """:data:`VERIFY_SCRIPT` with no in-container timeout (it kills all but itself and PID 1
        and bounds the tests itself), waited for ``limit`` + a grace. ``upload_tests``: the bundle
        carries ``tests/`` (``/tests`` is wiped first); False: the image's ``/tests`` is kept."""
        uploads = "upload" if upload_tests else "image"
        return await self._guard(self._commands.run(Command(
            script=VERIFY_SCRIPT, args=(source, f"{limit:.3f}", uploads, *(clear or [])), stdin=stdin,
            env=dict(self.task.config.verifier.env) or None, max_output_bytes=VERIFY_OUTPUT_BYTES,
            wait_s=limit + _VERIFY_GRACE_S,
        )))

    async def close_shells(self) -> None:
        """Close every shell and the command channels of this sandbox (the keeper then stops the
        container); kills scheduled for cancelled commands get a moment to finish."""
        for shell in self._shells:
            await shell.close()
        self._shells.clear()
        await self._commands.close(self._config.docker_timeout_s)

    async def _put(self, files: dict[str, tuple[bytes, int]]) -> None:
        await self._put_archive(tar_of_files(files))

    async def _put_archive(self, archive: bytes) -> None:
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


def _size(spool: IO[bytes]) -> int:
    """Bytes in a rewound temporary file."""
    spool.seek(0, 2)
    size = spool.tell()
    spool.seek(0)
    return size
