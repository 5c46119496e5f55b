"""terminus-json-fast: swerl's quicker variant of Harbor's ``terminus-2`` (a departure; the
faithful one is ``terminus2.py``, protocol ``terminus-json``; ``docs/terminus2.md`` lists
the differences).

Each reply is ``{"analysis", "plan", "commands": [{"keystrokes", "duration"}], "task_complete"}``.
Keystrokes go to one persistent shell; after each command the protocol waits ``duration``
seconds (capped by the per-command timeout) and reads the new terminal output. The next
user turn is that output, truncated to the byte budget (head + tail). A command still
busy after its wait is reported as still running. ``task_complete: true`` must come twice
in a row: the first time the agent is asked to confirm. An unparsable reply gets Harbor's
parser-error message as the next turn; too many in a row end the episode.

Unlike terminus-2 the shell has echo off and no prompts, a command returns as soon as the
prompt comes back, the first screen is made up, thinking is stripped before parsing and
the confirmation turn carries the raw output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swerl.agent.protocols.base import AgentProtocol, TurnResult, at_parse_failure_cap, limit_output_bytes, strip_thinking
from swerl.agent.protocols.terminus_parser import Command, ParsedReply, parse_terminus_reply
from swerl.agent.protocols.terminus_texts import CONFIRM_TEMPLATE, PROMPT_TEMPLATE, parse_error_message

if TYPE_CHECKING:
    from swerl.agent.config import AgentConfig
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.sandbox.runtime.shell import Shell

INITIAL_TERMINAL_STATE = "Current Terminal Screen:\nroot@sandbox:/app# "

STILL_RUNNING_NOTE = (
    "[The last command is still running after {waited_s:g} s. Wait for it with "
    '{{"keystrokes": "", "duration": 10.0}} or interrupt it with {{"keystrokes": "C-c", "duration": 0.1}}.]'
)

# tmux key names Harbor's agent may send as a whole keystroke string.
CONTROL_KEYS = {"C-c": "\x03", "C-d": "\x04", "C-z": "\x1a", "C-l": "\x0c", "C-\\": "\x1c"}


def translate_keystrokes(keystrokes: str) -> str:
    """Map a tmux key name (``C-c``, ``C-d`` ...) to its control character; other text is verbatim."""
    return CONTROL_KEYS.get(keystrokes.strip(), keystrokes)


class TerminusJson(AgentProtocol):
    """The terminus-json-fast state machine around one persistent shell per episode."""

    name = "terminus-json-fast"

    def __init__(self, cfg: AgentConfig):
        super().__init__(cfg)
        self.shell: Shell | None = None
        self.pending_completion = False
        self.consecutive_parse_failures = 0

    def initial_messages(self, instruction: str) -> list[dict]:
        text = PROMPT_TEMPLATE.format(
            instruction=instruction.strip(),
            terminal_state=INITIAL_TERMINAL_STATE,
            max_wait_s=self.cfg.limits.command_timeout_s,
        )
        return [{"role": "user", "content": text}]

    async def start(self, sandbox: Sandbox) -> None:
        self.shell = await sandbox.open_shell()

    async def act(self, reply: str, sandbox: Sandbox) -> TurnResult:
        parsed = parse_terminus_reply(strip_thinking(reply))
        if parsed.error:
            return self._parse_failure(parsed)
        self.consecutive_parse_failures = 0
        output, still_running_after = await self._run_commands(parsed.commands)
        output = limit_output_bytes(output, self.cfg.output_budget_bytes)
        if still_running_after is not None:
            output += "\n" + STILL_RUNNING_NOTE.format(waited_s=still_running_after)
        if parsed.task_complete:
            if self.pending_completion:
                return TurnResult(end_reason="task_complete")
            self.pending_completion = True
            return TurnResult(observation=[_user(CONFIRM_TEMPLATE.format(terminal_output=output))])
        self.pending_completion = False
        text = f"New Terminal Output:\n{output}"
        if parsed.warnings:
            text = "Previous response had warnings:\nWARNINGS: " + parsed.warning_text + "\n\n" + text
        return TurnResult(observation=[_user(text)])

    def _parse_failure(self, parsed: ParsedReply) -> TurnResult:
        self.consecutive_parse_failures += 1
        if at_parse_failure_cap(self.consecutive_parse_failures, self.cfg.limits.max_consecutive_parse_failures):
            return TurnResult(end_reason="parse_failures", parse_failed=True)
        text = parse_error_message(parsed.error, parsed.warning_text)
        return TurnResult(observation=[_user(text)], parse_failed=True)

    async def _run_commands(self, commands: list[Command]) -> tuple[str, float | None]:
        """Send each command, wait its (capped) duration, collect output.

        Returns: (all new output, seconds waited on the last command if it is still running).
        """
        chunks: list[str] = []
        waited_s = 0.0
        for command in commands:
            waited_s = min(max(command.duration_s, 0.0), self.cfg.limits.command_timeout_s)
            self.actions.append(command.keystrokes)
            chunks.append(await self.shell.send_keys(translate_keystrokes(command.keystrokes), waited_s))
        if not commands:
            chunks.append(await self.shell.send_keys("", 0.0))
        busy = await _is_busy(self.shell)
        return "".join(chunks), (waited_s if busy else None)


async def _is_busy(shell: Shell) -> bool:
    """Whether a command sent by the last ``send_keys`` is still running (False when unknown).

    Reads the shell's ``still_running`` flag (set by ``send_keys``), else asks ``is_busy()``.
    """
    flag = getattr(shell, "still_running", None)
    if flag is not None:
        return bool(flag)
    probe = getattr(shell, "is_busy", None)
    return bool(await probe()) if probe is not None else False


def _user(text: str) -> dict:
    return {"role": "user", "content": text}
