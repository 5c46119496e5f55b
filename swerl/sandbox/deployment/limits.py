"""Disk bounds: per-trial writable-layer budget, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So :class:`DiskWatch` polls the containers'
writable-layer sizes (``GET /containers/json?size=1``: the daemon's ``SizeRw``, a walk of each
container's upper dir; ~3 ms for a trial's few files here), one request per engine every
``SandboxConfig.disk_poll_s`` seconds, and kills the container once it passes ``[environment] storage_mb``. The trial then
ends as ``disk_limit`` (masked). The bound is storage_mb plus what the container writes in
one poll interval.

Per run: :func:`check_free_disk` refuses to start (exit 3) when Docker's data root has less
free space than ``SandboxConfig.min_free_disk_mb``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from typing import TYPE_CHECKING

from swerl.errors import EnvironmentProblem, SandboxError

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.sandbox.runtime.sandbox import Sandbox

log = logging.getLogger(__name__)
MIB = 1 << 20


def writable_layer_bytes(client: docker.DockerClient, labels: dict[str, str]) -> dict[str, int]:
    """Bytes in the writable layer (``SizeRw``; 0 when the daemon reports none) of every
    container carrying ``labels``, by container id: one request for a whole run's containers."""
    rows = client.api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]}, size=True)
    return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}


class DiskWatch:
    """One engine's watch of its sandboxes' disk: every ``poll_s`` seconds a single listing of
    this run's containers with their sizes (not one request per sandbox: at 512 sandboxes in
    flight that would be 256 requests a second), each watched sandbox's current container
    (it changes in the clean room) compared with its ``[environment] storage_mb``; past it,
    ``sandbox.disk_exceeded`` says why and the container is killed.

    Args:
        labels: the run's owner labels (every container of this process carries them).
    """

    def __init__(self, call: DockerCaller, client: docker.DockerClient, labels: dict[str, str], poll_s: float) -> None:
        self._call, self._client, self._labels, self.poll_s = call, client, labels, poll_s
        self._watched: set[Sandbox] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, sandbox: Sandbox) -> None:
        """Watch ``sandbox`` until :meth:`discard`; the polling starts with the first one."""
        self._watched.add(sandbox)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="swerl-disk-watch")

    def discard(self, sandbox: Sandbox) -> None:
        """Stop watching ``sandbox``."""
        self._watched.discard(sandbox)

    async def _poll(self) -> None:
        while self._watched:
            await asyncio.sleep(self.poll_s)
            try:
                sizes = await self._call(writable_layer_bytes, self._client, self._labels)
            except SandboxError as err:  # the engine is busy or going away; the trials report that themselves
                log.debug("disk watch: %s", err)
                continue
            for sandbox in list(self._watched):
                used, limit = sizes.get(sandbox.container_id, 0), sandbox.task.config.environment.storage_mb * MIB
                if used > limit and sandbox.disk_exceeded is None:
                    sandbox.disk_exceeded = (
                        f"{sandbox.task.name}: the container wrote {used // MIB} MiB, over [environment] storage_mb = "
                        f"{limit // MIB}; it was killed"
                    )
                    log.warning("%s", sandbox.disk_exceeded)
                    with contextlib.suppress(Exception):
                        await self._call(self._client.api.kill, sandbox.container_id)

    async def close(self) -> None:
        """Stop polling."""
        self._watched.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def check_free_disk(client: docker.DockerClient, needed_mb: int) -> None:
    """Raise when Docker's data root (``docker info`` DockerRootDir) has under ``needed_mb`` MiB free.

    A data root this host cannot see (a remote daemon) is not checked.

    Raises:
        EnvironmentProblem: (exit 3) naming the path, the free and the needed MiB.
    """
    if needed_mb <= 0:
        return
    root = client.info().get("DockerRootDir") or "/var/lib/docker"
    try:
        free_mb = shutil.disk_usage(root).free // MIB
    except OSError as err:
        log.debug("free disk of %s not checked: %s", root, err)
        return
    if free_mb < needed_mb:
        raise EnvironmentProblem(
            f"{root}: {free_mb} MiB free on Docker's data root, swerl needs {needed_mb} MiB "
            "(SandboxConfig.min_free_disk_mb); free space (`swerl sandbox gc`, remove unused images) or lower the threshold"
        )
