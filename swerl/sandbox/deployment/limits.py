"""Disk bounds: per-trial budget in allocated blocks, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So one :class:`DiskWatch` per engine measures every
``SandboxConfig.disk_poll_s`` seconds what each watched container's writable layer holds on disk
and kills a container once it passes ``[environment] storage_mb``; the trial then ends as
``disk_limit``, and a control run decides whose fault it is (a container over its own budget is
the attempt's: ``zero``). The bound is storage_mb plus what the container writes in one poll interval.

What is measured is the allocated blocks (``st_blocks``, hard links once) of overlay2's upper
folder, measured on this host by GNU `du` (any depth; a few ms for a trial's files), so a sparse file of many GiB costs
what it really costs: next to nothing. Docker's own ``SizeRw`` (``GET /containers/json?size=1``)
adds apparent sizes, so a sparse file would pass the budget at no disk cost; it is used only for
containers whose upper folder this host cannot see (a remote engine), and then in one listing of
the run's containers per engine and poll (not one request per sandbox: at 512 sandboxes in
flight that would be 256 requests a second).

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
import subprocess
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


def writable_layer_bytes(client: docker.DockerClient, labels: dict[str, str]) -> dict[str, int]:
    """Bytes in the writable layer (``SizeRw``; 0 when the daemon reports none) of every
    container carrying ``labels``, by container id: one request for a whole run's containers."""
    rows = client.api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]}, size=True)
    return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}


def allocated_bytes(folder: str) -> int:
    """Bytes the files under ``folder`` hold on disk, as GNU ``du -s -B1`` counts them: allocated
    blocks, each hard-linked file once, links never followed, a tree of any depth (``du`` walks
    past PATH_MAX; a Python walk would stop there or at its recursion limit).

    Raises:
        OSError: ``du`` printed no total; the caller falls back to ``SizeRw``. A folder already gone is 0.
    """
    if not os.path.isdir(folder):  # the container was removed between two polls: nothing left on disk
        return 0
    proc = subprocess.run(["du", "-s", "-B1", "-x", folder], capture_output=True, text=True, timeout=600)
    total = proc.stdout.split("\t", 1)[0].strip()
    if not total.isdigit():
        raise OSError(f"du {folder}: {proc.stderr.strip()[-200:] or 'no total'}")
    if proc.returncode != 0:  # it skipped what it could not read (a folder renamed mid-walk): a lower bound
        raise PartialMeasure(int(total))
    return int(total)


class PartialMeasure(OSError):
    """``du`` printed a total but skipped entries; ``total`` is a lower bound of the disk in use."""

    def __init__(self, total: int) -> None:
        super().__init__(f"du skipped entries (a lower bound: {total} bytes)")
        self.total = total


def local_reader(client: docker.DockerClient, container_id: str) -> Callable[[], int] | None:
    """How this host measures the container's disk: the allocated blocks of its overlay2 upper
    folder when this host sees it, else None (the engine's ``SizeRw`` is read instead)."""
    driver = client.api.inspect_container(container_id).get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") == "overlay2" and upper and os.path.isdir(upper):
        return functools.partial(allocated_bytes, upper)
    return None


def _measure_all(readers: dict[str, Callable[[], int]], last: dict[str, int] | None = None) -> dict[str, int]:
    """Bytes by container id of those ``readers`` that measured; a failing one is left out. A partial
    reading (entries skipped) never lowers a container's count below its ``last`` reading: a
    container cannot hide its disk by renaming folders while it is measured."""
    used, last = {}, last or {}
    for cid, reader in readers.items():
        try:
            used[cid] = reader()
        except PartialMeasure as err:
            used[cid] = max(err.total, last.get(cid, 0))
        except Exception as err:  # noqa: BLE001 - whatever the container's files provoke, the others are measured
            log.warning("disk watch of %s: %s: %s", cid[:12], type(err).__name__, err)
    return used


class DiskWatch:
    """One engine's watch of its sandboxes' disk: every ``poll_s`` seconds each watched sandbox's
    current container (it changes in the clean room) is measured (allocated blocks where this host
    sees its upper folder, else one ``SizeRw`` listing of the run's containers for all the others)
    and compared with its ``[environment] storage_mb``; past it, ``sandbox.disk_exceeded`` says why
    and the container is killed.

    Args:
        labels: the run's owner labels (every container of this process carries them).
    """

    def __init__(self, call: DockerCaller, client: docker.DockerClient, labels: dict[str, str], poll_s: float) -> None:
        self._call, self._client, self._labels, self.poll_s = call, client, labels, poll_s
        self._watched: set[Sandbox] = set()
        self._readers: dict[str, Callable[[], int] | None] = {}  # container id -> its local reader
        self._last: dict[str, int] = {}  # container id -> bytes at the last poll
        self._task: asyncio.Task[None] | None = None

    def add(self, sandbox: Sandbox) -> None:
        """Watch ``sandbox`` until :meth:`discard`; the polling starts with the first one."""
        self._watched.add(sandbox)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="swerl-disk-watch")

    def discard(self, sandbox: Sandbox) -> None:
        """Stop watching ``sandbox``."""
        self._watched.discard(sandbox)

    async def _usage(self, watched: list[Sandbox]) -> dict[str, int]:
        """Bytes on disk by container id of the ``watched`` sandboxes' current containers."""
        ids = {sb.container_id for sb in watched}
        self._readers = {cid: r for cid, r in self._readers.items() if cid in ids}
        for cid in ids - self._readers.keys():
            with contextlib.suppress(SandboxError, docker.errors.NotFound):  # going away: measured next time
                self._readers[cid] = await self._call(local_reader, self._client, cid)
        local = {cid: r for cid, r in self._readers.items() if r is not None}
        used = await asyncio.to_thread(_measure_all, local, self._last) if local else {}
        for cid in local.keys() - used.keys():  # not measurable here: the engine's SizeRw for it from now on
            self._readers[cid] = None
        if any(cid in self._readers and self._readers[cid] is None for cid in ids):
            sizes = await self._call(writable_layer_bytes, self._client, self._labels)
            used.update({cid: n for cid, n in sizes.items() if cid in ids and cid not in local})
        self._last = {cid: n for cid, n in used.items()}
        return used

    async def _poll(self) -> None:
        while self._watched:
            await asyncio.sleep(self.poll_s)
            watched = list(self._watched)
            try:
                used_by_id = await self._usage(watched)
            except SandboxError as err:  # the engine is busy or going away; the trials report that themselves
                log.debug("disk watch: %s", err)
                continue
            except Exception:  # noqa: BLE001 - the watch must outlive anything a container can provoke
                log.exception("disk watch: measuring failed; measuring again in %g s", self.poll_s)
                continue
            for sandbox in watched:
                used, limit = used_by_id.get(sandbox.container_id, 0), sandbox.task.config.environment.storage_mb * MIB
                if used > limit and sandbox.disk_exceeded is None:
                    sandbox.disk_exceeded = (
                        f"{sandbox.task.name}: the container holds {used // MIB} MiB on disk, over "
                        f"[environment] storage_mb = {limit // MIB}; it was killed"
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
