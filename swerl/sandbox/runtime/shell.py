"""A persistent interactive bash in a sandbox: the terminal the terminus-json agent types into.

One ``docker exec`` of ``bash -i`` with a TTY and an attached stdin socket (its helper
commands, which list and kill the shell's children, go through the sandbox's
:class:`~swerl.sandbox.runtime.commands.Commands` like any other). Commands share
state (``cd``, variables, background jobs) like keystrokes in Harbor's tmux pane. Bash's
prompts are replaced by invisible markers (``PS1``/``PS2``), which tell swerl when a submitted
line has finished without polling; the markers never reach the caller. Ctrl-C is a real
``\\x03`` on the TTY, so the line discipline interrupts the foreground job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.runtime.channel import Command
from swerl.sandbox.types import ExecResult

if TYPE_CHECKING:
    from swerl.sandbox.runtime.commands import Commands

log = logging.getLogger(__name__)

PS1_MARK = b"\x1eswerl-ps1\x1f"
PS2_MARK = b"\x1eswerl-ps2\x1f"
# tmux key names an agent may send as a whole keystroke string (terminus-2 uses "C-c").
KEY_NAMES = {"C-c": b"\x03", "C-d": b"\x04", "C-z": b"\x1a", "C-\\": b"\x1c", "Enter": b"\n", "Escape": b"\x1b"}
_RC_RE = re.compile(rb"\x1eswerl-rc:([0-9a-f]{32}):(\d+)\x1f")
_INIT_RE = re.compile(rb"\x1eswerl-init:([0-9a-f]{32}):(\d+)\x1f")



def to_wire(text: str) -> bytes:
    """``text`` as the bytes sent to the shell: UTF-8, bytes decoded with ``surrogateescape`` sent
    back as they were, any other lone surrogate (which UTF-8 cannot encode) as ``?``."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


class ShellExited(SandboxError):
    """The persistent shell is gone: the agent ended it (``exit``, ``exec``, ``set -e`` then a failing
    command), or its container stopped. An episode ends there as completed and is verified."""


class Shell:
    """One persistent ``bash -i`` inside a container. Create with :meth:`Shell.open`.

    Attributes:
        still_running: after :meth:`send_keys`, True when a submitted command has not
            finished yet (it keeps running; a later ``send_keys`` sees its output).
        bash_pid: pid of the shell inside the container.
    """

    def __init__(
        self, commands: Commands, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_buffer_bytes: int
    ) -> None:
        self._commands = commands
        self._reader, self._writer = reader, writer
        self._max_buffer = max_buffer_bytes
        self._buf = bytearray()
        self._buf_start = 0  # absolute stream offset of self._buf[0]
        self._read_pos = 0  # absolute offset up to which the caller has seen output
        self._dropped = 0
        self._changed = asyncio.Event()
        self._eof = False
        self._pump = asyncio.create_task(self._read_loop(), name=f"swerl-shell-{commands.container_id[:12]}")
        self.still_running = False
        self.bash_pid: int | None = None

    @classmethod
    async def open(
        cls,
        commands: Commands,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        max_buffer_bytes: int = 1_000_000,
        timeout_s: float = 30.0,
    ) -> Shell:
        """Start ``bash -i`` in the container of ``commands`` and wait until it answers.

        Raises:
            SandboxError: the exec could not start or bash did not answer within ``timeout_s``.
        """
        environment = {"TERM": "dumb", "PS1": "", "HISTFILE": "/dev/null", **(env or {})}
        argv = ["bash", "--noediting", "--norc", "--noprofile", "-i"]
        reader, writer = await commands.docker_exec.start_interactive(argv, environment, workdir, timeout_s)
        shell = cls(commands, reader, writer, max_buffer_bytes)
        try:
            await shell._initialize(timeout_s)
        except BaseException:
            await shell.close()
            raise
        return shell

    async def _initialize(self, timeout_s: float) -> None:
        token = uuid.uuid4().hex
        self._write(
            b"stty -echo -onlcr cols 200 rows 50 2>/dev/null; unset PROMPT_COMMAND; "
            b"PS1=$'\\x1eswerl-ps1\\x1f'; PS2=$'\\x1eswerl-ps2\\x1f'; "
            + f"printf '\\036swerl-init:%s:%s\\037' {token} $$\n".encode()
        )
        match = await self._wait_for(lambda data: _INIT_RE.search(data), 0, time.monotonic() + timeout_s)
        if match is None or match.group(1).decode() != token:
            raise SandboxError(f"the sandbox shell did not start within {timeout_s:.0f} s")
        self.bash_pid = int(match.group(2))
        # Swallow everything up to the first prompt after the init line.
        prompt_at = await self._wait_for(
            lambda data: data.find(PS1_MARK, match.end()) + 1 or None, 0, time.monotonic() + timeout_s
        )
        self._read_pos = self._buf_start + (prompt_at - 1 + len(PS1_MARK) if prompt_at else len(self._buf))

    # --- public API -------------------------------------------------------------

    async def send_keys(self, text: str, wait_s: float = 1.0) -> str:
        """Type ``text`` into the shell and return the output that appeared since the last read.

        Waits up to ``wait_s`` seconds, returning early once every submitted line has finished.
        A whole-string tmux key name (``"C-c"``, ``"C-d"``, ...) sends that control key.
        Afterwards :attr:`still_running` tells whether a command is still executing; it keeps
        running and its later output comes with the next call.

        Raises:
            ShellExited: the shell has exited (e.g. the agent typed ``exit``).
        """
        data = KEY_NAMES.get(text, to_wire(text))
        start = self._buf_start + len(self._buf)
        expected_prompts = data.count(b"\n") + data.count(b"\x03")
        self._write(data)
        deadline = time.monotonic() + max(wait_s, 0.0)
        await self._wait_for(lambda _: self._is_settled(start, expected_prompts) or None, 0, deadline)
        if self._is_settled(start, expected_prompts):
            self.still_running = False
        else:
            self.still_running = await self.is_busy()
        return self.read_output()

    async def run(self, command: str, timeout_s: float = 30.0) -> ExecResult:
        """Run ``command`` in the shell (sees earlier ``cd``/variables) and wait for it.

        Stdin of the command is ``/dev/null``. On timeout the command gets Ctrl-C, then its
        process groups are killed; ``timed_out`` is True and ``exit_code`` None.

        Raises:
            ShellExited: the shell has exited (before or during the command).
        """
        token = uuid.uuid4().hex
        self.read_output()  # drop what earlier keystrokes left unread
        start_pos = self._buf_start + len(self._buf)
        began = time.monotonic()
        self._write(
            to_wire(f"{{\n{command}\n}} </dev/null; printf '\\036swerl-rc:%s:%d\\037' {token} $?\n")
        )
        match = await self._wait_for(
            lambda data: next((m for m in _RC_RE.finditer(data) if m.group(1).decode() == token), None),
            start_pos,
            began + timeout_s,
        )
        if match is not None:
            end = start_pos + match.start()
            output = self._text(start_pos, end)
            self._read_pos = start_pos + match.end()
            return ExecResult(
                exit_code=int(match.group(2)), output=output, duration_s=time.monotonic() - began
            )
        output = self._text(start_pos, self._buf_start + len(self._buf))
        if self._eof:
            raise ShellExited("the sandbox shell has exited")
        await self.interrupt()
        self.read_output()
        return ExecResult(exit_code=None, output=output, timed_out=True, duration_s=time.monotonic() - began)

    async def interrupt(self, grace_s: float = 1.0) -> None:
        """Ctrl-C the foreground job; SIGKILL the shell's child process groups if it ignores it."""
        start = self._buf_start + len(self._buf)
        self._write(b"\x03")
        prompt = await self._wait_for(lambda data: PS1_MARK in data or None, start, time.monotonic() + grace_s)
        if prompt is None and await self.is_busy():
            await self._kill_children()
            await self._wait_for(lambda data: PS1_MARK in data or None, start, time.monotonic() + 2.0)

    async def is_busy(self) -> bool:
        """True when bash has a child process (a foreground or background job is running)."""
        return bool(await self._children())

    def read_output(self) -> str:
        """Output since the last read (prompt markers removed, decoded with replacement)."""
        end = self._buf_start + len(self._buf)
        text = self._text(self._read_pos, end)
        self._read_pos = end
        return text

    @property
    def is_alive(self) -> bool:
        """False once bash has exited or the stream closed."""
        return not self._eof

    async def close(self) -> None:
        """Close the stream and stop the reader (bash gets EOF/SIGHUP and exits)."""
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump
        self._writer.close()

    # --- internals --------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._eof:
            raise ShellExited("the sandbox shell has exited")
        self._writer.write(data)

    async def _read_loop(self) -> None:
        try:
            while chunk := await self._reader.read(65536):
                self._buf += chunk
                overflow = len(self._buf) - self._max_buffer
                if overflow > 0:  # keep the newest bytes; count what the caller never saw
                    self._dropped += max(0, min(overflow, self._buf_start + overflow - self._read_pos))
                    del self._buf[:overflow]
                    self._buf_start += overflow
                self._changed.set()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._eof = True
            self._changed.set()

    async def _wait_for(self, probe, start_pos: int, deadline: float):  # noqa: ANN001, ANN202
        """Await until ``probe(buffer bytes from start_pos)`` is truthy or ``deadline`` passes."""
        while True:
            offset = max(0, start_pos - self._buf_start)
            result = probe(bytes(self._buf[offset:]))
            if result:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._eof:
                return None
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def _is_settled(self, start: int, expected_prompts: int) -> bool:
        data = bytes(self._buf[max(0, start - self._buf_start) :])
        prompts = data.count(PS1_MARK) + data.count(PS2_MARK)
        return prompts >= expected_prompts and data.rstrip().endswith((PS1_MARK, PS2_MARK))

    def _text(self, start: int, end: int) -> str:
        raw = bytes(self._buf[max(0, start - self._buf_start) : max(0, end - self._buf_start)])
        raw = raw.replace(PS1_MARK, b"").replace(PS2_MARK, b"").replace(b"\r\n", b"\n")
        return raw.decode("utf-8", "replace")

    async def _children(self) -> list[int]:
        script = (
            f"for s in /proc/[0-9]*/stat; do read -r p c st pp rest < \"$s\" 2>/dev/null || continue; "
            f'[ "$pp" = "{self.bash_pid}" ] && echo "$p"; done; true'
        )
        result = await self._commands.run(Command(script=script, max_output_bytes=65536, timeout_s=10.0))
        return [int(x) for x in result.output.split() if x.isdigit()]

    async def _kill_children(self) -> None:
        pids = " ".join(str(p) for p in await self._children())
        if pids:
            kill = f"for p in {pids}; do kill -KILL -- -$p 2>/dev/null; kill -KILL $p 2>/dev/null; done; true"
            await self._commands.run(Command(script=kill, max_output_bytes=65536, timeout_s=10.0))
