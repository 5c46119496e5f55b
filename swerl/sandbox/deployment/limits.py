"""Disk bounds: per-trial budget in allocated blocks and inodes, and free space on Docker's data root.

Per trial: overlay2 on ext4 (this engine) has no per-container size quota
(``--storage-opt size`` needs xfs with project quotas), and tmpfs mounts would bound only
the folders named, not ``/usr`` or ``/root``. So one :class:`DiskWatch` per engine measures every
``SandboxConfig.disk_poll_s`` seconds what each watched container's writable layer holds on disk
and kills a container once it passes ``[environment] storage_mb``; the trial then ends as
``disk_limit``, and a control run decides whose fault it is (a container over its own budget is
the attempt's: ``zero``). The bound is storage_mb plus what the container writes in one poll interval.

What is charged (:class:`DiskUse`) is the larger of two readings of overlay2's upper folder, both
taken on this host by GNU ``du`` (:func:`layers_use`: two processes per poll for all of an
engine's containers, any depth; ~0.24 s of CPU each per 100,000 entries): its allocated blocks
(``st_blocks``, hard links once), so a sparse file of many GiB costs what it really costs, next
to nothing; and its entries (inodes: files, folders, links, whiteouts) times the host file
system's bytes per inode, so empty files cost their share of the file system's fixed supply of
inodes: a container that holds 1% of the inodes holds 1% of the disk. Without that, an agent creating empty files (thousands a second) could use up the host's inodes
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
import logging
import os
import re
import subprocess
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


@dataclass(frozen=True)
class Layer:
    """A container's writable layer as this host sees it: overlay2's upper folder and the bytes
    per inode of the file system holding it (:func:`bytes_per_inode`)."""

    upper: str
    bytes_per_inode: int


def local_layer(client: docker.DockerClient, container_id: str) -> Layer | None:
    """The container's :class:`Layer` when this host sees its overlay2 upper folder, else None
    (the engine's ``SizeRw`` is read instead)."""
    driver = client.api.inspect_container(container_id).get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") == "overlay2" and upper and os.path.isdir(upper):
        return Layer(upper, bytes_per_inode(upper))
    return None


def layers_use(layers: dict[str, Layer]) -> tuple[dict[str, DiskUse], set[str]]:
    """What each of ``layers`` (by container id) holds, and the ids whose reading is partial.

    Two GNU ``du -s -x`` processes for all the layers: one counts allocated bytes (``-B1``:
    ``st_blocks``, each hard-linked file once, links never followed, a tree of any depth: ``du``
    walks past PATH_MAX, where a Python walk would stop, or at its recursion limit), one counts
    entries (``--inodes``: files, folders, links, devices, hard links once); GNU ``du`` counts one
    or the other, never both. Cost, measured on this repository's 2-core host: ~0.24 s of CPU per
    ``du`` per 100,000 entries; for 64 trial containers of ~20 entries, 12 ms of CPU per poll
    for both counts in two processes, 152 ms in 128 (one per container and count).

    Returns:
        (use by id, ids whose ``du`` skipped entries: a folder renamed mid-walk, so a lower bound).
        A folder already gone is 0; one ``du`` printed no total for is left out (its container
        falls back to ``SizeRw``).
    """
    by_folder = {layer.upper: cid for cid, layer in layers.items()}
    (sizes, skipped), (counts, skipped_too) = _du(list(by_folder), "-B1"), _du(list(by_folder), "--inodes")
    used = {cid: DiskUse(sizes[layer.upper], counts[layer.upper], layer.bytes_per_inode)
            for cid, layer in layers.items() if layer.upper in sizes and layer.upper in counts}
    return used, {by_folder[f] for f in skipped | skipped_too}


def _du(folders: list[str], unit: str) -> tuple[dict[str, int], set[str]]:
    """One GNU ``du -s -x`` of ``folders`` in ``unit`` (``-B1``: bytes, ``--inodes``: entries):
    the total of each folder it printed one for (0 for a folder already gone), and the folders it
    named in an error (it skipped what it could not read, so a lower bound; all of them when an
    error names none, or past its first 1,000 lines)."""
    if not folders:
        return {}, set()
    proc = subprocess.run(["du", "-s", unit, "-x", "--", *folders], capture_output=True, text=True, timeout=600)
    totals, wanted = {}, set(folders)
    for line in proc.stdout.splitlines():
        total, _, folder = line.partition("\t")
        if total.isdigit() and folder in wanted:
            totals[folder] = int(total)
    gone = {f for f in folders if f not in totals and not os.path.isdir(f)}  # removed between two polls
    if proc.returncode == 0:
        return totals | dict.fromkeys(gone, 0), set()
    for folder in set(folders) - totals.keys() - gone:
        log.warning("disk watch: du %s printed no total for %s: %s", unit, folder, proc.stderr.strip()[-200:])
    lines = proc.stderr.splitlines()
    named, unexplained = set(), len(lines) > 1000
    for line in lines[:1000]:
        hits = {f for f in folders if re.search(re.escape(f) + r"(?=[/':]|$)", line)}
        named, unexplained = named | hits, unexplained or not hits
    return totals | dict.fromkeys(gone, 0), (set(totals) if unexplained else named & totals.keys()) - gone


def _measure_all(layers: dict[str, Layer], last: dict[str, DiskUse] | None = None) -> dict[str, DiskUse]:
    """Use by container id of those ``layers`` that measured (:func:`layers_use`); one ``du``
    printed no total for is left out. A partial reading (entries skipped) never lowers a
    container's charge below its ``last`` reading: a container cannot hide its disk by renaming
    folders while it is measured."""
    used, partial = layers_use(layers)
    last = last or {}
    for cid in partial & used.keys() & last.keys():
        if last[cid].charged > used[cid].charged:
            used[cid] = last[cid]
    return used


class DiskWatch:
    """One engine's watch of its sandboxes' disk: every ``poll_s`` seconds each watched sandbox's
    current container (it changes in the clean room) is measured (:class:`DiskUse`: allocated blocks
    and inodes where this host sees its upper folder, two ``du`` processes for all of them; else one
    ``SizeRw`` listing of the run's containers for all the others) and compared with its
    ``[environment] storage_mb``; past it, ``sandbox.exceed_disk(why)`` records why and the container is killed.

    Args:
        labels: the run's owner labels (every container of this process carries them).
    """

    def __init__(self, call: DockerCaller, client: docker.DockerClient, labels: dict[str, str], poll_s: float) -> None:
        self._call, self._client, self._labels, self.poll_s = call, client, labels, poll_s
        self._watched: set[Sandbox] = set()
        self._layers: dict[str, Layer | None] = {}  # container id -> its layer on this host (None: SizeRw)
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

    def charged(self, container_id: str) -> int:
        """Bytes charged to the container at the last poll (0 before its first reading)."""
        use = self._last.get(container_id)
        return use.charged if use is not None else 0

    async def _usage(self, watched: list[Sandbox]) -> dict[str, DiskUse]:
        """Use by container id of the ``watched`` sandboxes' current containers."""
        ids = {sb.container_id for sb in watched}
        self._layers = {cid: layer for cid, layer in self._layers.items() if cid in ids}
        for cid in ids - self._layers.keys():
            with contextlib.suppress(SandboxError, docker.errors.NotFound):  # going away: measured next time
                self._layers[cid] = await self._call(local_layer, self._client, cid)
        local = {cid: layer for cid, layer in self._layers.items() if layer is not None}
        used = await asyncio.to_thread(_measure_all, local, self._last) if local else {}
        for cid in local.keys() - used.keys():  # not measurable here: the engine's SizeRw for it from now on
            self._layers[cid] = None
        if any(cid in self._layers and self._layers[cid] is None for cid in ids):
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
                if use is not None and use.charged > limit and sandbox.exceed_disk(
                        f"{sandbox.task.name}: the container {use.describe()}, over "
                        f"[environment] storage_mb = {limit // MIB}; it was killed"):
                    log.warning("%s", sandbox.disk_exceeded)
                    with contextlib.suppress(Exception):
                        await self._call(self._client.api.kill, sandbox.container_id)

    async def close(self) -> None:
        """Stop polling."""
        self._watched.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


@dataclass(frozen=True)
class FreeDisk:
    """What Docker's data root has free: the lower of its free blocks and its free inodes at the file
    system's bytes per inode (:func:`bytes_per_inode`), as the watch charges containers.

    Attributes:
        root: the data root (``docker info`` DockerRootDir).
        mib: free MiB, the lower bound.
        said: "" when the blocks are the lower bound, else the inodes in words (`` (its 1,000 free
            inodes at 16.0 KiB each)``).
    """

    root: str
    mib: int
    said: str = ""


def data_root(client: docker.DockerClient) -> str:
    """Docker's data root (``docker info`` DockerRootDir; ``/var/lib/docker`` when it names none)."""
    return client.info().get("DockerRootDir") or "/var/lib/docker"


def free_disk(root: str) -> FreeDisk | None:
    """What ``root`` has free on this host (``statvfs(2)``: ``f_bavail`` blocks, ``f_favail`` inodes
    at :func:`bytes_per_inode`), or None when this host cannot read it."""
    try:
        st = os.statvfs(root)
        ratio = bytes_per_inode(root)
    except OSError as err:
        log.debug("free disk of %s not measured: %s", root, err)
        return None
    free_mb, said = st.f_bavail * st.f_frsize // MIB, ""
    if st.f_files and st.f_favail * ratio // MIB < free_mb:
        free_mb = st.f_favail * ratio // MIB
        said = f" (its {st.f_favail:,} free inodes at {ratio / 1024:.1f} KiB each)"
    return FreeDisk(root, free_mb, said)


def check_free_disk(client: docker.DockerClient, needed_mb: int) -> None:
    """Raise when Docker's data root has under ``needed_mb`` MiB free (:func:`free_disk`: a data root
    out of inodes is full whatever its free blocks).

    A data root this host cannot see (a remote daemon) is not checked.

    Raises:
        EnvironmentProblem: (exit 3) naming the path, the free and the needed MiB.
    """
    if needed_mb <= 0:
        return
    free = free_disk(data_root(client))
    if free is not None and free.mib < needed_mb:
        raise EnvironmentProblem(
            f"{free.root}: {free.mib} MiB free on Docker's data root{free.said}, swerl needs {needed_mb} MiB "
            "(SandboxConfig.min_free_disk_mb); free space (`swerl sandbox gc`, remove unused images) or lower the threshold"
        )
