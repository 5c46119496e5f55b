"""A private second dockerd for the fleet tests: own socket, data root, exec root and pidfile,
no bridge and no iptables, in its own network namespace.

The namespace matters: ``dockerd --bridge none`` deletes the host's ``docker0`` interface at
start-up (it removes the default bridge it is told not to use), which breaks the default
engine's bridge networking; inside ``unshare --net`` it deletes only its own namespace's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


class PrivateEngine:
    """Start with :meth:`start`, kill (SIGKILL, by pid) with :meth:`kill`, stop for good with :meth:`stop`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="swerl-engine-", dir="/tmp"))
        self.socket = self.root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return ["unshare", "--net", "dockerd", "--host", self.url, "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
                "--bridge", "none", "--iptables=false", "--ip6tables=false"]

    def start(self, timeout_s: float = 60.0) -> None:
        """Start dockerd and wait until it answers a ping."""
        import docker

        self._kill_stale_containerd()
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - the daemon keeps it open
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"private dockerd exited {self.proc.returncode}; see {self.root / 'dockerd.log'}")
            with contextlib.suppress(Exception):
                client = docker.DockerClient(base_url=self.url, timeout=5)
                client.ping()
                client.close()
                return
            time.sleep(0.2)
        raise RuntimeError(f"private dockerd did not answer within {timeout_s:.0f} s")

    def _kill_stale_containerd(self) -> None:
        """After a SIGKILL of dockerd its containerd lives on; a new dockerd's dial of it times out
        on a loaded host (seen at load 12), so a restart starts with a fresh containerd (the
        containers' shims survive it and the new daemon restores them)."""
        pid_file = self.root / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # unshare execs dockerd: the same pid

    def kill(self) -> None:
        """SIGKILL the daemon (by its pid) and reap it; its containerd lives on until restart."""
        assert self.proc is not None
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM the daemon (it stops its containers and containerd), then remove its folders."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        containerd_pid = self.root / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):  # our own containerd, if dockerd left it behind
            os.kill(int(containerd_pid.read_text().strip()), signal.SIGTERM)
        shutil.rmtree(self.root, ignore_errors=True)


def can_start_private_engine() -> str | None:
    """None when this host can run a private dockerd, else why not."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    for tool in ("dockerd", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None
