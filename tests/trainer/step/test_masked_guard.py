"""No silent training on nothing: the masked-step guard on worked batches, and a real training
run whose (private) Docker engine is killed mid-run stops with exit 1 naming the cause."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from swerl.agent.trajectory import Trajectory
from swerl.errors import RunFailed
from swerl.trainer.step.masked_guard import MaskedGuard

from ..test_loop import tiny_config

def _batch(masked: int, total: int = 8, outcome: str = "daemon_error") -> list[Trajectory]:
    return [Trajectory(task_name="t", group_id="g", prompt_ids=[1], outcome=outcome if i < masked else "failed",
                       failure_class="mask" if i < masked else "zero") for i in range(total)]


def test_masked_guard_stops_after_k_consecutive_mostly_masked_steps():
    guard = MaskedGuard(max_fraction=0.5, max_steps=2)
    guard.observe(1, _batch(8))
    guard.observe(2, _batch(4))  # exactly half is not over the limit: the streak restarts
    guard.observe(3, _batch(5))
    assert guard.streak == 1
    with pytest.raises(RunFailed, match=r"step 4: 7/8 rollouts masked .* 2 consecutive steps, mostly daemon_error \(7\)"):
        guard.observe(4, _batch(7))


@pytest.fixture
def private_docker():
    """(socket url, dockerd pid) of a second Docker engine of our own with python:3.10-slim loaded,
    so that an outage test can kill it without touching the shared default engine."""
    import docker
    import psutil

    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("dockerd", "docker", "unshare")):
        pytest.skip("a private dockerd needs root and the dockerd, docker and unshare binaries")
    root = Path(tempfile.mkdtemp(prefix="swerl-dockerd-", dir="/tmp"))
    url = f"unix://{root}/docker.sock"
    log = open(root / "dockerd.log", "wb")
    daemon = subprocess.Popen(
        # In a network namespace of its own: `dockerd --bridge none` deletes the host's docker0
        # otherwise, and every later bridge container of the default engine fails (unshare execs
        # dockerd, so daemon.pid is the daemon's pid).
        ["unshare", "--net", "dockerd", "--host", url, "--data-root", str(root / "data"),
         "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"), "--bridge", "none",
         "--iptables=false", "--ip6tables=false"],
        stdout=log, stderr=subprocess.STDOUT)
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                docker.DockerClient(base_url=url, timeout=5).ping()
                break
            except Exception:
                assert daemon.poll() is None and time.monotonic() < deadline, (root / "dockerd.log").read_text()[-2000:]
                time.sleep(0.5)
        family = psutil.Process(daemon.pid).children(recursive=True)  # its containerd
        load = subprocess.run(f"docker save python:3.10-slim | docker -H {url} load", shell=True,
                              capture_output=True, text=True, timeout=300)
        if load.returncode:
            pytest.skip(f"python:3.10-slim not loadable from the default engine: {load.stderr.strip()[-300:]}")
        yield url, daemon.pid
    finally:
        for proc in psutil.process_iter(["cmdline"]):  # containerd and container shims name our folder
            if str(root) in " ".join(proc.info["cmdline"] or []) and proc.pid != daemon.pid:
                family += [proc, *proc.children(recursive=True)]
        daemon.kill()
        daemon.wait(timeout=30)
        for proc in family:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        log.close()
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if str(root) in line]
        for mount in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.docker
@pytest.mark.slow
def test_a_run_whose_docker_engine_dies_stops_within_two_steps_naming_the_cause(private_docker, tiny_model_dir,
                                                                                 tmp_path):
    url, dockerd_pid = private_docker
    cfg = tiny_config(tiny_model_dir, max_steps=4).model_copy(deep=True)
    cfg.sandbox = cfg.sandbox.model_copy(update={
        "warm_pool": False, "docker_timeout_s": 10.0, "start_timeout_s": 10.0,
        "drain_timeout_s": 10.0})
    cfg.logging = cfg.logging.model_copy(update={"dump_trajectories": False, "tensorboard": False})
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(cfg.to_yaml())
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "swerl.cli", "train", str(cfg_path), "--run-dir", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "400", "DOCKER_HOST": url})  # exec streams read DOCKER_HOST
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    os.kill(dockerd_pid, signal.SIGKILL)  # the engine goes away after step 1
    _, stderr = proc.communicate(timeout=300)

    assert proc.returncode == 1, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert "rollouts masked" in last and "daemon_error" in last and "Traceback" not in stderr, last
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["global_step"] for r in recs] == [1, 2]  # step 2 masked (streak 1); step 3 stopped the run
    assert recs[1]["failure_class/mask"] == 8 and "failure_class/mask" not in recs[0]
