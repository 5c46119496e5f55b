"""What ``swerl sandbox engines`` shows about each engine: reachable, version, swerl's
containers and images on it, and its disk."""

from __future__ import annotations

import shutil

from pydantic import BaseModel, Field

from swerl.errors import EnvironmentProblem
from swerl.sandbox.engine_config import EngineConfig
from swerl.sandbox.docker_api import DOCKER_ERRORS, LABEL_RUN, TASK_IMAGE_REPO, connect, engine_url

MIB = 1 << 20


class EngineStatus(BaseModel):
    """One engine as seen now (counts are None when it is unreachable)."""

    url: str
    reachable: bool
    error: str = ""
    version: str | None = Field(None, description="Server version (dockerd, or Podman's).")
    slots: int | None = Field(None, description="Configured slots; None = sandbox.concurrency.")
    slots_in_use: int | None = Field(None, description="Running swerl trial containers (all runs).")
    swerl_containers: int | None = Field(None, description="swerl containers in any state (all runs).")
    containers: int | None = Field(None, description="All containers on the engine.")
    images: int | None = Field(None, description="All images on the engine.")
    task_images: int | None = Field(None, description="Cached swerl-task:* images.")
    data_root: str | None = None
    disk_free_mb: int | None = Field(None, description="Free MiB of the data root; None when this host cannot see it.")


def engine_status(config: EngineConfig, timeout_s: float = 10.0) -> EngineStatus:
    """Ask one engine (blocking) how it is; never raises for an engine that does not answer."""
    url = engine_url(config.url)
    try:
        client = connect(url, 2, timeout_s, config.sdk_tls())
    except EnvironmentProblem as err:
        return EngineStatus(url=url, reachable=False, error=str(err).split(";")[0], slots=config.slots)
    try:
        info = client.info()
        ours = client.containers.list(all=True, filters={"label": LABEL_RUN}, ignore_removed=True)
        root = info.get("DockerRootDir")
        try:
            free = shutil.disk_usage(root).free // MIB if root else None
        except OSError:
            free = None
        return EngineStatus(
            url=url, reachable=True, version=info.get("ServerVersion"), slots=config.slots,
            slots_in_use=sum(1 for c in ours if c.status == "running"), swerl_containers=len(ours),
            containers=info.get("Containers"), images=info.get("Images"),
            task_images=len(client.images.list(name=TASK_IMAGE_REPO)), data_root=root, disk_free_mb=free,
        )
    except DOCKER_ERRORS as err:
        return EngineStatus(url=url, reachable=False, error=f"{type(err).__name__}: {err}", slots=config.slots)
    finally:
        client.close()
