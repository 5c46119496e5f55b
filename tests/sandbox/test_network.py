"""No network unless the task allows it AND the user passes allow_network; each phase (agent,
verifier) gets what its task.toml network_mode asks; an allowlist swerl cannot enforce is refused
rather than widened. The probe connects to a listener this test starts on this host (the Docker
bridge gateway), never outside."""

from __future__ import annotations

import shutil
import socket
import threading

import pytest

from swerl.errors import TaskError
from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.sandbox.network import check_network, granted
from swerl.tasks import load_task

from ._support import FIXTURES, copy_task, run

HARBOR13 = FIXTURES.parent / "harbor13"


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
def listener(docker_client):
    """``(address, port)`` of a listener on the bridge gateway that answers ``swerl-probe``."""
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
    yield gateway, server.getsockname()[1]
    stop.set()
    server.close()


@pytest.fixture
def probe_task(listener, tmp_path):
    """The network_probe fixture with listener.txt naming the listener."""
    folder = copy_task("network_probe", tmp_path)
    (folder / "tests" / "listener.txt").write_text(f"{listener[0]} {listener[1]}\n")
    return load_task(folder)


async def _probe(task, allow_network: bool):
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, allow_network=allow_network)) as mgr:
        async with mgr.sandbox(task) as sb:
            return await sb.verify()


@pytest.mark.docker
def test_task_that_asks_for_network_gets_none_without_the_flag(probe_task):
    verdict = run(_probe(probe_task, allow_network=False))
    assert verdict.outcome is Outcome.failed and verdict.reward == 0.0
    assert "interfaces: lo" in verdict.output_tail and "reached listener: False" in verdict.output_tail


@pytest.mark.docker
def test_network_is_granted_only_with_the_flag_and_the_task_asking(probe_task):
    verdict = run(_probe(probe_task, allow_network=True))
    assert verdict.outcome is Outcome.passed, verdict.output_tail  # positive control: the probe works
    no_ask = probe_task.model_copy(
        update={"config": probe_task.config.model_copy(
            update={"environment": probe_task.config.environment.model_copy(update={"allow_internet": False})}
        )}
    )
    assert run(_probe(no_ask, allow_network=True)).reward == 0.0


@pytest.mark.docker
def test_each_phase_gets_the_network_its_network_mode_asks(listener, tmp_path):
    """Schema 1.3: no network for the agent, the public network for the tests (in the clean room)."""
    folder = shutil.copytree(HARBOR13 / "network-per-phase", tmp_path / "network-per-phase")
    (folder / "tests" / "listener.txt").write_text(f"{listener[0]} {listener[1]}\n")
    task = load_task(folder)

    async def trial():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, allow_network=True)) as mgr:
            async with mgr.sandbox(task) as sb:
                agent = await sb.exec("ls /sys/class/net", timeout_s=10)
                return agent, await sb.verify()

    agent, verdict = run(trial())
    assert agent.output.split() == ["lo"]
    assert (verdict.outcome, verdict.verification) == (Outcome.passed, "clean_room"), verdict.output_tail
    assert "verifier reached the listener: True" in verdict.output_tail


def test_an_allowlist_runs_offline_and_is_refused_when_the_run_grants_network():
    task = load_task(HARBOR13 / "network-allowlist")
    assert not granted(task, "agent", allow_network=False) and not granted(task, "verifier", allow_network=False)
    check_network([task], SandboxConfig())
    with pytest.raises(TaskError, match=r'network_mode = "allowlist" \(pypi.org, files.pythonhosted.org\), which swerl '
                                        "cannot enforce.*run without --allow-network"):
        check_network([task], SandboxConfig(allow_network=True))


def test_two_networks_in_one_container_are_refused_before_the_run():
    """Verified in the agent's container (forced same_container), the per-phase fixture would need
    no network for the agent and the public network for the tests in one container."""
    task = load_task(HARBOR13 / "network-per-phase")
    check_network([task], SandboxConfig(allow_network=True))  # the clean room gives each phase its container
    check_network([task], SandboxConfig(verification="same_container"))  # no grant: both phases offline
    with pytest.raises(TaskError, match="the verifier phase asks for a network and the agent phase was not granted one"):
        check_network([task], SandboxConfig(allow_network=True, verification="same_container"))
