"""How one command reaches a sandbox: the :class:`Command`, the :class:`CommandChannel` interface
its two transports implement, and the timeout rule they share.

The two transports (chosen in one place, :class:`~swerl.sandbox.runtime.commands.Commands`):

- the keeper (:mod:`swerl.sandbox.runtime.keeper`): PID 1 of every trial container runs
  commands it reads from its attached stdin; a command costs a fork/exec in the container.
- ``docker exec`` (:mod:`swerl.sandbox.runtime.execution`): one exec per command; two runc
  processes (~50 ms of CPU each) on top. Used when the keeper is busy, broken or absent, or
  the stdin is too big for it.

Either way the command is ``bash`` running :attr:`Command.script` with its processes tagged
``SWERL_EXEC=<tag>`` in their environment, so whatever outlives it (a timeout, a cancelled
wait, a daemonized grandchild) can be found and killed by that tag.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from swerl.sandbox.types import ExecResult

MARKER_ENV = "SWERL_EXEC"
# Seconds allowed past a command's timeout before swerl stops waiting and kills from outside.
STREAM_GRACE_S = 5.0


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command for a sandbox.

    Attributes:
        script: bash source; runs as ``bash`` with ``args`` as ``$1 ...``.
        max_output_bytes: output (stdout and stderr together) kept, head and tail.
        args: positional parameters of the script.
        stdin: bytes on the command's standard input, then EOF (None: empty).
        env: extra environment variables.
        workdir: working directory (absolute); None keeps the container's.
        timeout_s: seconds after which ``timeout -s KILL`` kills it inside the container;
            None: no in-container timeout (the script bounds itself, e.g. the verifier's).
        wait_s: seconds swerl waits for its end, past which the result is ``timed_out``;
            None: ``timeout_s`` + :data:`STREAM_GRACE_S`.
        tag: the ``SWERL_EXEC`` value of its processes (32 hex digits).

    Raises:
        ValueError: neither ``timeout_s`` nor ``wait_s`` given (a wait without an end).
    """

    script: str
    max_output_bytes: int
    args: tuple[str, ...] = ()
    stdin: bytes | None = None
    env: Mapping[str, str] | None = None
    workdir: str | None = None
    timeout_s: float | None = None
    wait_s: float | None = None
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.timeout_s is None and self.wait_s is None:
            raise ValueError("a Command needs timeout_s or wait_s")

    @property
    def deadline_s(self) -> float:
        """Seconds swerl waits for the command's end."""
        if self.wait_s is not None:
            return self.wait_s
        assert self.timeout_s is not None
        return self.timeout_s + STREAM_GRACE_S


class CommandChannel(Protocol):
    """A transport that runs :class:`Command` s in one container."""

    def can_take(self, command: Command) -> bool:
        """True when this channel can run ``command`` now (free, and its stdin fits)."""
        ...

    async def run(self, command: Command) -> ExecResult:
        """Run ``command`` and wait at most ``command.wait_s`` seconds.

        Returns:
            ExecResult; ``timed_out`` True (``exit_code`` None) when the wait ran out. Nothing
            is killed here: :func:`killed_by_timeout` and the caller's kill by tag do that.

        Raises:
            SandboxError: the transport failed (container gone, daemon error, broken stream).
            asyncio.CancelledError: the wait was cancelled; the command may still run.
        """
        ...

    def close(self) -> None:
        """Release the transport (the keeper's: the container then stops)."""
        ...


def killed_by_timeout(result: ExecResult, timeout_s: float | None) -> bool:
    """The timeout rule, for every transport: a command was killed by its timeout when the wait
    ran out (``result.timed_out``) or :func:`ended_by_timeout`."""
    return result.timed_out or ended_by_timeout(result.exit_code, result.duration_s, timeout_s)


def ended_by_timeout(exit_code: int | None, duration_s: float, timeout_s: float | None) -> bool:
    """True for exit 137 (``timeout -s KILL`` kills its own process group too) or 124 at the
    timeout of ``timeout_s`` seconds (within 50 ms): the commands' rule, and the verifier's for
    ``test.sh``."""
    return timeout_s is not None and exit_code in (124, 137) and duration_s >= timeout_s - 0.05


def seconds_arg(seconds: float) -> str:
    """``seconds`` as the argument of ``timeout`` (at least 1 ms, three decimals)."""
    return f"{max(seconds, 0.001):.3f}"
