"""terminus-json: Harbor's ``terminus-2`` agent (JSON parser) as the seed model knows it.

Each reply is ``{"analysis", "plan", "commands": [{"keystrokes", "duration"}], "task_complete"}``.
The keystrokes go to a real tmux pane (160 x 40, echo on, ``bash --login``) through
:class:`swerl.sandbox.runtime.tmux.TmuxSession`; after each command the full ``duration`` elapses
(capped at ``limits.command_timeout_s``, 60 s as in terminus-2) whether or not it finished.
The next user turn is the pane diff (``New Terminal Output:`` with the echoed prompt line,
or ``Current Terminal Screen:``), limited to ``output_budget_bytes`` (head + tail).

Turn rules, as ``terminus_2.py`` (harbor-framework/main, 2026-05-02) has them:

- an unparsable reply runs nothing and gets ``Previous response had parsing errors: ...``;
  there is no cap on how many come in a row (``limits.max_consecutive_parse_failures``
  adds one when set);
- a parsed reply with warnings gets them in front of the output
  (``Previous response had warnings: ...``), output limited twice as upstream does;
- ``task_complete`` must come twice in a row: the first time the output is embedded in the
  confirmation question (warnings are not shown); any other parsed reply resets it, a
  parse error does not; the confirming reply's commands still run;
- a reply cut at the token limit runs nothing and gets ``ERROR!! NONE of the actions ...``;
- the first prompt shows the real first screen of the pane; the instruction is not stripped;
- when the shell has been exited (the tmux session is gone) the episode ends (``completed``);
- a full context is summarized with ``on_context_full: summarize`` (``swerl.agent.summarize``).

Thinking: with ``reasoning_split`` off (the seed stack: vLLM without a reasoning parser)
the parser reads the whole reply, ``<think>`` block included; with it on, a leading
``<think>...</think>`` is cut off first (LiteLLM's rule when the server sends reasoning
separately). The history keeps the generated tokens either way.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from swerl.agent.protocols.base import AgentProtocol, TurnResult, at_parse_failure_cap, limit_output_bytes
from swerl.agent.protocols.terminus_parser import ParsedReply, parse_terminus_reply
from swerl.agent.protocols.terminus_texts import (
    CONFIRM_TEMPLATE,
    OUTPUT_LIMIT_TEMPLATE,
    PROMPT_TEMPLATE,
    TRUNCATED_WARNINGS_TEMPLATE,
    WARNINGS_TEMPLATE,
    parse_error_message,
)
from swerl.sandbox.runtime.tmux import TmuxSession

if TYPE_CHECKING:
    from swerl.agent.config import AgentConfig
    from swerl.sandbox.runtime.sandbox import Sandbox

_LEADING_REASONING_RE = re.compile(r"<(?:think|thinking|budget:thinking)>(.*?)</(?:think|thinking|budget:thinking)>(.*)",
                                   re.DOTALL)
PANE_WIDTH, PANE_HEIGHT = 160, 40


def split_leading_reasoning(reply: str) -> str:
    """The reply's content once a leading reasoning block is taken out (LiteLLM's
    ``_parse_content_for_reasoning``: anchored at the start, first block only)."""
    match = _LEADING_REASONING_RE.match(reply)
    return match.group(2) if match else reply


class Terminus2(AgentProtocol):
    """The terminus-2 state machine around one tmux session per episode."""

    name = "terminus-json"
    supports_summarization = True

    def __init__(self, cfg: AgentConfig):
        super().__init__(cfg)
        self.session: TmuxSession | None = None
        self.pending_completion = False
        self.consecutive_parse_failures = 0
        self._instruction = ""
        self._first_screen: str | None = None

    def initial_messages(self, instruction: str) -> list[dict]:
        """The first prompt; before :meth:`start` the screen is a stand-in of the usual first
        screen (only used when the sandbox never starts)."""
        self._instruction = instruction
        screen = self._first_screen if self._first_screen is not None else "Current Terminal Screen:\nroot@sandbox:/app#\n"
        text = PROMPT_TEMPLATE.format(
            instruction=instruction, terminal_state=screen, max_wait_s=self.cfg.limits.command_timeout_s
        )
        return [_user(text)]

    async def start(self, sandbox: Sandbox) -> None:
        self.session = TmuxSession(sandbox, width=PANE_WIDTH, height=PANE_HEIGHT)
        await self.session.start()
        self._first_screen = self._limit(await self.session.incremental_output())

    def messages_after_start(self) -> list[dict] | None:
        return self.initial_messages(self._instruction)

    @property
    def instruction(self) -> str:
        """The task instruction as given (terminus-2's ``original_instruction``)."""
        return self._instruction

    async def visible_screen(self) -> str:
        """The pane's visible rows (``tmux capture-pane -p``), as summarization shows them."""
        assert self.session is not None, "start() opens the tmux session"
        return await self.session.capture_pane(entire=False)

    def reply_content(self, reply: str) -> str:
        """What terminus-2 reads of a reply: all of it, or without a leading think block
        when ``reasoning_split``."""
        return split_leading_reasoning(reply) if self.cfg.reasoning_split else reply

    async def act(self, reply: str, sandbox: Sandbox) -> TurnResult:
        parsed = parse_terminus_reply(self.reply_content(reply))
        if parsed.error:
            return self._parse_failure(parsed)
        self.consecutive_parse_failures = 0
        output = await self._run_commands(parsed)
        if output is None:
            return TurnResult(end_reason="completed")
        if parsed.task_complete:
            if self.pending_completion:
                return TurnResult(end_reason="task_complete")
            self.pending_completion = True
            return self._observe(CONFIRM_TEMPLATE.format(terminal_output=output))
        self.pending_completion = False
        if parsed.warnings:
            return self._observe(WARNINGS_TEMPLATE.format(warnings=parsed.warning_text, terminal_output=self._limit(output)))
        return self._observe(self._limit(output))

    async def act_truncated(self, reply: str, sandbox: Sandbox, max_new_tokens: int) -> TurnResult | None:
        """A reply cut at ``max_new_tokens``: nothing runs; the model is told to re-issue it."""
        limit = f"{max_new_tokens} tokens"
        text = OUTPUT_LIMIT_TEMPLATE.format(limit=limit)
        warnings = parse_terminus_reply(self.reply_content(reply)).warning_text
        if warnings:
            text += TRUNCATED_WARNINGS_TEMPLATE.format(warnings=warnings)
        return TurnResult(observation=[_user(text)])

    def _parse_failure(self, parsed: ParsedReply) -> TurnResult:
        self.consecutive_parse_failures += 1
        if at_parse_failure_cap(self.consecutive_parse_failures, self.cfg.limits.max_consecutive_parse_failures):
            return TurnResult(end_reason="parse_failures", parse_failed=True)
        return TurnResult(observation=[_user(parse_error_message(parsed.error, parsed.warning_text))], parse_failed=True)

    async def _run_commands(self, parsed: ParsedReply) -> str | None:
        """Type each command, wait its full (capped) duration; the limited pane diff after
        (None when the tmux session has ended)."""
        assert self.session is not None, "start() opens the tmux session"
        cap_s = self.cfg.limits.command_timeout_s
        for command in parsed.commands:
            self.actions.append(command.keystrokes)
            await self.session.send_keys(command.keystrokes, min_timeout_s=min(command.duration_s, cap_s))
        if not await self.session.is_alive():  # the shell was exited: terminus-2 stops there
            return None
        return self._limit(await self.session.incremental_output())

    def _observe(self, text: str) -> TurnResult:
        return TurnResult(observation=[_user(text)])

    def _limit(self, output: str) -> str:
        return limit_output_bytes(output, self.cfg.output_budget_bytes)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}
