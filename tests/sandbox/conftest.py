"""Fixtures of the sandbox tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def docker_client():
    """A Docker client; fails the test when no engine answers or the base image is missing."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as err:  # noqa: BLE001
        pytest.fail(f"no Docker engine answers ({err}); run `bash sandboxes/ensure-docker.sh`")
    try:
        client.images.get("python:3.10-slim")
    except docker.errors.ImageNotFound:
        pytest.fail("python:3.10-slim missing; run `swerl sandbox build-base`")
    yield client
    client.close()


@pytest.fixture(scope="module")
def second_engine(docker_client):
    """A private dockerd in its own network namespace, started for a test module and stopped after it."""
    from ._engines import PrivateEngine, can_start_private_engine

    reason = can_start_private_engine()
    if reason is not None:
        pytest.skip(reason)
    engine = PrivateEngine()
    engine.start()
    yield engine
    engine.stop()
