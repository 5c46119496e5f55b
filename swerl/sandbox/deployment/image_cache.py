"""A size budget for the cache of built task images, least recently used pruned first.

Docker keeps no last-used time for images, so swerl records one per tag in a small JSON
file (``~/.cache/swerl/task-images.json``: ``{tag: unix seconds}``) each time a manager first
uses a task image; an image never recorded counts as used when it was created. After each
build, :func:`prune_task_images` removes the least recently used ``swerl-task:*`` images
until their own size (image size minus the base image it was built on) fits the budget.
Base images and images any container uses (running or stopped) are never removed; neither
are the images the caller names as in use.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from swerl.fileio import atomic_write_json
from swerl.sandbox.docker_api import TASK_IMAGE_REPO

if TYPE_CHECKING:
    import docker

log = logging.getLogger(__name__)
USAGE_FILE = Path.home() / ".cache" / "swerl" / "task-images.json"
MIB = 1 << 20


def _read_usage(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def record_use(tag: str, path: Path = USAGE_FILE) -> None:
    """Note that ``tag`` was used now (temp file + rename; a lost race loses one update)."""
    usage = _read_usage(path)
    usage[tag] = time.time()
    with contextlib.suppress(OSError):
        atomic_write_json(path, usage, indent=None)


def _created(image: docker.models.images.Image) -> float:
    text = str(image.attrs.get("Created", ""))[:26].rstrip("Z")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def _own_bytes(image: docker.models.images.Image, bases: list[docker.models.images.Image]) -> int:
    """Size minus the size of the base image whose layers start this image's layers."""
    layers = image.attrs.get("RootFS", {}).get("Layers", [])
    best = 0
    for base in bases:
        base_layers = base.attrs.get("RootFS", {}).get("Layers", [])
        if base_layers and layers[: len(base_layers)] == base_layers:
            best = max(best, int(base.attrs.get("Size", 0)))
    return max(int(image.attrs.get("Size", 0)) - best, 0)


def prune_task_images(
    client: docker.DockerClient,
    budget_mb: int,
    keep: set[str] = frozenset(),  # type: ignore[assignment]
    repo: str = TASK_IMAGE_REPO,
    usage_file: Path = USAGE_FILE,
) -> list[str]:
    """Remove least recently used ``<repo>:*`` images until their own size fits ``budget_mb``.

    Args:
        keep: tags never removed (the images this run uses).

    Returns:
        the tags removed, oldest first.
    """
    images = client.images.list()
    prefix = repo + ":"
    tasks = [i for i in images if any(t.startswith(prefix) for t in i.tags)]
    bases = [i for i in images if i not in tasks]
    usage = _read_usage(usage_file)
    sized = []
    for image in tasks:
        tags = [t for t in image.tags if t.startswith(prefix)]
        used = max((usage.get(t, 0.0) for t in tags), default=0.0) or _created(image)
        sized.append((used, tags, _own_bytes(image, bases)))
    total = sum(size for _, _, size in sized)
    removed: list[str] = []
    for _, tags, size in sorted(sized, key=lambda row: row[0]):
        if total <= budget_mb * MIB:
            break
        if keep.intersection(tags):
            continue
        try:
            for tag in tags:
                client.images.remove(tag)
        except docker.errors.APIError as err:  # a container uses it
            log.debug("image cache: keeping %s: %s", tags[0], err)
            continue
        total -= size
        removed.extend(tags)
    if removed:
        log.info("image cache: removed %d task image(s) over the %d MiB budget", len(removed), budget_mb)
    return removed
