"""Copy an image from one engine to another (``docker save | docker load`` through the SDK).

Without a registry (``sandbox.registry``, :mod:`swerl.sandbox.deployment.registry`), an engine that lacks a task's
``FROM`` image (e.g. the offline ``python:3.10-slim``) gets it from a peer that has it. The
image id is content-addressed, so the copy has the same id and task image tags (which hash
the base ids) agree across engines.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import docker.errors

if TYPE_CHECKING:
    import docker

log = logging.getLogger(__name__)
CHUNK_BYTES = 1 << 20


def has_image(client: docker.DockerClient, ref: str) -> bool:
    """True when ``ref`` (tag or id) exists on the engine."""
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def copy_image(source: docker.DockerClient, target: docker.DockerClient, ref: str) -> str:
    """Stream ``ref`` (with its tag) from ``source`` into ``target``; returns the image id.

    Raises:
        docker.errors.ImageNotFound: ``source`` has no ``ref``.
        docker.errors.APIError: either engine refused.
    """
    image = source.images.get(ref)
    log.info("copying %s (%d MiB) to another engine", ref, int(image.attrs.get("Size", 0)) >> 20)
    stream = source.api.get_image(ref, chunk_size=CHUNK_BYTES)
    for _ in target.api.load_image(stream, quiet=True):
        pass
    return target.images.get(ref).id
