"""No network unless the task allows it AND the user passes allow_network. The probe connects
to a listener this test starts on this host (the Docker bridge gateway), never outside."""

from __future__ import annotations

import socket
import threading

import pytest

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.tasks import load_task

from ._support import copy_task, run

pytestmark = pytest.mark.docker


def _restore_default_bridge(gateway: str, prefix_len: str) -> None:
    """Put back the engine's ``docker0`` interface when it has vanished from the host (seen here
    after another engine on the same machine was killed), so the probe has its gateway address."""
    import shutil
    import subprocess

    if subprocess.run(["ip", "-br", "addr", "show", "docker0"], capture_output=True).returncode == 0:
        return
    if shutil.which("ip") is None:
        return
    for cmd in (["ip", "link", "add", "docker0", "type", "bridge"],
                ["ip", "addr", "add", f"{gateway}/{prefix_len}", "dev", "docker0"],
                ["ip", "link", "set", "docker0", "up"]):
        subprocess.run(cmd, capture_output=True)


@pytest.fixture
def probe_task(docker_client, tmp_path):
    """The network_probe fixture with listener.txt naming a listener on the bridge gateway."""
    subnet = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    gateway = subnet.get("Gateway") or subnet["Subnet"].rsplit(".", 2)[0] + ".0.1"
    _restore_default_bridge(gateway, subnet["Subnet"].split("/")[1])
    server = socket.socket()
    server.bind((gateway, 0))
    server.listen()
    server.settimeout(30)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"swerl-probe")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    folder = copy_task("network_probe", tmp_path)
    (folder / "tests" / "listener.txt").write_text(f"{gateway} {server.getsockname()[1]}\n")
    yield load_task(folder)
    stop.set()
    server.close()


async def _probe(task, allow_network: bool):
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, allow_network=allow_network)) as mgr:
        async with mgr.sandbox(task) as sb:
            return await sb.verify()


def test_task_that_asks_for_network_gets_none_without_the_flag(probe_task):
    verdict = run(_probe(probe_task, allow_network=False))
    assert verdict.outcome is Outcome.failed and verdict.reward == 0.0
    assert "interfaces: lo" in verdict.output_tail and "reached listener: False" in verdict.output_tail


def test_network_is_granted_only_with_the_flag_and_the_task_asking(probe_task):
    verdict = run(_probe(probe_task, allow_network=True))
    assert verdict.outcome is Outcome.passed, verdict.output_tail  # positive control: the probe works
    no_ask = probe_task.model_copy(
        update={"config": probe_task.config.model_copy(
            update={"environment": probe_task.config.environment.model_copy(update={"allow_internet": False})}
        )}
    )
    assert run(_probe(no_ask, allow_network=True)).reward == 0.0
