"""The one place a command's transport is chosen, its timeout rule applied, and what it left
behind killed.

:class:`Commands` holds one container's two channels: the keeper (attached before the
container started, or on first use) and ``docker exec``. Each command goes to the keeper when
it can take it (free, stdin small enough), else to ``docker exec``. After either, the same
rule (:func:`~swerl.sandbox.runtime.channel.killed_by_timeout`) says whether the timeout
killed it; then, or when the wait was cancelled, every process carrying its tag is killed by
a detached ``docker exec``, so nothing it started outlives it and the keeper is free again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.runtime.channel import Command, CommandChannel, killed_by_timeout
from swerl.sandbox.runtime.execution import DockerExecChannel
from swerl.sandbox.runtime.keeper import KeeperChannel
from swerl.sandbox.types import ExecResult

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller

log = logging.getLogger(__name__)


class Commands:
    """Runs commands in one container over its keeper, else ``docker exec``.

    Args:
        call, client: the caller and SDK client of the container's engine.
        container_id: the container.
        keeper: its keeper channel; None attaches on first use (once; a failed attach means
            ``docker exec`` from then on).
        attach_timeout_s: deadline of that attach, seconds.
    """

    def __init__(
        self, call: DockerCaller, client: docker.DockerClient, container_id: str,
        keeper: KeeperChannel | None, attach_timeout_s: float,
    ) -> None:
        self._call = call
        self.container_id = container_id
        self.docker_exec = DockerExecChannel(call, client, container_id)
        self._keeper = keeper
        self._keeper_failed = False
        self._attach_timeout_s = attach_timeout_s
        self._kills: set[asyncio.Task[None]] = set()

    async def run(self, command: Command) -> ExecResult:
        """Run ``command`` on the channel that can take it and wait for it.

        Returns:
            ExecResult; ``timed_out`` True and ``exit_code`` None when its timeout killed it
            or the wait ran out (its tagged processes are killed before this returns).

        Raises:
            SandboxError: the transport failed (no ``outcome`` said here unless the daemon did).
            asyncio.CancelledError: the wait was cancelled; its tagged processes are being
                killed in the background (:meth:`close` waits for that).
        """
        channel = await self.channel_for(command)
        try:
            result = await channel.run(command)
        except asyncio.CancelledError:
            kill = asyncio.create_task(self.docker_exec.kill(command.tag))
            self._kills.add(kill)
            kill.add_done_callback(self._kills.discard)
            raise
        if killed_by_timeout(result, command.timeout_s):  # also get what left the process group (setsid, daemons)
            await self.docker_exec.kill(command.tag)
            return result.model_copy(update={"exit_code": None, "timed_out": True})
        return result

    async def channel_for(self, command: Command) -> CommandChannel:
        """The keeper when it can take ``command``, else ``docker exec``."""
        if self._keeper is None and not self._keeper_failed:
            try:
                self._keeper = await KeeperChannel.attach(self._call.endpoint, self.container_id, self._attach_timeout_s)
            except SandboxError as err:
                log.debug("no keeper channel for %s: %s", self.container_id[:12], err)
                self._keeper_failed = True
        if self._keeper is not None and self._keeper.can_take(command):
            return self._keeper
        return self.docker_exec

    async def close(self, timeout_s: float) -> None:
        """Give kills of cancelled commands up to ``timeout_s`` seconds to finish, then close the
        keeper channel (the keeper sees EOF and the container stops)."""
        if self._kills:
            await asyncio.wait(set(self._kills), timeout=timeout_s)
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
