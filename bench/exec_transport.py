"""Ways to open a ``docker exec`` or ``attach`` stream: swerl's asyncio HTTP upgrade
(``Endpoint.upgrade``) against the docker SDK's socket API (``exec_start(socket=True)``,
``attach_socket``).

    .venv/bin/python bench/exec_transport.py [--execs N] [--engine URL]

Exec: each way runs ``printf`` of a 64 KiB marker line N times in one container and checks
that every byte arrived (the SDK's socket sits behind an HTTP client that has already read the
response head through a buffered reader, so bytes that arrive with the head can be lost).

- ``upgrade``: swerl's upgrade and read, both on asyncio (what swerl uses).
- ``sdk-thread``: the SDK's ``exec_start(socket=True)`` and a blocking read in a worker thread.
- ``sdk-asyncio``: the SDK's upgrade in a worker thread, then its socket read on asyncio (the
  only way to use the SDK's socket without a thread per open stream; needs the private
  ``SocketIO._sock`` to get the socket out).

Attach: N attaches to one running container, opened and closed, by ``Endpoint.upgrade`` and
by the SDK's ``attach_socket`` in a worker thread (no output can race the head here).

``--preempt-ms M`` makes each way's client wait M ms before it reads the response head, as a
thread or event loop descheduled on a busy machine does: the process's output is then already
on the socket when the head is read.

Prints per way: per second, ms per call and (exec) outputs incomplete. Figures only. The first
lines name the machine (CPU, bf16 probe, what ``auto`` resolves to); ``auto`` chooses no precision
or generator here (Docker streams only), so this bench has no ``auto`` mode.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import socket
import struct
import time

import docker

from swerl.sandbox.deployment.gc import owner_labels
from swerl.sandbox.docker_api import DockerCaller, engine_url
from swerl.sandbox.runtime.execution import DockerExecChannel
from swerl.sandbox.endpoint import Endpoint
from swerl.sandbox.runtime.streams import CappedOutput, read_frames

PAYLOAD = 65536
COMMAND = ["sh", "-c", f"head -c {PAYLOAD} /dev/zero | tr '\\0' x"]
ATTACH = "containers/{}/attach?stream=1&stdout=1&stderr=1"


async def via_upgrade(client: docker.DockerClient, call: DockerCaller, container: str) -> int:
    exec_id = (await call(client.api.exec_create, container, COMMAND))["Id"]
    reader, writer = await DockerExecChannel(call, client, container).open_stream(exec_id, tty=False, timeout_s=30.0)
    sink = CappedOutput(1 << 20)
    await read_frames(reader, sink)
    writer.close()
    return len(sink.text())


def _frames_length(data: bytes) -> int:
    out, pos = 0, 0
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", bytes(data[pos + 4 : pos + 8]))
        out += min(length, len(data) - pos - 8)
        pos += 8 + length
    return out


def _raw_socket(sdk_socket: object) -> socket.socket:
    raw = getattr(sdk_socket, "_sock", sdk_socket)  # SocketIO._sock: private in the stdlib
    assert isinstance(raw, socket.socket), type(raw)
    return raw


def _read_sdk_socket(client: docker.DockerClient, container: str) -> int:
    exec_id = client.api.exec_create(container, COMMAND)["Id"]
    sock = client.api.exec_start(exec_id, socket=True)
    raw = _raw_socket(sock)
    raw.settimeout(30)
    data = bytearray()
    while chunk := raw.recv(65536):
        data += chunk
    sock.close()
    return _frames_length(data)


async def via_sdk_thread(client: docker.DockerClient, call: DockerCaller, container: str) -> int:
    return await call(_read_sdk_socket, client, container)


def _start_sdk_socket(client: docker.DockerClient, container: str) -> object:
    exec_id = client.api.exec_create(container, COMMAND)["Id"]
    return client.api.exec_start(exec_id, socket=True)


async def via_sdk_asyncio(client: docker.DockerClient, call: DockerCaller, container: str) -> int:
    sock = await call(_start_sdk_socket, client, container)
    reader, writer = await asyncio.open_unix_connection(sock=_raw_socket(sock))
    sink = CappedOutput(1 << 20)
    await read_frames(reader, sink)
    writer.close()
    sock.close()
    return len(sink.text())


async def attach_upgrade(client: docker.DockerClient, call: DockerCaller, container: str) -> None:
    _, writer = await call.endpoint.upgrade(ATTACH.format(container), b"", 30.0)
    writer.close()


def _attach_sdk(client: docker.DockerClient, container: str) -> None:
    client.api.attach_socket(container, params={"stream": 1, "stdout": 1, "stderr": 1}).close()


async def attach_sdk(client: docker.DockerClient, call: DockerCaller, container: str) -> None:
    await call(_attach_sdk, client, container)


def preempt_head_reads(delay_s: float) -> None:
    """Delay every read of an HTTP response head by ``delay_s``: the SDK's (``http.client``)
    and swerl's (``StreamReader.readuntil``, which reads only the head)."""
    begin, readuntil = http.client.HTTPResponse.begin, asyncio.StreamReader.readuntil

    def slow_begin(self: http.client.HTTPResponse) -> None:
        time.sleep(delay_s)
        begin(self)

    async def slow_readuntil(self: asyncio.StreamReader, separator: bytes = b"\n") -> bytes:
        await asyncio.sleep(delay_s)
        return await readuntil(self, separator)

    http.client.HTTPResponse.begin = slow_begin  # type: ignore[method-assign]
    asyncio.StreamReader.readuntil = slow_readuntil  # type: ignore[method-assign]


async def main_async(execs: int, url: str) -> None:
    client = docker.DockerClient(base_url=url, timeout=60)
    call = DockerCaller(8, 60.0, Endpoint.of(url, client.api.api_version))
    box = client.containers.run("python:3.10-slim", ["sleep", "600"], detach=True, network_mode="none",
                                labels=owner_labels("bench-exec-transport"))  # a live owner: no sweep removes it
    try:
        ways = (("upgrade", via_upgrade), ("sdk-thread", via_sdk_thread), ("sdk-asyncio", via_sdk_asyncio))
        for name, way in ways * 2:
            began, lost = time.monotonic(), 0
            for _ in range(execs):
                lost += (await way(client, call, box.id)) != PAYLOAD
            wall = time.monotonic() - began
            print(f"exec   {name:<12} {execs / wall:6.1f} /s  {1000 * wall / execs:6.1f} ms  "
                  f"{lost}/{execs} outputs incomplete", flush=True)
        for name, attach in (("upgrade", attach_upgrade), ("sdk-socket", attach_sdk)) * 2:
            began = time.monotonic()
            for _ in range(execs):
                await attach(client, call, box.id)
            wall = time.monotonic() - began
            print(f"attach {name:<12} {execs / wall:6.1f} /s  {1000 * wall / execs:6.1f} ms", flush=True)
    finally:
        box.remove(force=True)
        call.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--engine", default=None, help="Docker engine URL (default: the local engine)")
    parser.add_argument("--preempt-ms", type=float, default=0.0, help="delay before each response head is read")
    args = parser.parse_args()
    from swerl.trainer.setup.auto import machine_summary

    print("\n".join(machine_summary()), flush=True)
    if args.preempt_ms:
        preempt_head_reads(args.preempt_ms / 1000)
    asyncio.run(main_async(args.execs, engine_url(args.engine)))


if __name__ == "__main__":
    main()
