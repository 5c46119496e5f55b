"""Task images: cached by a content hash of environment/, built without network, build errors
typed; docker-compose rejected; docker_image skips the build; the offline base image."""

from __future__ import annotations

import pytest

from swerl.errors import TaskError
from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.sandbox.deployment.images import BASE_ALIASES, base_image_tag, environment_hash, task_image_tag
from swerl.tasks import load_task

from ._support import copy_task, run


def test_environment_hash_follows_content_not_location(tmp_path):
    a = copy_task("add", tmp_path / "a")
    b = copy_task("add", tmp_path / "b")
    assert environment_hash(a / "environment") == environment_hash(b / "environment")
    (b / "environment" / "Dockerfile").write_text("FROM python:3.10-slim\nWORKDIR /srv\n")
    assert environment_hash(a / "environment") != environment_hash(b / "environment")
    assert task_image_tag(a / "environment").startswith("swerl-task:")


def test_docker_compose_environment_is_a_clear_task_error(tmp_path):
    env = copy_task("add", tmp_path) / "environment"
    (env / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(TaskError, match="docker-compose"):
        task_image_tag(env)


@pytest.mark.docker
def test_build_failure_is_build_error_and_leaves_no_container(docker_client, tmp_path):
    folder = copy_task("add", tmp_path)
    (folder / "environment" / "Dockerfile").write_text("FROM python:3.10-slim\nRUN exit 3\n")

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            return await mgr.run_null(load_task(folder)), mgr.run_id

    record, run_id = run(body())
    assert record.outcome is Outcome.build_error and record.failure_class == "mask" and record.reward == 0.0
    assert docker_client.containers.list(all=True, filters={"label": f"swerl.run={run_id}"}) == []


@pytest.mark.docker
def test_build_has_no_network(docker_client, tmp_path):
    folder = copy_task("add", tmp_path)
    (folder / "environment" / "Dockerfile").write_text(
        "FROM python:3.10-slim\nRUN test \"$(ls /sys/class/net)\" = lo\n"
    )

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            return await mgr.image_for(load_task(folder))

    tag = run(body())
    assert docker_client.images.get(tag)
    docker_client.images.remove(tag)


@pytest.mark.docker
def test_docker_image_in_task_toml_skips_the_build(docker_client, tmp_path):
    folder = copy_task("add", tmp_path)
    (folder / "environment" / "Dockerfile").write_text("FROM python:3.10-slim\nRUN exit 1\n")
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", '[environment]\ndocker_image = "python:3.10-slim"\n'))

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            return await mgr.run_oracle(load_task(folder))

    assert run(body()).outcome is Outcome.passed


@pytest.mark.docker
def test_offline_base_image_has_python_pip_pytest_and_no_externally_managed(docker_client):
    base = docker_client.images.get(base_image_tag())
    for alias in BASE_ALIASES:
        assert docker_client.images.get(alias)
    out = docker_client.containers.run(
        base.id, ["bash", "-c", "python --version && pip3 install pytest && pip --version && pytest --version"],
        network_mode="none", remove=True, stderr=True, labels={"swerl.run": "base-image-test"},
    ).decode()
    assert "Python 3" in out and "already satisfied" in out.lower() and "pytest" in out


def test_from_images_skips_build_stages(tmp_path):
    from swerl.sandbox.deployment.images import from_images

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM --platform=linux/amd64 python:3.10-slim AS build\nRUN true\nfrom build\nFROM debian:bookworm\n"
    )
    assert from_images(dockerfile) == ["python:3.10-slim", "debian:bookworm"]


def test_task_image_tag_changes_when_the_base_image_changes(tmp_path):
    env = copy_task("add", tmp_path) / "environment"
    assert task_image_tag(env, ["sha256:aaa"]) != task_image_tag(env, ["sha256:bbb"])
    assert task_image_tag(env, ["sha256:aaa"]) == task_image_tag(env, ["sha256:aaa"])


@pytest.mark.docker
def test_task_folders_sharing_an_image_cost_one_docker_lookup_each(docker_client, tmp_path):
    # A dataset whose tasks share one environment (every HumanEval task) resolves the image with
    # one inspect per further folder: the bases are known, and the cache is pruned only once a
    # run and after builds, not at each folder's first use.
    folders = [copy_task("add", tmp_path / name) for name in ("a", "b", "c")]
    calls: list[str] = []

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, image_cache_mb=100_000)) as mgr:
            tags = [await mgr.image_for(load_task(folders[0]))]
            handles = mgr.engines[0].opened
            real = handles.call

            async def counted(fn, *args, **kwargs):
                calls.append(getattr(fn, "__name__", repr(fn)))
                return await real(fn, *args, **kwargs)

            handles.call = counted
            tags += [await mgr.image_for(load_task(folder)) for folder in folders[1:]]
            handles.call = real
            return tags

    tags = run(body())
    assert len(set(tags)) == 1 and docker_client.images.get(tags[0])
    assert calls == ["has_image", "has_image"]
