"""``docker exec`` as a :class:`~swerl.sandbox.runtime.channel.CommandChannel`: one exec per
command, its timeout kept *inside* the container, and the kill by tag.

A command runs as the exec's own process ``[timeout -s KILL T] bash -c SCRIPT swerl ARGS``
(``timeout`` puts itself in a new process group and kills the whole group when T runs out)
with ``SWERL_EXEC=<tag>`` in its environment. If the output stream still does not end (a
daemonized grandchild holds it open), the caller kills every process carrying that tag
(:meth:`DockerExecChannel.kill`) and stops reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.runtime.channel import MARKER_ENV, Command, seconds_arg
from swerl.sandbox.runtime.streams import CappedOutput, read_frames
from swerl.sandbox.types import ExecResult

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller

log = logging.getLogger(__name__)

# $1: tag value. Kills every process whose environment carries SWERL_EXEC=$1.
_KILLER = (
    'for e in /proc/[0-9]*/environ; do grep -qz "^SWERL_EXEC=$1\\$" "$e" 2>/dev/null || continue; '
    'p=${e#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; done; true'
)


class DockerExecChannel:
    """Runs each command as its own ``docker exec`` in one container; never busy.

    Args:
        call: the caller of the container's engine (SDK calls and the exec streams).
        client: the SDK client of that engine.
        container_id: the container.
    """

    def __init__(self, call: DockerCaller, client: docker.DockerClient, container_id: str) -> None:
        self._call, self._client, self.container_id = call, client, container_id

    def can_take(self, command: Command) -> bool:
        """Always: every command gets its own exec (stdin of any size is streamed)."""
        return True

    async def run(self, command: Command) -> ExecResult:
        """Run ``command`` in a fresh exec and read its output for at most ``command.deadline_s``.

        Returns:
            ExecResult; ``exit_code`` None and ``timed_out`` True when the stream outlived the
            deadline (the process is *not* killed here).

        Raises:
            SandboxError: the container is gone or the daemon failed.
        """
        argv = ["bash", "-c", command.script, "swerl", *command.args]
        if command.timeout_s is not None:
            argv = ["timeout", "-s", "KILL", seconds_arg(command.timeout_s), *argv]
        env = {**(command.env or {}), MARKER_ENV: command.tag}
        start = time.monotonic()
        exec_id = (await self._call(
            self._client.api.exec_create, self.container_id, argv, stdout=True, stderr=True,
            stdin=command.stdin is not None, environment=env, workdir=command.workdir,
        ))["Id"]
        reader, writer = await self.open_stream(exec_id, tty=False)
        sink = CappedOutput(command.max_output_bytes)
        stream_done = True
        try:
            feeding = asyncio.gather(read_frames(reader, sink), _feed(writer, command.stdin))
            await asyncio.wait_for(feeding, max(command.deadline_s - (time.monotonic() - start), 0.1))
        except asyncio.TimeoutError:
            stream_done = False
        finally:
            writer.close()
        exit_code = await self._exit_code(exec_id) if stream_done else None
        if stream_done and exit_code is None:
            log.warning("exec in %s ended without an exit code", self.container_id[:12])
        return ExecResult(exit_code=exit_code, output=sink.text(), timed_out=not stream_done,
                          duration_s=time.monotonic() - start, truncated_bytes=sink.dropped)

    async def start_interactive(
        self, argv: list[str], env: dict[str, str], workdir: str | None, timeout_s: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Start ``argv`` with a TTY and return its stream: raw bytes out, stdin on the same
        socket (the persistent shell's terminal).

        Raises:
            SandboxError: the exec could not start within ``timeout_s`` seconds.
        """
        exec_id = (await self._call(
            self._client.api.exec_create, self.container_id, argv, stdin=True, tty=True, environment=env, workdir=workdir,
        ))["Id"]
        return await self.open_stream(exec_id, tty=True, timeout_s=timeout_s)

    async def open_stream(
        self, exec_id: str, tty: bool, timeout_s: float | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Start exec ``exec_id`` and return its upgraded (reader, writer): multiplexed 8-byte
        frames without a TTY, raw bytes (and stdin on the same socket) with one.

        Args:
            timeout_s: deadline for connecting and reading the response head, seconds (None:
                the caller's default).

        Raises:
            SandboxError: the daemon refused (e.g. the container is gone) or did not answer in time.
        """
        body = json.dumps({"Detach": False, "Tty": tty}).encode()
        limit = self._call.default_timeout_s if timeout_s is None else timeout_s
        return await self._call.endpoint.upgrade(f"exec/{exec_id}/start", body, limit)

    async def kill(self, tag: str) -> None:
        """Kill every process tagged ``SWERL_EXEC=tag`` in the container (best effort; a
        detached exec, so it works while the keeper is busy or broken)."""
        try:
            await self._call(self._run_detached, ["/bin/sh", "-c", _KILLER, "swerl-kill", tag])
        except SandboxError as err:
            log.debug("kill of exec %s in %s failed: %s", tag, self.container_id[:12], err)

    def close(self) -> None:
        """Nothing to release: each exec ends with its command."""

    def _run_detached(self, argv: list[str]) -> None:
        exec_id = self._client.api.exec_create(self.container_id, argv)["Id"]
        self._client.api.exec_start(exec_id)

    async def _exit_code(self, exec_id: str) -> int | None:
        # The stream can end a moment before the daemon records the exit code.
        for _ in range(50):
            info = await self._call(self._client.api.exec_inspect, exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.01)
        return None


async def _feed(writer: asyncio.StreamWriter, data: bytes | None) -> None:
    if data is None:
        return
    try:
        writer.write(data)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError as err:  # the process exited without reading everything
        log.debug("stdin of exec not fully written: %s", err)
