"""A tmux session in a sandbox, driven the way Harbor's ``terminus-2`` agent drives it.

Every operation is one ``bash -c`` command through :meth:`Sandbox.exec` (as Harbor's
environments do): ``tmux new-session`` starts ``bash --login`` in a detached pane of
``width`` x ``height`` cells with ``TERM=xterm-256color`` (the pane echoes what is typed,
prompts included), ``tmux send-keys`` types keystrokes (any tmux key name such as ``C-c``,
``Escape`` or ``Up`` is a key; other text is typed literally), ``tmux capture-pane -p``
reads the screen (``-S -`` adds the scrollback).

:meth:`TmuxSession.incremental_output` reproduces terminus-2's diff of successive captures,
quirks included: the previous capture (stripped) is looked up in the new one and the text
from the offset of the previous capture's *last newline* on is shown under
``New Terminal Output:``; when the previous capture is not found, or nothing new came, the
visible screen is shown under ``Current Terminal Screen:``.

Source: Harbor ``src/harbor/agents/terminus_2/tmux_session.py`` (harbor-framework/main,
2026-05-02). Departures: no asciinema recording (nothing the model sees changes), and a task
image without tmux gets it from its package manager only (Harbor's last resort, building
tmux from a GitHub tarball, needs a network the sandboxes do not have).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.types import Outcome

if TYPE_CHECKING:
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.sandbox.types import ExecResult


log = logging.getLogger(__name__)

SESSION_NAME = "terminus-2"
PANE_LOG_PATH = "/logs/agent/terminus_2.pane"
HISTORY_LIMIT_LINES = 10_000_000
MAX_SEND_KEYS_COMMAND_CHARS = 16_000
"""tmux drops commands beyond its ~16 KB buffer; longer key lists are split (as Harbor does)."""

INSTALL_COMMANDS = {
    "apt-get": "DEBIAN_FRONTEND=noninteractive apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tmux",
    "dnf": "dnf install -y tmux",
    "yum": "yum install -y tmux",
    "apk": "apk add --no-cache tmux",
    "pacman": "pacman -S --noconfirm tmux",
    "zypper": "zypper install -y -n tmux",
}
"""Package-manager commands tried in this order when the image has no tmux (Harbor's list)."""


class TmuxSession:
    """One detached tmux session in a started sandbox.

    Args:
        sandbox: anything with ``async exec(command, timeout_s) -> ExecResult``.
        width, height: pane size in cells (terminus-2: 160 x 40).
        install_timeout_s: budget of the package-manager install when tmux is missing, seconds.
        exec_timeout_s: budget of each tmux command, seconds.
    """

    def __init__(self, sandbox: Sandbox, width: int = 160, height: int = 40,
                 install_timeout_s: float = 300.0, exec_timeout_s: float = 30.0):
        if width <= 0 or height <= 0:
            raise ValueError("tmux pane width and height must be positive")
        self.sandbox = sandbox
        self.width, self.height = width, height
        self.install_timeout_s = install_timeout_s
        self.exec_timeout_s = exec_timeout_s
        self._previous_buffer: str | None = None

    async def start(self) -> None:
        """Install tmux if needed, start the session, raise the scrollback limit.

        Raises:
            SandboxError: (outcome ``start_error``) tmux is missing and could not be installed,
                or the session did not start.
        """
        await self._ensure_tmux()
        start = (
            "export TERM=xterm-256color && export SHELL=/bin/bash && mkdir -p /logs/agent && "
            f"tmux new-session -x {self.width} -y {self.height} -d -s {SESSION_NAME} 'bash --login' \\; "
            f"pipe-pane -t {SESSION_NAME} 'cat > {PANE_LOG_PATH}'"
        )
        result = await self._exec(start)
        if result.exit_code != 0:
            raise SandboxError(f"tmux new-session failed: {result.output.strip()[-300:]}", outcome=Outcome.start_error)
        result = await self._exec(f"tmux set-option -g history-limit {HISTORY_LIMIT_LINES}")
        if result.exit_code != 0:
            log.warning("could not raise the tmux history-limit: %s", result.output.strip())
        await self._wait_for_shell()

    async def _wait_for_shell(self, timeout_s: float = 10.0, poll_s: float = 0.05) -> None:
        """Wait until the login shell has drawn its prompt (the screen is not blank), so the
        first observation never races the shell's start-up on a busy host. After ``timeout_s``
        seconds it goes on with a warning (a shell whose prompt is empty is still usable)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (await self.capture_pane()).strip():
                return
            await asyncio.sleep(poll_s)
        log.warning("the tmux shell drew nothing within %.0f s; the first screen may be blank", timeout_s)

    async def send_keys(self, keys: str | list[str], min_timeout_s: float = 0.0) -> None:
        """Type ``keys`` (one string = one key argument) and wait until ``min_timeout_s``
        seconds have passed since the first send (terminus-2's non-blocking send: the full
        duration always elapses; nothing checks whether the command finished).

        Raises:
            SandboxError: (outcome ``daemon_error``) tmux refused the keys.
        """
        started = time.monotonic()
        for command in send_keys_commands([keys] if isinstance(keys, str) else list(keys)):
            result = await self._exec(command)
            if result.exit_code != 0:
                raise SandboxError(f"tmux send-keys failed: {result.output.strip()[-300:]}", outcome=Outcome.daemon_error)
        remaining_s = min_timeout_s - (time.monotonic() - started)
        if remaining_s > 0:
            await asyncio.sleep(remaining_s)

    async def capture_pane(self, entire: bool = False) -> str:
        """The visible screen (``entire``: scrollback + screen), trailing spaces trimmed by tmux."""
        history = " -S -" if entire else ""
        result = await self._exec(f"tmux capture-pane -p{history} -t {SESSION_NAME}")
        return result.output or ""

    async def is_alive(self) -> bool:
        """Whether the session still exists (the shell may have been exited)."""
        result = await self._exec(f"tmux has-session -t {SESSION_NAME}")
        return result.exit_code == 0

    async def incremental_output(self) -> str:
        """New output since the last call under ``New Terminal Output:``, else the visible
        screen under ``Current Terminal Screen:`` (the first call always shows the screen)."""
        current = await self.capture_pane(entire=True)
        previous, self._previous_buffer = self._previous_buffer, current
        if previous is not None:
            new_content = find_new_content(previous, current)
            if new_content is not None and new_content.strip():
                return f"New Terminal Output:\n{new_content}"
        return f"Current Terminal Screen:\n{await self.capture_pane(entire=False)}"

    async def _ensure_tmux(self) -> None:
        if (await self._exec("tmux -V")).exit_code == 0:
            return
        for manager, command in INSTALL_COMMANDS.items():
            if (await self._exec(f"command -v {manager} >/dev/null 2>&1")).exit_code != 0:
                continue
            log.info("installing tmux with %s", manager)
            await self.sandbox.exec(command, timeout_s=self.install_timeout_s)
            break
        if (await self._exec("tmux -V")).exit_code != 0:
            raise SandboxError(
                "the task image has no tmux and its package manager could not install it "
                "(the sandbox is offline); add tmux to the image or use protocol terminus-json-fast",
                outcome=Outcome.start_error,
            )

    async def _exec(self, command: str) -> ExecResult:
        return await self.sandbox.exec(command, timeout_s=self.exec_timeout_s)


def find_new_content(previous: str, current: str) -> str | None:
    """terminus-2's diff of two captures: None when the stripped ``previous`` is not in
    ``current``; else ``current`` from the offset of ``previous``'s last newline (an offset
    into ``previous``, as in Harbor), or from where ``previous`` starts when it has none."""
    pb = previous.strip()
    if pb not in current:
        return None
    idx = pb.rfind("\n") if "\n" in pb else current.index(pb)
    return current[idx:]


def send_keys_commands(keys: list[str]) -> list[str]:
    """``tmux send-keys`` command lines typing ``keys``, each under the tmux length limit
    (keys spread over several commands; an oversized key split into quoted chunks)."""
    prefix = f"tmux send-keys -t {shlex.quote(SESSION_NAME)}"
    quoted = [shlex.quote(key) for key in keys]
    single = " ".join([prefix, *quoted])
    if len(single) <= MAX_SEND_KEYS_COMMAND_CHARS:
        return [single]
    commands: list[str] = []
    batch: list[str] = []
    for piece in _pieces(keys, MAX_SEND_KEYS_COMMAND_CHARS - len(prefix) - 1):
        if batch and len(prefix) + sum(1 + len(p) for p in batch) + 1 + len(piece) > MAX_SEND_KEYS_COMMAND_CHARS:
            commands.append(" ".join([prefix, *batch]))
            batch = []
        batch.append(piece)
    if batch:
        commands.append(" ".join([prefix, *batch]))
    return commands


def _pieces(keys: list[str], max_quoted_chars: int) -> list[str]:
    """Each key quoted; a key whose quoted form is too long becomes several quoted chunks."""
    pieces: list[str] = []
    for key in keys:
        if len(shlex.quote(key)) <= max_quoted_chars:
            pieces.append(shlex.quote(key))
            continue
        rest = key
        while rest:
            lo, hi, best = 1, len(rest), 1
            while lo <= hi:  # longest prefix whose quoted form fits
                mid = (lo + hi) // 2
                if len(shlex.quote(rest[:mid])) <= max_quoted_chars:
                    best, lo = mid, mid + 1
                else:
                    hi = mid - 1
            pieces.append(shlex.quote(rest[:best]))
            rest = rest[best:]
    return pieces
