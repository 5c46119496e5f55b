"""Find and remove what swerl left in Docker: containers, networks and volumes labelled
``swerl.run``. A run is dead when the process named by its ``swerl.pid`` label (with the same
start time, so a reused pid does not count) no longer exists on this host.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from swerl.sandbox.docker_api import LABEL_PID, LABEL_PID_START, LABEL_RUN

if TYPE_CHECKING:
    import docker

log = logging.getLogger(__name__)
LABEL_HOST = "swerl.host"


def process_start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_labels(run_id: str) -> dict[str, str]:
    """Labels that tie a Docker object to this run and this process."""
    pid = os.getpid()
    return {
        LABEL_RUN: run_id,
        LABEL_PID: str(pid),
        LABEL_PID_START: process_start_time(pid) or "",
        LABEL_HOST: socket.gethostname(),
    }


def is_owner_alive(labels: dict[str, str]) -> bool:
    """True when the process that created the object still runs (or lives on another host)."""
    if labels.get(LABEL_HOST, socket.gethostname()) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    started = process_start_time(pid)
    return started is not None and started == labels.get(LABEL_PID_START, started)


def collect_garbage(client: docker.DockerClient, everything: bool = False, run_id: str | None = None) -> dict[str, int]:
    """Remove swerl's containers, networks and volumes of dead runs (or all with ``everything``,
    or those of ``run_id``).

    Returns:
        counts removed: ``{"containers": n, "networks": n, "volumes": n}``.
    """
    flt = {"label": f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN}

    def doomed(labels: dict[str, str] | None) -> bool:
        return everything or run_id is not None or not is_owner_alive(labels or {})

    removed = {"containers": 0, "networks": 0, "volumes": 0}
    for container in client.containers.list(all=True, filters=flt, ignore_removed=True):
        if doomed(container.labels):
            try:
                container.remove(force=True, v=True)
                removed["containers"] += 1
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as err:  # e.g. "removal already in progress"
                log.debug("gc: %s: %s", container.short_id, err)
    for network in client.networks.list(filters=flt):
        if doomed(network.attrs.get("Labels")):
            try:
                network.remove()
                removed["networks"] += 1
            except docker.errors.APIError as err:
                log.debug("gc: network %s: %s", network.name, err)
    for volume in client.volumes.list(filters=flt):
        if doomed(volume.attrs.get("Labels")):
            try:
                volume.remove(force=True)
                removed["volumes"] += 1
            except docker.errors.APIError as err:
                log.debug("gc: volume %s: %s", volume.name, err)
    if any(removed.values()):
        log.info("gc: removed %s", ", ".join(f"{n} {kind}" for kind, n in removed.items() if n))
    return removed


def remove_task_images(client: docker.DockerClient) -> int:
    """Remove every cached ``swerl-task:*`` image not used by a container; returns how many."""
    from swerl.sandbox.docker_api import TASK_IMAGE_REPO

    removed = 0
    for image in client.images.list(name=TASK_IMAGE_REPO):
        for tag in image.tags:
            try:
                client.images.remove(tag)
                removed += 1
            except docker.errors.APIError as err:  # in use by a running trial
                log.debug("gc: image %s: %s", tag, err)
    return removed
