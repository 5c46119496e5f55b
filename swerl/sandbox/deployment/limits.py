"""Disk bounds: per-trial budget in allocated blocks and inodes, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So one :class:`DiskWatch` per engine measures every
``SandboxConfig.disk_poll_s`` seconds what each watched container's writable layer holds on disk
and kills a container once it passes ``[environment] storage_mb``; the trial then ends as
``disk_limit``, and a control run decides whose fault it is (a container over its own budget is
the attempt's: ``zero``). The bound is storage_mb plus what the container writes in one poll interval.

What is charged (:class:`DiskUse`) is the larger of two readings of overlay2's upper folder, both
taken on this host by GNU ``du`` (any depth; a few ms for a trial's files, ~0.2 s of CPU each for
100,000 entries): its allocated blocks (``st_blocks``, hard links once), so a sparse file of many
GiB costs what it really costs, next to nothing; and its entries (inodes: files, folders, links,
whiteouts) times the host file system's bytes per inode, so empty files cost their share of the
file system's fixed supply of inodes: a container that holds 1% of the inodes holds 1% of the disk.
Without that, an agent creating empty files (thousands a second) could use up the host's inodes
at almost no cost in blocks, and every container start after it would fail (masked episodes).

Docker's own ``SizeRw`` (``GET /containers/json?size=1``) adds apparent sizes, so a sparse file
would pass the budget at no disk cost, and it cannot count inodes; it is used only for
containers whose upper folder this host cannot see (a remote engine: bounded by bytes alone), and
then in one listing of the run's containers per engine and poll (not one request per sandbox: at
512 sandboxes in flight that would be 256 requests a second).

Per run: :func:`check_free_disk` refuses to start (exit 3) when Docker's data root has less
free space than ``SandboxConfig.min_free_disk_mb``, its free inodes counted the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import docker.errors

from swerl.errors import EnvironmentProblem, SandboxError

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller
    from swerl.sandbox.runtime.sandbox import Sandbox

log = logging.getLogger(__name__)
MIB = 1 << 20
# mke2fs's default inode_ratio for ext4 (mke2fs.conf(5)): the fallback for file systems that report no inode total.
DEFAULT_BYTES_PER_INODE = 16384


@dataclass(frozen=True)
class DiskUse:
    """What one container's writable layer holds, as the watch charges it against its budget.

    Attributes:
        disk_bytes: allocated bytes (``du -B1``), or ``SizeRw`` (apparent bytes) where the upper
            folder is out of this host's sight.
        entries: inodes in the writable layer (``du --inodes``); None where they cannot be counted (``SizeRw``).
        bytes_per_inode: the host file system's bytes of disk per inode (:func:`bytes_per_inode`).
    """

    disk_bytes: int
    entries: int | None = None
    bytes_per_inode: int = DEFAULT_BYTES_PER_INODE

    @property
    def charged(self) -> int:
        """Bytes charged: ``max(disk_bytes, entries * bytes_per_inode)``."""
        return max(self.disk_bytes, (self.entries or 0) * self.bytes_per_inode)

    def describe(self) -> str:
        """Which bound is the larger, in words: ``holds 80 MiB on disk`` or ``holds 4,012 files and
        folders (= 63 MiB at the file system's 15.7 KiB per inode)``."""
        if self.entries is not None and self.entries * self.bytes_per_inode > self.disk_bytes:
            return (f"holds {self.entries:,} files and folders (= {_size(self.entries * self.bytes_per_inode)} at the "
                    f"file system's {self.bytes_per_inode / 1024:.1f} KiB per inode)")
        return f"holds {self.disk_bytes // MIB} MiB on disk"


def _size(n: int) -> str:
    """``n`` bytes as whole MiB, or GiB with one decimal from 1 GiB on."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n // MIB} MiB"


def bytes_per_inode(folder: str) -> int:
    """Bytes of disk per inode of the file system holding ``folder``: ``f_blocks * f_frsize /
    f_files`` of ``statvfs(2)`` (ext4: mke2fs's inode_ratio, 16384 by default).

    A file system with dynamic inodes that reports no total (``f_files`` 0: btrfs) gets
    :data:`DEFAULT_BYTES_PER_INODE`: its inodes take metadata space that ``du`` does not count
    and each one lengthens the watch's own walk, so they keep a price (a 10 GiB budget still
    allows 655,360 entries). xfs reports a total (its ``imaxpct`` share of the disk) and is
    charged by it. Raises OSError when ``folder`` cannot be read.
    """
    st = os.statvfs(folder)
    return max(1, st.f_blocks * st.f_frsize // st.f_files) if st.f_files else DEFAULT_BYTES_PER_INODE


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
        PartialMeasure: ``du`` skipped entries (a folder renamed mid-walk); its reading is a lower bound.
    """
    total, whole = _du(folder, "-B1")
    if not whole:
        raise PartialMeasure(DiskUse(total))
    return total


def layer_use(folder: str, ratio: int) -> DiskUse:
    """Allocated bytes (:func:`allocated_bytes`) and entries (files, folders, links, devices; hard
    links once; GNU ``du --inodes -s``, any depth) of the upper ``folder``, with ``ratio`` bytes per
    inode. GNU ``du`` counts one or the other, so this is two walks of the folder (~0.2 s of CPU
    each per 100,000 entries, ~1.5 ms for a trial's few dozen).

    Raises:
        OSError: either ``du`` printed no total.
        PartialMeasure: either ``du`` skipped entries; its ``use`` holds both readings, each a lower bound.
    """
    (used, whole_bytes), (entries, whole_entries) = _du(folder, "-B1"), _du(folder, "--inodes")
    use = DiskUse(used, entries, ratio)
    if not (whole_bytes and whole_entries):
        raise PartialMeasure(use)
    return use


def _du(folder: str, unit: str) -> tuple[int, bool]:
    """GNU ``du -s -x`` total of ``folder`` in ``unit`` (``-B1``: bytes, ``--inodes``: entries),
    and whether it read every entry (0, True for a folder already gone). Raises OSError: no total."""
    if not os.path.isdir(folder):  # the container was removed between two polls: nothing left on disk
        return 0, True
    proc = subprocess.run(["du", "-s", unit, "-x", folder], capture_output=True, text=True, timeout=600)
    total = proc.stdout.split("\t", 1)[0].strip()
    if not total.isdigit():
        raise OSError(f"du {unit} {folder}: {proc.stderr.strip()[-200:] or 'no total'}")
    return int(total), proc.returncode == 0  # nonzero: it skipped what it could not read (renamed mid-walk)


class PartialMeasure(OSError):
    """``du`` printed a total but skipped entries; ``use`` is a lower bound of the disk in use."""

    def __init__(self, use: DiskUse) -> None:
        super().__init__(f"du skipped entries (a lower bound: {use.charged} bytes)")
        self.use = use


def local_reader(client: docker.DockerClient, container_id: str) -> Callable[[], DiskUse] | None:
    """How this host measures the container's disk: :func:`layer_use` of its overlay2 upper folder
    when this host sees it, else None (the engine's ``SizeRw`` is read instead)."""
    driver = client.api.inspect_container(container_id).get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") == "overlay2" and upper and os.path.isdir(upper):
        return functools.partial(layer_use, upper, bytes_per_inode(upper))
    return None


def _measure_all(readers: dict[str, Callable[[], DiskUse]],
                 last: dict[str, DiskUse] | None = None) -> dict[str, DiskUse]:
    """Use by container id of those ``readers`` that measured; a failing one is left out. A partial
    reading (entries skipped) never lowers a container's charge below its ``last`` reading: a
    container cannot hide its disk by renaming folders while it is measured."""
    used, last = {}, last or {}
    for cid, reader in readers.items():
        try:
            used[cid] = reader()
        except PartialMeasure as err:
            before = last.get(cid)
            used[cid] = before if before is not None and before.charged > err.use.charged else err.use
        except Exception as err:  # noqa: BLE001 - whatever the container's files provoke, the others are measured
            log.warning("disk watch of %s: %s: %s", cid[:12], type(err).__name__, err)
    return used


class DiskWatch:
    """One engine's watch of its sandboxes' disk: every ``poll_s`` seconds each watched sandbox's
    current container (it changes in the clean room) is measured (:class:`DiskUse`: allocated blocks
    and inodes where this host sees its upper folder, else one ``SizeRw`` listing of the run's
    containers for all the others)
    and compared with its ``[environment] storage_mb``; past it, ``sandbox.disk_exceeded`` says why
    and the container is killed.

    Args:
        labels: the run's owner labels (every container of this process carries them).
    """

    def __init__(self, call: DockerCaller, client: docker.DockerClient, labels: dict[str, str], poll_s: float) -> None:
        self._call, self._client, self._labels, self.poll_s = call, client, labels, poll_s
        self._watched: set[Sandbox] = set()
        self._readers: dict[str, Callable[[], DiskUse] | None] = {}  # container id -> its local reader
        self._last: dict[str, DiskUse] = {}  # container id -> use at the last poll
        self._task: asyncio.Task[None] | None = None

    def add(self, sandbox: Sandbox) -> None:
        """Watch ``sandbox`` until :meth:`discard`; the polling starts with the first one."""
        self._watched.add(sandbox)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="swerl-disk-watch")

    def discard(self, sandbox: Sandbox) -> None:
        """Stop watching ``sandbox``."""
        self._watched.discard(sandbox)

    async def _usage(self, watched: list[Sandbox]) -> dict[str, DiskUse]:
        """Use by container id of the ``watched`` sandboxes' current containers."""
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
            used.update({cid: DiskUse(n) for cid, n in sizes.items() if cid in ids and cid not in local})
        self._last = dict(used)
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
                use, limit = used_by_id.get(sandbox.container_id), sandbox.task.config.environment.storage_mb * MIB
                if use is not None and use.charged > limit and sandbox.disk_exceeded is None:
                    sandbox.disk_exceeded = (
                        f"{sandbox.task.name}: the container {use.describe()}, over "
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
    """Raise when Docker's data root (``docker info`` DockerRootDir) has under ``needed_mb`` MiB free,
    its free inodes counted as disk at :func:`bytes_per_inode` (``f_favail`` x that ratio), as the
    watch counts them: a data root out of inodes is full whatever its free blocks.

    A data root this host cannot see (a remote daemon) is not checked.

    Raises:
        EnvironmentProblem: (exit 3) naming the path, the free and the needed MiB.
    """
    if needed_mb <= 0:
        return
    root = client.info().get("DockerRootDir") or "/var/lib/docker"
    try:
        st = os.statvfs(root)
        ratio = bytes_per_inode(root)
    except OSError as err:
        log.debug("free disk of %s not checked: %s", root, err)
        return
    free_mb, said = st.f_bavail * st.f_frsize // MIB, ""
    if st.f_files and st.f_favail * ratio // MIB < free_mb:
        free_mb = st.f_favail * ratio // MIB
        said = f" (its {st.f_favail:,} free inodes at {ratio / 1024:.1f} KiB each)"
    if free_mb < needed_mb:
        raise EnvironmentProblem(
            f"{root}: {free_mb} MiB free on Docker's data root{said}, swerl needs {needed_mb} MiB "
            "(SandboxConfig.min_free_disk_mb); free space (`swerl sandbox gc`, remove unused images) or lower the threshold"
        )
