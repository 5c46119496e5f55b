"""Async byte streams of ``docker exec``: the hijacked HTTP connection and a capped output buffer.

``POST /exec/{id}/start`` answers ``101 UPGRADED`` and then streams the process's output
(multiplexed 8-byte frames without a TTY, raw bytes with one) and, with a TTY, accepts
stdin on the same socket. We speak that exchange directly on an asyncio connection so that
reading never ties up a thread and no byte is lost in an HTTP client's read-ahead buffer.
"""

from __future__ import annotations

import asyncio
import json
import struct
from urllib.parse import urlparse

from swerl.errors import SandboxError

_HEADER_LIMIT = 64 * 1024


async def open_exec_stream(
    base_url: str, api_version: str, exec_id: str, tty: bool, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Start exec ``exec_id`` and return the upgraded (reader, writer) pair.

    Args:
        base_url: the client's ``base_url`` (``http+docker://localhost`` for the unix socket,
            or ``http://host:port``); the unix path comes from ``DOCKER_HOST`` handling in
            :func:`socket_address`.
        tty: whether the exec was created with a TTY (raw stream instead of frames).
        timeout_s: deadline for connecting and reading the response head, seconds.

    Raises:
        SandboxError: the daemon refused (e.g. the container is gone) or did not answer in time.
    """
    kind, address = socket_address(base_url)
    body = json.dumps({"Detach": False, "Tty": tty}).encode()
    head = (
        f"POST /v{api_version}/exec/{exec_id}/start HTTP/1.1\r\n"
        "Host: docker\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
    ).encode()

    async def _open() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if kind == "unix":
            reader, writer = await asyncio.open_unix_connection(address, limit=_HEADER_LIMIT)
        else:
            host, port = address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port), limit=_HEADER_LIMIT)
        writer.write(head + body)
        await writer.drain()
        status_head = await reader.readuntil(b"\r\n\r\n")
        status = status_head.split(b"\r\n", 1)[0].decode("latin-1")
        code = int(status.split()[1])
        if code not in (101, 200):
            detail = await _read_error_body(reader, status_head)
            writer.close()
            raise SandboxError(f"docker exec start failed: {status}: {detail}")
        return reader, writer

    try:
        return await asyncio.wait_for(_open(), timeout_s)
    except asyncio.TimeoutError as err:
        raise SandboxError(f"docker exec start did not answer within {timeout_s:.0f} s") from err
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as err:
        raise SandboxError(f"docker exec start failed: {err}") from err


async def _read_error_body(reader: asyncio.StreamReader, head: bytes) -> str:
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    try:
        raw = await asyncio.wait_for(reader.read(length or 4096), 5.0)
        return json.loads(raw).get("message", raw.decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - best effort detail for an error message
        return "(no detail)"


def socket_address(base_url: str) -> tuple[str, str]:
    """Map a docker-SDK ``base_url`` to ``("unix", path)`` or ``("tcp", "host:port")``."""
    import os

    if base_url.startswith("http+docker://"):
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if host.startswith("unix://"):
            return "unix", host[len("unix://") :]
        base_url = host
    if base_url.startswith("unix://"):
        return "unix", base_url[len("unix://") :]
    parsed = urlparse(base_url.replace("tcp://", "http://"))
    if parsed.scheme not in ("http", "") or not parsed.hostname:
        raise SandboxError(f"unsupported Docker endpoint for streaming exec: {base_url} (use unix:// or plain tcp://)")
    return "tcp", f"{parsed.hostname}:{parsed.port or 2375}"


class CappedOutput:
    """Keeps the first and last ``max_bytes // 2`` bytes of a stream and counts the rest.

    Memory stays O(max_bytes) however much a command prints.
    """

    def __init__(self, max_bytes: int) -> None:
        self.head_cap = max_bytes // 2
        self.tail_cap = max_bytes - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        """Append ``data`` (bytes), dropping from the middle once the cap is reached."""
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        extra = len(self.tail) - self.tail_cap
        if extra > 0:
            del self.tail[:extra]
            self.dropped += extra

    def text(self) -> str:
        """Head + marker + tail, decoded as UTF-8 with replacement."""
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail).decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes truncated ...]\n{tail}"
        return head + tail


async def read_frames(reader: asyncio.StreamReader, sink: CappedOutput) -> None:
    """Copy a multiplexed (non-TTY) exec stream into ``sink`` until EOF.

    Each frame: 1 byte stream id, 3 zero bytes, 4 bytes big-endian length, then the payload.
    """
    while True:
        try:
            header = await reader.readexactly(8)
        except asyncio.IncompleteReadError:
            return
        (length,) = struct.unpack(">I", header[4:])
        remaining = length
        while remaining:
            chunk = await reader.read(min(remaining, 65536))
            if not chunk:
                return
            sink.add(chunk)
            remaining -= len(chunk)
