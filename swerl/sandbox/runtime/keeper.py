"""The in-container command channel: PID 1 of every trial container runs commands it reads
from its attached stdin, so a command costs a fork/exec inside the container instead of a
``docker exec`` (which starts two runc processes, ~50 ms of CPU each).

Protocol on the container's stdin, one command at a time: a header line
``<token> <timeout seconds, 0 = none> <script bytes> <stdin bytes>``, then the raw script
and stdin bytes. The keeper runs ``[timeout -s KILL T] bash script < stdin 2>&1`` as its
direct child (tagged ``SWERL_EXEC=<token>``), then prints ``\\x1eswerl-done <token> <rc>\\x1f``.
Between commands it reaps orphans. Being PID 1 it survives ``kill -KILL -1`` from inside.

Self-stop: containers are created with ``StdinOnce`` and swerl attaches to them *before*
starting them (:mod:`swerl.sandbox.deployment.pool`), so the keeper's stdin closes when swerl's
connection does, whoever closes it: a normal end, or the kernel when the swerl process dies
(``kill -9``, a crash). On EOF the keeper exits and, being PID 1, stops the container at once;
no container of a dead run keeps running until the next gc (it stays, stopped, for the gc).

It is one of the two :class:`~swerl.sandbox.runtime.channel.CommandChannel` s; a command goes
to ``docker exec`` instead whenever this channel is busy or broken. A command whose wait is
cancelled or times out leaves the channel broken (never busy-forever) and its processes are
killed by their ``SWERL_EXEC`` tag, so the next command in that sandbox works.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
import struct
import time
from collections.abc import Mapping

from swerl.errors import SandboxError
from swerl.sandbox.runtime.channel import Command, seconds_arg
from swerl.sandbox.endpoint import Endpoint
from swerl.sandbox.runtime.streams import CappedOutput
from swerl.sandbox.types import ExecResult

log = logging.getLogger(__name__)

KEEPER = r"""
d=/tmp/.swerl-keeper
while read -r tok t clen slen; do
  [ -d "$d" ] || mkdir -p "$d"
  if [ "$clen" -gt 0 ]; then dd of="$d/cmd.sh" bs="$clen" count=1 iflag=fullblock status=none; else : > "$d/cmd.sh"; fi
  if [ "$slen" -gt 0 ]; then dd of="$d/cmd.in" bs="$slen" count=1 iflag=fullblock status=none; else : > "$d/cmd.in"; fi
  if [ "$t" = 0 ]; then SWERL_EXEC=$tok bash "$d/cmd.sh" < "$d/cmd.in" 2>&1
  else SWERL_EXEC=$tok timeout -s KILL "$t" bash "$d/cmd.sh" < "$d/cmd.in" 2>&1; fi
  rc=$?
  : > "$d/cmd.in"
  printf '\036swerl-done %s %s\037' "$tok" "$rc"
done
exit 0
"""
# One command at a time, so one pair of files serves them all; the input is emptied after each
# command (no rm or mkdir per command: a fork/exec costs ~3 ms of CPU each on a small VM). In the
# agent's container these files, like bash and dd, are the agent's to change: nothing run there
# is trusted more than the agent (the clean room's copy-out is checked on swerl's side; the
# same-container verifier is documented as running with the agent's binaries).
_DONE_RE = re.compile(rb"\x1eswerl-done ([0-9a-f]{32}) (\d+)\x1f")
_WINDOW = 64  # bytes held back while looking for the end marker
# The keeper reads a command's stdin in one `dd` block; bigger inputs go by `docker exec`.
MAX_STDIN_BYTES = 8 * 1024 * 1024


class KeeperChannel:
    """The attached stdin/stdout of one container's keeper: a
    :class:`~swerl.sandbox.runtime.channel.CommandChannel` that runs one command at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._lock = asyncio.Lock()
        self.broken = False

    @classmethod
    async def attach(cls, endpoint: Endpoint, container_id: str, timeout_s: float) -> KeeperChannel:
        """Attach to the container's stdin/stdout/stderr (one HTTP upgrade, no process started).

        Raises:
            SandboxError: the daemon refused or did not answer within ``timeout_s``.
        """
        path = f"containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1"
        reader, writer = await endpoint.upgrade(path, b"", timeout_s)
        return cls(reader, writer)

    @property
    def busy(self) -> bool:
        """True while a command runs (or the channel is unusable)."""
        return self.broken or self._lock.locked()

    def can_take(self, command: Command) -> bool:
        """Free, and the command's stdin fits in :data:`MAX_STDIN_BYTES`."""
        return not self.busy and len(command.stdin or b"") <= MAX_STDIN_BYTES

    async def run(self, command: Command) -> ExecResult:
        """Send ``command`` to the keeper and read its output up to the end marker.

        Returns:
            ExecResult; ``timed_out`` True and the channel marked broken when
            ``command.deadline_s`` passed (the caller kills the processes tagged
            ``command.tag``). A cancelled wait also marks the channel broken (the keeper may
            still be running the command).

        Raises:
            SandboxError: the connection broke (no ``outcome``: the caller finds out why).
        """
        async with self._lock:
            began = time.monotonic()
            script = _prelude(command.env, command.workdir, command.args) + command.script.encode("utf-8", "surrogateescape")
            stdin = command.stdin or b""
            limit = "0" if command.timeout_s is None else seconds_arg(command.timeout_s)
            self._writer.write(f"{command.tag} {limit} {len(script)} {len(stdin)}\n".encode() + script + stdin)
            sink = CappedOutput(command.max_output_bytes)
            try:
                await self._writer.drain()
                exit_code = await asyncio.wait_for(self._read_until_done(command.tag, sink), command.deadline_s)
            except asyncio.CancelledError:
                self.broken = True
                raise
            except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError) as err:
                self.broken = True
                if not isinstance(err, asyncio.TimeoutError):
                    raise SandboxError(f"the sandbox keeper channel broke: {err}") from err
                exit_code = None
            return ExecResult(exit_code=exit_code, output=sink.text(), timed_out=exit_code is None,
                              duration_s=time.monotonic() - began, truncated_bytes=sink.dropped)

    async def _read_until_done(self, token: str, sink: CappedOutput) -> int:
        pending = b""
        while True:
            header = await self._reader.readexactly(8)
            (length,) = struct.unpack(">I", header[4:])
            pending += await self._reader.readexactly(length)
            for match in _DONE_RE.finditer(pending):
                if match.group(1).decode() == token:
                    sink.add(pending[: match.start()])
                    return int(match.group(2))
            if len(pending) > _WINDOW:
                sink.add(pending[:-_WINDOW])
                pending = pending[-_WINDOW:]

    def close(self) -> None:
        """Drop the connection; the keeper sees EOF and stops the container (``StdinOnce``)."""
        self.broken = True
        self._writer.close()


def keeper_script_args() -> list[str]:
    """Entrypoint of trial containers: the keeper loop under ``/bin/sh``."""
    return ["/bin/sh", "-c", KEEPER]


def _prelude(env: Mapping[str, str] | None, workdir: str | None, args: tuple[str, ...]) -> bytes:
    """Shell lines that set a command's environment, working directory and ``$1 ...``."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items() if k.isidentifier()]
    if workdir:
        lines.append(f"cd -- {shlex.quote(workdir)} || exit 1")
    if args:
        lines.append(f"set -- {shlex.join(args)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


__all__ = ["KEEPER", "MAX_STDIN_BYTES", "KeeperChannel", "keeper_script_args"]
