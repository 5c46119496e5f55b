"""The Docker wire: where one engine listens, and the one HTTP exchange swerl writes itself
(``POST ... Upgrade: tcp``), whose hijacked connection carries ``docker exec`` and ``attach``.

Both sides of the sandbox stand on it: ``docker_api`` (every SDK call of one engine) and the
runtime's exec and attach streams (``runtime/streams.py`` reads the frames on it).

``POST /exec/{id}/start`` answers ``101 UPGRADED`` and then streams the process's output
(multiplexed 8-byte frames without a TTY, raw bytes with one) and, with a TTY, accepts
stdin on the same socket. We speak that exchange directly on an asyncio connection so that
reading never ties up a thread and no byte is lost in an HTTP client's read-ahead buffer.

Why not the docker SDK's socket API (``exec_start(socket=True)``, ``attach_socket``):
``bench/exec_transport.py`` measured it (docs/sandbox.md, "Command transport"). An exec costs
the same either way (runc dominates), an attach 2-6x more by the SDK; the SDK hands out the
socket *behind* ``http.client``'s buffered reader, so output that arrives with the response
head is lost (19 of 20 execs when the client is descheduled 200 ms before it reads the head);
and over TLS it hands out an ``ssl.SSLSocket``, which asyncio cannot adopt, so every open
stream (a keeper's lasts the whole trial) would hold a thread.
"""

from __future__ import annotations

import asyncio
import json
import ssl as ssl_module
from dataclasses import dataclass
from urllib.parse import urlparse

from swerl.errors import SandboxError

_HEADER_LIMIT = 64 * 1024
LOCAL_ENGINE_URL = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class Endpoint:
    """Where one Docker engine listens, for the streams the SDK cannot give us unbuffered.

    Attributes:
        url: the engine URL as configured (``unix:///path``, ``tcp://host:port``, ``https://...``).
        kind: ``"unix"`` or ``"tcp"``.
        address: the socket path, or ``"host:port"``.
        api_version: the API version the client negotiated (e.g. ``"1.41"``).
        ssl: TLS context for a ``tcp`` engine served over TLS, else None.
    """

    url: str
    kind: str
    address: str
    api_version: str
    ssl: ssl_module.SSLContext | None = None

    @classmethod
    def of(cls, url: str, api_version: str, ssl: ssl_module.SSLContext | None = None) -> Endpoint:
        """Parse ``url``; an ``https://`` URL or a TLS context means TLS.

        Raises:
            SandboxError: not ``unix://``, ``tcp://``, ``http://`` or ``https://``.
        """
        if url.startswith("unix://"):
            return cls(url, "unix", url[len("unix://"):], api_version)
        parsed = urlparse(url.replace("tcp://", "http://", 1))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise SandboxError(f"unsupported Docker endpoint {url!r}; use unix:///path or tcp://host:port")
        if parsed.scheme == "https" and ssl is None:
            ssl = ssl_module.create_default_context()
        default_port = 2376 if ssl is not None else 2375
        return cls(url, "tcp", f"{parsed.hostname}:{parsed.port or default_port}", api_version, ssl)

    async def upgrade(
        self, path: str, body: bytes, timeout_s: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """``POST /v<api>/<path>`` with ``Upgrade: tcp`` and return the hijacked (reader, writer).

        This is the one HTTP exchange swerl writes itself (exec start and container attach both
        use it): after ``101 UPGRADED`` the connection carries raw process I/O, and reading it on
        asyncio keeps every byte (an HTTP client's read-ahead buffer would swallow some).

        Raises:
            SandboxError: the daemon refused (e.g. the container is gone) or did not answer
                within ``timeout_s`` seconds.
        """
        head = (
            f"POST /v{self.api_version}/{path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
        ).encode()

        async def _open() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            if self.kind == "unix":
                reader, writer = await asyncio.open_unix_connection(self.address, limit=_HEADER_LIMIT)
            else:
                host, port = self.address.rsplit(":", 1)
                reader, writer = await asyncio.open_connection(host, int(port), limit=_HEADER_LIMIT, ssl=self.ssl)
            writer.write(head + body)
            await writer.drain()
            status_head = await reader.readuntil(b"\r\n\r\n")
            status = status_head.split(b"\r\n", 1)[0].decode("latin-1")
            if int(status.split()[1]) not in (101, 200):
                detail = await _read_error_body(reader, status_head)
                writer.close()
                raise SandboxError(f"docker {path.split('?')[0]} failed: {status}: {detail}")
            return reader, writer

        try:
            return await asyncio.wait_for(_open(), timeout_s)
        except asyncio.TimeoutError as err:
            raise SandboxError(f"docker {path.split('?')[0]} did not answer within {timeout_s:.0f} s") from err
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as err:
            raise SandboxError(f"docker {path.split('?')[0]} failed: {err}") from err


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
