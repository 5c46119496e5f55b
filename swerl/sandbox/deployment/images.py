"""Sandbox images: the offline Python base image and task images cached by content hash.

The base image is Debian bookworm from the host's apt sources (``sandboxes/build-base.sh``:
mmdebstrap piped into ``docker import``), tagged ``swerl/base:<recipe hash>`` and under the
``python:3.X-slim`` names tasks use when those are absent (docs/tasks.md, Offline sandbox images). A task image is built
from ``environment/`` without network and tagged ``swerl-task:<hash of the folder>``; a
second build of the same folder is a cache hit.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from swerl.errors import EnvironmentProblem, SandboxError, TaskError
from swerl.logs import phase
from swerl.sandbox.deployment.transfer import copy_image, has_image
from swerl.sandbox.docker_api import TASK_IMAGE_REPO
from swerl.sandbox.types import Outcome

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller

log = logging.getLogger(__name__)

BASE_REPO = "swerl/base"
BASE_ALIASES = ("python:3.10-slim", "python:3.11-slim", "python:3.12-slim")
RECIPE = Path(__file__).resolve().parents[3] / "sandboxes" / "build-base.sh"
RECIPE_ASSETS = ("pip-offline-fastpath.sh",)


def base_image_tag(recipe: Path = RECIPE) -> str:
    """``swerl/base:<first 12 hex of sha256(recipe script + the assets it copies in)>``."""
    digest = hashlib.sha256(recipe.read_bytes())
    for asset in RECIPE_ASSETS:
        digest.update((recipe.parent / asset).read_bytes())
    return f"{BASE_REPO}:{digest.hexdigest()[:12]}"


def build_base_image(
    client: docker.DockerClient, recipe: Path = RECIPE, force: bool = False,
    url: str | None = None, source: docker.DockerClient | None = None,
) -> tuple[str, list[str]]:
    """Build the offline base image unless present, then add the missing ``python:3.X-slim`` tags.

    Args:
        url: the engine's URL (the recipe's ``docker import`` goes there); None = the default.
        source: another engine that may hold the image already: it is copied from there
            (``docker save | load``) instead of built, unless ``force``.

    Returns:
        (base tag, aliases newly tagged).

    Raises:
        EnvironmentProblem: (exit 3) the recipe script failed (no mmdebstrap, no apt mirror).
    """

    tag = base_image_tag(recipe)
    if not force and not has_image(client, tag) and source is not None and has_image(source, tag):
        log.info("copying %s from another engine", tag)
        copy_image(source, client, tag)
    if force or not has_image(client, tag):
        log.info("building %s with %s (mmdebstrap from the host's apt sources)", tag, recipe.name)
        env = {**os.environ, "DOCKER_HOST": url} if url else None
        with phase(f"image build {tag}"):
            proc = subprocess.run(["bash", str(recipe), tag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  check=False, env=env)
        if proc.returncode != 0 or not has_image(client, tag):
            tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-5:]
            raise EnvironmentProblem(
                f"{recipe} failed (exit {proc.returncode}): {' | '.join(tail)}; "
                "check that mmdebstrap is installed and the host's apt sources answer"
            )
    image = client.images.get(tag)
    _untag_old_bases(client, tag)
    tagged = []
    for alias in BASE_ALIASES:
        if not has_image(client, alias) or _is_stale_base(client.images.get(alias), image):
            repo, _, version = alias.partition(":")
            image.tag(repo, version)
            tagged.append(alias)
    return tag, tagged


def _untag_old_bases(client: docker.DockerClient, current: str) -> None:
    # Bases of older recipes: untag them so their layers go once no task image uses them.
    for image in client.images.list(name=BASE_REPO):
        for old in image.tags:
            if old.startswith(BASE_REPO + ":") and old != current:
                try:
                    client.images.remove(old)
                except docker.errors.APIError as err:
                    log.debug("keeping %s: %s", old, err)


def _is_stale_base(alias: docker.models.images.Image, current: docker.models.images.Image) -> bool:
    # An alias swerl itself set from an older recipe moves to the new base; a real pulled image stays.
    return alias.id != current.id and str(alias.attrs.get("Comment", "")).startswith("swerl offline base")


def environment_hash(environment_dir: Path) -> str:
    """sha256 (first 16 hex) over every file's relative path, mode bit x and bytes, sorted."""
    digest = hashlib.sha256()
    for item in sorted(environment_dir.rglob("*")):
        rel = item.relative_to(environment_dir).as_posix()
        if item.is_symlink():
            digest.update(f"L {rel} {item.readlink()}\n".encode())
        elif item.is_file():
            digest.update(f"F {rel} {item.stat().st_mode & 0o111:o} {item.stat().st_size}\n".encode())
            digest.update(item.read_bytes())
    return digest.hexdigest()[:16]


def from_images(dockerfile: Path) -> list[str]:
    """Images named by the Dockerfile's ``FROM`` lines (earlier build stages left out)."""
    refs: list[str] = []
    stages: set[str] = set()
    for line in dockerfile.read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        words = [w for w in words[1:] if not w.startswith("--")]
        if words and words[0].lower() not in stages:
            refs.append(words[0])
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2].lower())
    return refs


def task_image_tag(environment_dir: Path, base_ids: list[str] | None = None) -> str:
    """``swerl-task:<hash of environment/ and of the local ids of its FROM images>``: a rebuilt
    base image (e.g. a new offline ``python:3.10-slim``) gives a new tag.

    Raises:
        TaskError: (exit 2) no Dockerfile, or a docker-compose environment (not supported yet).
    """
    if not environment_dir.is_dir():
        raise TaskError(f"{environment_dir}: missing environment folder; add environment/Dockerfile")
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if (environment_dir / compose).exists():
            raise TaskError(
                f"{environment_dir / compose}: docker-compose environments are not supported yet; "
                "use a single environment/Dockerfile"
            )
    if not (environment_dir / "Dockerfile").is_file():
        raise TaskError(f"{environment_dir}: no Dockerfile; add environment/Dockerfile")
    key = environment_hash(environment_dir)
    if base_ids:
        key = hashlib.sha256((key + "|" + ",".join(base_ids)).encode()).hexdigest()[:16]
    return f"{TASK_IMAGE_REPO}:{key}"


def _look_up_ids(client: docker.DockerClient, refs: list[str], known: dict[str, str]) -> None:
    """Put the local image id of each ref in ``known``; a ref the engine lacks stays out."""
    for ref in refs:
        try:
            known[ref] = client.images.get(ref).id
        except docker.errors.ImageNotFound:
            continue


async def ensure_task_image(
    call: DockerCaller,
    client: docker.DockerClient,
    environment_dir: Path,
    build_timeout_s: float,
    allow_network: bool,
    known_ids: dict[str, str] | None = None,
    fetch: Callable[[str], Awaitable[bool]] | None = None,
) -> tuple[str, bool]:
    """Return the task image tag, building ``environment/`` first when it is not cached.

    Args:
        known_ids: ``FROM`` ref -> local image id already looked up on this engine (filled
            here); a run keeps one per engine, so each base is inspected once.
        fetch: called with the tag when the engine lacks it (a pull from the fleet's
            registry); True = the image is there now and needs no build.

    Returns:
        (tag, whether it was built now).

    Raises:
        TaskError: no Dockerfile / docker-compose environment.
        SandboxError: ``outcome`` build_error when the build fails or exceeds ``build_timeout_s``.
    """
    task_image_tag(environment_dir)  # TaskError before any Docker call
    known = {} if known_ids is None else known_ids
    refs = from_images(environment_dir / "Dockerfile")
    if unknown := [ref for ref in refs if ref not in known]:
        await call(_look_up_ids, client, unknown, known)
    base_ids = [known.get(ref, f"missing:{ref}") for ref in refs]
    tag = task_image_tag(environment_dir, base_ids)
    if await call(has_image, client, tag) or (fetch is not None and await fetch(tag)):
        return tag, False
    log.info("building %s from %s", tag, environment_dir)
    try:
        await call(_build, client, environment_dir, tag, allow_network, timeout_s=build_timeout_s)
    except TimeoutError as err:
        raise SandboxError(f"{environment_dir}: image build exceeded {build_timeout_s:.0f} s", outcome=Outcome.build_error) from err
    except (docker.errors.BuildError, docker.errors.APIError, _BuildFailed) as err:
        raise SandboxError(f"{environment_dir}: image build failed: {err}", outcome=Outcome.build_error) from err
    except SandboxError as err:  # the daemon failed mid-build (its outcome says so)
        if err.outcome is not None:
            raise SandboxError(f"{environment_dir}: image build failed: {err}", outcome=Outcome.build_error) from err
        raise
    return tag, True


class _BuildFailed(RuntimeError):
    pass


_BUILD_STEP = re.compile(r"Step (\d+)/(\d+) :")


def _build(client: docker.DockerClient, environment_dir: Path, tag: str, allow_network: bool) -> None:
    stream = client.api.build(
        path=str(environment_dir), tag=tag, rm=True, forcerm=True, pull=False, decode=True,
        network_mode=None if allow_network else "none", labels={"swerl.image": "task"},
    )
    last = []
    with phase(f"image build {tag}", unit="steps") as clock:
        for chunk in stream:
            if "error" in chunk:
                raise _BuildFailed(str(chunk["error"]).strip())
            if "stream" in chunk:
                last = (last + [chunk["stream"].rstrip()])[-5:]
                if step := _BUILD_STEP.match(chunk["stream"]):  # the classic builder's "Step 2/5 : RUN ..."
                    clock.done, clock.total = int(step[1]) - 1, int(step[2])
    if not has_image(client, tag):
        raise _BuildFailed(" | ".join(line for line in last if line))
