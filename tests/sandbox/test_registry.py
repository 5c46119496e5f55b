"""Images through a real registry (Debian's docker-registry) beside two real engines: a task
image is built once, pushed, and pulled by the other engine; nothing is saved and loaded
through swerl."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swerl.sandbox import Outcome, SandboxConfig
from swerl.sandbox.deployment import images, registry
from swerl.sandbox.engine_config import EngineConfig
from swerl.sandbox.docker_api import LOCAL_ENGINE_URL
from swerl.sandbox.selftest import run_sandbox_test
from swerl.tasks import load_task

from ._registry import LocalRegistry, NamespaceForwarder, can_run_registry
from ._support import run

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def test_remote_refs_keep_the_name_and_drop_another_registry_host():
    assert registry.remote_ref("10.0.0.5:5000", "python:3.10-slim") == ("10.0.0.5:5000/python", "3.10-slim")
    assert registry.remote_ref("reg:5000", "swerl-task:ab12") == ("reg:5000/swerl-task", "ab12")
    assert registry.remote_ref("reg:5000", "ghcr.io/org/img") == ("reg:5000/org/img", "latest")
    assert registry.remote_ref("reg:5000", "localhost:5001/a/b:1") == ("reg:5000/a/b", "1")


def test_a_registry_address_is_host_and_port():
    from pydantic import ValidationError

    assert SandboxConfig(registry="10.1.2.3:5000").registry == "10.1.2.3:5000"
    with pytest.raises(ValidationError, match="registry"):
        SandboxConfig(registry="http://10.1.2.3:5000")


@pytest.fixture(scope="module")
def local_registry(second_engine):
    """A registry both engines reach as 127.0.0.1:PORT (forwarded into the private engine's namespace)."""
    if (reason := can_run_registry()) is not None:
        pytest.skip(reason)
    server = LocalRegistry()
    server.start()
    forwarder = NamespaceForwarder(second_engine.pid, server.port)
    yield server
    forwarder.close()
    server.stop()


@pytest.mark.docker
@pytest.mark.slow
def test_an_image_built_once_runs_on_both_engines_through_the_registry(
    docker_client, second_engine, local_registry, tmp_path, monkeypatch
):
    import docker

    folder = tmp_path / "add-two-registry"
    shutil.copytree(TASKS / "add-two", folder)
    (folder / "environment" / "marker.txt").write_text(f"{tmp_path}\n")  # a tag no engine has cached
    builds: list[str] = []
    build = images._build

    def counted(client, environment_dir, tag, allow_network):
        builds.append(tag)
        build(client, environment_dir, tag, allow_network)

    def no_copy(*args, **kwargs):
        raise AssertionError("an image went through swerl (docker save | load)")

    monkeypatch.setattr(images, "_build", counted)
    monkeypatch.setattr(registry, "copy_image", no_copy)
    engines = [EngineConfig(url=LOCAL_ENGINE_URL, slots=1), EngineConfig(url=second_engine.url, slots=1)]
    config = SandboxConfig(concurrency=2, engines=engines, registry=local_registry.address, docker_timeout_s=60)
    report = run(run_sandbox_test([load_task(folder)], config))
    other = docker.DockerClient(base_url=second_engine.url, timeout=60)
    try:
        assert report.ok, report.broken
        assert [r.outcome for r in report.records] == [Outcome.passed, Outcome.failed]
        assert {r.engine for r in report.records} == {LOCAL_ENGINE_URL, second_engine.url}
        assert len(builds) == 1, builds
        tag = builds[0]
        pulled = other.images.get(tag)
        assert pulled.id == docker_client.images.get(tag).id
        assert tag.split(":")[1] in local_registry.tags("swerl-task")  # built once, pushed; no other way in
        base = other.images.get("python:3.10-slim")  # the FROM image came through the registry too
        assert base.id == docker_client.images.get("python:3.10-slim").id
        assert {"python", "swerl-task"} <= set(local_registry.catalog())
        assert not [t for t in docker_client.images.get(tag).tags if t.startswith(local_registry.address)]
    finally:
        other.close()
        for tag in builds:
            with __import__("contextlib").suppress(Exception):
                docker_client.images.remove(tag)
