"""A real container registry for the fleet tests (Debian's ``docker-registry``, CNCF distribution
2.8) on 127.0.0.1, and a forwarder that makes the same ``127.0.0.1:PORT`` answer inside the
private engine's network namespace.

Both engines then name the registry ``127.0.0.1:PORT``, which dockerd trusts over plain HTTP by
default (``insecure-registries`` holds 127.0.0.0/8), so neither daemon is reconfigured. The
forwarder listens on a socket created inside the engine's namespace (``setns`` on one thread)
and connects out from the host's, where the registry listens.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CLONE_NEWNET = 0x40000000
CONFIG = """version: 0.1
log: {{level: warn}}
storage:
  filesystem: {{rootdirectory: {root}}}
  delete: {{enabled: true}}
http: {{addr: "127.0.0.1:{port}"}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRegistry:
    """``docker-registry serve`` on 127.0.0.1:``port`` with its storage in a temporary folder."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="swerl-registry-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        config = self.root / "config.yml"
        config.write_text(CONFIG.format(root=self.root / "data", port=self.port))
        log = open(self.root / "registry.log", "ab")  # noqa: SIM115 - the server keeps it open
        self.proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2).close()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not answer; see {self.root / 'registry.log'}")

    def catalog(self) -> list[str]:
        """The repositories the registry holds."""
        return self._get("_catalog")["repositories"]

    def tags(self, repository: str) -> list[str]:
        """The tags of ``repository`` in the registry."""
        return self._get(f"{repository}/tags/list")["tags"]

    def _get(self, path: str) -> dict:
        import json

        with urllib.request.urlopen(f"http://{self.address}/v2/{path}", timeout=5) as reply:
            return json.load(reply)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


class NamespaceForwarder:
    """TCP ``127.0.0.1:port`` inside the network namespace of process ``pid`` -> the host's same port."""

    def __init__(self, pid: int, port: int) -> None:
        self.pid, self.port = pid, port
        subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "link", "set", "lo", "up"], check=True)
        self.listener = self._listen_inside()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _listen_inside(self) -> socket.socket:
        made: list[socket.socket | BaseException] = []

        def inside() -> None:  # setns changes this thread only; the socket keeps its namespace
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/proc/{self.pid}/ns/net") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", self.port))
                sock.listen(64)
                made.append(sock)
            except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
                made.append(err)

        thread = threading.Thread(target=inside)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return
            outer = socket.create_connection(("127.0.0.1", self.port))
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def can_run_registry() -> str | None:
    """None when docker-registry and nsenter are installed, else why not."""
    for tool in ("docker-registry", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install docker-registry)"
    return None if os.geteuid() == 0 else "the forwarder needs root (setns)"
