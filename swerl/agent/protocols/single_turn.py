"""single-turn: one completion; its first fenced Python block becomes the solution file
(docs/tasks.md, Agent protocols). The cheapest protocol: tiny models and smoke tests."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from swerl.agent.protocols.base import AgentProtocol, TurnResult, strip_thinking

if TYPE_CHECKING:
    from swerl.sandbox.runtime.sandbox import Sandbox

SYSTEM_PROMPT = "You are an expert Python programmer. Answer with a single complete Python code block."
USER_SUFFIX = (
    "\n\nReply with the complete contents of `{path}` in one fenced ```python code block: "
    "the full function (signature included) and every import it needs."
)

_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
# A closed block explicitly tagged python: where an instruction shows the starter code.
_PYTHON_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_python_block(reply: str) -> str | None:
    """Body of the first fenced code block (```python, ```py or bare ```), or None.

    An unclosed final fence (the turn ran out of tokens) counts up to the end of the reply.
    """
    match = _FENCE_RE.search(strip_thinking(reply))
    return match.group(1) if match else None


PREFILL_FENCE = "```python\n"


def prefill_text(instruction: str, mode: str) -> str:
    """The assistant prefill of ``mode`` (``AgentConfig.single_turn_prefill``) for ``instruction``.

    ``none`` -> ""; ``fence`` -> "```python\\n"; ``starter_code`` -> the fence plus the body of
    the instruction's first ```python block (the EvalPlus chat-model prefill), or the fence
    alone when the instruction has no such block. The result always ends with a newline
    (or is empty), so the model continues on a fresh line.
    """
    if mode == "none":
        return ""
    if mode == "starter_code":
        match = _PYTHON_FENCE_RE.search(instruction)
        if match and match.group(1).strip():
            code = match.group(1)
            return PREFILL_FENCE + (code if code.endswith("\n") else code + "\n")
    return PREFILL_FENCE


class SingleTurn(AgentProtocol):
    """Ask once, write the first Python block to ``cfg.solution_path``, stop.

    With ``cfg.single_turn_prefill`` the assistant turn starts with a prefill (see
    :func:`prefill_text`) and the reply passed to :meth:`act` is prefill + completion.
    """

    name = "single-turn"
    # The first closing fence ends the answer (as Codex's stop sequences did): no rambling.
    stop_strings = ("\n```\n",)

    def initial_messages(self, instruction: str) -> list[dict]:
        self.prefill = prefill_text(instruction, self.cfg.single_turn_prefill)
        if self.prefill:
            # Stop strings match generated text only: with the opening fence in the prompt, any
            # ``` the model writes closes the block, even at the very start of the completion.
            self.stop_strings = ("```",)
        user = instruction.strip() + USER_SUFFIX.format(path=self.cfg.solution_path)
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def act(self, reply: str, sandbox: Sandbox) -> TurnResult:
        code = extract_python_block(reply)
        if code is not None:
            self.actions.append(code)
            await sandbox.write_file(self.cfg.solution_path, code.encode("utf-8"))
        return TurnResult(end_reason="completed", parse_failed=code is None)
