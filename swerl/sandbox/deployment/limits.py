"""Disk bounds: per-trial writable-layer budget, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So :func:`watch_disk` polls the container's
writable-layer size (``GET /containers/json?size=1``: the daemon's ``SizeRw``, a walk of the
container's upper dir; ~3 ms for a trial's few files here) every ``SandboxConfig.disk_poll_s``
seconds, and kills the container once it passes ``[environment] storage_mb``. The trial then
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


def writable_layer_bytes(client: docker.DockerClient, container_id: str) -> int:
    """Bytes in the container's writable layer (``SizeRw``; 0 when the daemon reports none)."""
    rows = client.api.containers(all=True, filters={"id": container_id}, size=True)
    return int(rows[0].get("SizeRw") or 0) if rows else 0


async def watch_disk(call: DockerCaller, client: docker.DockerClient, sandbox: Sandbox, poll_s: float) -> None:
    """Until cancelled: every ``poll_s`` seconds compare the sandbox's current container
    (it changes in the clean room) with ``[environment] storage_mb``; past it, record why on
    ``sandbox.disk_exceeded`` and kill the container."""
    limit = sandbox.task.config.environment.storage_mb * MIB
    while True:
        await asyncio.sleep(poll_s)
        container_id = sandbox.container_id
        try:
            used = await call(writable_layer_bytes, client, container_id)
        except SandboxError as err:  # the container is going away; the trial reports that itself
            log.debug("disk watch of %s: %s", container_id[:12], err)
            continue
        if used > limit:
            sandbox.disk_exceeded = (
                f"{sandbox.task.name}: the container wrote {used // MIB} MiB, over [environment] storage_mb = "
                f"{limit // MIB}; it was killed"
            )
            log.warning("%s", sandbox.disk_exceeded)
            with contextlib.suppress(Exception):
                await call(client.api.kill, container_id)
            return


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
