"""Process death: a `kill -9` of a running `swerl sandbox-test` leaves containers that the next
run removes; SIGTERM unwinds and removes them before the process exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ._support import FIXTURES

pytestmark = pytest.mark.docker
SWERL = [sys.executable, "-m", "swerl.cli"]


def _containers_of_pid(client, pid: int) -> list:
    # sparse: no inspect of each listed container, which a removal in progress answers with 404
    return client.containers.list(all=True, sparse=True, filters={"label": f"swerl.pid={pid}"})


def _start_sandbox_test(client, task: str) -> subprocess.Popen:
    proc = subprocess.Popen([*SWERL, "sandbox-test", str(FIXTURES / task), "-c", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not _containers_of_pid(client, proc.pid):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "sandbox-test started no container within 60 s"
        time.sleep(0.1)
    time.sleep(0.5)  # let it get into the verifier
    return proc


def test_kill_9_then_a_new_run_leaves_no_container_of_the_dead_run(docker_client):
    proc = _start_sandbox_test(docker_client, "loop_forever")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert _containers_of_pid(docker_client, proc.pid), "kill -9 should leave the container behind"
    after = subprocess.run([*SWERL, "sandbox-test", str(FIXTURES / "add"), "-c", "1"], capture_output=True, timeout=120)
    assert after.returncode == 0, after.stderr.decode()
    assert _containers_of_pid(docker_client, proc.pid) == []


# A run that holds a trial container and a warm pool container (the pool refills after a second take).
_HOLDER = """
import asyncio, sys
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks import load_task
async def main():
    task = load_task(sys.argv[1])
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool_size=1)) as mgr:
        async with mgr.sandbox(task):
            pass
        async with mgr.sandbox(task) as sb:
            await sb.exec("sleep 600 &", timeout_s=10)
            print("ready", flush=True)
            await asyncio.sleep(600)
asyncio.run(main())
"""


def test_kill_9_containers_stop_by_themselves_before_any_gc(docker_client):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(FIXTURES / "add")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read().decode()
        time.sleep(1.0)  # the pool refill is in flight
        running = [c for c in _containers_of_pid(docker_client, proc.pid) if c.status == "running"]
        kinds = {c.attrs["Labels"]["swerl.task"] for c in running}  # sparse: the list's own fields
        assert kinds == {"add", "(warm pool)"}, kinds
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 10
    while any(c.status == "running" for c in _containers_of_pid(docker_client, proc.pid)):
        assert time.monotonic() < deadline, "containers of a kill -9'd run still running after 10 s"
        time.sleep(0.2)
    left = _containers_of_pid(docker_client, proc.pid)
    assert left, "the stopped containers stay for the gc"
    for container in left:
        container.remove(force=True)


def test_sigterm_removes_the_containers_before_exit(docker_client):
    proc = _start_sandbox_test(docker_client, "loop_forever")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 143
    assert _containers_of_pid(docker_client, proc.pid) == []


def test_sandbox_gc_removes_containers_of_dead_processes(docker_client):
    container = docker_client.containers.create(
        "python:3.10-slim", ["sleep", "60"], labels={"swerl.run": "gc-test", "swerl.pid": "999999999"}
    )
    out = subprocess.run([*SWERL, "sandbox", "gc"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "container" in out.stdout
    assert docker_client.containers.list(all=True, filters={"id": container.id}) == []


def test_opening_a_manager_logs_the_run_id_its_containers_carry(caplog):
    """A user can find (and gc) a run's containers: the run id is logged when sandboxes open."""
    import asyncio
    import logging

    from swerl.sandbox import SandboxConfig, SandboxManager

    async def go() -> str:
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
            return manager.run_id

    with caplog.at_level(logging.INFO, logger="swerl.sandbox.manager"):
        run_id = asyncio.run(go())
    assert any(f"swerl.run={run_id}" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
