"""Two ways to stream one ``docker exec``: swerl's asyncio HTTP upgrade (``Endpoint.upgrade``)
against the docker SDK's ``exec_start(socket=True)`` read in a worker thread.

    .venv/bin/python bench/exec_transport.py [--execs N] [--engine URL]

Each way runs ``printf`` of a 64 KiB marker line N times in one container and checks that
every byte arrived (the SDK's socket sits behind an HTTP client that has already read the
response head through a buffered reader, so bytes that arrive with the head can be lost).
Prints execs/s and lost outputs per way. Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import time

import docker

from swerl.sandbox.docker_api import DockerCaller, engine_url
from swerl.sandbox.runtime.streams import CappedOutput, Endpoint, open_exec_stream, read_frames

PAYLOAD = 65536
COMMAND = ["sh", "-c", f"head -c {PAYLOAD} /dev/zero | tr '\\0' x"]


async def via_upgrade(client: docker.DockerClient, call: DockerCaller, container: str) -> int:
    exec_id = (await call(client.api.exec_create, container, COMMAND))["Id"]
    reader, writer = await open_exec_stream(call.endpoint, exec_id, False, 30.0)
    sink = CappedOutput(1 << 20)
    await read_frames(reader, sink)
    writer.close()
    return len(sink.text())


def _read_sdk_socket(client: docker.DockerClient, container: str) -> int:
    exec_id = client.api.exec_create(container, COMMAND)["Id"]
    sock = client.api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    raw.settimeout(30)
    data = bytearray()
    while True:
        chunk = raw.recv(65536) if isinstance(raw, socket.socket) else raw.read(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    out, pos = 0, 0
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", bytes(data[pos + 4 : pos + 8]))
        out += min(length, len(data) - pos - 8)
        pos += 8 + length
    return out


async def via_sdk_socket(client: docker.DockerClient, call: DockerCaller, container: str) -> int:
    return await call(_read_sdk_socket, client, container)


async def main_async(execs: int, url: str) -> None:
    client = docker.DockerClient(base_url=url, timeout=60)
    call = DockerCaller(8, 60.0, Endpoint.of(url, client.api.api_version))
    box = client.containers.run("python:3.10-slim", ["sleep", "600"], detach=True, network_mode="none",
                                labels={"swerl.run": "bench-exec-transport"})
    try:
        for name, way in (("upgrade", via_upgrade), ("sdk-socket", via_sdk_socket)) * 2:
            began, lost = time.monotonic(), 0
            for _ in range(execs):
                lost += (await way(client, call, box.id)) != PAYLOAD
            wall = time.monotonic() - began
            print(f"{name:<10} {execs / wall:6.1f} execs/s  {1000 * wall / execs:6.1f} ms/exec  "
                  f"{lost}/{execs} outputs incomplete", flush=True)
    finally:
        box.remove(force=True)
        call.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--engine", default=None, help="Docker engine URL (default: the local engine)")
    args = parser.parse_args()
    asyncio.run(main_async(args.execs, engine_url(args.engine)))


if __name__ == "__main__":
    main()
