"""Async byte streams of ``docker exec`` and ``attach`` on a hijacked connection (opened by
``swerl.sandbox.endpoint.Endpoint.upgrade``): the frames on it and a capped output buffer.
"""

from __future__ import annotations

import asyncio
import struct


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
