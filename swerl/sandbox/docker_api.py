"""Clients of Docker engines and the bounded, non-blocking way to call them (one caller per engine).

Every blocking docker-SDK call runs in a worker thread (``asyncio.to_thread`` semantics on a
pool sized to the concurrency) and is awaited with a deadline in seconds, so one hung
container never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import docker
import docker.errors
import docker.tls
import requests.exceptions

from swerl.errors import EnvironmentProblem, SandboxError, SandboxTimeout
from swerl.sandbox.types import Outcome
from swerl.sandbox.endpoint import LOCAL_ENGINE_URL, Endpoint

log = logging.getLogger(__name__)
T = TypeVar("T")

# Labels on everything swerl creates; `swerl sandbox gc` and start-up sweeps find leaks by them.
LABEL_RUN = "swerl.run"
LABEL_PID = "swerl.pid"
LABEL_PID_START = "swerl.pid_start"
LABEL_TASK = "swerl.task"
LABEL_POOL = "swerl.pool"
TASK_IMAGE_REPO = "swerl-task"

DOCKER_ERRORS: tuple[type[BaseException], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    ConnectionError,
    OSError,
)


def engine_url(url: str | None) -> str:
    """The URL of the engine named ``url``; None means the local default (``DOCKER_HOST`` as the
    docker CLI reads it, else ``unix:///var/run/docker.sock``)."""
    return url or os.environ.get("DOCKER_HOST") or LOCAL_ENGINE_URL


def connect(
    base_url: str | None, pool_size: int, timeout_s: float, tls: docker.tls.TLSConfig | bool | None = None
) -> docker.DockerClient:
    """Open a client of one engine with an HTTP pool of ``pool_size`` connections.

    Args:
        base_url: the engine URL (:func:`engine_url` of None: the local default).
        tls: the SDK's TLS settings for a ``tcp://`` engine served over TLS.

    Raises:
        EnvironmentProblem: (exit 3) the engine does not answer.
    """
    url = engine_url(base_url)
    try:
        client = docker.DockerClient(base_url=url, timeout=int(timeout_s), max_pool_size=pool_size, tls=tls or False)
        client.ping()
    except DOCKER_ERRORS as err:
        raise EnvironmentProblem(
            f"Docker is not reachable at {url} ({type(err).__name__}: {err}); start dockerd "
            "(`bash sandboxes/ensure-docker.sh`), or fix sandbox.engines / --engine / DOCKER_HOST"
        ) from err
    return client


class DockerCaller:
    """Runs blocking SDK calls on a private thread pool with a deadline.

    Args:
        max_workers: threads; size it to the concurrency (a few calls per sandbox at once).
        default_timeout_s: deadline used when a call names none.
        endpoint: the engine these calls go to, for the exec and attach streams (one caller
            per engine, so every call of a trial reaches that trial's engine).
    """

    def __init__(self, max_workers: int, default_timeout_s: float, endpoint: Endpoint) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="swerl-docker")
        self.default_timeout_s = default_timeout_s
        self.endpoint = endpoint

    async def __call__(self, fn: Callable[..., T], *args: object, timeout_s: float | None = None,
                       **kwargs: object) -> T:
        """Await ``fn(*args, **kwargs)`` in a worker thread.

        Raises:
            SandboxTimeout: the call took longer than ``timeout_s`` seconds (the thread is left
                to finish on its own; the SDK's socket timeout bounds it).
            SandboxError: the daemon answered with an error (``outcome`` = ``daemon_error``).
        """
        limit = self.default_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        name = getattr(fn, "__qualname__", repr(fn))
        try:
            return await asyncio.wait_for(future, limit)
        except asyncio.TimeoutError as err:
            raise SandboxTimeout(f"Docker call {name} exceeded {limit:.0f} s") from err
        except docker.errors.NotFound:
            raise
        except DOCKER_ERRORS as err:
            raise SandboxError(f"Docker call {name} failed: {err}", outcome=Outcome.daemon_error) from err

    def close(self, wait: bool = False) -> None:
        """Stop the worker threads; queued calls are cancelled, running ones finish
        (``wait``: block until they have)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)

