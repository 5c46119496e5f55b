"""One trial's container and what can be done in it: exec, files, a persistent shell, verify.

A :class:`Sandbox` is handed out by ``SandboxManager.sandbox(task)``, which owns its
lifecycle (start from the warm pool, removal in ``finally``). The task's tests are not in
the container until :meth:`Sandbox.verify` uploads them.
"""

from __future__ import annotations

import logging
import shlex
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import docker.errors

from swerl.errors import SandboxError
from swerl.sandbox.docker_api import sandbox_error
from swerl.sandbox.execution import (
    STREAM_GRACE_S,
    exec_argv,
    exec_command,
    file_from_tar,
    kill_exec,
    tar_of_dir,
    tar_of_files,
)
from swerl.sandbox.keeper import KeeperChannel
from swerl.sandbox.models import ExecResult, Outcome, SandboxConfig, VerifierResult
from swerl.sandbox.shell import Shell
from swerl.sandbox.verifier import VERIFY_SCRIPT, parse_sections, verdict

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.tasks.models import Task

log = logging.getLogger(__name__)
T = TypeVar("T")
_VERIFY_GRACE_S = 10.0
KEEPER_MAX_STDIN_BYTES = 8 * 1024 * 1024


class Sandbox:
    """A started container bound to one task and one trial.

    Attributes:
        task: the task it runs.
        container_id: Docker id of the container.
        timings: seconds per phase (``build_s``, ``start_s``, ...) filled as the trial goes.
    """

    def __init__(
        self, call: DockerCaller, client: docker.DockerClient, config: SandboxConfig, task: Task, container_id: str
    ) -> None:
        self._call, self._client, self._config = call, client, config
        self.task = task
        self.container_id = container_id
        self._shells: list[Shell] = []
        self._keeper: KeeperChannel | None = None
        self._keeper_failed = False

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
        channel = await self._channel(stdin)
        if channel is None:  # busy with another command, or no keeper: a plain docker exec
            return await self._guard(exec_command(
                self._call, self._client, self.container_id, command, timeout_s,
                self._config.max_output_bytes, env, workdir, stdin,
            ))
        script = _prelude(env, workdir) + command.encode("utf-8", "surrogateescape")
        result, token = await self._guard(channel.run(
            script, stdin or b"", timeout_s, timeout_s + STREAM_GRACE_S, self._config.max_output_bytes
        ))
        # `timeout -s KILL` kills its own group too, so the command ends with 137 (or 124) at the deadline.
        timed_out = result.timed_out or (result.exit_code in (124, 137) and result.duration_s >= timeout_s - 0.05)
        if timed_out:  # also get what left the process group (setsid, daemons)
            await kill_exec(self._call, self._client, self.container_id, token)
            return result.model_copy(update={"exit_code": None, "timed_out": True})
        return result

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
            raise sandbox_error(f"{path}: no such file in the sandbox", "daemon_error") from err
        return file_from_tar(data, max_bytes)

    async def upload_dir(self, local_dir: Path, dest: str) -> None:
        """Copy ``local_dir``'s contents under absolute ``dest`` (created if missing)."""
        archive = tar_of_dir(local_dir, dest)
        await self._put_archive(archive)

    async def open_shell(self, env: dict[str, str] | None = None, workdir: str | None = None) -> Shell:
        """A persistent ``bash -i`` (see :class:`~swerl.sandbox.shell.Shell`); closed with the sandbox."""
        shell = await Shell.open(
            self._call, self._client, self.container_id, env=env, workdir=workdir,
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
            raise sandbox_error(f"{self.task.path}: no solution/solve.sh", "start_error")
        limit = timeout_s if timeout_s is not None else self.task.config.agent.timeout_sec
        # The files ride on the exec's stdin (one round trip instead of a copy plus an exec).
        command = "tar -x -C / -f - && exec bash /solution/solve.sh"
        return await self.exec(command, timeout_s=limit, stdin=tar_of_dir(solution, "/solution"))

    async def verify(self, timeout_s: float | None = None) -> VerifierResult:
        """Run the task's hidden tests (spec §2) and read the reward.

        Kills every process left in the container, wipes ``/logs/verifier``, uploads
        ``tests/`` to ``/tests``, runs ``bash /tests/test.sh`` (``[verifier] env`` applied)
        under ``timeout_s`` (default: ``SandboxConfig.verifier_timeout_s``, else task.toml
        ``[verifier] timeout_sec``), then reads
        ``reward.txt`` else ``reward.json``. Never raises for a misbehaving verifier: the
        outcome says what happened.

        Raises:
            SandboxError: only when the container/daemon fails (``outcome`` daemon_error/oom).
        """
        limit = timeout_s or self._config.verifier_timeout_s or self.task.config.verifier.timeout_sec
        began = time.monotonic()
        raw = await self._run_verify_script("-", limit, stdin=tar_of_dir(self.task.tests_dir, ""))
        if "\x1enotar\x1f" in raw.output:  # no tar in the image: copy the tests in first
            staging = f"/tmp/.swerl-verify-{uuid.uuid4().hex}"
            await self.upload_dir(self.task.tests_dir, f"{staging}/tests")
            raw = await self._run_verify_script(staging, limit)
        if raw.timed_out:  # the stream outlived the deadline: kill everything from outside
            await exec_argv(self._call, self._client, self.container_id, ["sh", "-c", "kill -KILL -1"], 10.0, 4096)
        return verdict(parse_sections(raw.output), raw.timed_out, limit, time.monotonic() - began)

    async def _run_verify_script(self, source: str, limit: float, stdin: bytes | None = None) -> ExecResult:
        env = dict(self.task.config.verifier.env) or None
        channel = await self._channel(stdin)
        if channel is not None:  # no in-container timeout here: the script kills all but itself and PID 1
            script = _prelude(env, None) + f"set -- {shlex.quote(source)} {limit:.3f}\n".encode() + VERIFY_SCRIPT.encode()
            result, _ = await self._guard(channel.run(script, stdin or b"", None, limit + _VERIFY_GRACE_S, 256 * 1024))
            return result
        argv = ["/bin/sh", "-c", VERIFY_SCRIPT, "swerl-verify", source, f"{limit:.3f}"]
        return await self._guard(exec_argv(
            self._call, self._client, self.container_id, argv, limit + _VERIFY_GRACE_S, 256 * 1024,
            env=env, stdin=stdin,
        ))

    async def close_shells(self) -> None:
        """Close every shell and the keeper channel of this sandbox."""
        for shell in self._shells:
            await shell.close()
        self._shells.clear()
        if self._keeper is not None:
            self._keeper.close()

    async def _channel(self, stdin: bytes | None = None) -> KeeperChannel | None:
        """The keeper channel when free (and ``stdin`` small); None means use ``docker exec``."""
        if stdin is not None and len(stdin) > KEEPER_MAX_STDIN_BYTES:
            return None  # the keeper buffers stdin in one `dd` block; stream big inputs instead
        if self._keeper is None and not self._keeper_failed:
            try:
                self._keeper = await KeeperChannel.attach(self._client, self.container_id, self._config.docker_timeout_s)
            except SandboxError as err:
                log.debug("no keeper channel for %s: %s", self.container_id[:12], err)
                self._keeper_failed = True
        if self._keeper is None or self._keeper.busy:
            return None
        return self._keeper

    async def _put(self, files: dict[str, tuple[bytes, int]]) -> None:
        await self._put_archive(tar_of_files(files))

    async def _put_archive(self, archive: bytes) -> None:
        ok = await self._guard(self._call(self._client.api.put_archive, self.container_id, "/", archive))
        if not ok:
            raise sandbox_error("copying files into the sandbox failed", "daemon_error")

    async def _guard(self, awaitable: Awaitable[T]) -> T:
        """Await a Docker operation; if it fails because the container died, say why (oom or not)."""
        try:
            return await awaitable
        except (docker.errors.NotFound, SandboxError) as err:
            if getattr(err, "outcome", Outcome.daemon_error) is not Outcome.daemon_error:
                raise
            raise await self._container_failure(err) from err

    async def _container_failure(self, err: Exception) -> Exception:
        """Say why the container vanished: ``oom`` when the kernel killed it for memory."""
        try:
            state = (await self._call(self._client.api.inspect_container, self.container_id))["State"]
        except Exception:  # noqa: BLE001 - the container may be gone entirely
            state = {}
        if state.get("Running"):
            return err if isinstance(err, SandboxError) else sandbox_error(str(err), "daemon_error")
        outcome = Outcome.oom if state.get("OOMKilled") else Outcome.daemon_error
        return sandbox_error(f"the sandbox container stopped ({outcome.value}): {err}", outcome.value)


def _prelude(env: dict[str, str] | None, workdir: str | None) -> bytes:
    """Shell lines that set the environment and working directory of a keeper command."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items() if k.isidentifier()]
    if workdir:
        lines.append(f"cd -- {shlex.quote(workdir)} || exit 1")
    return ("\n".join(lines) + "\n").encode() if lines else b""
