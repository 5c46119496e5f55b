"""How an image reaches an engine that lacks it: pulled from the fleet's registry, or copied
from a peer engine when there is none.

With ``sandbox.registry: HOST:PORT`` a task image is built once, on the first engine that
needs it, and pushed as ``HOST:PORT/swerl-task:<hash>``; every other engine pulls it on first
use (layers it already has are not fetched again) and tags it ``swerl-task:<hash>`` like a
local build. A ``FROM`` image an engine lacks (the offline ``python:3.10-slim``) goes the same
way: a peer that has it pushes it once. Image ids are content-addressed and survive a push and
a pull, so task tags (which hash the base ids) agree on every engine. Without a registry the
image is streamed through swerl (``docker save | docker load``,
:mod:`swerl.sandbox.deployment.transfer`).

The engines, not swerl, talk to the registry: each one's dockerd must reach ``HOST:PORT`` and
trust it. A plain-HTTP registry must be listed in each dockerd's ``insecure-registries``
(daemon.json; ``127.0.0.0/8`` is there by default); a TLS registry needs its CA in
``/etc/docker/certs.d/HOST:PORT/ca.crt`` on each engine host (docs/sandbox.md, Fleets).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from swerl.sandbox.deployment.images import from_images
from swerl.sandbox.deployment.transfer import copy_image, has_image

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.deployment.engine import Engine

log = logging.getLogger(__name__)


def remote_ref(registry: str, ref: str) -> tuple[str, str]:
    """(repository, tag) of ``ref`` in ``registry``: ``python:3.10-slim`` -> (``HOST:PORT/python``,
    ``3.10-slim``); a ref without a tag gets ``latest``; another registry's host in ``ref`` is
    dropped (``ghcr.io/org/img`` -> ``HOST:PORT/org/img``). Digest refs (``name@sha256:...``)
    are not routed through the registry (:meth:`ImageRoutes.bring_bases` copies them)."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        name = name.split("/", 1)[1]  # another registry's host: store it under ours
    return f"{registry}/{name}", tag


def pull_image(client: docker.DockerClient, registry: str, ref: str) -> bool:
    """Pull ``ref`` from ``registry`` and tag it ``ref``; False when the registry lacks it.

    Raises:
        docker.errors.APIError: the engine could not reach or use the registry.
    """
    repo, tag = remote_ref(registry, ref)
    try:
        for line in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise docker.errors.APIError(f"pull of {ref} from {registry}: {line['error']}")
        image = client.images.get(f"{repo}:{tag}")
    except docker.errors.NotFound:  # the registry lacks it (manifest unknown)
        return False
    local, _, local_tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    image.tag(local, local_tag)
    client.images.remove(f"{repo}:{tag}", noprune=True)  # the local name stays; the pull is in RepoDigests
    return True


def push_image(client: docker.DockerClient, registry: str, ref: str) -> None:
    """Push the engine's ``ref`` to ``registry`` (tagged there for the push, untagged after).

    Raises:
        docker.errors.APIError: the registry refused (the message names why).
    """
    repo, tag = remote_ref(registry, ref)
    client.images.get(ref).tag(repo, tag)
    try:
        for line in client.api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise docker.errors.APIError(f"push of {ref} to {registry}: {line['error']}")
    finally:
        client.images.remove(f"{repo}:{tag}", noprune=True)


class ImageRoutes:
    """Brings images to the engines of one manager; one lock per image across the fleet when a
    registry is set (one build and one push per image), per engine otherwise.

    Args:
        registry: ``HOST:PORT`` of the fleet's registry, or None (copy through swerl).
    """

    def __init__(self, registry: str | None) -> None:
        self.registry = registry
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, engine: Engine, key: str) -> asyncio.Lock:
        """The lock of ``key`` (an image) on ``engine``, shared by every engine with a registry."""
        locks = self._locks if self.registry else engine.image_locks
        return locks.setdefault(key, asyncio.Lock())

    async def pull(self, engine: Engine, ref: str, timeout_s: float) -> bool:
        """Pull ``ref`` onto ``engine``; False (with a warning unless simply absent) when it cannot."""
        assert self.registry is not None
        try:
            handles = engine.opened
            return await handles.call(pull_image, handles.client, self.registry, ref, timeout_s=timeout_s)
        except Exception as err:  # noqa: BLE001 - the engine then builds or copies instead
            log.warning("could not pull %s from %s onto %s: %s", ref, self.registry, engine.url, err)
            return False

    async def push(self, engine: Engine, ref: str, timeout_s: float) -> bool:
        """Push ``ref`` from ``engine``; False (with a warning) when the registry refused."""
        assert self.registry is not None
        try:
            handles = engine.opened
            await handles.call(push_image, handles.client, self.registry, ref, timeout_s=timeout_s)
            return True
        except Exception as err:  # noqa: BLE001 - other engines then build it themselves
            log.warning("could not push %s from %s to %s: %s", ref, engine.url, self.registry, err)
            return False

    async def bring_bases(self, dockerfile: Path, engine: Engine, peers: list[Engine], timeout_s: float) -> None:
        """Give ``engine`` the ``FROM`` images of ``dockerfile`` it lacks: from the registry
        (pushed there once by a peer that has them), else copied from a peer."""
        for ref in from_images(dockerfile):
            async with self.lock(engine, f"from:{ref}"):
                await self._bring_base(ref, engine, [p for p in peers if p is not engine and p.is_open], timeout_s)

    async def _bring_base(self, ref: str, engine: Engine, peers: list[Engine], timeout_s: float) -> None:
        handles = engine.opened
        if ref in engine.base_ids or await handles.call(has_image, handles.client, ref):
            return
        registry = self.registry is not None and "@" not in ref  # a digest ref cannot be re-tagged: copy it
        if registry and await self.pull(engine, ref, timeout_s):
            return
        for peer in peers:
            peer_handles = peer.opened
            if not await peer_handles.call(has_image, peer_handles.client, ref):
                continue
            if registry and await self.push(peer, ref, timeout_s) and await self.pull(engine, ref, timeout_s):
                return
            try:
                await handles.call(copy_image, peer_handles.client, handles.client, ref, timeout_s=timeout_s)
            except Exception as err:  # noqa: BLE001 - the build then names the missing image
                log.warning("could not copy %s from %s to %s: %s", ref, peer.url, engine.url, err)
            return
