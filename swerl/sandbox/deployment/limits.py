"""Disk bounds: per-trial budget in allocated blocks, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So :func:`watch_disk` measures every
``SandboxConfig.disk_poll_s`` seconds what the container's writable layer holds on disk and
kills the container once it passes ``[environment] storage_mb``; the trial then ends as
``disk_limit``, and a control run decides whose fault it is (a container over its own budget is
the attempt's: ``zero``). The bound is storage_mb plus what the container writes in one poll interval.

What is measured is the allocated blocks (``st_blocks``, hard links once) of overlay2's upper
folder, walked on this host (~1 ms for a trial's few files), so a sparse file of many GiB costs
what it really costs: next to nothing. Docker's own ``SizeRw`` (``GET /containers/json?size=1``)
adds apparent sizes, so a sparse file would pass the budget at no disk cost; it is used only when
the engine's data root is not visible here (a remote engine).

Per run: :func:`check_free_disk` refuses to start (exit 3) when Docker's data root has less
free space than ``SandboxConfig.min_free_disk_mb``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

import docker.errors

from swerl.errors import EnvironmentProblem, SandboxError

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.sandbox.runtime.sandbox import Sandbox

log = logging.getLogger(__name__)
MIB = 1 << 20


def writable_layer_bytes(client: docker.DockerClient, container_id: str) -> int:
    """Apparent bytes in the container's writable layer (Docker's ``SizeRw``; 0 when it reports none)."""
    rows = client.api.containers(all=True, filters={"id": container_id}, size=True)
    return int(rows[0].get("SizeRw") or 0) if rows else 0


def allocated_bytes(folder: str) -> int:
    """Bytes the files under ``folder`` hold on disk: ``st_blocks`` x 512 of every entry, each
    hard-linked file once, symlinks never followed; entries that vanish during the walk are skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def disk_usage_reader(client: docker.DockerClient, container_id: str) -> Callable[[], int]:
    """How the container's disk use is measured: the allocated blocks of its overlay2 upper folder
    when this host sees it, else Docker's ``SizeRw`` (apparent sizes, a remote engine's)."""
    driver = client.api.inspect_container(container_id).get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") == "overlay2" and upper and os.path.isdir(upper):
        return functools.partial(allocated_bytes, upper)
    return functools.partial(writable_layer_bytes, client, container_id)


async def watch_disk(call: DockerCaller, client: docker.DockerClient, sandbox: Sandbox, poll_s: float) -> None:
    """Until cancelled: every ``poll_s`` seconds compare the disk that the sandbox's current container
    (it changes in the clean room) holds with ``[environment] storage_mb``; past it, record why on
    ``sandbox.disk_exceeded`` and kill the container."""
    limit = sandbox.task.config.environment.storage_mb * MIB
    measured: str | None = None
    reader: Callable[[], int] | None = None
    while True:
        await asyncio.sleep(poll_s)
        container_id = sandbox.container_id
        try:
            if reader is None or measured != container_id:
                reader, measured = await call(disk_usage_reader, client, container_id), container_id
            used = await call(reader)
        except (SandboxError, docker.errors.NotFound) as err:  # the container is going away; the trial reports that itself
            log.debug("disk watch of %s: %s", container_id[:12], err)
            continue
        if used > limit:
            sandbox.disk_exceeded = (
                f"{sandbox.task.name}: the container holds {used // MIB} MiB on disk, over [environment] storage_mb = "
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
